/*
 * libtiers-mbc-mpi: an unmodified MPI program's point-to-point traffic
 * carried over libtiers-mbc (memory-based messaging, tiers/mbc.h).
 *
 * Loaded with LD_PRELOAD (`tiers mbc run`) or linked before the MPI
 * library.  It defines MPI_X and PMPI_X for the functions of
 * MBCMPI_FUNCTIONS (mbcmpi.h) and reaches MPI's own with
 * dlsym(RTLD_NEXT, "PMPI_X"), so that it composes with a PMPI tracer
 * loaded before it and covers Fortran (Open MPI's and MPICH's Fortran
 * bindings call the PMPI_ names).
 *
 * - Every intracommunicator (MPI_COMM_WORLD, MPI_COMM_SELF and each one
 *   the program creates with dup, split, create, cart, graph, dist_graph,
 *   intercomm_merge) gets its own tiers_mbc_t, found through an MPI
 *   attribute.  Intercommunicators and communicators created in ways this
 *   library does not see (MPI_Comm_idup) pass through to MPI: the choice
 *   is the same on every process, so matching stays within one layer.
 * - Requests: each of ours is named by a real MPI request (an inactive
 *   persistent send to MPI_PROC_NULL, pooled), so that the Fortran
 *   bindings can convert it and mixed arrays need no guessing; a hash of
 *   the handle tells ours from MPI's.
 * - Datatypes: contiguous layouts travel as bytes from the buffer, others
 *   are packed (PMPI_Pack/PMPI_Unpack) through a temporary.  Statuses get
 *   the byte count with PMPI_Status_set_elements_x, so that the MPI
 *   library's own MPI_Get_count / MPI_Get_elements answer for them.
 * - Collectives (coll.c) are passed to MPI as their non-blocking forms,
 *   waited on while the transport makes progress (a process inside a
 *   collective still drains its FIFOs, so a peer's send cannot stall),
 *   or carried on the transport where the choice table says so.
 * - The other blocking calls that may wait for another process (window
 *   creation, synchronisation and release, MPI-IO's collective calls,
 *   communicator constructors, connect/accept) run while a helper thread
 *   makes transport progress on the node's peers (during.c).
 * - Synchronous mode (MPI_Ssend, MPI_Issend, MPI_Ssend_init) completes
 *   only when the receiver has matched the message: the message carries a
 *   flag and the receiver acknowledges its match (libtiers-mbc's
 *   mbc_issend_internal); standard sends carry no flag and wait for none.
 *
 * Environment: TIERS_MBC_MPI_OFF=1 passes every call through;
 * TIERS_MBC_MPI_VERBOSE=1 prints one line per rank at initialisation;
 * TIERS_MBC_MPI_STATS=PREFIX writes PREFIX.RANK.json at MPI_Finalize.
 * Thread levels: up to MPI_THREAD_SERIALIZED.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mbc_internal.h"
#include "mbcmpi.h"

struct mbcmpi_state mbcmpi = {.last_comm = MPI_COMM_NULL};

#define MBCMPI_REAL_DEF(name) __typeof__(PMPI_##name) *mbcmpi_real_##name;
MBCMPI_FUNCTIONS(MBCMPI_REAL_DEF)
#undef MBCMPI_REAL_DEF

#define MBCMPI_NAME(name) "MPI_" #name,
static const char *const fn_names[F_COUNT] = {MBCMPI_FUNCTIONS(MBCMPI_NAME)};
#undef MBCMPI_NAME

static void resolve_real(void)
{
  static int done;
  if (done)
    return;
  done = 1;
#define MBCMPI_RESOLVE(name) \
  mbcmpi_real_##name = (__typeof__(PMPI_##name) *)dlsym(RTLD_NEXT, "PMPI_" #name);
  MBCMPI_FUNCTIONS(MBCMPI_RESOLVE)
#undef MBCMPI_RESOLVE
  if (!REAL(Init) || !REAL(Send) || !REAL(Finalize)) {
    fprintf(stderr, "tiers mbc: the MPI library's PMPI_ functions were not found: load "
                    "libtiers-mbc-mpi before the MPI library\n");
    abort();
  }
}

__attribute__((constructor)) static void mbcmpi_load(void) { resolve_real(); }

void mbcmpi_unsupported(const char *fn, const char *why)
{
  fprintf(stderr, "tiers mbc: %s: not supported (%s)\n", fn, why);
  fflush(stderr);
  ENTER();
  PMPI_Abort(MPI_COMM_WORLD, 2);
  LEAVE();
}

void mbcmpi_fatal(const char *fn, const char *what)
{
  fprintf(stderr, "tiers mbc: %s: %s: %s\n", fn, what, tiers_last_error());
  fflush(stderr);
  ENTER();
  PMPI_Abort(MPI_COMM_WORLD, 2);
  LEAVE();
}

#define PASS(name) (mbcmpi.active ? (void)mbcmpi.passed[F_##name]++ : (void)0)

/* ------------------------------------------------------------------ */
/* Statistics: the MPI/MBCF paper's Table 3 per rank */

#define NBUCKETS 7
static const uint64_t bucket_max[NBUCKETS - 1] = {0, 64, 1024, 16384, 262144, 4194304};
static struct {
  uint64_t msgs[NBUCKETS], bytes[NBUCKETS], direct[NBUCKETS], fifo[NBUCKETS];
  uint64_t wildcard, unexpected_done;
} st;

static int bucket_of(size_t bytes)
{
  for (int b = 0; b < NBUCKETS - 1; b++)
    if (bytes <= bucket_max[b])
      return b;
  return NBUCKETS - 1;
}

static void count_sent(size_t bytes)
{
  int b = bucket_of(bytes);
  st.msgs[b]++;
  st.bytes[b] += bytes;
}

/* A message the fast send wrote into the FIFO (no hook is called there). */
static void count_sent_fifo(size_t bytes)
{
  int b = bytes == 0 ? 0 : bytes <= 64 ? 1 : bucket_of(bytes);
  st.msgs[b]++;
  st.bytes[b] += bytes;
  st.fifo[b]++;
}

static void path_hook(size_t bytes, int tag, int direct)
{
  if (tag < 0)
    return; /* a message of a carried collective (internal tags are negative);
               user messages that leave during one are counted */
  int b = bucket_of(bytes);
  if (direct)
    st.direct[b]++;
  else
    st.fifo[b]++;
}

static uint64_t unexpected_of(struct mbcmpi_ctx *c)
{
  tiers_mbc_stats_t s;
  mbc_local_stats(c->mbc, &s);
  return s.msgs_unexpected;
}

static void json_counts(FILE *f, const char *key, const uint64_t *v)
{
  fprintf(f, ",\"%s\":{", key);
  int first = 1;
  for (int i = 0; i < F_COUNT; i++)
    if (v[i]) {
      fprintf(f, "%s\"%s\":%llu", first ? "" : ",", fn_names[i], (unsigned long long)v[i]);
      first = 0;
    }
  fputc('}', f);
}

static void write_stats(const char *prefix)
{
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  uint64_t unexpected = st.unexpected_done;
  for (struct mbcmpi_ctx *c = mbcmpi.ctxs; c; c = c->next)
    unexpected += unexpected_of(c);
  size_t n = strlen(prefix) + 64;
  char *path = malloc(n), *tmp = malloc(n + 32);
  if (!path || !tmp) {
    free(path);
    free(tmp);
    fprintf(stderr, "tiers mbc: rank %d: out of memory writing the statistics\n", rank);
    return;
  }
  snprintf(path, n, "%s.%d.json", prefix, rank);
  snprintf(tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "tiers mbc: rank %d: cannot write %s: %s\n", rank, tmp, strerror(errno));
    free(path);
    free(tmp);
    return;
  }
  fprintf(f, "{\"rank\":%d,\"size\":%d,\"buckets\":[", rank, size);
  for (int b = 0; b < NBUCKETS; b++) {
    if (b < NBUCKETS - 1)
      fprintf(f, "%s{\"max_bytes\":%llu", b ? "," : "", (unsigned long long)bucket_max[b]);
    else
      fprintf(f, ",{\"max_bytes\":null");
    fprintf(f, ",\"messages\":%llu,\"bytes\":%llu,\"remote_write\":%llu,\"fifo\":%llu}",
            (unsigned long long)st.msgs[b], (unsigned long long)st.bytes[b],
            (unsigned long long)st.direct[b], (unsigned long long)st.fifo[b]);
  }
  fprintf(f, "],\"unexpected\":%llu,\"wildcard_receives\":%llu", (unsigned long long)unexpected,
          (unsigned long long)st.wildcard);
  json_counts(f, "passed_to_mpi", mbcmpi.passed);
  json_counts(f, "carried", mbcmpi.carried);
  fputs("}\n", f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    fprintf(stderr, "tiers mbc: rank %d: cannot write %s: %s\n", rank, path, strerror(errno));
    unlink(tmp);
  }
  free(path);
  free(tmp);
}

/* ------------------------------------------------------------------ */
/* Communicators */

struct mbcmpi_ctx *mbcmpi_ctx_slow(MPI_Comm comm)
{
  if (comm == MPI_COMM_NULL)
    return NULL;
  void *v = NULL;
  int flag = 0;
  ENTER();
  int rc = PMPI_Comm_get_attr(comm, mbcmpi.keyval, &v, &flag);
  LEAVE();
  struct mbcmpi_ctx *c = rc == MPI_SUCCESS && flag ? v : NULL;
  mbcmpi.last_comm = comm;
  mbcmpi.last_ctx = c;
  return c;
}

/* Gives the new communicator its own memory-based context (collective
 * over newcomm, as the call that created it). */
static void attach(MPI_Comm newcomm, const char *fn)
{
  if (!mbcmpi.active || mbcmpi.inside || newcomm == MPI_COMM_NULL)
    return;
  int inter = 0;
  ENTER();
  PMPI_Comm_test_inter(newcomm, &inter);
  LEAVE();
  if (inter)
    return;
  struct mbcmpi_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
    mbcmpi_fatal(fn, "cannot set up memory-based messaging");
    return;
  }
  ENTER();
  int rc = tiers_mbc_create(newcomm, NULL, &c->mbc);
  LEAVE();
  if (rc != TIERS_OK) {
    free(c);
    mbcmpi_fatal(fn, "cannot set up memory-based messaging");
    return;
  }
  tiers_mbc_rank(c->mbc, &c->rank, &c->size);
  c->comm = newcomm;
  c->next = mbcmpi.ctxs;
  mbcmpi.ctxs = c;
  ENTER();
  PMPI_Comm_set_attr(newcomm, mbcmpi.keyval, c);
  LEAVE();
  mbcmpi.last_comm = MPI_COMM_NULL;
}

