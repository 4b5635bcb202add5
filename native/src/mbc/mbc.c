/*
 * libtiers-mbc: the MPI/MBCF protocol (seed 001 §2.2) and the
 * point-to-point API of tiers/mbc.h.  docs/mbc.md is the long form of the
 * comments here.
 *
 * Send (per destination, in the order the sends were started; only the
 * oldest unfinished send to a destination moves, which gives MPI's
 * non-overtaking order):
 *   1. read the send requests the destination has written into my request
 *      FIFO; a request still valid and matching the message's tag takes it:
 *      the message is written straight into the receive buffer
 *      (process_vm_writev) and an MBC_E_DIRECT notice goes into the FIFO;
 *      shorter than direct_min_bytes, it travels through the FIFO as an
 *      answer (MBC_E_ANSWER) to that request;
 *   2. otherwise the message goes into my message FIFO in the destination's
 *      memory (MBC_E_FIRST, then MBC_E_MORE chunks when it is longer than
 *      the free space) and is counted: fifo_sent.
 * Receive:
 *   1. look through the messages already taken from the FIFOs (unexpected);
 *   2. drain the FIFO(s) of the source(s), matching each message against
 *      the posted receives in posting order, queueing the others;
 *   3. still unmatched and from a known source: send a send request that
 *      carries fifo_seen, the number of unasked messages of that sender
 *      taken from its FIFO so far.
 * Races: the sender keeps a request only when fifo_seen == fifo_sent (no
 * unasked message was in flight when the receiver asked) and floor >
 * dropped_max (no receive whose request was dropped earlier still waits
 * before it); otherwise it drops the request as stale and the receiver
 * matches the FIFO copy, as it does for any posted receive.  The receiver
 * sends a request only when no wildcard-source receive and no receive
 * from that source without a request is pending before it, so the
 * sender's list of valid requests is always the receiver's list of
 * pending receives from it, in order.
 *
 * Fast path: a message of up to 32 bytes is one cache line in the FIFO
 * (header and payload, stamp stored last); a blocking send of such a
 * message to a destination with nothing queued is written at once, with
 * no request object (send_line); a wait on a receive from a known source
 * polls that source's FIFO first and looks at the others only every few
 * idle rounds, back to back for its first rounds (no pause hint); requests
 * come from a free list; receives with less room than direct_min_bytes
 * send no request (the answer would go through the FIFO anyway).
 *
 * Synchronous sends (MPI_Ssend): an unasked FIFO message carries
 * MBC_F_SYNC in its kind; the receive that takes it writes an MBC_E_ACK
 * into the request FIFO in the sender's memory, and only then is the send
 * done.  Cancel of a receive that sent a send request: MBC_E_WITHDRAW to
 * the sender, which forgets the request and confirms with
 * MBC_E_WITHDRAWN behind whatever it already wrote for it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* shm.c's process_vm_readv/writev, where a file includes both */
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/wait.h"
#include "mbc_internal.h"

enum { REQ_SEND = 1, REQ_RECV = 2 };

void (*mbc_sent_hook)(size_t bytes, int tag, int direct);
void (*mbc_idle_hook)(tiers_mbc_t waiting);

/* Waiting (common/wait.h has the reasoning): an idle wait spins for a
 * learned time (up to WAIT_SPIN_CAP_NS), then blocks.  The peers are other
 * processes and no futex word is shared with them, so blocking is a nap
 * (nanosleep) that grows with the time already waited (a sixteenth of it,
 * WAIT_NAP_MIN_NS to WAIT_NAP_MAX_NS), so that a message that arrives
 * during a nap is seen at most ~6 % late; a woken napper preempts a busy
 * neighbour at once, where a yielding process waits for the end of the
 * neighbour's time slice.  On a node with more processes than CPUs a wait
 * yields after 16 idle rounds instead: the CPU goes to a peer that needs
 * it, and naps measured slower there (bench/barrier_noise, mbc_vs_mpi). */
#define WAIT_SPIN_CAP_NS 200000u
#define WAIT_SPIN_FLOOR_NS 2000u
#define WAIT_SPIN_CAP_OVERSUBSCRIBED_NS 0u
#define WAIT_NAP_MIN_NS 5000
#define WAIT_NAP_MAX_NS 100000
/* The first idle rounds of a wait poll back to back, without a CPU relax
 * hint: a pause costs up to ~140 cycles on recent x86 cores, which a
 * message arriving within a microsecond (a round trip's reply) would wait
 * out after its line has arrived.  Later rounds relax. */
#define WAIT_HOT_ROUNDS 64

struct tiers_mbc_request {
  int kind;
  int done;
  tiers_mbc_status_t st;
  struct tiers_mbc_request *all_prev, *all_next; /* every live request */
  struct tiers_mbc_request *prev, *next;         /* posted list / send queue */
  int peer, tag;
  /* send */
  const unsigned char *sbuf;
  size_t len, pushed;
  int started;      /* first chunk is in the FIFO */
  int answer;       /* answers send request `rseq` */
  int blocked;      /* last attempt found the FIFO full */
  int sync;         /* synchronous: done only when the receiver matched it */
  int acked;        /* synchronous: the receiver's acknowledgement came */
  int read;         /* left for the receiver to copy (MBC_E_READ): done on its
                       acknowledgement, after the copy */
  uint64_t fseq;    /* synchronous or read, unasked: its FIFO sequence number */
  int split;        /* copied half by me, half by the receiver (MBC_E_SPLIT):
                       done on its MBC_E_COPIED for send request rseq */
  /* receive */
  unsigned char *rbuf;
  size_t cap;
  uint64_t rseq;    /* its send request (0: none) */
  int unasked;      /* counted in peer.norequest */
  int posted;       /* in the posted list */
  int withdrawing;  /* cancelled: waiting for the sender's MBC_E_WITHDRAWN */
};

/* A message taken from a FIFO before its receive was posted. */
struct unexp {
  struct unexp *prev, *next;
  int source, tag;
  size_t total, got;
  unsigned char *data;
  tiers_mbc_request_t claimed; /* a receive waiting for the rest of it */
  int sync;                    /* synchronous: acknowledge when a receive takes it */
  int read;                    /* MBC_E_READ: the bytes are still in the sender's
                                  buffer at raddr; acknowledge after the copy */
  uint64_t raddr;
  uint64_t fseq;               /* its FIFO sequence number */
  unsigned char inl[MBC_SLOT - MBC_HDR]; /* data of a one-line message (no malloc) */
};

/* A valid send request held by the sender. */
struct held {
  uint64_t rseq, addr, cap;
  int tag;
};

struct peer {
  struct mbc_transport *tp; /* shared memory or RMA */
  /* as sender to this peer */
  uint64_t tail[2], head_cache[2];
  uint64_t fifo_sent, dropped_max;
  tiers_mbc_request_t sq_head, sq_tail;
  struct held *held;
  size_t nheld, held_cap;
  tiers_mbc_request_t ack_head, ack_tail; /* sends written, awaiting MBC_E_ACK
                                             (synchronous, or left to be read),
                                             oldest first */
  int ack_wait;                 /* synchronous and read sends not yet acknowledged */
  /* as receiver from this peer */
  unsigned char *rx[2];         /* the rings this peer writes in my memory (tp->data) */
  uint64_t head[2];
  uint64_t fifo_seen, req_issued;
  int norequest;
  uint64_t *acks_out;           /* acknowledgements the request ring had no room for */
  size_t nacks_out, acks_out_cap;
  /* as sender: withdrawn send requests still to confirm (MBC_E_WITHDRAWN) */
  uint64_t *wd_out;
  size_t nwd_out, wd_out_cap;
  /* the receive an MBC_E_SPLIT of this peer matched, completed by the
   * MBC_E_DIRECT that follows it */
  tiers_mbc_request_t split_recv;
  /* the message from this peer being assembled chunk by chunk */
  int asm_active;
  tiers_mbc_request_t asm_recv;
  struct unexp *asm_ux;
  size_t asm_total, asm_got;
  int asm_tag;
};

struct counters {
  uint64_t msgs_sent, bytes_sent, msgs_direct, bytes_direct, msgs_fifo, bytes_fifo,
      msgs_answered_fifo, bytes_answered_fifo, fifo_chunks, fifo_full_waits, requests_sent,
      requests_received, requests_used, requests_stale, requests_unsent, msgs_received,
      bytes_received, msgs_unexpected, truncations, msgs_shm, bytes_shm, msgs_rma, bytes_rma,
      msgs_read, bytes_read, msgs_split;
};

struct tiers_mbc {
  struct tiers_mbc *live_next;                  /* registry of live handles */
  MPI_Comm comm;
  int rank, size;
  tiers_mbc_options_t opt;
  struct mbc_transport *shm, *rma;              /* either may be NULL */
  int direct;                                   /* direct writes to some peer */
  size_t read_min;                              /* unasked messages at least this long to
                                                   a node peer are left to be read (single
                                                   copy); SIZE_MAX: never */
  size_t split_min;                             /* answers to send requests at least this
                                                   long are copied half by each side
                                                   (MBC_E_SPLIT); SIZE_MAX: never */
  int reads_waiting;                            /* unexpected messages left to be read
                                                   (not synchronous) and not taken */
  tiers_mbc_request_t pool;                     /* free requests */
  struct peer *peers;
  tiers_mbc_request_t all;                      /* live requests */
  tiers_mbc_request_t posted_head, posted_tail; /* posted receives */
  struct unexp *ux_head, *ux_tail;
  struct unexp *ux_pool;                        /* free unexpected-message records */
  int anysrc_pending;
  int fifo_first_left;
  int fatal;                                    /* a protocol error: every call fails */
  char fatal_msg[256];
  struct counters c;
  double t0;
  tiers_spin_t spin;                            /* learned spin time of idle waits, ns */
  int oversubscribed;                           /* more processes on this node than CPUs */
};

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* ------------------------------------------------------------------ */
/* Options */

static int env_double(const char *name, double *v)
{
  const char *s = getenv(name);
  if (!s || !*s)
    return TIERS_OK;
  char *end;
  errno = 0;
  double d = strtod(s, &end);
  if (errno || *end || d < 0)
    TIERS_ERROR(TIERS_ERR_ARG, "%s=%s is not a number of seconds >= 0", name, s);
  *v = d;
  return TIERS_OK;
}

static int env_int(const char *name, int *v)
{
  const char *s = getenv(name);
  if (!s || !*s)
    return TIERS_OK;
  char *end;
  errno = 0;
  long l = strtol(s, &end, 10);
  if (errno || *end || l < 0 || l > 1000000000L)
    TIERS_ERROR(TIERS_ERR_ARG, "%s=%s is not a count >= 0", name, s);
  *v = (int)l;
  return TIERS_OK;
}

