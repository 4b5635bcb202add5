/*
 * The intra-node transport of libtiers-mbc.
 *
 * Every process allocates one segment of an MPI-3 shared-memory window
 * (MPI_Win_allocate_shared over the node communicator) and maps the
 * segments of all its peers (MPI_Win_shared_query).  A segment holds the
 * rings other processes write into:
 *
 *   ctrl[MSG][0..n-1]   128-byte tail block + 128-byte head block per ring
 *   ctrl[REQ][0..n-1]
 *   msg data [0..n-1]   fifo_bytes each   (ring written by sender p)
 *   req data [0..n-1]   req_bytes each    (ring written by receiver p)
 *
 * Producers copy with plain stores and publish the tail with a release
 * store; consumers read the tail with an acquire load, copy out, and
 * publish their head with a release store.  The window stays in a
 * passive-target access epoch (MPI_Win_lock_all) for its whole life; the
 * C11 atomics give the ordering (MPI's unified memory model, which the
 * shared-memory windows of Open MPI and MPICH have).
 *
 * Direct remote writes use Linux cross-memory attach (process_vm_writev)
 * to the receiving process; create checks that it works between every
 * pair and turns it off for everyone otherwise.
 */
#define _GNU_SOURCE /* process_vm_writev */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mbc_internal.h"

struct ring_ctrl {
  _Alignas(MBC_LINE) _Atomic uint64_t tail;
  char pad0[MBC_LINE - sizeof(uint64_t)];
  _Alignas(MBC_LINE) _Atomic uint64_t head;
  char pad1[MBC_LINE - sizeof(uint64_t)];
};

struct shm {
  MPI_Comm node;
  MPI_Win win;
  int n, rank;
  unsigned char **seg; /* segment base of every process */
  pid_t *pid;
  size_t cap[2];
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Layout of one segment. */
static struct ring_ctrl *ctrl_at(struct shm *s, int owner, int ring, int producer)
{
  struct ring_ctrl *c = (struct ring_ctrl *)s->seg[owner];
  return &c[(size_t)ring * s->n + producer];
}

static unsigned char *data_at(struct shm *s, int owner, int ring, int producer)
{
  size_t off = sizeof(struct ring_ctrl) * 2 * (size_t)s->n;
  if (ring == MBC_RING_REQ)
    off += s->cap[MBC_RING_MSG] * (size_t)s->n;
  return s->seg[owner] + off + s->cap[ring] * (size_t)producer;
}

static void shm_put(struct mbc_transport *t, int peer, int ring, size_t off, const void *src,
                    size_t len)
{
  struct shm *s = t->impl;
  memcpy(data_at(s, peer, ring, s->rank) + off, src, len);
}

static void shm_publish_tail(struct mbc_transport *t, int peer, int ring, uint64_t tail)
{
  struct shm *s = t->impl;
  atomic_store_explicit(&ctrl_at(s, peer, ring, s->rank)->tail, tail, memory_order_release);
}

static uint64_t shm_load_head(struct mbc_transport *t, int peer, int ring)
{
  struct shm *s = t->impl;
  return atomic_load_explicit(&ctrl_at(s, peer, ring, s->rank)->head, memory_order_acquire);
}

static uint64_t shm_load_tail(struct mbc_transport *t, int peer, int ring)
{
  struct shm *s = t->impl;
  return atomic_load_explicit(&ctrl_at(s, s->rank, ring, peer)->tail, memory_order_acquire);
}

static const unsigned char *shm_data(struct mbc_transport *t, int peer, int ring)
{
  struct shm *s = t->impl;
  return data_at(s, s->rank, ring, peer);
}

static void shm_publish_head(struct mbc_transport *t, int peer, int ring, uint64_t head)
{
  struct shm *s = t->impl;
  atomic_store_explicit(&ctrl_at(s, s->rank, ring, peer)->head, head, memory_order_release);
}

static int shm_direct_write(struct mbc_transport *t, int peer, uint64_t addr, const void *src,
                            size_t len)
{
  struct shm *s = t->impl;
  if (peer == s->rank) {
    memcpy((void *)(uintptr_t)addr, src, len);
    return TIERS_OK;
  }
  size_t done = 0;
  while (done < len) {
    struct iovec local = {(void *)((const char *)src + done), len - done};
    struct iovec remote = {(void *)(uintptr_t)(addr + done), len - done};
    ssize_t w = process_vm_writev(s->pid[peer], &local, 1, &remote, 1, 0);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return tiers_error_set(TIERS_ERR_SYS, __FILE__, __LINE__,
                             "direct write of %zu bytes to rank %d (pid %d) failed: "
                             "process_vm_writev: %s",
                             len, peer, (int)s->pid[peer], strerror(errno));
    }
    if (w == 0)
      return tiers_error_set(TIERS_ERR_SYS, __FILE__, __LINE__,
                             "direct write to rank %d made no progress", peer);
    done += (size_t)w;
  }
  return TIERS_OK;
}