static void ctx_destroy(struct mbcmpi_ctx *c)
{
  for (struct mbcmpi_ctx **pp = &mbcmpi.ctxs; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  st.unexpected_done += unexpected_of(c);
  ENTER();
  tiers_mbc_destroy(&c->mbc);
  LEAVE();
  if (mbcmpi.last_ctx == c || mbcmpi.last_comm == c->comm) {
    mbcmpi.last_comm = MPI_COMM_NULL;
    mbcmpi.last_ctx = NULL;
  }
  free(c);
}

/* Before a communicator goes away: its context first (collective). */
static void detach(MPI_Comm *comm)
{
  if (!mbcmpi.active || mbcmpi.inside || !comm || *comm == MPI_COMM_WORLD ||
      *comm == MPI_COMM_SELF)
    return;
  struct mbcmpi_ctx *c = mbcmpi_ctx_slow(*comm);
  if (!c)
    return;
  ENTER();
  PMPI_Comm_delete_attr(*comm, mbcmpi.keyval);
  LEAVE();
  mbcmpi_progress_all();
  ctx_destroy(c);
}

/* ------------------------------------------------------------------ */
/* Requests: ours are named by pooled real MPI requests */

enum { K_SEND = 1, K_RECV = 2 };

struct mreq {
  MPI_Request token;
  struct mreq *free_next, *det_next;
  int kind, persistent, active, detached, bsend, sync;
  struct mbcmpi_ctx *ctx;
  tiers_mbc_request_t r; /* in flight */
  int stashed;           /* finished: ms and mrc hold the result */
  int mrc, cancelled, procnull;
  int cancel_asked;      /* MPI_Cancel asked the sender to forget its send request */
  int mprobed;           /* MPI_Imrecv/MPI_Mrecv: tmp holds the whole matched message */
  size_t mcap;           /* mprobed: bytes the program's buffer holds */
  tiers_mbc_status_t ms;
  /* the arguments (persistent requests start from them; receives unpack) */
  const void *buf;
  int count;
  MPI_Datatype type;
  int peer, tag;
  MPI_Comm comm;
  void *tmp;       /* packed data (send) or packed receive buffer */
  size_t tmp_size;
};

static struct {
  struct mreq **slot; /* open addressing over the token handle */
  size_t cap, used;
  struct mreq *free;
  struct mreq *all;   /* every object made (free_next is reused: see all_next) */
  struct mreq *detached;
} rq;

static size_t handle_hash(MPI_Request h)
{
  uint64_t v = 0;
  memcpy(&v, &h, sizeof h < sizeof v ? sizeof h : sizeof v);
  v ^= v >> 29;
  v *= 0x9e3779b97f4a7c15ull;
  return (size_t)(v >> 17);
}

static struct mreq *lookup(MPI_Request h)
{
  if (!rq.cap || h == MPI_REQUEST_NULL)
    return NULL;
  for (size_t i = handle_hash(h) & (rq.cap - 1);; i = (i + 1) & (rq.cap - 1)) {
    struct mreq *q = rq.slot[i];
    if (!q)
      return NULL;
    if (q->token == h)
      return q;
  }
}

static int hash_insert(struct mreq *q)
{
  if ((rq.used + 1) * 2 > rq.cap) {
    size_t ncap = rq.cap ? rq.cap * 2 : 256;
    struct mreq **ns = calloc(ncap, sizeof *ns);
    if (!ns)
      return 0;
    for (size_t i = 0; i < rq.cap; i++)
      if (rq.slot[i]) {
        size_t j = handle_hash(rq.slot[i]->token) & (ncap - 1);
        while (ns[j])
          j = (j + 1) & (ncap - 1);
        ns[j] = rq.slot[i];
      }
    free(rq.slot);
    rq.slot = ns;
    rq.cap = ncap;
  }
  size_t j = handle_hash(q->token) & (rq.cap - 1);
  while (rq.slot[j])
    j = (j + 1) & (rq.cap - 1);
  rq.slot[j] = q;
  rq.used++;
  return 1;
}

static struct mreq *mreq_new(const char *fn)
{
  struct mreq *q = rq.free;
  if (q) {
    rq.free = q->free_next;
  } else {
    q = calloc(1, sizeof *q);
    MPI_Request tok = MPI_REQUEST_NULL;
    ENTER();
    int rc = q ? REAL(Send_init)(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &tok)
               : MPI_ERR_NO_MEM;
    LEAVE();
    if (rc != MPI_SUCCESS || !hash_insert((q->token = tok, q))) {
      tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory for a request");
      mbcmpi_fatal(fn, "cannot make a request");
      return NULL;
    }
  }
  /* every field but the token and the status (written when it completes),
   * one by one: a memset of the whole object costs a string store */
  q->free_next = q->det_next = NULL;
  q->kind = q->persistent = q->active = q->detached = q->bsend = q->sync = 0;
  q->ctx = NULL;
  q->r = NULL;
  q->stashed = q->mrc = q->cancelled = q->procnull = q->cancel_asked = q->mprobed = 0;
  q->mcap = 0;
  q->buf = NULL;
  q->count = q->peer = q->tag = 0;
  q->type = MPI_DATATYPE_NULL;
  q->comm = MPI_COMM_NULL;
  q->tmp = NULL;
  q->tmp_size = 0;
  return q;
}

static void mreq_release(struct mreq *q)
{
  if (q->tmp)
    free(q->tmp);
  q->tmp = NULL;
  q->kind = 0;
  q->free_next = rq.free;
  rq.free = q;
}

/* ------------------------------------------------------------------ */
/* Datatypes */

/* 1 when the type's typemap is in memory order with no holes (a named
 * type or a contiguous/dup of one): then size == true extent means bytes. */
static int type_plain(MPI_Datatype t, int depth)
{
  int ni, na, nd, comb;
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS)
    return 0;
  if (comb == MPI_COMBINER_NAMED)
    return 1;
  if ((comb != MPI_COMBINER_DUP && comb != MPI_COMBINER_CONTIGUOUS) || depth > 8 || ni > 1 ||
      na > 0 || nd != 1)
    return 0;
  int ints[1];
  MPI_Aint addrs[1];
  MPI_Datatype inner;
  if (PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, &inner) != MPI_SUCCESS)
    return 0;
  int plain = type_plain(inner, depth + 1);
  int ini, ina, ind, icomb;
  PMPI_Type_get_envelope(inner, &ini, &ina, &ind, &icomb);
  if (icomb != MPI_COMBINER_NAMED)
    PMPI_Type_free(&inner);
  return plain;
}

struct tinfo {
  size_t size;      /* bytes of one element's data */
  MPI_Aint lb;      /* true lower bound */
  int contig;       /* count elements are `size*count` bytes at buf + lb */
};

#define TCACHE 16
static struct {
  MPI_Datatype t;
  size_t size;
  MPI_Aint lb, extent, true_extent;
  int valid;
} tcache[TCACHE];

/* The last named type seen whose elements lie back to back from offset 0
 * (MPI_BYTE, MPI_INT, MPI_DOUBLE, ...): the fast paths get a message's
 * bytes from it with one comparison. */
static MPI_Datatype fast_type = MPI_DATATYPE_NULL;
static size_t fast_type_size;

/* 0 on success; otherwise the call must go to MPI (which reports the bad
 * datatype or count). */
