/* SPDX-License-Identifier: Apache-2.0 */
/* Forwarding: every entry point of the symbol list reaches the recording fake NCCL through
 * libsymmcoll with its arguments intact, and return values and out-parameters come back.
 * Usage: test_forward <fake libnccl.so.2> <libsymmcoll.so> relink|preload|loaded
 *   relink:  this binary links libsymmcoll; run with SYMMCOLL_NCCL_LIB=<fake>.
 *   preload: this binary links the fake; run with LD_PRELOAD=<libsymmcoll>.
 *   loaded:  this binary links libsymmcoll and first dlopens the fake with RTLD_LOCAL, as PyTorch
 *            loads its NCCL; libsymmcoll must find it among the loaded objects.
 * With SYMMCOLL_DISABLE=1 each call must reach the fake exactly once and nothing else, but for
 * creations, groups and ncclCommGetAsyncError, which still take part in setup. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include "fake_nccl.h"
#include "harness.h"
#include "pp.h"

/* nccl.h does not declare the device-API host functions for C; nccl_api.h's list does. */
#define DECLARE_ENTRY(ret, name, params, args, fail) ret name params;
SYMMCOLL_FORWARDED_FUNCS(DECLARE_ENTRY)
#undef DECLARE_ENTRY

static fakeNcclCallCountFn fakeCount;
static fakeNcclCallFn fakeCallAt;
static fakeNcclSetResultFn fakeSetResult;
static int disabled;
static ncclResult_t expectedResult = ncclSuccess;
static int sweptEntries;

/* ---- Distinctive, valid arguments by type ------------------------------------------------- */

/* Every pointer argument points at its own zeroed slot: out-parameters land there, and
 * libsymmcoll may read what it needs (a config, the handle a creation call returned). */
#define ARENA_SLOTS 64
static unsigned char arena[ARENA_SLOTS][2048] __attribute__((aligned(64)));
static int arenaNext;

enum genKind { GEN_POINTER, GEN_INT, GEN_SIZE, GEN_DTYPE, GEN_OP, GEN_RESIDENCE, GEN_RESULT, GEN_ID,
               GEN_TEAM };

static void genValue(enum genKind kind, void* dst, size_t size, int position) {
  switch (kind) {
    case GEN_POINTER: {
      void* slot = arena[arenaNext++ % ARENA_SLOTS];
      memset(slot, 0, sizeof(arena[0]));
      CHECK_EQ_INT(size, sizeof(slot));
      memcpy(dst, &slot, sizeof(slot));
      break;
    }
    case GEN_INT: { int v = 2 + position; memcpy(dst, &v, sizeof(v)); break; }
    case GEN_SIZE: { size_t v = 1000003 + 10 * (size_t)position; memcpy(dst, &v, sizeof(v)); break; }
    case GEN_DTYPE: { ncclDataType_t v = ncclBfloat16; memcpy(dst, &v, sizeof(v)); break; }
    case GEN_OP: { ncclRedOp_t v = ncclMax; memcpy(dst, &v, sizeof(v)); break; }
    case GEN_RESIDENCE: { ncclScalarResidence_t v = ncclScalarHostImmediate; memcpy(dst, &v, sizeof(v)); break; }
    case GEN_RESULT: { ncclResult_t v = ncclInvalidUsage; memcpy(dst, &v, sizeof(v)); break; }
    case GEN_ID: {
      ncclUniqueId id;
      for (size_t i = 0; i < sizeof(id.internal); i++) id.internal[i] = (char)(i * 7 + 1);
      memcpy(dst, &id, sizeof(id));
      break;
    }
    case GEN_TEAM: { symmNcclTeam_t t = {6, 4, 2}; memcpy(dst, &t, sizeof(t)); break; }
  }
}

#define GEN_KIND(x)                                                                             \
  _Generic((x), int: GEN_INT, size_t: GEN_SIZE, ncclDataType_t: GEN_DTYPE, ncclRedOp_t: GEN_OP, \
           ncclScalarResidence_t: GEN_RESIDENCE, ncclResult_t: GEN_RESULT, ncclUniqueId: GEN_ID,  \
           symmNcclTeam_t: GEN_TEAM, default: GEN_POINTER)

/* ---- Finding the user's call in the fake's log -------------------------------------------- */

struct argRef {
  const char* name;
  const void* value;
  size_t size;
};

