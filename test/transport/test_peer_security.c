/* SPDX-License-Identifier: Apache-2.0 */
/* GPU test of the handle exchange's security (a non-member process and a squatter of a socket
 * name, with a white-box spy on the setup exchange) and of the multicast guard (never a multicast
 * object where the variables forbid it). Usage: test_peer_security nonmember|squat|mcguard. */
#include "peer_common.h"

/* ---- security: non-members and squatters (two processes, white-box spy on the exchange) -- */

/* The spy wraps the real ncclAllGather this process's libsymmcoll calls during setup: it reads
 * rank 0's secret from the exchanged records (as only members can) and acts at a chosen stage. */
static ncclResult_t (*realAllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                     cudaStream_t);
static int spyMode; /* 1 non-member attack, 2 squat */
static int spyRank;
static int spyExchanges;
static struct symmPeerRecord spyRecords[2];
static int spyHaveRecords;
static int squatFd = -1;
static int attackStatus = -1; /* attacker's exit status */

static void fillRendezvous(struct symmFdRendezvous* rv, int asRank) {
  memset(rv, 0, sizeof(*rv));
  memcpy(rv->secret, spyRecords[0].secret, sizeof(rv->secret));
  rv->tag = SYMM_TAG_STAGING;
  rv->rank = asRank;
  rv->nranks = 2;
  rv->pids[0] = spyRecords[0].pid;
  rv->pids[1] = spyRecords[1].pid;
  rv->uid = spyRecords[0].uid;
  rv->timeoutMs = 3000;
}

/* Connects to rank `target`'s handle server as a stranger; 1 if a descriptor came back. */
static int rawAttempt(int target, int* connected) {
  struct symmFdRendezvous rv;
  fillRendezvous(&rv, 1 - target);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  int len = symmFdSocketName(&rv, target, addr.sun_path + 1, sizeof(addr.sun_path) - 1);
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  *connected = s >= 0 && connect(s, (struct sockaddr*)&addr, alen) == 0;
  int gotFd = 0;
  if (*connected) {
    /* A request that copies the member's layout is not known here: send the secret's halves
     * and a rank, the most a stranger who learned the name could try. */
    (void)send(s, rv.secret, sizeof(rv.secret), MSG_NOSIGNAL);
    char buf[256];
    char cbuf[CMSG_SPACE(sizeof(int) * 4)];
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof(cbuf)};
    struct timeval tv = {3, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (recvmsg(s, &msg, MSG_CMSG_CLOEXEC) >= 0)
      for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) gotFd = 1;
  }
  if (s >= 0) close(s);
  return gotFd;
}

/* The non-member process: exit bits 1 = raw connection got a descriptor, 2 = the proper client
 * protocol got one, 4 = could not even connect (name derivation wrong: the test would be void),
 * 8 = same as 1|2 after dropping to another uid (only when started as root). */
static void attacker(int target) {
  int status = 0, connected = 0;
  if (rawAttempt(target, &connected)) status |= 1;
  if (!connected) status |= 4;
  struct symmFdRendezvous rv;
  fillRendezvous(&rv, 1 - target);
  int fd = -1;
  if (symmFdFetch(&rv, target, &fd) == ncclSuccess) {
    status |= 2;
    close(fd);
  }
  if (geteuid() == 0 && setgid(65534) == 0 && setuid(65534) == 0) {
    if (rawAttempt(target, &connected)) status |= 8;
    fillRendezvous(&rv, 1 - target);
    rv.uid = (uint32_t)getuid();
    if (symmFdFetch(&rv, target, &fd) == ncclSuccess) {
      status |= 8;
      close(fd);
    }
  }
  _exit(status);
}

