/*
 * libtiers-trace: the recording runtime behind the generated PMPI wrappers.
 *
 * Design (see docs/trace.md):
 * - Each rank keeps ONE buffer of compact binary records (16 to 48 bytes,
 *   fixed layout, local CLOCK_MONOTONIC nanoseconds) of at most the budget.
 *   The buffer is the only trace memory that grows with run length; OTF2
 *   is written after the run from these records (tiers.trace.convert), so
 *   the budget is exact and the only I/O during the run is a plain write()
 *   of the buffer at a swap-out.
 * - Swap-out appends the buffer to DIR/raw/rank-NNNNNN.tev.  Records are
 *   whole and self-describing, so a file cut short by kill -9 reads back up
 *   to the last swap-out.
 * - Policies: auto (the default: sync, and when the buffer fills between
 *   two collectives on MPI_COMM_WORLD this rank swaps out there, alone,
 *   and marks it: no event is lost), sync (after each collective on
 *   MPI_COMM_WORLD one MPI_Allreduce on a private communicator decides
 *   whether all ranks swap out; each swap-out is padded to tau), full
 *   (write when this rank's buffer is full), off (grow in memory, write at
 *   the end).
 * - Memory follows use: the budget is reserved at MPI_Init but made
 *   resident in chunks (1 MiB, doubling up to 4 MiB, then 4 MiB more at a
 *   time) as the records reach them.
 * - Thread safety: with MPI_THREAD_MULTIPLE one mutex serialises the
 *   recording (documented lock); records carry the thread's index.
 * - Failures (no space, write error, buffer overflow under sync) stop the
 *   tracing with one line on stderr; the program is never stopped.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tiers/trace.h"
#include "tracer.h"

/* ------------------------------------------------------------------ */
/* Record layout: the raw event file format, version 1 (docs/trace.md) */

enum {
  REC_ENTER = 1, REC_LEAVE = 2, REC_SEND = 3, REC_RECV = 4, REC_ISEND = 5,
  REC_ISEND_DONE = 6, REC_IRECV_POST = 7, REC_IRECV_DONE = 8, REC_COLL_BEGIN = 9,
  REC_COLL_END = 10, REC_COMM = 11, REC_SWAP = 12, REC_CLOCK = 13, REC_STOP = 14,
  REC_INFO = 15, REC_MEM = 16, REC_XFER = 17, REC_NAME = 18, REC_MAP = 19
};
#define FN_SWAPOUT 0xFFFFu /* region id of the tracer's own swap-out */

typedef struct {
  uint8_t kind, flags;
  uint16_t thread, func, words; /* words: record length in 8-byte units */
  int64_t t;
} rec_head_t;

typedef struct { rec_head_t h; int32_t comm, peer, tag, pad; uint64_t bytes, req; } rec_msg_t;
typedef struct { rec_head_t h; uint64_t req; } rec_req_t;
typedef struct { rec_head_t h; int32_t comm, root; uint32_t op, pad; uint64_t sent, recvd; } rec_coll_t;
typedef struct { rec_head_t h; int32_t id, parent, size, flags; } rec_comm_t; /* + members */
typedef struct { rec_head_t h; uint64_t bytes, write_ns, total_ns, tau_ns; } rec_swap_t;
typedef struct { rec_head_t h; int64_t offset_ns, rtt_ns; int32_t phase, pad; } rec_clock_t;
typedef struct { rec_head_t h; int32_t reason, pad; } rec_stop_t;
/* one-sided and file transfers: what (TIERS_XFER_*), target world rank or
 * -1, flags (bit 0: a collective file call), bytes */
typedef struct { rec_head_t h; int32_t what, target; uint32_t flags, pad; uint64_t bytes; } rec_xfer_t;
typedef struct { rec_head_t h; uint64_t resident, cap; } rec_mem_t; /* buffer bytes resident at the end, reserved */
typedef struct { rec_head_t h; int32_t provided, policy; uint64_t budget; double tau, threshold; uint64_t swap_every; } rec_info_t;

#define RAW_MAGIC "TIERSTEV"
#define RAW_VERSION 1u

enum { POLICY_SYNC = 0, POLICY_FULL = 1, POLICY_OFF = 2, POLICY_AUTO = 3 };
/* REC_SWAP flags: padded to tau, equalised over all ranks (a sync swap-out),
 * unsynchronised (auto: the buffer filled between two world collectives) */
enum { SWAP_PADDED = 1, SWAP_EQUAL = 2, SWAP_UNSYNC = 4 };
#define GROW_FIRST (1u << 20) /* the first chunk of the buffer made resident */
#define GROW_STEP (4u << 20)  /* chunks double up to this, then grow by it */
enum { STOP_WRITE = 1, STOP_OVERFLOW = 2, STOP_NOMEM = 3, STOP_SIGNAL = 4, STOP_ABORT = 5,
       STOP_PEER = 6 };

#define HEADROOM 128 /* bytes kept free for the swap-out's own records */
#define CLOCK_ROUNDS 8

/* ------------------------------------------------------------------ */
/* State */

static struct {
  int initialised;   /* after_init ran */
  int finished;      /* final flush done */
  volatile sig_atomic_t stopped; /* tracing stopped for good */
  int paused;
  int policy;
  int threaded;      /* MPI_THREAD_MULTIPLE: take the lock */
  int provided;
  int rank, size;
  int fd;
  uint64_t file_bytes; /* length of the file's whole, written part */
  uint8_t *buf;
  size_t cap;        /* bytes; records use at most cap - HEADROOM */
  size_t resident;   /* bytes of buf made resident so far (<= cap) */
  uint64_t unsync_swapouts; /* auto: swap-outs made alone on overflow */
  size_t limit;      /* cap - HEADROOM while recording, 0 once stopped: one
                        compare in put() covers both */
  int mapped;        /* buf comes from mmap (sync, full), not malloc (off) */
  volatile size_t used; /* committed bytes: what a signal handler may write */
  uint64_t budget;
  double tau, threshold;
  double largest_write_s;
  uint64_t swapouts;
  double tau_eff;    /* sync: the tau in use (--tau, raised after an overrun) */
  int64_t acc_ns;    /* sync: this rank's swap-out time so far (equal on all ranks) */
  uint64_t swap_every; /* sync: swap out at every swap_every-th world collective; 0: by fill */
  uint64_t world_colls; /* collectives on MPI_COMM_WORLD so far */
  int slow_rank, slow_ms, slow_at; /* test knob TIERS_TRACE_TEST_SLOW_WRITE */
  MPI_Comm priv;     /* private duplicate of MPI_COMM_WORLD */
  int sync_active;   /* sync policy and still checking at collectives */
  int next_comm_id;
  uint64_t next_req_id;
  int next_thread;
  pthread_mutex_t lock;
  struct sigaction old_term, old_int;
} S = { .fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

/* Per-thread state, in one block.  initial-exec: the library is preloaded,
 * so its TLS sits in the static block and every access is one %fs-relative
 * load instead of a __tls_get_addr call (the default for -fPIC code). */
typedef struct {
  int depth;        /* > 0: inside a wrapper */
  int thread;       /* this thread's index; -1: none yet */
  int sync_due;     /* a world collective just ended */
  int64_t enter_ns; /* this wrapper's Enter time */
  int64_t post_ns;  /* its time after the PMPI call; 0: not taken */
} tls_t;
static _Thread_local tls_t T __attribute__((tls_model("initial-exec"))) = { .thread = -1 };

/* The clock: CLOCK_MONOTONIC in ns.  Where the kernel itself counts time
 * with the TSC (clocksource "tsc": invariant and synchronised across
 * cores), the tracer reads the TSC (about 8 ns instead of 25 in a VM) and
 * scales it to the monotonic clock, calibrated at MPI_Init; what is left
 * of a rate error is removed by the clock offsets measured at MPI_Init and
 * MPI_Finalize, which are taken with this same clock. */
static struct {
  int tsc;
  uint64_t tsc0;
  int64_t ns0;
  double ns_per_tick;
} CK;

static inline int64_t mono_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#if defined(__x86_64__)
#include <x86intrin.h>
static inline int64_t now_ns(void)
{
  if (CK.tsc)
    return CK.ns0 + (int64_t)((double)(__rdtsc() - CK.tsc0) * CK.ns_per_tick);
  return mono_ns();
}

static void clock_calibrate(void)
{
  char src[32] = "";
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f) {
    if (!fgets(src, sizeof src, f))
      src[0] = 0;
    fclose(f);
  }
  if (strncmp(src, "tsc", 3) != 0 || (src[3] != '\n' && src[3] != 0))
    return;
  int64_t a = mono_ns();
  uint64_t ta = __rdtsc();
  int64_t b = a;
  uint64_t tb = ta;
  while (b - a < 4000000) { /* 4 ms */
    b = mono_ns();
    tb = __rdtsc();
  }
  if (tb <= ta)
    return;
  CK.ns_per_tick = (double)(b - a) / (double)(tb - ta);
  CK.tsc0 = tb;
  CK.ns0 = b;
  CK.tsc = 1;
}
#else
static inline int64_t now_ns(void) { return mono_ns(); }
static void clock_calibrate(void) {}
#endif

/* The time of an event recorded after the PMPI call: taken once per
 * wrapper, and used for its Leave as well. */
static inline int64_t post_ns(void)
{
  if (!T.post_ns)
    T.post_ns = now_ns();
  return T.post_ns;
}

int64_t tiers_trace_clock(void) { return now_ns(); }

static void lock(void)
{
  if (S.threaded)
    pthread_mutex_lock(&S.lock);
}

static void unlock(void)
{
  if (S.threaded)
    pthread_mutex_unlock(&S.lock);
}