static int argsMatch(const struct fakeCall* rec, const struct argRef* refs, int n, int verbose) {
  if (rec->nargs != n) {
    if (verbose) fprintf(stderr, "  %s: the fake got %d arguments, we passed %d\n", rec->name, rec->nargs, n);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    const struct fakeValue* got = &rec->args[i];
    if (strcmp(got->name, refs[i].name) != 0 || got->size != refs[i].size ||
        memcmp(got->bytes, refs[i].value, refs[i].size < FAKE_VALUE_BYTES ? refs[i].size : FAKE_VALUE_BYTES) != 0) {
      if (verbose) fprintf(stderr, "  %s: argument %s differs\n", rec->name, refs[i].name);
      return 0;
    }
  }
  return 1;
}

/* The fake's record of our call `name(refs)` made since log index `mark`, or NULL. */
static const struct fakeCall* findCall(int mark, const char* name, const struct argRef* refs, int n) {
  const struct fakeCall* sameName = NULL;
  for (int i = mark; i < fakeCount(); i++) {
    const struct fakeCall* rec = fakeCallAt(i);
    if (rec == NULL || strcmp(rec->name, name) != 0) continue;
    if (argsMatch(rec, refs, n, 0)) return rec;
    sameName = rec;
  }
  if (sameName != NULL) argsMatch(sameName, refs, n, 1);
  else fprintf(stderr, "  %s never reached the fake\n", name);
  return NULL;
}

/* How many calls reached the fake since `mark` with this name (and this comm, when non-NULL). */
static int countCalls(int mark, const char* name, ncclComm_t comm) {
  int n = 0;
  for (int i = mark; i < fakeCount(); i++) {
    const struct fakeCall* rec = fakeCallAt(i);
    if (rec == NULL || strcmp(rec->name, name) != 0) continue;
    ncclComm_t recComm = NULL;
    if (comm != NULL && rec->nargs > 0 && strcmp(rec->args[0].name, "comm") == 0)
      memcpy(&recComm, rec->args[0].bytes, sizeof(recComm));
    if (comm == NULL || recComm == comm) n++;
  }
  return n;
}

/* Entry points that SYMMCOLL_DISABLE does not make pure forwarders: a disabled rank still takes
 * part in each communicator's setup (so that every rank forwards), which creations, group ends
 * and the readiness query run. */
static int takesPartInSetup(const char* name) {
  static const char* const names[] = {
      "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitRankScalable", "ncclCommInitAll",
      "ncclCommSplit", "ncclCommShrink", "ncclGroupStart", "ncclGroupEnd", "ncclGroupSimulateEnd",
      "ncclCommGetAsyncError"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(name, names[i]) == 0) return 1;
  return 0;
}

/* Checks one swept call: it reached the fake with our arguments, exactly once when disabled
 * (but for the entry points above), and what the fake returned and wrote is what we see. */
static void sweepCheck(const char* name, int mark, const struct argRef* refs, int n,
                       const void* got, size_t gotSize, enum fakeReturnKind kind) {
  sweptEntries++;
  int made = fakeCount() - mark;
  const int alone = disabled && !takesPartInSetup(name);
  if (alone && made != 1) fprintf(stderr, "  %s: %d calls reached the fake, want 1\n", name, made);
  CHECK(alone ? made == 1 : made >= 1);
  const struct fakeCall* rec = findCall(mark, name, refs, n);
  CHECK(rec != NULL);
  if (rec == NULL) return;
  CHECK_EQ_INT(rec->hasReturn, kind != RET_NONE);
  if (kind != RET_NONE) {
    int same = rec->returned.size == gotSize && memcmp(rec->returned.bytes, got, gotSize) == 0;
    if (!same) fprintf(stderr, "  %s: the return value changed on its way back\n", name);
    CHECK(same);
  }
  if (kind == RET_RESULT) CHECK_EQ_INT(*(const ncclResult_t*)got, expectedResult);
  for (int i = 0; i < rec->noutputs; i++) {
    const struct fakeOutput* out = &rec->outputs[i];
    int inArena = (unsigned char*)out->addr >= &arena[0][0] &&
                  (unsigned char*)out->addr < (unsigned char*)arena + sizeof(arena);
    int same = inArena && memcmp(out->addr, out->bytes, out->size) == 0;
    if (!same) fprintf(stderr, "  %s: out-parameter %s did not come back\n", name, out->name);
    CHECK(same);
  }
}

/* ---- The sweep: one call of every entry point in the list --------------------------------- */

#define MEMBER(ctx, decl) decl;
#define GEN_MEMBER(a, x) genValue(GEN_KIND(a.x), (void*)&a.x, sizeof(a.x), position++);
#define PASS_MEMBER(a, x) a.x
#define REF_MEMBER(a, x) {#x, (const void*)&a.x, sizeof(a.x)}