int tiers_mbc_options_init(tiers_mbc_options_t *opts)
{
  if (!opts)
    TIERS_ERROR(TIERS_ERR_ARG, "options pointer is NULL");
  memset(opts, 0, sizeof *opts);
  opts->fifo_bytes = 65536;
  opts->request_slots = 64;
  opts->direct_min_bytes = 16384;
  opts->timeout_s = 0;
  opts->direct = TIERS_MBC_DIRECT_AUTO;
  opts->transport = TIERS_MBC_TRANSPORT_AUTO;
  TIERS_CALL(env_double("TIERS_MBC_TIMEOUT_S", &opts->timeout_s));
  TIERS_CALL(env_int("TIERS_MBC_DEBUG_FIFO_FIRST", &opts->debug_fifo_first));
  const char *tr = getenv("TIERS_MBC_TRANSPORT");
  if (tr && *tr) {
    if (!strcmp(tr, "auto"))
      opts->transport = TIERS_MBC_TRANSPORT_AUTO;
    else if (!strcmp(tr, "shm"))
      opts->transport = TIERS_MBC_TRANSPORT_SHM;
    else if (!strcmp(tr, "rma"))
      opts->transport = TIERS_MBC_TRANSPORT_RMA;
    else
      TIERS_ERROR(TIERS_ERR_ARG, "TIERS_MBC_TRANSPORT=%s is not auto, shm or rma", tr);
  }
  return TIERS_OK;
}

/* A path's switch and threshold from the environment: SWITCH=0 turns the
 * path off (*min = SIZE_MAX), SWITCH=1 or unset leaves it on, MIN=BYTES
 * (lo..2^40) moves its threshold from the *min given. */
static int env_path_threshold(const char *sw, const char *mn, unsigned long long lo, size_t *min)
{
  const char *s = getenv(sw);
  if (s && *s) {
    if (!strcmp(s, "0")) {
      *min = SIZE_MAX;
      return TIERS_OK;
    }
    if (strcmp(s, "1"))
      TIERS_ERROR(TIERS_ERR_ARG, "%s=%s is not 0 or 1", sw, s);
  }
  s = getenv(mn);
  if (s && *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || *s == '-' || v < lo || v > ((unsigned long long)1 << 40))
      TIERS_ERROR(TIERS_ERR_ARG, "%s=%s is not a byte count in %llu..2^40", mn, s, lo);
    *min = (size_t)v;
  }
  return TIERS_OK;
}

/* The single-copy rendezvous for unasked messages: on, from
 * direct_min_bytes up, wherever direct writes work; TIERS_MBC_SINGLE_COPY=0
 * turns it off (every unasked message then goes through the FIFO, the
 * two-copy path), TIERS_MBC_SINGLE_COPY_MIN=BYTES moves its threshold. */
static int read_threshold(const tiers_mbc_options_t *o, size_t *min)
{
  *min = o->direct_min_bytes < 64 ? 64 : o->direct_min_bytes;
  return env_path_threshold("TIERS_MBC_SINGLE_COPY", "TIERS_MBC_SINGLE_COPY_MIN", 64, min);
}

/* The split copy of long messages answering a send request (MBC_E_SPLIT):
 * on from 64 KiB wherever direct writes work; TIERS_MBC_SPLIT=0 turns it
 * off (the sender then copies the whole message), TIERS_MBC_SPLIT_MIN=BYTES
 * moves its threshold (never below direct_min_bytes: shorter answers go
 * through the FIFO). */
#define SPLIT_MIN_DEFAULT 65536
static int split_threshold(const tiers_mbc_options_t *o, size_t *min)
{
  *min = SPLIT_MIN_DEFAULT;
  TIERS_CALL(env_path_threshold("TIERS_MBC_SPLIT", "TIERS_MBC_SPLIT_MIN", 8192, min));
  if (*min < o->direct_min_bytes)
    *min = o->direct_min_bytes;
  return TIERS_OK;
}

/* ------------------------------------------------------------------ */
/* Live handles: a call on a destroyed communicator (a stale copy of its
 * handle) is refused instead of touching freed memory. */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tiers_mbc *live_head;
/* Bumped by every destroy: a thread's last handle found live (below) is
 * still live while the generation it was found in is current. */
static _Atomic unsigned live_gen;
static __thread const struct tiers_mbc *live_seen;
static __thread unsigned live_seen_gen;

static void live_add(struct tiers_mbc *m)
{
  pthread_mutex_lock(&live_lock);
  m->live_next = live_head;
  live_head = m;
  pthread_mutex_unlock(&live_lock);
}

static void live_remove(struct tiers_mbc *m)
{
  pthread_mutex_lock(&live_lock);
  for (struct tiers_mbc **pp = &live_head; *pp; pp = &(*pp)->live_next)
    if (*pp == m) {
      *pp = m->live_next;
      break;
    }
  atomic_fetch_add_explicit(&live_gen, 1, memory_order_release);
  pthread_mutex_unlock(&live_lock);
}

static int live_has(const struct tiers_mbc *m)
{
  /* the common case, one communicator, needs no lock: the list head is
   * only replaced by create/destroy, which are collective */
  const struct tiers_mbc *h = __atomic_load_n(&live_head, __ATOMIC_ACQUIRE);
  if (h == m)
    return 1;
  /* a program that works on several communicators (MPI_COMM_SELF, dups,
   * splits) takes the lock once per communicator and destroy, not per call */
  if (m == live_seen && live_seen_gen == atomic_load_explicit(&live_gen, memory_order_acquire))
    return 1;
  pthread_mutex_lock(&live_lock);
  int found = 0;
  for (h = live_head; h && !found; h = h->live_next)
    found = h == m;
  if (found) {
    live_seen = m;
    live_seen_gen = atomic_load_explicit(&live_gen, memory_order_relaxed);
  }
  pthread_mutex_unlock(&live_lock);
  return found;
}

/* ------------------------------------------------------------------ */
/* Lifecycle */

int tiers_mbc_create(MPI_Comm comm, const tiers_mbc_options_t *opts, tiers_mbc_t *out)
{
  if (!out)
    TIERS_ERROR(TIERS_ERR_ARG, "output handle pointer is NULL");
  *out = NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited)
    TIERS_ERROR(TIERS_ERR_STATE, "MPI is not initialised");
  if (comm == MPI_COMM_NULL)
    TIERS_ERROR(TIERS_ERR_ARG, "communicator is MPI_COMM_NULL");
  tiers_mbc_options_t o;
  if (opts)
    o = *opts;
  else
    TIERS_CALL(tiers_mbc_options_init(&o));
  if (o.fifo_bytes < 4096 || o.fifo_bytes > ((size_t)1 << 30))
    TIERS_ERROR(TIERS_ERR_ARG, "fifo_bytes %zu is outside 4096..1 GiB", o.fifo_bytes);
  if (o.request_slots < 4 || o.request_slots > (1 << 20))
    TIERS_ERROR(TIERS_ERR_ARG, "request_slots %d is outside 4..1048576", o.request_slots);
  if (!(o.timeout_s >= 0))
    TIERS_ERROR(TIERS_ERR_ARG, "timeout_s must be >= 0");
  if (o.direct != TIERS_MBC_DIRECT_AUTO && o.direct != TIERS_MBC_DIRECT_OFF)
    TIERS_ERROR(TIERS_ERR_ARG, "direct must be TIERS_MBC_DIRECT_AUTO or _OFF, not %d", o.direct);
  if (o.debug_fifo_first < 0)
    TIERS_ERROR(TIERS_ERR_ARG, "debug_fifo_first must be >= 0");
  if (o.transport != TIERS_MBC_TRANSPORT_AUTO && o.transport != TIERS_MBC_TRANSPORT_SHM &&
      o.transport != TIERS_MBC_TRANSPORT_RMA)
    TIERS_ERROR(TIERS_ERR_ARG, "transport must be TIERS_MBC_TRANSPORT_AUTO, _SHM or _RMA, not %d",
                o.transport);
  o.fifo_bytes = (o.fifo_bytes + 63) / 64 * 64;
  size_t read_min, split_min;
  TIERS_CALL(read_threshold(&o, &read_min));
  TIERS_CALL(split_threshold(&o, &split_min));

  struct tiers_mbc *m = calloc(1, sizeof *m);
  if (!m)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory");
  if (MPI_Comm_dup(comm, &m->comm) != MPI_SUCCESS) {
    free(m);
    TIERS_ERROR(TIERS_ERR_MPI, "MPI_Comm_dup failed");
  }
  MPI_Comm_rank(m->comm, &m->rank);
  MPI_Comm_size(m->comm, &m->size);
  m->opt = o;
  m->read_min = read_min;
  m->split_min = split_min;
  m->fifo_first_left = o.debug_fifo_first;
  m->peers = calloc((size_t)m->size, sizeof *m->peers);
  /* everyone must learn whether everyone could allocate */
  int ok = m->peers != NULL, ok_all = 0;
  MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_MIN, m->comm);
  if (!ok_all) {
    free(m->peers);
    MPI_Comm_free(&m->comm);
    free(m);
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory for the peer table");
  }
  size_t req_bytes = (size_t)o.request_slots * MBC_SREQ;
  int rc = TIERS_OK, need_rma = o.transport == TIERS_MBC_TRANSPORT_RMA;
  int *local = calloc((size_t)m->size, sizeof *local);
  if (!local)
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
  if (rc == TIERS_OK && o.transport != TIERS_MBC_TRANSPORT_RMA) {
    rc = mbc_shm_create(m->comm, o.fifo_bytes, req_bytes, o.direct == TIERS_MBC_DIRECT_AUTO,
                        o.transport == TIERS_MBC_TRANSPORT_SHM, local, &m->shm);
    if (rc == TIERS_OK) {
      int remote = 0, any_remote = 0;
      for (int i = 0; i < m->size; i++)
        remote |= !local[i];
      MPI_Allreduce(&remote, &any_remote, 1, MPI_INT, MPI_MAX, m->comm);
      need_rma = any_remote;
    }
  }
  if (rc == TIERS_OK && need_rma)
    rc = mbc_rma_create(m->comm, o.fifo_bytes, req_bytes, &m->rma);
  if (rc != TIERS_OK) {
    if (m->shm)
      m->shm->destroy(m->shm);
    free(local);
    free(m->peers);
    MPI_Comm_free(&m->comm);
    free(m);
    return rc;
  }
  for (int i = 0; i < m->size; i++) {
    m->peers[i].tp = m->shm && local[i] ? m->shm : m->rma;
    /* the local ring areas are fixed for the transport's life */
    m->peers[i].rx[MBC_RING_MSG] = m->peers[i].tp->data(m->peers[i].tp, i, MBC_RING_MSG);
    m->peers[i].rx[MBC_RING_REQ] = m->peers[i].tp->data(m->peers[i].tp, i, MBC_RING_REQ);
    if (m->peers[i].tp->direct && i != m->rank)
      m->direct = 1;
  }
  if (m->shm && m->shm->direct)
    m->direct = 1;
  /* More processes on this node than CPUs: a waiting process holds a CPU a
   * peer needs, so it spins briefly and yields first when it blocks. */
  int on_node = 0;
  for (int i = 0; i < m->size; i++)
    on_node += m->shm ? local[i] != 0 : i == m->rank;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  m->oversubscribed = cpus > 0 && on_node > cpus;
  tiers_spin_init(&m->spin, m->oversubscribed ? WAIT_SPIN_CAP_OVERSUBSCRIBED_NS : WAIT_SPIN_CAP_NS,
                  0);
  m->spin.floor = m->oversubscribed ? WAIT_SPIN_CAP_OVERSUBSCRIBED_NS : WAIT_SPIN_FLOOR_NS;
  free(local);
  m->t0 = now_s();
  live_add(m);
  *out = m;
  return TIERS_OK;
}