/* One line on stderr, at most once per reason per process. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(line, sizeof line, "tiers-trace: rank %d: ", S.rank);
  if (n < 0)
    n = 0;
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  if (len < sizeof line - 1)
    line[len++] = '\n';
  ssize_t w = write(2, line, len);
  (void)w;
}

static int write_all(int fd, const void *p, size_t n)
{
  const uint8_t *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (w == 0) {
      errno = ENOSPC;
      return -1;
    }
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static void end_file_after_write_error(void);

static void stop_tracing(int reason, const char *why)
{
  if (S.stopped)
    return;
  if (why)
    say("%s; tracing stopped, the program continues", why);
  /* the STOP record tells the reader the trace ends early */
  if (S.buf && S.used + sizeof(rec_stop_t) <= S.cap) {
    rec_stop_t r = { { REC_STOP, 0, 0, 0, sizeof(rec_stop_t) / 8, now_ns() }, reason, 0 };
    memcpy(S.buf + S.used, &r, sizeof r);
    S.used += sizeof r;
  }
  if (S.fd >= 0 && S.used > 0 && reason != STOP_WRITE) {
    /* a disk that fills during this last write must not leave a record cut
     * in two: cut back to the last whole write and end with a STOP there */
    if (write_all(S.fd, S.buf, S.used) == 0)
      S.file_bytes += S.used;
    else
      end_file_after_write_error();
  }
  S.used = 0;
  S.limit = 0;
  S.stopped = 1;
}

/* ------------------------------------------------------------------ */
/* Buffer */

static int thread_index(void)
{
  if (T.thread < 0)
    T.thread = __atomic_fetch_add(&S.next_thread, 1, __ATOMIC_RELAXED);
  return T.thread;
}

/* After a failed write (a full disk): cut the file back to its last whole
 * swap-out, which frees what the failed write left, and try to end it with
 * a STOP record, so that it reads back whole and says why it ends. */
static void end_file_after_write_error(void)
{
  if (ftruncate(S.fd, (off_t)S.file_bytes) != 0)
    return;
  rec_stop_t r = { { REC_STOP, 0, 0, 0, sizeof(rec_stop_t) / 8, now_ns() }, STOP_WRITE, 0 };
  if (write(S.fd, &r, sizeof r) == (ssize_t)sizeof r)
    S.file_bytes += sizeof r;
  else if (ftruncate(S.fd, (off_t)S.file_bytes) != 0)
    return;
}

/* Write the buffer to the file and empty it.  Returns 0, or -1 after
 * stopping the tracing on a write error. */
static int write_buffer(void)
{
  if (S.fd < 0 || S.used == 0)
    return 0;
  if (write_all(S.fd, S.buf, S.used) != 0) {
    char why[200];
    snprintf(why, sizeof why, "cannot write the trace file (%s)", strerror(errno));
    end_file_after_write_error();
    stop_tracing(STOP_WRITE, why);
    return -1;
  }
  S.file_bytes += S.used;
  S.used = 0;
  return 0;
}

static inline void put(const void *rec, size_t len);

/* Let time pass until now_ns() >= until: sleep while more than 2 ms are
 * left (so that a padding rank leaves the CPU to the ranks still writing
 * when processes share cores), then spin.  Returns the time reached. */
static int64_t pad_until(int64_t until)
{
  int64_t t = now_ns();
  while (until - t > 2000000) {
    int64_t ns = until - t - 1000000;
    struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };
    nanosleep(&ts, NULL);
    t = now_ns();
  }
  while (t < until)
    t = now_ns();
  return t;
}

/* The test knob TIERS_TRACE_TEST_SLOW_WRITE=RANK:MS[:K]: rank RANK's K-th
 * swap-out (every one when K is 0 or left out) takes MS ms longer, as a
 * late write on a loaded machine would (tests/test_trace_sync.py). */
static void test_slow_write(void)
{
  if (S.slow_ms > 0 && S.rank == S.slow_rank &&
      (S.slow_at == 0 || (uint64_t)S.slow_at == S.swapouts + 1)) {
    struct timespec ts = { S.slow_ms / 1000, (long)(S.slow_ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
}

/* Swap-out: write the buffer, then wait until tau_ns has passed since the
 * start (0: no padding).  With `equalise` (the sync policy; collective over
 * all ranks) the ranks then agree, with one MPI_Allreduce, on the largest
 * accumulated swap-out time, and each pads up to it: a rank whose write
 * overran tau makes the others carry the same, so the accumulated tracer
 * overhead is equal on every rank after every swap-out (condition C).
 * The lock is held on entry and exit, but not across the padding and the
 * reduction.  Recorded as region FN_SWAPOUT plus a REC_SWAP. */
static void swapout(int64_t tau_ns, int equalise)
{
  int64_t t0 = now_ns();
  int recording = !S.stopped && S.buf;
  uint64_t bytes = 0;
  if (recording) {
    rec_head_t enter = { REC_ENTER, 0, (uint16_t)thread_index(), FN_SWAPOUT, 2, t0 };
    memcpy(S.buf + S.used, &enter, sizeof enter); /* the headroom holds it */
    S.used += sizeof enter;
    bytes = S.used;
    if (write_buffer() != 0)
      recording = 0;
  }
  test_slow_write();
  int64_t t1 = now_ns();
  if (equalise)
    unlock();
  int64_t t2 = pad_until(t0 + tau_ns);
  if (equalise) {
    double mine = (double)(S.acc_ns + (t2 - t0)), most = mine;
    if (PMPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, S.priv) == MPI_SUCCESS)
      t2 = pad_until(t0 + ((int64_t)most - S.acc_ns));
    else
      S.sync_active = 0;
    lock();
  }
  double ws = (double)(t1 - t0) * 1e-9;
  if (ws > S.largest_write_s)
    S.largest_write_s = ws;
  S.acc_ns += t2 - t0;
  S.swapouts++;
  if (!recording || S.stopped)
    return;
  rec_head_t leave = { REC_LEAVE, 0, (uint16_t)thread_index(), FN_SWAPOUT, 2, t2 };
  put(&leave, sizeof leave);
  rec_swap_t sw = { { REC_SWAP, (uint8_t)((tau_ns > 0 ? SWAP_PADDED : 0) |
                                           (equalise ? SWAP_EQUAL : 0) |
                                           (S.policy == POLICY_AUTO && !equalise ? SWAP_UNSYNC : 0)),
                      (uint16_t)thread_index(), 0, sizeof(rec_swap_t) / 8, t0 },
                    bytes, (uint64_t)(t1 - t0), (uint64_t)(t2 - t0), (uint64_t)tau_ns };
  put(&sw, sizeof sw);
}

/* Make the buffer resident up to `upto` bytes, or the next chunk when that
 * is more: twice what is resident up to GROW_STEP, then GROW_STEP more at a
 * time (at most cap); limit follows.  The chunk is populated with one
 * madvise(MADV_POPULATE_WRITE) where the kernel has it (Linux 5.14): the
 * kernel fills the range in one pass instead of taking a page fault per
 * page, which costs 2-3 times less in a virtual machine.  The pages are
 * taken here, once per chunk, and the fixed steps keep what is made
 * resident ahead of the records (and paid for inside a traced call) under
 * GROW_STEP however long the run. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void grow_resident(size_t upto)
{
  size_t want = S.resident < GROW_STEP ? S.resident * 2 : S.resident + GROW_STEP;
  if (want < upto)
    want = upto;
  if (want > S.cap)
    want = S.cap;
  if (want <= S.resident)
    return;
  long pg = sysconf(_SC_PAGESIZE);
  size_t step = pg > 0 ? (size_t)pg : 4096;
  uint8_t *from = S.buf + (S.resident & ~(step - 1));
  if (madvise(from, (size_t)(S.buf + want - from), MADV_POPULATE_WRITE) != 0) {
    /* an older kernel: touch the new pages now, a write per page (they
     * are private and zero), so that no page fault lands in a later call */
    for (size_t o = S.resident; o < want; o += step)
      ((volatile uint8_t *)S.buf)[o] = 0;
  }
  S.resident = want;
  if (!S.stopped)
    S.limit = S.resident - HEADROOM;
}

/* Make room for len bytes by the policy; 0 when there is room now. */
static int make_room(size_t len)
{
  if (S.mapped && S.used + len + HEADROOM > S.resident && S.resident < S.cap)
    grow_resident(S.used + len + HEADROOM);
  if (S.used + len + HEADROOM <= S.cap)
    return 0;
  if (S.policy == POLICY_OFF) {
    size_t cap = S.cap * 2;
    while (S.used + len + HEADROOM > cap)
      cap *= 2;
    uint8_t *nb = realloc(S.buf, cap);
    if (!nb) {
      stop_tracing(STOP_NOMEM, "out of memory for the trace buffer (policy off)");
      return -1;
    }
    S.buf = nb;
    S.cap = cap;
    S.limit = cap - HEADROOM;
    return 0;
  }
  if (S.policy == POLICY_FULL || S.policy == POLICY_AUTO) {
    if (S.policy == POLICY_AUTO)
      S.unsync_swapouts++;
    swapout(0, 0);
    return S.stopped ? -1 : 0;
  }
  char why[240];
  snprintf(why, sizeof why, "the trace buffer (budget %llu bytes) filled up between two "
           "collectives on MPI_COMM_WORLD (use a larger --budget or --policy full)",
           (unsigned long long)S.budget);
  stop_tracing(STOP_OVERFLOW, why);
  return -1;
}

/* Append one record when the buffer is full or tracing stopped. */
__attribute__((noinline, cold)) static void put_slow(const void *rec, size_t len)
{
  if (S.stopped || !S.buf)
    return;
  if (make_room(len) != 0)
    return;
  memcpy(S.buf + S.used, rec, len);
  __atomic_store_n(&S.used, S.used + len, __ATOMIC_RELEASE);
}

/* Append one record (lock held).  Inlined, so that the copy of a record
 * of constant length becomes a few stores; the release store publishes it
 * to a signal handler that writes the buffer out. */
__attribute__((always_inline)) static inline void put(const void *rec, size_t len)
{
  size_t u = S.used;
  if (__builtin_expect(u + len > S.limit, 0)) {
    put_slow(rec, len);
    return;
  }
  memcpy(S.buf + u, rec, len);
  __atomic_store_n(&S.used, u + len, __ATOMIC_RELEASE);
}