#define SWEEP_ONE(ret, name, params, args, fail) \
  PP_IF_NONEMPTY(args)(SWEEP_WITH_ARGS(ret, name, params, args))(SWEEP_NO_ARGS(ret, name, fail))

/* Every entry point that takes arguments returns a value. */
#define SWEEP_WITH_ARGS(ret, name, params, args)                                       \
  {                                                                                    \
    struct { PP_FOR_EACH(MEMBER, ~, PP_UNWRAP params) } a;                             \
    int position = 0;                                                                  \
    memset(&a, 0, sizeof(a));                                                          \
    PP_FOR_EACH(GEN_MEMBER, a, PP_UNWRAP args)                                         \
    const struct argRef refs[] = {PP_MAP_COMMA(REF_MEMBER, a, PP_UNWRAP args)};        \
    int mark = fakeCount();                                                            \
    ret got = name(PP_MAP_COMMA(PASS_MEMBER, a, PP_UNWRAP args));                      \
    sweepCheck(#name, mark, refs, (int)(sizeof(refs) / sizeof(refs[0])), &got, sizeof(got), \
               RETURN_KIND(got));                                                      \
  }

#define SWEEP_NO_ARGS(ret, name, fail) \
  PP_IF_NONEMPTY((fail))(SWEEP_NO_ARGS_VALUE(ret, name))(SWEEP_NO_ARGS_VOID(name))
