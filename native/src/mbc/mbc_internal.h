/*
 * libtiers-mbc internals: the transport interface, the FIFO entry formats
 * and the communicator's state.  docs/mbc.md explains the protocol.
 *
 * Layering:
 *   mbc.c        the protocol (matching, send requests, sequence numbers,
 *                flow control) and the point-to-point API
 *   coll.c       barrier, allreduce and statistics on top of it
 *   shm.c        the intra-node transport (MPI-3 shared-memory window +
 *                Linux cross-memory attach)
 *   rma.c        the inter-node transport (MPI-3 one-sided operations with
 *                passive-target synchronisation)
 * The protocol reaches another process only through struct mbc_transport,
 * chosen per peer (shared memory inside a node, RMA across).
 */
#ifndef TIERS_MBC_INTERNAL_H
#define TIERS_MBC_INTERNAL_H

#include <stdint.h>
#include <stddef.h>

#include "tiers/mbc.h"

/* The two FIFOs (rings) every process keeps for every peer. */
enum { MBC_RING_MSG = 0, MBC_RING_REQ = 1 };

/*
 * A ring is a single-producer, single-consumer ring of 64-byte slots in the
 * consumer's memory.  Positions count bytes ever written (producer: `tail`,
 * kept privately) and ever consumed (consumer: `head`, published for the
 * producer); both only grow.  Every entry starts on a slot and never wraps
 * (the producer pads to the end of the ring first).  Its first 8 bytes are
 * the *stamp*, written last with release semantics: stamp = (pos + 64) |
 * kind, where pos is the entry's position.  The consumer spins on the stamp
 * at its head, so a small message is one cache line (header and payload)
 * and no separate tail line is touched.  Before it publishes its head, the
 * consumer zeroes the first word of every slot but the first of each entry
 * it consumed (those held payload), so that a stamp is only ever seen at a
 * position after the producer wrote it there: the first word of a slot is
 * then always 0, an older stamp (which never equals a later position's), or
 * data inside an entry not yet consumed.
 */
#define MBC_SLOT 64
#define MBC_LINE 128

/* The transport: how the protocol reaches the rings of another process
 * and the receive buffers of another process.  `peer` is a rank of the
 * communicator (the process itself included). */
struct mbc_transport {
  const char *name;   /* "shm" or "rma" */
  int direct;         /* 1: direct_write works between every pair it serves */
  void *impl;         /* the transport's own state */
  size_t capacity[2]; /* bytes of each MSG and REQ ring */

  /* -- producer side: my ring in peer's memory -- */
  /* copy len bytes to ring offset off (off + len <= capacity) */
  void (*put)(struct mbc_transport *t, int peer, int ring, size_t off, const void *src, size_t len);
  /* make everything put so far visible, then store the stamp at off */
  void (*put_stamp)(struct mbc_transport *t, int peer, int ring, size_t off, uint64_t stamp);
  /* the consumer's head of that ring (acquire) */
  uint64_t (*load_head)(struct mbc_transport *t, int peer, int ring);

  /* -- consumer side: the ring `peer` writes in my memory -- */
  unsigned char *(*data)(struct mbc_transport *t, int peer, int ring); /* local area */
  void (*publish_head)(struct mbc_transport *t, int peer, int ring, uint64_t head); /* release */
  /* let the transport make progress before the rings are read (NULL: none) */
  void (*poll)(struct mbc_transport *t);

  /* -- direct remote write into a buffer of peer (its address `addr`) -- */
  int (*direct_write)(struct mbc_transport *t, int peer, uint64_t addr, const void *src, size_t len);
  /* -- direct remote read of len bytes at `addr` in peer's memory into dst
   *    (NULL, or never called, where `direct` is 0) -- */
  int (*direct_read)(struct mbc_transport *t, int peer, uint64_t addr, void *dst, size_t len);
  /* 0 when the process of `peer` is known to have exited */
  int (*peer_alive)(struct mbc_transport *t, int peer);
  /* collective teardown */
  int (*destroy)(struct mbc_transport *t);
};