int tiers_mbc_transport_name(tiers_mbc_t m, const char **name)
{
  if (!name)
    TIERS_ERROR(TIERS_ERR_ARG, "name pointer is NULL");
  TIERS_CALL(mbc_check(m));
  int nshm = 0, nrma = 0;
  for (int i = 0; i < m->size; i++) {
    nshm += m->peers[i].tp == m->shm;
    nrma += m->peers[i].tp == m->rma;
  }
  *name = nrma == 0 ? "shm" : nshm == 0 ? "rma" : "shm+rma";
  return TIERS_OK;
}

int mbc_check(tiers_mbc_t m)
{
  if (!m)
    TIERS_ERROR(TIERS_ERR_ARG, "memory-based communicator handle is NULL (destroyed?)");
  if (!live_has(m))
    TIERS_ERROR(TIERS_ERR_STATE, "memory-based communicator was destroyed (stale handle)");
  if (m->fatal)
    TIERS_ERROR(TIERS_ERR_STATE, "memory-based communicator is broken: %s", m->fatal_msg);
  return TIERS_OK;
}

MPI_Comm mbc_comm(tiers_mbc_t m) { return m->comm; }

int tiers_mbc_rank(tiers_mbc_t m, int *rank, int *size)
{
  if (!m)
    TIERS_ERROR(TIERS_ERR_ARG, "memory-based communicator handle is NULL (destroyed?)");
  if (!live_has(m))
    TIERS_ERROR(TIERS_ERR_STATE, "memory-based communicator was destroyed (stale handle)");
  if (rank)
    *rank = m->rank;
  if (size)
    *size = m->size;
  return TIERS_OK;
}

/* ------------------------------------------------------------------ */
/* Request bookkeeping */

static tiers_mbc_request_t req_new(tiers_mbc_t m, int kind)
{
  tiers_mbc_request_t r = m->pool;
  if (r) {
    m->pool = r->all_next;
    memset(r, 0, sizeof *r);
  } else if (!(r = calloc(1, sizeof *r))) {
    return NULL;
  }
  r->kind = kind;
  r->all_next = m->all;
  if (m->all)
    m->all->all_prev = r;
  m->all = r;
  return r;
}

static void req_free(tiers_mbc_t m, tiers_mbc_request_t r)
{
  if (r->all_prev)
    r->all_prev->all_next = r->all_next;
  else
    m->all = r->all_next;
  if (r->all_next)
    r->all_next->all_prev = r->all_prev;
  r->kind = 0; /* marks a pooled request */
  r->all_next = m->pool;
  m->pool = r;
}

static void posted_remove(tiers_mbc_t m, tiers_mbc_request_t r)
{
  if (!r->posted)
    return;
  if (r->prev)
    r->prev->next = r->next;
  else
    m->posted_head = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    m->posted_tail = r->prev;
  r->prev = r->next = NULL;
  r->posted = 0;
  if (r->peer == TIERS_MBC_ANY_SOURCE)
    m->anysrc_pending--;
  if (r->unasked) {
    m->peers[r->peer].norequest--;
    r->unasked = 0;
  }
}

static int tag_matches(int want, int tag)
{
  return want == tag || (want == TIERS_MBC_ANY_TAG && tag >= 0);
}

static tiers_mbc_request_t posted_match(tiers_mbc_t m, int source, int tag)
{
  for (tiers_mbc_request_t r = m->posted_head; r; r = r->next)
    if ((r->peer == source || r->peer == TIERS_MBC_ANY_SOURCE) && tag_matches(r->tag, tag))
      return r;
  return NULL;
}

static tiers_mbc_request_t posted_by_rseq(tiers_mbc_t m, int source, uint64_t rseq)
{
  for (tiers_mbc_request_t r = m->posted_head; r; r = r->next)
    if (r->peer == source && r->rseq == rseq)
      return r;
  return NULL;
}

/* Unlinks a delivered unexpected message from the list and frees it. */
static void ux_drop(tiers_mbc_t m, struct unexp *u)
{
  if (u->prev)
    u->prev->next = u->next;
  else
    m->ux_head = u->next;
  if (u->next)
    u->next->prev = u->prev;
  else
    m->ux_tail = u->prev;
  if (u->data != u->inl)
    free(u->data);
  u->next = m->ux_pool;
  m->ux_pool = u;
}

static void recv_complete(tiers_mbc_t m, tiers_mbc_request_t r, int source, int tag, size_t total)
{
  posted_remove(m, r);
  r->done = 1;
  r->st.source = source;
  r->st.tag = tag;
  r->st.message_bytes = total;
  r->st.bytes = total < r->cap ? total : r->cap;
  r->st.truncated = total > r->cap;
  r->st.error = r->st.truncated ? TIERS_ERR_ARG : TIERS_OK;
  m->c.msgs_received++;
  m->c.bytes_received += r->st.bytes;
  if (r->st.truncated)
    m->c.truncations++;
}

/* copy chunk [off, off+len) of a message into a receive buffer, cut at cap */
static void store_part(unsigned char *dst, size_t cap, size_t off, const unsigned char *src,
                       size_t len)
{
  if (off >= cap || len == 0)
    return;
  size_t n = cap - off < len ? cap - off : len;
  memcpy(dst + off, src, n);
}

static int set_fatal(tiers_mbc_t m, int code, const char *file, int line, const char *msg)
{
  m->fatal = code;
  snprintf(m->fatal_msg, sizeof m->fatal_msg, "%s", msg);
  return tiers_error_set(code, file, line, "memory-based communicator: %s", msg);
}
#define FATAL(m, code, msg) return set_fatal((m), (code), __FILE__, __LINE__, (msg))

/* ------------------------------------------------------------------ */
/* Ring access (the slot and stamp format is in mbc_internal.h) */

/* Offset of position pos in a ring of cap bytes: a mask for the default
 * power-of-two sizes (a 64-bit division costs tens of cycles per poll). */
static inline size_t ring_off(uint64_t pos, size_t cap)
{
  return (cap & (cap - 1)) == 0 ? (size_t)pos & (cap - 1) : (size_t)(pos % cap);
}

static size_t slot_up(size_t v) { return (v + MBC_SLOT - 1) & ~(size_t)(MBC_SLOT - 1); }

static uint64_t stamp_of(uint64_t pos, int kind) { return (pos + MBC_SLOT) | (uint64_t)kind; }

/* Kind of the entry at position pos of a ring in my memory, or 0 when the
 * producer has not written it yet (acquire: its bytes are visible after). */
static int ring_peek(unsigned char *data, size_t cap, uint64_t pos)
{
  _Atomic uint64_t *w = (_Atomic uint64_t *)(data + ring_off(pos, cap));
  uint64_t st = atomic_load_explicit(w, memory_order_acquire);
  if ((st & ~(uint64_t)(MBC_SLOT - 1)) != pos + MBC_SLOT)
    return 0;
  return (int)(st & (MBC_SLOT - 1));
}

/* Consumer: zero the first word of every slot after the first of a
 * consumed entry (before publishing the head that lets the producer reuse
 * its slots): those words held payload, which a later lap could mistake
 * for a stamp.  The entry's own first word is a stamp, (pos + 64) | kind,
 * and no later position of that slot has that value, so it stays: a
 * one-line message is never written by its receiver, which saves the
 * line's trip back to the receiver's cache on the small-message path. */
static void ring_clear(unsigned char *data, size_t cap, uint64_t pos, size_t len)
{
  unsigned char *e = data + ring_off(pos, cap);
  for (size_t k = MBC_SLOT; k < len; k += MBC_SLOT)
    atomic_store_explicit((_Atomic uint64_t *)(e + k), 0, memory_order_relaxed);
}

/* Producer: room in my ring at peer at the tail (*here) and after padding
 * to the ring's end (*wrapped).  Reads the consumer's head only when the
 * cached one does not show room for `need` bytes. */
static void ring_room(tiers_mbc_t m, int peer, int ring, size_t need, size_t *here,
                      size_t *wrapped)
{
  struct peer *p = &m->peers[peer];
  size_t cap = p->tp->capacity[ring];
  size_t cend = cap - ring_off(p->tail[ring], cap);
  size_t fr = cap - (size_t)(p->tail[ring] - p->head_cache[ring]);
  if (need <= cend ? fr < need : fr < cend + need) {
    p->head_cache[ring] = p->tp->load_head(p->tp, peer, ring);
    fr = cap - (size_t)(p->tail[ring] - p->head_cache[ring]);
  }
  *here = fr < cend ? fr : cend;
  *wrapped = fr > cend ? fr - cend : 0;
}

/* Producer: a PAD entry from the tail to the ring's end. */
static void ring_pad(tiers_mbc_t m, int peer, int ring)
{
  struct peer *p = &m->peers[peer];
  size_t cap = p->tp->capacity[ring];
  size_t off = ring_off(p->tail[ring], cap);
  p->tp->put_stamp(p->tp, peer, ring, off, stamp_of(p->tail[ring], MBC_E_PAD));
  p->tail[ring] += cap - off;
}

/* Producer: room for an entry of len bytes (a multiple of the slot),
 * padding first when it fits only at the ring's start.  0: no room. */
static int ring_place(tiers_mbc_t m, int peer, int ring, size_t len)
{
  size_t here, wrapped;
  ring_room(m, peer, ring, len, &here, &wrapped);
  if (len <= here)
    return 1;
  if (len > wrapped)
    return 0;
  ring_pad(m, peer, ring);
  return 1;
}

/* Producer: a message entry at my tail in peer's FIFO (room was made).
 * Up to 32 payload bytes share the header's line and go in one put. */
static void msg_write(tiers_mbc_t m, int peer, int kind, int tag, uint64_t total, uint64_t aux,
                      const unsigned char *payload, size_t chunk)
{
  struct peer *p = &m->peers[peer];
  struct mbc_transport *t = p->tp;
  size_t cap = t->capacity[MBC_RING_MSG];
  uint64_t pos = p->tail[MBC_RING_MSG];
  size_t off = ring_off(pos, cap);
  struct {
    struct mbc_hdr h;
    unsigned char pay[MBC_SLOT - MBC_HDR];
  } line;
  line.h.stamp = 0;
  line.h.tag = tag;
  line.h.chunk = (uint32_t)chunk;
  line.h.total = total;
  line.h.aux = aux;
  const size_t skip = sizeof line.h.stamp;
  if (chunk <= sizeof line.pay) {
    if (chunk)
      memcpy(line.pay, payload, chunk);
    t->put(t, peer, MBC_RING_MSG, off + skip, (const unsigned char *)&line + skip,
           MBC_HDR - skip + chunk);
  } else {
    t->put(t, peer, MBC_RING_MSG, off + skip, (const unsigned char *)&line + skip, MBC_HDR - skip);
    t->put(t, peer, MBC_RING_MSG, off + MBC_HDR, payload, chunk);
  }
  t->put_stamp(t, peer, MBC_RING_MSG, off, stamp_of(pos, kind));
  p->tail[MBC_RING_MSG] = pos + slot_up(MBC_HDR + chunk);
}

/* ------------------------------------------------------------------ */
/* Acknowledgements of synchronous sends (receiver -> sender, through the
 * request ring the receiver writes in the sender's memory) */

/* Writes one request-ring entry (MBC_E_ACK for FIFO message `seq`,
 * MBC_E_WITHDRAW for send request `seq`) to `peer`; 0 when the request
 * ring has no room now. */