static int shm_peer_alive(struct mbc_transport *t, int peer)
{
  struct shm *s = t->impl;
  return !(kill(s->pid[peer], 0) != 0 && errno == ESRCH);
}

static int shm_destroy(struct mbc_transport *t)
{
  struct shm *s = t->impl;
  int rc = TIERS_OK;
  if (MPI_Win_unlock_all(s->win) != MPI_SUCCESS || MPI_Win_free(&s->win) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "freeing the shared window failed");
  MPI_Comm_free(&s->node);
  free(s->seg);
  free(s->pid);
  free(s);
  free(t);
  return rc;
}

/* Can this process write into every other one with process_vm_writev?
 * Each process writes its rank + 1 into a probe word of every peer. */
static int probe_cma(struct shm *s, int *ok_all)
{
  int n = s->n;
  uint64_t *probe = calloc((size_t)n, sizeof *probe); /* probe[p]: written by p */
  uint64_t *addrs = malloc((size_t)n * sizeof *addrs);
  if (!probe || !addrs) {
    free(probe);
    free(addrs);
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory probing direct writes");
  }
  uint64_t mine = (uint64_t)(uintptr_t)probe;
  int rc = TIERS_OK;
  if (MPI_Allgather(&mine, 1, MPI_UINT64_T, addrs, 1, MPI_UINT64_T, s->node) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Allgather failed");
  int ok = 1;
  if (rc == TIERS_OK) {
    for (int p = 0; p < n; p++) {
      if (p == s->rank)
        continue;
      uint64_t v = (uint64_t)s->rank + 1;
      struct iovec local = {&v, sizeof v};
      struct iovec remote = {(void *)(uintptr_t)(addrs[p] + sizeof(uint64_t) * (size_t)s->rank),
                             sizeof v};
      if (process_vm_writev(s->pid[p], &local, 1, &remote, 1, 0) != (ssize_t)sizeof v)
        ok = 0;
    }
    if (MPI_Barrier(s->node) != MPI_SUCCESS)
      rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Barrier failed");
    for (int p = 0; p < n; p++)
      if (p != s->rank && probe[p] != (uint64_t)p + 1)
        ok = 0;
  }
  if (rc == TIERS_OK &&
      MPI_Allreduce(&ok, ok_all, 1, MPI_INT, MPI_MIN, s->node) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Allreduce failed");
  free(probe);
  free(addrs);
  return rc;
}

int mbc_shm_create(MPI_Comm comm, size_t fifo_bytes, size_t req_bytes, int want_direct,
                   struct mbc_transport **out)
{
  int n, rank, nn;
  if (MPI_Comm_size(comm, &n) != MPI_SUCCESS || MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Comm_size/rank failed");
  MPI_Comm node;
  /* key = rank: node ranks are the communicator's ranks when all share a node */
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
  MPI_Comm_size(node, &nn);
  int all_local = nn == n, all_local_min = 0;
  MPI_Allreduce(&all_local, &all_local_min, 1, MPI_INT, MPI_MIN, comm);
  if (!all_local_min) {
    MPI_Comm_free(&node);
    TIERS_ERROR(TIERS_ERR_UNSUPPORTED,
                "the communicator spans more than one node; this version of the "
                "memory-based layer has only the intra-node (shared-memory) transport");
  }
  struct shm *s = calloc(1, sizeof *s);
  struct mbc_transport *t = calloc(1, sizeof *t);
  if (s)
    s->seg = calloc((size_t)n, sizeof *s->seg);
  if (s)
    s->pid = calloc((size_t)n, sizeof *s->pid);
  if (!s || !t || !s->seg || !s->pid) {
    if (s) {
      free(s->seg);
      free(s->pid);
    }
    free(s);
    free(t);
    MPI_Comm_free(&node);
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory creating the shared-memory transport");
  }
  s->node = node;
  s->n = n;
  s->rank = rank;
  s->cap[MBC_RING_MSG] = fifo_bytes;
  s->cap[MBC_RING_REQ] = req_bytes;
  size_t bytes = sizeof(struct ring_ctrl) * 2 * (size_t)n + (fifo_bytes + req_bytes) * (size_t)n;
  bytes = round_up(bytes, 4096) + MBC_LINE; /* room to align the segment to a line */

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  unsigned char *base = NULL;
  int mrc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, node, &base, &s->win);
  MPI_Info_free(&info);
  if (mrc != MPI_SUCCESS) {
    MPI_Comm_free(&node);
    free(s->seg);
    free(s->pid);
    free(s);
    free(t);
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Win_allocate_shared of %zu bytes failed", bytes);
  }
  memset(base, 0, bytes);
  /* MPI need not align the segments: each process aligns its own and tells
   * the others how far it moved (the mappings agree modulo the page size,
   * so everyone sees the same lines) */
  int pad = (int)((MBC_LINE - (uintptr_t)base % MBC_LINE) % MBC_LINE), *pads = NULL;
  pads = malloc((size_t)n * sizeof *pads);
  if (!pads || MPI_Allgather(&pad, 1, MPI_INT, pads, 1, MPI_INT, node) != MPI_SUCCESS) {
    free(pads);
    MPI_Win_free(&s->win);
    MPI_Comm_free(&node);
    free(s->seg);
    free(s->pid);
    free(s);
    free(t);
    TIERS_ERROR(TIERS_ERR_MPI, "exchanging the segment alignment failed");
  }
  for (int p = 0; p < n; p++) {
    MPI_Aint size;
    int disp;
    void *ptr = NULL;
    MPI_Win_shared_query(s->win, p, &size, &disp, &ptr);
    s->seg[p] = (unsigned char *)ptr + pads[p];
  }
  free(pads);
  pid_t me = getpid();
  int pid_int = (int)me, *pids = malloc((size_t)n * sizeof *pids);
  int rc = TIERS_OK;
  if (!pids)
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
  else if (MPI_Allgather(&pid_int, 1, MPI_INT, pids, 1, MPI_INT, node) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Allgather of pids failed");
  if (rc == TIERS_OK)
    for (int p = 0; p < n; p++)
      s->pid[p] = (pid_t)pids[p];
  free(pids);
  if (rc == TIERS_OK && MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Win_lock_all failed");
  int direct = 0;
  if (rc == TIERS_OK && want_direct)
    rc = probe_cma(s, &direct);
  /* every segment is zeroed before anyone uses it */
  if (rc == TIERS_OK && MPI_Barrier(node) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Barrier failed");
  t->name = "shm";
  t->direct = direct;
  t->impl = s;
  t->capacity[MBC_RING_MSG] = fifo_bytes;
  t->capacity[MBC_RING_REQ] = req_bytes;
  t->put = shm_put;
  t->publish_tail = shm_publish_tail;
  t->load_head = shm_load_head;
  t->load_tail = shm_load_tail;
  t->data = shm_data;
  t->publish_head = shm_publish_head;
  t->direct_write = shm_direct_write;
  t->peer_alive = shm_peer_alive;
  t->destroy = shm_destroy;
  if (rc != TIERS_OK) {
    shm_destroy(t);
    return rc;
  }
  *out = t;
  return TIERS_OK;
}
