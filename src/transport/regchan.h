/* SPDX-License-Identifier: Apache-2.0 */
/* The message channel of ncclCommRegister zero-copy: one unnamed datagram socket pair per
 * (communicator, rank), whose sending end only members hold; credential- and token-checked
 * receive. Plain POSIX: testable without a GPU. */
#ifndef SYMMCOLL_TRANSPORT_REGCHAN_H
#define SYMMCOLL_TRANSPORT_REGCHAN_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h" /* SYMM_SECRET_BYTES */
#include "nccl_api.h"

#define SYMM_REGCHAN_AUTH_BYTES (SYMM_SECRET_BYTES / 2)
#define SYMM_REGCHAN_MAGIC 0x53594d55u /* "SYMU": first word of every message */

enum symmRegMsgType {
  SYMM_REGMSG_MAP = 1,   /* writer -> reader: map my region (one fd attached) */
  SYMM_REGMSG_UNMAP = 2, /* writer -> reader: forget it */
  SYMM_REGMSG_ACK = 3,   /* reader -> writer: mapped, table entry written */
  /* Zero copy of plain buffers in captured graphs (graphpeers.c), one pair per captured call
   * (`seq`): each rank offers its buffer to every peer, then says whether it imported them all. */
  SYMM_REGMSG_GRAPH_OFFER = 4, /* ok: memKind's handle (IPC bytes or one fd), offset, allocBytes */
  SYMM_REGMSG_GRAPH_DONE = 5,  /* ok: every peer's offer was imported here */
};

#define SYMM_REGCHAN_IPC_BYTES 64 /* sizeof(cudaIpcMemHandle_t) */
#define SYMM_GRAPH_MEM_IPC 1 /* cudaMalloc memory: a legacy IPC handle in `ipc` */
#define SYMM_GRAPH_MEM_VMM 2 /* VMM memory (ncclMemAlloc): its POSIX fd attached */

struct symmRegMsg {
  uint32_t magic;
  uint32_t type;
  int32_t rank; /* the sender's rank */
  uint32_t slot;
  uint32_t generation;
  uint32_t ok;         /* GRAPH_*: the sender's yes (1) or no (0) */
  uint64_t allocBytes; /* MAP, GRAPH_OFFER: size of the exported allocation */
  uint64_t seq;        /* GRAPH_*: the communicator's captured-call number, the same on all ranks */
  uint64_t offset;     /* GRAPH_OFFER: the buffer's offset in its allocation */
  uint32_t memKind;    /* GRAPH_OFFER: SYMM_GRAPH_MEM_* */
  uint32_t pad;
  uint64_t allocId;    /* GRAPH_OFFER, VMM: the sender's id of the allocation (0: none) */
  uint8_t ipc[SYMM_REGCHAN_IPC_BYTES]; /* GRAPH_OFFER, IPC: cudaIpcMemHandle_t of the allocation */
  uint8_t auth[SYMM_REGCHAN_AUTH_BYTES]; /* second half of the secret; filled by the sender */
};

/* What the receiving end checks: who may send (member pids, our uid) and the token. */
struct symmRegChanPeers {
  int rank, nranks;
  int32_t pids[SYMM_MAX_RANKS];
  uint32_t uid;
  uint8_t auth[SYMM_REGCHAN_AUTH_BYTES]; /* never logged; wiped by the owner */
};

/* A connected SOCK_DGRAM pair (close-on-exec, SO_PASSCRED on the receiving end): rxFd is read by
 * this rank's receiver thread; txFd is what peers (and this rank) send to. No name exists, so no
 * stranger can bind or reach it: only processes given txFd over an authenticated fdpass can. */
ncclResult_t symmRegChanCreate(int* rxFd, int* txFd);

/* Sends `msg` (magic filled in here) to a channel's sending end, with `fd` attached when >= 0.
 * Never blocks (a full queue only means "not sent"). Returns 1 when sent, else 0. */
int symmRegChanSend(int txFd, const struct symmRegMsg* msg, int fd);

enum symmRegRecv {
  SYMM_REGRECV_EMPTY = -1,  /* nothing queued (or a socket error: errno says) */
  SYMM_REGRECV_DROPPED = 0, /* a message was read and rejected; every fd it carried is closed */
  SYMM_REGRECV_GOT = 1,     /* *msg is valid; MAP comes with *fdOut (close-on-exec), else -1 */
};

/* Reads one message without blocking and checks it: SCM_CREDENTIALS present, sender uid ours,
 * its pid the pid of the rank it claims (not our own rank), exact size, magic, type, slot, auth
 * token (constant time), and exactly one fd for MAP, at most one for GRAPH_OFFER and none
 * otherwise (GRAPH_* use slot 0); MSG_CTRUNC/MSG_TRUNC reject. Rejections are logged at INFO
 * (pid, uid, reason; never the token). */
enum symmRegRecv symmRegChanReceive(int rxFd, const struct symmRegChanPeers* who,
                                    struct symmRegMsg* msg, int* fdOut);

#endif