/* Intra-node transport (shm.c) for the peers that share this process's
 * node.  Collective over comm.  `local` (size of comm) receives 1 for the
 * peers it serves.  With `require_all`, returns TIERS_ERR_UNSUPPORTED when
 * comm spans more than one node. */
int mbc_shm_create(MPI_Comm comm, size_t fifo_bytes, size_t req_bytes, int want_direct,
                   int require_all, int *local, struct mbc_transport **out);

/* Inter-node transport (rma.c): rings in an MPI_Win_allocate window,
 * MPI_Put / MPI_Accumulate / MPI_Fetch_and_op with MPI_Win_flush under
 * MPI_Win_lock_all.  Serves every peer of comm.  Collective over comm. */
int mbc_rma_create(MPI_Comm comm, size_t fifo_bytes, size_t req_bytes,
                   struct mbc_transport **out);

/* Message FIFO entry: this header, then `chunk` payload bytes, then padding
 * to the next slot.  Kinds (the low bits of the stamp): */
enum {
  MBC_E_FIRST = 1,  /* first chunk of an unasked message; aux = its FIFO sequence number */
  MBC_E_ANSWER = 2, /* first chunk of a message answering send request aux (rseq) */
  MBC_E_MORE = 3,   /* a later chunk; aux = offset of the chunk in the message */
  MBC_E_DIRECT = 4, /* message of `total` bytes was written directly into the
                       buffer of send request aux (rseq); chunk = 0 */
  MBC_E_PAD = 5,    /* nothing up to the end of the ring */
  MBC_E_SREQ = 6,   /* a send request (request ring) */
  MBC_E_ACK = 7,    /* request ring: the receiver matched the synchronous
                       message with FIFO sequence number `rseq` (or has
                       copied the MBC_E_READ message `rseq`) */
  MBC_E_WITHDRAW = 8, /* request ring: the receiver cancels the receive of
                         send request `rseq`; the sender forgets it and
                         answers with MBC_E_WITHDRAWN */
  MBC_E_WITHDRAWN = 9, /* message ring: send request aux (rseq) will not be
                          used; everything it was used for lies before */
  MBC_E_READ = 10,    /* an unasked message of `total` bytes left in the
                         sender's memory (single-copy rendezvous): its
                         8 payload bytes are the address of the send buffer;
                         aux = its FIFO sequence number (numbered with the
                         MBC_E_FIRST messages).  The receive that matches it
                         copies the bytes straight out of the sender's
                         buffer (direct_read) and then answers MBC_E_ACK
                         aux, which completes the send; so the sender keeps
                         its buffer untouched until the copy is done */
  MBC_E_SPLIT = 11,   /* the split copy of a long message answering send
                         request aux (rseq), `total` bytes: its 16 payload
                         bytes are the address of the send buffer and an
                         offset `lo`.  The sender writes bytes [0, lo) into
                         the receive buffer itself (process_vm_writev) and
                         then an MBC_E_DIRECT for aux; meanwhile the receiver
                         reads [lo, n) (n: the bytes that fit the receive)
                         out of the send buffer and answers MBC_E_COPIED aux,
                         which completes the send.  The receive completes at
                         the MBC_E_DIRECT, after its own read: both
                         processes copy half of the message at once */
  MBC_E_COPIED = 12   /* request ring: the receiver has read its part of the
                         MBC_E_SPLIT message answering send request `rseq` */
};
/* Flag on the kind of an MBC_E_FIRST (or MBC_E_READ) entry: a synchronous send
 * (MPI_Ssend), whose sender waits for an MBC_E_ACK.  Standard sends never
 * carry it and never wait.  Kinds with the flag stay below MBC_SLOT. */
#define MBC_F_SYNC 32
#define MBC_KIND_MASK 31
struct mbc_hdr {
  uint64_t stamp; /* (pos + 64) | kind, written last */
  int32_t tag;
  uint32_t chunk; /* payload bytes following this header (< 2^30) */
  uint64_t total; /* bytes of the whole message */
  uint64_t aux;
};
#define MBC_HDR ((size_t)sizeof(struct mbc_hdr)) /* 32: 32 payload bytes share its line */