static int type_info(MPI_Datatype t, int count, struct tinfo *ti)
{
  if (t == fast_type && count >= 0) {
    ti->size = fast_type_size;
    ti->lb = 0;
    ti->contig = 1;
    return 0;
  }
  if (count < 0 || t == MPI_DATATYPE_NULL)
    return -1;
  uint64_t hv = 0;
  memcpy(&hv, &t, sizeof t < sizeof hv ? sizeof t : sizeof hv);
  size_t k = (size_t)((hv ^ (hv >> 7)) % TCACHE);
  if (tcache[k].valid && tcache[k].t == t) {
    ti->size = tcache[k].size;
    ti->lb = tcache[k].lb;
    ti->contig = count <= 1 || tcache[k].extent == (MPI_Aint)tcache[k].size;
    return 0;
  }
  int size;
  MPI_Aint lb, extent, tlb, textent;
  if (PMPI_Type_size(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent(t, &lb, &extent) ||
      PMPI_Type_get_true_extent(t, &tlb, &textent))
    return -1;
  int ni, na, nd, comb;
  PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
  int plain = size == 0 || (textent == size && type_plain(t, 0));
  ti->size = (size_t)size;
  ti->lb = tlb;
  ti->contig = plain && (count <= 1 || extent == size);
  if (comb == MPI_COMBINER_NAMED && plain) { /* named types never change */
    tcache[k].t = t;
    tcache[k].size = (size_t)size;
    tcache[k].lb = tlb;
    tcache[k].extent = extent;
    tcache[k].true_extent = textent;
    tcache[k].valid = 1;
    if (extent == (MPI_Aint)size && tlb == 0 && lb == 0) {
      fast_type = t;
      fast_type_size = (size_t)size;
    }
  }
  return 0;
}

static const void *at(const void *buf, MPI_Aint off)
{
  return (const void *)((uintptr_t)buf + (uintptr_t)off);
}

/* 1 when count elements of t lie back to back, *bytes of them from buf +
 * *lb (the fast paths' datatype check; a named type seen before costs one
 * comparison). */
static inline int contig_bytes(MPI_Datatype t, int count, size_t *bytes, MPI_Aint *lb)
{
  if (t == fast_type && count >= 0) {
    *bytes = fast_type_size * (size_t)count;
    *lb = 0;
    return 1;
  }
  struct tinfo ti;
  if (type_info(t, count, &ti) || !ti.contig)
    return 0;
  *bytes = ti.size * (size_t)count;
  *lb = ti.lb;
  return 1;
}

/* ------------------------------------------------------------------ */
/* Argument mapping */

static int map_source(struct mbcmpi_ctx *c, int src, int *out)
{
  if (src == MPI_ANY_SOURCE) {
    *out = TIERS_MBC_ANY_SOURCE;
    return 0;
  }
  if (src < 0 || src >= c->size)
    return -1;
  *out = src;
  return 0;
}

static int tag_ok(int tag, int wildcard_ok)
{
  return tag >= 0 || (wildcard_ok && tag == MPI_ANY_TAG);
}

static int map_tag(int tag) { return tag == MPI_ANY_TAG ? TIERS_MBC_ANY_TAG : tag; }

/* ------------------------------------------------------------------ */
/* Starting sends and receives */

/* Starts a send of q's arguments (q->ctx, buf, count, type, peer, tag).
 * 0: started; -1: bad arguments (the caller passes the call to MPI). */
static int start_send(struct mreq *q, const char *fn)
{
  q->stashed = 0;
  q->cancelled = 0;
  q->cancel_asked = 0;
  q->procnull = 0;
  q->active = 1;
  if (q->peer == MPI_PROC_NULL) {
    q->procnull = 1;
    q->stashed = 1;
    q->mrc = TIERS_OK;
    memset(&q->ms, 0, sizeof q->ms);
    return 0;
  }
  struct tinfo ti;
  if (type_info(q->type, q->count, &ti) || q->peer < 0 || q->peer >= q->ctx->size ||
      !tag_ok(q->tag, 0))
    return -1;
  const void *data;
  size_t bytes = ti.size * (size_t)q->count;
  if (q->tmp)
    free(q->tmp);
  q->tmp = NULL;
  if (ti.contig && !q->bsend) {
    data = at(q->buf, ti.lb);
  } else if (ti.contig) {
    q->tmp = malloc(bytes ? bytes : 1);
    if (!q->tmp)
      goto nomem;
    memcpy(q->tmp, at(q->buf, ti.lb), bytes);
    data = q->tmp;
  } else {
    int psize = 0, pos = 0;
    PMPI_Pack_size(q->count, q->type, q->comm, &psize);
    q->tmp = malloc(psize > 0 ? (size_t)psize : 1);
    if (!q->tmp)
      goto nomem;
    ENTER();
    int rc = PMPI_Pack(q->buf, q->count, q->type, q->tmp, psize, &pos, q->comm);
    LEAVE();
    if (rc != MPI_SUCCESS)
      return -1;
    data = q->tmp;
    bytes = (size_t)pos;
  }
  count_sent(bytes);
  ENTER();
  int rc = q->sync ? mbc_issend_internal(q->ctx->mbc, data, bytes, q->peer, q->tag, &q->r)
                   : tiers_mbc_isend(q->ctx->mbc, data, bytes, q->peer, q->tag, &q->r);
  LEAVE();
  if (rc != TIERS_OK)
    mbcmpi_fatal(fn, "send failed");
  return 0;
nomem:
  tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
  mbcmpi_fatal(fn, "cannot buffer a message");
  return -1;
}

static int start_recv(struct mreq *q, const char *fn)
{
  q->stashed = 0;
  q->cancelled = 0;
  q->cancel_asked = 0;
  q->procnull = 0;
  q->active = 1;
  if (q->peer == MPI_PROC_NULL) {
    q->procnull = 1;
    q->stashed = 1;
    q->mrc = TIERS_OK;
    memset(&q->ms, 0, sizeof q->ms);
    return 0;
  }
  struct tinfo ti;
  int src;
  if (type_info(q->type, q->count, &ti) || map_source(q->ctx, q->peer, &src) ||
      !tag_ok(q->tag, 1))
    return -1;
  void *dst;
  size_t cap = ti.size * (size_t)q->count;
  if (q->tmp)
    free(q->tmp);
  q->tmp = NULL;
  if (ti.contig) {
    dst = (void *)at(q->buf, ti.lb);
  } else {
    int psize = 0;
    PMPI_Pack_size(q->count, q->type, q->comm, &psize);
    q->tmp = malloc(psize > 0 ? (size_t)psize : 1);
    if (!q->tmp) {
      tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
      mbcmpi_fatal(fn, "cannot make a receive buffer");
      return -1;
    }
    q->tmp_size = (size_t)psize;
    dst = q->tmp;
    cap = (size_t)psize;
  }
  if (q->peer == MPI_ANY_SOURCE || q->tag == MPI_ANY_TAG)
    st.wildcard++;
  ENTER();
  int rc = src != TIERS_MBC_ANY_SOURCE && (dst || !cap) &&
                   mbcmpi_fast_post(q->ctx->mbc, dst, cap, src, map_tag(q->tag), &q->r)
               ? TIERS_OK
               : tiers_mbc_irecv(q->ctx->mbc, dst, cap, src, map_tag(q->tag), &q->r);
  LEAVE();
  if (rc != TIERS_OK)
    mbcmpi_fatal(fn, "receive failed");
  return 0;
}

/* ------------------------------------------------------------------ */
/* Completing */

static void set_status(MPI_Status *s, int source, int tag, size_t bytes, int cancelled)
{
  if (s == MPI_STATUS_IGNORE)
    return;
  s->MPI_SOURCE = source;
  s->MPI_TAG = tag;
#if defined(OPEN_MPI) && OPEN_MPI
  /* what PMPI_Status_set_elements_x(s, MPI_BYTE, n) and
   * PMPI_Status_set_cancelled store in Open MPI's status */
  s->_ucount = bytes;
  s->_cancelled = cancelled;
#else
  PMPI_Status_set_elements_x(s, MPI_BYTE, (MPI_Count)bytes);
  PMPI_Status_set_cancelled(s, cancelled);
#endif
}

/* 1 when the receive q finished cancelled (at MPI_Cancel, or later when
 * the sender confirmed: libtiers-mbc then reports source ANY_SOURCE). */
static int was_cancelled(const struct mreq *q)
{
  return q->cancelled || (q->cancel_asked && q->mrc == TIERS_OK &&
                          q->ms.source == TIERS_MBC_ANY_SOURCE);
}

static void empty_status(MPI_Status *s)
{
  set_status(s, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 0);
  if (s != MPI_STATUS_IGNORE)
    s->MPI_ERROR = MPI_SUCCESS;
}

/* q has finished (stashed): status, unpacking, release or deactivate.
 * Returns the MPI error code of the request. */
static int finish(struct mreq *q, MPI_Request *req, MPI_Status *s, const char *fn)
{
  int err = MPI_SUCCESS;
  if (q->mrc != TIERS_OK && !(q->mrc == TIERS_ERR_ARG && q->ms.truncated))
    mbcmpi_fatal(fn, q->kind == K_RECV ? "receive failed" : "send failed");
  if (q->kind == K_RECV) {
    if (q->procnull) {
      set_status(s, MPI_PROC_NULL, MPI_ANY_TAG, 0, 0);
    } else if (was_cancelled(q)) {
      set_status(s, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 1);
    } else {
      if (q->mprobed && q->ms.bytes > q->mcap) { /* the matched message is longer */
        q->ms.truncated = 1;
        q->ms.bytes = q->mcap;
      }
      if (q->ms.truncated)
        err = MPI_ERR_TRUNCATE;
      if (q->tmp) {
        struct tinfo ti;
        int pos = 0, n = 0;
        if (!type_info(q->type, q->count, &ti) && ti.size)
          n = (int)(q->ms.bytes / ti.size);
        if (n > q->count)
          n = q->count;
        ENTER();
        PMPI_Unpack(q->tmp, (int)q->ms.bytes, &pos, (void *)q->buf, n, q->type, q->comm);
        LEAVE();
      }
      set_status(s, q->ms.source, q->ms.tag, q->ms.bytes, 0);
    }
  } else {
    set_status(s, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 0);
  }
  if (s != MPI_STATUS_IGNORE)
    s->MPI_ERROR = err;
  MPI_Comm comm = q->comm;
  if (q->tmp)
    free(q->tmp);
  q->tmp = NULL;
  q->stashed = 0;
  q->active = 0;
  if (!q->persistent) {
    mreq_release(q);
    if (req)
      *req = MPI_REQUEST_NULL;
  }
  if (err != MPI_SUCCESS) {
    ENTER();
    PMPI_Comm_call_errhandler(comm, err);
    LEAVE();
  }
  return err;
}

/* finish() for a request that finished plainly (not persistent, nothing
 * packed, cancelled, matched by a probe or truncated, not MPI_PROC_NULL),
 * the common case of a window of small messages; others go to finish(). */
static inline int finish_plain(struct mreq *q, MPI_Request *req, MPI_Status *s, const char *fn)
{
  if (q->mrc != TIERS_OK || q->persistent || q->tmp || q->procnull || q->cancelled ||
      q->cancel_asked || q->mprobed)
    return finish(q, req, s, fn);
  if (s != MPI_STATUS_IGNORE) {
    if (q->kind == K_RECV)
      set_status(s, q->ms.source, q->ms.tag, q->ms.bytes, 0);
    else
      set_status(s, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 0);
    s->MPI_ERROR = MPI_SUCCESS;
  }
  q->stashed = 0;
  q->active = 0;
  q->kind = 0;
  q->free_next = rq.free;
  rq.free = q;
  *req = MPI_REQUEST_NULL;
  return MPI_SUCCESS;
}

/* One poll of q (progress once); 1 when it has finished (stashed). */
static int poll(struct mreq *q)
{
  if (q->stashed)
    return 1;
  if (!q->active)
    return 0;
  int flag = 0;
  ENTER();
  int rc = tiers_mbc_test(q->ctx->mbc, &q->r, &flag, &q->ms);
  LEAVE();
  if (!flag && rc == TIERS_OK)
    return 0;
  q->mrc = rc;
  q->stashed = 1;
  q->r = NULL;
  return 1;
}

/* Blocks until q has finished. */
static void block_on(struct mreq *q)
{
  if (q->stashed || !q->active)
    return;
  ENTER();
  int rc = tiers_mbc_wait(q->ctx->mbc, &q->r, &q->ms);
  LEAVE();
  q->mrc = rc;
  q->stashed = 1;
  q->r = NULL;
}

static void poll_detached(void)
{
  for (struct mreq **pp = &rq.detached; *pp;) {
    struct mreq *q = *pp;
    if (poll(q)) {
      *pp = q->det_next;
      q->persistent = 0;
      finish(q, NULL, MPI_STATUS_IGNORE, "MPI_Request_free");
    } else {
      pp = &q->det_next;
    }
  }
}

void mbcmpi_progress_all(void)
{
  for (struct mbcmpi_ctx *c = mbcmpi.ctxs; c; c = c->next) {
    int events = 0;
    ENTER();
    int rc = mbc_progress_once(c->mbc, &events);
    LEAVE();
    if (rc != TIERS_OK)
      mbcmpi_fatal("MPI", "memory-based messaging failed");
  }
  if (rq.detached)
    poll_detached();
}

/* Called by libtiers-mbc while a wait on `waiting` idles: progress on the
 * other communicators (a peer's send there may need this process to drain
 * its FIFO before the peer can send what the wait waits for), on the
 * detached sends of other communicators, and on MPI's own requests (the
 * program's non-blocking collectives). */
static void idle_hook(tiers_mbc_t waiting)
{
  for (struct mbcmpi_ctx *c = mbcmpi.ctxs; c; c = c->next)
    if (c->mbc != waiting) {
      int events = 0;
      mbc_progress_once(c->mbc, &events);
    }
  for (struct mreq **pp = &rq.detached; *pp;) {
    struct mreq *q = *pp;
    if (q->ctx->mbc != waiting && poll(q)) {
      *pp = q->det_next;
      finish(q, NULL, MPI_STATUS_IGNORE, "MPI_Request_free");
    } else {
      pp = &q->det_next;
    }
  }
  int flag = 0;
  REAL(Iprobe)(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

/* 1 when this node runs more of the job's processes than the CPUs the
 * job may use (the union of its processes' affinity masks there): then a
 * process that polls without finding anything holds a CPU a peer needs
 * (the sender it waits for, say), and gives it up at once, as Open MPI
 * does when it runs oversubscribed (mpi_yield_when_idle).
 * TIERS_MBC_MPI_YIELD=1 or 0 forces it on or off. */
static int oversubscribed;

static void detect_oversubscribed(void)
{
  const char *force = getenv("TIERS_MBC_MPI_YIELD");
  if (force && (!strcmp(force, "0") || !strcmp(force, "1"))) {
    oversubscribed = force[0] == '1';
    return;
  }
  cpu_set_t mine, all;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    CPU_ZERO(&mine);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++)
      CPU_SET((int)i, &mine);
  }
  MPI_Comm node = MPI_COMM_NULL;
  int on_node = 1;
  ENTER();
  if (REAL(Comm_split_type)(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
          MPI_SUCCESS &&
      node != MPI_COMM_NULL) {
    PMPI_Comm_size(node, &on_node);
    if (REAL(Allreduce)(&mine, &all, (int)sizeof mine, MPI_BYTE, MPI_BOR, node) != MPI_SUCCESS)
      all = mine;
    REAL(Comm_free)(&node);
  } else {
    all = mine;
  }
  LEAVE();
  int cpus = CPU_COUNT(&all);
  oversubscribed = cpus > 0 && on_node > cpus;
}

/* A poll the program makes (MPI_Iprobe, MPI_Test, ...) found nothing.
 * Once the program has polled in vain for POLL_SPIN_NS with no gap of
 * POLL_GAP_NS between two polls (it is spinning on MPI, as HPL's panel
 * broadcast does on MPI_Iprobe), each further empty poll yields the CPU;
 * a program that works for a while between two polls keeps its CPU.
 * (hpcc at 4 ranks on 2 CPUs, bench/mbc_programs --quick: HPL 40x slower
 * than plain Open MPI without these yields, on par with them.) */
#define POLL_SPIN_NS 20000
#define POLL_GAP_NS 50000
static void poll_missed(void)
{
  static int64_t streak_start, last_miss;
  if (!oversubscribed)
    return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  if (t - last_miss > POLL_GAP_NS)
    streak_start = t;
  last_miss = t;
  if (t - streak_start > POLL_SPIN_NS)
    sched_yield();
}

/* Backoff of the polling loops: spin, then yield the CPU (at once when
 * the node is oversubscribed). */
static void idle(unsigned *rounds)
{
  if (++*rounds > 64 || oversubscribed)
    sched_yield();
}

int mbcmpi_wait_real(MPI_Request *req, MPI_Status *status)
{
  unsigned rounds = 0;
  for (;;) {
    int flag = 0;
    int rc = REAL(Test)(req, &flag, status);
    if (rc != MPI_SUCCESS || flag)
      return rc;
    mbcmpi_progress_all();
    idle(&rounds);
  }
}

/* ------------------------------------------------------------------ */
/* Init and finalize */

static void setup(void)
{
  const char *off = getenv("TIERS_MBC_MPI_OFF");
  mbcmpi.off = off && *off && strcmp(off, "0") != 0;
  if (mbcmpi.off)
    return;
  ENTER();
  int rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &mbcmpi.keyval,
                                   NULL);
  LEAVE();
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "tiers mbc: MPI_Init: cannot create an attribute key\n");
    return;
  }
  mbcmpi.active = 1;
  mbc_sent_hook = path_hook;
  mbc_idle_hook = idle_hook;
  attach(MPI_COMM_SELF, "MPI_Init");
  attach(MPI_COMM_WORLD, "MPI_Init");
  mbcmpi.world = mbcmpi.ctxs;
  detect_oversubscribed();
  const char *verbose = getenv("TIERS_MBC_MPI_VERBOSE");
  if (verbose && *verbose && strcmp(verbose, "0") != 0) {
    const char *tr = "?";
    tiers_mbc_transport_name(mbcmpi.world->mbc, &tr);
    fprintf(stderr,
            "tiers mbc: rank %d of %d: point-to-point messages carried by memory-based "
            "messaging (%s)\n",
            mbcmpi.world->rank, mbcmpi.world->size, tr);
  }
}

