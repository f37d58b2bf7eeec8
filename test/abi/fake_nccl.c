/* SPDX-License-Identifier: Apache-2.0 */
/* A recording fake libnccl.so.2: every entry point of nccl_api.h logs its arguments and answers
 * with the distinctive values of fake_nccl.h, so tests can see what crossed libsymmcoll. */
#include "fake_nccl.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pp.h"

static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static struct fakeCall calls[FAKE_LOG_CALLS];
static int callCount;
static ncclResult_t forcedResult = ncclSuccess;
/* Per entry point results that win over forcedResult (fakeNcclSetResultFor). */
#define FAKE_OVERRIDES 8
static struct {
  char name[48];
  ncclResult_t result;
} overrides[FAKE_OVERRIDES];
static int overrideCount;
static ncclResult_t fakeAsyncError = FAKE_ASYNC_ERROR;
/* Children of split/shrink whose handles are stored only at completion (fakeNcclDeferChildren):
 * where, and what. */
#define FAKE_PENDING_CHILDREN 8
static int deferChildren;
static struct {
  ncclComm_t* where;
  ncclComm_t value;
} pendingChildren[FAKE_PENDING_CHILDREN];
static int pendingChildCount;

SYMM_EXPORT int fakeNcclCallCount(void);
int fakeNcclCallCount(void) {
  pthread_mutex_lock(&logLock);
  int n = callCount;
  pthread_mutex_unlock(&logLock);
  return n;
}

/* Calls live in a ring: the oldest ones are dropped once FAKE_LOG_CALLS were made since. */
SYMM_EXPORT const struct fakeCall* fakeNcclCall(int index);
const struct fakeCall* fakeNcclCall(int index) {
  pthread_mutex_lock(&logLock);
  const struct fakeCall* call = NULL;
  if (index >= 0 && index < callCount && callCount - index <= FAKE_LOG_CALLS)
    call = &calls[index % FAKE_LOG_CALLS];
  pthread_mutex_unlock(&logLock);
  return call;
}

SYMM_EXPORT void fakeNcclSetResult(ncclResult_t result);
void fakeNcclSetResult(ncclResult_t result) {
  pthread_mutex_lock(&logLock);
  forcedResult = result;
  pthread_mutex_unlock(&logLock);
}

SYMM_EXPORT void fakeNcclSetResultFor(const char* name, ncclResult_t result);
void fakeNcclSetResultFor(const char* name, ncclResult_t result) {
  pthread_mutex_lock(&logLock);
  if (name == NULL) {
    overrideCount = 0;
  } else {
    int i = 0;
    while (i < overrideCount && strcmp(overrides[i].name, name) != 0) i++;
    if (i < FAKE_OVERRIDES) {
      snprintf(overrides[i].name, sizeof(overrides[i].name), "%s", name);
      overrides[i].result = result;
      if (i == overrideCount) overrideCount++;
    }
  }
  pthread_mutex_unlock(&logLock);
}

/* As NCCL's group thread does: the children it created are stored, then the state changes. */
SYMM_EXPORT void fakeNcclSetAsyncError(ncclResult_t result);
void fakeNcclSetAsyncError(ncclResult_t result) {
  pthread_mutex_lock(&logLock);
  if (result != ncclInProgress) {
    for (int i = 0; i < pendingChildCount; i++)
      __atomic_store_n(pendingChildren[i].where, pendingChildren[i].value, __ATOMIC_RELEASE);
    pendingChildCount = 0;
  }
  __atomic_store_n(&fakeAsyncError, result, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&logLock);
}

SYMM_EXPORT void fakeNcclDeferChildren(int on);
void fakeNcclDeferChildren(int on) {
  pthread_mutex_lock(&logLock);
  deferChildren = on;
  pthread_mutex_unlock(&logLock);
}

struct ownThreadCall {
  int (*fn)(void);
  int answer;
};

static void* runOwnThreadCall(void* arg) {
  struct ownThreadCall* call = arg;
  call->answer = call->fn();
  return NULL;
}

SYMM_EXPORT int fakeNcclRunOnOwnThread(int (*fn)(void));
int fakeNcclRunOnOwnThread(int (*fn)(void)) {
  struct ownThreadCall call = {.fn = fn, .answer = -1};
  pthread_t thread;
  if (pthread_create(&thread, NULL, runOwnThreadCall, &call) != 0) return -1;
  pthread_join(thread, NULL);
  return call.answer;
}

/* The log lock is held from fakeBegin to fakeEnd: one call is recorded at a time. */
static struct fakeCall* fakeBegin(const char* name) {
  pthread_mutex_lock(&logLock);
  struct fakeCall* call = &calls[callCount % FAKE_LOG_CALLS];
  memset(call, 0, sizeof(*call));
  snprintf(call->name, sizeof(call->name), "%s", name);
  return call;
}

static void fakeEnd(void) {
  callCount++;
  pthread_mutex_unlock(&logLock);
}

static void copyValue(struct fakeValue* v, const char* name, const void* p, size_t size) {
  snprintf(v->name, sizeof(v->name), "%s", name);
  v->size = size;
  memcpy(v->bytes, p, size < sizeof(v->bytes) ? size : sizeof(v->bytes));
}

