/*
 * libtiers-mbc's protocol and shared-memory transport compiled into
 * libtiers-mbc-mpi, plus the small-message fast paths of the
 * interposition library.
 *
 * This file includes the protocol's source (native/src/mbc/mbc.c) and the
 * shared-memory transport's (shm.c) whole, so that the fast paths below
 * read and update the communicator's private state and write the rings
 * directly: a blocking MPI_Send or an MPI_Isend of a short message
 * to a peer with nothing queued, and an MPI_Recv whose message is the next
 * entry of its sender's FIFO, run as one straight line from the MPI call
 * to the ring, with no request object, no queue and no general progress
 * round.  Anything unusual (a send already queued to that peer, a send
 * request waiting to be used, a receive posted or a message buffered
 * before, a wildcard source, a synchronous or chunked message, a FIFO with
 * no room, the RMA transport) makes them answer 0, and the caller takes
 * the general path of tiers_mbc_isend / tiers_mbc_irecv, which does the
 * same thing the long way.  They serve node peers (the shared-memory
 * transport) only.  They keep every invariant of the protocol
 * (docs/mbc.md): the FIFO sequence numbers, the send requests (read before
 * a message goes out), the counters.
 *
 * (The standalone libtiers-mbc is built from mbc.c alone and has none of
 * this; native/src/mbcmpi/CMakeLists.txt compiles this file in its place.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* shm.c: process_vm_writev, process_vm_readv */
#endif
#include "mbc.c"
#include "shm.c"

#include "mbcmpi.h"

/* Largest message of the fast send (it must also be shorter than the
 * single-copy threshold: longer ones stay in the sender's buffer,
 * MBC_E_READ, on the general path). */
#define FAST_SEND_MAX 4096

int mbcmpi_fast_send(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag)
{
  struct peer *p = &m->peers[dest];
  struct mbc_transport *t = p->tp;
  if (bytes > FAST_SEND_MAX || bytes >= m->read_min || p->sq_head || m->fifo_first_left > 0 ||
      m->fatal || t->put != shm_put)
    return 0;
  /* the send requests this destination sent me come first (they may ask
   * for this very message); an empty request FIFO is one load of a line
   * in my own memory */
  if (ring_peek(p->rx[MBC_RING_REQ], t->capacity[MBC_RING_REQ], p->head[MBC_RING_REQ])) {
    int events = 0;
    if (drain_requests(m, dest, &events) != TIERS_OK)
      return 0;
  }
  if (p->nheld)
    return 0;
  size_t len = slot_up(MBC_HDR + bytes), cap = t->capacity[MBC_RING_MSG];
  uint64_t pos = p->tail[MBC_RING_MSG];
  size_t off = ring_off(pos, cap);
  if (len > cap - off || len > cap - (size_t)(pos - p->head_cache[MBC_RING_MSG])) {
    /* the cached head shows no room here: read the head, pad to the
     * ring's start if the entry fits only there */
    if (!ring_place(m, dest, MBC_RING_MSG, len))
      return 0;
    pos = p->tail[MBC_RING_MSG];
    off = ring_off(pos, cap);
  }
  /* the entry, straight into my ring in dest's segment: header and
   * payload, then the stamp (release), as msg_write through shm_put */
  struct shm *s = t->impl;
  unsigned char *e = data_at(s, s->node_of[dest], MBC_RING_MSG, s->rank) + off;
  struct mbc_hdr *h = (struct mbc_hdr *)(void *)e;
  h->tag = tag;
  h->chunk = (uint32_t)bytes;
  h->total = bytes;
  h->aux = ++p->fifo_sent;
  if (bytes)
    memcpy(e + MBC_HDR, buf, bytes);
  atomic_store_explicit((_Atomic uint64_t *)(void *)e, stamp_of(pos, MBC_E_FIRST),
                        memory_order_release);
  p->tail[MBC_RING_MSG] = pos + len;
  m->c.fifo_chunks++;
  m->c.msgs_fifo++;
  m->c.bytes_fifo += bytes;
  count_message(m, p, bytes);
  return 1;
}