static int w_Init(int *argc, char ***argv)
{
  resolve_real();
  int rc = REAL(Init)(argc, argv);
  if (rc == MPI_SUCCESS && !mbcmpi.inside)
    setup();
  return rc;
}
EXPORT(Init)

static int w_Init_thread(int *argc, char ***argv, int required, int *provided)
{
  resolve_real();
  int rc = REAL(Init_thread)(argc, argv, required, provided);
  if (rc != MPI_SUCCESS || mbcmpi.inside)
    return rc;
  const char *off = getenv("TIERS_MBC_MPI_OFF");
  if (required == MPI_THREAD_MULTIPLE && !(off && *off && strcmp(off, "0") != 0))
    mbcmpi_unsupported("MPI_Init_thread",
                       "MPI_THREAD_MULTIPLE: memory-based messaging supports up to "
                       "MPI_THREAD_SERIALIZED");
  setup();
  if (mbcmpi.active && provided && *provided > MPI_THREAD_SERIALIZED)
    *provided = MPI_THREAD_SERIALIZED;
  return rc;
}
EXPORT(Init_thread)

static int w_Finalize(void)
{
  if (mbcmpi.active && !mbcmpi.inside) {
    mbcmpi_during_stop();
    unsigned rounds = 0;
    while (rq.detached) {
      mbcmpi_progress_all();
      idle(&rounds);
    }
    const char *prefix = getenv("TIERS_MBC_MPI_STATS");
    if (prefix && *prefix)
      write_stats(prefix);
    mbc_sent_hook = NULL;
    mbc_idle_hook = NULL;
    while (mbcmpi.ctxs) {
      struct mbcmpi_ctx *c = mbcmpi.ctxs;
      if (c->comm != MPI_COMM_WORLD && c->comm != MPI_COMM_SELF) {
        ENTER();
        PMPI_Comm_delete_attr(c->comm, mbcmpi.keyval);
        LEAVE();
      }
      ctx_destroy(c);
    }
    mbcmpi.world = NULL;
    mbcmpi.active = 0;
    ENTER();
    for (size_t i = 0; i < rq.cap; i++)
      if (rq.slot[i]) {
        REAL(Request_free)(&rq.slot[i]->token);
        free(rq.slot[i]->tmp);
        free(rq.slot[i]);
      }
    PMPI_Comm_free_keyval(&mbcmpi.keyval);
    LEAVE();
    free(rq.slot);
    memset(&rq, 0, sizeof rq);
  }
  return REAL(Finalize)();
}
EXPORT(Finalize)

/* ------------------------------------------------------------------ */
/* Point-to-point */

/* The fast send (mbc_fast.c) of a standard or ready send; 1: sent and
 * complete. */
static inline int send_fast(struct mbcmpi_ctx *c, const void *buf, int count, MPI_Datatype type,
                            int dest, int tag)
{
  size_t bytes;
  MPI_Aint lb;
  if ((unsigned)dest >= (unsigned)c->size || tag < 0 || !contig_bytes(type, count, &bytes, &lb) ||
      (!buf && bytes) || !mbcmpi_fast_send(c->mbc, at(buf, lb), bytes, dest, tag))
    return 0;
  count_sent_fifo(bytes);
  return 1;
}

static int send_blocking(struct mbcmpi_ctx *c, const void *buf, int count, MPI_Datatype type,
                         int dest, int tag, MPI_Comm comm, int fn)
{
  if (dest == MPI_PROC_NULL)
    return MPI_SUCCESS;
  struct tinfo ti;
  if (!type_info(type, count, &ti) && ti.contig && dest >= 0 && dest < c->size && tag >= 0) {
    size_t bytes = ti.size * (size_t)count;
    count_sent(bytes);
    ENTER();
    int rc;
    if (fn == F_Ssend) {
      tiers_mbc_request_t r;
      rc = mbc_issend_internal(c->mbc, at(buf, ti.lb), bytes, dest, tag, &r);
      if (rc == TIERS_OK)
        rc = tiers_mbc_wait(c->mbc, &r, NULL);
    } else {
      rc = tiers_mbc_send(c->mbc, at(buf, ti.lb), bytes, dest, tag);
    }
    LEAVE();
    if (rc != TIERS_OK)
      mbcmpi_fatal(fn_names[fn], "send failed");
    return MPI_SUCCESS;
  }
  struct mreq *q = mreq_new(fn_names[fn]);
  q->kind = K_SEND;
  q->ctx = c;
  q->buf = buf;
  q->count = count;
  q->type = type;
  q->peer = dest;
  q->tag = tag;
  q->comm = comm;
  q->sync = fn == F_Ssend;
  if (start_send(q, fn_names[fn])) {
    mreq_release(q);
    return -1;
  }
  block_on(q);
  MPI_Request h = q->token;
  return finish(q, &h, MPI_STATUS_IGNORE, fn_names[fn]);
}

#define SEND_BLOCKING(name)                                                                \
  static int w_##name(const void *buf, int count, MPI_Datatype type, int dest, int tag,   \
                      MPI_Comm comm)                                                       \
  {                                                                                        \
    struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);                                            \
    if (c && F_##name != F_Ssend && send_fast(c, buf, count, type, dest, tag)) {           \
      CARRY(name);                                                                         \
      return MPI_SUCCESS;                                                                  \
    }                                                                                      \
    if (c) {                                                                               \
      int rc = send_blocking(c, buf, count, type, dest, tag, comm, F_##name);              \
      if (rc != -1) {                                                                      \
        CARRY(name);                                                                       \
        return rc;                                                                         \
      }                                                                                    \
    }                                                                                      \
    PASS(name);                                                                            \
    return REAL(name)(buf, count, type, dest, tag, comm);                                  \
  }                                                                                        \
  EXPORT(name)

SEND_BLOCKING(Send)
SEND_BLOCKING(Ssend)
SEND_BLOCKING(Rsend)

