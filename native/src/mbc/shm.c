/*
 * The intra-node transport of libtiers-mbc.
 *
 * Every process of a node allocates one segment of an MPI-3 shared-memory
 * window (MPI_Win_allocate_shared over the node communicator) and maps the
 * segments of the node's other processes (MPI_Win_shared_query).  A
 * segment holds the rings the node's processes write into, indexed by
 * node rank q:
 *
 *   head[MSG][q], head[REQ][q]   one 128-byte line each (consumer's head)
 *   msg data [q]                 fifo_bytes each (ring written by sender q)
 *   req data [q]                 req_bytes each  (ring written by receiver q)
 *
 * Producers copy with plain stores and store the entry's stamp last with
 * release semantics; consumers spin on the stamp with acquire loads and
 * publish their head with a release store (mbc_internal.h).  The window
 * stays in a passive-target access epoch (MPI_Win_lock_all) for its whole
 * life; the C11 atomics give the ordering (MPI's unified memory model,
 * which the shared-memory windows of Open MPI and MPICH have).
 *
 * Direct remote writes and reads use Linux cross-memory attach
 * (process_vm_writev into the receiver's buffer when it asked first,
 * process_vm_readv out of the sender's buffer for the single-copy
 * rendezvous); create checks that both work between every pair and turns
 * them off for everyone otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* process_vm_writev, process_vm_readv */
#endif
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mbc_internal.h"

struct head_line {
  _Alignas(MBC_LINE) _Atomic uint64_t head;
  char pad[MBC_LINE - sizeof(uint64_t)];
};

struct shm {
  MPI_Comm node;
  MPI_Win win;
  int n, rank;         /* node size and my node rank */
  int *node_of;        /* communicator rank -> node rank, -1: not on my node */
  unsigned char **seg; /* segment base of every node process */
  pid_t *pid;          /* by node rank */
  size_t cap[2];
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Layout of one segment. */
static _Atomic uint64_t *head_at(struct shm *s, int owner, int ring, int producer)
{
  struct head_line *c = (struct head_line *)s->seg[owner];
  return &c[(size_t)ring * s->n + producer].head;
}

static unsigned char *data_at(struct shm *s, int owner, int ring, int producer)
{
  size_t off = sizeof(struct head_line) * 2 * (size_t)s->n;
  if (ring == MBC_RING_REQ)
    off += s->cap[MBC_RING_MSG] * (size_t)s->n;
  return s->seg[owner] + off + s->cap[ring] * (size_t)producer;
}

static void shm_put(struct mbc_transport *t, int peer, int ring, size_t off, const void *src,
                    size_t len)
{
  struct shm *s = t->impl;
  memcpy(data_at(s, s->node_of[peer], ring, s->rank) + off, src, len);
}

static void shm_put_stamp(struct mbc_transport *t, int peer, int ring, size_t off, uint64_t stamp)
{
  struct shm *s = t->impl;
  _Atomic uint64_t *w = (_Atomic uint64_t *)(data_at(s, s->node_of[peer], ring, s->rank) + off);
  atomic_store_explicit(w, stamp, memory_order_release);
}

static uint64_t shm_load_head(struct mbc_transport *t, int peer, int ring)
{
  struct shm *s = t->impl;
  return atomic_load_explicit(head_at(s, s->node_of[peer], ring, s->rank), memory_order_acquire);
}

static unsigned char *shm_data(struct mbc_transport *t, int peer, int ring)
{
  struct shm *s = t->impl;
  return data_at(s, s->rank, ring, s->node_of[peer]);
}

static void shm_publish_head(struct mbc_transport *t, int peer, int ring, uint64_t head)
{
  struct shm *s = t->impl;
  atomic_store_explicit(head_at(s, s->rank, ring, s->node_of[peer]), head, memory_order_release);
}

static int shm_direct_write(struct mbc_transport *t, int peer, uint64_t addr, const void *src,
                            size_t len)
{
  struct shm *s = t->impl;
  int q = s->node_of[peer];
  if (q == s->rank) {
    memcpy((void *)(uintptr_t)addr, src, len);
    return TIERS_OK;
  }
  size_t done = 0;
  while (done < len) {
    struct iovec local = {(void *)((const char *)src + done), len - done};
    struct iovec remote = {(void *)(uintptr_t)(addr + done), len - done};
    ssize_t w = process_vm_writev(s->pid[q], &local, 1, &remote, 1, 0);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return tiers_error_set(TIERS_ERR_SYS, __FILE__, __LINE__,
                             "direct write of %zu bytes to rank %d (pid %d) failed: "
                             "process_vm_writev: %s",
                             len, peer, (int)s->pid[q], strerror(errno));
    }
    if (w == 0)
      return tiers_error_set(TIERS_ERR_SYS, __FILE__, __LINE__,
                             "direct write to rank %d made no progress", peer);
    done += (size_t)w;
  }
  return TIERS_OK;
}

