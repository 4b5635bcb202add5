/*
 * tiers-mbc-check: checks the memory-based message layer (tiers/mbc.h)
 * under a real MPI launch.  One sub-test per run:
 *
 *   mpirun -n P tiers-mbc-check TEST [--fifo-bytes N] [--direct auto|off]
 *                                    [--timeout S] [--count K]
 *
 * TEST is one of
 *   ordering   every rank sends K messages to every rank (itself too), tags
 *              cycling, half the receives posted before the sends and half
 *              after; each message must arrive in sending order, whole
 *   wildcards  rank 0 takes everything with ANY_SOURCE/ANY_TAG, then with
 *              ANY_SOURCE and one tag, then one source and ANY_TAG; the
 *              order per sender must hold
 *   sizes      0 B .. 4 MiB+3 around the ring, receive posted first (direct
 *              path) and posted late (FIFO path, chunked, buffered)
 *   many       K receives outstanding from every peer, then K sends each
 *   fifo       a 4 KiB FIFO: wrap-around, messages larger than the FIFO, a
 *              receiver that comes late (the sender waits), and two ranks
 *              sending large messages to each other at once (no deadlock)
 *   race       forced stale send request: rank 0 posts a receive (its send
 *              request reaches rank 1), rank 1 sends with the testing hook
 *              that writes into the FIFO before reading requests; the
 *              request must be dropped as stale and the FIFO copy
 *              delivered; then the same without the hook (direct path)
 *   mixed      direct, FIFO and wildcard receives interleaved on one pair
 *   single     the single-copy rendezvous: long and short messages of one
 *              tag around the ring, all sent before any receive is posted,
 *              taken by source, ANY_SOURCE and ANY_TAG receives, must
 *              arrive whole and in sending order; a long send must not
 *              complete before its receiver has copied it (when it was
 *              left to be read), and the sender may overwrite its buffer
 *              once it has; a long blocking send to oneself before the
 *              receive is posted completes (through the FIFO)
 *   barrier    R barriers; a rank that leaves must see every rank arrived
 *   allreduce  int32/int64/double sum/min/max with exact answers, in place too
 *   truncate   receive buffers smaller than the message, on every path:
 *              first bytes stored, nothing past the buffer, TIERS_ERR_ARG
 *   badargs    invalid ranks, tags, buffers, handles, options
 *   timeout    a receive nobody answers ends with TIERS_ERR_STATE after the
 *              time limit, and completes later when the message comes
 *   peer-exit  the last rank exits without destroying the layer (run with
 *              Open MPI's orte_allowed_exit_without_sync=1); every other
 *              rank's receive from it must end with TIERS_ERR_STATE naming
 *              it, and destroy too; each survivor prints its own line
 *              {"schema":"tiers.mbc-check/1","test":"peer-exit","rank":R,
 *               "rc":C,"message":M,"seconds":S,"destroy_rc":D} and exits
 *
 * --transport auto|shm|rma picks the transport (default: auto, or
 * $TIERS_MBC_TRANSPORT); rma runs the inter-node path on one machine.
 *
 * Rank 0 prints one JSON document
 *   {"schema":"tiers.mbc-check/1","test":T,"ranks":P,"direct_available":0|1,
 *    "checked":N,"wrong":W,"failures":[...],"stats":[per-rank counters],
 *    "total":{summed counters},"extra":{test-specific},"ok":true}
 * and every rank exits 1 when a check failed.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/tool.h"
#include "tiers/mbc.h"

#define MAX_FAIL 16
static char fails[MAX_FAIL][160];
static int nfail;
static long checked, wrong;
static int rank, size;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...)
{
  wrong++;
  if (nfail >= MAX_FAIL)
    return;
  va_list ap;
  va_start(ap, fmt);
  char tmp[140];
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  snprintf(fails[nfail++], sizeof fails[0], "rank %d: %s", rank, tmp);
}

#define CHECK(cond, ...)   \
  do {                     \
    checked++;             \
    if (!(cond))           \
      failf(__VA_ARGS__);  \
  } while (0)

/* A call that must succeed. */
#define OK(call)                                                                       \
  do {                                                                                 \
    int rc_ = (call);                                                                  \
    checked++;                                                                         \
    if (rc_ != TIERS_OK)                                                               \
      failf("%s:%d %s -> %d: %s", __FILE__, __LINE__, #call, rc_, tiers_last_error()); \
  } while (0)

/* Payload byte i of message seq from src to dst. */
static unsigned char pat(int src, int dst, long seq, size_t i)
{
  return (unsigned char)(src * 131 + dst * 31 + seq * 7 + (long)(i * 13 + (i >> 8)));
}

static void fill(unsigned char *b, size_t n, int src, int dst, long seq)
{
  for (size_t i = 0; i < n; i++)
    b[i] = pat(src, dst, seq, i);
  if (n >= 8)
    memcpy(b, &seq, sizeof seq < n ? sizeof seq : n);
}

/* 1 when b holds message seq from src to dst (n bytes) */
static int verify(const unsigned char *b, size_t n, int src, int dst, long seq)
{
  if (n >= 8) {
    long got;
    memcpy(&got, b, sizeof got);
    if (got != seq)
      return 0;
  }
  for (size_t i = n >= 8 ? 8 : 0; i < n; i++)
    if (b[i] != pat(src, dst, seq, i))
      return 0;
  return 1;
}

static long seq_of(const unsigned char *b) { long s; memcpy(&s, b, sizeof s); return s; }

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ */

static void t_ordering(tiers_mbc_t m, int K)
{
  size_t len = 64;
  unsigned char *sb = malloc(len * (size_t)K * (size_t)size);
  unsigned char *rb = malloc(len * (size_t)K * (size_t)size);
  tiers_mbc_request_t *rq = calloc((size_t)(2 * K * size), sizeof *rq);
  int nr = 0, half = K / 2;
  /* first half of the receives posted before anybody sends (ANY_TAG) */
  for (int s = 0; s < size; s++)
    for (int k = 0; k < half; k++)
      OK(tiers_mbc_irecv(m, rb + len * ((size_t)s * K + k), len, s, TIERS_MBC_ANY_TAG, &rq[nr++]));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int d = 0; d < size; d++)
    for (int k = 0; k < K; k++) {
      unsigned char *b = sb + len * ((size_t)d * K + k);
      fill(b, len, rank, d, k);
      OK(tiers_mbc_isend(m, b, len, d, k % 3, &rq[nr++]));
    }
  for (int s = 0; s < size; s++)
    for (int k = half; k < K; k++)
      OK(tiers_mbc_irecv(m, rb + len * ((size_t)s * K + k), len, s, TIERS_MBC_ANY_TAG, &rq[nr++]));
  tiers_mbc_status_t *st = calloc((size_t)nr, sizeof *st);
  OK(tiers_mbc_waitall(m, nr, rq, st));
  for (int s = 0; s < size; s++)
    for (int k = 0; k < K; k++)
      CHECK(verify(rb + len * ((size_t)s * K + k), len, s, rank, k),
            "message %d from %d wrong or out of order (got seq %ld)", k, s,
            seq_of(rb + len * ((size_t)s * K + k)));
  free(sb);
  free(rb);
  free(rq);
  free(st);
}