static void recordArg(struct fakeCall* call, const char* name, const void* p, size_t size) {
  if (call->nargs < FAKE_MAX_ARGS) copyValue(&call->args[call->nargs++], name, p, size);
}

static const struct fakeValue* argNamed(const struct fakeCall* call, const char* name) {
  for (int i = 0; i < call->nargs; i++)
    if (strcmp(call->args[i].name, name) == 0) return &call->args[i];
  return NULL;
}

/* The value of a pointer or integer argument (they are all at most 8 bytes). */
static void* argPtr(const struct fakeCall* call, const char* name) {
  const struct fakeValue* v = argNamed(call, name);
  void* p = NULL;
  if (v != NULL && v->size == sizeof(p)) memcpy(&p, v->bytes, sizeof(p));
  return p;
}

static int argInt(const struct fakeCall* call, const char* name) {
  const struct fakeValue* v = argNamed(call, name);
  int i = 0;
  if (v != NULL && v->size == sizeof(i)) memcpy(&i, v->bytes, sizeof(i));
  return i;
}

/* Writes an out-parameter through the pointer argument `name` (unless NULL) and records it. */
static void writeOutput(struct fakeCall* call, const char* name, size_t offset, const void* value,
                        size_t size) {
  unsigned char* dst = argPtr(call, name);
  if (dst == NULL || call->noutputs >= FAKE_MAX_OUTPUTS) return;
  dst += offset;
  memcpy(dst, value, size);
  struct fakeOutput* out = &call->outputs[call->noutputs++];
  snprintf(out->name, sizeof(out->name), "%s", name);
  out->addr = dst;
  out->size = size;
  memcpy(out->bytes, value, size < sizeof(out->bytes) ? size : sizeof(out->bytes));
}
#define WRITE_OUT(call, name, type, value) \
  do {                                     \
    type v_ = (value);                     \
    writeOutput(call, name, 0, &v_, sizeof(v_)); \
  } while (0)

static int is(const struct fakeCall* call, const char* name) { return strcmp(call->name, name) == 0; }

static const char* errorString(ncclResult_t result) {
  static const char* const strings[] = {
      "fake: success", "fake: unhandled cuda error", "fake: system error", "fake: internal error",
      "fake: invalid argument", "fake: invalid usage", "fake: remote error", "fake: in progress"};
  unsigned r = (unsigned)result;
  return r < sizeof(strings) / sizeof(strings[0]) ? strings[r] : "fake: unknown result";
}

/* The fake's answers: out-parameters and return values for each entry point by name. */
/* A child handle: stored now, or (fakeNcclDeferChildren) NULL now and the handle when the
 * state leaves ncclInProgress, as NCCL 2.28's split does for non-blocking parents. */
static void childOutput(struct fakeCall* call, ncclComm_t child) {
  ncclComm_t* where = argPtr(call, "newcomm");
  if (deferChildren && where != NULL && pendingChildCount < FAKE_PENDING_CHILDREN) {
    pendingChildren[pendingChildCount].where = where;
    pendingChildren[pendingChildCount++].value = child;
    child = NULL;
  }
  WRITE_OUT(call, "newcomm", ncclComm_t, child);
}