static int req_entry_put(tiers_mbc_t m, int peer, int kind, uint64_t seq)
{
  struct peer *p = &m->peers[peer];
  struct mbc_transport *t = p->tp;
  size_t here, wrapped;
  ring_room(m, peer, MBC_RING_REQ, MBC_SREQ, &here, &wrapped);
  if (here < MBC_SREQ)
    return 0;
  struct mbc_sreq e;
  memset(&e, 0, sizeof e);
  e.rseq = seq;
  uint64_t pos = p->tail[MBC_RING_REQ];
  size_t off = ring_off(pos, t->capacity[MBC_RING_REQ]), skip = sizeof e.stamp;
  t->put(t, peer, MBC_RING_REQ, off + skip, (const unsigned char *)&e + skip, MBC_SREQ - skip);
  t->put_stamp(t, peer, MBC_RING_REQ, off, stamp_of(pos, kind));
  p->tail[MBC_RING_REQ] = pos + MBC_SREQ;
  return 1;
}

/* An acknowledgement: MBC_E_ACK of FIFO message seq, or, with COPIED_FLAG
 * set in seq, MBC_E_COPIED of send request seq (held in acks_out alike). */
#define COPIED_FLAG ((uint64_t)1 << 63)
static int ack_put(tiers_mbc_t m, int peer, uint64_t seq)
{
  if (seq & COPIED_FLAG)
    return req_entry_put(m, peer, MBC_E_COPIED, seq & ~COPIED_FLAG);
  return req_entry_put(m, peer, MBC_E_ACK, seq);
}

/* Sends the acknowledgements that waited for room, in order. */
static void flush_acks(tiers_mbc_t m, int peer)
{
  struct peer *p = &m->peers[peer];
  size_t k = 0;
  while (k < p->nacks_out && ack_put(m, peer, p->acks_out[k]))
    k++;
  memmove(p->acks_out, p->acks_out + k, (p->nacks_out - k) * sizeof *p->acks_out);
  p->nacks_out -= k;
}

/* A receive has matched synchronous message `seq` of `peer` (or copied
 * the message left to be read; with COPIED_FLAG: read its part of the
 * split message answering send request seq): tell it. */
static int send_ack(tiers_mbc_t m, int peer, uint64_t seq)
{
  struct peer *p = &m->peers[peer];
  if (p->nacks_out)
    flush_acks(m, peer);
  if (!p->nacks_out && ack_put(m, peer, seq))
    return TIERS_OK;
  if (p->nacks_out == p->acks_out_cap) {
    size_t nc = p->acks_out_cap ? 2 * p->acks_out_cap : 16;
    uint64_t *na = realloc(p->acks_out, nc * sizeof *na);
    if (!na)
      FATAL(m, TIERS_ERR_NOMEM, "out of memory holding acknowledgements");
    p->acks_out = na;
    p->acks_out_cap = nc;
  }
  p->acks_out[p->nacks_out++] = seq;
  return TIERS_OK;
}

/* ------------------------------------------------------------------ */
/* Receiver side: draining the message FIFO of one sender */

static void asm_finish(tiers_mbc_t m, int source)
{
  struct peer *p = &m->peers[source];
  if (p->asm_got < p->asm_total)
    return;
  p->asm_active = 0;
  if (p->asm_recv) {
    recv_complete(m, p->asm_recv, source, p->asm_tag, p->asm_total);
  } else {
    struct unexp *u = p->asm_ux;
    u->got = u->total;
    if (u->claimed) { /* a receive matched it while it was arriving */
      tiers_mbc_request_t r = u->claimed;
      store_part(r->rbuf, r->cap, 0, u->data, u->total);
      recv_complete(m, r, source, u->tag, u->total);
      ux_drop(m, u);
    }
  }
  p->asm_recv = NULL;
  p->asm_ux = NULL;
}

/* A record of a message taken from a FIFO before its receive was posted,
 * appended to the unexpected list; with_data: room for its bytes.  NULL:
 * out of memory. */
static struct unexp *ux_new(tiers_mbc_t m, int source, int tag, size_t total, int with_data)
{
  struct unexp *u = m->ux_pool;
  if (u)
    m->ux_pool = u->next;
  else
    u = malloc(sizeof *u);
  if (!u)
    return NULL;
  memset(u, 0, offsetof(struct unexp, inl));
  if (with_data) {
    u->data = total <= sizeof u->inl ? u->inl : malloc(total);
    if (!u->data) {
      u->next = m->ux_pool;
      m->ux_pool = u;
      return NULL;
    }
  }
  u->source = source;
  u->tag = tag;
  u->total = total;
  u->prev = m->ux_tail;
  if (m->ux_tail)
    m->ux_tail->next = u;
  else
    m->ux_head = u;
  m->ux_tail = u;
  m->c.msgs_unexpected++;
  return u;
}

/* The single-copy rendezvous, receiver side: copies the message of an
 * MBC_E_READ entry (total bytes at addr in the memory of source) into the
 * receive r, cut at its capacity, completes r, and acknowledges message
 * fseq, which completes the send: the sender's buffer is reused only after
 * the copy. */
static int read_message(tiers_mbc_t m, tiers_mbc_request_t r, int source, int tag, size_t total,
                        uint64_t addr, uint64_t fseq)
{
  struct peer *p = &m->peers[source];
  size_t n = total < r->cap ? total : r->cap;
  if (n) {
    int rc = p->tp->direct_read(p->tp, source, addr, r->rbuf, n);
    if (rc != TIERS_OK) {
      m->fatal = rc;
      snprintf(m->fatal_msg, sizeof m->fatal_msg, "%s", tiers_last_error());
      return rc;
    }
  }
  recv_complete(m, r, source, tag, total);
  return send_ack(m, source, fseq);
}

/* Called by a wait that has idled past its spin: the messages left to be
 * read for this process that no receive has taken yet (but those of
 * synchronous sends, which must wait for their match) are copied into its
 * own memory and acknowledged.  Their sends complete, as they would have
 * through the FIFO, so two processes that send long messages to each
 * other before they receive do not wait for each other forever. */
static int pull_reads(tiers_mbc_t m)
{
  for (struct unexp *u = m->ux_head; u && m->reads_waiting; u = u->next) {
    if (!u->read || u->sync)
      continue;
    unsigned char *d = malloc(u->total ? u->total : 1);
    if (!d)
      FATAL(m, TIERS_ERR_NOMEM, "out of memory buffering an unexpected message");
    struct peer *p = &m->peers[u->source];
    int rc = p->tp->direct_read(p->tp, u->source, u->raddr, d, u->total);
    if (rc != TIERS_OK) {
      free(d);
      m->fatal = rc;
      snprintf(m->fatal_msg, sizeof m->fatal_msg, "%s", tiers_last_error());
      return rc;
    }
    u->data = d;
    u->read = 0;
    m->reads_waiting--;
    TIERS_CALL(send_ack(m, u->source, u->fseq));
  }
  return TIERS_OK;
}

/* Handles one message entry of `source` (kind, header h, payload pay). */
static int msg_entry(tiers_mbc_t m, int source, int kind, int sync, const struct mbc_hdr *h,
                     const unsigned char *pay)
{
  struct peer *p = &m->peers[source];
  unsigned char *dst = NULL;
  size_t dcap = 0, off = 0;
  switch (kind) {
  case MBC_E_FIRST:
  case MBC_E_ANSWER: {
    if (p->asm_active)
      FATAL(m, TIERS_ERR_STATE, "corrupt FIFO: new message before the last one was whole");
    tiers_mbc_request_t r;
    if (kind == MBC_E_FIRST) {
      if (h->aux != p->fifo_seen + 1)
        FATAL(m, TIERS_ERR_STATE, "FIFO sequence number out of order");
      p->fifo_seen++;
      r = posted_match(m, source, h->tag);
      if (sync && r) /* matched on arrival: the synchronous sender may go on */
        TIERS_CALL(send_ack(m, source, h->aux));
    } else {
      r = posted_by_rseq(m, source, h->aux);
      if (!r)
        FATAL(m, TIERS_ERR_STATE, "FIFO answer to an unknown send request");
    }
    if (r && h->chunk == h->total) { /* whole message in one entry: the fast path */
      store_part(r->rbuf, r->cap, 0, pay, (size_t)h->chunk);
      recv_complete(m, r, source, h->tag, (size_t)h->total);
      return TIERS_OK;
    }
    p->asm_active = 1;
    p->asm_total = (size_t)h->total;
    p->asm_got = 0;
    p->asm_tag = h->tag;
    if (r) {
      posted_remove(m, r); /* matched: no later message may match it */
      p->asm_recv = r;
      dst = r->rbuf;
      dcap = r->cap;
    } else {
      struct unexp *u = ux_new(m, source, h->tag, (size_t)h->total, 1);
      if (!u)
        FATAL(m, TIERS_ERR_NOMEM, "out of memory buffering an unexpected message");
      u->sync = sync && kind == MBC_E_FIRST;
      u->fseq = h->aux;
      p->asm_ux = u;
      dst = u->data;
      dcap = u->total;
    }
    break;
  }
  case MBC_E_MORE:
    if (!p->asm_active || h->aux != p->asm_got)
      FATAL(m, TIERS_ERR_STATE, "corrupt FIFO: chunk out of place");
    off = p->asm_got;
    if (p->asm_recv) {
      dst = p->asm_recv->rbuf;
      dcap = p->asm_recv->cap;
    } else {
      dst = p->asm_ux->data;
      dcap = p->asm_ux->total;
    }
    break;
  case MBC_E_READ: {
    if (p->asm_active)
      FATAL(m, TIERS_ERR_STATE, "corrupt FIFO: new message before the last one was whole");
    if (h->aux != p->fifo_seen + 1 || h->chunk != sizeof(uint64_t) || !p->tp->direct)
      FATAL(m, TIERS_ERR_STATE, "corrupt FIFO: bad single-copy notice");
    p->fifo_seen++;
    uint64_t addr;
    memcpy(&addr, pay, sizeof addr);
    tiers_mbc_request_t r = posted_match(m, source, h->tag);
    if (r)
      return read_message(m, r, source, h->tag, (size_t)h->total, addr, h->aux);
    struct unexp *u = ux_new(m, source, h->tag, (size_t)h->total, 0);
    if (!u)
      FATAL(m, TIERS_ERR_NOMEM, "out of memory noting an unexpected message");
    u->read = 1;
    u->sync = sync;
    u->raddr = addr;
    u->fseq = h->aux;
    u->got = u->total; /* nothing to assemble: the bytes wait at the sender */
    if (!sync)
      m->reads_waiting++;
    return TIERS_OK;
  }
  case MBC_E_SPLIT: {
    /* my part of the split copy, while the sender writes its part */
    tiers_mbc_request_t r = posted_by_rseq(m, source, h->aux);
    if (!r || p->asm_active || p->split_recv || h->chunk != 2 * sizeof(uint64_t) ||
        !p->tp->direct)
      FATAL(m, TIERS_ERR_STATE, "corrupt FIFO: bad split-copy notice");
    uint64_t pay2[2];
    memcpy(pay2, pay, sizeof pay2);
    size_t n = (size_t)h->total < r->cap ? (size_t)h->total : r->cap;
    if (pay2[1] > n)
      FATAL(m, TIERS_ERR_STATE, "corrupt FIFO: split point beyond the message");
    posted_remove(m, r); /* matched: no later message may match it */
    if (pay2[1] < n) {
      int rc = p->tp->direct_read(p->tp, source, pay2[0] + pay2[1], r->rbuf + pay2[1],
                                  n - (size_t)pay2[1]);
      if (rc != TIERS_OK) {
        m->fatal = rc;
        snprintf(m->fatal_msg, sizeof m->fatal_msg, "%s", tiers_last_error());
        return rc;
      }
    }
    p->split_recv = r;
    return send_ack(m, source, h->aux | COPIED_FLAG);
  }
  case MBC_E_DIRECT: {
    tiers_mbc_request_t r = p->split_recv;
    if (r && r->rseq == h->aux) /* the sender's part of a split copy is written too */
      p->split_recv = NULL;
    else
      r = posted_by_rseq(m, source, h->aux);
    if (!r)
      FATAL(m, TIERS_ERR_STATE, "direct-write notice for an unknown send request");
    recv_complete(m, r, source, h->tag, (size_t)h->total);
    return TIERS_OK;
  }
  case MBC_E_WITHDRAWN: {
    /* the sender will not use the request: a receive still waiting on it
     * is cancelled (one that a message completed meanwhile is gone) */
    tiers_mbc_request_t r = posted_by_rseq(m, source, h->aux);
    if (r && r->withdrawing) {
      posted_remove(m, r);
      r->done = 1;
      memset(&r->st, 0, sizeof r->st);
      r->st.source = TIERS_MBC_ANY_SOURCE;
      r->st.tag = TIERS_MBC_ANY_TAG;
    }
    return TIERS_OK;
  }
  default:
    FATAL(m, TIERS_ERR_STATE, "corrupt FIFO entry kind");
  }
  if (off + h->chunk > p->asm_total)
    FATAL(m, TIERS_ERR_STATE, "corrupt FIFO: chunk beyond the message");
  store_part(dst, dcap, off, pay, (size_t)h->chunk);
  p->asm_got += (size_t)h->chunk;
  asm_finish(m, source);
  return TIERS_OK;
}