/* tag of message seq in the wildcards test */
static int wtag(long seq, int K) { return seq < K ? 100 + (int)(seq % 5) : 7 + (int)((seq - K) % 2); }

static void t_wildcards(tiers_mbc_t m, int K)
{
  size_t len = 32;
  /* every sender sends 2K messages to rank 0: K with tags 100..104, then K
   * alternating tags 7 and 8.  Rank 0 takes K*(P-1) of them with
   * ANY_SOURCE/ANY_TAG, then every tag-7 one left with ANY_SOURCE and tag 7,
   * then the rest source by source with ANY_TAG; per sender, every phase
   * must see that sender's messages in sending order. */
  if (rank != 0) {
    unsigned char *b = malloc(len * (size_t)K * 2);
    tiers_mbc_request_t *rq = calloc((size_t)K * 2, sizeof *rq);
    for (int k = 0; k < 2 * K; k++) {
      fill(b + len * k, len, rank, 0, k);
      OK(tiers_mbc_isend(m, b + len * k, len, 0, wtag(k, K), &rq[k]));
    }
    OK(tiers_mbc_waitall(m, 2 * K, rq, NULL));
    free(b);
    free(rq);
    return;
  }
  char *got = calloc((size_t)size * 2 * K, 1); /* got[s][seq] */
  long *cur = calloc((size_t)size, sizeof *cur);
  unsigned char b[64];
  tiers_mbc_status_t st;
  /* the next message of s not yet received whose tag passes the filter */
#define NEXT(s, filter)                                                   \
  ({                                                                      \
    long q_ = 0;                                                          \
    while (q_ < 2L * K && (got[(size_t)(s) * 2 * K + q_] || !(filter(q_)))) \
      q_++;                                                               \
    q_;                                                                   \
  })
#define ANY(q) 1
#define IS7(q) (wtag((q), K) == 7)
#define NOT7(q) (wtag((q), K) != 7)
  long n1 = (long)K * (size - 1);
  for (long i = 0; i < n1; i++) {
    OK(tiers_mbc_recv(m, b, sizeof b, TIERS_MBC_ANY_SOURCE, TIERS_MBC_ANY_TAG, &st));
    int s = st.source;
    if (s <= 0 || s >= size || st.bytes != len) {
      failf("phase 1: bad status source %d bytes %zu", s, st.bytes);
      continue;
    }
    long want = NEXT(s, ANY);
    CHECK(verify(b, len, s, 0, want) && st.tag == wtag(want, K),
          "phase 1: from %d expected seq %ld, got %ld tag %d", s, want, seq_of(b), st.tag);
    got[(size_t)s * 2 * K + want] = 1;
  }
  long n7 = 0;
  for (int s = 1; s < size; s++)
    for (long q = 0; q < 2L * K; q++)
      n7 += !got[(size_t)s * 2 * K + q] && IS7(q);
  for (long i = 0; i < n7; i++) {
    OK(tiers_mbc_recv(m, b, sizeof b, TIERS_MBC_ANY_SOURCE, 7, &st));
    int s = st.source;
    if (s <= 0 || s >= size) {
      failf("phase 2: bad source %d", s);
      continue;
    }
    long want = NEXT(s, IS7);
    CHECK(st.tag == 7 && verify(b, len, s, 0, want), "phase 2: from %d expected seq %ld, got %ld",
          s, want, seq_of(b));
    got[(size_t)s * 2 * K + want] = 1;
  }
  for (int s = 1; s < size; s++)
    for (;;) {
      long want = NEXT(s, NOT7);
      if (want >= 2L * K)
        break;
      OK(tiers_mbc_recv(m, b, sizeof b, s, TIERS_MBC_ANY_TAG, &st));
      CHECK(st.source == s && st.tag == wtag(want, K) && verify(b, len, s, 0, want),
            "phase 3: from %d expected seq %ld, got %ld tag %d", s, want, seq_of(b), st.tag);
      got[(size_t)s * 2 * K + want] = 1;
    }
  free(got);
  free(cur);
}

