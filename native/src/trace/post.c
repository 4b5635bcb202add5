/*
 * tiers-trace-post: the post-processing of a tiers trace folder.
 *
 *   tiers-trace-post DIR [--no-otf2] [--jobs N]
 *
 * Reads DIR/raw/rank-*.tev (the tracer's raw files, layout in docs/trace.md)
 * and writes
 *   - the OTF2 archive DIR/traces.otf2 (+ traces.def, traces/), unless
 *     --no-otf2: the same definitions and events as python/tiers/trace/
 *     convert.py writes (one location group per rank, one location per
 *     thread, unified communicators, matched Enter/Leave even for a killed
 *     rank, the tiers_rank_stopped mark);
 *   - on stdout one JSON object: "summary" (convert.summarize's totals),
 *     "per_rank", "buckets" (messages per size bucket and function, as
 *     profile.size_buckets) and "post" (how the work went).
 *
 * Memory is bounded by a constant, not by the trace: every file is read in
 * fixed blocks (a record larger than a block grows the block to that one
 * record), OTF2 flushes its event chunks to disk as they fill, and the
 * per-rank state is definitions (communicators, threads, function tables),
 * not events.  The one figure that pairs messages across ranks, the
 * receiver-first share, sorts them externally: sorted runs of a fixed size
 * go to an unlinked temporary file (in $TMPDIR or /tmp, else DIR), merged
 * a chunk of each run at a time.
 *
 * Each file is read twice: a scan that skips from record head to record
 * head collects the definitions an OTF2 event needs before it is written
 * (the finalize clock offset at the end of the file, the communicators,
 * threads and swap-out kinds), then the pass that writes.  Ranks are
 * processed in parallel, one thread per rank file at a time (--jobs,
 * default: the online CPUs).
 *
 * Errors: one line "tiers-trace-post: error: ..." on stderr, exit 1 (2 for
 * bad usage).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <otf2/otf2.h>
#include <otf2/OTF2_Pthread_Locks.h>

#include "otf2raw.h"

/* ---------------------------------------------------------------- records */

enum { K_ENTER = 1, K_LEAVE, K_SEND, K_RECV, K_ISEND, K_ISEND_DONE, K_IRECV_POST, K_IRECV_DONE,
       K_COLL_BEGIN, K_COLL_END, K_COMM, K_SWAP, K_CLOCK, K_STOP, K_INFO, K_MEM, K_XFER, K_NAME,
       K_MAP, K_MAX };
#define FN_SWAPOUT 0xFFFF
#define SWAP_UNSYNC 4
/* OTF2 attribute 0, "tiers_closed_at_stop": on the Leaves that close the
 * calls a killed rank was inside (defined only when there are some) */
#define CLOSED_ATTR 0
#define BLOCK (1u << 20)
#define NBUCKET 6

static const int payload_min[K_MAX] = {
  [K_ENTER] = 0, [K_LEAVE] = 0, [K_COLL_BEGIN] = 0, [K_SEND] = 32, [K_RECV] = 32,
  [K_ISEND] = 32, [K_IRECV_DONE] = 32, [K_ISEND_DONE] = 8, [K_IRECV_POST] = 8,
  [K_COLL_END] = 32, [K_COMM] = 16, [K_SWAP] = 24, [K_CLOCK] = 24, [K_STOP] = 8,
  [K_INFO] = 32, [K_MEM] = 16, [K_XFER] = 24, [K_NAME] = 8, [K_MAP] = 24};

static const char *const stop_reasons[] = {NULL, "write error",
                                           "buffer overflow between collectives",
                                           "out of memory", "signal", "MPI_Abort",
                                           "another rank stopped"};
static const char *const policies[] = {"sync", "full", "off", "auto"};
static const char *const xfer_kinds[] = {NULL, "put", "get", "accumulate", "get_accumulate",
                                         "fetch_and_op", "compare_and_swap", "read", "write",
                                         "neighbor"};
static const char *const bucket_labels[NBUCKET] = {"0 B", "1-64 B", "65 B-1 KiB", "1-64 KiB",
                                                   "64 KiB-1 MiB", "> 1 MiB"};

static inline uint16_t rd16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline int32_t rdi32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline int64_t rdi64(const unsigned char *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline double rdf64(const unsigned char *p) { double v; memcpy(&v, p, 8); return v; }

/* ------------------------------------------------------------ errors */

static char g_error[1024];
static pthread_mutex_t g_error_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_failed;

static void fail(const char *fmt, ...) {
  pthread_mutex_lock(&g_error_lock);
  if (!g_error[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
  }
  atomic_store(&g_failed, 1);
  pthread_mutex_unlock(&g_error_lock);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fputs("tiers-trace-post: error: out of memory\n", stderr);
    exit(1);
  }
  return p;
}

static void *xcalloc(size_t n, size_t s) {
  void *p = calloc(n ? n : 1, s ? s : 1);
  if (!p) {
    fputs("tiers-trace-post: error: out of memory\n", stderr);
    exit(1);
  }
  return p;
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) {
    fputs("tiers-trace-post: error: out of memory\n", stderr);
    exit(1);
  }
  return p;
}

#define GROW(arr, n, cap)                                                                      \
  do {                                                                                         \
    if ((n) >= (cap)) {                                                                        \
      (cap) = (cap) ? 2 * (cap) : 16;                                                          \
      (arr) = xrealloc((arr), (size_t)(cap) * sizeof *(arr));                                  \
    }                                                                                          \
  } while (0)

/* ------------------------------------------------------------ int map */

/* open addressing int64 -> int64 (keys are never INT64_MIN) */
typedef struct {
  int64_t *key, *val;
  size_t cap, n;
} imap_t;

static size_t imap_slot(const imap_t *m, int64_t k) {
  uint64_t h = (uint64_t)k * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h >> 17) & (m->cap - 1);
  while (m->key[i] != INT64_MIN && m->key[i] != k) i = (i + 1) & (m->cap - 1);
  return i;
}

static int64_t *imap_get(const imap_t *m, int64_t k) {
  if (!m->cap) return NULL;
  size_t i = imap_slot(m, k);
  return m->key[i] == k ? &m->val[i] : NULL;
}

static void imap_put(imap_t *m, int64_t k, int64_t v) {
  if (2 * (m->n + 1) > m->cap) {
    imap_t o = *m;
    m->cap = o.cap ? 2 * o.cap : 16;
    m->key = xmalloc(m->cap * sizeof(int64_t));
    m->val = xmalloc(m->cap * sizeof(int64_t));
    m->n = 0;
    for (size_t i = 0; i < m->cap; i++) m->key[i] = INT64_MIN;
    for (size_t i = 0; i < o.cap; i++)
      if (o.key[i] != INT64_MIN) imap_put(m, o.key[i], o.val[i]);
    free(o.key);
    free(o.val);
  }
  size_t i = imap_slot(m, k);
  if (m->key[i] != k) {
    m->key[i] = k;
    m->n++;
  }
  m->val[i] = v;
}

static void imap_free(imap_t *m) {
  free(m->key);
  free(m->val);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ strings */

typedef struct {
  char **s;
  size_t n, cap;
  imap_t index; /* hash -> first index; collisions chained through next */
  int64_t *next;
} strtab_t;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h & 0x3FFFFFFFFFFFFFFFull;
}

/* return the index of s, adding it when new */
static uint32_t str_ref(strtab_t *t, const char *s) {
  int64_t h = (int64_t)hash_str(s);
  int64_t *first = imap_get(&t->index, h);
  for (int64_t i = first ? *first : -1; i >= 0; i = t->next[i])
    if (!strcmp(t->s[i], s)) return (uint32_t)i;
  if (t->n >= t->cap) {
    t->cap = t->cap ? 2 * t->cap : 64;
    t->s = xrealloc(t->s, t->cap * sizeof *t->s);
    t->next = xrealloc(t->next, t->cap * sizeof *t->next);
  }
  t->s[t->n] = strdup(s);
  t->next[t->n] = first ? *first : -1;
  imap_put(&t->index, h, (int64_t)t->n);
  return (uint32_t)t->n++;
}

static void strtab_free(strtab_t *t) {
  for (size_t i = 0; i < t->n; i++) free(t->s[i]);
  free(t->s);
  free(t->next);
  imap_free(&t->index);
  memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ block reader */

typedef struct {
  int fd;
  const char *path;
  unsigned char *buf;
  size_t cap, len, pos; /* buf[pos..len) unread */
  uint64_t off;         /* file offset of buf[0] */
  int eof;
} reader_t;

static int reader_open(reader_t *r, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (r->fd < 0) return -1;
#ifdef POSIX_FADV_SEQUENTIAL
  posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  r->cap = BLOCK;
  r->buf = xmalloc(r->cap);
  return 0;
}

static void reader_close(reader_t *r) {
  if (r->fd >= 0) close(r->fd);
  free(r->buf);
  r->buf = NULL;
  r->fd = -1;
}

/* make at least n bytes available at pos; return how many are (less only at
 * the end of the file) */
static size_t reader_need(reader_t *r, size_t n) {
  if (r->len - r->pos >= n || r->eof) return r->len - r->pos;
  if (r->pos) {
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->off += r->pos;
    r->len -= r->pos;
    r->pos = 0;
  }
  if (n > r->cap) {
    r->cap = n;
    r->buf = xrealloc(r->buf, r->cap);
  }
  while (r->len < n && !r->eof) {
    ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("cannot read %s: %s", r->path, strerror(errno));
      r->eof = 1;
      break;
    }
    if (got == 0) r->eof = 1;
    r->len += (size_t)got;
  }
  return r->len - r->pos;
}

static void reader_rewind(reader_t *r, uint64_t to) {
  lseek(r->fd, (off_t)to, SEEK_SET);
  r->off = to;
  r->len = r->pos = 0;
  r->eof = 0;
}

/* ------------------------------------------------------------ rank state */

typedef struct {
  int32_t cid, parent, flags, n;
  int32_t *members;
  int gid;
} comm_t;

typedef struct {
  int64_t off, rtt, t;
  int have;
} clock_t_;

typedef struct {
  uint16_t func;
  int coll;  /* a collective ended inside: its figures go on the Chrome slice's end */
  uint64_t ra;     /* the call site (0: not recorded) */
  uint64_t mbytes; /* bytes of the call's messages, for its call site */
  int64_t t; /* global time stamp at enter */
  int32_t comm, root;
  uint64_t sent, recvd;
} frame_t;

typedef struct {
  frame_t *f;
  int n, cap;
} stack_t_;

typedef struct {
  char *name;
  uint64_t calls, bytes;
  double time_s;
  uint64_t buckets[NBUCKET];
  int used; /* in "functions" (calls or bytes) */
  int bucketed;
} fnstat_t;

typedef struct {
  int32_t src, dst, gid, tag;
  int64_t t;
  uint64_t bytes;
} msg_t;

typedef struct {
  uint64_t start, end, off;
  char *path;
} map_t;

typedef struct {
  int func;
  uint64_t ra, calls, bytes;
  double time_s;
} site_t;

typedef struct rank_s {
  char *path;
  int rank, size;
  char *host;
  int nfn;
  char **fn;
  uint64_t data_start; /* header length */
  /* definitions (scan) */
  comm_t *comms;
  int ncomms, ccap;
  imap_t cid_last; /* cid -> index of its last definition */
  char **names;    /* comm names in first-set order */
  int32_t *name_cid;
  int nnames, namecap;
  clock_t_ clocks[2];
  int have_info;
  int info_level, info_policy;
  uint64_t info_budget, info_swap_every;
  double info_tau, info_threshold;
  int64_t info_t0;
  int have_mem;
  uint64_t mem_resident, mem_reserved;
  int stopped_reason; /* 0: none */
  int truncated;
  uint64_t data_end; /* offset after the last whole record */
  uint16_t *threads;
  int nthreads;
  unsigned char *unsync; /* per SWAP record: unsynchronised */
  size_t nswap, swapcap;
  int64_t last_local;   /* the largest local time stamp of an event */
  int64_t first_local;  /* the first event's local time stamp */
  FILE *chrome;         /* this rank's Chrome events (a temporary file) */
  map_t *maps;          /* REC_MAP: the program's file mappings */
  int nmaps, mapcap;
  site_t *sites;        /* per (function, call site) */
  int nsites, sitecap;
  imap_t site_ix;
  uint64_t nevents;     /* python's len(log.events) */
  uint64_t otf2_events; /* OTF2 events written for this rank */
  /* regions in order of first use: func ids, FN_SWAPOUT, 0x10000 (unsync), 0x10001 (stopped) */
  int32_t *region_order;
  int nregion_order, rocap;
  int closing_n;          /* regions left open at the end */
  uint32_t *closing;      /* (thread << 16 | func), innermost first per thread */
  /* global refs (set after the scan) */
  uint32_t *loc_ref;      /* per thread index */
  uint64_t *loc_events;   /* events written per thread index */
  imap_t region_ref;      /* region key -> ref */
  int *gid_of;            /* per comm definition index */
  /* summary (write pass) */
  fnstat_t *fs;           /* per func id up to nfn, + others by key */
  imap_t fs_other;        /* func id >= nfn -> index in fs_extra */
  fnstat_t *fs_extra;
  int nfs_extra, fs_extra_cap;
  uint64_t swap_count, swap_bytes, swap_unsync;
  double swap_time_s, swap_write_s;
  uint64_t *acc;           /* accumulated swap-out ns at each swap-out */
  size_t nacc, acccap;
  imap_t rma_to;           /* target -> bytes */
  uint64_t rma_ops[9];
  uint64_t io_read_bytes, io_write_bytes, io_reads, io_writes, io_coll;
  uint64_t nbr_bytes, nbr_msgs; /* neighbourhood collectives' blocks in the matrix */
  uint64_t coll_bytes;
  int64_t first_g, last_g;
  int have_time;
  int64_t otf_first, otf_last; /* of the OTF2 events written */
  int have_otf;
  msg_t *sends, *recvs;
  size_t nsends, ncap_s, nrecvs, ncap_r;
} rank_t;