static rec_head_t head(int kind, int func, size_t len, int64_t t)
{
  rec_head_t h = { (uint8_t)kind, 0, (uint16_t)thread_index(), (uint16_t)func,
                   (uint16_t)(len / 8), t };
  return h;
}

/* ------------------------------------------------------------------ */
/* Hash maps: communicator and request handles -> small data */

/* Open addressing with linear probing; a deletion shifts the entries of
 * its run back (no tombstones), so the table stays as small as the live
 * entries need however many requests a run creates. */
typedef struct { uint64_t key, a, b; int state; } slot_t; /* state 0 free, 1 used */
typedef struct { slot_t *s; size_t n, used; } map_t;

static map_t comms, reqs;

static uint64_t hkey(const void *handle, size_t size)
{
  uint64_t k = 0;
  memcpy(&k, handle, size < sizeof k ? size : sizeof k);
  return k;
}

/* Pending requests are keyed by handle and posting thread: under
 * MPI_THREAD_MULTIPLE the library may hand a handle that one thread's wait
 * has just freed to another thread's new request before the first thread
 * records its completion; with the thread in the key the two never meet. */
static uint64_t rkey(MPI_Request req, int thread)
{
  return hkey(&req, sizeof req) ^ ((uint64_t)((unsigned)thread & 0xFF) + 1) << 56;
}

static size_t hslot(uint64_t k, size_t n)
{
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k & (n - 1);
}

static slot_t *map_find(map_t *m, uint64_t key)
{
  if (!m->s)
    return NULL;
  for (size_t i = hslot(key, m->n);; i = (i + 1) & (m->n - 1)) {
    if (m->s[i].state == 0)
      return NULL;
    if (m->s[i].key == key)
      return &m->s[i];
  }
}

static int map_put(map_t *m, uint64_t key, uint64_t a, uint64_t b)
{
  if (!m->s || (m->used + 1) * 2 > m->n) {
    size_t n = m->s ? m->n * 2 : 256;
    slot_t *ns = calloc(n, sizeof *ns);
    if (!ns)
      return -1;
    map_t nm = { ns, n, 0 };
    for (size_t i = 0; m->s && i < m->n; i++)
      if (m->s[i].state == 1)
        map_put(&nm, m->s[i].key, m->s[i].a, m->s[i].b);
    free(m->s);
    *m = nm;
  }
  size_t i = hslot(key, m->n);
  while (m->s[i].state == 1 && m->s[i].key != key)
    i = (i + 1) & (m->n - 1);
  if (m->s[i].state != 1)
    m->used++;
  m->s[i] = (slot_t){ key, a, b, 1 };
  return 0;
}

/* Remove the entry in slot s (from map_find). */
static void map_remove(map_t *m, slot_t *s)
{
  size_t mask = m->n - 1;
  size_t hole = (size_t)(s - m->s);
  for (size_t j = (hole + 1) & mask; m->s[j].state == 1; j = (j + 1) & mask) {
    size_t home = hslot(m->s[j].key, m->n);
    /* the entry at j may move to the hole unless its home lies in (hole, j] */
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      m->s[hole] = m->s[j];
      hole = j;
    }
  }
  m->s[hole].state = 0;
  m->used--;
}

static void map_del(map_t *m, uint64_t key)
{
  slot_t *s = map_find(m, key);
  if (s)
    map_remove(m, s);
}

/* ------------------------------------------------------------------ */
/* Communicators: a local id per communicator, defined once in the file */

static int comm_register(MPI_Comm comm, int parent)
{
  int inter = 0;
  MPI_Group g, world;
  PMPI_Comm_test_inter(comm, &inter);
  if ((inter ? PMPI_Comm_remote_group(comm, &g) : PMPI_Comm_group(comm, &g)) != MPI_SUCCESS)
    return -1;
  int n = 0;
  PMPI_Group_size(g, &n);
  size_t len = sizeof(rec_comm_t) + (((size_t)n * 4 + 7) & ~(size_t)7);
  if (len / 8 > 0xFFFF) { /* too many members for one record: keep only the size */
    len = sizeof(rec_comm_t);
  }
  uint8_t *rec = calloc(1, len);
  int *ranks = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  if (!rec || !ranks) {
    free(rec);
    free(ranks);
    PMPI_Group_free(&g);
    return -1;
  }
  int id = S.next_comm_id++;
  rec_comm_t *c = (rec_comm_t *)rec;
  c->h = head(REC_COMM, 0, len, now_ns());
  c->id = id;
  c->parent = parent;
  c->size = n;
  c->flags = inter ? 1 : 0;
  if (len > sizeof(rec_comm_t)) {
    for (int i = 0; i < n; i++)
      ranks[i] = i;
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    int *out = (int *)(rec + sizeof(rec_comm_t));
    PMPI_Group_translate_ranks(g, n, ranks, world, out);
    PMPI_Group_free(&world);
    for (int i = 0; i < n; i++)
      if (out[i] == MPI_UNDEFINED) /* outside this run's world (MPI_Comm_spawn) */
        c->flags |= 2;
  } else {
    c->flags |= 2; /* members left out */
  }
  PMPI_Group_free(&g);
  free(ranks);
  put(rec, len);
  free(rec);
  map_put(&comms, hkey(&comm, sizeof comm), (uint64_t)id, 0);
  return id;
}

static int comm_id(MPI_Comm comm)
{
  if (comm == MPI_COMM_WORLD)
    return 0;
  if (comm == MPI_COMM_SELF && S.buf) /* registered second at MPI_Init */
    return 1;
  slot_t *s = map_find(&comms, hkey(&comm, sizeof comm));
  if (s)
    return (int)s->a;
  return comm_register(comm, -1);
}

void tiers_trace_comm_new(MPI_Comm parent, MPI_Comm comm)
{
  if (T.depth != 1)
    return;
  lock();
  int p = comm_id(parent);
  map_del(&comms, hkey(&comm, sizeof comm));
  comm_register(comm, p);
  unlock();
}

void tiers_trace_comm_free(MPI_Comm comm)
{
  lock();
  map_del(&comms, hkey(&comm, sizeof comm));
  unlock();
}

/* ------------------------------------------------------------------ */
/* Entry points for the wrappers */

/* T.depth is 1 in a recording wrapper, 2 in one that records nothing but
 * must still reach the sync decision after a world collective (a paused or
 * stopped rank under the sync policy: the others wait for its vote). */
/* Functions left out by TIERS_TRACE_FILTER (include=A,B or exclude=A,B):
 * filled at MPI_Init, read only afterwards. */
#define TIERS_TRACE_ENV_FILTER "TIERS_TRACE_FILTER"
static unsigned char *skip_fn;

int tiers_trace_begin(int func, const void *ra)
{
  if (T.depth > 0 || !S.initialised || S.finished)
    return 0;
  if (skip_fn && skip_fn[func])
    return 0;
  if (S.stopped || S.paused) {
    if (!S.sync_active)
      return 0;
    T.depth = 2;
    return 1;
  }
  T.depth = 1;
  T.post_ns = 0;
  T.enter_ns = now_ns();
  /* the call site: the wrapper's return address, resolved to file:line
   * after the run (tiers-trace-post with the REC_MAP records) */
  struct { rec_head_t h; uint64_t ra; } e = { head(REC_ENTER, func, sizeof e, T.enter_ns),
                                              (uint64_t)(uintptr_t)ra };
  lock();
  put(&e, sizeof e);
  unlock();
  return 1;
}

static void sync_point(void);

void tiers_trace_end(int func)
{
  if (T.depth == 1) {
    rec_head_t h = head(REC_LEAVE, func, sizeof h, post_ns());
    lock();
    put(&h, sizeof h);
    unlock();
  }
  if (T.sync_due) {
    T.sync_due = 0;
    sync_point();
  }
  T.depth = 0;
}

/* Sizes of the predefined datatypes, filled once at MPI_Init (before any
 * call is recorded) and only read afterwards: a predefined handle never
 * changes its size and is never freed, so the cache is never stale.
 * Derived datatypes go to PMPI_Type_size every time. */
#define TSIZE_SLOTS 128
static struct { MPI_Datatype t; int size, used; } TSZ[TSIZE_SLOTS];

static void tsize_init(void)
{
  const MPI_Datatype named[] = {
    MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR, MPI_BYTE, MPI_WCHAR, MPI_SHORT,
    MPI_UNSIGNED_SHORT, MPI_INT, MPI_UNSIGNED, MPI_LONG, MPI_UNSIGNED_LONG, MPI_LONG_LONG,
    MPI_UNSIGNED_LONG_LONG, MPI_FLOAT, MPI_DOUBLE, MPI_LONG_DOUBLE, MPI_C_BOOL, MPI_INT8_T,
    MPI_INT16_T, MPI_INT32_T, MPI_INT64_T, MPI_UINT8_T, MPI_UINT16_T, MPI_UINT32_T,
    MPI_UINT64_T, MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX, MPI_AINT, MPI_OFFSET,
    MPI_COUNT, MPI_PACKED, MPI_INTEGER, MPI_REAL, MPI_DOUBLE_PRECISION, MPI_COMPLEX,
    MPI_DOUBLE_COMPLEX, MPI_LOGICAL, MPI_CHARACTER, MPI_2INT, MPI_FLOAT_INT,
    MPI_DOUBLE_INT, MPI_LONG_INT,
  };
  for (size_t k = 0; k < sizeof named / sizeof *named; k++) {
    MPI_Datatype t = named[k];
    int size = 0;
    if (t == MPI_DATATYPE_NULL || PMPI_Type_size(t, &size) != MPI_SUCCESS || size < 0)
      continue;
    size_t i = hslot(hkey(&t, sizeof t), TSIZE_SLOTS);
    while (TSZ[i].used && TSZ[i].t != t)
      i = (i + 1) & (TSIZE_SLOTS - 1);
    TSZ[i].t = t;
    TSZ[i].size = size;
    TSZ[i].used = 1;
  }
}