static int w_Bsend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (c) {
    if (dest == MPI_PROC_NULL) {
      CARRY(Bsend);
      return MPI_SUCCESS;
    }
    /* buffered: the data is copied, the send completes in the background */
    struct mreq *q = mreq_new("MPI_Bsend");
    q->kind = K_SEND;
    q->bsend = 1;
    q->ctx = c;
    q->buf = buf;
    q->count = count;
    q->type = type;
    q->peer = dest;
    q->tag = tag;
    q->comm = comm;
    if (!start_send(q, "MPI_Bsend")) {
      CARRY(Bsend);
      if (!poll(q)) {
        q->detached = 1;
        q->det_next = rq.detached;
        rq.detached = q;
        return MPI_SUCCESS;
      }
      MPI_Request h = q->token;
      return finish(q, &h, MPI_STATUS_IGNORE, "MPI_Bsend");
    }
    mreq_release(q);
  }
  PASS(Bsend);
  return REAL(Bsend)(buf, count, type, dest, tag, comm);
}
EXPORT(Bsend)

/* A request that completed as it started (a fast send or receive). */
static struct mreq *done_req(int kind, struct mbcmpi_ctx *c, MPI_Comm comm, int fn)
{
  struct mreq *q = mreq_new(fn_names[fn]);
  q->kind = kind;
  q->ctx = c;
  q->comm = comm;
  q->active = 1;
  q->stashed = 1;
  q->mrc = TIERS_OK;
  return q;
}

static struct mreq *make_req(int kind, struct mbcmpi_ctx *c, const void *buf, int count,
                             MPI_Datatype type, int peer, int tag, MPI_Comm comm, int fn)
{
  struct mreq *q = mreq_new(fn_names[fn]);
  q->kind = kind;
  q->ctx = c;
  q->buf = buf;
  q->count = count;
  q->type = type;
  q->peer = peer;
  q->tag = tag;
  q->comm = comm;
  return q;
}

#define SEND_NONBLOCKING(name, is_bsend)                                                   \
  static int w_##name(const void *buf, int count, MPI_Datatype type, int dest, int tag,   \
                      MPI_Comm comm, MPI_Request *req)                                     \
  {                                                                                        \
    struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);                                            \
    if (c && F_##name != F_Issend && send_fast(c, buf, count, type, dest, tag)) {          \
      CARRY(name);                                                                         \
      *req = done_req(K_SEND, c, comm, F_##name)->token;                                   \
      return MPI_SUCCESS;                                                                  \
    }                                                                                      \
    if (c) {                                                                               \
      struct mreq *q = make_req(K_SEND, c, buf, count, type, dest, tag, comm, F_##name);   \
      q->bsend = is_bsend;                                                                 \
      q->sync = F_##name == F_Issend;                                                      \
      if (!start_send(q, fn_names[F_##name])) {                                            \
        CARRY(name);                                                                       \
        *req = q->token;                                                                   \
        return MPI_SUCCESS;                                                                \
      }                                                                                    \
      mreq_release(q);                                                                     \
    }                                                                                      \
    PASS(name);                                                                            \
    return REAL(name)(buf, count, type, dest, tag, comm, req);                             \
  }                                                                                        \
  EXPORT(name)

SEND_NONBLOCKING(Isend, 0)
SEND_NONBLOCKING(Issend, 0)
SEND_NONBLOCKING(Irsend, 0)
SEND_NONBLOCKING(Ibsend, 1)

/* Polls of a blocking receive's fast path before it takes the general
 * wait (a few microseconds: a round trip's reply comes well within). */
#define FAST_RECV_SPIN 2048

/* The fast receive (mbc_fast.c): 1 when the message was taken into buf,
 * *ms filled. */
static inline int recv_fast(struct mbcmpi_ctx *c, void *buf, int count, MPI_Datatype type,
                            int source, int tag, unsigned spin, tiers_mbc_status_t *ms)
{
  size_t cap;
  MPI_Aint lb;
  if ((unsigned)source >= (unsigned)c->size || !tag_ok(tag, 1) ||
      !contig_bytes(type, count, &cap, &lb) || (!buf && cap) ||
      !mbcmpi_fast_recv(c->mbc, (void *)at(buf, lb), cap, source, map_tag(tag), spin, ms))
    return 0;
  if (tag == MPI_ANY_TAG)
    st.wildcard++;
  return 1;
}

static int w_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                   MPI_Request *req)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  tiers_mbc_status_t ms;
  if (c && recv_fast(c, buf, count, type, source, tag, 0, &ms)) {
    CARRY(Irecv);
    struct mreq *q = done_req(K_RECV, c, comm, F_Irecv);
    q->ms = ms;
    *req = q->token;
    return MPI_SUCCESS;
  }
  if (c) {
    struct mreq *q = make_req(K_RECV, c, buf, count, type, source, tag, comm, F_Irecv);
    if (!start_recv(q, "MPI_Irecv")) {
      CARRY(Irecv);
      *req = q->token;
      return MPI_SUCCESS;
    }
    mreq_release(q);
  }
  PASS(Irecv);
  return REAL(Irecv)(buf, count, type, source, tag, comm, req);
}
EXPORT(Irecv)

static int w_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                  MPI_Status *status)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (c) {
    tiers_mbc_status_t ms;
    if (recv_fast(c, buf, count, type, source, tag, FAST_RECV_SPIN, &ms)) {
      CARRY(Recv);
      set_status(status, ms.source, ms.tag, ms.bytes, 0);
      return MPI_SUCCESS;
    }
    struct tinfo ti;
    int src;
    if (source != MPI_PROC_NULL && !type_info(type, count, &ti) && ti.contig &&
        !map_source(c, source, &src) && tag_ok(tag, 1)) {
      /* straight into the buffer, no request object */
      if (source == MPI_ANY_SOURCE || tag == MPI_ANY_TAG)
        st.wildcard++;
      ENTER();
      int rc = tiers_mbc_recv(c->mbc, (void *)at(buf, ti.lb), ti.size * (size_t)count, src,
                              map_tag(tag), &ms);
      LEAVE();
      CARRY(Recv);
      if (rc != TIERS_OK && !(rc == TIERS_ERR_ARG && ms.truncated))
        mbcmpi_fatal("MPI_Recv", "receive failed");
      set_status(status, ms.source, ms.tag, ms.bytes, 0);
      if (ms.truncated) {
        if (status != MPI_STATUS_IGNORE)
          status->MPI_ERROR = MPI_ERR_TRUNCATE;
        ENTER();
        PMPI_Comm_call_errhandler(comm, MPI_ERR_TRUNCATE);
        LEAVE();
        return MPI_ERR_TRUNCATE;
      }
      return MPI_SUCCESS;
    }
    struct mreq *q = make_req(K_RECV, c, buf, count, type, source, tag, comm, F_Recv);
    if (!start_recv(q, "MPI_Recv")) {
      CARRY(Recv);
      block_on(q);
      MPI_Request h = q->token;
      return finish(q, &h, status, "MPI_Recv");
    }
    mreq_release(q);
  }
  PASS(Recv);
  return REAL(Recv)(buf, count, type, source, tag, comm, status);
}
EXPORT(Recv)

/* Waits for two of ours (send and receive of a sendrecv). */
static int wait_pair(struct mreq *s, struct mreq *r, MPI_Status *status, const char *fn)
{
  if (s->active && r->active && !s->stashed && !r->stashed) {
    tiers_mbc_request_t two[2] = {s->r, r->r};
    tiers_mbc_status_t ms[2];
    ENTER();
    int rc = tiers_mbc_waitall(s->ctx->mbc, 2, two, ms);
    LEAVE();
    s->ms = ms[0];
    r->ms = ms[1];
    s->mrc = ms[0].error;
    r->mrc = ms[1].error;
    if (rc != TIERS_OK && rc != TIERS_ERR_ARG)
      mbcmpi_fatal(fn, "sendrecv failed");
    s->r = r->r = NULL;
    s->stashed = r->stashed = 1;
  } else {
    block_on(s);
    block_on(r);
  }
  MPI_Request hs = s->token, hr = r->token;
  finish(s, &hs, MPI_STATUS_IGNORE, fn);
  return finish(r, &hr, status, fn);
}

static int w_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag,
                      void *rbuf, int rcount, MPI_Datatype rtype, int source, int rtag,
                      MPI_Comm comm, MPI_Status *status)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (c) {
    struct mreq *r = make_req(K_RECV, c, rbuf, rcount, rtype, source, rtag, comm, F_Sendrecv);
    struct mreq *s = make_req(K_SEND, c, sbuf, scount, stype, dest, stag, comm, F_Sendrecv);
    struct tinfo t1, t2;
    int src;
    /* check both before starting either */
    int ok = (dest == MPI_PROC_NULL ||
              (!type_info(stype, scount, &t1) && dest >= 0 && dest < c->size && stag >= 0)) &&
             (source == MPI_PROC_NULL || (!type_info(rtype, rcount, &t2) &&
                                          !map_source(c, source, &src) && tag_ok(rtag, 1)));
    if (ok && !start_recv(r, "MPI_Sendrecv") && !start_send(s, "MPI_Sendrecv")) {
      CARRY(Sendrecv);
      return wait_pair(s, r, status, "MPI_Sendrecv");
    }
    mreq_release(r);
    mreq_release(s);
  }
  PASS(Sendrecv);
  return REAL(Sendrecv)(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm,
                        status);
}
EXPORT(Sendrecv)

static int w_Sendrecv_replace(void *buf, int count, MPI_Datatype type, int dest, int stag,
                              int source, int rtag, MPI_Comm comm, MPI_Status *status)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  struct tinfo ti;
  int src;
  if (c && !type_info(type, count, &ti) &&
      (dest == MPI_PROC_NULL || (dest >= 0 && dest < c->size && stag >= 0)) &&
      (source == MPI_PROC_NULL || (!map_source(c, source, &src) && tag_ok(rtag, 1)))) {
    /* send from a packed copy, receive in place */
    struct mreq *s = make_req(K_SEND, c, buf, count, type, dest, stag, comm, F_Sendrecv_replace);
    s->bsend = 1; /* copies the data first */
    struct mreq *r = make_req(K_RECV, c, buf, count, type, source, rtag, comm, F_Sendrecv_replace);
    if (!start_send(s, "MPI_Sendrecv_replace") && !start_recv(r, "MPI_Sendrecv_replace")) {
      CARRY(Sendrecv_replace);
      return wait_pair(s, r, status, "MPI_Sendrecv_replace");
    }
    mreq_release(r);
    mreq_release(s);
  }
  PASS(Sendrecv_replace);
  return REAL(Sendrecv_replace)(buf, count, type, dest, stag, source, rtag, comm, status);
}
EXPORT(Sendrecv_replace)