static int g_n;          /* the run's rank count */
static uint64_t *g_mbytes, *g_mmsgs;
/* The receiver-first share pairs the k-th send of each (source,
 * destination, communicator, tag) in time order with the k-th receive.  The
 * messages go through an external merge sort: each rank's writer sorts
 * runs of RUN records in memory and appends them to one temporary file per
 * kind; the runs are merged at the end, CHUNK records of each at a time. */
#define RUN (1u << 17)
static size_t g_run = RUN; /* TIERS_TRACE_POST_RUN: smaller runs (tests of the merge) */
#define CHUNK 1024u
typedef struct {
  uint64_t off, n; /* record offset and count in the kind's file */
} run_t;
typedef struct {
  int fd;
  uint64_t next; /* records written */
  run_t *runs;
  size_t nruns, cap;
  pthread_mutex_t lock;
} spill_t;
static spill_t g_spill[2] = {{-1, 0, NULL, 0, 0, PTHREAD_MUTEX_INITIALIZER},
                             {-1, 0, NULL, 0, 0, PTHREAD_MUTEX_INITIALIZER}};
static OTF2_Archive *g_archive;
static int g_write_otf2 = 1;
static const char *g_chrome;  /* --chrome FILE: the Chrome trace-event export */
static int64_t g_chrome_t0;   /* its time zero: the earliest first event of a rank */
static const char *g_dir;
static char g_otf2_msg[512];

static const char *region_name_of(const rank_t *r, int key, char *tmp, size_t ntmp) {
  if (key == 0x10000) return "tiers_swapout_unsynchronised";
  if (key == 0x10001) return "tiers_rank_stopped";
  if (key == FN_SWAPOUT) return "tiers_swapout";
  if (key >= 0 && key < r->nfn) return r->fn[key];
  snprintf(tmp, ntmp, "region%d", key);
  return tmp;
}

static int64_t to_global(const rank_t *r, int64_t t) {
  if (!r->clocks[0].have) return t;
  int64_t o0 = r->clocks[0].off, t0 = r->clocks[0].t;
  if (!r->clocks[1].have) return t + o0;
  int64_t o1 = r->clocks[1].off, t1 = r->clocks[1].t;
  if (t1 <= t0) return t + o0;
  __int128 prod = (__int128)(o1 - o0) * (__int128)(t - t0);
  double frac;
  if (prod < ((__int128)1 << 53) && prod > -((__int128)1 << 53))
    frac = (double)(int64_t)prod / (double)(t1 - t0);
  else
    frac = (double)((long double)prod / (long double)(t1 - t0));
  return t + (int64_t)nearbyint((double)o0 + frac);
}

/* ------------------------------------------------------------ header */

static int read_header(rank_t *r, reader_t *rd) {
  const char *p = r->path;
  size_t have = reader_need(rd, 32);
  const unsigned char *b = rd->buf;
  if (have < 32 || memcmp(b, "TIERSTEV", 8)) {
    fail("%s is not a tiers raw trace file", p);
    return -1;
  }
  uint32_t version = rd32(b + 8), hlen = rd32(b + 12), rank = rd32(b + 16), size = rd32(b + 20),
           nfn = rd32(b + 24), hostlen = rd32(b + 28);
  struct stat st;
  uint64_t fsize = fstat(rd->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
#define BAD(at, ...)                                                                           \
  do {                                                                                         \
    char why_[512];                                                                            \
    snprintf(why_, sizeof why_, __VA_ARGS__);                                                  \
    fail("%s: byte %llu: %s (the file is damaged or not a tiers raw file)", p,                 \
         (unsigned long long)(at), why_);                                                      \
    return -1;                                                                                 \
  } while (0)
  if (version != 1) {
    fail("%s: raw trace version %u, this tiers reads 1", p, version);
    return -1;
  }
  if (hlen > fsize) BAD(12, "the header is %u bytes but the file only %llu", hlen,
                        (unsigned long long)fsize);
  if (hlen % 8 || hlen < 32) BAD(12, "header length %u is not a multiple of 8 of at least 32",
                                 hlen);
  if (size < 1 || size > INT_MAX || rank >= size) BAD(16, "rank %u of %u ranks", rank, size);
  if (nfn > hlen - 32) BAD(24, "%u function names do not fit in a %u-byte header", nfn, hlen);
  have = reader_need(rd, hlen);
  b = rd->buf;
  uint32_t off = 32;
  r->fn = xcalloc(nfn, sizeof *r->fn);
  r->nfn = (int)nfn;
  for (uint32_t i = 0; i < nfn; i++) {
    const unsigned char *end = memchr(b + off, 0, hlen - off);
    if (!end) BAD(off, "a function name runs past the header");
    r->fn[i] = strndup((const char *)b + off, (size_t)(end - (b + off)));
    off = (uint32_t)(end - b) + 1;
  }
  if (hostlen < 1 || (uint64_t)off + hostlen > hlen)
    BAD(28, "the host name (%u bytes) does not fit in the header", hostlen);
  r->host = strndup((const char *)b + off, hostlen - 1);
  r->rank = (int)rank;
  r->size = (int)size;
  r->data_start = hlen;
  rd->pos = hlen;
  return 0;
}

/* ------------------------------------------------------------ the two passes */

static void stack_push(stack_t_ *s, uint16_t func, int64_t t) {
  GROW(s->f, s->n, s->cap);
  s->f[s->n].func = func;
  s->f[s->n].t = t;
  s->f[s->n].coll = 0;
  s->f[s->n].ra = 0;
  s->f[s->n].mbytes = 0;
  s->n++;
}

typedef struct {
  int idx;     /* thread index in r->threads */
  stack_t_ st; /* open regions (summary pass: with enter times) */
  int64_t last_ts;
  int has_last;
  OTF2_EvtWriter *w;
  OTF2_DefWriter *dw;
} thr_t;

static int thread_index(rank_t *r, uint16_t th) {
  for (int i = 0; i < r->nthreads; i++)
    if (r->threads[i] == th) return i;
  return -1;
}

static void region_seen(rank_t *r, unsigned char *seen, int key) {
  if (seen[key]) return;
  seen[key] = 1;
  GROW(r->region_order, r->nregion_order, r->rocap);
  r->region_order[r->nregion_order++] = key;
}

/* The scan: definitions, threads, swap-out kinds, first use of regions,
 * regions left open, counts.  Return 0, or -1 after fail(). */
static int scan_rank(rank_t *r) {
  reader_t rd;
  if (reader_open(&rd, r->path) < 0) {
    fail("cannot read %s: %s", r->path, strerror(errno));
    return -1;
  }
  if (read_header(r, &rd) < 0) {
    reader_close(&rd);
    return -1;
  }
  unsigned char *seen = xcalloc(0x10002, 1);
  int *tix = xmalloc(65536 * sizeof(int));
  for (int i = 0; i < 65536; i++) tix[i] = -1;
  stack_t_ *stacks = NULL; /* per thread index */
  int nstacks = 0;
  imap_t used_cid = {0}; /* cid -> first event index */
  uint64_t swap_enter = 0;
  int have_t = 0;
  const char *p = r->path;
  int rc = 0;
  for (;;) {
    size_t have = reader_need(&rd, 16);
    if (have < 16) {
      if (have > 0) r->truncated = 1;
      break;
    }
    const unsigned char *h = rd.buf + rd.pos;
    uint64_t at = rd.off + rd.pos;
    int kind = h[0], flags = h[1];
    uint16_t th = rd16(h + 2), func = rd16(h + 4);
    size_t length = (size_t)rd16(h + 6) * 8;
    int64_t t = rdi64(h + 8);
    if (length < 16) {
      /* a zero-filled tail: the rest was never written */
      int zero = 1;
      for (;;) {
        size_t n = reader_need(&rd, 1);
        if (!n) break;
        for (size_t i = 0; i < n; i++)
          if (rd.buf[rd.pos + i]) { zero = 0; break; }
        if (!zero) break;
        rd.pos += n;
      }
      if (zero) {
        r->truncated = 1;
        break;
      }
      fail("%s: byte %llu: a record of %zu bytes (the file is damaged or not a tiers raw file)",
           p, (unsigned long long)at, length);
      rc = -1;
      break;
    }
    have = reader_need(&rd, length);
    if (have < length) {
      r->truncated = 1;
      break;
    }
    h = rd.buf + rd.pos;
    if (kind < 1 || kind >= K_MAX) {
      fail("%s: byte %llu: unknown record kind %d (the file is damaged or not a tiers raw file)",
           p, (unsigned long long)at, kind);
      rc = -1;
      break;
    }
    if ((int)length - 16 < payload_min[kind]) {
      fail("%s: byte %llu: a record of kind %d needs %d bytes, it has %zu (the file is damaged "
           "or not a tiers raw file)", p, (unsigned long long)at, kind, 16 + payload_min[kind],
           length);
      rc = -1;
      break;
    }
    const unsigned char *b = h + 16;
    int is_event = 0;
    switch (kind) {
    case K_ENTER: case K_LEAVE: case K_SEND: case K_RECV: case K_ISEND: case K_ISEND_DONE:
    case K_IRECV_POST: case K_IRECV_DONE: case K_COLL_BEGIN: case K_COLL_END:
      is_event = 2; /* an OTF2 event */
      break;
    case K_SWAP: case K_XFER:
      is_event = 1;
      break;
    default:
      break;
    }
    if (is_event) {
      /* every event's thread gets a location (SWAP and XFER included) */
      int ti = tix[th];
      if (ti < 0) {
        r->threads = xrealloc(r->threads, (size_t)(r->nthreads + 1) * sizeof *r->threads);
        r->threads[r->nthreads] = th;
        ti = tix[th] = r->nthreads++;
      }
      if (ti >= nstacks) {
        stacks = xrealloc(stacks, (size_t)(ti + 1) * sizeof *stacks);
        memset(stacks + nstacks, 0, (size_t)(ti + 1 - nstacks) * sizeof *stacks);
        nstacks = ti + 1;
      }
      if (!have_t || t > r->last_local) r->last_local = t;
      if (!have_t) r->first_local = t;
      have_t = 1;
      if (is_event == 2) r->otf2_events++;
      stack_t_ *s = &stacks[ti];
      if (kind == K_ENTER) {
        stack_push(s, func, 0);
        int key = func;
        if (func == FN_SWAPOUT) {
          /* the kind of the k-th swap-out is only known from the k-th SWAP
           * record, after its Leave: resolved below once the scan is done */
          key = -1 - (int)(swap_enter++ & 0x7fffffff);
        }
        if (key >= 0) region_seen(r, seen, key);
        else {
          GROW(r->region_order, r->nregion_order, r->rocap);
          r->region_order[r->nregion_order++] = key; /* placeholder */
        }
      } else if (kind == K_LEAVE) {
        if (s->n && s->f[s->n - 1].func == func) s->n--;
      } else if (kind == K_SEND || kind == K_RECV || kind == K_ISEND || kind == K_IRECV_DONE ||
                 kind == K_COLL_END) {
        int32_t cid = rdi32(b);
        if (!imap_get(&used_cid, cid)) imap_put(&used_cid, cid, (int64_t)r->nevents);
      } else if (kind == K_SWAP) {
        GROW(r->unsync, r->nswap, r->swapcap);
        r->unsync[r->nswap++] = (flags & SWAP_UNSYNC) ? 1 : 0;
      }
      r->nevents++;
    } else if (kind == K_COMM) {
      int32_t cid = rdi32(b), parent = rdi32(b + 4), csize = rdi32(b + 8), cflags = rdi32(b + 12);
      comm_t c = {cid, parent, cflags, 0, NULL, -1};
      if (!(cflags & 2)) {
        if (csize < 0 || (size_t)csize > (length - 32) / 4) {
          fail("%s: byte %llu: a communicator of %d members in a %zu-byte record (the file is "
               "damaged or not a tiers raw file)", p, (unsigned long long)at, csize, length);
          rc = -1;
          break;
        }
        c.n = csize;
        c.members = xmalloc((size_t)csize * sizeof(int32_t));
        memcpy(c.members, b + 16, (size_t)csize * 4);
      }
      GROW(r->comms, r->ncomms, r->ccap);
      r->comms[r->ncomms] = c;
      imap_put(&r->cid_last, cid, r->ncomms);
      r->ncomms++;
    } else if (kind == K_CLOCK) {
      int32_t phase = rdi32(b + 16);
      if (phase == 0 || phase == 1) {
        r->clocks[phase].off = rdi64(b);
        r->clocks[phase].rtt = rdi64(b + 8);
        r->clocks[phase].t = t;
        r->clocks[phase].have = 1;
      }
    } else if (kind == K_STOP) {
      r->stopped_reason = rdi32(b);
      if (!r->stopped_reason) r->stopped_reason = -1000000; /* "reason 0" */
    } else if (kind == K_INFO) {
      r->have_info = 1;
      r->info_level = rdi32(b);
      r->info_policy = rdi32(b + 4);
      r->info_budget = rd64(b + 8);
      r->info_tau = rdf64(b + 16);
      r->info_threshold = rdf64(b + 24);
      r->info_t0 = t;
      r->info_swap_every = length >= 16 + 40 ? rd64(b + 32) : 0;
    } else if (kind == K_MAP) {
      GROW(r->maps, r->nmaps, r->mapcap);
      map_t *m = &r->maps[r->nmaps++];
      m->start = rd64(b);
      m->end = rd64(b + 8);
      m->off = rd64(b + 16);
      m->path = strndup((const char *)b + 24, length - 40);
    } else if (kind == K_MEM) {
      r->have_mem = 1;
      r->mem_resident = rd64(b);
      r->mem_reserved = rd64(b + 8);
    } else if (kind == K_NAME) {
      int32_t cid = rdi32(b), nlen = rdi32(b + 4);
      if (nlen < 0 || (size_t)nlen > length - 24) {
        fail("%s: byte %llu: a name of %d bytes in a %zu-byte record (the file is damaged or "
             "not a tiers raw file)", p, (unsigned long long)at, nlen, length);
        rc = -1;
        break;
      }
      int i;
      for (i = 0; i < r->nnames; i++)
        if (r->name_cid[i] == cid) break;
      if (i == r->nnames) {
        if (r->nnames >= r->namecap) {
          r->namecap = r->namecap ? 2 * r->namecap : 8;
          r->names = xrealloc(r->names, (size_t)r->namecap * sizeof *r->names);
          r->name_cid = xrealloc(r->name_cid, (size_t)r->namecap * sizeof *r->name_cid);
        }
        r->names[i] = NULL;
        r->name_cid[i] = cid;
        r->nnames++;
      }
      free(r->names[i]);
      r->names[i] = strndup((const char *)b + 8, (size_t)nlen);
    }
    rd.pos += length;
  }
  r->data_end = rd.off + rd.pos;
  /* thread 0 always has a location; threads sorted */
  if (!rc) {
    if (thread_index(r, 0) < 0) {
      r->threads = xrealloc(r->threads, (size_t)(r->nthreads + 1) * sizeof *r->threads);
      r->threads[r->nthreads++] = 0;
      stacks = xrealloc(stacks, (size_t)(nstacks + 1) * sizeof *stacks);
      memset(stacks + nstacks, 0, sizeof *stacks);
      nstacks++;
    }
    /* closing: per thread in sorted thread order, innermost first */
    int *order = xmalloc((size_t)r->nthreads * sizeof(int));
    for (int i = 0; i < r->nthreads; i++) order[i] = i;
    for (int i = 1; i < r->nthreads; i++)
      for (int j = i; j > 0 && r->threads[order[j - 1]] > r->threads[order[j]]; j--) {
        int x = order[j];
        order[j] = order[j - 1];
        order[j - 1] = x;
      }
    for (int k = 0; k < r->nthreads; k++) {
      int i = order[k];
      for (int j = (i < nstacks ? stacks[i].n : 0) - 1; j >= 0; j--) {
        r->closing = xrealloc(r->closing, (size_t)(r->closing_n + 1) * sizeof *r->closing);
        r->closing[r->closing_n++] = ((uint32_t)r->threads[i] << 16) | stacks[i].f[j].func;
        region_seen(r, seen, stacks[i].f[j].func);
      }
    }
    free(order);
    /* resolve swap-out placeholders in first-use order */
    int w = 0;
    for (int i = 0; i < r->nregion_order; i++) {
      int key = r->region_order[i];
      if (key < 0) {
        uint64_t k = (uint64_t)(-1 - key);
        key = (k < r->nswap && r->unsync[k]) ? 0x10000 : FN_SWAPOUT;
        if (seen[key] == 2) continue;
        seen[key] = 2;
      } else if (key == FN_SWAPOUT || key == 0x10000) {
        if (seen[key] == 2) continue;
        seen[key] = 2;
      }
      r->region_order[w++] = key;
    }
    r->nregion_order = w;
    r->otf2_events += (uint64_t)r->closing_n;
    int stopped = r->stopped_reason || (!r->clocks[1].have && r->nevents);
    if (stopped) {
      GROW(r->region_order, r->nregion_order, r->rocap);
      r->region_order[r->nregion_order++] = 0x10001;
      r->otf2_events += 2;
    }
    /* every communicator an event uses must be defined */
    int64_t worst_k = -1, worst_cid = 0;
    for (size_t i = 0; i < used_cid.cap; i++)
      if (used_cid.key[i] != INT64_MIN && !imap_get(&r->cid_last, used_cid.key[i]) &&
          (worst_k < 0 || used_cid.val[i] < worst_k)) {
        worst_k = used_cid.val[i];
        worst_cid = used_cid.key[i];
      }
    if (worst_k >= 0) {
      fail("rank %d's raw file: event %lld uses communicator %lld, which the file never "
           "defines", r->rank, (long long)worst_k, (long long)worst_cid);
      rc = -1;
    }
  }
  for (int i = 0; i < nstacks; i++) free(stacks[i].f);
  free(stacks);
  free(seen);
  free(tix);
  imap_free(&used_cid);
  reader_close(&rd);
  return rc;
}

static fnstat_t *fnstat(rank_t *r, int func) {
  if (func >= 0 && func < r->nfn) return &r->fs[func];
  int64_t *i = imap_get(&r->fs_other, func);
  if (i) return &r->fs_extra[*i];
  GROW(r->fs_extra, r->nfs_extra, r->fs_extra_cap);
  fnstat_t *e = &r->fs_extra[r->nfs_extra];
  memset(e, 0, sizeof *e);
  char tmp[32];
  e->name = strdup(region_name_of(r, func, tmp, sizeof tmp));
  imap_put(&r->fs_other, func, r->nfs_extra);
  return &r->fs_extra[r->nfs_extra++];
}

static int bucket_of(uint64_t n) {
  if (n == 0) return 0;
  if (n <= 64) return 1;
  if (n <= (1u << 10)) return 2;
  if (n <= (64u << 10)) return 3;
  if (n <= (1u << 20)) return 4;
  return 5;
}

static int comm_gid(const rank_t *r, int32_t cid) {
  int64_t *i = imap_get(&r->cid_last, cid);
  return i ? r->gid_of[*i] : -1;
}

/* world rank of comm-local rank peer in global communicator gid, or -1 */
typedef struct {
  int32_t *members;
  int n;
  int parent;
  int flags;
  const char *name;
} gcomm_t;
static gcomm_t *g_comms;
static int g_ncomms;

static int world_of(int gid, int32_t peer) {
  if (gid < 0 || peer < 0 || peer >= g_comms[gid].n) return -1;
  return g_comms[gid].members[peer];
}

static int cmp_msg(const void *a, const void *b);
static void json_str(FILE *f, const char *s);

/* sort the n records of buf and append them as a run to kind's file */
static void spill_run(int kind, msg_t *buf, size_t n) {
  if (!n) return;
  qsort(buf, n, sizeof *buf, cmp_msg);
  spill_t *sp = &g_spill[kind];
  pthread_mutex_lock(&sp->lock);
  uint64_t at = sp->next;
  sp->next += n;
  GROW(sp->runs, sp->nruns, sp->cap);
  sp->runs[sp->nruns].off = at;
  sp->runs[sp->nruns].n = n;
  sp->nruns++;
  pthread_mutex_unlock(&sp->lock);
  const char *p = (const char *)buf;
  size_t left = n * sizeof *buf;
  off_t pos = (off_t)(at * sizeof *buf);
  while (left) {
    ssize_t w = pwrite(sp->fd, p, left, pos);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      fail("cannot write a temporary file in %s: %s", g_dir, w < 0 ? strerror(errno) : "disk full");
      return;
    }
    p += w;
    left -= (size_t)w;
    pos += w;
  }
}