uint64_t tiers_trace_type_size(MPI_Datatype t)
{
  for (size_t i = hslot(hkey(&t, sizeof t), TSIZE_SLOTS); TSZ[i].used;
       i = (i + 1) & (TSIZE_SLOTS - 1))
    if (TSZ[i].t == t)
      return (uint64_t)TSZ[i].size;
  int s = 0;
  if (t == MPI_DATATYPE_NULL || PMPI_Type_size(t, &s) != MPI_SUCCESS || s < 0)
    return 0;
  return (uint64_t)s;
}

int tiers_trace_comm_size(MPI_Comm comm)
{
  int n = 0;
  PMPI_Comm_size(comm, &n);
  return n;
}

int tiers_trace_comm_rank(MPI_Comm comm)
{
  int r = 0;
  PMPI_Comm_rank(comm, &r);
  return r;
}

uint64_t tiers_trace_sum(const int *a, MPI_Comm comm)
{
  uint64_t s = 0;
  int n = tiers_trace_comm_size(comm);
  for (int i = 0; a && i < n; i++)
    s += a[i] > 0 ? (uint64_t)a[i] : 0;
  return s;
}

static void msg(int kind, int peer, int tag, MPI_Comm comm, uint64_t bytes, uint64_t req)
{
  if (T.depth != 1)
    return;
  rec_msg_t r;
  memset(&r, 0, sizeof r);
  lock();
  r.h = head(kind, 0, sizeof r, kind == REC_SEND ? T.enter_ns : post_ns());
  r.comm = comm_id(comm);
  r.peer = peer;
  r.tag = tag;
  r.bytes = bytes;
  r.req = req;
  put(&r, sizeof r);
  unlock();
}

void tiers_trace_send(int dest, int tag, MPI_Comm comm, int count, MPI_Datatype type)
{
  if (T.depth != 1 || dest == MPI_PROC_NULL)
    return;
  msg(REC_SEND, dest, tag, comm, (uint64_t)(count > 0 ? count : 0) * tiers_trace_type_size(type), 0);
}

/* Bytes received and the cancelled flag of a status.  Open MPI's public
 * status struct holds both (its MPI_Get_count divides _ucount, the byte
 * count, by the type size), which saves two calls into the library per
 * completion; other libraries go through PMPI. */
static inline uint64_t status_bytes(const MPI_Status *st)
{
#if defined(OPEN_MPI) && OPEN_MPI
  return (uint64_t)st->_ucount;
#else
  int n = 0;
  if (PMPI_Get_count(st, MPI_BYTE, &n) != MPI_SUCCESS || n < 0)
    return 0;
  return (uint64_t)n;
#endif
}

static inline int status_cancelled(const MPI_Status *st)
{
#if defined(OPEN_MPI) && OPEN_MPI
  return st->_cancelled != 0;
#else
  int c = 0;
  PMPI_Test_cancelled(st, &c);
  return c;
#endif
}

void tiers_trace_recv(const MPI_Status *st, MPI_Comm comm)
{
  if (st->MPI_SOURCE == MPI_PROC_NULL || st->MPI_SOURCE < 0)
    return;
  msg(REC_RECV, st->MPI_SOURCE, st->MPI_TAG, comm, status_bytes(st), 0);
}

void tiers_trace_recv_named(int source, int tag, MPI_Comm comm, int count, MPI_Datatype type)
{
  if (T.depth != 1 || source < 0 || tag == MPI_ANY_TAG) /* PROC_NULL, ANY_SOURCE */
    return;
  msg(REC_RECV, source, tag, comm,
      (uint64_t)(count > 0 ? count : 0) * tiers_trace_type_size(type), 0);
}

/* Requests: a = our request id, b = kind (REC_ISEND or REC_IRECV_POST) << 32 | comm id */
void tiers_trace_isend(int dest, int tag, MPI_Comm comm, int count, MPI_Datatype type,
                       MPI_Request req)
{
  if (T.depth != 1 || dest == MPI_PROC_NULL || req == MPI_REQUEST_NULL)
    return;
  uint64_t bytes = (uint64_t)(count > 0 ? count : 0) * tiers_trace_type_size(type);
  lock();
  uint64_t id = ++S.next_req_id;
  int cid = comm_id(comm);
  map_put(&reqs, rkey(req, thread_index()), id, ((uint64_t)REC_ISEND << 32) | (uint32_t)cid);
  unlock();
  msg(REC_ISEND, dest, tag, comm, bytes, id);
}

void tiers_trace_irecv(MPI_Comm comm, MPI_Request req)
{
  if (T.depth != 1 || req == MPI_REQUEST_NULL)
    return;
  rec_req_t r;
  lock();
  uint64_t id = ++S.next_req_id;
  int cid = comm_id(comm);
  map_put(&reqs, rkey(req, thread_index()), id, ((uint64_t)REC_IRECV_POST << 32) | (uint32_t)cid);
  r.h = head(REC_IRECV_POST, 0, sizeof r, post_ns());
  r.req = id;
  put(&r, sizeof r);
  unlock();
}

/* MPI_Comm_idup: the new communicator is defined once its request
 * completes (its handle is not usable before); until then the request maps
 * to the caller's output handle and the parent.  A Fortran caller's handle
 * (an MPI_Fint, 4-byte aligned) is kept with bit 0 set, a C one (8-byte
 * aligned) as it is. */
static map_t idups;

static void idup_keep(MPI_Comm parent, uint64_t out, MPI_Request req)
{
  uint64_t p = 0;
  memcpy(&p, &parent, sizeof parent < sizeof p ? sizeof parent : sizeof p);
  lock();
  map_put(&idups, rkey(req, thread_index()), out, p);
  unlock();
}

void tiers_trace_comm_idup(MPI_Comm parent, MPI_Comm *newcomm, MPI_Request req)
{
  if (T.depth != 1 || req == MPI_REQUEST_NULL || !newcomm)
    return;
  idup_keep(parent, (uint64_t)(uintptr_t)newcomm, req);
}

void tiers_trace_fcomm_idup(MPI_Comm parent, MPI_Fint *newcomm, MPI_Request req)
{
  if (T.depth != 1 || req == MPI_REQUEST_NULL || !newcomm)
    return;
  idup_keep(parent, (uint64_t)(uintptr_t)newcomm | 1, req);
}

static void idup_done(MPI_Request saved)
{
  lock();
  slot_t *s = idups.used ? map_find(&idups, rkey(saved, thread_index())) : NULL;
  int nthreads = __atomic_load_n(&S.next_thread, __ATOMIC_RELAXED);
  for (int t = 0; idups.used && !s && S.threaded && t < nthreads && t < 256; t++)
    s = map_find(&idups, rkey(saved, t));
  if (!s) {
    unlock();
    return;
  }
  uint64_t a = s->a;
  MPI_Comm parent;
  uint64_t p = s->b;
  memcpy(&parent, &p, sizeof parent < sizeof p ? sizeof parent : sizeof p);
  map_remove(&idups, s);
  unlock();
  MPI_Comm out = a & 1 ? PMPI_Comm_f2c(*(MPI_Fint *)(uintptr_t)(a & ~(uint64_t)1))
                       : *(MPI_Comm *)(uintptr_t)a;
  if (out != MPI_COMM_NULL)
    tiers_trace_comm_new(parent, out);
}

void tiers_trace_complete(MPI_Request saved, const MPI_Status *st)
{
  if (T.depth != 1 || saved == MPI_REQUEST_NULL)
    return;
  if (idups.used)
    idup_done(saved);
  lock();
  slot_t *s = map_find(&reqs, rkey(saved, thread_index()));
  /* completed by another thread than the one that posted it */
  int nthreads = __atomic_load_n(&S.next_thread, __ATOMIC_RELAXED);
  for (int t = 0; !s && S.threaded && t < nthreads && t < 256; t++)
    s = map_find(&reqs, rkey(saved, t));
  if (!s) {
    unlock();
    return;
  }
  uint64_t id = s->a;
  int kind = (int)(s->b >> 32);
  int cid = (int)(uint32_t)s->b;
  map_remove(&reqs, s);
  int cancelled = st != MPI_STATUS_IGNORE && status_cancelled(st);
  if (kind == REC_ISEND) {
    rec_req_t r = { head(REC_ISEND_DONE, 0, sizeof r, post_ns()), id };
    if (cancelled)
      r.h.flags = 1;
    put(&r, sizeof r);
  } else if (st != MPI_STATUS_IGNORE && !cancelled && st->MPI_SOURCE >= 0) {
    rec_msg_t r;
    memset(&r, 0, sizeof r);
    r.h = head(REC_IRECV_DONE, 0, sizeof r, post_ns());
    r.comm = cid;
    r.peer = st->MPI_SOURCE;
    r.tag = st->MPI_TAG;
    r.bytes = status_bytes(st);
    r.req = id;
    put(&r, sizeof r);
  }
  unlock();
}

MPI_Status *tiers_trace_reqs_save(tiers_reqsave_t *sv, int count, const MPI_Request *req,
                                  MPI_Status *st)
{
  sv->count = count > 0 ? count : 0;
  sv->req = sv->req_stack;
  sv->st = st;
  sv->fst = NULL;
  sv->own = NULL;
  if (sv->count > TIERS_REQ_STACK) {
    size_t n = (size_t)sv->count;
    sv->own = malloc(n * (sizeof(MPI_Request) + sizeof(MPI_Status)));
    if (!sv->own) { /* no copies: completions go unrecorded */
      sv->req = NULL;
      sv->count = 0;
      return st;
    }
    sv->req = sv->own;
    if (st == MPI_STATUSES_IGNORE)
      sv->st = (MPI_Status *)((char *)sv->own + n * sizeof(MPI_Request));
  } else if (st == MPI_STATUSES_IGNORE) {
    sv->st = sv->st_stack;
  }
  if (sv->count > 0)
    memcpy(sv->req, req, sizeof(MPI_Request) * (size_t)sv->count);
  return sv->st;
}