#define SWEEP_NO_ARGS_VALUE(ret, name)                                 \
  {                                                                    \
    int mark = fakeCount();                                            \
    ret got = name();                                                  \
    sweepCheck(#name, mark, NULL, 0, &got, sizeof(got), RETURN_KIND(got)); \
  }
#define SWEEP_NO_ARGS_VOID(name)                         \
  {                                                      \
    int mark = fakeCount();                              \
    name();                                              \
    sweepCheck(#name, mark, NULL, 0, NULL, 0, RET_NONE); \
  }

/* The list includes ncclResetDebugInit, which nccl.h marks deprecated: it must forward all the same. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void sweepAll(void) { SYMMCOLL_ALL_FUNCS(SWEEP_ONE) }
#pragma GCC diagnostic pop

/* ---- Explicit values, and what the interception around creation calls does ---------------- */

static void checkValues(void) {
  int version = 0;
  CHECK_EQ_INT(ncclGetVersion(&version), ncclSuccess);
  CHECK_EQ_INT(version, FAKE_VERSION);
  CHECK_EQ_STR(ncclGetErrorString(ncclInvalidArgument), "fake: invalid argument");
  CHECK_EQ_STR(ncclGetLastError((ncclComm_t)arena[1]), FAKE_LAST_ERROR);

  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  CHECK_EQ_INT((unsigned char)id.internal[5], 0xa5 ^ 5);

  int mark = fakeCount();
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, 4, id, 2), ncclSuccess);
  CHECK(comm == FAKE_COMM_INIT_RANK);
  /* Ours reads rank, size and device of a new communicator, also disabled (its setup record
   * says "disabled" to the other ranks). */
  int followUps = countCalls(mark, "ncclCommUserRank", comm) + countCalls(mark, "ncclCommCount", comm) +
                  countCalls(mark, "ncclCommCuDevice", comm);
  CHECK_EQ_INT(followUps, 3);

  int count = 0, rank = 0, device = 0;
  CHECK_EQ_INT(ncclCommCount(comm, &count), ncclSuccess);
  CHECK_EQ_INT(ncclCommUserRank(comm, &rank), ncclSuccess);
  CHECK_EQ_INT(ncclCommCuDevice(comm, &device), ncclSuccess);
  CHECK_EQ_INT(count, FAKE_COMM_COUNT);
  CHECK_EQ_INT(rank, FAKE_COMM_RANK);
  CHECK_EQ_INT(device, FAKE_COMM_DEVICE);
  ncclResult_t async = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  CHECK_EQ_INT(async, FAKE_ASYNC_ERROR);

  /* A communicator created inside a group is set up at the outermost ncclGroupEnd. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t grouped = NULL;
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclCommInitRankConfig(&grouped, 4, id, 1, &config), ncclSuccess);
  CHECK(grouped == FAKE_COMM_INIT_CONFIG);
  int beforeEnd = countCalls(mark, "ncclCommUserRank", grouped);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(beforeEnd, 0);
  CHECK_EQ_INT(countCalls(mark, "ncclCommUserRank", grouped), 1);

  ncclComm_t all[3] = {NULL, NULL, NULL};
  const int devs[3] = {0, 1, 2};
  CHECK_EQ_INT(ncclCommInitAll(all, 3, devs), ncclSuccess);
  for (int i = 0; i < 3; i++) CHECK(all[i] == FAKE_COMM_INIT_ALL(i));
  ncclComm_t split = NULL, shrunk = NULL, scalable = NULL;
  CHECK_EQ_INT(ncclCommSplit(comm, 1, 0, &split, NULL), ncclSuccess);
  CHECK(split == FAKE_COMM_SPLIT);
  int exclude[1] = {0};
  CHECK_EQ_INT(ncclCommShrink(comm, exclude, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT), ncclSuccess);
  CHECK(shrunk == FAKE_COMM_SHRINK);
  CHECK_EQ_INT(ncclCommInitRankScalable(&scalable, 4, 0, 1, &id, NULL), ncclSuccess);
  CHECK(scalable == FAKE_COMM_INIT_SCALABLE);

  void* mem = NULL;
  CHECK_EQ_INT(ncclMemAlloc(&mem, 4096), ncclSuccess);
  CHECK(mem == FAKE_MEM_ALLOC_PTR);
  /* A NULL ptr is the real NCCL's to answer (its cudaMalloc fallback refuses it). */
  const int beforeNull = fakeCount();
  CHECK_EQ_INT(ncclMemAlloc(NULL, 4096), ncclSuccess); /* the fake's answer */
  CHECK_EQ_INT(countCalls(beforeNull, "ncclMemAlloc", NULL), 1);
  void* handle = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, mem, 4096, &handle), ncclSuccess);
  CHECK(handle == FAKE_REG_HANDLE);
  ncclWindow_t win = NULL;
  CHECK_EQ_INT(ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  CHECK(win == FAKE_WINDOW);
  ncclRedOp_t op = ncclSum;
  double scalar = 0.5;
  CHECK_EQ_INT(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, comm),
               ncclSuccess);
  CHECK_EQ_INT(op, FAKE_PREMULSUM_OP);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  CHECK_EQ_INT(ncclGroupSimulateEnd(&sim), ncclSuccess);
  CHECK(sim.estimatedTime == FAKE_SIM_TIME);

  symmNcclTeam_t world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
  symmNcclTeam_t wantWorld = FAKE_TEAM_WORLD, wantLsa = FAKE_TEAM_LSA, wantRail = FAKE_TEAM_RAIL;
  CHECK(memcmp(&world, &wantWorld, sizeof(world)) == 0);
  CHECK(memcmp(&lsa, &wantLsa, sizeof(lsa)) == 0);
  CHECK(memcmp(&rail, &wantRail, sizeof(rail)) == 0);
  CHECK_EQ_INT(ncclTeamRankToWorld(comm, lsa, 1), FAKE_RANK_TO_WORLD(1));
  CHECK_EQ_INT(ncclTeamRankToLsa(comm, world, 2), FAKE_RANK_TO_LSA(2));
  CHECK_EQ_INT(ncclLLA2ACalcSlots(100, 8), FAKE_LLA2A_SLOTS(100, 8));

  /* A collective with everything distinctive, through its profiling alias too. */
  cudaStream_t stream = (cudaStream_t)arena[2];
  const struct argRef refs[] = {
      {"sendbuff", &(const void*){arena[3]}, sizeof(void*)}, {"recvbuff", &(void*){arena[4]}, sizeof(void*)},
      {"count", &(size_t){12345}, sizeof(size_t)},           {"datatype", &(ncclDataType_t){ncclFloat16}, sizeof(ncclDataType_t)},
      {"op", &(ncclRedOp_t){ncclMin}, sizeof(ncclRedOp_t)},  {"comm", &comm, sizeof(comm)},
      {"stream", &stream, sizeof(stream)}};
  int before = fakeCount();
  CHECK_EQ_INT(pncclAllReduce(arena[3], arena[4], 12345, ncclFloat16, ncclMin, comm, stream), ncclSuccess);
  CHECK(findCall(before, "ncclAllReduce", refs, 7) != NULL);

  /* Destroy and abort forward too (ours drops its side-table entry first). */
  mark = fakeCount();
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_EQ_INT(ncclCommAbort(grouped), ncclSuccess);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(ncclCommDestroy(all[i]), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(split), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(shrunk), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(scalable), ncclSuccess);
  CHECK_EQ_INT(countCalls(mark, "ncclCommDestroy", NULL), 7);
  CHECK_EQ_INT(countCalls(mark, "ncclCommAbort", grouped), 1);
}