static int drain_msgs(tiers_mbc_t m, int source, int *events)
{
  struct peer *p = &m->peers[source];
  struct mbc_transport *t = p->tp;
  size_t cap = t->capacity[MBC_RING_MSG];
  unsigned char *data = p->rx[MBC_RING_MSG];
  uint64_t head = p->head[MBC_RING_MSG];
  int kind = ring_peek(data, cap, head);
  if (!kind)
    return TIERS_OK;
  do {
    size_t off = ring_off(head, cap), entry;
    if (kind == MBC_E_PAD) {
      entry = cap - off;
    } else {
      struct mbc_hdr h;
      memcpy(&h, data + off, MBC_HDR);
      entry = slot_up(MBC_HDR + (size_t)h.chunk);
      if (entry > cap - off || h.chunk > h.total)
        FATAL(m, TIERS_ERR_STATE, "corrupt FIFO entry (length beyond the ring)");
      TIERS_CALL(msg_entry(m, source, kind & MBC_KIND_MASK, kind & MBC_F_SYNC, &h,
                           data + off + MBC_HDR));
    }
    ring_clear(data, cap, head, entry);
    head += entry;
    (*events)++;
    kind = ring_peek(data, cap, head);
  } while (kind);
  p->head[MBC_RING_MSG] = head;
  t->publish_head(t, source, MBC_RING_MSG, head);
  return TIERS_OK;
}

/* ------------------------------------------------------------------ */
/* Sender side: send requests and the send queue */

/* The receiver matched my synchronous message `seq`: it completes (or,
 * still being written chunk by chunk, completes when written). */