/* Completions k = 0..nidx-1: request idx[k] - base (k when idx is NULL),
 * status k of the statuses given to the MPI call (Waitsome's statuses
 * follow its indices; Waitall's follow the requests). */
static void reqs_done(tiers_reqsave_t *sv, int nidx, const int *idx, int base)
{
  if (!sv->req)
    return;
  for (int k = 0; k < nidx; k++) {
    int i = idx ? idx[k] - base : k;
    if (i < 0 || i >= sv->count)
      continue;
    MPI_Status cst;
    const MPI_Status *s = MPI_STATUS_IGNORE;
    if (sv->fst) {
      if (PMPI_Status_f2c(sv->fst + (size_t)k * TIERS_FSTATUS_WORDS, &cst) == MPI_SUCCESS)
        s = &cst;
    } else if (sv->st) {
      s = &sv->st[k];
    }
    tiers_trace_complete(sv->req[i], s);
  }
}

void tiers_trace_reqs_done(tiers_reqsave_t *sv, int nidx, const int *idx)
{
  reqs_done(sv, nidx, idx, 0);
}

void tiers_trace_reqs_release(tiers_reqsave_t *sv)
{
  free(sv->own);
  sv->own = NULL;
}

/* ------------------------------------------------------------------ */
/* Fortran support */

void tiers_trace_fstring(char *dst, size_t cap, const char *src, size_t len)
{
  size_t n = src ? len : 0;
  if (n > cap - 1)
    n = cap - 1;
  while (n > 0 && src[n - 1] == ' ')
    n--;
  if (n)
    memcpy(dst, src, n);
  dst[n] = 0;
}

/* Addresses of Fortran's MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE,
 * MPI_IN_PLACE and MPI_BOTTOM: common blocks of the Fortran binding
 * (Open MPI: mpi_fortran_status_ignore_ ...), found once with dlsym; NULL
 * where the MPI library has none of that name (then nothing matches). */
static struct {
  int looked;
  const void *status_ignore, *statuses_ignore, *in_place, *bottom;
} F;

static const void *fsym_data(const char *base)
{
  char name[96];
  const char *forms[] = { "%s_", "%s", "%s__" };
  for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
    snprintf(name, sizeof name, forms[i], base);
    void *p = dlsym(RTLD_DEFAULT, name);
    if (p)
      return p;
  }
  return NULL;
}

static void fortran_lookup(void)
{
  if (__atomic_load_n(&F.looked, __ATOMIC_ACQUIRE))
    return;
  F.status_ignore = fsym_data("mpi_fortran_status_ignore");
  F.statuses_ignore = fsym_data("mpi_fortran_statuses_ignore");
  F.in_place = fsym_data("mpi_fortran_in_place");
  F.bottom = fsym_data("mpi_fortran_bottom");
  __atomic_store_n(&F.looked, 1, __ATOMIC_RELEASE);
}

void *tiers_trace_freal(void **slot, const char *name)
{
  void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (p)
    return p;
  char sym[96], upper[96];
  size_t n = strlen(name);
  if (n + 3 > sizeof sym)
    return NULL;
  for (size_t i = 0; i <= n; i++)
    upper[i] = (name[i] >= 'a' && name[i] <= 'z') ? (char)(name[i] - 'a' + 'A') : name[i];
  const char *forms[] = { "%s_", "%s__", "%s" };
  for (size_t i = 0; !p && i < sizeof forms / sizeof *forms; i++) {
    snprintf(sym, sizeof sym, forms[i], name);
    p = dlsym(RTLD_NEXT, sym);
    if (!p)
      p = dlsym(RTLD_DEFAULT, sym);
  }
  if (!p)
    p = dlsym(RTLD_NEXT, upper);
  if (!p) {
    say("the Fortran MPI library has no %s_; the call fails with MPI_ERR_INTERN", name);
    return NULL;
  }
  __atomic_store_n(slot, p, __ATOMIC_RELEASE);
  return p;
}

const void *tiers_trace_fbuf(const void *p)
{
  fortran_lookup();
  if (p && p == F.in_place)
    return MPI_IN_PLACE;
  if (p && p == F.bottom)
    return MPI_BOTTOM;
  return p;
}

int tiers_trace_fstatus_ignore(const MPI_Fint *st)
{
  fortran_lookup();
  return st == NULL || (const void *)st == F.status_ignore ||
         (const void *)st == F.statuses_ignore;
}

MPI_Fint *tiers_trace_freqs_save(tiers_reqsave_t *sv, int count, const MPI_Fint *req,
                                 MPI_Fint *st)
{
  fortran_lookup();
  sv->count = count > 0 ? count : 0;
  sv->req = sv->req_stack;
  sv->st = NULL;
  sv->fst = st;
  sv->own = NULL;
  size_t n = (size_t)sv->count;
  int ignore = st != NULL && ((const void *)st == F.statuses_ignore ||
                              (const void *)st == F.status_ignore);
  size_t need = (n > TIERS_REQ_STACK ? n * sizeof(MPI_Request) : 0) +
                (ignore ? n * TIERS_FSTATUS_WORDS * sizeof(MPI_Fint) : 0);
  if (need > 0) {
    sv->own = malloc(need);
    if (!sv->own) {
      sv->req = NULL;
      sv->count = 0;
      sv->fst = NULL;
      return st;
    }
    char *b = sv->own;
    if (n > TIERS_REQ_STACK) {
      sv->req = (MPI_Request *)b;
      b += n * sizeof(MPI_Request);
    }
    if (ignore)
      sv->fst = (MPI_Fint *)b;
  }
  for (size_t i = 0; i < n; i++)
    sv->req[i] = PMPI_Request_f2c(req[i]);
  return sv->fst ? sv->fst : st;
}

void tiers_trace_freqs_done(tiers_reqsave_t *sv, int nidx, const MPI_Fint *idx)
{
  reqs_done(sv, nidx, idx, 1); /* Fortran indices count from 1 */
}

void tiers_trace_coll_begin(void)
{
  if (T.depth != 1)
    return;
  rec_head_t h = head(REC_COLL_BEGIN, 0, sizeof h, T.enter_ns);
  lock();
  put(&h, sizeof h);
  unlock();
}

void tiers_trace_coll_end(int op, MPI_Comm comm, int root, uint64_t sent, uint64_t recvd)
{
  if (comm == MPI_COMM_WORLD && S.sync_active) {
    /* MPI lets one thread at a time call collectives on a communicator, so
     * the count is the same on every rank at the same collective */
    S.world_colls++;
    if (S.swap_every == 0 || S.world_colls % S.swap_every == 0)
      T.sync_due = 1;
  }
  if (T.depth != 1)
    return;
  rec_coll_t r;
  memset(&r, 0, sizeof r);
  lock();
  r.h = head(REC_COLL_END, 0, sizeof r, post_ns());
  r.comm = comm_id(comm);
  r.root = root;
  r.op = (uint32_t)op;
  r.sent = sent;
  r.recvd = recvd;
  put(&r, sizeof r);
  unlock();
}

/* ------------------------------------------------------------------ */
/* The sync policy: a collective decision after collectives on the world */

static void sync_point(void)
{
  if (!S.sync_active)
    return;
  /* fill, largest write so far, stop flag, bytes to write.  The lock is
   * not held across the reduction: another thread of this rank may have
   * to record (and post) a receive that a peer waits for meanwhile. */
  lock();
  double v[4] = { S.cap ? (double)S.used / (double)(S.cap - HEADROOM) : 0.0,
                  S.largest_write_s, S.stopped ? 1.0 : 0.0, (double)S.used };
  unlock();
  double m[4];
  if (PMPI_Allreduce(v, m, 4, MPI_DOUBLE, MPI_MAX, S.priv) != MPI_SUCCESS) {
    S.sync_active = 0;
    return;
  }
  lock();
  if (m[2] > 0) { /* some rank stopped: all stop, and the checks end here */
    if (!S.stopped)
      stop_tracing(STOP_PEER, NULL);
    S.sync_active = 0;
  } else if (S.swap_every > 0 || m[0] >= S.threshold) {
    double tau;
    if (S.tau > 0) { /* --tau, raised to 1.5x a write that overran it */
      if (m[1] > S.tau_eff) {
        if (S.rank == 0)
          say("a swap-out write took %.3f s, longer than tau %.3f s; tau is now %.3f s",
              m[1], S.tau_eff, 1.5 * m[1]);
        S.tau_eff = 1.5 * m[1];
      }
      tau = S.tau_eff;
    } else { /* auto: 1.5x the largest write so far, at least bytes at 500 MB/s */
      tau = 1.5 * m[1];
      if (m[3] / 500e6 > tau)
        tau = m[3] / 500e6;
    }
    swapout((int64_t)(tau * 1e9), 1);
  }
  unlock();
}

/* ------------------------------------------------------------------ */
/* Clock offsets: rank 0 is the reference; offset = rank0_time - local_time */

static void clock_sync(int phase)
{
  int64_t best_off = 0, best_rtt = 0;
  for (int r = 1; r < S.size; r++) {
    if (S.rank == 0) {
      for (int k = 0; k < CLOCK_ROUNDS; k++) {
        int64_t x;
        PMPI_Recv(&x, 1, MPI_INT64_T, r, 77, S.priv, MPI_STATUS_IGNORE);
        x = now_ns();
        PMPI_Send(&x, 1, MPI_INT64_T, r, 78, S.priv);
      }
    } else if (S.rank == r) {
      best_rtt = INT64_MAX;
      for (int k = 0; k < CLOCK_ROUNDS; k++) {
        int64_t t1 = now_ns(), x = t1;
        PMPI_Send(&x, 1, MPI_INT64_T, 0, 77, S.priv);
        PMPI_Recv(&x, 1, MPI_INT64_T, 0, 78, S.priv, MPI_STATUS_IGNORE);
        int64_t t2 = now_ns();
        if (t2 - t1 < best_rtt) {
          best_rtt = t2 - t1;
          best_off = x - (t1 + (t2 - t1) / 2);
        }
      }
    }
  }
  rec_clock_t c;
  memset(&c, 0, sizeof c);
  c.h = head(REC_CLOCK, 0, sizeof c, now_ns());
  c.offset_ns = best_off;
  c.rtt_ns = best_rtt;
  c.phase = phase;
  if (S.stopped)
    return;
  lock();
  put(&c, sizeof c);
  unlock();
}

