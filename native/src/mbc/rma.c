/*
 * The inter-node transport of libtiers-mbc: MPI-3 one-sided operations
 * with passive-target synchronisation (the remote-memory transfer of seed
 * 004's NICAM and the remote writes of seed 001, over whatever network MPI
 * drives).
 *
 * Every process allocates one window segment (MPI_Win_allocate over the
 * whole communicator) with the same layout as the shared-memory one:
 *
 *   head[MSG][p], head[REQ][p]   8 bytes each (consumer's head)
 *   msg data [p]                 fifo_bytes each (ring written by sender p)
 *   req data [p]                 req_bytes each  (ring written by receiver p)
 *
 * The window is in one MPI_Win_lock_all(MPI_MODE_NOCHECK) epoch for its
 * life.  A producer writes an entry with MPI_Put, completes it with
 * MPI_Win_flush, then stores the stamp with MPI_Accumulate(MPI_REPLACE)
 * (atomic with respect to the consumer's reads) and flushes again, so the
 * consumer never sees a stamp before the bytes it covers.  The producer
 * reads the consumer's head with MPI_Fetch_and_op(MPI_NO_OP) only when its
 * cached head shows too little room.  The consumer reads its own segment
 * with atomic loads after MPI_Win_sync, and calls MPI_Iprobe on a private
 * communicator so that MPI implementations whose one-sided operations need
 * the target to make progress (Open MPI's osc/pt2pt) apply them.
 *
 * No direct writes: every message travels through the FIFOs.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "mbc_internal.h"

struct rma {
  MPI_Comm comm; /* private duplicate: the window's and the progress probe's */
  MPI_Win win;
  int n, rank;
  unsigned char *base; /* my segment */
  size_t cap[2];
  size_t data_off[2]; /* start of the MSG and REQ data areas in a segment */
};

static MPI_Aint head_disp(struct rma *r, int ring, int producer)
{
  return (MPI_Aint)(sizeof(uint64_t) * ((size_t)ring * r->n + producer));
}

static MPI_Aint data_disp(struct rma *r, int ring, int producer)
{
  return (MPI_Aint)(r->data_off[ring] + r->cap[ring] * (size_t)producer);
}

static void rma_put(struct mbc_transport *t, int peer, int ring, size_t off, const void *src,
                    size_t len)
{
  struct rma *r = t->impl;
  MPI_Aint disp = data_disp(r, ring, r->rank) + (MPI_Aint)off;
  /* chunks below 1 GiB (the FIFO's limit): one int count suffices */
  MPI_Put(src, (int)len, MPI_BYTE, peer, disp, (int)len, MPI_BYTE, r->win);
}

static void rma_put_stamp(struct mbc_transport *t, int peer, int ring, size_t off, uint64_t stamp)
{
  struct rma *r = t->impl;
  MPI_Aint disp = data_disp(r, ring, r->rank) + (MPI_Aint)off;
  MPI_Win_flush(peer, r->win); /* the entry's bytes first */
  MPI_Accumulate(&stamp, 1, MPI_UINT64_T, peer, disp, 1, MPI_UINT64_T, MPI_REPLACE, r->win);
  MPI_Win_flush(peer, r->win);
}

static uint64_t rma_load_head(struct mbc_transport *t, int peer, int ring)
{
  struct rma *r = t->impl;
  uint64_t v = 0, dummy = 0;
  MPI_Fetch_and_op(&dummy, &v, MPI_UINT64_T, peer, head_disp(r, ring, r->rank), MPI_NO_OP,
                   r->win);
  MPI_Win_flush(peer, r->win);
  return v;
}

static unsigned char *rma_data(struct mbc_transport *t, int peer, int ring)
{
  struct rma *r = t->impl;
  return r->base + data_disp(r, ring, peer);
}

static void rma_publish_head(struct mbc_transport *t, int peer, int ring, uint64_t head)
{
  struct rma *r = t->impl;
  _Atomic uint64_t *h = (_Atomic uint64_t *)(r->base + head_disp(r, ring, peer));
  atomic_store_explicit(h, head, memory_order_release);
  MPI_Win_sync(r->win);
}

static void rma_poll(struct mbc_transport *t)
{
  struct rma *r = t->impl;
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, r->comm, &flag, MPI_STATUS_IGNORE);
  MPI_Win_sync(r->win);
}