static int shm_direct_read(struct mbc_transport *t, int peer, uint64_t addr, void *dst,
                           size_t len)
{
  struct shm *s = t->impl;
  int q = s->node_of[peer];
  if (q == s->rank) {
    memcpy(dst, (const void *)(uintptr_t)addr, len);
    return TIERS_OK;
  }
  size_t done = 0;
  while (done < len) {
    struct iovec local = {(char *)dst + done, len - done};
    struct iovec remote = {(void *)(uintptr_t)(addr + done), len - done};
    ssize_t got = process_vm_readv(s->pid[q], &local, 1, &remote, 1, 0);
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return tiers_error_set(TIERS_ERR_SYS, __FILE__, __LINE__,
                             "direct read of %zu bytes from rank %d (pid %d) failed: "
                             "process_vm_readv: %s",
                             len, peer, (int)s->pid[q], strerror(errno));
    }
    if (got == 0)
      return tiers_error_set(TIERS_ERR_SYS, __FILE__, __LINE__,
                             "direct read from rank %d made no progress", peer);
    done += (size_t)got;
  }
  return TIERS_OK;
}

static int shm_peer_alive(struct mbc_transport *t, int peer)
{
  struct shm *s = t->impl;
  return !(kill(s->pid[s->node_of[peer]], 0) != 0 && errno == ESRCH);
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
  free(s->node_of);
  free(s);
  free(t);
  return rc;
}

/* Can this process write into every other one with process_vm_writev, and
 * read from it with process_vm_readv?  Each process writes its rank + 1
 * into a probe word of every peer, then reads it back from there.  (Yama's
 * ptrace_scope 1, or a container without CAP_SYS_PTRACE between ranks of
 * different users, refuses both with EPERM.) */
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
    for (int p = 0; p < n; p++) {
      if (p == s->rank)
        continue;
      if (probe[p] != (uint64_t)p + 1)
        ok = 0;
      uint64_t back = 0;
      struct iovec local = {&back, sizeof back};
      struct iovec remote = {(void *)(uintptr_t)(addrs[p] + sizeof(uint64_t) * (size_t)s->rank),
                             sizeof back};
      if (process_vm_readv(s->pid[p], &local, 1, &remote, 1, 0) != (ssize_t)sizeof back ||
          back != (uint64_t)s->rank + 1)
        ok = 0;
    }
    /* nobody frees its probe words while a peer may still read them */
    if (rc == TIERS_OK && MPI_Barrier(s->node) != MPI_SUCCESS)
      rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Barrier failed");
  }
  if (rc == TIERS_OK &&
      MPI_Allreduce(&ok, ok_all, 1, MPI_INT, MPI_MIN, s->node) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Allreduce failed");
  free(probe);
  free(addrs);
  return rc;
}

static void shm_free_partial(struct shm *s, struct mbc_transport *t)
{
  if (s) {
    free(s->seg);
    free(s->pid);
    free(s->node_of);
    if (s->node != MPI_COMM_NULL)
      MPI_Comm_free(&s->node);
  }
  free(s);
  free(t);
}