/* ------------------------------------------------------------------ */
/* Life cycle */

static void on_signal(int sig)
{
  /* async-signal-safe: write what is committed, then let the signal act */
  if (!S.stopped && S.fd >= 0 && S.used > 0) {
    size_t n = __atomic_load_n(&S.used, __ATOMIC_ACQUIRE);
    (void)write_all(S.fd, S.buf, n);
  }
  S.limit = 0;
  S.stopped = 1;
  struct sigaction *old = sig == SIGTERM ? &S.old_term : &S.old_int;
  sigaction(sig, old, NULL);
  raise(sig);
}

static void at_exit(void)
{
  /* exit() without MPI_Finalize (or during it): keep what was recorded */
  if (S.initialised && S.fd >= 0 && !S.stopped) {
    lock();
    write_buffer();
    S.finished = 1;
    unlock();
  }
}

static int parse_policy(const char *s)
{
  if (!s || !*s || strcmp(s, "auto") == 0)
    return POLICY_AUTO;
  if (strcmp(s, "sync") == 0)
    return POLICY_SYNC;
  if (strcmp(s, "full") == 0)
    return POLICY_FULL;
  if (strcmp(s, "off") == 0)
    return POLICY_OFF;
  return -1;
}

static int open_file(const char *dir)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/raw", dir);
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    return -1;
  snprintf(path, sizeof path, "%s/raw/rank-%06d.tev", dir, S.rank);
  return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666);
}

static int write_header(void)
{
  /* magic, version, rank, size, region count, region names, host name */
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  size_t names = 0;
  for (int i = 0; i < tiers_trace_fn_count; i++)
    names += strlen(tiers_trace_fn_names[i]) + 1;
  size_t hostlen = strlen(host) + 1;
  size_t len = 8 + 4 * 6 + names + hostlen;
  len = (len + 7) & ~(size_t)7;
  uint8_t *h = calloc(1, len);
  if (!h)
    return -1;
  uint32_t hdr[6] = { RAW_VERSION, (uint32_t)len, (uint32_t)S.rank, (uint32_t)S.size,
                      (uint32_t)tiers_trace_fn_count, (uint32_t)hostlen };
  memcpy(h, RAW_MAGIC, 8);
  memcpy(h + 8, hdr, sizeof hdr);
  size_t off = 8 + sizeof hdr;
  for (int i = 0; i < tiers_trace_fn_count; i++) {
    size_t n = strlen(tiers_trace_fn_names[i]) + 1;
    memcpy(h + off, tiers_trace_fn_names[i], n);
    off += n;
  }
  memcpy(h + off, host, hostlen);
  int rc = write_all(S.fd, h, len);
  free(h);
  if (rc == 0)
    S.file_bytes = len;
  return rc;
}

/* TIERS_TRACE_FILTER: "include=MPI_Send,MPI_Recv" records those functions
 * only, "exclude=MPI_Comm_rank" all but those.  MPI_Init*, MPI_Finalize and
 * MPI_Abort are always recorded (the tracer's own steps hang on them). */
static void filter_init(const char *spec)
{
  if (!spec || !*spec)
    return;
  int include = strncmp(spec, "include=", 8) == 0;
  if (!include && strncmp(spec, "exclude=", 8) != 0) {
    say("TIERS_TRACE_FILTER '%s' is neither include=... nor exclude=...; recording every "
        "function", spec);
    return;
  }
  skip_fn = calloc((size_t)tiers_trace_fn_count + 1, 1);
  if (!skip_fn)
    return;
  for (int i = 0; i < tiers_trace_fn_count; i++)
    skip_fn[i] = (unsigned char)include;
  const char *p = spec + 8;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    for (int i = 0; i < tiers_trace_fn_count; i++)
      if (strlen(tiers_trace_fn_names[i]) == n && strncmp(tiers_trace_fn_names[i], p, n) == 0)
        skip_fn[i] = (unsigned char)!include;
    p += n + (end ? 1 : 0);
  }
  for (int i = 0; i < tiers_trace_fn_count; i++) {
    const char *f = tiers_trace_fn_names[i];
    if (strncmp(f, "MPI_Init", 8) == 0 || strcmp(f, "MPI_Finalize") == 0 ||
        strcmp(f, "MPI_Abort") == 0)
      skip_fn[i] = 0;
  }
}

/* REC_MAP: the program's file mappings (start, end, file offset, path), so
 * that call-site addresses can be turned into file:line after the run,
 * position-independent executables and libraries included. */
static void put_maps(void)
{
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f)
    return;
  char line[4352];
  while (fgets(line, sizeof line, f)) {
    unsigned long long start, end, off;
    char perms[8], path[4096];
    path[0] = 0;
    if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %4095[^\n]", &start, &end, perms, &off,
               path) < 5 || path[0] != '/')
      continue;
    size_t plen = strlen(path);
    size_t len = (16 + 24 + plen + 1 + 7) & ~(size_t)7;
    uint8_t rec[16 + 24 + 4104];
    memset(rec, 0, len);
    rec_head_t h = head(REC_MAP, 0, len, now_ns());
    uint64_t v[3] = { start, end, off };
    memcpy(rec, &h, sizeof h);
    memcpy(rec + 16, v, sizeof v);
    memcpy(rec + 40, path, plen);
    put(rec, len);
  }
  fclose(f);
}

void tiers_trace_after_init(int provided, int func, int64_t t_enter)
{
  const char *dir = getenv(TIERS_TRACE_ENV_DIR);
  if (!dir || !*dir || S.initialised)
    return;
  /* a process started by MPI_Comm_spawn inherits the settings but is not
   * traced: its ranks would write over the parent's raw files */
  MPI_Comm spawn_parent = MPI_COMM_NULL;
  if (PMPI_Comm_get_parent(&spawn_parent) == MPI_SUCCESS && spawn_parent != MPI_COMM_NULL)
    return;
  PMPI_Comm_rank(MPI_COMM_WORLD, &S.rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &S.size);
  clock_calibrate();
  S.provided = provided;
  S.threaded = provided == MPI_THREAD_MULTIPLE;
  S.policy = parse_policy(getenv(TIERS_TRACE_ENV_POLICY));
  const char *b = getenv(TIERS_TRACE_ENV_BUDGET);
  S.budget = b ? strtoull(b, NULL, 10) : 64ull << 20;
  const char *tau = getenv(TIERS_TRACE_ENV_TAU);
  S.tau = tau ? strtod(tau, NULL) : 0.0;
  const char *th = getenv(TIERS_TRACE_ENV_THRESHOLD);
  S.threshold = th ? strtod(th, NULL) : 0.5;
  if (!(S.threshold > 0 && S.threshold <= 1))
    S.threshold = 0.5;
  S.tau_eff = S.tau;
  const char *every = getenv(TIERS_TRACE_ENV_SWAP_EVERY);
  S.swap_every = every ? strtoull(every, NULL, 10) : 0;
  filter_init(getenv(TIERS_TRACE_ENV_FILTER));
  const char *slow = getenv("TIERS_TRACE_TEST_SLOW_WRITE");
  if (slow && sscanf(slow, "%d:%d:%d", &S.slow_rank, &S.slow_ms, &S.slow_at) < 2)
    S.slow_ms = 0;
  /* Every rank takes the same collective steps below, whatever fails
   * locally, so that the sync reductions always match up. */
  int bad = 0;
  if (S.policy < 0) {
    say("unknown policy '%s' (use auto, sync, full or off); tracing is off", getenv(TIERS_TRACE_ENV_POLICY));
    bad = 1;
    S.policy = POLICY_FULL;
  }
  if (S.budget < TIERS_TRACE_MIN_BUDGET) {
    say("budget %llu bytes is below the minimum of %d; tracing is off",
        (unsigned long long)S.budget, TIERS_TRACE_MIN_BUDGET);
    bad = 1;
  }
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &S.priv) != MPI_SUCCESS) {
    say("cannot duplicate MPI_COMM_WORLD; tracing is off");
    S.stopped = 1;
    return;
  }
  S.sync_active = S.policy == POLICY_SYNC || S.policy == POLICY_AUTO;
  if (!bad) {
    S.fd = open_file(dir);
    if (S.fd < 0) {
      say("cannot create the trace file in %s/raw (%s); tracing is off", dir, strerror(errno));
      bad = 1;
    } else if (write_header() != 0) {
      say("cannot write the trace file (%s); tracing is off", strerror(errno));
      bad = 1;
    }
  }
  if (!bad) {
    S.cap = S.policy == POLICY_OFF ? (1u << 20) : (size_t)S.budget;
    if (S.policy == POLICY_OFF) {
      S.buf = malloc(S.cap);
    } else {
      /* the whole budget reserved; its first chunk made resident now, the
       * rest chunk by chunk as the records reach it (grow_resident) */
      void *p = mmap(NULL, S.cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      S.buf = p == MAP_FAILED ? NULL : p;
      S.mapped = S.buf != NULL;
      if (S.buf) {
        S.resident = 0;
        grow_resident(S.cap < GROW_FIRST ? S.cap : GROW_FIRST);
      }
    }
    if (!S.buf) {
      say("cannot allocate the trace buffer of %llu bytes; tracing is off",
          (unsigned long long)S.budget);
      /* the file then ends in a STOP record (out of memory): the reader and
       * tiers trace see a rank that could not be traced, not an empty trace */
      rec_stop_t r = { { REC_STOP, 0, 0, 0, sizeof(rec_stop_t) / 8, now_ns() }, STOP_NOMEM, 0 };
      (void)write_all(S.fd, &r, sizeof r);
      bad = 1;
    }
  }
  S.initialised = 1;
  S.next_comm_id = 0;
  if (bad) {
    S.stopped = 1; /* still takes part in the clock and sync steps, saying stop */
    clock_sync(0);
    return;
  }
  rec_info_t info;
  memset(&info, 0, sizeof info);
  info.h = head(REC_INFO, 0, sizeof info, t_enter);
  info.provided = provided;
  info.policy = S.policy;
  info.budget = S.budget;
  info.tau = S.tau;
  info.threshold = S.threshold;
  info.swap_every = S.swap_every;
  tsize_init();
  S.limit = (S.mapped ? S.resident : S.cap) - HEADROOM;
  lock();
  put(&info, sizeof info);
  comm_register(MPI_COMM_WORLD, -1); /* id 0 */
  comm_register(MPI_COMM_SELF, -1);  /* id 1 */
  put_maps();
  rec_head_t e = head(REC_ENTER, func, sizeof e, t_enter);
  put(&e, sizeof e);
  unlock();
  clock_sync(0);
  rec_head_t l = head(REC_LEAVE, func, sizeof l, now_ns());
  lock();
  put(&l, sizeof l);
  unlock();

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &S.old_term);
  sigaction(SIGINT, &sa, &S.old_int);
  atexit(at_exit);
}