static int iprobe_once(struct mbcmpi_ctx *c, int source, int tag, int *flag, MPI_Status *status)
{
  int src = TIERS_MBC_ANY_SOURCE;
  map_source(c, source, &src);
  tiers_mbc_status_t ms;
  ENTER();
  int rc = mbc_iprobe(c->mbc, src, map_tag(tag), flag, &ms);
  LEAVE();
  if (rc != TIERS_OK)
    mbcmpi_fatal("MPI_Iprobe", "probe failed");
  if (*flag)
    set_status(status, ms.source, ms.tag, ms.message_bytes, 0);
  return MPI_SUCCESS;
}

static int probe_args_ok(struct mbcmpi_ctx *c, int source, int tag)
{
  int src;
  return source != MPI_PROC_NULL && !map_source(c, source, &src) && tag_ok(tag, 1);
}

static int w_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (c && probe_args_ok(c, source, tag)) {
    CARRY(Iprobe);
    iprobe_once(c, source, tag, flag, status);
    if (!*flag)
      poll_missed();
    return MPI_SUCCESS;
  }
  PASS(Iprobe);
  return REAL(Iprobe)(source, tag, comm, flag, status);
}
EXPORT(Iprobe)

static int w_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (c && probe_args_ok(c, source, tag)) {
    CARRY(Probe);
    unsigned rounds = 0;
    for (;;) {
      int flag = 0;
      iprobe_once(c, source, tag, &flag, status);
      if (flag)
        return MPI_SUCCESS;
      if (rounds & 7)
        mbcmpi_progress_all();
      idle(&rounds);
    }
  }
  PASS(Probe);
  return REAL(Probe)(source, tag, comm, status);
}
EXPORT(Probe)

/* Matched probes.  A matched message is bound at once to a receive of
 * its exact source and tag into a buffer of its own size: libtiers-mbc
 * takes it off the matching queue (the first queued message of that
 * source and tag is the one the probe saw, since the probe's source/tag
 * pattern covers that pair), so no other receive or probe can see it.
 * MPI_Mrecv/MPI_Imrecv copy it into the program's buffer.  MPI_PROC_NULL
 * and passed-through communicators go to MPI (MPI_MESSAGE_NO_PROC and
 * MPI's own message handles), and so do handles this library did not
 * make. */
struct mmsg {
  MPI_Message token;
  struct mmsg *next;
  struct mbcmpi_ctx *ctx;
  MPI_Comm comm;
  tiers_mbc_request_t r; /* the bound receive (may still be arriving) */
  void *data;
  size_t bytes;
  int source, tag;
};
static struct mmsg *mmsgs; /* matched and not yet received */

static MPI_Message mmsg_token(struct mmsg *m)
{
#if defined(OPEN_MPI) && OPEN_MPI
  return (MPI_Message)(void *)m; /* a pointer type: our own object's address is unique */
#else
  /* an integer handle (MPICH): MPICH's handles all have a non-zero kind in
   * their top two bits; small positive numbers are never valid there */
  static unsigned next_id;
  (void)m;
  next_id = next_id % 0xffffffu + 1u;
  return (MPI_Message)next_id;
#endif
}

static struct mmsg *mmsg_take(MPI_Message token)
{
  if (token == MPI_MESSAGE_NULL || token == MPI_MESSAGE_NO_PROC)
    return NULL;
  for (struct mmsg **pp = &mmsgs; *pp; pp = &(*pp)->next)
    if ((*pp)->token == token) {
      struct mmsg *m = *pp;
      *pp = m->next;
      return m;
    }
  return NULL;
}

/* One matched probe of c: 1 and *out when a message matched. */
static int mprobe_once(struct mbcmpi_ctx *c, int source, int tag, MPI_Comm comm,
                       MPI_Message *out, MPI_Status *status, const char *fn)
{
  int src = TIERS_MBC_ANY_SOURCE, flag = 0;
  map_source(c, source, &src);
  tiers_mbc_status_t ms;
  ENTER();
  int rc = mbc_iprobe(c->mbc, src, map_tag(tag), &flag, &ms);
  LEAVE();
  if (rc != TIERS_OK)
    mbcmpi_fatal(fn, "probe failed");
  if (!flag)
    return 0;
  struct mmsg *m = calloc(1, sizeof *m);
  void *data = malloc(ms.message_bytes ? ms.message_bytes : 1);
  if (!m || !data) {
    free(m);
    free(data);
    tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
    mbcmpi_fatal(fn, "cannot hold the matched message");
    return 0;
  }
  m->ctx = c;
  m->comm = comm;
  m->data = data;
  m->bytes = ms.message_bytes;
  m->source = ms.source;
  m->tag = ms.tag;
  if (source == MPI_ANY_SOURCE || tag == MPI_ANY_TAG)
    st.wildcard++;
  ENTER();
  rc = tiers_mbc_irecv(c->mbc, data, m->bytes, ms.source, ms.tag, &m->r);
  LEAVE();
  if (rc != TIERS_OK)
    mbcmpi_fatal(fn, "receive failed");
  m->token = mmsg_token(m);
  m->next = mmsgs;
  mmsgs = m;
  *out = m->token;
  set_status(status, m->source, m->tag, m->bytes, 0);
  if (status != MPI_STATUS_IGNORE)
    status->MPI_ERROR = MPI_SUCCESS;
  return 1;
}

/* MPI_PROC_NULL: the probe matches at once, with MPI_MESSAGE_NO_PROC. */
static int mprobe_no_proc(MPI_Message *msg, MPI_Status *status)
{
  *msg = MPI_MESSAGE_NO_PROC;
  set_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0, 0);
  if (status != MPI_STATUS_IGNORE)
    status->MPI_ERROR = MPI_SUCCESS;
  return MPI_SUCCESS;
}

static int w_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *status)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (c && source == MPI_PROC_NULL && tag_ok(tag, 1)) {
    CARRY(Mprobe);
    return mprobe_no_proc(msg, status);
  }
  if (c && probe_args_ok(c, source, tag)) {
    CARRY(Mprobe);
    unsigned rounds = 0;
    while (!mprobe_once(c, source, tag, comm, msg, status, "MPI_Mprobe")) {
      if (rounds & 7)
        mbcmpi_progress_all();
      idle(&rounds);
    }
    return MPI_SUCCESS;
  }
  PASS(Mprobe);
  return REAL(Mprobe)(source, tag, comm, msg, status);
}
EXPORT(Mprobe)

static int w_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *msg,
                     MPI_Status *status)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (c && source == MPI_PROC_NULL && tag_ok(tag, 1)) {
    CARRY(Improbe);
    *flag = 1;
    return mprobe_no_proc(msg, status);
  }
  if (c && probe_args_ok(c, source, tag)) {
    CARRY(Improbe);
    *flag = mprobe_once(c, source, tag, comm, msg, status, "MPI_Improbe");
    if (!*flag)
      poll_missed();
    return MPI_SUCCESS;
  }
  PASS(Improbe);
  return REAL(Improbe)(source, tag, comm, flag, msg, status);
}
EXPORT(Improbe)

/* A receive request for the matched message m into (buf, count, type). */
static struct mreq *mrecv_req(struct mmsg *m, void *buf, int count, MPI_Datatype type,
                              const char *fn)
{
  struct tinfo ti;
  if (type_info(type, count, &ti))
    return NULL;
  struct mreq *q = mreq_new(fn);
  if (!q)
    return NULL;
  q->kind = K_RECV;
  q->ctx = m->ctx;
  q->buf = buf;
  q->count = count;
  q->type = type;
  q->peer = m->source;
  q->tag = m->tag;
  q->comm = m->comm;
  q->mprobed = 1;
  q->mcap = ti.size * (size_t)count;
  q->tmp = m->data; /* finish() unpacks from it and frees it */
  q->tmp_size = m->bytes;
  q->r = m->r;
  q->active = 1;
  free(m);
  return q;
}

static int w_Mrecv(void *buf, int count, MPI_Datatype type, MPI_Message *msg, MPI_Status *status)
{
  if (mbcmpi.active && !mbcmpi.inside && *msg == MPI_MESSAGE_NO_PROC) {
    CARRY(Mrecv);
    *msg = MPI_MESSAGE_NULL;
    set_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0, 0);
    if (status != MPI_STATUS_IGNORE)
      status->MPI_ERROR = MPI_SUCCESS;
    return MPI_SUCCESS;
  }
  struct mmsg *m = mbcmpi.active && !mbcmpi.inside ? mmsg_take(*msg) : NULL;
  if (m) {
    struct mreq *q = mrecv_req(m, buf, count, type, "MPI_Mrecv");
    if (q) {
      CARRY(Mrecv);
      *msg = MPI_MESSAGE_NULL;
      block_on(q);
      return finish(q, NULL, status, "MPI_Mrecv");
    }
    m->next = mmsgs; /* a bad datatype or count: MPI reports it */
    mmsgs = m;
  }
  PASS(Mrecv);
  return REAL(Mrecv)(buf, count, type, msg, status);
}
EXPORT(Mrecv)

static int w_Imrecv(void *buf, int count, MPI_Datatype type, MPI_Message *msg,
                    MPI_Request *req)
{
  if (mbcmpi.active && !mbcmpi.inside && *msg == MPI_MESSAGE_NO_PROC) {
    struct mreq *q = mreq_new("MPI_Imrecv"); /* completes at once, empty */
    if (q) {
      CARRY(Imrecv);
      q->kind = K_RECV;
      q->procnull = q->stashed = q->active = 1;
      q->mrc = TIERS_OK;
      q->comm = MPI_COMM_SELF;
      *msg = MPI_MESSAGE_NULL;
      *req = q->token;
      return MPI_SUCCESS;
    }
  }
  struct mmsg *m = mbcmpi.active && !mbcmpi.inside ? mmsg_take(*msg) : NULL;
  if (m) {
    struct mreq *q = mrecv_req(m, buf, count, type, "MPI_Imrecv");
    if (q) {
      CARRY(Imrecv);
      *msg = MPI_MESSAGE_NULL;
      *req = q->token;
      return MPI_SUCCESS;
    }
    m->next = mmsgs;
    mmsgs = m;
  }
  PASS(Imrecv);
  return REAL(Imrecv)(buf, count, type, msg, req);
}
EXPORT(Imrecv)

/* ------------------------------------------------------------------ */
/* Persistent requests */

#define SEND_INIT(name)                                                                    \
  static int w_##name(const void *buf, int count, MPI_Datatype type, int dest, int tag,   \
                      MPI_Comm comm, MPI_Request *req)                                     \
  {                                                                                        \
    struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);                                            \
    struct tinfo ti;                                                                       \
    if (c && !type_info(type, count, &ti) &&                                               \
        (dest == MPI_PROC_NULL || (dest >= 0 && dest < c->size && tag >= 0))) {            \
      struct mreq *q = make_req(K_SEND, c, buf, count, type, dest, tag, comm, F_##name);   \
      q->persistent = 1;                                                                   \
      q->bsend = F_##name == F_Bsend_init;                                                 \
      q->sync = F_##name == F_Ssend_init;                                                  \
      CARRY(name);                                                                         \
      *req = q->token;                                                                     \
      return MPI_SUCCESS;                                                                  \
    }                                                                                      \
    PASS(name);                                                                            \
    return REAL(name)(buf, count, type, dest, tag, comm, req);                             \
  }                                                                                        \
  EXPORT(name)