/* Send-request FIFO entry (one slot): the receiver asks the sender to
 * write its next matching message into buffer addr. */
struct mbc_sreq {
  uint64_t stamp;     /* (pos + 64) | MBC_E_SREQ, written last */
  uint64_t rseq;      /* numbers this receiver's requests to this sender: 1, 2, ... */
  uint64_t floor;     /* smallest rseq of the receiver's receives from this sender
                         that still wait with a request (this one included) */
  uint64_t fifo_seen; /* unasked messages of this sender the receiver has taken
                         from the FIFO when it sent the request */
  uint64_t addr;      /* the receive buffer in the receiver's address space */
  uint64_t cap;       /* its capacity */
  int32_t tag;        /* tag wanted, or TIERS_MBC_ANY_TAG */
  int32_t pad0;
  uint64_t pad1;
};
#define MBC_SREQ ((size_t)sizeof(struct mbc_sreq)) /* 64 */

/* Internal tags (negative: never matched by user receives). */
#define MBC_TAG_BARRIER (-16) /* minus the round */
#define MBC_TAG_REDUCE (-64)
#define MBC_TAG_BCAST (-65)

/* Internal point-to-point calls without the user-tag check (coll.c). */
int mbc_isend_internal(tiers_mbc_t mbc, const void *buf, size_t bytes, int dest, int tag,
                       tiers_mbc_request_t *req);
/* A synchronous send (MPI_Ssend/MPI_Issend): it completes only when the
 * receiver has matched it with a receive.  Arguments as tiers_mbc_isend. */
int mbc_issend_internal(tiers_mbc_t mbc, const void *buf, size_t bytes, int dest, int tag,
                        tiers_mbc_request_t *req);
int mbc_irecv_internal(tiers_mbc_t mbc, void *buf, size_t cap, int source, int tag,
                       tiers_mbc_request_t *req);
int mbc_check(tiers_mbc_t mbc);
MPI_Comm mbc_comm(tiers_mbc_t mbc);
void mbc_local_stats(tiers_mbc_t mbc, tiers_mbc_stats_t *st);

/* For the MPI interposition library (native/src/mbcmpi), which compiles
 * these sources in:
 *  - mbc_sent_hook (NULL unless set) is called as each message leaves,
 *    with its bytes, its tag and 1 when it went by direct remote write;
 *  - mbc_idle_hook (NULL unless set) is called every 64 idle rounds of a
 *    wait on `waiting`, so that the caller can make progress elsewhere
 *    (its other communicators, MPI's own requests);
 *  - mbc_progress_once: one round of progress; *events counts what
 *    happened;
 *  - mbc_progress_node: one round of progress on the peers reached through
 *    shared memory only; it makes no MPI call (the peers of the RMA
 *    transport are left out), so another thread may run it while the
 *    thread that owns the handle is inside an MPI call and does not touch
 *    the handle;
 *  - mbc_iprobe: progress, then *flag = 1 and *st (source, tag, bytes)
 *    when an unmatched message matches source/tag (not consumed);
 *  - mbc_cancel_recv: 1 when the posted receive r was withdrawn (it then
 *    completes empty), 2 when it sent a send request: the sender is asked
 *    to forget it, and r completes later either cancelled (status source
 *    TIERS_MBC_ANY_SOURCE, 0 bytes) or with the message the sender had
 *    already written; 0 when it cannot be cancelled (already matched);
 *  - mbc_request_done: 1 when r (or NULL) has completed. */
extern void (*mbc_sent_hook)(size_t bytes, int tag, int direct);
extern void (*mbc_idle_hook)(tiers_mbc_t waiting);
int mbc_progress_once(tiers_mbc_t mbc, int *events);
int mbc_progress_node(tiers_mbc_t mbc, int *events);
int mbc_iprobe(tiers_mbc_t mbc, int source, int tag, int *flag, tiers_mbc_status_t *st);
int mbc_cancel_recv(tiers_mbc_t mbc, tiers_mbc_request_t r);
int mbc_request_done(tiers_mbc_request_t r);

#endif