static const size_t sizes[] = {0, 1, 7, 8, 63, 4095, 4096, 4097, 65536, 65537, 1 << 20,
                               (4 << 20) + 3};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void t_sizes(tiers_mbc_t m)
{
  int to = (rank + 1) % size, from = (rank - 1 + size) % size;
  size_t maxlen = sizes[NSIZES - 1];
  unsigned char *sb = malloc(maxlen), *rb = malloc(maxlen + 16);
  for (int late = 0; late < 2; late++)
    for (size_t i = 0; i < NSIZES; i++) {
      size_t n = sizes[i];
      long seq = (long)(late * 100 + i);
      tiers_mbc_request_t r = NULL, s = NULL;
      memset(rb, 0xEE, maxlen + 16);
      if (!late)
        OK(tiers_mbc_irecv(m, rb, n, from, 3, &r));
      MPI_Barrier(MPI_COMM_WORLD);
      fill(sb, n, rank, to, seq);
      OK(tiers_mbc_isend(m, sb, n, to, 3, &s));
      if (late) {
        MPI_Barrier(MPI_COMM_WORLD); /* the message is (partly) in the FIFO first */
        OK(tiers_mbc_irecv(m, rb, n, from, 3, &r));
      }
      tiers_mbc_status_t st;
      OK(tiers_mbc_wait(m, &r, &st));
      OK(tiers_mbc_wait(m, &s, NULL));
      CHECK(st.bytes == n && st.message_bytes == n && !st.truncated && st.source == from,
            "size %zu: status bytes %zu", n, st.bytes);
      CHECK(verify(rb, n, from, rank, seq), "size %zu (%s): payload wrong", n,
            late ? "late" : "posted");
      CHECK(rb[n] == 0xEE, "size %zu: byte past the message written", n);
    }
  free(sb);
  free(rb);
}

static void t_many(tiers_mbc_t m, int K)
{
  size_t len = 24;
  size_t tot = (size_t)K * size;
  unsigned char *rb = malloc(len * tot), *sb = malloc(len * tot);
  tiers_mbc_request_t *rq = calloc(2 * tot, sizeof *rq);
  int nr = 0;
  for (int k = 0; k < K; k++)
    for (int s = 0; s < size; s++)
      OK(tiers_mbc_irecv(m, rb + len * ((size_t)s * K + k), len, s, 1, &rq[nr++]));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < K; k++)
    for (int d = 0; d < size; d++) {
      unsigned char *b = sb + len * ((size_t)d * K + k);
      fill(b, len, rank, d, k);
      OK(tiers_mbc_isend(m, b, len, d, 1, &rq[nr++]));
    }
  /* complete with testall first, then waitall */
  int flag = 0;
  for (int i = 0; i < 1000 && !flag; i++)
    OK(tiers_mbc_testall(m, nr, rq, &flag, NULL));
  if (!flag)
    OK(tiers_mbc_waitall(m, nr, rq, NULL));
  for (int i = 0; i < nr; i++)
    CHECK(rq[i] == NULL, "request %d not released", i);
  for (int s = 0; s < size; s++)
    for (int k = 0; k < K; k++)
      CHECK(verify(rb + len * ((size_t)s * K + k), len, s, rank, k), "message %d from %d wrong",
            k, s);
  free(rb);
  free(sb);
  free(rq);
}

static void t_fifo(tiers_mbc_t m, int K)
{
  /* (a) wrap-around: K messages of 1000 B to the right neighbour, FIFO 4 KiB,
   * receiver late: the sender must wait for room */
  int to = (rank + 1) % size, from = (rank - 1 + size) % size;
  size_t len = 1000;
  unsigned char *sb = malloc(len * K), rb[1000];
  tiers_mbc_request_t *rq = calloc((size_t)K, sizeof *rq);
  for (int k = 0; k < K; k++) {
    fill(sb + len * k, len, rank, to, k);
    OK(tiers_mbc_isend(m, sb + len * k, len, to, 2, &rq[k]));
  }
  sleep_ms(100); /* the FIFO fills; sends wait */
  for (int k = 0; k < K; k++) {
    tiers_mbc_status_t st;
    OK(tiers_mbc_recv(m, rb, len, from, 2, &st));
    CHECK(verify(rb, len, from, rank, k), "wrap: message %d wrong", k);
  }
  OK(tiers_mbc_waitall(m, K, rq, NULL));
  /* (b) pairwise exchange of messages 64x the FIFO with blocking sends:
   * both send first, then receive (needs the senders to drain each other) */
  if (size >= 2 && rank < 2) {
    int peer = 1 - rank;
    size_t big = 256 * 1024;
    unsigned char *b1 = malloc(big), *b2 = malloc(big);
    fill(b1, big, rank, peer, 9);
    OK(tiers_mbc_send(m, b1, big, peer, 4));
    tiers_mbc_status_t st;
    OK(tiers_mbc_recv(m, b2, big, peer, 4, &st));
    CHECK(verify(b2, big, peer, rank, 9), "exchange: payload wrong");
    free(b1);
    free(b2);
  }
  free(sb);
  free(rq);
}