SEND_INIT(Send_init)
SEND_INIT(Ssend_init)
SEND_INIT(Rsend_init)
SEND_INIT(Bsend_init)

static int w_Recv_init(void *buf, int count, MPI_Datatype type, int source, int tag,
                       MPI_Comm comm, MPI_Request *req)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  struct tinfo ti;
  int src;
  if (c && !type_info(type, count, &ti) &&
      (source == MPI_PROC_NULL || (!map_source(c, source, &src) && tag_ok(tag, 1)))) {
    struct mreq *q = make_req(K_RECV, c, buf, count, type, source, tag, comm, F_Recv_init);
    q->persistent = 1;
    CARRY(Recv_init);
    *req = q->token;
    return MPI_SUCCESS;
  }
  PASS(Recv_init);
  return REAL(Recv_init)(buf, count, type, source, tag, comm, req);
}
EXPORT(Recv_init)

static int start_one(MPI_Request *req, int fn)
{
  struct mreq *q = mbcmpi.active ? lookup(*req) : NULL;
  if (!q) {
    PASS(Start);
    return REAL(Start)(req);
  }
  if (q->active)
    mbcmpi_unsupported(fn_names[fn], "the persistent request is already active");
  int rc = q->kind == K_SEND ? start_send(q, fn_names[fn]) : start_recv(q, fn_names[fn]);
  if (rc)
    mbcmpi_unsupported(fn_names[fn], "invalid arguments of the persistent request");
  CARRY(Start);
  return MPI_SUCCESS;
}

static int w_Start(MPI_Request *req) { return start_one(req, F_Start); }
EXPORT(Start)

static int w_Startall(int n, MPI_Request reqs[])
{
  int rc = MPI_SUCCESS;
  for (int i = 0; i < n; i++) {
    int r = start_one(&reqs[i], F_Startall);
    if (r != MPI_SUCCESS)
      rc = r;
  }
  return rc;
}
EXPORT(Startall)

/* ------------------------------------------------------------------ */
/* Completion calls */

static int w_Wait(MPI_Request *req, MPI_Status *status)
{
  struct mreq *q = mbcmpi.active && !mbcmpi.inside ? lookup(*req) : NULL;
  if (!q) {
    if (mbcmpi.active && !mbcmpi.inside && *req != MPI_REQUEST_NULL) {
      PASS(Wait);
      return mbcmpi_wait_real(req, status);
    }
    return REAL(Wait)(req, status);
  }
  CARRY(Wait);
  if (!q->active && !q->stashed) { /* inactive persistent */
    empty_status(status);
    return MPI_SUCCESS;
  }
  block_on(q);
  return finish_plain(q, req, status, "MPI_Wait");
}
EXPORT(Wait)

static int w_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
  struct mreq *q = mbcmpi.active && !mbcmpi.inside ? lookup(*req) : NULL;
  if (!q) {
    if (mbcmpi.active && !mbcmpi.inside && *req != MPI_REQUEST_NULL) {
      PASS(Test);
      mbcmpi_progress_all();
    }
    return REAL(Test)(req, flag, status);
  }
  CARRY(Test);
  if (!q->active && !q->stashed) {
    *flag = 1;
    empty_status(status);
    return MPI_SUCCESS;
  }
  *flag = poll(q);
  if (!*flag) {
    if (rq.detached)
      poll_detached();
    poll_missed();
    return MPI_SUCCESS;
  }
  return finish_plain(q, req, status, "MPI_Test");
}
EXPORT(Test)

static int w_Request_get_status(MPI_Request req, int *flag, MPI_Status *status)
{
  struct mreq *q = mbcmpi.active && !mbcmpi.inside ? lookup(req) : NULL;
  if (!q) {
    if (mbcmpi.active && !mbcmpi.inside && req != MPI_REQUEST_NULL)
      mbcmpi_progress_all(); /* a program polling MPI still drains the FIFOs */
    return REAL(Request_get_status)(req, flag, status);
  }
  CARRY(Request_get_status);
  if (!q->active && !q->stashed) {
    *flag = 1;
    empty_status(status);
    return MPI_SUCCESS;
  }
  *flag = poll(q);
  if (!*flag)
    poll_missed();
  if (*flag && status != MPI_STATUS_IGNORE) {
    if (q->kind == K_RECV && !q->procnull && !was_cancelled(q))
      set_status(status, q->ms.source, q->ms.tag, q->ms.bytes, 0);
    else
      set_status(status, q->procnull ? MPI_PROC_NULL : MPI_ANY_SOURCE, MPI_ANY_TAG, 0,
                 was_cancelled(q));
  }
  return MPI_SUCCESS;
}
EXPORT(Request_get_status)

static MPI_Status *status_at(MPI_Status *arr, int i)
{
  return arr == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &arr[i];
}

/* One poll of request i of an array: 1 when it is complete or null/inactive
 * (then finished, its status filled), 0 when still pending.  *err gets its
 * error code; `live` says whether it was an active request. */
static int poll_entry(MPI_Request *req, MPI_Status *s, int *err, int *live)
{
  *err = MPI_SUCCESS;
  *live = 0;
  if (*req == MPI_REQUEST_NULL) {
    empty_status(s);
    return 1;
  }
  struct mreq *q = lookup(*req);
  if (!q) {
    int flag = 0;
    *live = 1;
    *err = REAL(Test)(req, &flag, s);
    return flag || *err != MPI_SUCCESS;
  }
  if (!q->active && !q->stashed) {
    empty_status(s);
    return 1;
  }
  *live = 1;
  if (!poll(q))
    return 0;
  *err = finish(q, req, s, "MPI_Waitall");
  return 1;
}

/* Waitall over our active requests of one context: one libtiers-mbc wait
 * for those still in flight (those that completed as they started, the
 * fast sends and receives, need none). */
enum { WAITALL_FAST_MAX = 256 }; /* osu_bw-style windows of sends and receives together */
static int waitall_fast(int n, MPI_Request reqs[], MPI_Status *sts)
{
  if (n > WAITALL_FAST_MAX || n < 1)
    return 0;
  struct mreq *qs[WAITALL_FAST_MAX];
  tiers_mbc_request_t rs[WAITALL_FAST_MAX];
  tiers_mbc_status_t ms[WAITALL_FAST_MAX];
  int at_[WAITALL_FAST_MAX], k = 0;
  struct mbcmpi_ctx *c = NULL;
  for (int i = 0; i < n; i++) {
    struct mreq *q = qs[i] = lookup(reqs[i]);
    if (!q || !q->active)
      return 0;
    if (q->stashed)
      continue;
    if (c && q->ctx != c)
      return 0;
    c = q->ctx;
    at_[k] = i;
    rs[k++] = q->r;
  }
  if (k) {
    ENTER();
    int rc = tiers_mbc_waitall(c->mbc, k, rs, ms);
    LEAVE();
    if (rc != TIERS_OK && rc != TIERS_ERR_ARG)
      mbcmpi_fatal("MPI_Waitall", "wait failed");
    for (int j = 0; j < k; j++) {
      struct mreq *q = qs[at_[j]];
      q->r = NULL;
      q->ms = ms[j];
      q->mrc = ms[j].error;
      q->stashed = 1;
    }
  }
  int err = MPI_SUCCESS;
  for (int i = 0; i < n; i++)
    if (finish_plain(qs[i], &reqs[i], status_at(sts, i), "MPI_Waitall") != MPI_SUCCESS)
      err = MPI_ERR_IN_STATUS;
  return err == MPI_SUCCESS ? 1 : -1;
}

static int w_Waitall(int n, MPI_Request reqs[], MPI_Status sts[])
{
  if (!mbcmpi.active || mbcmpi.inside)
    return REAL(Waitall)(n, reqs, sts);
  int fast = waitall_fast(n, reqs, sts);
  if (fast) {
    CARRY(Waitall);
    return fast > 0 ? MPI_SUCCESS : MPI_ERR_IN_STATUS;
  }
  int ours = 0;
  for (int i = 0; i < n && !ours; i++)
    ours = lookup(reqs[i]) != NULL;
  if (ours)
    CARRY(Waitall);
  else
    PASS(Waitall);
  char small[64];
  char *done = n <= 64 ? small : calloc((size_t)n, 1);
  if (!done)
    return REAL(Waitall)(n, reqs, sts);
  memset(done, 0, (size_t)(n <= 64 ? 64 : n));
  int left = n, any_err = 0;
  unsigned rounds = 0;
  while (left) {
    int progressed = 0;
    for (int i = 0; i < n; i++) {
      if (done[i])
        continue;
      int err, live;
      if (poll_entry(&reqs[i], status_at(sts, i), &err, &live)) {
        done[i] = 1;
        left--;
        progressed = 1;
        any_err |= err != MPI_SUCCESS;
      }
    }
    if (left && !progressed) {
      if (!ours)
        mbcmpi_progress_all();
      idle(&rounds);
    }
  }
  if (done != small)
    free(done);
  return any_err ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
}
EXPORT(Waitall)

static int w_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[])
{
  if (!mbcmpi.active || mbcmpi.inside)
    return REAL(Testall)(n, reqs, flag, sts);
  int ours = 0;
  for (int i = 0; i < n && !ours; i++)
    ours = lookup(reqs[i]) != NULL;
  if (!ours) {
    PASS(Testall);
    mbcmpi_progress_all();
    return REAL(Testall)(n, reqs, flag, sts);
  }
  CARRY(Testall);
  /* all or nothing: finish only when every request is complete */
  int all = 1;
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL)
      continue;
    struct mreq *q = lookup(reqs[i]);
    if (q) {
      if (q->active && !poll(q))
        all = 0;
    } else {
      int f = 0;
      REAL(Request_get_status)(reqs[i], &f, MPI_STATUS_IGNORE);
      all &= f;
    }
  }
  *flag = all;
  if (!all) {
    poll_missed();
    return MPI_SUCCESS;
  }
  int any_err = 0;
  for (int i = 0; i < n; i++) {
    int err, live;
    poll_entry(&reqs[i], status_at(sts, i), &err, &live);
    any_err |= err != MPI_SUCCESS;
  }
  return any_err ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
}
EXPORT(Testall)