static void add_msg(rank_t *r, int send, int32_t src, int32_t dst, int32_t gid, int32_t tag,
                    int64_t t, uint64_t bytes) {
  msg_t m = {src, dst, gid, tag, t, bytes};
  if (send && r->nsends >= g_run) {
    spill_run(0, r->sends, r->nsends);
    r->nsends = 0;
  } else if (!send && r->nrecvs >= g_run) {
    spill_run(1, r->recvs, r->nrecvs);
    r->nrecvs = 0;
  }
  if (send) {
    GROW(r->sends, r->nsends, r->ncap_s);
    r->sends[r->nsends++] = m;
  } else {
    GROW(r->recvs, r->nrecvs, r->ncap_r);
    r->recvs[r->nrecvs++] = m;
  }
}

static uint32_t rref(rank_t *r, int key) {
  int64_t *v = imap_get(&r->region_ref, key);
  return v ? (uint32_t)*v : OTF2_UNDEFINED_REGION;
}

#define OTF2_CHECK(call)                                                                       \
  do {                                                                                         \
    OTF2_ErrorCode e_ = (call);                                                                \
    if (e_ != OTF2_SUCCESS) {                                                                  \
      fail("cannot write the OTF2 archive in %s: %s", g_dir,                                 \
           g_otf2_msg[0] ? g_otf2_msg : OTF2_Error_GetDescription(e_));                \
      goto out;                                                                                \
    }                                                                                          \
  } while (0)

/* ---- Chrome trace-event JSON: B/E slices per MPI call, instants and flow
 * arrows (s at the send, f at the receive, the same id: the k-th message of
 * a (source, destination, communicator, tag) in each rank's file order, as
 * MPI's non-overtaking rule pairs them), collective figures on the E. */

static uint64_t flow_id(int32_t src, int32_t dst, int32_t gid, int32_t tag, uint64_t k) {
  uint64_t v[5] = {(uint32_t)src, (uint32_t)dst, (uint32_t)gid, (uint32_t)tag, k};
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 5; i++)
    for (int b = 0; b < 8; b++) h = (h ^ ((v[i] >> (8 * b)) & 0xFF)) * 1099511628211ull;
  return h;
}

static uint64_t flow_next(imap_t *m, int32_t src, int32_t dst, int32_t gid, int32_t tag) {
  int64_t key = (int64_t)(flow_id(src, dst, gid, tag, 0) & 0x3FFFFFFFFFFFFFFFull);
  int64_t *v = imap_get(m, key);
  int64_t k = v ? *v : 0;
  imap_put(m, key, k + 1);
  return (uint64_t)k;
}

static void ch_us(FILE *f, int64_t ts) {
  int64_t d = ts - g_chrome_t0;
  if (d < 0) fprintf(f, "-%lld.%03lld", (long long)(-d / 1000), (long long)(-d % 1000));
  else fprintf(f, "%lld.%03lld", (long long)(d / 1000), (long long)(d % 1000));
}