static void t_race(tiers_mbc_t m, tiers_mbc_stats_t *before)
{
  size_t len = 32768; /* fits the FIFO whole: one chunk, no waiting */
  unsigned char *b = malloc(len);
  /* phase 1 (forced): rank 1 created m with debug_fifo_first = 1 */
  for (int phase = 0; phase < 2; phase++) {
    tiers_mbc_request_t r = NULL;
    if (rank == 0) {
      memset(b, 0, len);
      OK(tiers_mbc_irecv(m, b, len, 1, 5, &r));
    }
    MPI_Barrier(MPI_COMM_WORLD); /* the send request is in rank 1's FIFO */
    if (rank == 1) {
      fill(b, len, 1, 0, phase);
      OK(tiers_mbc_send(m, b, len, 0, 5));
    }
    if (rank == 0) {
      tiers_mbc_status_t st;
      OK(tiers_mbc_wait(m, &r, &st));
      CHECK(st.bytes == len && verify(b, len, 1, 0, phase), "race phase %d: payload wrong",
            phase);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (phase == 0)
      tiers_mbc_stats(m, TIERS_MBC_LOCAL, before); /* counters after the forced phase */
  }
  free(b);
}

static void t_mixed(tiers_mbc_t m, int K)
{
  /* rank 1 sends K messages to rank 0 with tags k%4; rank 0 posts, before
   * the sends, receives for tag 0 (asked), one ANY_SOURCE for tag 1, and
   * takes the rest after.  Payload sizes alternate around direct_min_bytes. */
  size_t maxlen = 8192;
  if (rank > 1) {
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
  if (rank == 1) {
    MPI_Barrier(MPI_COMM_WORLD);
    unsigned char *b = malloc(maxlen * K);
    tiers_mbc_request_t *rq = calloc((size_t)K, sizeof *rq);
    for (int k = 0; k < K; k++) {
      size_t n = (k % 3 == 0) ? 8192 : (k % 3 == 1 ? 100 : 0);
      fill(b + maxlen * k, n, 1, 0, k);
      OK(tiers_mbc_isend(m, b + maxlen * k, n, 0, k % 4, &rq[k]));
    }
    OK(tiers_mbc_waitall(m, K, rq, NULL));
    free(b);
    free(rq);
    return;
  }
  unsigned char *b = malloc(maxlen * K);
  tiers_mbc_request_t *rq = calloc((size_t)K, sizeof *rq);
  int *which = calloc((size_t)K, sizeof *which); /* message k -> receive index */
  int nr = 0;
  int n0 = (K + 3) / 4;
  for (int i = 0; i < n0; i++)
    { OK(tiers_mbc_irecv(m, b + maxlen * (size_t)nr, maxlen, 1, 0, &rq[nr])); nr++; }
  { OK(tiers_mbc_irecv(m, b + maxlen * (size_t)nr, maxlen, TIERS_MBC_ANY_SOURCE, 1, &rq[nr])); nr++; }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 1 + 4; k < K; k += 4) /* later tag-1 messages: asked after the wildcard */
    { OK(tiers_mbc_irecv(m, b + maxlen * (size_t)nr, maxlen, 1, 1, &rq[nr])); nr++; }
  for (int k = 0; k < K; k++)
    if (k % 4 >= 2)
      { OK(tiers_mbc_irecv(m, b + maxlen * (size_t)nr, maxlen, 1, k % 4, &rq[nr])); nr++; }
  tiers_mbc_status_t *st = calloc((size_t)nr, sizeof *st);
  OK(tiers_mbc_waitall(m, nr, rq, st));
  /* receive i got message seq from its payload; check each message once, in
   * order within each tag */
  long last[4] = {-1, -1, -1, -1};
  for (int i = 0; i < nr; i++) {
    int tag = st[i].tag;
    size_t n = st[i].bytes;
    long seq = n >= 8 ? seq_of(b + maxlen * (size_t)i) : -1;
    if (n >= 8) {
      CHECK(tag >= 0 && tag < 4 && seq % 4 == tag && seq > last[tag] &&
                verify(b + maxlen * (size_t)i, n, 1, 0, seq),
            "mixed: receive %d got seq %ld tag %d out of order", i, seq, tag);
      if (tag >= 0 && tag < 4)
        last[tag] = seq;
    }
  }
  free(st);
  free(b);
  free(rq);
  free(which);
}

static const size_t single_sizes[] = {100000, 10,    70000, 0, 20000,   5000,    300000,
                                      16383,  16384, 65,    3, 1 << 20, 1 << 20, 40};
#define NSINGLE (sizeof single_sizes / sizeof single_sizes[0])

static void t_single(tiers_mbc_t m)
{
  int to = (rank + 1) % size, from = (rank - 1 + size) % size;
  /* 1. every message sent before any receive: the long ones wait in the
   * sender's buffers, announced in the FIFO, the short ones in the FIFO */
  unsigned char *sb[NSINGLE], *rb[NSINGLE];
  tiers_mbc_request_t sr[NSINGLE], rr[NSINGLE];
  for (size_t i = 0; i < NSINGLE; i++) {
    sb[i] = malloc(single_sizes[i] + 1);
    rb[i] = malloc(single_sizes[i] + 16);
    memset(rb[i], 0xEE, single_sizes[i] + 16);
    fill(sb[i], single_sizes[i], rank, to, (long)i);
    OK(tiers_mbc_isend(m, sb[i], single_sizes[i], to, 9, &sr[i]));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (size_t i = 0; i < NSINGLE; i++) {
    /* a third by source and tag, a third ANY_SOURCE, a third ANY_TAG; only
     * `from` sends to me, so each must take the next message in order */
    int src = i % 3 == 1 ? TIERS_MBC_ANY_SOURCE : from;
    int tag = i % 3 == 2 ? TIERS_MBC_ANY_TAG : 9;
    OK(tiers_mbc_irecv(m, rb[i], single_sizes[i], src, tag, &rr[i]));
  }
  tiers_mbc_status_t rst[NSINGLE];
  OK(tiers_mbc_waitall(m, (int)NSINGLE, rr, rst));
  OK(tiers_mbc_waitall(m, (int)NSINGLE, sr, NULL));
  for (size_t i = 0; i < NSINGLE; i++) {
    size_t n = single_sizes[i];
    CHECK(rst[i].source == from && rst[i].tag == 9 && rst[i].bytes == n && !rst[i].truncated,
          "message %zu: status source %d tag %d bytes %zu", i, rst[i].source, rst[i].tag,
          rst[i].bytes);
    CHECK(verify(rb[i], n, from, rank, (long)i),
          "message %zu (%zu B): payload wrong or out of order", i, n);
    CHECK(rb[i][n] == 0xEE, "message %zu: byte past the message written", i);
    free(sb[i]);
    free(rb[i]);
  }
  /* 2. a long send left to be read completes only after the copy.  Nobody
   * waits meanwhile (a rank still waiting in part 1 would, idle, copy the
   * message into its own memory and so complete the send early) */
  size_t len = 256 * 1024;
  unsigned char *b = malloc(len), *r = malloc(len);
  fill(b, len, rank, to, 1000);
  MPI_Barrier(MPI_COMM_WORLD);
  tiers_mbc_stats_t before, after;
  OK(tiers_mbc_stats(m, TIERS_MBC_LOCAL, &before));
  tiers_mbc_request_t q = NULL, rq = NULL;
  OK(tiers_mbc_isend(m, b, len, to, 10, &q));
  OK(tiers_mbc_stats(m, TIERS_MBC_LOCAL, &after));
  int early = 0, flag = 0;
  for (int k = 0; k < 30 && !early; k++) { /* nobody has posted the receive yet */
    OK(tiers_mbc_test(m, &q, &flag, NULL));
    early = flag;
    sleep_ms(1);
  }
  if (after.msgs_read > before.msgs_read)
    CHECK(!early, "a send left to be read completed before its receive was posted");
  MPI_Barrier(MPI_COMM_WORLD);
  OK(tiers_mbc_irecv(m, r, len, from, 10, &rq));
  if (!early)
    OK(tiers_mbc_wait(m, &q, NULL));
  memset(b, 0xAB, len); /* the receiver has its copy: the buffer is mine again */
  tiers_mbc_status_t st;
  OK(tiers_mbc_wait(m, &rq, &st));
  CHECK(st.bytes == len && verify(r, len, from, rank, 1000), "held send: payload wrong");
  MPI_Barrier(MPI_COMM_WORLD);
  /* 3. a long blocking send to myself before the receive: buffered, not held */
  fill(b, len, rank, rank, 2000);
  OK(tiers_mbc_send(m, b, len, rank, 11));
  memset(r, 0, len);
  OK(tiers_mbc_recv(m, r, len, rank, 11, &st));
  CHECK(st.bytes == len && verify(r, len, rank, rank, 2000), "send to self: payload wrong");
  free(b);
  free(r);
}

static void t_barrier(tiers_mbc_t m, int R)
{
  /* arrival counter in a shared window */
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Win win;
  _Atomic long *cnt;
  MPI_Win_allocate_shared(rank == 0 ? 64 : 0, 1, MPI_INFO_NULL, node, &cnt, &win);
  MPI_Aint sz;
  int du;
  MPI_Win_shared_query(win, 0, &sz, &du, &cnt);
  if (rank == 0)
    atomic_store(cnt, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < R; k++) {
    if (k % size == rank)
      sleep_ms(5);
    atomic_fetch_add(cnt, 1);
    OK(tiers_mbc_barrier(m));
    long seen = atomic_load(cnt);
    CHECK(seen >= (long)(k + 1) * size, "barrier %d left with %ld arrivals of %ld", k, seen,
          (long)(k + 1) * size);
  }
  OK(tiers_mbc_barrier(m));
  MPI_Win_free(&win);
  MPI_Comm_free(&node);
}

static void t_allreduce(tiers_mbc_t m)
{
  enum { C = 7 };
  long n = size;
  int32_t i32[C], o32[C];
  int64_t i64[C], o64[C];
  double dd[C], od[C];
  for (int op = 0; op < 3; op++) {
    for (int i = 0; i < C; i++) {
      i32[i] = (rank + 1) * (i + 1);
      i64[i] = ((int64_t)1 << 40) + (int64_t)(rank + 1) * (i + 1);
      dd[i] = 0.5 * (rank + 1) * (i + 1);
    }
    OK(tiers_mbc_allreduce(m, i32, o32, C, TIERS_MBC_INT32, op));
    OK(tiers_mbc_allreduce(m, i64, o64, C, TIERS_MBC_INT64, op));
    OK(tiers_mbc_allreduce(m, dd, dd, C, TIERS_MBC_DOUBLE, op)); /* in place */
    memcpy(od, dd, sizeof od);
    for (int i = 0; i < C; i++) {
      long f = i + 1;
      long e = op == TIERS_MBC_SUM ? n * (n + 1) / 2 * f : op == TIERS_MBC_MIN ? f : n * f;
      int64_t e64 = op == TIERS_MBC_SUM ? ((int64_t)1 << 40) * n + e : ((int64_t)1 << 40) + e;
      CHECK(o32[i] == e, "int32 op %d [%d]: %d != %ld", op, i, o32[i], e);
      CHECK(o64[i] == e64, "int64 op %d [%d]: %lld != %lld", op, i, (long long)o64[i],
            (long long)e64);
      CHECK(od[i] == 0.5 * (double)e, "double op %d [%d]: %g != %g", op, i, od[i], 0.5 * e);
    }
  }
  OK(tiers_mbc_allreduce(m, NULL, NULL, 0, TIERS_MBC_DOUBLE, TIERS_MBC_SUM));
}

static void t_truncate(tiers_mbc_t m)
{
  /* rank 1 -> rank 0: big posted (direct path), small posted (answered via
   * FIFO), big late (FIFO, chunked), small late (FIFO) */
  const size_t lens[4] = {65536, 100, 65536, 100};
  const size_t caps[4] = {40000, 60, 40000, 60};
  for (int c = 0; c < 4; c++) {
    int late = c >= 2;
    tiers_mbc_request_t r = NULL;
    unsigned char *b = malloc(caps[c] + 64);
    if (rank == 0) {
      memset(b, 0xEE, caps[c] + 64);
      if (!late)
        OK(tiers_mbc_irecv(m, b, caps[c], 1, 6, &r));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    unsigned char *s = NULL;
    tiers_mbc_request_t sr = NULL;
    if (rank == 1) { /* non-blocking: a late receiver drains only after the barrier */
      s = malloc(lens[c]);
      fill(s, lens[c], 1, 0, c);
      OK(tiers_mbc_isend(m, s, lens[c], 0, 6, &sr));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      OK(tiers_mbc_wait(m, &sr, NULL));
      free(s);
    }
    if (rank == 0) {
      if (late)
        OK(tiers_mbc_irecv(m, b, caps[c], 1, 6, &r));
      tiers_mbc_status_t st;
      int rc = tiers_mbc_wait(m, &r, &st);
      CHECK(rc == TIERS_ERR_ARG && st.truncated == 1 && st.error == TIERS_ERR_ARG,
            "case %d: truncation not reported (rc %d)", c, rc);
      CHECK(strstr(tiers_last_error(), "truncated") != NULL, "case %d: message '%s'", c,
            tiers_last_error());
      CHECK(st.bytes == caps[c] && st.message_bytes == lens[c], "case %d: bytes %zu/%zu", c,
            st.bytes, st.message_bytes);
      CHECK(verify(b, caps[c], 1, 0, c), "case %d: stored part wrong", c);
      int past = 0;
      for (int i = 0; i < 64; i++)
        past |= b[caps[c] + (size_t)i] != 0xEE;
      CHECK(!past, "case %d: wrote past the receive buffer", c);
      CHECK(r == NULL, "case %d: request not released", c);
    }
    free(b);
  }
}

static void t_badargs(tiers_mbc_t m)
{
  char b[16] = {0};
  tiers_mbc_request_t r = (tiers_mbc_request_t)1;
  CHECK(tiers_mbc_isend(m, b, 1, size, 0, &r) == TIERS_ERR_ARG && r == NULL, "dest == size");
  CHECK(tiers_mbc_isend(m, b, 1, -1, 0, &r) == TIERS_ERR_ARG, "dest -1");
  CHECK(tiers_mbc_isend(m, b, 1, 0, -3, &r) == TIERS_ERR_ARG, "negative tag");
  CHECK(tiers_mbc_isend(m, b, 1, 0, TIERS_MBC_ANY_TAG, &r) == TIERS_ERR_ARG, "send ANY_TAG");
  CHECK(tiers_mbc_isend(m, NULL, 4, 0, 0, &r) == TIERS_ERR_ARG, "NULL send buffer");
  CHECK(tiers_mbc_irecv(m, b, 1, size + 3, 0, &r) == TIERS_ERR_ARG, "source out of range");
  CHECK(tiers_mbc_irecv(m, b, 1, -7, 0, &r) == TIERS_ERR_ARG, "source -7");
  CHECK(tiers_mbc_irecv(m, b, 1, 0, -9, &r) == TIERS_ERR_ARG, "receive tag -9");
  CHECK(tiers_mbc_irecv(m, NULL, 8, 0, 0, &r) == TIERS_ERR_ARG, "NULL receive buffer");
  CHECK(strstr(tiers_last_error(), "NULL") != NULL, "message names NULL: %s", tiers_last_error());
  CHECK(tiers_mbc_send(NULL, b, 1, 0, 0) == TIERS_ERR_ARG, "NULL handle");
  CHECK(tiers_mbc_barrier(NULL) == TIERS_ERR_ARG, "barrier NULL handle");
  CHECK(tiers_mbc_allreduce(m, b, b, 1, 99, TIERS_MBC_SUM) == TIERS_ERR_ARG, "bad type");
  CHECK(tiers_mbc_allreduce(m, b, b, 1, TIERS_MBC_INT32, 42) == TIERS_ERR_ARG, "bad op");
  CHECK(tiers_mbc_allreduce(m, b, b, -1, TIERS_MBC_INT32, TIERS_MBC_SUM) == TIERS_ERR_ARG,
        "negative count");
  tiers_mbc_request_t null = NULL;
  tiers_mbc_status_t st;
  CHECK(tiers_mbc_wait(m, &null, &st) == TIERS_OK && st.source == TIERS_MBC_ANY_SOURCE &&
            st.bytes == 0,
        "wait on NULL request");
  CHECK(tiers_mbc_stats(m, 7, (tiers_mbc_stats_t *)b) == TIERS_ERR_ARG, "bad stats scope");
  /* bad options: every rank refuses before any collective step */
  tiers_mbc_options_t o;
  tiers_mbc_options_init(&o);
  o.fifo_bytes = 10;
  tiers_mbc_t bad = (tiers_mbc_t)1;
  CHECK(tiers_mbc_create(MPI_COMM_WORLD, &o, &bad) == TIERS_ERR_ARG && bad == NULL,
        "fifo_bytes 10 accepted");
  tiers_mbc_options_init(&o);
  o.request_slots = 1;
  CHECK(tiers_mbc_create(MPI_COMM_WORLD, &o, &bad) == TIERS_ERR_ARG, "request_slots 1 accepted");
  CHECK(tiers_mbc_create(MPI_COMM_WORLD, NULL, NULL) == TIERS_ERR_ARG, "NULL out accepted");
  /* use after destroy: a second communicator, destroyed, then used */
  tiers_mbc_t m2;
  OK(tiers_mbc_create(MPI_COMM_WORLD, NULL, &m2));
  tiers_mbc_t stale = m2;
  OK(tiers_mbc_destroy(&m2));
  CHECK(m2 == NULL, "destroy did not clear the handle");
  /* a copy of the handle made before destroy: refused, nothing touched */
  CHECK(tiers_mbc_send(stale, b, 1, 0, 0) == TIERS_ERR_STATE, "send on a stale handle");
  CHECK(strstr(tiers_last_error(), "destroyed") != NULL, "message: %s", tiers_last_error());
  CHECK(tiers_mbc_irecv(stale, b, 1, 0, 0, &r) == TIERS_ERR_STATE, "irecv on a stale handle");
  CHECK(tiers_mbc_barrier(stale) == TIERS_ERR_STATE, "barrier on a stale handle");
  CHECK(tiers_mbc_destroy(&stale) == TIERS_ERR_STATE && stale == NULL,
        "second destroy of a stale handle");
  CHECK(tiers_mbc_send(m2, b, 1, 0, 0) == TIERS_ERR_ARG, "send after destroy");
  CHECK(strstr(tiers_last_error(), "destroyed") != NULL, "message: %s", tiers_last_error());
  CHECK(tiers_mbc_destroy(&m2) == TIERS_OK && tiers_mbc_destroy(NULL) == TIERS_OK,
        "destroy of NULL");
}

static void t_timeout(tiers_mbc_t m)
{
  if (rank == 0 && size > 1) {
    char b[8];
    tiers_mbc_request_t r;
    OK(tiers_mbc_irecv(m, b, sizeof b, 1, 11, &r));
    int rc = tiers_mbc_wait(m, &r, NULL);
    CHECK(rc == TIERS_ERR_STATE && r != NULL, "wait without a sender returned %d", rc);
    CHECK(strstr(tiers_last_error(), "time limit") != NULL, "message: %s", tiers_last_error());
    MPI_Barrier(MPI_COMM_WORLD);
    OK(tiers_mbc_wait(m, &r, NULL));
    CHECK(memcmp(b, "late msg", 8) == 0, "late message wrong");
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1)
      OK(tiers_mbc_send(m, "late msg", 8, 0, 11));
  }
}

static void t_peer_exit(tiers_mbc_t m)
{
  int victim = size - 1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == victim) {
    fflush(stdout);
    _exit(0); /* gone without tiers_mbc_destroy or MPI_Finalize */
  }
  char b[8];
  tiers_mbc_status_t st;
  double t0 = MPI_Wtime();
  int rc = tiers_mbc_recv(m, b, sizeof b, victim, 1, &st);
  double dt = MPI_Wtime() - t0;
  char msg[256];
  snprintf(msg, sizeof msg, "%s", tiers_last_error());
  int drc = tiers_mbc_destroy(&m);
  tiers_json_t j;
  tiers_json_init(&j, stdout);
  tiers_json_object_begin(&j);
  tiers_json_kv_string(&j, "schema", "tiers.mbc-check/1");
  tiers_json_kv_string(&j, "test", "peer-exit");
  tiers_json_kv_int(&j, "rank", rank);
  tiers_json_kv_int(&j, "victim", victim);
  tiers_json_kv_int(&j, "rc", rc);
  tiers_json_kv_string(&j, "message", msg);
  tiers_json_kv_double(&j, "seconds", dt);
  tiers_json_kv_int(&j, "destroy_rc", drc);
  tiers_json_kv_bool(&j, "handle_cleared", m == NULL);
  tiers_json_object_end(&j);
  tiers_json_finish(&j);
  fflush(stdout);
  _exit(0); /* MPI cannot finalise with a peer gone */
}

/* ------------------------------------------------------------------ */

static void json_stats(tiers_json_t *j, const tiers_mbc_stats_t *s)
{
  tiers_json_object_begin(j);
#define U(f) tiers_json_kv_int(j, #f, (int64_t)s->f)
  U(msgs_sent); U(bytes_sent); U(msgs_direct); U(bytes_direct); U(msgs_fifo); U(bytes_fifo);
  U(msgs_answered_fifo); U(bytes_answered_fifo); U(fifo_chunks); U(fifo_full_waits);
  U(requests_sent); U(requests_received); U(requests_used); U(requests_stale);
  U(requests_unsent); U(msgs_received); U(bytes_received); U(msgs_unexpected); U(truncations);
  U(msgs_shm); U(bytes_shm); U(msgs_rma); U(bytes_rma); U(msgs_read); U(bytes_read);
#undef U
  tiers_json_kv_double(j, "elapsed_s", s->elapsed_s);
  tiers_json_kv_double(j, "data_rate_Bps", s->data_rate_Bps);
  tiers_json_kv_double(j, "msg_rate_per_s", s->msg_rate_per_s);
  tiers_json_kv_double(j, "direct_share", s->direct_share);
  tiers_json_object_end(j);
}

static void usage(void)
{
  tiers_tool_fail("usage: tiers-mbc-check TEST [--fifo-bytes N] [--direct auto|off] "
                  "[--timeout S] [--count K] [--transport auto|shm|rma]; TEST: ordering "
                  "wildcards sizes many fifo race mixed single barrier allreduce truncate "
                  "badargs timeout peer-exit");
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  tiers_tool_help(argc, argv,
                  "usage: mpirun -n P tiers-mbc-check TEST [--fifo-bytes N] "
                  "[--direct auto|off]\n"
                  "           [--timeout S] [--count K] [--transport auto|shm|rma]\n"
                  "TEST: ordering wildcards sizes many fifo race mixed single barrier\n"
                  "      allreduce truncate badargs timeout peer-exit\n"
                  "Multi-rank self-test of tiers memory-based messaging; prints a\n"
                  "tiers.mbc-check/1 document.\n");
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2)
    usage();
  const char *test = argv[1];
  tiers_mbc_options_t o;
  if (tiers_mbc_options_init(&o) != TIERS_OK)
    tiers_tool_fail_last("options");
  int K = 50;
  for (int i = 2; i < argc; i++) {
    uint64_t v;
    double d;
    long l;
    if (!strcmp(argv[i], "--fifo-bytes") && i + 1 < argc && !tiers_parse_size(argv[i + 1], &v))
      o.fifo_bytes = (size_t)v, i++;
    else if (!strcmp(argv[i], "--direct") && i + 1 < argc)
      o.direct = !strcmp(argv[++i], "off") ? TIERS_MBC_DIRECT_OFF : TIERS_MBC_DIRECT_AUTO;
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc && !tiers_parse_double(argv[i + 1], &d))
      o.timeout_s = d, i++;
    else if (!strcmp(argv[i], "--count") && i + 1 < argc && !tiers_parse_long(argv[i + 1], &l) &&
             l > 0)
      K = (int)l, i++;
    else if (!strcmp(argv[i], "--transport") && i + 1 < argc) {
      const char *v = argv[++i];
      if (!strcmp(v, "auto"))
        o.transport = TIERS_MBC_TRANSPORT_AUTO;
      else if (!strcmp(v, "shm"))
        o.transport = TIERS_MBC_TRANSPORT_SHM;
      else if (!strcmp(v, "rma"))
        o.transport = TIERS_MBC_TRANSPORT_RMA;
      else
        usage();
    }
    else
      usage();
  }
  int needs2 = !strcmp(test, "race") || !strcmp(test, "single") || !strcmp(test, "mixed") ||
               !strcmp(test, "truncate") || !strcmp(test, "timeout") ||
               !strcmp(test, "peer-exit");
  if (needs2 && size < 2)
    tiers_tool_fail("test %s needs at least 2 ranks", test);
  if (!strcmp(test, "fifo"))
    o.fifo_bytes = 4096;
  if (!strcmp(test, "mixed"))
    o.direct_min_bytes = 4096; /* its 8 KiB messages go direct, 100 B ones answered */
  if (!strcmp(test, "race") && rank == 1)
    o.debug_fifo_first = 1;
  if (!strcmp(test, "timeout"))
    o.timeout_s = 0.5;
  if (o.timeout_s == 0)
    o.timeout_s = 120; /* a test never hangs */

  tiers_mbc_t m;
  if (tiers_mbc_create(MPI_COMM_WORLD, &o, &m) != TIERS_OK)
    tiers_tool_fail_last("tiers_mbc_create");
  if (!strcmp(test, "peer-exit"))
    t_peer_exit(m); /* does not return */
  tiers_mbc_stats_t race_before;
  memset(&race_before, 0, sizeof race_before);
  if (!strcmp(test, "ordering")) t_ordering(m, K);
  else if (!strcmp(test, "wildcards")) t_wildcards(m, K);
  else if (!strcmp(test, "sizes")) t_sizes(m);
  else if (!strcmp(test, "many")) t_many(m, K * 10);
  else if (!strcmp(test, "fifo")) t_fifo(m, K);
  else if (!strcmp(test, "race")) t_race(m, &race_before);
  else if (!strcmp(test, "mixed")) t_mixed(m, K);
  else if (!strcmp(test, "single")) t_single(m);
  else if (!strcmp(test, "barrier")) t_barrier(m, K);
  else if (!strcmp(test, "allreduce")) t_allreduce(m);
  else if (!strcmp(test, "truncate")) t_truncate(m);
  else if (!strcmp(test, "badargs")) t_badargs(m);
  else if (!strcmp(test, "timeout")) t_timeout(m);
  else usage();

  tiers_mbc_stats_t mine, total;
  const char *tname = "?";
  OK(tiers_mbc_transport_name(m, &tname));
  OK(tiers_mbc_stats(m, TIERS_MBC_LOCAL, &mine));
  OK(tiers_mbc_stats(m, TIERS_MBC_GLOBAL, &total));
  OK(tiers_mbc_destroy(&m));

  /* gather results at rank 0 */
  long cw[2] = {checked, wrong}, cwsum[2];
  MPI_Reduce(cw, cwsum, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  char *allfails = rank == 0 ? calloc((size_t)size, sizeof fails) : NULL;
  int *nf = rank == 0 ? calloc((size_t)size, sizeof *nf) : NULL;
  MPI_Gather(fails, (int)sizeof fails, MPI_CHAR, allfails, (int)sizeof fails, MPI_CHAR, 0,
             MPI_COMM_WORLD);
  MPI_Gather(&nfail, 1, MPI_INT, nf, 1, MPI_INT, 0, MPI_COMM_WORLD);
  tiers_mbc_stats_t *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
  tiers_mbc_stats_t *rb = rank == 0 ? calloc((size_t)size, sizeof *rb) : NULL;
  MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0,
             MPI_COMM_WORLD);
  MPI_Gather(&race_before, (int)sizeof mine, MPI_BYTE, rb, (int)sizeof mine, MPI_BYTE, 0,
             MPI_COMM_WORLD);
  long bad = wrong;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    tiers_json_t j;
    tiers_json_init(&j, stdout);
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "schema", "tiers.mbc-check/1");
    tiers_json_kv_string(&j, "test", test);
    tiers_json_kv_int(&j, "ranks", size);
    tiers_json_kv_int(&j, "count", K);
    tiers_json_kv_int(&j, "fifo_bytes", (int64_t)o.fifo_bytes);
    tiers_json_kv_int(&j, "direct_available", total.direct_available);
    tiers_json_kv_string(&j, "transport", tname);
    tiers_json_kv_int(&j, "checked", cwsum[0]);
    tiers_json_kv_int(&j, "wrong", cwsum[1]);
    tiers_json_key(&j, "failures");
    tiers_json_array_begin(&j);
    for (int p = 0; p < size; p++)
      for (int i = 0; i < nf[p] && i < MAX_FAIL; i++)
        tiers_json_string(&j, allfails + (size_t)p * sizeof fails + (size_t)i * sizeof fails[0]);
    tiers_json_array_end(&j);
    tiers_json_key(&j, "stats");
    tiers_json_array_begin(&j);
    for (int p = 0; p < size; p++)
      json_stats(&j, &all[p]);
    tiers_json_array_end(&j);
    tiers_json_key(&j, "total");
    json_stats(&j, &total);
    if (!strcmp(test, "race")) {
      tiers_json_key(&j, "after_forced_phase");
      tiers_json_array_begin(&j);
      for (int p = 0; p < size; p++)
        json_stats(&j, &rb[p]);
      tiers_json_array_end(&j);
    }
    tiers_json_kv_bool(&j, "ok", cwsum[1] == 0);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
    fflush(stdout);
  }
  free(allfails);
  free(nf);
  free(all);
  free(rb);
  MPI_Finalize();
  return bad ? 1 : 0;
}