/* Testany / Waitany: the first complete active request. */
static int any_once(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
  int live_seen = 0;
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL)
      continue;
    struct mreq *q = lookup(reqs[i]);
    if (q && !q->active && !q->stashed)
      continue;
    live_seen = 1;
    int err, live;
    if (poll_entry(&reqs[i], status, &err, &live)) {
      *index = i;
      *flag = 1;
      return err;
    }
  }
  if (!live_seen) {
    *index = MPI_UNDEFINED;
    *flag = 1;
    empty_status(status);
  }
  return MPI_SUCCESS;
}

static int w_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
  if (!mbcmpi.active || mbcmpi.inside)
    return REAL(Testany)(n, reqs, index, flag, status);
  CARRY(Testany);
  *flag = 0;
  *index = MPI_UNDEFINED;
  int rc = any_once(n, reqs, index, flag, status);
  if (!*flag) {
    mbcmpi_progress_all();
    poll_missed();
  }
  return rc;
}
EXPORT(Testany)

static int w_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status)
{
  if (!mbcmpi.active || mbcmpi.inside)
    return REAL(Waitany)(n, reqs, index, status);
  CARRY(Waitany);
  unsigned rounds = 0;
  for (;;) {
    int flag = 0;
    int rc = any_once(n, reqs, index, &flag, status);
    if (flag)
      return rc;
    mbcmpi_progress_all();
    idle(&rounds);
  }
}
EXPORT(Waitany)

static int some_once(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[])
{
  int live_seen = 0, k = 0, any_err = 0;
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL)
      continue;
    struct mreq *q = lookup(reqs[i]);
    if (q && !q->active && !q->stashed)
      continue;
    live_seen = 1;
    int err, live;
    if (poll_entry(&reqs[i], status_at(sts, k), &err, &live)) {
      idx[k++] = i;
      any_err |= err != MPI_SUCCESS;
    }
  }
  *outcount = live_seen ? k : MPI_UNDEFINED;
  return any_err ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
}

static int w_Testsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[])
{
  if (!mbcmpi.active || mbcmpi.inside)
    return REAL(Testsome)(n, reqs, outcount, idx, sts);
  CARRY(Testsome);
  int rc = some_once(n, reqs, outcount, idx, sts);
  if (*outcount == 0) {
    mbcmpi_progress_all();
    poll_missed();
  }
  return rc;
}
EXPORT(Testsome)

static int w_Waitsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[])
{
  if (!mbcmpi.active || mbcmpi.inside)
    return REAL(Waitsome)(n, reqs, outcount, idx, sts);
  CARRY(Waitsome);
  unsigned rounds = 0;
  for (;;) {
    int rc = some_once(n, reqs, outcount, idx, sts);
    if (*outcount != 0)
      return rc;
    mbcmpi_progress_all();
    idle(&rounds);
  }
}
EXPORT(Waitsome)

static int w_Cancel(MPI_Request *req)
{
  struct mreq *q = mbcmpi.active && !mbcmpi.inside ? lookup(*req) : NULL;
  if (!q) {
    PASS(Cancel);
    return REAL(Cancel)(req);
  }
  CARRY(Cancel);
  /* a send cannot be withdrawn (MPI lets a cancel fail: it completes
   * normally); a receive can while nothing matched it.  One that sent a
   * send request completes later: cancelled once the sender confirms, or
   * with the message the sender had already written */
  if (q->kind == K_RECV && q->active && !q->stashed && q->r) {
    ENTER();
    int ok = mbc_cancel_recv(q->ctx->mbc, q->r);
    LEAVE();
    if (ok == 2) {
      q->cancel_asked = 1;
    } else if (ok) {
      int flag = 0;
      ENTER();
      tiers_mbc_test(q->ctx->mbc, &q->r, &flag, &q->ms);
      LEAVE();
      q->r = NULL;
      q->mrc = TIERS_OK;
      q->stashed = 1;
      q->cancelled = 1;
    }
  }
  return MPI_SUCCESS;
}
EXPORT(Cancel)

static int w_Request_free(MPI_Request *req)
{
  struct mreq *q = mbcmpi.active && !mbcmpi.inside ? lookup(*req) : NULL;
  if (!q) {
    PASS(Request_free);
    return REAL(Request_free)(req);
  }
  CARRY(Request_free);
  if (q->active || q->stashed) {
    if (poll(q)) {
      q->persistent = 0;
      finish(q, req, MPI_STATUS_IGNORE, "MPI_Request_free");
    } else {
      /* completes in the background */
      q->persistent = 0;
      q->detached = 1;
      q->det_next = rq.detached;
      rq.detached = q;
    }
  } else {
    mreq_release(q);
  }
  *req = MPI_REQUEST_NULL;
  return MPI_SUCCESS;
}
EXPORT(Request_free)

/* ------------------------------------------------------------------ */
/* Communicator creation and release */

#define PASSED_OR_CARRIED(name, c) ((c) ? (void)CARRY(name) : (void)PASS(name))

/* After a communicator constructor: a new communicator that MPI made is
 * carried over memory-based messaging (counted under the constructor). */
static int constructed(int rc, MPI_Comm *newcomm, int fn, const char *name)
{
  if (rc == MPI_SUCCESS && !mbcmpi.inside && mbcmpi.active) {
    mbcmpi.carried[fn]++;
    attach(*newcomm, name);
  }
  return rc;
}

static int w_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Comm_dup", REAL(Comm_dup)(comm, newcomm));
  return constructed(rc, newcomm, F_Comm_dup, "MPI_Comm_dup");
}
EXPORT(Comm_dup)

static int w_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
  int rc =
      WITH_PROGRESS("MPI_Comm_dup_with_info", REAL(Comm_dup_with_info)(comm, info, newcomm));
  return constructed(rc, newcomm, F_Comm_dup_with_info, "MPI_Comm_dup_with_info");
}
EXPORT(Comm_dup_with_info)

static int w_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Comm_split", REAL(Comm_split)(comm, color, key, newcomm));
  return constructed(rc, newcomm, F_Comm_split, "MPI_Comm_split");
}
EXPORT(Comm_split)

static int w_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Comm_split_type",
                         REAL(Comm_split_type)(comm, type, key, info, newcomm));
  return constructed(rc, newcomm, F_Comm_split_type, "MPI_Comm_split_type");
}
EXPORT(Comm_split_type)

static int w_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Comm_create", REAL(Comm_create)(comm, group, newcomm));
  return constructed(rc, newcomm, F_Comm_create, "MPI_Comm_create");
}
EXPORT(Comm_create)

static int w_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Comm_create_group",
                         REAL(Comm_create_group)(comm, group, tag, newcomm));
  return constructed(rc, newcomm, F_Comm_create_group, "MPI_Comm_create_group");
}
EXPORT(Comm_create_group)

static int w_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[],
                         int reorder, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Cart_create",
                         REAL(Cart_create)(comm, ndims, dims, periods, reorder, newcomm));
  return constructed(rc, newcomm, F_Cart_create, "MPI_Cart_create");
}
EXPORT(Cart_create)

static int w_Cart_sub(MPI_Comm comm, const int remain[], MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Cart_sub", REAL(Cart_sub)(comm, remain, newcomm));
  return constructed(rc, newcomm, F_Cart_sub, "MPI_Cart_sub");
}
EXPORT(Cart_sub)

static int w_Graph_create(MPI_Comm comm, int nnodes, const int index[], const int edges[],
                          int reorder, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Graph_create",
                         REAL(Graph_create)(comm, nnodes, index, edges, reorder, newcomm));
  return constructed(rc, newcomm, F_Graph_create, "MPI_Graph_create");
}
EXPORT(Graph_create)

static int w_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[],
                               const int dests[], const int weights[], MPI_Info info,
                               int reorder, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Dist_graph_create",
                         REAL(Dist_graph_create)(comm, n, sources, degrees, dests, weights, info,
                                                 reorder, newcomm));
  return constructed(rc, newcomm, F_Dist_graph_create, "MPI_Dist_graph_create");
}
EXPORT(Dist_graph_create)

static int w_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[],
                                        const int sourceweights[], int outdegree,
                                        const int dests[], const int destweights[],
                                        MPI_Info info, int reorder, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Dist_graph_create_adjacent",
                         REAL(Dist_graph_create_adjacent)(comm, indegree, sources, sourceweights,
                                                          outdegree, dests, destweights, info,
                                                          reorder, newcomm));
  return constructed(rc, newcomm, F_Dist_graph_create_adjacent, "MPI_Dist_graph_create_adjacent");
}
EXPORT(Dist_graph_create_adjacent)

static int w_Intercomm_merge(MPI_Comm inter, int high, MPI_Comm *newcomm)
{
  int rc = WITH_PROGRESS("MPI_Intercomm_merge", REAL(Intercomm_merge)(inter, high, newcomm));
  return constructed(rc, newcomm, F_Intercomm_merge, "MPI_Intercomm_merge");
}
EXPORT(Intercomm_merge)

static int w_Comm_free(MPI_Comm *comm)
{
  if (mbcmpi.active && !mbcmpi.inside && comm) {
    struct mbcmpi_ctx *c = mbcmpi_ctx_slow(*comm);
    PASSED_OR_CARRIED(Comm_free, c);
    detach(comm);
  }
  return REAL(Comm_free)(comm);
}
EXPORT(Comm_free)

static int w_Comm_disconnect(MPI_Comm *comm)
{
  if (mbcmpi.active && !mbcmpi.inside && comm) {
    struct mbcmpi_ctx *c = mbcmpi_ctx_slow(*comm);
    PASSED_OR_CARRIED(Comm_disconnect, c);
    detach(comm);
  }
  return WITH_PROGRESS("MPI_Comm_disconnect", REAL(Comm_disconnect)(comm));
}
EXPORT(Comm_disconnect)

static int w_Comm_spawn(const char *command, char *argv[], int maxprocs, MPI_Info info, int root,
                        MPI_Comm comm, MPI_Comm *intercomm, int errcodes[])
{
  if (mbcmpi.active && !mbcmpi.inside)
    mbcmpi_unsupported("MPI_Comm_spawn", "dynamic processes");
  return REAL(Comm_spawn)(command, argv, maxprocs, info, root, comm, intercomm, errcodes);
}
EXPORT(Comm_spawn)

static int w_Comm_spawn_multiple(int count, char *commands[], char **argvs[],
                                 const int maxprocs[], const MPI_Info info[], int root,
                                 MPI_Comm comm, MPI_Comm *intercomm, int errcodes[])
{
  if (mbcmpi.active && !mbcmpi.inside)
    mbcmpi_unsupported("MPI_Comm_spawn_multiple", "dynamic processes");
  return REAL(Comm_spawn_multiple)(count, commands, argvs, maxprocs, info, root, comm, intercomm,
                                   errcodes);
}
EXPORT(Comm_spawn_multiple)