static void ch_head(FILE *f, const char *ph, const char *name, const char *cat, int pid,
                    int tid, int64_t ts) {
  fprintf(f, ",\n{\"ph\": \"%s\", \"name\": ", ph);
  json_str(f, name);
  fprintf(f, ", \"cat\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": ", cat, pid, tid);
  ch_us(f, ts);
}

/* The write pass: OTF2 events and the rank's summary figures. */
static int write_rank(rank_t *r) {
  reader_t rd;
  int rc = -1;
  thr_t *thr = xcalloc((size_t)r->nthreads, sizeof *thr);
  int *tix = xmalloc(65536 * sizeof(int));
  for (int i = 0; i < 65536; i++) tix[i] = -1;
  for (int i = 0; i < r->nthreads; i++) tix[r->threads[i]] = i;
  if (reader_open(&rd, r->path) < 0) {
    fail("cannot read %s: %s", r->path, strerror(errno));
    free(thr);
    free(tix);
    return -1;
  }
  reader_rewind(&rd, r->data_start);
  r->fs = xcalloc((size_t)r->nfn, sizeof *r->fs);
  for (int i = 0; i < r->nfn; i++) r->fs[i].name = r->fn[i];
  imap_t posted = {0}; /* IRECV_POST: request -> start time */
  imap_t flows = {0};  /* Chrome flows: messages so far per (src, dst, comm, tag) */
  FILE *ch = r->chrome;
  uint64_t swap_in = 0, swap_out = 0;
  if (g_write_otf2) {
    for (int i = 0; i < r->nthreads; i++) {
      thr[i].w = OTF2_Archive_GetEvtWriter(g_archive, r->loc_ref[i]);
      thr[i].dw = OTF2_Archive_GetDefWriter(g_archive, r->loc_ref[i]);
      if (!thr[i].w || !thr[i].dw) {
        fail("cannot write the OTF2 archive in %s: no event writer for rank %d", g_dir, r->rank);
        goto out;
      }
    }
  }
  /* thread index lookup: direct table for speed */
  int64_t acc = 0;
  if (ch) {
    char pname[400];
    snprintf(pname, sizeof pname, "rank %d (%s)", r->rank, r->host);
    fprintf(ch, ",\n{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": "
                "{\"name\": ", r->rank);
    json_str(ch, pname);
    fprintf(ch, "}},\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, "
                "\"args\": {\"sort_index\": %d}}", r->rank, r->rank);
    for (int i = 0; i < r->nthreads; i++) {
      char tname[64];
      if (r->threads[i] == 0) snprintf(tname, sizeof tname, "Master thread");
      else snprintf(tname, sizeof tname, "Thread %d", r->threads[i]);
      fprintf(ch, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
                  "\"args\": {\"name\": \"%s\"}}", r->rank, r->threads[i], tname);
    }
  }
  for (;;) {
    if (rd.off + rd.pos >= r->data_end) break;
    size_t have = reader_need(&rd, 16);
    if (have < 16) break;
    const unsigned char *h = rd.buf + rd.pos;
    size_t length = (size_t)rd16(h + 6) * 8;
    if (reader_need(&rd, length) < length) break;
    h = rd.buf + rd.pos;
    rd.pos += length;
    int kind = h[0], flags = h[1];
    if (kind == K_COMM || kind == K_CLOCK || kind == K_STOP || kind == K_INFO ||
        kind == K_MEM || kind == K_NAME || kind == K_MAP)
      continue;
    uint16_t th = rd16(h + 2), func = rd16(h + 4);
    int64_t t = rdi64(h + 8);
    const unsigned char *b = h + 16;
    int64_t gt = to_global(r, t);
    if (!r->have_time) {
      r->first_g = r->last_g = gt;
      r->have_time = 1;
    } else {
      if (gt < r->first_g) r->first_g = gt;
      if (gt > r->last_g) r->last_g = gt;
    }
    thr_t *T = &thr[tix[th]];
    stack_t_ *st = &T->st;
    int rkey = func; /* the region: a swap-out's kind from its SWAP record */
    if (func == FN_SWAPOUT && kind == K_ENTER) {
      if (swap_in < r->nswap && r->unsync[swap_in]) rkey = 0x10000;
      swap_in++;
    } else if (func == FN_SWAPOUT && kind == K_LEAVE) {
      if (swap_out < r->nswap && r->unsync[swap_out]) rkey = 0x10000;
      swap_out++;
    }
    /* OTF2 (and Chrome: the same time stamps) */
    int64_t ts = gt < T->last_ts ? T->last_ts : gt; /* non-decreasing per location, from 0 */
    if (kind != K_SWAP && kind != K_XFER) {
      T->last_ts = ts;
      T->has_last = 1;
      if (!r->have_otf || ts < r->otf_first) r->otf_first = ts;
      if (!r->have_otf || ts > r->otf_last) r->otf_last = ts;
      r->have_otf = 1;
    }
    if (g_write_otf2 && kind != K_SWAP && kind != K_XFER) {
      OTF2_EvtWriter *w = T->w;
      r->loc_events[tix[th]]++;
      switch (kind) {
      case K_ENTER:
        OTF2_CHECK(OTF2_EvtWriter_Enter(w, NULL, (OTF2_TimeStamp)ts, rref(r, rkey)));
        break;
      case K_LEAVE:
        OTF2_CHECK(OTF2_EvtWriter_Leave(w, NULL, (OTF2_TimeStamp)ts, rref(r, rkey)));
        break;
      case K_SEND:
        OTF2_CHECK(OTF2_EvtWriter_MpiSend(w, NULL, (OTF2_TimeStamp)ts, (uint32_t)rdi32(b + 4),
                                          (OTF2_CommRef)comm_gid(r, rdi32(b)),
                                          (uint32_t)rdi32(b + 8), rd64(b + 16)));
        break;
      case K_RECV:
        OTF2_CHECK(OTF2_EvtWriter_MpiRecv(w, NULL, (OTF2_TimeStamp)ts, (uint32_t)rdi32(b + 4),
                                          (OTF2_CommRef)comm_gid(r, rdi32(b)),
                                          (uint32_t)rdi32(b + 8), rd64(b + 16)));
        break;
      case K_ISEND:
        OTF2_CHECK(OTF2_EvtWriter_MpiIsend(w, NULL, (OTF2_TimeStamp)ts, (uint32_t)rdi32(b + 4),
                                           (OTF2_CommRef)comm_gid(r, rdi32(b)),
                                           (uint32_t)rdi32(b + 8), rd64(b + 16), rd64(b + 24)));
        break;
      case K_ISEND_DONE:
        OTF2_CHECK(OTF2_EvtWriter_MpiIsendComplete(w, NULL, (OTF2_TimeStamp)ts, rd64(b)));
        break;
      case K_IRECV_POST:
        OTF2_CHECK(OTF2_EvtWriter_MpiIrecvRequest(w, NULL, (OTF2_TimeStamp)ts, rd64(b)));
        break;
      case K_IRECV_DONE:
        OTF2_CHECK(OTF2_EvtWriter_MpiIrecv(w, NULL, (OTF2_TimeStamp)ts, (uint32_t)rdi32(b + 4),
                                           (OTF2_CommRef)comm_gid(r, rdi32(b)),
                                           (uint32_t)rdi32(b + 8), rd64(b + 16), rd64(b + 24)));
        break;
      case K_COLL_BEGIN:
        OTF2_CHECK(OTF2_EvtWriter_MpiCollectiveBegin(w, NULL, (OTF2_TimeStamp)ts));
        break;
      case K_COLL_END: {
        int32_t root = rdi32(b + 4);
        OTF2_CHECK(OTF2_EvtWriter_MpiCollectiveEnd(
            w, NULL, (OTF2_TimeStamp)ts, (OTF2_CollectiveOp)rd32(b + 8),
            (OTF2_CommRef)comm_gid(r, rdi32(b)), root >= 0 ? (uint32_t)root : 0xFFFFFFFFu,
            rd64(b + 16), rd64(b + 24)));
        break;
      }
      default:
        break;
      }
    }
    /* summary */
    if (kind == K_ENTER) {
      stack_push(st, func, gt);
      if (length >= 24) st->f[st->n - 1].ra = rd64(b);
      if (ch) {
        char tmp[32];
        ch_head(ch, "B", region_name_of(r, rkey, tmp, sizeof tmp),
                func == FN_SWAPOUT ? "tiers" : "MPI", r->rank, th, ts);
        fputs("}", ch);
      }
      continue;
    }
    if (kind == K_LEAVE) {
      if (st->n && st->f[st->n - 1].func == func) {
        frame_t f = st->f[--st->n];
        if (ch) {
          char tmp[32];
          ch_head(ch, "E", region_name_of(r, rkey, tmp, sizeof tmp),
                  func == FN_SWAPOUT ? "tiers" : "MPI", r->rank, th, ts);
          if (f.coll) {
            fprintf(ch, ", \"args\": {\"comm\": %d, \"root\": ", f.comm);
            if (f.root >= 0) fprintf(ch, "%d", f.root); else fputs("null", ch);
            fprintf(ch, ", \"bytes_sent\": %" PRIu64 ", \"bytes_received\": %" PRIu64 "}",
                    f.sent, f.recvd);
          }
          fputs("}", ch);
        }
        if (f.func != FN_SWAPOUT) {
          fnstat_t *e = fnstat(r, f.func);
          e->calls++;
          e->time_s += (double)(gt - f.t) * 1e-9;
          e->used = 1;
          if (f.ra) {
            int64_t key = (int64_t)(((f.ra & 0x3FFFFFFFFFFFull) << 16) | f.func);
            int64_t *ix = imap_get(&r->site_ix, key);
            site_t *sp;
            if (ix) sp = &r->sites[*ix];
            else {
              GROW(r->sites, r->nsites, r->sitecap);
              sp = &r->sites[r->nsites];
              memset(sp, 0, sizeof *sp);
              sp->func = f.func;
              sp->ra = f.ra;
              imap_put(&r->site_ix, key, r->nsites++);
            }
            sp->calls++;
            sp->bytes += f.mbytes;
            sp->time_s += (double)(gt - f.t) * 1e-9;
          }
        }
      }
      continue;
    }
    int current = -1;
    frame_t *cur_frame = NULL;
    for (int i = st->n - 1; i >= 0; i--)
      if (st->f[i].func != FN_SWAPOUT) {
        current = st->f[i].func;
        cur_frame = &st->f[i];
        break;
      }
    int64_t start = st->n ? st->f[st->n - 1].t : gt;
    uint64_t nbytes = 0, bucket_bytes = 0;
    int bucketed = 0;
    switch (kind) {
    case K_SEND: case K_ISEND: {
      int gid = comm_gid(r, rdi32(b));
      int dst = world_of(gid, rdi32(b + 4));
      nbytes = rd64(b + 16);
      if (dst >= 0 && dst < g_n) {
        g_mbytes[(size_t)r->rank * g_n + dst] += nbytes;
        g_mmsgs[(size_t)r->rank * g_n + dst] += 1;
        add_msg(r, 1, r->rank, dst, gid, rdi32(b + 8), start, nbytes);
      }
      if (ch) {
        ch_head(ch, "i", "send", "p2p", r->rank, th, ts);
        fprintf(ch, ", \"s\": \"t\", \"args\": {\"peer\": %d, \"tag\": %d, \"bytes\": %" PRIu64
                    ", \"comm\": %d}}", rdi32(b + 4), rdi32(b + 8), nbytes, gid);
        if (dst >= 0 && dst < g_n) {
          uint64_t k = flow_next(&flows, r->rank, dst, gid, rdi32(b + 8));
          ch_head(ch, "s", "message", "p2p", r->rank, th, ts);
          fprintf(ch, ", \"id\": \"0x%016" PRIx64 "\"}", flow_id(r->rank, dst, gid, rdi32(b + 8), k));
        }
      }
      bucketed = 1;
      bucket_bytes = nbytes;
      break;
    }
    case K_IRECV_POST:
      imap_put(&posted, (int64_t)(rd64(b) & 0x7FFFFFFFFFFFFFFFull), start);
      break;
    case K_RECV: case K_IRECV_DONE: {
      int gid = comm_gid(r, rdi32(b));
      int src = world_of(gid, rdi32(b + 4));
      nbytes = rd64(b + 16);
      int64_t when = start;
      if (kind == K_IRECV_DONE) {
        int64_t key = (int64_t)(rd64(b + 24) & 0x7FFFFFFFFFFFFFFFull);
        int64_t *v = imap_get(&posted, key);
        if (v && *v != INT64_MIN) {
          when = *v;
          *v = INT64_MIN; /* popped */
        }
      }
      if (src >= 0) add_msg(r, 0, src, r->rank, gid, rdi32(b + 8), when, 0);
      if (ch) {
        ch_head(ch, "i", "recv", "p2p", r->rank, th, ts);
        fprintf(ch, ", \"s\": \"t\", \"args\": {\"peer\": %d, \"tag\": %d, \"bytes\": %" PRIu64
                    ", \"comm\": %d}}", rdi32(b + 4), rdi32(b + 8), nbytes, gid);
        if (src >= 0 && src < g_n) {
          uint64_t k = flow_next(&flows, src, r->rank, gid, rdi32(b + 8));
          ch_head(ch, "f", "message", "p2p", r->rank, th, ts);
          fprintf(ch, ", \"bp\": \"e\", \"id\": \"0x%016" PRIx64 "\"}",
                  flow_id(src, r->rank, gid, rdi32(b + 8), k));
        }
      }
      bucketed = 1;
      bucket_bytes = nbytes;
      break;
    }
    case K_COLL_END:
      nbytes = rd64(b + 16) + rd64(b + 24);
      r->coll_bytes += nbytes;
      if (st->n) {
        frame_t *f = &st->f[st->n - 1];
        f->coll = 1;
        f->comm = comm_gid(r, rdi32(b));
        f->root = rdi32(b + 4);
        f->sent = rd64(b + 16);
        f->recvd = rd64(b + 24);
      }
      bucketed = 1;
      bucket_bytes = rd64(b + 16);
      break;
    case K_XFER: {
      int what = rdi32(b);
      int32_t target = rdi32(b + 4);
      uint32_t xflags = rd32(b + 8);
      nbytes = rd64(b + 16);
      if (ch) {
        ch_head(ch, "i", what >= 1 && what <= 9 ? xfer_kinds[what] : "transfer",
                what == 7 || what == 8 ? "io" : what == 9 ? "coll" : "rma", r->rank, th, ts);
        fprintf(ch, ", \"s\": \"t\", \"args\": {\"target\": %d, \"bytes\": %" PRIu64
                    ", \"collective\": %s}}", target, nbytes,
                xflags & 1 || what == 9 ? "true" : "false");
      }
      if (what == 9) { /* a neighbourhood collective's block to one destination */
        if (target >= 0 && target < g_n) {
          g_mbytes[(size_t)r->rank * g_n + target] += nbytes;
          g_mmsgs[(size_t)r->rank * g_n + target] += 1;
          r->nbr_bytes += nbytes;
          r->nbr_msgs++;
        }
        nbytes = 0; /* the function's bytes are the collective's, counted at COLL_END */
      } else if (what == 7 || what == 8) {
        if (what == 7) { r->io_read_bytes += nbytes; r->io_reads++; }
        else { r->io_write_bytes += nbytes; r->io_writes++; }
        r->io_coll += xflags & 1;
      } else {
        r->rma_ops[what >= 1 && what <= 6 ? what : 0]++;
        int64_t *v = imap_get(&r->rma_to, target);
        imap_put(&r->rma_to, target, (v ? *v : 0) + (int64_t)nbytes);
      }
      break;
    }
    case K_SWAP:
      r->swap_count++;
      r->swap_bytes += rd64(b);
      r->swap_write_s += (double)rd64(b + 8) * 1e-9;
      r->swap_time_s += (double)rd64(b + 16) * 1e-9;
      if (flags & SWAP_UNSYNC) r->swap_unsync++;
      acc += (int64_t)rd64(b + 16);
      GROW(r->acc, r->nacc, r->acccap);
      r->acc[r->nacc++] = (uint64_t)acc;
      break;
    default:
      break;
    }
    if (current >= 0) {
      if (nbytes) {
        fnstat_t *e = fnstat(r, current);
        e->bytes += nbytes;
        e->used = 1;
        cur_frame->mbytes += nbytes;
      }
      if (bucketed) {
        fnstat_t *e = fnstat(r, current);
        e->buckets[bucket_of(bucket_bytes)]++;
        e->bucketed = 1;
      }
    }
  }
  spill_run(0, r->sends, r->nsends);
  spill_run(1, r->recvs, r->nrecvs);
  free(r->sends);
  free(r->recvs);
  r->sends = r->recvs = NULL;
  r->nsends = r->nrecvs = 0;
  if (atomic_load(&g_failed)) goto out;
  {
    /* a killed rank: close what it left open at its last time stamp */
    int64_t end = r->nevents ? to_global(r, r->last_local) : 0;
    for (int i = 0; i < r->nthreads; i++)
      if (thr[i].has_last && thr[i].last_ts > end) end = thr[i].last_ts;
    for (int k = 0; k < r->closing_n; k++) {
      int i = tix[r->closing[k] >> 16];
      int func = (int)(r->closing[k] & 0xFFFF);
      int64_t ts = thr[i].last_ts > end ? thr[i].last_ts : end;
      if (ch) {
        char tmp[32];
        ch_head(ch, "E", region_name_of(r, func, tmp, sizeof tmp),
                func == FN_SWAPOUT ? "tiers" : "MPI", r->rank, r->closing[k] >> 16, ts);
        fputs(", \"args\": {\"closed\": \"the rank stopped inside this call\"}}", ch);
      }
      if (g_write_otf2) {
        /* marked, so that a reader of the archive alone (otf2raw.c) can
         * tell these Leaves from the program's */
        OTF2_AttributeList *al = OTF2_AttributeList_New();
        if (al) OTF2_AttributeList_AddUint8(al, CLOSED_ATTR, 1);
        OTF2_CHECK(OTF2_EvtWriter_Leave(thr[i].w, al, (OTF2_TimeStamp)ts, rref(r, func)));
        if (al) OTF2_AttributeList_Delete(al);
      }
      r->loc_events[i]++;
      thr[i].last_ts = ts;
      thr[i].has_last = 1;
      if (ts > r->otf_last) r->otf_last = ts;
    }
    if (r->stopped_reason || (!r->clocks[1].have && r->nevents)) {
      int i = tix[0];
      int64_t ts = thr[i].last_ts > end ? thr[i].last_ts : end;
      if (ts > r->otf_last) r->otf_last = ts;
      if (ch) {
        ch_head(ch, "i", "tiers_rank_stopped", "tiers", r->rank, 0, ts);
        fputs(", \"s\": \"p\"}", ch);
      }
      if (g_write_otf2) {
        OTF2_CHECK(OTF2_EvtWriter_Enter(thr[i].w, NULL, (OTF2_TimeStamp)ts, rref(r, 0x10001)));
        OTF2_CHECK(OTF2_EvtWriter_Leave(thr[i].w, NULL, (OTF2_TimeStamp)ts, rref(r, 0x10001)));
      }
      r->loc_events[i] += 2;
    }
  }
  rc = 0;
out:
  if (g_write_otf2)
    for (int i = 0; i < r->nthreads; i++) {
      if (thr[i].w) OTF2_Archive_CloseEvtWriter(g_archive, thr[i].w);
      if (thr[i].dw) OTF2_Archive_CloseDefWriter(g_archive, thr[i].dw);
    }
  for (int i = 0; i < r->nthreads; i++) free(thr[i].st.f);
  free(thr);
  imap_free(&posted);
  imap_free(&flows);
  if (ch && ferror(ch)) fail("cannot write a temporary file in %s (is the disk full?)", g_dir);
  free(tix);
  reader_close(&rd);
  return rc;
}

/* ------------------------------------------------------------ workers */

static rank_t *g_ranks;
static int g_nranks;
static atomic_int g_next;
static int g_phase;

static void *worker(void *arg) {
  (void)arg;
  for (;;) {
    int i = atomic_fetch_add(&g_next, 1);
    if (i >= g_nranks || atomic_load(&g_failed)) break;
    if (g_phase == 0) scan_rank(&g_ranks[i]);
    else write_rank(&g_ranks[i]);
  }
  return NULL;
}

static void run_workers(int phase, int jobs) {
  g_phase = phase;
  atomic_store(&g_next, 0);
  if (jobs > g_nranks) jobs = g_nranks;
  if (jobs < 1) jobs = 1;
  pthread_t *t = xmalloc((size_t)jobs * sizeof *t);
  int started = 0;
  for (int j = 1; j < jobs; j++)
    if (pthread_create(&t[started], NULL, worker, NULL) == 0) started++;
  worker(NULL);
  for (int j = 0; j < started; j++) pthread_join(t[j], NULL);
  free(t);
}

/* ------------------------------------------------------------ json */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (!isfinite(v)) fputs("null", f);
  else if (v == 0) fputs("0.0", f);
  else {
    char b[40];
    snprintf(b, sizeof b, "%.17g", v);
    fputs(b, f);
    if (!strpbrk(b, ".eEn")) fputs(".0", f); /* a float stays a float in JSON */
  }
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_msg(const void *a, const void *b) {
  const msg_t *x = a, *y = b;
#define C(f) if (x->f != y->f) return x->f < y->f ? -1 : 1
  C(src); C(dst); C(gid); C(tag); C(t); C(bytes);
#undef C
  return 0;
}

/* k-way merge of the sorted runs of one spill file, CHUNK records of each
 * run in memory at a time */
typedef struct {
  const spill_t *sp;
  size_t nruns;
  msg_t *buf;       /* nruns x CHUNK */
  uint64_t *done;   /* records of each run taken into its buffer so far */
  size_t *pos, *len;
  size_t *heap, nheap;
} merge_t;

static int merge_less(const merge_t *m, size_t a, size_t b) {
  return cmp_msg(&m->buf[a * CHUNK + m->pos[a]], &m->buf[b * CHUNK + m->pos[b]]) < 0;
}

static int merge_fill(merge_t *m, size_t r) {
  uint64_t left = m->sp->runs[r].n - m->done[r];
  size_t n = left < CHUNK ? (size_t)left : CHUNK;
  m->pos[r] = 0;
  m->len[r] = n;
  if (!n) return 0;
  size_t bytes = n * sizeof(msg_t);
  off_t at = (off_t)((m->sp->runs[r].off + m->done[r]) * sizeof(msg_t));
  char *p = (char *)&m->buf[r * CHUNK];
  while (bytes) {
    ssize_t got = pread(m->sp->fd, p, bytes, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      fail("cannot read back a temporary file in %s", g_dir);
      m->len[r] = 0;
      return 0;
    }
    p += got;
    bytes -= (size_t)got;
    at += got;
  }
  m->done[r] += n;
  return 1;
}

static void merge_down(merge_t *m, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, best = i;
    if (l < m->nheap && merge_less(m, m->heap[l], m->heap[best])) best = l;
    if (l + 1 < m->nheap && merge_less(m, m->heap[l + 1], m->heap[best])) best = l + 1;
    if (best == i) return;
    size_t x = m->heap[i];
    m->heap[i] = m->heap[best];
    m->heap[best] = x;
    i = best;
  }
}