/* ---- Setup: the right objects are in the process ------------------------------------------ */

static int sameFile(const char* a, const char* b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a, ra) != NULL && realpath(b, rb) != NULL && strcmp(ra, rb) == 0;
}

/* The object that the process's first definition of `symbol` lives in. */
static const char* definingObject(const char* symbol) {
  Dl_info info;
  void* fn = dlsym(RTLD_DEFAULT, symbol);
  if (fn == NULL || dladdr(fn, &info) == 0) return "(none)";
  return info.dli_fname;
}

int main(int argc, char** argv) {
  if (argc != 4 || (strcmp(argv[3], "relink") != 0 && strcmp(argv[3], "preload") != 0 &&
                    strcmp(argv[3], "loaded") != 0)) {
    fprintf(stderr, "usage: %s <fake libnccl.so.2> <libsymmcoll.so> relink|preload|loaded\n", argv[0]);
    return 2;
  }
  const char *fakePath = argv[1], *symmPath = argv[2], *mode = argv[3];
  void* privateNccl = NULL;
  if (strcmp(mode, "loaded") == 0) {
    privateNccl = dlopen(fakePath, RTLD_NOW | RTLD_LOCAL);
    CHECK(privateNccl != NULL);
    if (privateNccl == NULL) {
      fprintf(stderr, "dlopen(%s): %s\n", fakePath, dlerror());
      return harnessReport("test_forward");
    }
  }
  const char* disable = getenv("SYMMCOLL_DISABLE");
  disabled = disable != NULL && strcmp(disable, "1") == 0;
  /* The sweep's zeroed configs ask for non-blocking communicators, set up by a background job
   * whose calls would land in other entry points' counts: blocking ones set up inside the
   * creating call (NCCL_COMM_BLOCKING wins over the config, as in NCCL). */
  if (disabled) setenv("NCCL_COMM_BLOCKING", "1", 1);

  /* The application's NCCL calls must land in libsymmcoll, or this test proves nothing. */
  const char* owner = definingObject("ncclAllReduce");
  if (!sameFile(owner, symmPath)) {
    fprintf(stderr, "ncclAllReduce resolves to %s, not libsymmcoll (%s): is %s set?\n", owner,
            symmPath, strcmp(mode, "preload") == 0 ? "LD_PRELOAD" : "the link");
    CHECK(0);
    return harnessReport("test_forward");
  }
  int version = 0;
  (void)ncclGetVersion(&version); /* loads the real (fake) NCCL in relink mode */
  void* fake = dlopen(fakePath, RTLD_NOW | RTLD_NOLOAD);
  if (fake == NULL) {
    fprintf(stderr, "the fake NCCL %s is not loaded: libsymmcoll did not find it\n", fakePath);
    CHECK(0);
    return harnessReport("test_forward");
  }
  *(void**)&fakeCount = dlsym(fake, "fakeNcclCallCount");
  *(void**)&fakeCallAt = dlsym(fake, "fakeNcclCall");
  *(void**)&fakeSetResult = dlsym(fake, "fakeNcclSetResult");
  CHECK(fakeCount != NULL && fakeCallAt != NULL && fakeSetResult != NULL);
  if (fakeCount == NULL || fakeCallAt == NULL || fakeSetResult == NULL) return harnessReport("test_forward");
  CHECK_EQ_INT(version, FAKE_VERSION);

  checkValues();
  sweepAll();
  int perSweep = sweptEntries;
  /* Error results come back unchanged too (and ours adds nothing on failed creations). */
  expectedResult = ncclInvalidUsage;
  fakeSetResult(ncclInvalidUsage);
  sweepAll();
  fakeSetResult(ncclSuccess);
#define COUNT_ENTRY(ret, name, params, args, fail) +1
  CHECK_EQ_INT(perSweep, 0 SYMMCOLL_ALL_FUNCS(COUNT_ENTRY));
  CHECK_EQ_INT(sweptEntries, 2 * perSweep);

  printf("test_forward (%s%s): %d entry points swept twice, the fake saw %d calls\n", mode,
         disabled ? ", SYMMCOLL_DISABLE=1" : "", perSweep, fakeCount());
  dlclose(fake);
  if (privateNccl != NULL) dlclose(privateNccl);
  return harnessReport("test_forward");
}
