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
 * The protocol reaches another process only through struct mbc_transport,
 * so that an inter-node transport (MPI-3 one-sided operations with
 * passive-target synchronisation) can be added as one more file.
 */
#ifndef TIERS_MBC_INTERNAL_H
#define TIERS_MBC_INTERNAL_H

#include <stdint.h>
#include <stddef.h>

#include "tiers/mbc.h"

/* The two FIFOs (rings) every process keeps for every peer. */
enum { MBC_RING_MSG = 0, MBC_RING_REQ = 1 };

/*
 * A ring is a single-producer, single-consumer byte ring in the consumer's
 * memory.  The producer owns `tail` (bytes ever written), the consumer owns
 * `head` (bytes ever consumed); both only grow, so `tail - head` is the
 * fill level and `pos % capacity` the place in the data area.  Each sits on
 * its own 128-byte block so that producer and consumer never share a line.
 */
#define MBC_LINE 128

/* The transport: how the protocol reaches the rings of another process
 * and the receive buffers of another process.  `peer` is a rank of the
 * communicator (the process itself included). */
struct mbc_transport {
  const char *name;   /* "shm" */
  int direct;         /* 1: direct_write works between every pair */
  void *impl;         /* the transport's own state */
  size_t capacity[2]; /* bytes of each MSG and REQ ring */

  /* -- producer side: the ring I write in peer's memory -- */
  /* copy len bytes to data offset off (off + len <= capacity, no wrap) */
  void (*put)(struct mbc_transport *t, int peer, int ring, size_t off, const void *src, size_t len);
  /* make everything put so far visible, then the new tail (release) */
  void (*publish_tail)(struct mbc_transport *t, int peer, int ring, uint64_t tail);
  /* the consumer's head of that ring (acquire) */
  uint64_t (*load_head)(struct mbc_transport *t, int peer, int ring);

  /* -- consumer side: the ring `peer` writes in my memory -- */
  uint64_t (*load_tail)(struct mbc_transport *t, int peer, int ring); /* acquire */
  const unsigned char *(*data)(struct mbc_transport *t, int peer, int ring); /* local data area */
  void (*publish_head)(struct mbc_transport *t, int peer, int ring, uint64_t head); /* release */

  /* -- direct remote write into a buffer of peer (its address `addr`) -- */
  int (*direct_write)(struct mbc_transport *t, int peer, uint64_t addr, const void *src, size_t len);
  /* 0 when the process of `peer` is known to have exited */
  int (*peer_alive)(struct mbc_transport *t, int peer);
  /* collective teardown */
  int (*destroy)(struct mbc_transport *t);
};

/* Intra-node transport (shm.c).  Collective over comm.  Returns
 * TIERS_ERR_UNSUPPORTED when comm spans more than one node. */
int mbc_shm_create(MPI_Comm comm, size_t fifo_bytes, size_t req_bytes, int want_direct,
                   struct mbc_transport **out);

/* Message FIFO entry: this header, then `chunk` payload bytes, then padding
 * to a multiple of 8.  Kinds: */
enum {
  MBC_E_FIRST = 1,  /* first chunk of an unasked message; aux = its FIFO sequence number */
  MBC_E_ANSWER = 2, /* first chunk of a message answering send request aux (rseq) */
  MBC_E_MORE = 3,   /* a later chunk; aux = offset of the chunk in the message */
  MBC_E_DIRECT = 4  /* message of `total` bytes was written directly into the
                       buffer of send request aux (rseq); chunk = 0 */
};
struct mbc_hdr {
  uint32_t kind;
  int32_t tag;
  uint64_t total; /* bytes of the whole message */
  uint64_t chunk; /* payload bytes following this header */
  uint64_t aux;
};
#define MBC_HDR ((size_t)sizeof(struct mbc_hdr)) /* 32 */

/* Send-request FIFO entry (fixed 64 bytes): the receiver asks the sender
 * to write its next matching message into buffer addr. */
struct mbc_sreq {
  uint64_t rseq;      /* numbers this receiver's requests to this sender: 1, 2, ... */
  uint64_t floor;     /* smallest rseq of the receiver's receives from this sender
                         that still wait with a request (this one included) */
  uint64_t fifo_seen; /* unasked messages of this sender the receiver has taken
                         from the FIFO when it sent the request */
  uint64_t addr;      /* the receive buffer in the receiver's address space */
  uint64_t cap;       /* its capacity */
  int32_t tag;        /* tag wanted, or TIERS_MBC_ANY_TAG */
  int32_t pad0;
  uint64_t pad1[2];
};
#define MBC_SREQ ((size_t)sizeof(struct mbc_sreq)) /* 64 */

/* Internal tags (negative: never matched by user receives). */
#define MBC_TAG_BARRIER (-16) /* minus the round */
#define MBC_TAG_REDUCE (-64)
#define MBC_TAG_BCAST (-65)

/* Internal point-to-point calls without the user-tag check (coll.c). */
int mbc_isend_internal(tiers_mbc_t mbc, const void *buf, size_t bytes, int dest, int tag,
                       tiers_mbc_request_t *req);
int mbc_irecv_internal(tiers_mbc_t mbc, void *buf, size_t cap, int source, int tag,
                       tiers_mbc_request_t *req);
int mbc_check(tiers_mbc_t mbc);
MPI_Comm mbc_comm(tiers_mbc_t mbc);
void mbc_local_stats(tiers_mbc_t mbc, tiers_mbc_stats_t *st);

#endif