static void merge_open(merge_t *m, const spill_t *sp) {
  memset(m, 0, sizeof *m);
  m->sp = sp;
  m->nruns = sp->nruns;
  m->buf = xmalloc(m->nruns * CHUNK * sizeof(msg_t));
  m->done = xcalloc(m->nruns, sizeof *m->done);
  m->pos = xcalloc(m->nruns, sizeof *m->pos);
  m->len = xcalloc(m->nruns, sizeof *m->len);
  m->heap = xmalloc((m->nruns ? m->nruns : 1) * sizeof *m->heap);
  for (size_t r = 0; r < m->nruns; r++)
    if (merge_fill(m, r)) m->heap[m->nheap++] = r;
  for (size_t i = m->nheap; i-- > 0;) merge_down(m, i);
}

static const msg_t *merge_peek(const merge_t *m) {
  if (!m->nheap) return NULL;
  size_t r = m->heap[0];
  return &m->buf[r * CHUNK + m->pos[r]];
}

static void merge_pop(merge_t *m) {
  size_t r = m->heap[0];
  if (++m->pos[r] == m->len[r] && !merge_fill(m, r)) {
    m->heap[0] = m->heap[--m->nheap];
  }
  if (m->nheap) merge_down(m, 0);
}

static void merge_close(merge_t *m) {
  free(m->buf);
  free(m->done);
  free(m->pos);
  free(m->len);
  free(m->heap);
}

/* this process's peak resident memory (VmHWM), or -1 */
static long peak_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) {
      v = atol(line + 6);
      break;
    }
  fclose(f);
  return v;
}

/* ------------------------------------------------------------ main */

static int is_rank_file(const char *name) {
  size_t n = strlen(name);
  return n > 9 && !strncmp(name, "rank-", 5) && !strcmp(name + n - 4, ".tev");
}

static int cmp_rank(const void *a, const void *b) {
  const rank_t *x = a, *y = b;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

static int cmp_path(const void *a, const void *b) {
  return strcmp(((const rank_t *)a)->path, ((const rank_t *)b)->path);
}

/* OTF2's own messages: kept off the terminal, the first one goes into ours */

static OTF2_ErrorCode otf2_error(void *ud, const char *file, uint64_t line, const char *fn,
                                 OTF2_ErrorCode code, const char *fmt, va_list va) {
  (void)ud; (void)file; (void)line; (void)fn;
  pthread_mutex_lock(&g_error_lock);
  if (!g_otf2_msg[0]) {
    char msg[400] = "";
    if (fmt) vsnprintf(msg, sizeof msg, fmt, va);
    snprintf(g_otf2_msg, sizeof g_otf2_msg, "%s%s%s", OTF2_Error_GetDescription(code),
             msg[0] ? ": " : "", msg);
  }
  pthread_mutex_unlock(&g_error_lock);
  return code;
}

/* OTF2's chunks: at most POOL chunks a writer; when they are used up OTF2
 * flushes them to disk and frees them (its default pool is 128 MiB a
 * writer, this keeps memory small and constant) */
#define POOL 8
typedef struct {
  int n;
  void *chunk[POOL];
} pool_t;

static void *pool_alloc(void *ud, OTF2_FileType ft, OTF2_LocationRef loc, void **per,
                        uint64_t size) {
  (void)ud; (void)ft; (void)loc;
  pool_t *p = *per;
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p) return NULL;
    *per = p;
  }
  if (p->n == POOL) return NULL; /* OTF2 flushes, frees, asks again */
  void *c = malloc(size);
  if (c) p->chunk[p->n++] = c;
  return c;
}

static void pool_free_all(void *ud, OTF2_FileType ft, OTF2_LocationRef loc, void **per,
                          bool final) {
  (void)ud; (void)ft; (void)loc;
  pool_t *p = *per;
  if (!p) return;
  for (int i = 0; i < p->n; i++) free(p->chunk[i]);
  p->n = 0;
  if (final) {
    free(p);
    *per = NULL;
  }
}

static OTF2_FlushType pre_flush(void *ud, OTF2_FileType ft, OTF2_LocationRef loc, void *cd,
                                bool final) {
  (void)ud; (void)ft; (void)loc; (void)cd; (void)final;
  return OTF2_FLUSH;
}

static int64_t max_matrix_ranks(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  uint64_t mem = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (8ull << 30);
  uint64_t v = mem / 8 / (2 * 64);
  uint64_t s = (uint64_t)sqrt((double)v);
  while (s * s > v) s--;
  while ((s + 1) * (s + 1) <= v) s++;
  return s > 256 ? (int64_t)s : 256;
}

static void usage_error(const char *msg) {
  fprintf(stderr, "tiers-trace-post: error: %s\n", msg);
  exit(2);
}