static void behave(struct fakeCall* call, enum fakeReturnKind kind, void* ret) {
  if (kind == RET_RESULT) {
    *(ncclResult_t*)ret = forcedResult;
    for (int i = 0; i < overrideCount && i < FAKE_OVERRIDES; i++)
      if (is(call, overrides[i].name)) *(ncclResult_t*)ret = overrides[i].result;
  }
  if (is(call, "ncclGetVersion")) WRITE_OUT(call, "version", int, FAKE_VERSION);
  if (is(call, "ncclGetUniqueId")) {
    ncclUniqueId id;
    for (size_t i = 0; i < sizeof(id.internal); i++) id.internal[i] = (char)(0xa5 ^ i);
    WRITE_OUT(call, "uniqueId", ncclUniqueId, id);
  }
  if (is(call, "ncclGetLastError")) *(const char**)ret = FAKE_LAST_ERROR;
  if (is(call, "ncclGetErrorString")) *(const char**)ret = errorString((ncclResult_t)argInt(call, "result"));
  if (is(call, "ncclCommGetAsyncError")) WRITE_OUT(call, "asyncError", ncclResult_t, fakeAsyncError);
  if (is(call, "ncclCommCount")) WRITE_OUT(call, "count", int, FAKE_COMM_COUNT);
  if (is(call, "ncclCommUserRank")) WRITE_OUT(call, "rank", int, FAKE_COMM_RANK);
  if (is(call, "ncclCommCuDevice")) WRITE_OUT(call, "device", int, FAKE_COMM_DEVICE);
  if (is(call, "ncclRedOpCreatePreMulSum")) WRITE_OUT(call, "op", ncclRedOp_t, FAKE_PREMULSUM_OP);
  if (is(call, "ncclGroupSimulateEnd")) {
    float t = FAKE_SIM_TIME;
    writeOutput(call, "simInfo", offsetof(ncclSimInfo_t, estimatedTime), &t, sizeof(t));
  }
  if (is(call, "ncclDevCommCreate")) WRITE_OUT(call, "outDevComm", unsigned, FAKE_OPAQUE_WORD);
  if (is(call, "ncclLLA2ACreateRequirement") || is(call, "ncclLsaBarrierCreateRequirement") ||
      is(call, "ncclGinBarrierCreateRequirement")) {
    WRITE_OUT(call, "outHandle", unsigned, FAKE_OPAQUE_WORD);
    WRITE_OUT(call, "outReq", unsigned, FAKE_OPAQUE_WORD + 1);
  }
  if (is(call, "ncclTeamWorld")) *(symmNcclTeam_t*)ret = FAKE_TEAM_WORLD;
  if (is(call, "ncclTeamLsa")) *(symmNcclTeam_t*)ret = FAKE_TEAM_LSA;
  if (is(call, "ncclTeamRail")) *(symmNcclTeam_t*)ret = FAKE_TEAM_RAIL;
  if (is(call, "ncclTeamRankToWorld")) *(int*)ret = FAKE_RANK_TO_WORLD(argInt(call, "rank"));
  if (is(call, "ncclTeamRankToLsa")) *(int*)ret = FAKE_RANK_TO_LSA(argInt(call, "rank"));
  if (is(call, "ncclLLA2ACalcSlots"))
    *(int*)ret = FAKE_LLA2A_SLOTS(argInt(call, "maxElts"), argInt(call, "maxEltSize"));
  if (is(call, "ncclMemAlloc")) WRITE_OUT(call, "ptr", void*, FAKE_MEM_ALLOC_PTR);
  if (is(call, "ncclCommRegister")) WRITE_OUT(call, "handle", void*, FAKE_REG_HANDLE);
  if (is(call, "ncclCommWindowRegister")) WRITE_OUT(call, "win", ncclWindow_t, FAKE_WINDOW);
  if (is(call, "ncclCommInitRank")) WRITE_OUT(call, "comm", ncclComm_t, FAKE_COMM_INIT_RANK);
  if (is(call, "ncclCommInitRankConfig")) WRITE_OUT(call, "comm", ncclComm_t, FAKE_COMM_INIT_CONFIG);
  if (is(call, "ncclCommInitRankScalable"))
    WRITE_OUT(call, "newcomm", ncclComm_t, FAKE_COMM_INIT_SCALABLE);
  if (is(call, "ncclCommAbort") || is(call, "ncclCommDestroy")) {
    /* As NCCL joins the thread creating a child before freeing its parent. */
    for (int i = 0; i < pendingChildCount; i++)
      __atomic_store_n(pendingChildren[i].where, pendingChildren[i].value, __ATOMIC_RELEASE);
    pendingChildCount = 0;
  }
  if (is(call, "ncclCommSplit")) childOutput(call, FAKE_COMM_SPLIT);
  if (is(call, "ncclCommShrink")) childOutput(call, FAKE_COMM_SHRINK);
  if (is(call, "ncclCommInitAll")) {
    ncclComm_t* comms = argPtr(call, "comm");
    for (int i = 0; comms != NULL && i < argInt(call, "ndev"); i++) comms[i] = FAKE_COMM_INIT_ALL(i);
  }
}

/* One definition per entry point of the list, plus its pnccl alias. */
#define RECORD_ARG(fakeCall_, x) recordArg(fakeCall_, #x, &(x), sizeof(x));
#define DEFINE_FAKE(ret, name, params, args, fail)                             \
  PP_IF_NONEMPTY((fail))(DEFINE_FAKE_VALUE(ret, name, params, args, fail))   \
  (DEFINE_FAKE_VOID(ret, name, params, args))
#define DEFINE_FAKE_VALUE(ret, name, params, args, fail)                       \
  SYMM_EXPORT ret name params;                                                 \
  ret name params {                                                            \
    ret fakeRet_ = fail;                                                       \
    struct fakeCall* fakeCall_ = fakeBegin(#name);                             \
    PP_FOR_EACH(RECORD_ARG, fakeCall_, PP_UNWRAP args)                         \
    behave(fakeCall_, RETURN_KIND(fakeRet_), &fakeRet_);                       \
    fakeCall_->hasReturn = 1;                                                  \
    copyValue(&fakeCall_->returned, "return", &fakeRet_, sizeof(fakeRet_));    \
    fakeEnd();                                                                 \
    return fakeRet_;                                                           \
  }                                                                            \
  SYMM_PROFILING_ALIAS(ret, name, params)
#define DEFINE_FAKE_VOID(ret, name, params, args)                              \
  SYMM_EXPORT ret name params;                                                 \
  ret name params {                                                            \
    struct fakeCall* fakeCall_ = fakeBegin(#name);                             \
    PP_FOR_EACH(RECORD_ARG, fakeCall_, PP_UNWRAP args)                         \
    behave(fakeCall_, RET_NONE, NULL);                                         \
    fakeEnd();                                                                 \
  }                                                                            \
  SYMM_PROFILING_ALIAS(ret, name, params)

SYMMCOLL_ALL_FUNCS(DEFINE_FAKE)