/* The next entry of source's FIFO (shared memory), when it is a whole
 * unasked message for this receive: taken into buf.  1: taken; 0: nothing there yet; -1:
 * something else is there (the general path handles it). */
static int take_next(tiers_mbc_t m, struct peer *p, int source, void *buf, size_t cap, int tag,
                     tiers_mbc_status_t *st)
{
  struct mbc_transport *t = p->tp;
  size_t rcap = t->capacity[MBC_RING_MSG];
  unsigned char *data = p->rx[MBC_RING_MSG];
  uint64_t head = p->head[MBC_RING_MSG];
  int kind = ring_peek(data, rcap, head);
  if (kind == MBC_E_PAD) { /* the producer wrapped: skip to the ring's start */
    size_t rest = rcap - ring_off(head, rcap);
    ring_clear(data, rcap, head, rest);
    head += rest;
    p->head[MBC_RING_MSG] = head;
    shm_publish_head(t, source, MBC_RING_MSG, head);
    kind = ring_peek(data, rcap, head);
  }
  if (kind != MBC_E_FIRST)
    return kind ? -1 : 0;
  size_t off = ring_off(head, rcap);
  struct mbc_hdr h;
  memcpy(&h, data + off, MBC_HDR);
  size_t entry = slot_up(MBC_HDR + (size_t)h.chunk);
  if (h.chunk != h.total || h.total > cap || entry > rcap - off || !tag_matches(tag, h.tag) ||
      h.aux != p->fifo_seen + 1)
    return -1;
  if (h.total)
    memcpy(buf, data + off + MBC_HDR, (size_t)h.total);
  p->fifo_seen++;
  ring_clear(data, rcap, head, entry);
  head += entry;
  p->head[MBC_RING_MSG] = head;
  shm_publish_head(t, source, MBC_RING_MSG, head);
  m->c.msgs_received++;
  m->c.bytes_received += h.total;
  st->source = source;
  st->tag = h.tag;
  st->bytes = st->message_bytes = (size_t)h.total;
  st->truncated = 0;
  st->error = TIERS_OK;
  return 1;
}

int mbcmpi_fast_recv(tiers_mbc_t m, void *buf, size_t cap, int source, int tag, unsigned spin,
                     tiers_mbc_status_t *st)
{
  struct peer *p = &m->peers[source];
  /* a receive posted or a message buffered before may match first; a
   * message half assembled belongs to someone; RMA needs its poll */
  if (m->posted_head || m->ux_head || p->asm_active || m->fatal || p->tp->put != shm_put)
    return 0;
  /* a receive the general path would ask a direct write for: look once */
  if (p->tp->direct && cap >= m->opt.direct_min_bytes)
    spin = 0;
  if (m->oversubscribed && spin > 16)
    spin = 16; /* the sender may need this CPU: the general wait yields soon */
  for (unsigned i = 0;; i++) {
    int r = take_next(m, p, source, buf, cap, tag, st);
    if (r)
      return r > 0;
    if (i >= spin)
      return 0;
    if (i >= WAIT_HOT_ROUNDS)
      tiers_cpu_relax();
  }
}

int mbcmpi_fast_post(tiers_mbc_t m, void *buf, size_t cap, int source, int tag,
                     tiers_mbc_request_t *req)
{
  struct peer *p = &m->peers[source];
  struct mbc_transport *t = p->tp;
  /* a buffered message may match it (step 1 of irecv_any); a receive
   * large enough to ask for a direct write sends a request (step 3) */
  if (m->ux_head || m->fatal || t->put != shm_put ||
      (t->direct && cap >= m->opt.direct_min_bytes))
    return 0;
  tiers_mbc_request_t r = req_new(m, REQ_RECV);
  if (!r)
    return 0;
  r->rbuf = buf;
  r->cap = cap;
  r->peer = source;
  r->tag = tag;
  r->posted = 1;
  r->prev = m->posted_tail;
  if (m->posted_tail)
    m->posted_tail->next = r;
  else
    m->posted_head = r;
  m->posted_tail = r;
  if (t->direct) { /* as maybe_request for a receive below direct_min_bytes */
    r->unasked = 1;
    p->norequest++;
  }
  *req = r;
  return 1;
}
