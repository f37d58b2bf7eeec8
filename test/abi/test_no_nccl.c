/* SPDX-License-Identifier: Apache-2.0 */
/* Without a usable real NCCL every entry point fails cleanly: ncclSystemError (or the type's
 * failure value), no crash, and exactly one warning, also when many threads call at once.
 * Usage: test_no_nccl <value for SYMMCOLL_NCCL_LIB> <words the warning must contain> */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_nccl.h" /* RETURN_KIND */
#include "harness.h"
#include "pp.h"

#define DECLARE_ENTRY(ret, name, params, args, fail) ret name params;
SYMMCOLL_FORWARDED_FUNCS(DECLARE_ENTRY)
#undef DECLARE_ENTRY

static int entries;

static void checkFailed(const char* name, const void* got, enum fakeReturnKind kind) {
  entries++;
  switch (kind) {
    case RET_RESULT:
      if (*(const ncclResult_t*)got != ncclSystemError) fprintf(stderr, "  %s did not fail\n", name);
      CHECK_EQ_INT(*(const ncclResult_t*)got, ncclSystemError);
      break;
    case RET_STRING: CHECK(*(const char* const*)got != NULL); break;
    case RET_INT: CHECK_EQ_INT(*(const int*)got, -1); break;
    case RET_TEAM: {
      const symmNcclTeam_t* team = got;
      CHECK(team->nRanks == 0 && team->rank == -1);
      break;
    }
    case RET_NONE: CHECK(1); break; /* it returned: that is the test */
  }
}

/* Every entry point of the list, with zeroed arguments (NULL pointers, zero counts). */
#define MEMBER(ctx, decl) decl;
#define PASS_MEMBER(a, x) a.x
#define CALL_ONE(ret, name, params, args, fail) \
  PP_IF_NONEMPTY(args)(CALL_WITH_ARGS(ret, name, params, args))(CALL_NO_ARGS(ret, name, fail))
#define CALL_WITH_ARGS(ret, name, params, args)                      \
  {                                                                  \
    struct { PP_FOR_EACH(MEMBER, ~, PP_UNWRAP params) } a;           \
    memset(&a, 0, sizeof(a));                                        \
    ret got = name(PP_MAP_COMMA(PASS_MEMBER, a, PP_UNWRAP args));    \
    checkFailed(#name, &got, RETURN_KIND(got));                      \
  }
#define CALL_NO_ARGS(ret, name, fail) \
  PP_IF_NONEMPTY((fail))(CALL_NO_ARGS_VALUE(ret, name))(CALL_NO_ARGS_VOID(name))
#define CALL_NO_ARGS_VALUE(ret, name)             \
  {                                               \
    ret got = name();                             \
    checkFailed(#name, &got, RETURN_KIND(got));   \
  }
#define CALL_NO_ARGS_VOID(name)             \
  {                                         \
    name();                                 \
    checkFailed(#name, NULL, RET_NONE);     \
  }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void callAll(void) { SYMMCOLL_ALL_FUNCS(CALL_ONE) }
#pragma GCC diagnostic pop

static void* firstCall(void* arg) {
  int version = 0;
  *(ncclResult_t*)arg = ncclGetVersion(&version);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <SYMMCOLL_NCCL_LIB value> <expected reason>\n", argv[0]);
    return 2;
  }
  /* Knobs are read at first use, so setting them here is as good as the environment. */
  char logPattern[128], logPath[128];
  snprintf(logPattern, sizeof(logPattern), "%s/symmcoll-no-nccl.%%p.log", P_tmpdir);
  snprintf(logPath, sizeof(logPath), "%s/symmcoll-no-nccl.%d.log", P_tmpdir, (int)getpid());
  unlink(logPath);
  setenv("SYMMCOLL_NCCL_LIB", argv[1], 1);
  setenv("SYMMCOLL_DEBUG_FILE", logPattern, 1);
  setenv("SYMMCOLL_DEBUG", "WARN", 1);
  /* SYMMCOLL_DISABLE comes from the test's environment (one case sets it): knobs other than the
   * logging ones are read once per process. */

  /* Many threads race to load: still one attempt, one warning. */
  enum { THREADS = 8 };
  pthread_t threads[THREADS];
  ncclResult_t results[THREADS];
  for (int i = 0; i < THREADS; i++) CHECK_EQ_INT(pthread_create(&threads[i], NULL, firstCall, &results[i]), 0);
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    CHECK_EQ_INT(results[i], ncclSystemError);
  }

  callAll();
  /* Once more after ncclResetDebugInit (it reopens our log; the real NCCL's would be reset). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  callAll();
#define COUNT_ENTRY(ret, name, params, args, fail) +1
  CHECK_EQ_INT(entries, 2 * (0 SYMMCOLL_ALL_FUNCS(COUNT_ENTRY)));

  /* A readable reason, once. ncclResetDebugInit reopened the log file: both parts count. */
  FILE* log = fopen(logPath, "r");
  CHECK(log != NULL);
  int warnings = 0, mentions = 0;
  char line[2048];
  while (log != NULL && fgets(line, sizeof(line), log) != NULL) {
    if (strstr(line, " SYMMCOLL WARN ") == NULL) continue;
    warnings++;
    fprintf(stderr, "log: %s", line);
    if (strstr(line, "SYMMCOLL_NCCL_LIB") != NULL && strstr(line, "ncclSystemError") != NULL &&
        strstr(line, argv[2]) != NULL)
      mentions++;
  }
  if (log != NULL) fclose(log);
  unlink(logPath);
  CHECK_EQ_INT(warnings, 1);
  CHECK_EQ_INT(mentions, 1);
  printf("test_no_nccl (SYMMCOLL_NCCL_LIB=%s): %d entry points failed cleanly twice\n", argv[1],
         entries / 2);
  return harnessReport("test_no_nccl");
}