static int rma_direct_write(struct mbc_transport *t, int peer, uint64_t addr, const void *src,
                            size_t len)
{
  (void)t;
  (void)addr;
  (void)src;
  return tiers_error_set(TIERS_ERR_UNSUPPORTED, __FILE__, __LINE__,
                         "direct write of %zu bytes to rank %d: the RMA transport has none", len,
                         peer);
}

static int rma_peer_alive(struct mbc_transport *t, int peer)
{
  (void)t;
  (void)peer;
  return 1; /* another node: only the time limit tells */
}

static int rma_destroy(struct mbc_transport *t)
{
  struct rma *r = t->impl;
  int rc = TIERS_OK;
  if (MPI_Win_unlock_all(r->win) != MPI_SUCCESS || MPI_Win_free(&r->win) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "freeing the RMA window failed");
  MPI_Comm_free(&r->comm);
  free(r);
  free(t);
  return rc;
}

int mbc_rma_create(MPI_Comm comm, size_t fifo_bytes, size_t req_bytes, struct mbc_transport **out)
{
  *out = NULL;
  struct rma *r = calloc(1, sizeof *r);
  struct mbc_transport *t = calloc(1, sizeof *t);
  int ok = r && t, ok_all = 0;
  MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_MIN, comm);
  if (!ok_all) {
    free(r);
    free(t);
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory creating the RMA transport");
  }
  if (MPI_Comm_dup(comm, &r->comm) != MPI_SUCCESS) {
    free(r);
    free(t);
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Comm_dup failed");
  }
  MPI_Comm_size(r->comm, &r->n);
  MPI_Comm_rank(r->comm, &r->rank);
  r->cap[MBC_RING_MSG] = fifo_bytes;
  r->cap[MBC_RING_REQ] = req_bytes;
  size_t heads = sizeof(uint64_t) * 2 * (size_t)r->n;
  r->data_off[MBC_RING_MSG] = (heads + MBC_LINE - 1) / MBC_LINE * MBC_LINE;
  r->data_off[MBC_RING_REQ] = r->data_off[MBC_RING_MSG] + fifo_bytes * (size_t)r->n;
  size_t bytes = r->data_off[MBC_RING_REQ] + req_bytes * (size_t)r->n;
  /* A window no one-sided component can serve must come back as an error
   * code, not abort the program: the new window takes its error handler
   * from this private communicator. */
  MPI_Comm_set_errhandler(r->comm, MPI_ERRORS_RETURN);
  int wrc = MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, r->comm, &r->base, &r->win);
  int won = wrc == MPI_SUCCESS, won_all = 0;
  MPI_Allreduce(&won, &won_all, 1, MPI_INT, MPI_MIN, r->comm);
  if (!won_all) {
    char why[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (wrc != MPI_SUCCESS && MPI_Error_string(wrc, why, &len) == MPI_SUCCESS)
      why[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    /* a process whose window was made keeps it: freeing is collective */
    MPI_Comm_free(&r->comm);
    free(r);
    free(t);
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Win_allocate of %zu bytes for the RMA transport failed%s%s: "
                "MPI has no one-sided component that reaches every process (Debian's Open "
                "MPI disables osc/pt2pt in /etc/openmpi/openmpi-mca-params.conf: set "
                "OMPI_MCA_osc=^ucx)", bytes, why[0] ? ": " : " on another process", why);
  }
  memset(r->base, 0, bytes);
  int rc = TIERS_OK;
  if (MPI_Win_lock_all(MPI_MODE_NOCHECK, r->win) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Win_lock_all failed");
  else
    MPI_Win_sync(r->win);
  /* every segment is zeroed before anyone writes into it */
  if (rc == TIERS_OK && MPI_Barrier(r->comm) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Barrier failed");
  t->name = "rma";
  t->direct = 0;
  t->impl = r;
  t->capacity[MBC_RING_MSG] = fifo_bytes;
  t->capacity[MBC_RING_REQ] = req_bytes;
  t->put = rma_put;
  t->put_stamp = rma_put_stamp;
  t->load_head = rma_load_head;
  t->data = rma_data;
  t->publish_head = rma_publish_head;
  t->poll = rma_poll;
  t->direct_write = rma_direct_write;
  t->peer_alive = rma_peer_alive;
  t->destroy = rma_destroy;
  if (rc != TIERS_OK) {
    rma_destroy(t);
    return rc;
  }
  *out = t;
  return TIERS_OK;
}