int main(int argc, char **argv) {
  const char *dir = NULL, *from_otf2 = NULL;
  int jobs = (int)sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tiers-trace-post DIR [--no-otf2] [--chrome FILE] [--jobs N]\n"
             "Reads the raw rank files of a tiers trace folder in one pass, in bounded memory,\n"
             "a thread per rank file, and writes the OTF2 archive, the summary and call-site\n"
             "JSON (and with --chrome a Chrome/Perfetto trace-event file).  tiers trace runs it.\n"
             "       tiers-trace-post DIR --from-otf2 OUT\n"
             "Rebuilds raw rank files OUT/raw/ from the OTF2 archive DIR/traces.otf2 (a folder\n"
             "whose raw files were deleted), in bounded memory, for the summary and exports.\n");
      return 0;
    }
    if (!strcmp(argv[i], "--no-otf2")) g_write_otf2 = 0;
    else if (!strcmp(argv[i], "--from-otf2") && i + 1 < argc) from_otf2 = argv[++i];
    else if (!strcmp(argv[i], "--chrome") && i + 1 < argc) g_chrome = argv[++i];
    else if (!strcmp(argv[i], "--jobs") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 4096) usage_error("--jobs must be a count from 1 to 4096");
      jobs = (int)v;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "tiers-trace-post: error: unknown option %s (usage: tiers-trace-post DIR "
                      "[--no-otf2] [--chrome FILE] [--jobs N])\n", argv[i]);
      return 2;
    } else if (!dir) dir = argv[i];
    else usage_error("give one trace folder");
  }
  if (!dir) usage_error("usage: tiers-trace-post DIR [--no-otf2] [--chrome FILE] [--jobs N]");
  if (from_otf2) /* raw files rebuilt from DIR's archive into FROM_OTF2/raw */
    return tiers_post_from_otf2(dir, from_otf2);
  g_dir = dir;
  const char *run_env = getenv("TIERS_TRACE_POST_RUN");
  if (run_env && atol(run_env) >= 16) g_run = (size_t)atol(run_env);
  OTF2_Error_RegisterCallback(otf2_error, NULL);
  if (jobs < 1) jobs = 1;

  char rawdir[4096];
  snprintf(rawdir, sizeof rawdir, "%s/raw", dir);
  DIR *d = opendir(rawdir);
  int cap = 0;
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!is_rank_file(e->d_name)) continue;
      GROW(g_ranks, g_nranks, cap);
      memset(&g_ranks[g_nranks], 0, sizeof *g_ranks);
      size_t n = strlen(rawdir) + strlen(e->d_name) + 2;
      g_ranks[g_nranks].path = xmalloc(n);
      snprintf(g_ranks[g_nranks].path, n, "%s/%s", rawdir, e->d_name);
      g_nranks++;
    }
    closedir(d);
  }
  if (!g_nranks) {
    fprintf(stderr, "tiers-trace-post: error: %s holds no raw trace files\n", dir);
    return 1;
  }
  qsort(g_ranks, (size_t)g_nranks, sizeof *g_ranks, cmp_path);
  /* the message runs: in $TMPDIR or /tmp, else in the trace folder (whose
   * disk may be the one that filled up during the run) */
  for (int k = 0; k < 2; k++) {
    const char *where[3] = {getenv("TMPDIR"), "/tmp", dir};
    for (int w = 0; w < 3 && g_spill[k].fd < 0; w++) {
      if (!where[w] || !*where[w]) continue;
      char tmp[4200];
      snprintf(tmp, sizeof tmp, "%s/.tiers-trace-post-XXXXXX", where[w]);
      g_spill[k].fd = mkstemp(tmp);
      if (g_spill[k].fd >= 0) unlink(tmp); /* gone when the tool ends, however it ends */
    }
    if (g_spill[k].fd < 0) {
      fprintf(stderr, "tiers-trace-post: error: cannot create a temporary file in %s or /tmp: "
                      "%s\n", dir, strerror(errno));
      return 1;
    }
  }
  struct timespec t_start, t_scan, t_end;
  clock_gettime(CLOCK_MONOTONIC, &t_start);
  run_workers(0, jobs);
  if (atomic_load(&g_failed)) goto failed;
  clock_gettime(CLOCK_MONOTONIC, &t_scan);
  qsort(g_ranks, (size_t)g_nranks, sizeof *g_ranks, cmp_rank);
  for (int i = 0; i < g_nranks; i++) {
    if (i && g_ranks[i].rank == g_ranks[i - 1].rank) {
      fail("%s: two raw files hold rank %d: the folder mixes runs", rawdir, g_ranks[i].rank);
      goto failed;
    }
    if (g_ranks[i].size != g_ranks[0].size) {
      fail("%s: rank %d ran with %d ranks, rank %d with %d: the folder mixes runs", rawdir,
           g_ranks[i].rank, g_ranks[i].size, g_ranks[0].rank, g_ranks[0].size);
      goto failed;
    }
  }
  g_n = g_ranks[0].size;
  {
    int64_t limit = max_matrix_ranks();
    if (g_n > limit) {
      fail("rank %d's raw file says the run had %d ranks: more than the %lld whose "
           "communication matrix fits in memory here", g_ranks[0].rank, g_n, (long long)limit);
      goto failed;
    }
  }
  for (int i = 0; i < g_nranks; i++) {
    rank_t *r = &g_ranks[i];
    for (int c = 0; c < r->ncomms; c++) {
      /* python checks each definition order entry against the last definition of its id */
      comm_t *cm = &r->comms[*imap_get(&r->cid_last, r->comms[c].cid)];
      for (int m = 0; m < cm->n; m++)
        if (cm->members[m] < 0 || cm->members[m] >= g_n) {
          fail("rank %d's raw file: communicator %d has a member outside ranks 0..%d", r->rank,
               cm->cid, g_n - 1);
          goto failed;
        }
    }
  }
  /* unify communicators: the k-th definition of the same members (and
   * inter flag) on each member is the same communicator */
  {
    imap_t key_first = {0}; /* hash -> first gid with that hash; chain below */
    int *chain = NULL;
    int64_t *gkey_k = NULL;
    int *g_parent_rank = NULL, *g_parent_cid = NULL;
    int gcap = 0;
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      r->gid_of = xmalloc((size_t)(r->ncomms ? r->ncomms : 1) * sizeof(int));
      imap_t seen = {0}; /* hash -> count (collisions make counts per hash; exact check below) */
      /* per definition: count of previous equal keys on this rank */
      for (int c = 0; c < r->ncomms; c++) {
        comm_t *cm = &r->comms[*imap_get(&r->cid_last, r->comms[c].cid)];
        uint64_t h = 1469598103934665603ull ^ (uint64_t)(cm->flags & 1);
        for (int m = 0; m < cm->n; m++) h = (h ^ (uint32_t)cm->members[m]) * 1099511628211ull;
        h ^= (uint64_t)cm->n * 0x9E3779B97F4A7C15ull;
        int64_t k;
        {
          int64_t *v = imap_get(&seen, (int64_t)(h & 0x3FFFFFFFFFFFFFFFull));
          k = v ? *v : 0;
          imap_put(&seen, (int64_t)(h & 0x3FFFFFFFFFFFFFFFull), k + 1);
        }
        int64_t hk = (int64_t)((h * 31 + (uint64_t)k) & 0x3FFFFFFFFFFFFFFFull);
        int64_t *first = imap_get(&key_first, hk);
        int gid = -1;
        for (int g = first ? (int)*first : -1; g >= 0; g = chain[g])
          if (gkey_k[g] == k && g_comms[g].n == cm->n &&
              (g_comms[g].flags & 1) == (cm->flags & 1) &&
              !memcmp(g_comms[g].members, cm->members, (size_t)cm->n * 4)) {
            gid = g;
            break;
          }
        if (gid < 0) {
          if (g_ncomms >= gcap) {
            gcap = gcap ? 2 * gcap : 16;
            g_comms = xrealloc(g_comms, (size_t)gcap * sizeof *g_comms);
            chain = xrealloc(chain, (size_t)gcap * sizeof *chain);
            gkey_k = xrealloc(gkey_k, (size_t)gcap * sizeof *gkey_k);
            g_parent_rank = xrealloc(g_parent_rank, (size_t)gcap * sizeof(int));
            g_parent_cid = xrealloc(g_parent_cid, (size_t)gcap * sizeof(int));
          }
          gid = g_ncomms++;
          g_comms[gid].members = cm->members;
          g_comms[gid].n = cm->n;
          g_comms[gid].flags = cm->flags;
          g_comms[gid].parent = -1;
          g_comms[gid].name = NULL;
          gkey_k[gid] = k;
          chain[gid] = first ? (int)*first : -1;
          imap_put(&key_first, hk, gid);
          g_parent_rank[gid] = cm->parent < 0 ? -1 : i;
          g_parent_cid[gid] = cm->parent;
        }
        r->gid_of[c] = gid;
      }
      imap_free(&seen);
    }
    for (int g = 0; g < g_ncomms; g++)
      if (g_parent_rank[g] >= 0) g_comms[g].parent = comm_gid(&g_ranks[g_parent_rank[g]], g_parent_cid[g]);
    free(chain);
    free(gkey_k);
    free(g_parent_rank);
    free(g_parent_cid);
    imap_free(&key_first);
  }
  g_mbytes = xcalloc((size_t)g_n * (size_t)g_n, sizeof(uint64_t));
  g_mmsgs = xcalloc((size_t)g_n * (size_t)g_n, sizeof(uint64_t));

  /* OTF2 definitions known before the events: locations and regions */
  strtab_t strs = {0};
  str_ref(&strs, "");
  uint32_t nregions = 0;
  strtab_t region_names = {0};
  int *region_kind = NULL; /* 1: artificial */
  uint32_t nlocs = 0;
  for (int i = 0; i < g_nranks; i++) {
    rank_t *r = &g_ranks[i];
    /* threads sorted */
    for (int a = 1; a < r->nthreads; a++)
      for (int b = a; b > 0 && r->threads[b - 1] > r->threads[b]; b--) {
        uint16_t x = r->threads[b];
        r->threads[b] = r->threads[b - 1];
        r->threads[b - 1] = x;
      }
    r->loc_ref = xmalloc((size_t)r->nthreads * sizeof(uint32_t));
    r->loc_events = xcalloc((size_t)r->nthreads, sizeof(uint64_t));
    for (int t = 0; t < r->nthreads; t++) r->loc_ref[t] = nlocs++;
  }
  for (int i = 0; i < g_nranks; i++) {
    rank_t *r = &g_ranks[i];
    for (int k = 0; k < r->nregion_order; k++) {
      char tmp[32];
      int key = r->region_order[k];
      const char *name = region_name_of(r, key, tmp, sizeof tmp);
      uint32_t ref = str_ref(&region_names, name);
      if (ref == nregions) {
        nregions++;
        region_kind = xrealloc(region_kind, nregions * sizeof(int));
        region_kind[ref] = key >= FN_SWAPOUT;
      }
      imap_put(&r->region_ref, key, ref);
    }
  }
  if (g_write_otf2) {
    char path[4200];
    snprintf(path, sizeof path, "%s", dir);
    g_archive = OTF2_Archive_Open(path, "traces", OTF2_FILEMODE_WRITE, 1024 * 1024,
                                  4 * 1024 * 1024, OTF2_SUBSTRATE_POSIX, OTF2_COMPRESSION_NONE);
    if (!g_archive) {
      fail("cannot write the OTF2 archive in %s: %s", dir,
           g_otf2_msg[0] ? g_otf2_msg : "the OTF2 library could not create it");
      goto failed;
    }
    static OTF2_FlushCallbacks fcb = {pre_flush, NULL}; /* OTF2 keeps the pointer */
    static OTF2_MemoryCallbacks mcb = {pool_alloc, pool_free_all};
    if (OTF2_Archive_SetFlushCallbacks(g_archive, &fcb, NULL) != OTF2_SUCCESS ||
        OTF2_Archive_SetSerialCollectiveCallbacks(g_archive) != OTF2_SUCCESS ||
        OTF2_Archive_SetMemoryCallbacks(g_archive, &mcb, NULL) != OTF2_SUCCESS ||
        OTF2_Pthread_Archive_SetLockingCallbacks(g_archive, NULL) != OTF2_SUCCESS ||
        OTF2_Archive_OpenDefFiles(g_archive) != OTF2_SUCCESS ||
        OTF2_Archive_OpenEvtFiles(g_archive) != OTF2_SUCCESS) {
      fail("cannot write the OTF2 archive in %s: %s", dir,
           g_otf2_msg[0] ? g_otf2_msg : "the OTF2 library could not open its files");
      goto failed;
    }
  }
  if (g_chrome) {
    int have = 0;
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      if (!r->nevents) continue;
      int64_t t = to_global(r, r->first_local);
      if (!have || t < g_chrome_t0) g_chrome_t0 = t;
      have = 1;
    }
    for (int i = 0; i < g_nranks; i++) {
      char tmp[4200];
      snprintf(tmp, sizeof tmp, "%s/.tiers-trace-chrome-XXXXXX", dir);
      int fd = mkstemp(tmp);
      if (fd < 0) {
        snprintf(tmp, sizeof tmp, "/tmp/.tiers-trace-chrome-XXXXXX");
        fd = mkstemp(tmp);
      }
      if (fd >= 0) unlink(tmp);
      g_ranks[i].chrome = fd >= 0 ? fdopen(fd, "w+") : NULL;
      if (!g_ranks[i].chrome) {
        fail("cannot create a temporary file in %s: %s", dir, strerror(errno));
        goto failed;
      }
      setvbuf(g_ranks[i].chrome, NULL, _IOFBF, 1 << 16);
    }
  }
  run_workers(1, jobs);
  if (atomic_load(&g_failed)) goto failed;
  if (g_chrome) {
    /* the ranks' parts in rank order; the file appears whole or not at all */
    FILE *out = !strcmp(g_chrome, "-") ? stdout : fopen(g_chrome, "w");
    if (!out) {
      fail("cannot write %s: %s", g_chrome, strerror(errno));
      goto failed;
    }
    fputs("{\"displayTimeUnit\": \"ns\", \"traceEvents\": [", out);
    char *buf = xmalloc(1 << 16);
    int first = 1;
    for (int i = 0; i < g_nranks; i++) {
      FILE *f = g_ranks[i].chrome;
      fflush(f);
      rewind(f);
      size_t n;
      while ((n = fread(buf, 1, 1 << 16, f)) > 0) {
        size_t skip = first && n && buf[0] == ',' ? 1 : 0; /* no comma before the first event */
        first = 0;
        fwrite(buf + skip, 1, n - skip, out);
      }
      fclose(f);
      g_ranks[i].chrome = NULL;
    }
    free(buf);
    fputs("\n]}\n", out);
    if (fflush(out) || ferror(out) || (out != stdout && fclose(out))) {
      fail("cannot write %s (is the disk full?)", g_chrome);
      goto failed;
    }
  }

  /* ---- the totals */
  int64_t first = 0, last = 0;
  int have_time = 0;
  uint64_t coll_bytes = 0;
  for (int i = 0; i < g_nranks; i++) {
    rank_t *r = &g_ranks[i];
    if (!r->have_time) continue;
    if (!have_time || r->first_g < first) first = r->first_g;
    if (!have_time || r->last_g > last) last = r->last_g;
    have_time = 1;
  }
  for (int i = 0; i < g_nranks; i++) coll_bytes += g_ranks[i].coll_bytes;
  double duration = have_time ? (double)(last - first) * 1e-9 : 0.0;

  if (g_write_otf2) {
    /* global definitions, in the order convert.write_otf2 makes them */
    int64_t gfirst = INT64_MAX, glast = INT64_MIN;
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      if (!r->have_otf) continue;
      if (r->otf_first < gfirst) gfirst = r->otf_first;
      if (r->otf_last > glast) glast = r->otf_last;
    }
    OTF2_GlobalDefWriter *gw = OTF2_Archive_GetGlobalDefWriter(g_archive);
    if (!gw) {
      fail("cannot write the OTF2 archive in %s: no global definition writer", dir);
      goto failed;
    }
    OTF2_ErrorCode ec = OTF2_SUCCESS;