/* MPI_Finalize, before PMPI_Finalize: the last MPI steps of the tracer
 * (clock offsets, freeing its communicator); no call is recorded after. */
void tiers_trace_before_finalize(void)
{
  if (!S.initialised || S.finished)
    return;
  clock_sync(1); /* every rank: rank 0 waits for each */
  lock();
  S.finished = 1;
  S.sync_active = 0;
  unlock();
  if (S.priv != MPI_COMM_NULL)
    PMPI_Comm_free(&S.priv);
}

/* MPI_Finalize, after PMPI_Finalize: its Leave (when its Enter was
 * recorded), then the buffer goes to the file. */
void tiers_trace_after_finalize(int func, int began)
{
  if (began) {
    if (T.depth == 1) {
      rec_head_t h = head(REC_LEAVE, func, sizeof h, now_ns());
      lock();
      put(&h, sizeof h);
      unlock();
    }
    T.depth = 0;
  }
  if (!S.initialised || S.fd < 0)
    return;
  lock();
  if (!S.stopped) {
    rec_mem_t m = { head(REC_MEM, 0, sizeof m, now_ns()), S.mapped ? S.resident : S.cap, S.cap };
    put(&m, sizeof m);
    write_buffer();
  }
  close(S.fd);
  S.fd = -1;
  unlock();
  sigaction(SIGTERM, &S.old_term, NULL);
  sigaction(SIGINT, &S.old_int, NULL);
}

void tiers_trace_at_abort(void)
{
  if (!S.initialised || S.stopped)
    return;
  lock();
  write_buffer();
  S.limit = 0;
  S.stopped = 1;
  unlock();
}

/* a neighbourhood collective's block: the destination's world rank, bytes */
typedef struct { int32_t world; uint64_t bytes; } nbr_t;
static void xfer(int what, int target, uint64_t bytes, int flags);

/* ------------------------------------------------------------------ */
/* Non-blocking collectives, persistent requests, one-sided and file
 * transfers, MPI_Comm_spawn */

/* A non-blocking collective, recorded when it starts (bytes and root as the
 * call gives them).  It is not a point where the sync policy may swap out:
 * the ranks need not be anywhere near each other until it completes. */
void tiers_trace_icoll_end(int op, MPI_Comm comm, int root, uint64_t sent, uint64_t recvd)
{
  if (T.depth != 1)
    return;
  rec_coll_t r;
  memset(&r, 0, sizeof r);
  lock();
  r.h = head(REC_COLL_END, 0, sizeof r, post_ns());
  r.comm = comm_id(comm);
  r.root = root;
  r.op = (uint32_t)op;
  r.sent = sent;
  r.recvd = recvd;
  put(&r, sizeof r);
  unlock();
}

/* Persistent requests: what *_init gave, kept until MPI_Request_free, so
 * that each MPI_Start records an Isend (or a posted receive) as the
 * non-blocking call would, or, for a persistent collective (recv == 2), the
 * collective with its operation, root and bytes. */
typedef struct {
  int recv, peer, tag; /* recv: 0 send, 1 receive, 2 collective (peer: root, tag: op) */
  MPI_Comm comm;
  uint64_t bytes, recvd;
  int nnbr;            /* a neighbourhood collective: its destinations... */
  nbr_t *nbr;          /* ...(world rank, bytes), malloc'd, or NULL */
} persist_t;

static void persist_drop(slot_t *s)
{
  persist_t *p = (persist_t *)(uintptr_t)s->a;
  free(p->nbr);
  free(p);
}
static map_t persist;

static void persist_keep(persist_t *p, MPI_Request req)
{
  lock();
  uint64_t key = hkey(&req, sizeof req);
  slot_t *old = map_find(&persist, key);
  if (old) {
    persist_drop(old);
    map_remove(&persist, old);
  }
  if (map_put(&persist, key, (uint64_t)(uintptr_t)p, 0) != 0)
    free(p);
  unlock();
}

/* One persistent request's record: recv 0 send, 1 receive, 2 collective
 * (peer = root, tag = operation), kept until the request is freed. */
static void persist_new(int recv, int peer, int tag, MPI_Comm comm, uint64_t bytes,
                        uint64_t recvd, MPI_Request req)
{
  if (T.depth != 1 || req == MPI_REQUEST_NULL)
    return;
  persist_t *p = malloc(sizeof *p);
  if (!p)
    return;
  p->nnbr = 0;
  p->nbr = NULL;
  p->recv = recv;
  p->peer = peer;
  p->tag = tag;
  p->comm = comm;
  p->bytes = bytes;
  p->recvd = recvd;
  persist_keep(p, req);
}

void tiers_trace_pcoll_init(int op, MPI_Comm comm, int root, uint64_t sent, uint64_t recvd,
                            MPI_Request req)
{
  persist_new(2, root, op, comm, sent, recvd, req);
}

void tiers_trace_persist_init(int recv, int peer, int tag, MPI_Comm comm, int count,
                              MPI_Datatype type, MPI_Request req)
{
  if (T.depth != 1 || req == MPI_REQUEST_NULL)
    return;
  persist_new(recv, peer, tag, comm,
              (uint64_t)(count > 0 ? count : 0) * tiers_trace_type_size(type), 0, req);
}

void tiers_trace_start(MPI_Request req)
{
  if (T.depth != 1 || req == MPI_REQUEST_NULL)
    return;
  lock();
  slot_t *s = map_find(&persist, hkey(&req, sizeof req));
  persist_t p;
  nbr_t *nb = NULL;
  int found = s != NULL;
  if (found) {
    p = *(persist_t *)(uintptr_t)s->a;
    if (p.nnbr > 0 && (nb = malloc(sizeof *nb * (size_t)p.nnbr)))
      memcpy(nb, p.nbr, sizeof *nb * (size_t)p.nnbr);
  }
  unlock();
  if (!found)
    return;
  for (int j = 0; nb && j < p.nnbr; j++) /* a neighbourhood collective's blocks */
    xfer(TIERS_XFER_NBR, nb[j].world, nb[j].bytes, 0);
  free(nb);
  if (p.recv == 2) {
    /* the collective starts here: begin and end at the Start's return,
     * so that several started by one MPI_Startall stay in time order */
    rec_coll_t r;
    memset(&r, 0, sizeof r);
    lock();
    rec_head_t h = head(REC_COLL_BEGIN, 0, sizeof h, post_ns());
    put(&h, sizeof h);
    r.h = head(REC_COLL_END, 0, sizeof r, post_ns());
    r.comm = comm_id(p.comm);
    r.root = p.peer;
    r.op = (uint32_t)p.tag;
    r.sent = p.bytes;
    r.recvd = p.recvd;
    put(&r, sizeof r);
    unlock();
  } else if (p.recv) {
    tiers_trace_irecv(p.comm, req);
  } else if (p.peer != MPI_PROC_NULL) {
    lock();
    uint64_t id = ++S.next_req_id;
    int cid = comm_id(p.comm);
    map_put(&reqs, rkey(req, thread_index()), id, ((uint64_t)REC_ISEND << 32) | (uint32_t)cid);
    unlock();
    msg(REC_ISEND, p.peer, p.tag, p.comm, p.bytes, id);
  }
}

void tiers_trace_request_free(MPI_Request req)
{
  if (req == MPI_REQUEST_NULL || !S.initialised)
    return;
  lock();
  uint64_t key = hkey(&req, sizeof req);
  slot_t *s = map_find(&persist, key);
  if (s) {
    persist_drop(s);
    map_remove(&persist, s);
  }
  unlock();
}

/* The world rank of rank `target` of window `win`'s group (-1: none). */
static int win_world_rank(MPI_Win win, int target)
{
  if (target == MPI_PROC_NULL || target < 0)
    return -1;
  MPI_Group g, world;
  if (PMPI_Win_get_group(win, &g) != MPI_SUCCESS)
    return -1;
  int out = -1;
  PMPI_Comm_group(MPI_COMM_WORLD, &world);
  PMPI_Group_translate_ranks(g, 1, &target, world, &out);
  PMPI_Group_free(&world);
  PMPI_Group_free(&g);
  return out == MPI_UNDEFINED ? -1 : out;
}

static void xfer(int what, int target, uint64_t bytes, int flags)
{
  rec_xfer_t r;
  memset(&r, 0, sizeof r);
  lock();
  r.h = head(REC_XFER, 0, sizeof r, post_ns());
  r.what = what;
  r.target = target;
  r.flags = (uint32_t)flags;
  r.bytes = bytes;
  put(&r, sizeof r);
  unlock();
}

void tiers_trace_rma(int what, MPI_Win win, int target, uint64_t bytes)
{
  if (T.depth != 1)
    return;
  xfer(what, win_world_rank(win, target), bytes, 0);
}