int mbc_shm_create(MPI_Comm comm, size_t fifo_bytes, size_t req_bytes, int want_direct,
                   int require_all, int *local, struct mbc_transport **out)
{
  int n, rank, nn, nrank;
  *out = NULL;
  if (MPI_Comm_size(comm, &n) != MPI_SUCCESS || MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Comm_size/rank failed");
  MPI_Comm node;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
  MPI_Comm_size(node, &nn);
  MPI_Comm_rank(node, &nrank);
  int all_local = nn == n, all_local_min = 0;
  MPI_Allreduce(&all_local, &all_local_min, 1, MPI_INT, MPI_MIN, comm);
  if (require_all && !all_local_min) {
    MPI_Comm_free(&node);
    TIERS_ERROR(TIERS_ERR_UNSUPPORTED,
                "the communicator spans more than one node and the shared-memory "
                "transport was required (use transport auto or rma)");
  }
  struct shm *s = calloc(1, sizeof *s);
  struct mbc_transport *t = calloc(1, sizeof *t);
  if (s) {
    s->node = node;
    s->seg = calloc((size_t)nn, sizeof *s->seg);
    s->pid = calloc((size_t)nn, sizeof *s->pid);
    s->node_of = malloc((size_t)n * sizeof *s->node_of);
  }
  int ok = s && t && s->seg && s->pid && s->node_of, ok_all = 0;
  MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_MIN, comm);
  if (!ok_all) {
    if (!s)
      MPI_Comm_free(&node);
    shm_free_partial(s, t);
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory creating the shared-memory transport");
  }
  s->n = nn;
  s->rank = nrank;
  s->cap[MBC_RING_MSG] = fifo_bytes;
  s->cap[MBC_RING_REQ] = req_bytes;
  /* which communicator ranks share my node, and their node ranks */
  int *members = malloc((size_t)nn * sizeof *members);
  if (!members || MPI_Allgather(&rank, 1, MPI_INT, members, 1, MPI_INT, node) != MPI_SUCCESS) {
    free(members);
    shm_free_partial(s, t);
    TIERS_ERROR(TIERS_ERR_MPI, "exchanging the node's ranks failed");
  }
  for (int p = 0; p < n; p++)
    s->node_of[p] = -1;
  for (int q = 0; q < nn; q++)
    s->node_of[members[q]] = q;
  free(members);
  for (int p = 0; p < n; p++)
    local[p] = s->node_of[p] >= 0;

  size_t bytes = sizeof(struct head_line) * 2 * (size_t)nn + (fifo_bytes + req_bytes) * (size_t)nn;
  bytes = round_up(bytes, 4096) + MBC_LINE; /* room to align the segment to a line */

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  unsigned char *base = NULL;
  int mrc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, node, &base, &s->win);
  MPI_Info_free(&info);
  if (mrc != MPI_SUCCESS) {
    shm_free_partial(s, t);
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Win_allocate_shared of %zu bytes failed", bytes);
  }
  memset(base, 0, bytes);
  /* MPI need not align the segments: each process aligns its own and tells
   * the others how far it moved (the mappings agree modulo the page size,
   * so everyone sees the same lines) */
  int pad = (int)((MBC_LINE - (uintptr_t)base % MBC_LINE) % MBC_LINE), *pads = NULL;
  pads = malloc((size_t)nn * sizeof *pads);
  if (!pads || MPI_Allgather(&pad, 1, MPI_INT, pads, 1, MPI_INT, node) != MPI_SUCCESS) {
    free(pads);
    MPI_Win_free(&s->win);
    shm_free_partial(s, t);
    TIERS_ERROR(TIERS_ERR_MPI, "exchanging the segment alignment failed");
  }
  for (int q = 0; q < nn; q++) {
    MPI_Aint size;
    int disp;
    void *ptr = NULL;
    MPI_Win_shared_query(s->win, q, &size, &disp, &ptr);
    s->seg[q] = (unsigned char *)ptr + pads[q];
  }
  free(pads);
  int pid_int = (int)getpid(), *pids = malloc((size_t)nn * sizeof *pids);
  int rc = TIERS_OK;
  if (!pids)
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
  else if (MPI_Allgather(&pid_int, 1, MPI_INT, pids, 1, MPI_INT, node) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Allgather of pids failed");
  if (rc == TIERS_OK)
    for (int q = 0; q < nn; q++)
      s->pid[q] = (pid_t)pids[q];
  free(pids);
  if (rc == TIERS_OK && MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Win_lock_all failed");
  int direct = 0;
  if (rc == TIERS_OK && want_direct)
    rc = probe_cma(s, &direct);
  /* the same answer on every node: direct writes are used everywhere or nowhere */
  int direct_all = direct;
  if (rc == TIERS_OK && MPI_Allreduce(&direct, &direct_all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Allreduce failed");
  /* every segment is zeroed before anyone uses it */
  if (rc == TIERS_OK && MPI_Barrier(node) != MPI_SUCCESS)
    rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Barrier failed");
  t->name = "shm";
  t->direct = direct_all;
  t->impl = s;
  t->capacity[MBC_RING_MSG] = fifo_bytes;
  t->capacity[MBC_RING_REQ] = req_bytes;
  t->put = shm_put;
  t->put_stamp = shm_put_stamp;
  t->load_head = shm_load_head;
  t->data = shm_data;
  t->publish_head = shm_publish_head;
  t->poll = NULL;
  t->direct_write = shm_direct_write;
  t->direct_read = shm_direct_read;
  t->peer_alive = shm_peer_alive;
  t->destroy = shm_destroy;
  if (rc != TIERS_OK) {
    shm_destroy(t);
    return rc;
  }
  *out = t;
  return TIERS_OK;
}