static ncclResult_t spyAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                                 ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res = realAllGather(send, recv, count, type, comm, stream);
  if (res != ncclSuccess) return res;
  int exchange = spyExchanges++;
  if (count == sizeof(struct symmPeerRecord) && !spyHaveRecords) {
    /* Stage 1 (records): every member learns the secret here. */
    if (cudaStreamSynchronize(stream) != cudaSuccess ||
        cudaMemcpy(spyRecords, recv, sizeof(spyRecords), cudaMemcpyDeviceToHost) != cudaSuccess)
      return ncclUnhandledCudaError;
    spyHaveRecords = 1;
    if (spyMode == 2 && spyRank == 0) {
      /* Take rank 1's socket name before it binds (it cannot pass stage 2 without us). */
      struct symmFdRendezvous rv;
      fillRendezvous(&rv, 0);
      struct sockaddr_un addr;
      memset(&addr, 0, sizeof(addr));
      addr.sun_family = AF_UNIX;
      int len = symmFdSocketName(&rv, 1, addr.sun_path + 1, sizeof(addr.sun_path) - 1);
      socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
      squatFd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
      if (squatFd < 0 || bind(squatFd, (struct sockaddr*)&addr, alen) != 0 || listen(squatFd, 4) != 0) {
        fprintf(stderr, "squatter: cannot take the name: %s\n", strerror(errno));
        CHECK(!"squatter could not bind");
      }
    }
    return ncclSuccess;
  }
  /* Exchanges after the records: 1 = access masks, 2 = "built" agreement (servers listening). */
  if (spyMode == 1 && spyRank == 0 && spyHaveRecords && exchange == 2 && attackStatus < 0) {
    if (cudaStreamSynchronize(stream) != cudaSuccess) return ncclUnhandledCudaError;
    pid_t pid = fork();
    if (pid == 0) attacker(1);
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
      attackStatus = WEXITSTATUS(status);
    else
      attackStatus = 255;
  }
  return ncclSuccess;
}

static void securityBody(struct rankCtx* local, int n, void* arg) {
  /* The communicator was created with the spy in place (installed before InitRank). */
  struct rankCtx* c = local;
  struct symmComm* e = symmCommFind(c->comm);
  CHECK(e != NULL);
  const struct symmPeers* peers = e ? symmTransportPeers(e) : NULL;
  CHECK(spyHaveRecords);
  if (spyMode == 1) {
    /* The stranger got nothing, reached the real socket, and the members still set up. */
    if (c->rank == 0) {
      printf("non-member attacker exit status %d\n", attackStatus);
      CHECK(attackStatus >= 0);
      CHECK_EQ_INT(attackStatus & (1 | 2 | 8), 0);
      CHECK_EQ_INT(attackStatus & 4, 0);
    }
    CHECK(peers != NULL);
  } else {
    /* Squatted name: fail closed on every rank, communicator forwards and still works. */
    CHECK(peers == NULL);
    if (c->rank == 0 && squatFd >= 0) close(squatFd);
    int* d = NULL;
    int host = 0;
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaMalloc((void**)&d, sizeof(int)));
    int v = c->rank + 5;
    CUDA_OK(cudaMemcpy(d, &v, sizeof(int), cudaMemcpyHostToDevice));
    CHECK_EQ_INT(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c->comm, s), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(&host, d, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(host, 5 + 6);
    CUDA_OK(cudaFree(d));
    CUDA_OK(cudaStreamDestroy(s));
    if (c->rank == 1) {
      /* Rank 1's own log must name the problem. */
      fflush(stderr);
      char* log = (char*)arg;
      FILE* f = fopen(log, "r");
      char line[1024];
      int named = 0;
      while (f && fgets(line, sizeof(line), f)) named |= strstr(line, "already taken") != NULL;
      if (f) fclose(f);
      CHECK(named);
    }
  }
}