void tiers_trace_io(int what, int collective, uint64_t bytes)
{
  if (T.depth != 1)
    return;
  xfer(what, -1, bytes, collective ? 1 : 0);
}

/* MPI_Comm_set_name: a NAME record (comm id, length, the name's bytes) */
void tiers_trace_comm_name(MPI_Comm comm, const char *name)
{
  if (T.depth != 1 || !name)
    return;
  size_t n = strnlen(name, 255);
  struct { rec_head_t h; int32_t comm, len; char text[256]; } r;
  memset(&r, 0, sizeof r);
  size_t len = (sizeof r.h + 8 + n + 7) & ~(size_t)7;
  lock();
  r.h = head(REC_NAME, 0, len, post_ns());
  r.comm = comm_id(comm);
  r.len = (int32_t)n;
  memcpy(r.text, name, n);
  put(&r, len);
  unlock();
}

void tiers_trace_spawn_refused(void)
{
  static int said;
  if (!said && S.initialised) {
    said = 1;
    say("MPI_Comm_spawn: the tracer does not follow spawned processes; it keeps tracing "
        "this one");
  }
}

/* ------------------------------------------------------------------ */
/* Alltoallw and the neighbourhood collectives */

uint64_t tiers_trace_sumw(const int *counts, const MPI_Datatype *types, MPI_Comm comm)
{
  uint64_t s = 0;
  int n = tiers_trace_comm_size(comm);
  for (int i = 0; counts && types && i < n; i++)
    if (counts[i] > 0)
      s += (uint64_t)counts[i] * tiers_trace_type_size(types[i]);
  return s;
}

/* The neighbours of a process topology communicator (comm ranks) in the
 * order the neighbourhood collectives use them: the destinations (out = 1)
 * or the sources (out = 0).  Cartesian: for each dimension the -1 then the
 * +1 neighbour of MPI_Cart_shift (MPI_PROC_NULL at an open edge); graph:
 * MPI_Graph_neighbors either way; distributed graph: its sources and
 * destinations.  Returns the count (0 without a topology) and a malloc'd
 * array in *nb (NULL when the count is 0 or on failure). */
static int topo_neighbours(MPI_Comm comm, int out, int **nb)
{
  int kind = MPI_UNDEFINED, n = 0;
  *nb = NULL;
  if (PMPI_Topo_test(comm, &kind) != MPI_SUCCESS)
    return 0;
  if (kind == MPI_CART) {
    int nd = 0;
    PMPI_Cartdim_get(comm, &nd);
    if (nd <= 0 || !(*nb = malloc(sizeof(int) * 2 * (size_t)nd)))
      return 0;
    for (int d = 0; d < nd; d++)
      PMPI_Cart_shift(comm, d, 1, &(*nb)[2 * d], &(*nb)[2 * d + 1]);
    return 2 * nd;
  }
  if (kind == MPI_GRAPH) {
    int me = 0;
    PMPI_Comm_rank(comm, &me);
    PMPI_Graph_neighbors_count(comm, me, &n);
    if (n <= 0 || !(*nb = malloc(sizeof(int) * (size_t)n)))
      return 0;
    PMPI_Graph_neighbors(comm, me, n, *nb);
    return n;
  }
  if (kind == MPI_DIST_GRAPH) {
    int in = 0, outd = 0, weighted = 0;
    PMPI_Dist_graph_neighbors_count(comm, &in, &outd, &weighted);
    size_t m = (size_t)(in > 0 ? in : 0) + (size_t)(outd > 0 ? outd : 0) + 1;
    int *all = malloc(sizeof(int) * 2 * m);
    if (!all)
      return 0;
    int *src = all, *dst = all + (in > 0 ? in : 0), *w = all + m;
    PMPI_Dist_graph_neighbors(comm, in, src, w, outd, dst, w + (in > 0 ? in : 0));
    n = out ? outd : in;
    if (n <= 0 || !(*nb = malloc(sizeof(int) * (size_t)n))) {
      free(all);
      return 0;
    }
    memcpy(*nb, out ? dst : src, sizeof(int) * (size_t)n);
    free(all);
    return n;
  }
  return 0;
}

/* Bytes of block j of a neighbourhood collective's buffer: count x type
 * (allgather, alltoall), counts[j] x type (v forms) or counts[j] x
 * types[j] (w forms) */
static uint64_t nbr_block(int j, int count, MPI_Datatype type, const int *counts,
                          const MPI_Datatype *types)
{
  int c = counts ? counts[j] : count;
  if (c <= 0)
    return 0;
  return (uint64_t)c * tiers_trace_type_size(types ? types[j] : type);
}

uint64_t tiers_trace_nbr_bytes(MPI_Comm comm, int out, int count, MPI_Datatype type,
                               const int *counts, const MPI_Datatype *types)
{
  int *nb;
  int n = topo_neighbours(comm, out, &nb);
  uint64_t s = 0;
  for (int j = 0; j < n; j++)
    if (nb[j] != MPI_PROC_NULL)
      s += nbr_block(j, count, type, counts, types);
  free(nb);
  return s;
}

/* The blocks a neighbourhood collective sends: (world rank, bytes) of each
 * destination other than MPI_PROC_NULL, malloc'd in *out; returns their
 * count (0: none, or on failure) */
static int nbr_list(MPI_Comm comm, int count, MPI_Datatype type, const int *counts,
                    const MPI_Datatype *types, nbr_t **out)
{
  int *nb, k = 0;
  int n = topo_neighbours(comm, 1, &nb);
  *out = NULL;
  if (n <= 0)
    return 0;
  int *world = malloc(sizeof(int) * (size_t)n);
  nbr_t *l = malloc(sizeof *l * (size_t)n);
  MPI_Group g, wg;
  if (world && l && PMPI_Comm_group(comm, &g) == MPI_SUCCESS) {
    PMPI_Comm_group(MPI_COMM_WORLD, &wg);
    PMPI_Group_translate_ranks(g, n, nb, wg, world);
    PMPI_Group_free(&wg);
    PMPI_Group_free(&g);
    for (int j = 0; j < n; j++)
      if (nb[j] != MPI_PROC_NULL) {
        l[k].world = world[j] == MPI_UNDEFINED ? -1 : world[j];
        l[k++].bytes = nbr_block(j, count, type, counts, types);
      }
  }
  free(world);
  free(nb);
  if (k == 0) {
    free(l);
    l = NULL;
  }
  *out = l;
  return k;
}

void tiers_trace_nbr_xfer(MPI_Comm comm, int count, MPI_Datatype type, const int *counts,
                          const MPI_Datatype *types)
{
  if (T.depth != 1)
    return;
  nbr_t *l;
  int n = nbr_list(comm, count, type, counts, types, &l);
  for (int j = 0; j < n; j++)
    xfer(TIERS_XFER_NBR, l[j].world, l[j].bytes, 0);
  free(l);
}

/* A persistent neighbourhood collective: its blocks, recorded at each start */
void tiers_trace_pcoll_nbr(MPI_Request req, MPI_Comm comm, int count, MPI_Datatype type,
                           const int *counts, const MPI_Datatype *types)
{
  if (T.depth != 1 || req == MPI_REQUEST_NULL)
    return;
  nbr_t *l;
  int n = nbr_list(comm, count, type, counts, types, &l);
  lock();
  slot_t *s = map_find(&persist, hkey(&req, sizeof req));
  if (s) {
    persist_t *p = (persist_t *)(uintptr_t)s->a;
    free(p->nbr);
    p->nbr = l;
    p->nnbr = n;
    l = NULL;
  }
  unlock();
  free(l);
}

MPI_Datatype *tiers_trace_ftypes(const MPI_Fint *f, MPI_Comm comm, int which)
{
  int n = 0;
  if (which == 0) {
    n = tiers_trace_comm_size(comm);
  } else {
    int *nb;
    n = topo_neighbours(comm, which == 1, &nb);
    free(nb);
  }
  if (!f || n <= 0)
    return NULL;
  MPI_Datatype *t = malloc(sizeof *t * (size_t)n);
  for (int i = 0; t && i < n; i++)
    t[i] = PMPI_Type_f2c(f[i]);
  return t;
}

void tiers_trace_ffree(void *p) { free(p); }

/* Matched probes: the communicator of a message handle from MPI_Mprobe or
 * MPI_Improbe, kept until MPI_Mrecv or MPI_Imrecv takes the message */
static map_t messages;

void tiers_trace_message(MPI_Message msg_, MPI_Comm comm)
{
  if (T.depth != 1 || msg_ == MPI_MESSAGE_NULL || msg_ == MPI_MESSAGE_NO_PROC)
    return;
  uint64_t c = 0;
  memcpy(&c, &comm, sizeof comm < sizeof c ? sizeof comm : sizeof c);
  lock();
  map_put(&messages, hkey(&msg_, sizeof msg_), c, 0);
  unlock();
}

MPI_Comm tiers_trace_message_comm(MPI_Message msg_)
{
  MPI_Comm comm = MPI_COMM_NULL;
  if (T.depth != 1 || msg_ == MPI_MESSAGE_NULL || msg_ == MPI_MESSAGE_NO_PROC)
    return comm;
  lock();
  slot_t *s = map_find(&messages, hkey(&msg_, sizeof msg_));
  if (s) {
    memcpy(&comm, &s->a, sizeof comm < sizeof s->a ? sizeof comm : sizeof s->a);
    map_remove(&messages, s);
  }
  unlock();
  return comm;
}

/* ------------------------------------------------------------------ */
/* Public control API (tiers/trace.h) */

void tiers_trace_pause(void) { __atomic_store_n(&S.paused, 1, __ATOMIC_RELAXED); }

void tiers_trace_resume(void) { __atomic_store_n(&S.paused, 0, __ATOMIC_RELAXED); }

int tiers_trace_flush(void)
{
  if (!S.initialised || S.stopped || S.finished)
    return -1;
  lock();
  int rc = write_buffer();
  unlock();
  return rc;
}

int tiers_trace_active(void)
{
  return S.initialised && !S.stopped && !S.finished && !S.paused;
}