#define GW(call) do { if (ec == OTF2_SUCCESS) ec = (call); } while (0)
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int any = gfirst != INT64_MAX;
    GW(OTF2_GlobalDefWriter_WriteClockProperties(
        gw, 1000000000ull, any ? (uint64_t)gfirst : 0, any ? (uint64_t)(glast - gfirst) : 0,
        any ? (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec
            : OTF2_UNDEFINED_TIMESTAMP));
    /* strings first: collect every name */
    uint32_t s_machine = str_ref(&strs, "machine"), s_node = str_ref(&strs, "node");
    uint32_t *host_node = xmalloc((size_t)g_nranks * sizeof(uint32_t));
    strtab_t hosts = {0};
    for (int i = 0; i < g_nranks; i++) host_node[i] = str_ref(&hosts, g_ranks[i].host);
    /* write all string definitions as they are made */
    uint32_t written = 0;
#define FLUSH_STRINGS()                                                                        \
  for (; written < strs.n; written++) GW(OTF2_GlobalDefWriter_WriteString(gw, written, strs.s[written]))
    FLUSH_STRINGS();
    GW(OTF2_GlobalDefWriter_WriteSystemTreeNode(gw, 0, s_machine, str_ref(&strs, ""),
                                                OTF2_UNDEFINED_SYSTEM_TREE_NODE));
    for (size_t h = 0; h < hosts.n; h++) {
      uint32_t s = str_ref(&strs, hosts.s[h]);
      FLUSH_STRINGS();
      GW(OTF2_GlobalDefWriter_WriteSystemTreeNode(gw, (uint32_t)h + 1, s, s_node, 0));
    }
    for (int i = 0; i < g_nranks; i++) {
      char name[64];
      snprintf(name, sizeof name, "MPI Rank %d", g_ranks[i].rank);
      uint32_t s = str_ref(&strs, name);
      FLUSH_STRINGS();
      GW(OTF2_GlobalDefWriter_WriteLocationGroup(gw, (uint32_t)i, s,
                                                 OTF2_LOCATION_GROUP_TYPE_PROCESS,
                                                 host_node[i] + 1,
                                                 OTF2_UNDEFINED_LOCATION_GROUP));
    }
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      for (int t = 0; t < r->nthreads; t++) {
        char name[64];
        if (r->threads[t] == 0) snprintf(name, sizeof name, "Master thread");
        else snprintf(name, sizeof name, "Thread %d", r->threads[t]);
        uint32_t s = str_ref(&strs, name);
        FLUSH_STRINGS();
        GW(OTF2_GlobalDefWriter_WriteLocation(gw, r->loc_ref[t], s, OTF2_LOCATION_TYPE_CPU_THREAD,
                                              r->loc_events[t], (uint32_t)i));
      }
    }
    for (uint32_t k = 0; k < nregions; k++) {
      uint32_t s = str_ref(&strs, region_names.s[k]);
      FLUSH_STRINGS();
      GW(OTF2_GlobalDefWriter_WriteRegion(
          gw, k, s, s, 0, region_kind[k] ? OTF2_REGION_ROLE_ARTIFICIAL : OTF2_REGION_ROLE_FUNCTION,
          region_kind[k] ? OTF2_PARADIGM_MEASUREMENT_SYSTEM : OTF2_PARADIGM_MPI,
          OTF2_REGION_FLAG_NONE, OTF2_UNDEFINED_STRING, 0, 0));
    }
    /* the mark of the Leaves added for a killed rank (CLOSED_ATTR) */
    for (int i = 0; i < g_nranks; i++)
      if (g_ranks[i].closing_n) {
        uint32_t s = str_ref(&strs, "tiers_closed_at_stop");
        uint32_t d = str_ref(&strs, "a Leave tiers added: the rank stopped inside this call");
        FLUSH_STRINGS();
        GW(OTF2_GlobalDefWriter_WriteAttribute(gw, CLOSED_ATTR, s, d, OTF2_TYPE_UINT8));
        break;
      }
    {
      uint64_t *m = xmalloc((size_t)g_nranks * sizeof(uint64_t));
      for (int i = 0; i < g_nranks; i++) m[i] = g_ranks[i].loc_ref[0];
      uint32_t s = str_ref(&strs, "MPI_COMM_WORLD locations");
      FLUSH_STRINGS();
      GW(OTF2_GlobalDefWriter_WriteGroup(gw, 0, s, OTF2_GROUP_TYPE_COMM_LOCATIONS,
                                         OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE,
                                         (uint32_t)g_nranks, m));
      free(m);
    }
    /* communicator names */
    imap_t rank_index = {0};
    for (int i = 0; i < g_nranks; i++) imap_put(&rank_index, g_ranks[i].rank, i);
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      for (int k = 0; k < r->nnames; k++) {
        int g = comm_gid(r, r->name_cid[k]);
        if (g >= 0 && !g_comms[g].name) g_comms[g].name = r->names[k];
      }
    }
    uint64_t *mem = xmalloc((size_t)(g_n + 1) * sizeof(uint64_t));
    for (int g = 0; g < g_ncomms; g++) {
      char name[600];
      int self = 0;
      if (g_comms[g].n == 1)
        for (int i = 0; i < g_nranks; i++)
          if (comm_gid(&g_ranks[i], 1) == g) { self = 1; break; }
      if (g == 0) snprintf(name, sizeof name, "MPI_COMM_WORLD");
      else if (self) snprintf(name, sizeof name, "MPI_COMM_SELF");
      else if (g_comms[g].name) snprintf(name, sizeof name, "%s", g_comms[g].name);
      else snprintf(name, sizeof name, "MPI_Comm %d", g);
      char gname[620];
      snprintf(gname, sizeof gname, "%s group", name);
      uint32_t n = 0;
      for (int m = 0; m < g_comms[g].n; m++) {
        int64_t *ix = imap_get(&rank_index, g_comms[g].members[m]);
        if (ix) mem[n++] = (uint64_t)*ix;
      }
      uint32_t sg = str_ref(&strs, gname);
      FLUSH_STRINGS();
      GW(OTF2_GlobalDefWriter_WriteGroup(gw, (uint32_t)g + 1, sg, OTF2_GROUP_TYPE_COMM_GROUP,
                                         OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE, n, mem));
      uint32_t sc = str_ref(&strs, name);
      FLUSH_STRINGS();
      int parent = g_comms[g].parent;
      GW(OTF2_GlobalDefWriter_WriteComm(gw, (uint32_t)g, sc, (uint32_t)g + 1,
                                        parent >= 0 && parent < g ? (uint32_t)parent
                                                                  : OTF2_UNDEFINED_COMM,
                                        OTF2_COMM_FLAG_NONE));
    }
    free(mem);
    imap_free(&rank_index);
    if (ec != OTF2_SUCCESS) {
      fail("cannot write the OTF2 archive in %s: %s", dir, OTF2_Error_GetDescription(ec));
      goto failed;
    }
    if (OTF2_Archive_CloseEvtFiles(g_archive) != OTF2_SUCCESS ||
        OTF2_Archive_CloseDefFiles(g_archive) != OTF2_SUCCESS ||
        OTF2_Archive_Close(g_archive) != OTF2_SUCCESS) {
      g_archive = NULL;
      fail("cannot write the OTF2 archive in %s: %s", dir,
           g_otf2_msg[0] ? g_otf2_msg : "closing it failed (is the disk full?)");
      goto failed;
    }
    g_archive = NULL;
    free(host_node);
    strtab_free(&hosts);
  }
  strtab_free(&strs);
  strtab_free(&region_names);
  free(region_kind);

  /* ---- receiver-first share */
  uint64_t matched = 0, rf_bytes = 0;
  {
    merge_t ms, mr;
    merge_open(&ms, &g_spill[0]);
    merge_open(&mr, &g_spill[1]);
    const msg_t *s = merge_peek(&ms), *q = merge_peek(&mr);
    while (s && q) {
      int c = s->src != q->src ? (s->src < q->src ? -1 : 1)
              : s->dst != q->dst ? (s->dst < q->dst ? -1 : 1)
              : s->gid != q->gid ? (s->gid < q->gid ? -1 : 1)
              : s->tag != q->tag ? (s->tag < q->tag ? -1 : 1) : 0;
      if (c <= 0) {
        if (!c) {
          matched += s->bytes;
          if (q->t < s->t) rf_bytes += s->bytes;
          merge_pop(&mr);
          q = merge_peek(&mr);
        }
        merge_pop(&ms);
        s = merge_peek(&ms);
      } else {
        merge_pop(&mr);
        q = merge_peek(&mr);
      }
    }
    merge_close(&ms);
    merge_close(&mr);
    if (atomic_load(&g_failed)) goto failed;
  }

  /* ---- JSON */
  FILE *o = stdout;
  uint64_t p2p_bytes = 0, p2p_msgs = 0, total_events = 0;
  for (size_t k = 0; k < (size_t)g_n * g_n; k++) {
    p2p_bytes += g_mbytes[k];
    p2p_msgs += g_mmsgs[k];
  }
  uint64_t nbr_bytes = 0, nbr_msgs = 0; /* in the matrix, but collective bytes */
  for (int i = 0; i < g_nranks; i++) {
    total_events += g_ranks[i].otf2_events;
    nbr_bytes += g_ranks[i].nbr_bytes;
    nbr_msgs += g_ranks[i].nbr_msgs;
  }
  p2p_bytes -= nbr_bytes;
  p2p_msgs -= nbr_msgs;
  fprintf(o, "{\"summary\": {\"ranks\": %d, \"events\": %" PRIu64 ", \"duration_s\": ", g_n,
          total_events);
  json_num(o, duration);
  fprintf(o, ", \"p2p_bytes\": %" PRIu64 ", \"p2p_messages\": %" PRIu64
             ", \"coll_bytes\": %" PRIu64 ", \"neighbor_bytes\": %" PRIu64
             ", \"neighbor_messages\": %" PRIu64,
          p2p_bytes, p2p_msgs, coll_bytes, nbr_bytes, nbr_msgs);
  uint64_t rma_total = 0, io_r = 0, io_w = 0;
  for (int i = 0; i < g_nranks; i++) {
    rank_t *r = &g_ranks[i];
    for (size_t k = 0; k < r->rma_to.cap; k++)
      if (r->rma_to.key[k] != INT64_MIN) rma_total += (uint64_t)r->rma_to.val[k];
    io_r += r->io_read_bytes;
    io_w += r->io_write_bytes;
  }
  fprintf(o, ", \"rma_bytes\": %" PRIu64 ", \"io_bytes\": {\"read\": %" PRIu64
             ", \"write\": %" PRIu64 "}", rma_total, io_r, io_w);
  fputs(", \"data_rate_bytes_per_s\": ", o);
  if (duration > 0) json_num(o, (double)p2p_bytes / duration); else fputs("null", o);
  fputs(", \"message_rate_per_s\": ", o);
  if (duration > 0) json_num(o, (double)p2p_msgs / duration); else fputs("null", o);
  fputs(", \"receiver_first_share\": ", o);
  if (matched) json_num(o, (double)rf_bytes / (double)matched); else fputs("null", o);
  fputs(", \"matched_p2p_bytes\": ", o);
  fprintf(o, "%" PRIu64, matched);
  /* swap-outs */
  {
    uint64_t cnt = 0, bytes = 0, uns = 0;
    double ts = 0, ws = 0;
    for (int i = 0; i < g_nranks; i++) {
      cnt += g_ranks[i].swap_count;
      bytes += g_ranks[i].swap_bytes;
      uns += g_ranks[i].swap_unsync;
    }
    /* python sums the per-rank floats in rank order */
    for (int i = 0; i < g_nranks; i++) ts += g_ranks[i].swap_time_s;
    for (int i = 0; i < g_nranks; i++) ws += g_ranks[i].swap_write_s;
    fprintf(o, ", \"swapouts\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"time_s\": ",
            cnt, bytes);
    json_num(o, ts);
    fputs(", \"write_s\": ", o);
    json_num(o, ws);
    fprintf(o, ", \"unsynchronised\": %" PRIu64, uns);
    int ok = 1;
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      if (!r->have_info || (r->info_policy != 0 && r->info_policy != 3)) ok = 0;
      if (r->nacc != g_ranks[0].nacc) ok = 0;
    }
    if (ok) {
      uint64_t worst = 0;
      for (size_t k = 0; k < g_ranks[0].nacc; k++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int i = 0; i < g_nranks; i++) {
          uint64_t v = g_ranks[i].acc[k];
          if (v < lo) lo = v;
          if (v > hi) hi = v;
        }
        if (hi - lo > worst) worst = hi - lo;
      }
      double spread = (double)worst * 1e-9;
      fputs(", \"spread_s\": ", o);
      json_num(o, spread);
      fputs(", \"spread_share\": ", o);
      if (duration > 0) json_num(o, spread / duration); else fputs("null", o);
      fputs("}", o);
    } else {
      fputs(", \"spread_s\": null, \"spread_share\": null}", o);
    }
  }
  fputs(", \"stopped_ranks\": [", o);
  {
    int c = 0;
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      if (r->stopped_reason || (!r->clocks[1].have && r->nevents))
        fprintf(o, "%s%d", c++ ? ", " : "", r->rank);
    }
  }
  fputs("]", o);
  /* functions summed over ranks, by name */
  {
    strtab_t names = {0};
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      for (int f = 0; f < r->nfn; f++)
        if (r->fs[f].used || r->fs[f].bucketed) str_ref(&names, r->fs[f].name);
      for (int f = 0; f < r->nfs_extra; f++) str_ref(&names, r->fs_extra[f].name);
    }
    fnstat_t *tot = xcalloc(names.n, sizeof *tot);
    int *order = xmalloc(names.n * sizeof(int));
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      for (int f = 0; f < r->nfn + r->nfs_extra; f++) {
        fnstat_t *e = f < r->nfn ? &r->fs[f] : &r->fs_extra[f - r->nfn];
        if (!e->used && !e->bucketed) continue;
        fnstat_t *t = &tot[str_ref(&names, e->name)];
        t->used |= e->used;
        t->bucketed |= e->bucketed;
        t->calls += e->calls;
        t->bytes += e->bytes;
        t->time_s += e->time_s;
        for (int k = 0; k < NBUCKET; k++) t->buckets[k] += e->buckets[k];
      }
    }
    char **sorted = xmalloc(names.n * sizeof(char *));
    for (size_t k = 0; k < names.n; k++) sorted[k] = names.s[k];
    qsort(sorted, names.n, sizeof(char *), cmp_str);
    for (size_t k = 0; k < names.n; k++) order[k] = (int)str_ref(&names, sorted[k]);
    fputs(", \"functions\": {", o);
    int c = 0;
    for (size_t k = 0; k < names.n; k++) {
      fnstat_t *t = &tot[order[k]];
      if (!t->used) continue;
      fputs(c++ ? ", " : "", o);
      json_str(o, names.s[order[k]]);
      fprintf(o, ": {\"calls\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"time_s\": ", t->calls,
              t->bytes);
      json_num(o, t->time_s);
      fputs("}", o);
    }
    fputs("}", o);
    /* comm matrix */
    fprintf(o, ", \"comm_matrix\": {\"ranks\": %d, \"bytes\": [", g_n);
    for (int a = 0; a < g_n; a++) {
      fputs(a ? ", [" : "[", o);
      for (int b = 0; b < g_n; b++)
        fprintf(o, "%s%" PRIu64, b ? ", " : "", g_mbytes[(size_t)a * g_n + b]);
      fputs("]", o);
    }
    fputs("], \"messages\": [", o);
    for (int a = 0; a < g_n; a++) {
      fputs(a ? ", [" : "[", o);
      for (int b = 0; b < g_n; b++)
        fprintf(o, "%s%" PRIu64, b ? ", " : "", g_mmsgs[(size_t)a * g_n + b]);
      fputs("]", o);
    }
    fputs("]}}", o);
    /* per rank */
    fputs(", \"per_rank\": [", o);
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      fputs(i ? ", {" : "{", o);
      fprintf(o, "\"rank\": %d, \"host\": ", r->rank);
      json_str(o, r->host);
      fprintf(o, ", \"events\": %" PRIu64 ", \"functions\": {", r->otf2_events);
      /* this rank's functions sorted by name */
      int nf = 0;
      fnstat_t **fl = xmalloc((size_t)(r->nfn + r->nfs_extra + 1) * sizeof *fl);
      for (int f = 0; f < r->nfn + r->nfs_extra; f++) {
        fnstat_t *e = f < r->nfn ? &r->fs[f] : &r->fs_extra[f - r->nfn];
        if (e->used) fl[nf++] = e;
      }
      for (int a = 1; a < nf; a++)
        for (int b = a; b > 0 && strcmp(fl[b - 1]->name, fl[b]->name) > 0; b--) {
          fnstat_t *x = fl[b];
          fl[b] = fl[b - 1];
          fl[b - 1] = x;
        }
      for (int k = 0; k < nf; k++) {
        fputs(k ? ", " : "", o);
        json_str(o, fl[k]->name);
        fprintf(o, ": {\"calls\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"time_s\": ",
                fl[k]->calls, fl[k]->bytes);
        json_num(o, fl[k]->time_s);
        fputs("}", o);
      }
      free(fl);
      fprintf(o, "}, \"swapouts\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64
                 ", \"time_s\": ", r->swap_count, r->swap_bytes);
      json_num(o, r->swap_time_s);
      fputs(", \"write_s\": ", o);
      json_num(o, r->swap_write_s);
      fprintf(o, ", \"unsynchronised\": %" PRIu64 "}", r->swap_unsync);
      fputs(", \"clock_offset_ns\": {\"init\": ", o);
      if (r->clocks[0].have) fprintf(o, "%" PRId64, r->clocks[0].off); else fputs("null", o);
      fputs(", \"finalize\": ", o);
      if (r->clocks[1].have) fprintf(o, "%" PRId64, r->clocks[1].off); else fputs("null", o);
      fputs("}, \"thread_level\": ", o);
      if (r->have_info) fprintf(o, "%d", r->info_level); else fputs("null", o);
      fputs(", \"stopped\": ", o);
      if (r->stopped_reason > 0 && r->stopped_reason <= 6)
        json_str(o, stop_reasons[r->stopped_reason]);
      else if (r->stopped_reason)
        fprintf(o, "\"reason %d\"", r->stopped_reason == -1000000 ? 0 : r->stopped_reason);
      else fputs("null", o);
      fprintf(o, ", \"truncated\": %s, \"finalized\": %s, \"policy\": ",
              r->truncated ? "true" : "false", r->clocks[1].have ? "true" : "false");
      if (!r->have_info) fputs("null", o);
      else if (r->info_policy >= 0 && r->info_policy <= 3) json_str(o, policies[r->info_policy]);
      else fprintf(o, "\"%d\"", r->info_policy);
      /* rma bytes by target, sorted */
      fputs(", \"rma_bytes\": {", o);
      {
        int nt = 0;
        int64_t *keys = xmalloc((r->rma_to.n + 1) * sizeof(int64_t));
        for (size_t k = 0; k < r->rma_to.cap; k++)
          if (r->rma_to.key[k] != INT64_MIN) keys[nt++] = r->rma_to.key[k];
        for (int a = 1; a < nt; a++)
          for (int b = a; b > 0 && keys[b - 1] > keys[b]; b--) {
            int64_t x = keys[b];
            keys[b] = keys[b - 1];
            keys[b - 1] = x;
          }
        for (int k = 0; k < nt; k++)
          fprintf(o, "%s\"%lld\": %lld", k ? ", " : "", (long long)keys[k],
                  (long long)*imap_get(&r->rma_to, keys[k]));
        free(keys);
      }
      fputs("}, \"rma_ops\": {", o);
      {
        /* sorted by name */
        static const int by_name[] = {3, 6, 5, 2, 4, 1}; /* accumulate, cas, fetch, get, get_acc, put */
        int c2 = 0;
        for (int k = 0; k < 6; k++)
          if (r->rma_ops[by_name[k]])
            fprintf(o, "%s\"%s\": %" PRIu64, c2++ ? ", " : "", xfer_kinds[by_name[k]],
                    r->rma_ops[by_name[k]]);
        if (r->rma_ops[0]) fprintf(o, "%s\"other\": %" PRIu64, c2++ ? ", " : "", r->rma_ops[0]);
      }
      fprintf(o, "}, \"io_bytes\": {\"read\": %" PRIu64 ", \"write\": %" PRIu64
                 "}, \"io_calls\": {\"read\": %" PRIu64 ", \"write\": %" PRIu64
                 ", \"collective\": %" PRIu64 "}, \"memory\": ",
              r->io_read_bytes, r->io_write_bytes, r->io_reads, r->io_writes, r->io_coll);
      if (r->have_mem)
        fprintf(o, "{\"buffer_resident_bytes\": %" PRIu64 ", \"buffer_reserved_bytes\": %" PRIu64
                   "}", r->mem_resident, r->mem_reserved);
      else fputs("null", o);
      fputs("}", o);
    }
    fputs("], \"buckets\": {", o);
    c = 0;
    for (size_t k = 0; k < names.n; k++) {
      fnstat_t *t = &tot[order[k]];
      if (!t->bucketed) continue;
      fputs(c++ ? ", " : "", o);
      json_str(o, names.s[order[k]]);
      fputs(": {", o);
      int c2 = 0;
      for (int q = 0; q < NBUCKET; q++)
        if (t->buckets[q])
          fprintf(o, "%s\"%s\": %" PRIu64, c2++ ? ", " : "", bucket_labels[q], t->buckets[q]);
      fputs("}", o);
    }
    fputs("}", o);
    /* call sites, with the mapping each address falls in */
    fputs(", \"sites\": [", o);
    c = 0;
    for (int i = 0; i < g_nranks; i++) {
      rank_t *r = &g_ranks[i];
      for (int k = 0; k < r->nsites; k++) {
        site_t *sp = &r->sites[k];
        char tmp[32];
        fprintf(o, "%s{\"rank\": %d, \"function\": ", c++ ? ", " : "", r->rank);
        json_str(o, region_name_of(r, sp->func, tmp, sizeof tmp));
        fprintf(o, ", \"address\": %" PRIu64 ", \"calls\": %" PRIu64 ", \"bytes\": %" PRIu64
                   ", \"time_s\": ", sp->ra, sp->calls, sp->bytes);
        json_num(o, sp->time_s);
        const map_t *m = NULL;
        for (int q = 0; q < r->nmaps; q++)
          if (sp->ra >= r->maps[q].start && sp->ra < r->maps[q].end) {
            m = &r->maps[q];
            break;
          }
        if (m) {
          fputs(", \"object\": ", o);
          json_str(o, m->path);
          /* the object's load bias: its lowest mapping's start less that
           * mapping's file offset */
          uint64_t low = m->start - m->off;
          for (int q = 0; q < r->nmaps; q++)
            if (!strcmp(r->maps[q].path, m->path) && r->maps[q].start - r->maps[q].off < low)
              low = r->maps[q].start - r->maps[q].off;
          fprintf(o, ", \"load_bias\": %" PRIu64 "}", low);
        } else {
          fputs(", \"object\": null, \"load_bias\": 0}", o);
        }
      }
    }
    fputs("]", o);
    free(tot);
    free(order);
    free(sorted);
    strtab_free(&names);
  }
  clock_gettime(CLOCK_MONOTONIC, &t_end);
  {
    uint64_t bytes = 0, nev = 0;
    for (int i = 0; i < g_nranks; i++) {
      bytes += g_ranks[i].data_end;
      nev += g_ranks[i].nevents;
    }
    double secs = (double)(t_end.tv_sec - t_start.tv_sec) +
                  1e-9 * (double)(t_end.tv_nsec - t_start.tv_nsec);
    double scan = (double)(t_scan.tv_sec - t_start.tv_sec) +
                  1e-9 * (double)(t_scan.tv_nsec - t_start.tv_nsec);
    fprintf(o, ", \"post\": {\"tool\": \"tiers-trace-post\", \"jobs\": %d, \"raw_bytes\": %" PRIu64
               ", \"raw_events\": %" PRIu64 ", \"seconds\": ", jobs < g_nranks ? jobs : g_nranks,
            bytes, nev);
    json_num(o, secs);
    fputs(", \"scan_seconds\": ", o);
    json_num(o, scan);
    fprintf(o, ", \"otf2\": %s, \"message_runs\": %zu, \"peak_rss_kib\": %ld}}\n",
            g_write_otf2 ? "true" : "false", g_spill[0].nruns + g_spill[1].nruns, peak_rss_kib());
  }
  fflush(o);
  return ferror(o) ? 1 : 0;
failed:
  if (g_archive) OTF2_Archive_Close(g_archive);
  fprintf(stderr, "tiers-trace-post: error: %s\n", g_error[0] ? g_error : "failed");
  return 1;
}