/* Runs in each rank process before its communicator exists. */
static char squatLog[256];
static void installSpy(int rank) {
  spyRank = rank;
  if (symmRealLoad() != ncclSuccess) return;
  realAllGather = symmReal.ncclAllGather;
  symmReal.ncclAllGather = spyAllGather;
  if (spyMode == 2 && rank == 1) {
    /* Keep this rank's log to look for the WARN line: libsymmcoll logs to stdout, as NCCL. */
    int fd = open(squatLog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      fflush(stdout);
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
  }
}

/* Every rank's handle server is gone once its communicator is. */
static void noSocketsLeft(int rank) {
  (void)rank;
  CHECK_EQ_INT(ourSocketsLeft(), 0);
}

/* runProcesses with the spy in before ncclCommInitRank. */
static void runSecurity(int mode) {
  spyMode = mode;
  snprintf(squatLog, sizeof(squatLog), "/tmp/symmcoll-squat-%d.log", (int)getpid());
  beforeRankInit = installSpy;
  afterRankDestroy = noSocketsLeft;
  ranksExitClean = 0;
  runProcesses(securityBody, squatLog);
  if (mode == 2) {
    /* Show what rank 1 logged (its check failures too), then clean up. */
    FILE* f = fopen(squatLog, "r");
    char line[1024];
    while (f && fgets(line, sizeof(line), f)) fprintf(stderr, "rank 1 logged: %s", line);
    if (f) fclose(f);
    unlink(squatLog);
  }
}

/* ---- multicast guard --------------------------------------------------------------------- */

static void mcGuardBody(struct rankCtx* local, int n, void* arg) {
  struct rankCtx* c = local;
  c->entry = symmCommFind(c->comm);
  const struct symmPeers* p = c->entry ? symmTransportPeers(c->entry) : NULL;
  TCHECK(p != NULL); /* eligible, so only the guard can keep multicast off */
  TCHECK_EQ_INT(symmTransportMulticastReady(c->entry), 0);
  TCHECK(p == NULL || p->multicastBuffer == NULL);
  TCHECK_EQ_INT(symmTransportMulticastAttempts(), 0);
}

/* Each kill switch alone keeps the device-level decision at "no", in a child that only QUERIES
 * (forked before this process touched CUDA, so the child's driver calls are real ones;
 * symmMulticastUsable reads the environment first, then at most a device attribute) and never
 * creates a communicator or a multicast object, so no variable is ever missing where anything
 * could be created. The decision with all three set is checked in this process too. */
static void mcGuardEachAlone(void) {
  static const char* const vars[][2] = {{"NCCL_NVLS_ENABLE", "0"},
                                        {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
                                        {"NVSHMEM_DISABLE_NVLS", "1"}};
  for (int d = 0; d < ndev; d++) CHECK_EQ_INT(symmMulticastUsable(d), 0);
  for (int v = 0; v < 3; v++) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int k = 0; k < 3; k++)
        if (k != v) unsetenv(vars[k][0]);
      setenv(vars[v][0], vars[v][1], 1);
      symmParamResetAll();
      int bad = symmMulticastEnvAllows() != 0;
      for (int d = 0; d < ndev; d++) bad |= symmMulticastUsable(d) != 0;
      bad |= symmMulticastAttempts() != 0;
      _exit(bad ? 1 : 0);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      fprintf(stderr, "%s=%s alone did not keep multicast off\n", vars[v][0], vars[v][1]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

/* ---- main -------------------------------------------------------------------------------- */

static int nonMemberMode(const char* arg) {
  (void)arg;
  runSecurity(1);
  return 0;
}

static int squatMode(const char* arg) {
  (void)arg;
  runSecurity(2);
  return 0;
}

/* World sizes that would qualify for multicast by size; the variables must keep it off. */
static int mcGuardMode(const char* arg) {
  (void)arg;
  CHECK(getenv("NCCL_NVLS_ENABLE") && getenv("TORCH_SYMM_MEM_DISABLE_MULTICAST") &&
        getenv("NVSHMEM_DISABLE_NVLS"));
  mcGuardEachAlone(); /* first: its children must fork from a process without CUDA state */
  for (int nranks = 4; nranks <= SYMM_MAX_RANKS; nranks++) runThreads(nranks, mcGuardBody, NULL);
  CHECK_EQ_INT(symmTransportMulticastAttempts(), 0);
  return 0;
}

int main(int argc, char** argv) {
  static const struct peerMode modes[] = {{"nonmember", 2, PEER_FORKED, nonMemberMode},
                                          {"squat", 2, PEER_FORKED, squatMode},
                                          {"mcguard", 1, PEER_BOOTSTRAP, mcGuardMode}};
  static const struct peerTest test = {"peer_security", "nonmember|squat|mcguard", 0, modes,
                                       sizeof(modes) / sizeof(modes[0])};
  return peerMain(&test, argc, argv);
}