static int ack_arrived(tiers_mbc_t m, struct peer *p, uint64_t seq)
{
  /* acknowledgements come in FIFO order, mostly: the oldest is first */
  for (tiers_mbc_request_t *pp = &p->ack_head, prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
    if ((*pp)->fseq == seq) {
      tiers_mbc_request_t q = *pp;
      *pp = q->next;
      if (p->ack_tail == q)
        p->ack_tail = prev;
      q->next = NULL;
      q->done = 1;
      p->ack_wait--;
      return TIERS_OK;
    }
  tiers_mbc_request_t q = p->sq_head;
  if (q && q->sync && q->fseq == seq && !q->acked) {
    q->acked = 1;
    p->ack_wait--;
    return TIERS_OK;
  }
  FATAL(m, TIERS_ERR_STATE, "acknowledgement of an unknown synchronous send");
}

/* The receiver has read its part of my split message answering send
 * request rseq: the send completes. */
static int copied_arrived(tiers_mbc_t m, struct peer *p, uint64_t rseq)
{
  for (tiers_mbc_request_t *pp = &p->ack_head, prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
    if ((*pp)->split && (*pp)->rseq == rseq) {
      tiers_mbc_request_t q = *pp;
      *pp = q->next;
      if (p->ack_tail == q)
        p->ack_tail = prev;
      q->next = NULL;
      q->done = 1;
      p->ack_wait--;
      return TIERS_OK;
    }
  FATAL(m, TIERS_ERR_STATE, "copy notice for an unknown split message");
}

/* The receiver cancels the receive of send request rseq: forget the
 * request if it is held, and confirm (flush_withdrawn) in any case. */
static int withdraw_arrived(tiers_mbc_t m, struct peer *p, uint64_t rseq)
{
  for (size_t k = 0; k < p->nheld; k++)
    if (p->held[k].rseq == rseq) {
      memmove(&p->held[k], &p->held[k + 1], (p->nheld - k - 1) * sizeof *p->held);
      p->nheld--;
      break;
    }
  if (p->nwd_out == p->wd_out_cap) {
    size_t nc = p->wd_out_cap ? 2 * p->wd_out_cap : 8;
    uint64_t *nw = realloc(p->wd_out, nc * sizeof *nw);
    if (!nw)
      FATAL(m, TIERS_ERR_NOMEM, "out of memory confirming a cancelled receive");
    p->wd_out = nw;
    p->wd_out_cap = nc;
  }
  p->wd_out[p->nwd_out++] = rseq;
  return TIERS_OK;
}

/* Confirms withdrawn requests through the message FIFO, each after the
 * message (if any) that answers it, so that the receiver sees that first. */
static void flush_withdrawn(tiers_mbc_t m, int dest)
{
  struct peer *p = &m->peers[dest];
  tiers_mbc_request_t q = p->sq_head;
  while (p->nwd_out) {
    uint64_t rseq = p->wd_out[0];
    if (q && q->answer && q->rseq == rseq)
      return; /* its answer is still being written */
    if (!ring_place(m, dest, MBC_RING_MSG, MBC_SLOT))
      return;
    msg_write(m, dest, MBC_E_WITHDRAWN, 0, 0, rseq, NULL, 0);
    memmove(p->wd_out, p->wd_out + 1, (p->nwd_out - 1) * sizeof *p->wd_out);
    p->nwd_out--;
  }
}

static int drain_requests(tiers_mbc_t m, int dest, int *events)
{
  struct peer *p = &m->peers[dest];
  struct mbc_transport *t = p->tp;
  size_t cap = t->capacity[MBC_RING_REQ];
  unsigned char *data = p->rx[MBC_RING_REQ];
  uint64_t head = p->head[MBC_RING_REQ];
  int kind = ring_peek(data, cap, head);
  if (!kind)
    return TIERS_OK;
  do {
    if (kind != MBC_E_SREQ && kind != MBC_E_ACK && kind != MBC_E_WITHDRAW &&
        kind != MBC_E_COPIED)
      FATAL(m, TIERS_ERR_STATE, "corrupt send-request FIFO entry");
    struct mbc_sreq e;
    memcpy(&e, data + ring_off(head, cap), MBC_SREQ);
    ring_clear(data, cap, head, MBC_SREQ);
    head += MBC_SREQ;
    (*events)++;
    if (kind == MBC_E_ACK || kind == MBC_E_COPIED) {
      TIERS_CALL(kind == MBC_E_ACK ? ack_arrived(m, p, e.rseq) : copied_arrived(m, p, e.rseq));
      kind = ring_peek(data, cap, head);
      continue;
    }
    if (kind == MBC_E_WITHDRAW) {
      TIERS_CALL(withdraw_arrived(m, p, e.rseq));
      kind = ring_peek(data, cap, head);
      continue;
    }
    m->c.requests_received++;
    if (e.fifo_seen != p->fifo_sent || e.floor <= p->dropped_max || !t->direct) {
      m->c.requests_stale++;
      if (e.rseq > p->dropped_max)
        p->dropped_max = e.rseq;
    } else {
      if (p->nheld == p->held_cap) {
        size_t nc = p->held_cap ? 2 * p->held_cap : 16;
        struct held *nh = realloc(p->held, nc * sizeof *nh);
        if (!nh)
          FATAL(m, TIERS_ERR_NOMEM, "out of memory holding send requests");
        p->held = nh;
        p->held_cap = nc;
      }
      p->held[p->nheld++] = (struct held){e.rseq, e.addr, e.cap, e.tag};
    }
    kind = ring_peek(data, cap, head);
  } while (kind);
  p->head[MBC_RING_REQ] = head;
  t->publish_head(t, dest, MBC_RING_REQ, head);
  return TIERS_OK;
}

static void count_message(tiers_mbc_t m, struct peer *p, size_t len)
{
  m->c.msgs_sent++;
  m->c.bytes_sent += len;
  if (p->tp == m->shm) {
    m->c.msgs_shm++;
    m->c.bytes_shm += len;
  } else {
    m->c.msgs_rma++;
    m->c.bytes_rma += len;
  }
}

static void send_complete(tiers_mbc_t m, struct peer *p, tiers_mbc_request_t q)
{
  p->sq_head = q->next;
  if (!p->sq_head)
    p->sq_tail = NULL;
  q->next = NULL;
  if (((q->sync || q->read) && q->fseq && !q->acked) || q->split) {
    /* written, unasked (synchronous), or left to be read (whole or in
     * part): done when the receiver acknowledges the match (the copy) */
    if (p->ack_tail)
      p->ack_tail->next = q;
    else
      p->ack_head = q;
    p->ack_tail = q;
  } else {
    q->done = 1;
  }
  q->st.source = q->peer;
  q->st.tag = q->tag;
  q->st.bytes = q->st.message_bytes = q->len;
  q->st.error = TIERS_OK;
  count_message(m, p, q->len);
}

static void mark_blocked(tiers_mbc_t m, tiers_mbc_request_t q)
{
  if (!q->blocked) {
    q->blocked = 1;
    m->c.fifo_full_waits++;
  }
}

/* Move the sends to `dest` as far as the FIFO space allows. */
static int advance_sends(tiers_mbc_t m, int dest, int *events)
{
  struct peer *p = &m->peers[dest];
  struct mbc_transport *t = p->tp;
  size_t cap = t->capacity[MBC_RING_MSG];
  /* a chunk smaller than this waits for more space (unless it ends the message) */
  size_t min_chunk = cap / 4 < 4096 ? cap / 4 : 4096;
  tiers_mbc_request_t q;
  while ((q = p->sq_head) != NULL) {
    if (!q->started && !q->answer && p->nheld) {
      size_t k = 0;
      while (k < p->nheld && !tag_matches(p->held[k].tag, q->tag))
        k++;
      if (k < p->nheld) {
        struct held h = p->held[k];
        int direct = q->len >= m->opt.direct_min_bytes;
        /* direct remote write, then the notice: room for the notice is
         * made first so that the write is never repeated */
        if (direct && !ring_place(m, dest, MBC_RING_MSG, MBC_SLOT)) {
          mark_blocked(m, q);
          return TIERS_OK;
        }
        size_t n = q->len < h.cap ? q->len : (size_t)h.cap;
        /* long, to another process: the split copy, one half each; room
         * for both notices (one after the other, no padding between) */
        int split = direct && n >= m->split_min && dest != m->rank && t->direct_read;
        if (split && !ring_place(m, dest, MBC_RING_MSG, 2 * MBC_SLOT)) {
          mark_blocked(m, q);
          return TIERS_OK;
        }
        memmove(&p->held[k], &p->held[k + 1], (p->nheld - k - 1) * sizeof *p->held);
        p->nheld--;
        m->c.requests_used++;
        if (split) {
          /* the receiver reads [lo, n) while I write [0, lo); lo on a page */
          uint64_t pay[2] = {(uint64_t)(uintptr_t)q->sbuf, (uint64_t)(n / 2 & ~(size_t)4095)};
          q->split = 1;
          q->rseq = h.rseq;
          p->ack_wait++;
          msg_write(m, dest, MBC_E_SPLIT, q->tag, q->len, h.rseq, (const unsigned char *)pay,
                    sizeof pay);
          int rc = t->direct_write(t, dest, h.addr, q->sbuf, (size_t)pay[1]);
          if (rc != TIERS_OK) {
            m->fatal = rc;
            snprintf(m->fatal_msg, sizeof m->fatal_msg, "%s", tiers_last_error());
            return rc;
          }
          msg_write(m, dest, MBC_E_DIRECT, q->tag, q->len, h.rseq, NULL, 0);
          m->c.msgs_direct++;
          m->c.bytes_direct += q->len;
          m->c.msgs_split++;
          if (mbc_sent_hook)
            mbc_sent_hook(q->len, q->tag, 1);
          (*events)++;
          q->blocked = 0;
          send_complete(m, p, q);
          continue;
        }
        if (direct) {
          int rc = t->direct_write(t, dest, h.addr, q->sbuf, n);
          if (rc != TIERS_OK) {
            m->fatal = rc;
            snprintf(m->fatal_msg, sizeof m->fatal_msg, "%s", tiers_last_error());
            return rc;
          }
          msg_write(m, dest, MBC_E_DIRECT, q->tag, q->len, h.rseq, NULL, 0);
          m->c.msgs_direct++;
          m->c.bytes_direct += q->len;
          if (mbc_sent_hook)
            mbc_sent_hook(q->len, q->tag, 1);
          (*events)++;
          q->blocked = 0;
          send_complete(m, p, q);
          continue;
        }
        q->answer = 1;
        q->rseq = h.rseq;
      }
    }
    /* unasked and long, to a node peer: left in my buffer for the receiver
     * to copy (one copy instead of two through the FIFO); one line in the
     * FIFO says where, and the send is done when the receiver says it has
     * copied.  Numbered with the FIFO messages, so MPI's order holds. */
    if (!q->started && !q->answer && q->len >= m->read_min && t->direct && dest != m->rank) {
      if (!ring_place(m, dest, MBC_RING_MSG, MBC_SLOT)) {
        mark_blocked(m, q);
        return TIERS_OK;
      }
      q->blocked = 0;
      q->read = 1;
      q->fseq = ++p->fifo_sent;
      p->ack_wait++;
      uint64_t addr = (uint64_t)(uintptr_t)q->sbuf;
      msg_write(m, dest, MBC_E_READ | (q->sync ? MBC_F_SYNC : 0), q->tag, q->len, q->fseq,
                (const unsigned char *)&addr, sizeof addr);
      m->c.msgs_read++;
      m->c.bytes_read += q->len;
      if (mbc_sent_hook)
        mbc_sent_hook(q->len, q->tag, 0);
      (*events)++;
      send_complete(m, p, q);
      continue;
    }
    /* through the FIFO: one chunk per round of the loop */
    size_t remaining = q->len - q->pushed;
    size_t want = slot_up(MBC_HDR + remaining), here, wrapped, chunk;
    int pad = 0;
    ring_room(m, dest, MBC_RING_MSG, want, &here, &wrapped);
    if (want <= here) {
      chunk = remaining;
    } else if (want <= wrapped) {
      chunk = remaining;
      pad = 1;
    } else {
      size_t best = here >= wrapped ? here : wrapped;
      if (best < MBC_HDR + min_chunk) {
        mark_blocked(m, q);
        return TIERS_OK;
      }
      pad = best != here;
      chunk = best - MBC_HDR;
    }
    q->blocked = 0;
    if (pad)
      ring_pad(m, dest, MBC_RING_MSG);
    int kind;
    uint64_t aux;
    if (!q->started) {
      if (q->answer) {
        kind = MBC_E_ANSWER;
        aux = q->rseq;
      } else {
        kind = MBC_E_FIRST;
        aux = ++p->fifo_sent;
        if (q->sync) {
          kind |= MBC_F_SYNC;
          q->fseq = aux;
          p->ack_wait++;
        }
      }
    } else {
      kind = MBC_E_MORE;
      aux = q->pushed;
    }
    msg_write(m, dest, kind, q->tag, q->len, aux, q->sbuf + q->pushed, chunk);
    m->c.fifo_chunks++;
    (*events)++;
    q->started = 1;
    q->pushed += chunk;
    if (q->pushed == q->len) {
      if (q->answer) {
        m->c.msgs_answered_fifo++;
        m->c.bytes_answered_fifo += q->len;
      } else {
        m->c.msgs_fifo++;
        m->c.bytes_fifo += q->len;
      }
      if (mbc_sent_hook)
        mbc_sent_hook(q->len, q->tag, 0);
      send_complete(m, p, q);
    }
  }
  return TIERS_OK;
}

/* Progress on one peer: its messages and send requests to me, my sends to it. */
static int progress_peer(tiers_mbc_t m, int i, int *events)
{
  struct peer *p = &m->peers[i];
  if (p->tp->poll)
    p->tp->poll(p->tp);
  TIERS_CALL(drain_msgs(m, i, events));
  if (p->tp->direct || p->ack_wait)
    TIERS_CALL(drain_requests(m, i, events));
  if (p->nacks_out)
    flush_acks(m, i);
  if (p->sq_head)
    TIERS_CALL(advance_sends(m, i, events));
  if (p->nwd_out)
    flush_withdrawn(m, i);
  return TIERS_OK;
}

/* One round of progress over every peer.  *events counts what happened. */
static int progress(tiers_mbc_t m, int *events)
{
  if (m->rma)
    m->rma->poll(m->rma);
  for (int i = 0; i < m->size; i++)
    if (m->peers[i].tp->direct || m->peers[i].ack_wait)
      TIERS_CALL(drain_requests(m, i, events));
  for (int i = 0; i < m->size; i++) {
    TIERS_CALL(drain_msgs(m, i, events));
    if (m->peers[i].nacks_out)
      flush_acks(m, i);
  }
  for (int i = 0; i < m->size; i++) {
    if (m->peers[i].sq_head)
      TIERS_CALL(advance_sends(m, i, events));
    if (m->peers[i].nwd_out)
      flush_withdrawn(m, i);
  }
  return TIERS_OK;
}

/* ------------------------------------------------------------------ */
/* Waiting */

struct waiter {
  double start, next_check;
  long idle;          /* idle rounds since the last event */
  int64_t idle_since; /* ns: start of this idle stretch */
  uint32_t budget;    /* ns of spinning this stretch may use */
  int blocking;       /* the stretch outlasted its spin */
};


static void waiter_init(struct waiter *w)
{
  w->start = 0; /* read at the first idle round: a wait that never idles reads no clock */
  w->idle = 0;
  w->blocking = 0;
}

/* Called after a round that made progress: the idle stretch (if any) is
 * over, and the spin time learns from how long it lasted. */
static void waiter_event(tiers_mbc_t m, struct waiter *w)
{
  if (w->idle == 0)
    return;
  if (!w->blocking)
    tiers_spin_ended(&m->spin, w->budget);
  else
    tiers_spin_waited(&m->spin, w->budget, (double)(tiers_now_ns() - w->idle_since));
  w->idle = 0;
  w->blocking = 0;
}

/* One nap of @p ns nanoseconds with a timer slack of a tenth of it (the
 * default slack, 50 us, would make every short nap 50 us long). */
static void nap(long ns)
{
  int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  long want = ns / 10 > 1000 ? ns / 10 : 1000;
  if (slack > 0 && slack != want)
    prctl(PR_SET_TIMERSLACK, (unsigned long)want, 0, 0, 0);
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
  if (slack > 0 && slack != want)
    prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

/* The blocking phase of an idle round: a yield on an oversubscribed node,
 * else a nap. */
static void waiter_block(tiers_mbc_t m, struct waiter *w, int64_t now)
{
  if (m->oversubscribed) {
    sched_yield();
    return;
  }
  long ns = (long)((now - w->idle_since) / 16);
  nap(ns < WAIT_NAP_MIN_NS ? WAIT_NAP_MIN_NS : ns > WAIT_NAP_MAX_NS ? WAIT_NAP_MAX_NS : ns);
}

/* Called after an idle round: spin for the learned time, then block; now
 * and then check the time limit and that every peer is still there. */
static int waiter_idle(tiers_mbc_t m, struct waiter *w, const char *what)
{
  if (mbc_idle_hook && (w->idle & 63) == 63)
    mbc_idle_hook(m);
  if (w->idle++ == 0) {
    if (w->start == 0) {
      w->start = now_s();
      w->next_check = w->start + 0.1;
    }
    w->idle_since = tiers_now_ns();
    w->budget = tiers_spin_budget(&m->spin);
    w->blocking = 0;
    return TIERS_OK;
  }
  if (!w->blocking) {
    if ((w->idle & 15) != 0) {
      if (w->idle > WAIT_HOT_ROUNDS)
        tiers_cpu_relax();
      return TIERS_OK;
    }
    int64_t now = tiers_now_ns();
    if (now - w->idle_since < (int64_t)w->budget) {
      if (w->idle > WAIT_HOT_ROUNDS)
        tiers_cpu_relax();
      return TIERS_OK;
    }
    w->blocking = 1;
    if (m->reads_waiting) /* a sender may be waiting for this process to copy */
      return pull_reads(m);
  }
  waiter_block(m, w, tiers_now_ns());
  double t = now_s();
  if (t < w->next_check)
    return TIERS_OK;
  w->next_check = t + 0.1;
  if (m->opt.timeout_s > 0 && t - w->start > m->opt.timeout_s)
    TIERS_ERROR(TIERS_ERR_STATE, "rank %d: %s did not complete within the time limit of %g s",
                m->rank, what, m->opt.timeout_s);
  for (int i = 0; i < m->size; i++)
    if (i != m->rank && !m->peers[i].tp->peer_alive(m->peers[i].tp, i))
      TIERS_ERROR(TIERS_ERR_STATE, "rank %d: rank %d exited while %s was waiting", m->rank, i,
                  what);
  return TIERS_OK;
}

/* ------------------------------------------------------------------ */
/* Send and receive */

static int check_rank(tiers_mbc_t m, int r, int wildcard_ok, const char *what)
{
  if (r == TIERS_MBC_ANY_SOURCE && wildcard_ok)
    return TIERS_OK;
  if (r < 0 || r >= m->size)
    TIERS_ERROR(TIERS_ERR_ARG, "%s rank %d is outside 0..%d", what, r, m->size - 1);
  return TIERS_OK;
}

static int isend_any(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag, int sync,
                     tiers_mbc_request_t *req)
{
  tiers_mbc_request_t q = req_new(m, REQ_SEND);
  if (!q)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory for a send request");
  q->sync = sync;
  q->sbuf = buf;
  q->len = bytes;
  q->peer = dest;
  q->tag = tag;
  struct peer *p = &m->peers[dest];
  if (p->sq_tail)
    p->sq_tail->next = q;
  else
    p->sq_head = q;
  p->sq_tail = q;
  *req = q;
  int events = 0;
  if (p->sq_head == q) {
    if (m->fifo_first_left > 0)
      m->fifo_first_left--; /* testing hook: do not look at waiting requests first */
    else
      TIERS_CALL(drain_requests(m, dest, &events));
    TIERS_CALL(advance_sends(m, dest, &events));
  }
  return TIERS_OK;
}

int mbc_isend_internal(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag,
                       tiers_mbc_request_t *req)
{
  return isend_any(m, buf, bytes, dest, tag, 0, req);
}

/* A send with its arguments checked; sync: complete only once matched. */
static int isend_checked(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag,
                         int sync, tiers_mbc_request_t *req)
{
  TIERS_CALL(mbc_check(m));
  if (!req)
    TIERS_ERROR(TIERS_ERR_ARG, "request pointer is NULL");
  *req = NULL;
  TIERS_CALL(check_rank(m, dest, 0, "destination"));
  if (tag < 0)
    TIERS_ERROR(TIERS_ERR_ARG, "tag %d is outside 0..%d", tag, TIERS_MBC_TAG_UB);
  if (!buf && bytes)
    TIERS_ERROR(TIERS_ERR_ARG, "send buffer is NULL with %zu bytes", bytes);
  return isend_any(m, buf, bytes, dest, tag, sync, req);
}

int tiers_mbc_isend(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag,
                    tiers_mbc_request_t *req)
{
  return isend_checked(m, buf, bytes, dest, tag, 0, req);
}

int mbc_issend_internal(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag,
                        tiers_mbc_request_t *req)
{
  return isend_checked(m, buf, bytes, dest, tag, 1, req);
}

/* Send a send request for the posted receive r (source known). */
static void maybe_request(tiers_mbc_t m, tiers_mbc_request_t r)
{
  struct peer *p = &m->peers[r->peer];
  if (!p->tp->direct)
    return;
  if (r->cap < m->opt.direct_min_bytes) {
    /* the answer would come through the FIFO: asking gains nothing, and
     * later receives from this source wait to ask until this one is done */
    r->unasked = 1;
    p->norequest++;
    return;
  }
  size_t here, wrapped;
  if (!m->anysrc_pending && !p->norequest)
    ring_room(m, r->peer, MBC_RING_REQ, MBC_SREQ, &here, &wrapped);
  if (m->anysrc_pending || p->norequest || here < MBC_SREQ) {
    r->unasked = 1;
    p->norequest++;
    m->c.requests_unsent++;
    return;
  }
  uint64_t rseq = ++p->req_issued, floor = rseq;
  for (tiers_mbc_request_t o = m->posted_head; o; o = o->next)
    if (o->peer == r->peer && o->rseq && o->rseq < floor)
      floor = o->rseq;
  r->rseq = rseq;
  struct mbc_sreq e;
  memset(&e, 0, sizeof e);
  e.stamp = 0;
  e.rseq = rseq;
  e.floor = floor;
  e.fifo_seen = p->fifo_seen;
  e.addr = (uint64_t)(uintptr_t)r->rbuf;
  e.cap = r->cap;
  e.tag = r->tag;
  struct mbc_transport *t = p->tp;
  uint64_t pos = p->tail[MBC_RING_REQ];
  size_t off = ring_off(pos, t->capacity[MBC_RING_REQ]), skip = sizeof e.stamp;
  t->put(t, r->peer, MBC_RING_REQ, off + skip, (const unsigned char *)&e + skip, MBC_SREQ - skip);
  t->put_stamp(t, r->peer, MBC_RING_REQ, off, stamp_of(pos, MBC_E_SREQ));
  p->tail[MBC_RING_REQ] = pos + MBC_SREQ;
  m->c.requests_sent++;
}

static int irecv_any(tiers_mbc_t m, void *buf, size_t cap, int source, int tag,
                     tiers_mbc_request_t *req)
{
  tiers_mbc_request_t r = req_new(m, REQ_RECV);
  if (!r)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory for a receive request");
  r->rbuf = buf;
  r->cap = cap;
  r->peer = source;
  r->tag = tag;
  *req = r;
  /* 1. messages already taken from the FIFOs */
  for (struct unexp *u = m->ux_head; u; u = u->next) {
    if (u->claimed || (source != TIERS_MBC_ANY_SOURCE && u->source != source) ||
        !tag_matches(tag, u->tag))
      continue;
    if (u->read) { /* still in the sender's buffer: one copy from there */
      if (!u->sync)
        m->reads_waiting--;
      int rc = read_message(m, r, u->source, u->tag, u->total, u->raddr, u->fseq);
      ux_drop(m, u);
      return rc;
    }
    if (u->sync) { /* a synchronous message: its sender may go on now */
      u->sync = 0;
      TIERS_CALL(send_ack(m, u->source, u->fseq));
    }
    if (u->got < u->total) { /* still arriving: completes in asm_finish */
      u->claimed = r;
      return TIERS_OK;
    }
    store_part(r->rbuf, r->cap, 0, u->data, u->total);
    recv_complete(m, r, u->source, u->tag, u->total);
    ux_drop(m, u);
    return TIERS_OK;
  }
  /* post it, then 2. drain the FIFO(s) */
  r->posted = 1;
  r->prev = m->posted_tail;
  if (m->posted_tail)
    m->posted_tail->next = r;
  else
    m->posted_head = r;
  m->posted_tail = r;
  int events = 0;
  if (source == TIERS_MBC_ANY_SOURCE) {
    m->anysrc_pending++;
    for (int i = 0; i < m->size && !r->done; i++)
      TIERS_CALL(drain_msgs(m, i, &events));
    return TIERS_OK;
  }
  TIERS_CALL(drain_msgs(m, source, &events));
  /* 3. ask the sender to write the message straight here */
  if (!r->done && r->posted)
    maybe_request(m, r);
  return TIERS_OK;
}

int mbc_irecv_internal(tiers_mbc_t m, void *buf, size_t cap, int source, int tag,
                       tiers_mbc_request_t *req)
{
  return irecv_any(m, buf, cap, source, tag, req);
}

int tiers_mbc_irecv(tiers_mbc_t m, void *buf, size_t cap, int source, int tag,
                    tiers_mbc_request_t *req)
{
  TIERS_CALL(mbc_check(m));
  if (!req)
    TIERS_ERROR(TIERS_ERR_ARG, "request pointer is NULL");
  *req = NULL;
  TIERS_CALL(check_rank(m, source, 1, "source"));
  if (tag < 0 && tag != TIERS_MBC_ANY_TAG)
    TIERS_ERROR(TIERS_ERR_ARG, "tag %d is outside 0..%d and not TIERS_MBC_ANY_TAG", tag,
                TIERS_MBC_TAG_UB);
  if (!buf && cap)
    TIERS_ERROR(TIERS_ERR_ARG, "receive buffer is NULL with capacity %zu", cap);
  return irecv_any(m, buf, cap, source, tag, req);
}

/* Hand a completed request back: status, error message, free. */
static int finish(tiers_mbc_t m, tiers_mbc_request_t *req, tiers_mbc_status_t *status)
{
  tiers_mbc_request_t r = *req;
  if (status)
    *status = r->st;
  int rc = r->st.error;
  if (rc == TIERS_ERR_ARG && r->st.truncated)
    tiers_error_set(rc, __FILE__, __LINE__,
                    "message of %zu bytes from rank %d (tag %d) truncated to the "
                    "receive buffer of %zu bytes",
                    r->st.message_bytes, r->st.source, r->st.tag, r->cap);
  req_free(m, r);
  *req = NULL;
  return rc;
}

static void empty_status(tiers_mbc_status_t *st)
{
  if (!st)
    return;
  memset(st, 0, sizeof *st);
  st->source = TIERS_MBC_ANY_SOURCE;
  st->tag = TIERS_MBC_ANY_TAG;
}

int tiers_mbc_test(tiers_mbc_t m, tiers_mbc_request_t *req, int *flag, tiers_mbc_status_t *status)
{
  TIERS_CALL(mbc_check(m));
  if (!req || !flag)
    TIERS_ERROR(TIERS_ERR_ARG, "request or flag pointer is NULL");
  *flag = 0;
  if (!*req) {
    *flag = 1;
    empty_status(status);
    return TIERS_OK;
  }
  int events = 0;
  if (!(*req)->done)
    TIERS_CALL(progress(m, &events));
  if (!(*req)->done)
    return TIERS_OK;
  *flag = 1;
  return finish(m, req, status);
}

int tiers_mbc_wait(tiers_mbc_t m, tiers_mbc_request_t *req, tiers_mbc_status_t *status)
{
  return tiers_mbc_waitall(m, 1, req, status);
}

/* Finishes every completed request of an array (NULL entries get an empty
 * status); returns the first error among them. */
static int finish_all(tiers_mbc_t m, int count, tiers_mbc_request_t *reqs,
                      tiers_mbc_status_t *statuses)
{
  int rc = TIERS_OK;
  for (int i = 0; i < count; i++) {
    tiers_mbc_status_t *st = statuses ? &statuses[i] : NULL;
    if (!reqs[i]) {
      empty_status(st);
      continue;
    }
    int r = finish(m, &reqs[i], st);
    if (rc == TIERS_OK)
      rc = r;
  }
  return rc;
}

int tiers_mbc_testall(tiers_mbc_t m, int count, tiers_mbc_request_t *reqs, int *flag,
                      tiers_mbc_status_t *statuses)
{
  TIERS_CALL(mbc_check(m));
  if (count < 0 || (count > 0 && !reqs) || !flag)
    TIERS_ERROR(TIERS_ERR_ARG, "invalid request array, count or flag");
  *flag = 0;
  int events = 0;
  TIERS_CALL(progress(m, &events));
  for (int i = 0; i < count; i++)
    if (reqs[i] && !reqs[i]->done)
      return TIERS_OK;
  *flag = 1;
  return finish_all(m, count, reqs, statuses);
}

int tiers_mbc_waitall(tiers_mbc_t m, int count, tiers_mbc_request_t *reqs,
                      tiers_mbc_status_t *statuses)
{
  TIERS_CALL(mbc_check(m));
  if (count < 0 || (count > 0 && !reqs))
    TIERS_ERROR(TIERS_ERR_ARG, "invalid request array or count");
  struct waiter w;
  waiter_init(&w);
  int i = 0;
  unsigned rounds = 0;
  for (;;) {
    while (i < count && (!reqs[i] || reqs[i]->done))
      i++;
    if (i == count)
      break;
    int events = 0;
    /* poll the peer the first unfinished request waits on; every 16th
     * round, everyone (their FIFOs must drain for them to progress) */
    int peer = reqs[i]->peer;
    if (peer >= 0 && (++rounds & 15) != 0)
      TIERS_CALL(progress_peer(m, peer, &events));
    else
      TIERS_CALL(progress(m, &events));
    if (events)
      waiter_event(m, &w);
    else if (!reqs[i]->done)
      TIERS_CALL(waiter_idle(m, &w, reqs[i]->kind == REQ_SEND ? "a send" : "a receive"));
  }
  return finish_all(m, count, reqs, statuses);
}

/* The eager fast path of a blocking send: a message that fits one FIFO
 * line beside its header, to a destination with no send of mine queued and
 * no send request held, is written and done at once, with no request
 * object and no wait.  1 when it was sent so; 0: take the general path. */
static int send_line(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag, int *rc)
{
  struct peer *p = &m->peers[dest];
  *rc = TIERS_OK;
  if (bytes > MBC_SLOT - MBC_HDR || p->sq_head || m->fifo_first_left > 0)
    return 0;
  int events = 0;
  if (p->tp->direct && (*rc = drain_requests(m, dest, &events)) != TIERS_OK)
    return 1;
  if (p->nheld || !ring_place(m, dest, MBC_RING_MSG, MBC_SLOT))
    return 0;
  msg_write(m, dest, MBC_E_FIRST, tag, bytes, ++p->fifo_sent, buf, bytes);
  m->c.fifo_chunks++;
  m->c.msgs_fifo++;
  m->c.bytes_fifo += bytes;
  if (mbc_sent_hook)
    mbc_sent_hook(bytes, tag, 0);
  count_message(m, p, bytes);
  return 1;
}

int tiers_mbc_send(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag)
{
  TIERS_CALL(mbc_check(m));
  if (dest >= 0 && dest < m->size && tag >= 0 && (buf || !bytes)) {
    int rc;
    if (send_line(m, buf, bytes, dest, tag, &rc))
      return rc;
  }
  tiers_mbc_request_t r;
  TIERS_CALL(tiers_mbc_isend(m, buf, bytes, dest, tag, &r));
  return tiers_mbc_wait(m, &r, NULL);
}

int tiers_mbc_recv(tiers_mbc_t m, void *buf, size_t cap, int source, int tag,
                   tiers_mbc_status_t *status)
{
  tiers_mbc_request_t r;
  TIERS_CALL(tiers_mbc_irecv(m, buf, cap, source, tag, &r));
  return tiers_mbc_wait(m, &r, status);
}

/* ------------------------------------------------------------------ */
/* Statistics and teardown */

void mbc_local_stats(tiers_mbc_t m, tiers_mbc_stats_t *st)
{
  memset(st, 0, sizeof *st);
  st->msgs_sent = m->c.msgs_sent;
  st->bytes_sent = m->c.bytes_sent;
  st->msgs_direct = m->c.msgs_direct;
  st->bytes_direct = m->c.bytes_direct;
  st->msgs_fifo = m->c.msgs_fifo;
  st->bytes_fifo = m->c.bytes_fifo;
  st->msgs_answered_fifo = m->c.msgs_answered_fifo;
  st->bytes_answered_fifo = m->c.bytes_answered_fifo;
  st->fifo_chunks = m->c.fifo_chunks;
  st->fifo_full_waits = m->c.fifo_full_waits;
  st->requests_sent = m->c.requests_sent;
  st->requests_received = m->c.requests_received;
  st->requests_used = m->c.requests_used;
  st->requests_stale = m->c.requests_stale;
  st->requests_unsent = m->c.requests_unsent;
  st->msgs_received = m->c.msgs_received;
  st->bytes_received = m->c.bytes_received;
  st->msgs_unexpected = m->c.msgs_unexpected;
  st->truncations = m->c.truncations;
  st->msgs_shm = m->c.msgs_shm;
  st->bytes_shm = m->c.bytes_shm;
  st->msgs_rma = m->c.msgs_rma;
  st->bytes_rma = m->c.bytes_rma;
  st->msgs_read = m->c.msgs_read;
  st->bytes_read = m->c.bytes_read;
  st->elapsed_s = now_s() - m->t0;
  st->direct_available = m->direct;
  st->nprocs = m->size;
}

int tiers_mbc_stats_reset(tiers_mbc_t m)
{
  if (!m)
    TIERS_ERROR(TIERS_ERR_ARG, "memory-based communicator handle is NULL (destroyed?)");
  if (!live_has(m))
    TIERS_ERROR(TIERS_ERR_STATE, "memory-based communicator was destroyed (stale handle)");
  memset(&m->c, 0, sizeof m->c);
  m->t0 = now_s();
  return TIERS_OK;
}

int tiers_mbc_destroy(tiers_mbc_t *mp)
{
  if (!mp || !*mp)
    return TIERS_OK;
  tiers_mbc_t m = *mp;
  *mp = NULL;
  if (!live_has(m))
    TIERS_ERROR(TIERS_ERR_STATE, "memory-based communicator was already destroyed (stale handle)");
  live_remove(m);
  /* TIERS_MBC_DEBUG_COUNTERS=1: which path the messages took, one line per
   * communicator of more than one process (a look at the protocol's
   * choices under a real program, without its statistics call) */
  const char *dbg = getenv("TIERS_MBC_DEBUG_COUNTERS");
  if (dbg && *dbg && strcmp(dbg, "0") && m->size > 1)
    fprintf(stderr,
            "tiers mbc: rank %d of %d: sent %llu (remote write %llu, of them split %llu; "
            "read %llu; fifo %llu; answered %llu), requests sent %llu received %llu used %llu "
            "stale %llu unsent %llu, unexpected %llu\n",
            m->rank, m->size, (unsigned long long)m->c.msgs_sent,
            (unsigned long long)m->c.msgs_direct, (unsigned long long)m->c.msgs_split,
            (unsigned long long)m->c.msgs_read, (unsigned long long)m->c.msgs_fifo,
            (unsigned long long)m->c.msgs_answered_fifo, (unsigned long long)m->c.requests_sent,
            (unsigned long long)m->c.requests_received, (unsigned long long)m->c.requests_used,
            (unsigned long long)m->c.requests_stale, (unsigned long long)m->c.requests_unsent,
            (unsigned long long)m->c.msgs_unexpected);
  int rc = TIERS_OK;
  /* 1. finish my sends (draining my own FIFOs meanwhile) */
  if (!m->fatal) {
    struct waiter w;
    waiter_init(&w);
    for (;;) {
      int pending = 0;
      for (int i = 0; i < m->size; i++)
        pending |= m->peers[i].sq_head != NULL;
      if (!pending)
        break;
      int events = 0;
      rc = progress(m, &events);
      if (rc == TIERS_OK && !events)
        rc = waiter_idle(m, &w, "destroy (finishing sends)");
      if (rc != TIERS_OK)
        break;
    }
  }
  /* 2. wait for everyone, still draining: a peer may be sending to me */
  MPI_Request bar;
  int stuck = 0;
  if (MPI_Ibarrier(m->comm, &bar) != MPI_SUCCESS) {
    if (rc == TIERS_OK)
      rc = tiers_error_set(TIERS_ERR_MPI, __FILE__, __LINE__, "MPI_Ibarrier failed");
    stuck = 1;
  } else {
    struct waiter w;
    waiter_init(&w);
    for (;;) {
      int flag = 0, events = 0;
      MPI_Test(&bar, &flag, MPI_STATUS_IGNORE);
      if (flag)
        break;
      if (!m->fatal && progress(m, &events) != TIERS_OK)
        m->fatal = TIERS_ERR_STATE;
      if (events)
        continue;
      int wrc = waiter_idle(m, &w, "destroy (waiting for the other ranks)");
      if (wrc != TIERS_OK) {
        if (rc == TIERS_OK)
          rc = wrc;
        stuck = 1; /* the window cannot be freed collectively: leave it */
        break;
      }
    }
  }
  /* 3. free */
  int outstanding = 0;
  while (m->all) {
    outstanding += !m->all->done;
    req_free(m, m->all);
  }
  for (struct unexp *u = m->ux_head, *n; u; u = n) {
    n = u->next;
    if (u->data != u->inl)
      free(u->data);
    free(u);
  }
  for (struct unexp *u = m->ux_pool, *n; u; u = n) {
    n = u->next;
    free(u);
  }
  for (int i = 0; i < m->size; i++) {
    free(m->peers[i].held);
    free(m->peers[i].acks_out);
    free(m->peers[i].wd_out);
  }
  free(m->peers);
  while (m->pool) {
    tiers_mbc_request_t r = m->pool;
    m->pool = r->all_next;
    free(r);
  }
  int trc = TIERS_OK;
  if (!stuck && m->shm)
    trc = m->shm->destroy(m->shm);
  if (!stuck && m->rma) {
    int rrc = m->rma->destroy(m->rma);
    if (trc == TIERS_OK)
      trc = rrc;
  }
  if (!stuck)
    MPI_Comm_free(&m->comm);
  int rank = m->rank;
  free(m);
  if (rc == TIERS_OK && trc != TIERS_OK)
    rc = trc;
  if (rc == TIERS_OK && outstanding)
    rc = tiers_error_set(TIERS_ERR_STATE, __FILE__, __LINE__,
                         "rank %d: %d requests were still outstanding at destroy (freed)", rank,
                         outstanding);
  return rc;
}

/* ------------------------------------------------------------------ */
/* Entry points of the MPI interposition library (native/src/mbcmpi) */

int mbc_progress_once(tiers_mbc_t m, int *events)
{
  TIERS_CALL(mbc_check(m));
  return progress(m, events);
}

int mbc_progress_node(tiers_mbc_t m, int *events)
{
  TIERS_CALL(mbc_check(m));
  for (int i = 0; i < m->size; i++)
    if (m->peers[i].tp != m->rma)
      TIERS_CALL(progress_peer(m, i, events));
  return TIERS_OK;
}

int mbc_iprobe(tiers_mbc_t m, int source, int tag, int *flag, tiers_mbc_status_t *st)
{
  TIERS_CALL(mbc_check(m));
  *flag = 0;
  int events = 0;
  if (source == TIERS_MBC_ANY_SOURCE)
    TIERS_CALL(progress(m, &events));
  else
    TIERS_CALL(progress_peer(m, source, &events));
  for (struct unexp *u = m->ux_head; u; u = u->next) {
    if (u->claimed || (source != TIERS_MBC_ANY_SOURCE && u->source != source) ||
        !tag_matches(tag, u->tag))
      continue;
    *flag = 1;
    if (st) {
      memset(st, 0, sizeof *st);
      st->source = u->source;
      st->tag = u->tag;
      st->bytes = st->message_bytes = u->total;
    }
    return TIERS_OK;
  }
  return TIERS_OK;
}

int mbc_cancel_recv(tiers_mbc_t m, tiers_mbc_request_t r)
{
  TIERS_CALL(mbc_check(m));
  if (!r || r->kind != REQ_RECV || r->done || !r->posted)
    return 0;
  if (r->rseq) {
    /* the sender holds a send request for r and may be writing into its
     * buffer: ask it to forget the request; its confirmation (or the
     * message it had already sent) completes r */
    if (!r->withdrawing) {
      if (!req_entry_put(m, r->peer, MBC_E_WITHDRAW, r->rseq))
        return 0; /* request ring full: the cancel fails, as MPI allows */
      r->withdrawing = 1;
    }
    return 2;
  }
  posted_remove(m, r);
  r->done = 1;
  memset(&r->st, 0, sizeof r->st);
  r->st.source = TIERS_MBC_ANY_SOURCE;
  r->st.tag = TIERS_MBC_ANY_TAG;
  return 1;
}

int mbc_request_done(tiers_mbc_request_t r) { return !r || r->done; }
