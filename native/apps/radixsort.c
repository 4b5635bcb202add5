/*
 * tiers-radixsort: seed 004's parallel radix sort (§5: 4M integers, flat
 * and hybrid), in the COMPaS hybrid model.
 *
 *   mpirun -n P tiers-radixsort [--size N] [--bits 8|11] [--seed S]
 *       [--threads T] [--pin none|compact|scatter] [--verify | --no-verify]
 *       [--quick] [--comm mpi|mbc]
 *
 * Keys: N unsigned 32-bit keys (default 4M = 4 x 2^20; --size accepts
 * suffixes K, M, G as powers of 1024), block-distributed over the
 * processes (tiers_split_range).  Key g of the global sequence is the top
 * half of SplitMix64's output for counter mix(seed) + g, so the keys, and
 * every checksum below, depend only on --seed and --size, never on the
 * process or thread count.  --quick sorts 2^18 keys.
 *
 * Sort: least-significant-digit radix sort with 8-bit (4 passes) or
 * 11-bit (3 passes: 11, 11, 10 bits) digits.  Every pass:
 *  1. local stable counting sort by the digit, team-parallel (each thread
 *     histograms its slice; the master turns the per-thread histograms into
 *     scatter offsets; each thread scatters its slice);
 *  2. global counts: MPI_Allreduce of the local histogram gives where each
 *     digit starts in the global order, MPI_Exscan gives how many keys of
 *     each digit the lower ranks hold, so every local key knows its global
 *     position;
 *  3. key exchange: process d owns global positions [lo_d, hi_d) (the same
 *     block split as the input), the locally sorted buffer is cut at those
 *     boundaries (MPI_Alltoall of the counts) and sent with MPI_Alltoallv;
 *  4. what a process receives is, per source rank, in digit order; one more
 *     stable counting sort by the same digit interleaves the sources into
 *     the global order (skipped when all keys came from one source, e.g. on
 *     one process).
 * At the end process p holds the p-th block of the globally sorted keys.
 * Steps 2-3 are the master thread's, in exchange_counts() and
 * exchange_keys(); the verification's reductions are in reduce_checksum()
 * and check_boundaries(): those four functions are all the communication.
 *
 * --comm mbc sends steps 2-3 through tiers' memory-based layer
 * (tiers/mbc.h, seed 001) as point-to-point messages: every process sends
 * its digit histogram to every other one (an allgather from which each
 * process sums the global counts and the counts of the lower ranks, the
 * Allreduce and the Exscan above, exactly, in integers), then its key
 * count for each destination, then the keys themselves (receives posted
 * before the sends, so that runs of 16 KiB and more can go by direct
 * remote write; empty runs are not sent, since both ends know they are
 * empty).  The sorted result is the same as with MPI, and so are the
 * checksums.  The verification (reduce_checksum, check_boundaries, the
 * serial comparison) stays on MPI in both modes: it checks the sort with
 * a channel independent of the one under test.
 *
 * Verification: every process's block is sorted; the last key of each
 * process is at most the first key of the next (neighbour exchange); the
 * key multiset is unchanged: the key count and two commutative hashes of
 * the keys (sum and xor of SplitMix64(key), mod 2^64) are equal before and
 * after the sort.  With --verify (default up to 2^20 keys), rank 0 also
 * gathers the result and compares it with qsort() of the regenerated keys.
 * A failure exits 3 and says what differs.
 *
 * Figure of merit: Mkeys/s = N / time / 1e6 (time: the slowest process's
 * time of the passes, excluding generation and verification).
 *
 * Output: the tiers.app/1 document of hybrid_app.h; "result" holds keys,
 * bits, passes, seed, checksum and checksum_xor (hex strings), min_key,
 * max_key and exchange_bytes_mean (bytes a process sent to other processes
 * over all passes, mean over processes).
 */
#include <inttypes.h>
#include <limits.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "hybrid_app.h"

#define DEFAULT_KEYS (4L << 20)
#define QUICK_KEYS (1L << 18)
#define VERIFY_AUTO_LIMIT (1L << 20)

/* SplitMix64's output function (Steele, Lea, Flood 2014). */
static inline uint64_t mix64(uint64_t z)
{
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static inline uint32_t key_at(uint64_t base, uint64_t g)
{
  return (uint32_t)(mix64(base + g) >> 32);
}

typedef struct sort_run {
  long N, n;          /* keys in all, keys here */
  long g0;            /* global index of this process's first key */
  int bits, passes;
  uint64_t seed, base;
  int nprocs, rank, nthreads;
  MPI_Comm comm;
  tiers_barrier_t bar;
  uint32_t *keys, *tmp, *recv;
  long *thist;        /* nthreads x radix: per-thread counts, then offsets */
  long *lhist;        /* radix: this process's counts of the current digit */
  long *ghist, *ehist; /* radix: global counts, lower ranks' counts */
  long *block_hi;     /* nprocs: one past the last global position of each */
  int *scounts, *sdispls, *rcounts, *rdispls;
  tiers_mbc_t mbc;    /* --comm mbc: the sort's messages; else NULL */
  long *allhist;      /* --comm mbc: nprocs x radix, every process's lhist */
  tiers_mbc_request_t *reqs; /* --comm mbc: 2 nprocs */
  int multi_source;   /* this pass received from more than one process */
  int64_t sent_bytes; /* to other processes, all passes */
  int rc;
  /* verification, per thread */
  uint64_t *hsum, *hxor;
  int64_t *unsorted;
  uint32_t *kmin, *kmax;
} sort_run_t;

static void team_sync(sort_run_t *S, tiers_team_t team)
{
  if (S->nthreads == 1)
    return;
  tiers_phase_t prev = tiers_team_phase(team, TIERS_PHASE_SYNC);
  tiers_barrier_wait(S->bar);
  if (prev != TIERS_PHASE_COUNT)
    tiers_team_phase(team, prev);
}

/* Stable counting sort of in[0..n) by the digit at @p shift into out,
 * by all threads; leaves the digit's counts in S->lhist. */
static int counting_sort(sort_run_t *S, tiers_team_t team, int t, const uint32_t *in,
                         uint32_t *out, long n, int shift, int bits)
{
  const long radix = 1L << bits;
  const uint32_t mask = (uint32_t)(radix - 1);
  long lo, hi;
  TIERS_CALL(tiers_team_split(team, n, t, &lo, &hi));
  long *h = S->thist + (size_t)t * (size_t)radix;
  memset(h, 0, (size_t)radix * sizeof *h);
  for (long i = lo; i < hi; i++)
    h[(in[i] >> shift) & mask]++;
  team_sync(S, team);
  if (t == 0) { /* offsets: digit-major, then thread order (stability) */
    long at = 0;
    for (long b = 0; b < radix; b++) {
      long total = 0;
      for (int u = 0; u < S->nthreads; u++) {
        long *c = S->thist + (size_t)u * (size_t)radix + b;
        long k = *c;
        *c = at;
        at += k;
        total += k;
      }
      S->lhist[b] = total;
    }
  }
  team_sync(S, team);
  for (long i = lo; i < hi; i++)
    out[h[(in[i] >> shift) & mask]++] = in[i];
  team_sync(S, team);
  return TIERS_OK;
}

/* Message tags over mbc (one per kind; per pair, messages keep their
 * order, so passes cannot mix). */
enum { TAG_HIST = 1, TAG_COUNT = 2, TAG_KEYS = 3 };

/* Waits for the @p n requests of S->reqs; a receive that got fewer bytes
 * than it expected is an error too. */
static int wait_mbc(sort_run_t *S, int n, const size_t *expect)
{
  tiers_mbc_status_t st[n > 0 ? n : 1];
  TIERS_CALL(tiers_mbc_waitall(S->mbc, n, S->reqs, st));
  for (int k = 0; k < n; k++)
    if (expect[k] != (size_t)-1 && st[k].bytes != expect[k])
      TIERS_ERROR(TIERS_ERR_STATE, "radixsort: a message from rank %d held %zu bytes, not %zu",
                  st[k].source, st[k].bytes, expect[k]);
  return TIERS_OK;
}

/* The global and the lower ranks' counts over mbc: every process's
 * histogram to every other process, then summed here in integers. */
static int gather_counts_mbc(sort_run_t *S, long radix)
{
  int P = S->nprocs, me = S->rank, n = 0;
  size_t bytes = (size_t)radix * sizeof *S->lhist, expect[2 * P];
  memcpy(S->allhist + (size_t)me * (size_t)radix, S->lhist, bytes);
  for (int p = 0; p < P; p++)
    if (p != me) {
      expect[n] = bytes;
      TIERS_CALL(tiers_mbc_irecv(S->mbc, S->allhist + (size_t)p * (size_t)radix, bytes, p,
                                 TAG_HIST, &S->reqs[n++]));
    }
  for (int k = 1; k < P; k++) {
    expect[n] = (size_t)-1;
    TIERS_CALL(tiers_mbc_isend(S->mbc, S->lhist, bytes, (me + k) % P, TAG_HIST,
                               &S->reqs[n++]));
  }
  TIERS_CALL(wait_mbc(S, n, expect));
  for (long b = 0; b < radix; b++) {
    long below = 0, all = 0;
    for (int p = 0; p < P; p++) {
      long c = S->allhist[(size_t)p * (size_t)radix + (size_t)b];
      below += p < me ? c : 0;
      all += c;
    }
    S->ghist[b] = all;
    S->ehist[b] = below;
  }
  return TIERS_OK;
}

/* Communication 1 (master): the global counts of the digit and the
 * counts at lower ranks, then where each key of the local buffer goes. */
static int exchange_counts(sort_run_t *S, long radix)
{
  if (S->mbc) {
    TIERS_CALL(gather_counts_mbc(S, radix));
  } else {
    if (MPI_Allreduce(S->lhist, S->ghist, (int)radix, MPI_LONG, MPI_SUM, S->comm) !=
            MPI_SUCCESS ||
        MPI_Exscan(S->lhist, S->ehist, (int)radix, MPI_LONG, MPI_SUM, S->comm) != MPI_SUCCESS)
      return TIERS_ERR_MPI;
    if (S->rank == 0) /* MPI_Exscan leaves rank 0's result undefined */
      memset(S->ehist, 0, (size_t)radix * sizeof *S->ehist);
  }
  /* my run of digit b covers global positions [start, start + lhist[b]),
   * increasing along the locally sorted buffer: cut it at the blocks */
  memset(S->scounts, 0, (size_t)S->nprocs * sizeof *S->scounts);
  long before = 0; /* keys of smaller digits, all processes */
  int d = 0;
  for (long b = 0; b < radix; b++) {
    long pos = before + S->ehist[b], left = S->lhist[b];
    before += S->ghist[b];
    while (left > 0) {
      while (pos >= S->block_hi[d])
        d++;
      long take = S->block_hi[d] - pos < left ? S->block_hi[d] - pos : left;
      S->scounts[d] += (int)take;
      pos += take;
      left -= take;
    }
  }
  return TIERS_OK;
}

/* The counts of the key exchange over mbc: one int to every process. */
static int alltoall_counts_mbc(sort_run_t *S)
{
  int P = S->nprocs, me = S->rank, n = 0;
  size_t expect[2 * P];
  S->rcounts[me] = S->scounts[me];
  for (int p = 0; p < P; p++)
    if (p != me) {
      expect[n] = sizeof(int);
      TIERS_CALL(tiers_mbc_irecv(S->mbc, &S->rcounts[p], sizeof(int), p, TAG_COUNT,
                                 &S->reqs[n++]));
    }
  for (int k = 1; k < P; k++) {
    int p = (me + k) % P;
    expect[n] = (size_t)-1;
    TIERS_CALL(tiers_mbc_isend(S->mbc, &S->scounts[p], sizeof(int), p, TAG_COUNT,
                               &S->reqs[n++]));
  }
  return wait_mbc(S, n, expect);
}

/* The keys over mbc, as the displacements say (my own run is copied). */
static int alltoallv_keys_mbc(sort_run_t *S)
{
  int P = S->nprocs, me = S->rank, n = 0;
  size_t expect[2 * P], k4 = sizeof(uint32_t);
  for (int p = 0; p < P; p++)
    if (p != me && S->rcounts[p] > 0) {
      size_t bytes = (size_t)S->rcounts[p] * k4;
      expect[n] = bytes;
      TIERS_CALL(tiers_mbc_irecv(S->mbc, S->recv + S->rdispls[p], bytes, p, TAG_KEYS,
                                 &S->reqs[n++]));
    }
  for (int k = 1; k < P; k++) {
    int p = (me + k) % P;
    if (S->scounts[p] == 0)
      continue;
    expect[n] = (size_t)-1;
    TIERS_CALL(tiers_mbc_isend(S->mbc, S->tmp + S->sdispls[p], (size_t)S->scounts[p] * k4, p,
                               TAG_KEYS, &S->reqs[n++]));
  }
  if (S->scounts[me] > 0)
    memcpy(S->recv + S->rdispls[me], S->tmp + S->sdispls[me], (size_t)S->scounts[me] * k4);
  return wait_mbc(S, n, expect);
}

/* Communication 2 (master): the keys, cut as exchange_counts() said. */
static int exchange_keys(sort_run_t *S)
{
  if (S->mbc)
    TIERS_CALL(alltoall_counts_mbc(S));
  else if (MPI_Alltoall(S->scounts, 1, MPI_INT, S->rcounts, 1, MPI_INT, S->comm) != MPI_SUCCESS)
    return TIERS_ERR_MPI;
  int sd = 0, rd = 0, sources = 0;
  for (int p = 0; p < S->nprocs; p++) {
    S->sdispls[p] = sd;
    S->rdispls[p] = rd;
    sd += S->scounts[p];
    rd += S->rcounts[p];
    sources += S->rcounts[p] > 0;
    if (p != S->rank)
      S->sent_bytes += (int64_t)S->scounts[p] * (int64_t)sizeof(uint32_t);
  }
  S->multi_source = sources > 1;
  if (S->mbc)
    return alltoallv_keys_mbc(S);
  if (MPI_Alltoallv(S->tmp, S->scounts, S->sdispls, MPI_UINT32_T, S->recv, S->rcounts,
                    S->rdispls, MPI_UINT32_T, S->comm) != MPI_SUCCESS)
    return TIERS_ERR_MPI;
  return TIERS_OK;
}

static void swap_keys(uint32_t **a, uint32_t **b)
{
  uint32_t *t = *a;
  *a = *b;
  *b = t;
}

static int sort_body(tiers_team_t team, int t, void *arg)
{
  sort_run_t *S = arg;
  for (int pass = 0; pass < S->passes; pass++) {
    int shift = pass * S->bits;
    int bits = 32 - shift < S->bits ? 32 - shift : S->bits;
    TIERS_CALL(counting_sort(S, team, t, S->keys, S->tmp, S->n, shift, bits));
    if (S->nprocs == 1) {
      if (t == 0)
        swap_keys(&S->keys, &S->tmp);
      team_sync(S, team);
      continue;
    }
    if (t == 0) {
      tiers_phase_t prev = tiers_team_phase(team, TIERS_PHASE_COMM);
      int rc = exchange_counts(S, 1L << bits);
      if (rc == TIERS_OK)
        rc = exchange_keys(S);
      if (rc != TIERS_OK && S->rc == TIERS_OK)
        S->rc = rc;
      tiers_team_phase(team, prev);
    }
    team_sync(S, team);
    if (S->rc != TIERS_OK)
      return S->rc;
    if (S->multi_source) {
      TIERS_CALL(counting_sort(S, team, t, S->recv, S->keys, S->n, shift, bits));
    } else {
      if (t == 0)
        swap_keys(&S->keys, &S->recv);
      team_sync(S, team);
    }
  }
  return TIERS_OK;
}

/* Generates this process's keys (first touch of all three buffers). */
static int generate_body(tiers_team_t team, int t, void *arg)
{
  sort_run_t *S = arg;
  long lo, hi;
  TIERS_CALL(tiers_team_split(team, S->n, t, &lo, &hi));
  for (long i = lo; i < hi; i++) {
    S->keys[i] = key_at(S->base, (uint64_t)(S->g0 + i));
    S->tmp[i] = S->recv[i] = 0;
  }
  return TIERS_OK;
}

/* Per thread: hashes, min, max and out-of-order neighbours of its slice. */
static int check_body(tiers_team_t team, int t, void *arg)
{
  sort_run_t *S = arg;
  long lo, hi;
  TIERS_CALL(tiers_team_split(team, S->n, t, &lo, &hi));
  uint64_t hs = 0, hx = 0;
  int64_t bad = 0;
  uint32_t mn = UINT32_MAX, mx = 0;
  for (long i = lo; i < hi; i++) {
    uint32_t k = S->keys[i];
    uint64_t h = mix64(k);
    hs += h;
    hx ^= h;
    mn = k < mn ? k : mn;
    mx = k > mx ? k : mx;
    if (i + 1 < S->n && k > S->keys[i + 1])
      bad++;
  }
  S->hsum[t] = hs;
  S->hxor[t] = hx;
  S->unsorted[t] = bad;
  S->kmin[t] = mn;
  S->kmax[t] = mx;
  return TIERS_OK;
}

typedef struct checks {
  uint64_t hsum, hxor;
  int64_t count, unsorted;
  uint32_t kmin, kmax;
} checks_t;

/* Communication 3: the checksums, counts and extremes over all processes
 * (after check_body). */
static void reduce_checksum(sort_run_t *S, checks_t *c)
{
  uint64_t h[2] = {0, 0};
  int64_t k[2] = {S->n, 0};
  uint32_t mm[2] = {UINT32_MAX, 0};
  for (int t = 0; t < S->nthreads; t++) {
    h[0] += S->hsum[t];
    h[1] ^= S->hxor[t];
    k[1] += S->unsorted[t];
    mm[0] = S->kmin[t] < mm[0] ? S->kmin[t] : mm[0];
    mm[1] = S->kmax[t] > mm[1] ? S->kmax[t] : mm[1];
  }
  MPI_Allreduce(MPI_IN_PLACE, &h[0], 1, MPI_UINT64_T, MPI_SUM, S->comm);
  MPI_Allreduce(MPI_IN_PLACE, &h[1], 1, MPI_UINT64_T, MPI_BXOR, S->comm);
  MPI_Allreduce(MPI_IN_PLACE, k, 2, MPI_INT64_T, MPI_SUM, S->comm);
  MPI_Allreduce(MPI_IN_PLACE, &mm[0], 1, MPI_UINT32_T, MPI_MIN, S->comm);
  MPI_Allreduce(MPI_IN_PLACE, &mm[1], 1, MPI_UINT32_T, MPI_MAX, S->comm);
  c->hsum = h[0];
  c->hxor = h[1];
  c->count = k[0];
  c->unsorted = k[1];
  c->kmin = mm[0];
  c->kmax = mm[1];
}

/* Communication 4: every process's last key to the next one; returns the
 * number of process boundaries out of order (same on every process). */
static int64_t check_boundaries(sort_run_t *S)
{
  uint32_t last = S->keys[S->n - 1], prev = 0;
  int up = S->rank + 1 < S->nprocs ? S->rank + 1 : MPI_PROC_NULL;
  int down = S->rank > 0 ? S->rank - 1 : MPI_PROC_NULL;
  MPI_Sendrecv(&last, 1, MPI_UINT32_T, up, 7, &prev, 1, MPI_UINT32_T, down, 7, S->comm,
               MPI_STATUS_IGNORE);
  int64_t bad = down != MPI_PROC_NULL && prev > S->keys[0], all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT64_T, MPI_SUM, S->comm);
  return all;
}

static int cmp_u32(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Rank 0 gathers the result and compares it with qsort of the regenerated
 * keys; returns the first differing position, or -1 when equal (same
 * value on every process).  Collective. */
static long serial_compare(app_t *app, sort_run_t *S)
{
  long where = -1;
  uint32_t *all = NULL, *ref = NULL;
  int *counts = NULL, *displs = NULL;
  int bad = 0;
  if (S->rank == 0) {
    all = malloc((size_t)S->N * sizeof *all);
    ref = malloc((size_t)S->N * sizeof *ref);
    counts = malloc((size_t)S->nprocs * sizeof *counts);
    displs = malloc((size_t)S->nprocs * sizeof *displs);
    bad = !all || !ref || !counts || !displs;
  }
  app_check(app, bad, "out of memory for the serial check of %ld keys", S->N);
  if (S->rank == 0)
    for (int p = 0; p < S->nprocs; p++) {
      long lo, hi;
      tiers_split_range(S->N, S->nprocs, p, &lo, &hi);
      counts[p] = (int)(hi - lo);
      displs[p] = (int)lo;
    }
  MPI_Gatherv(S->keys, (int)S->n, MPI_UINT32_T, all, counts, displs, MPI_UINT32_T, 0, S->comm);
  if (S->rank == 0) {
    for (long g = 0; g < S->N; g++)
      ref[g] = key_at(S->base, (uint64_t)g);
    qsort(ref, (size_t)S->N, sizeof *ref, cmp_u32);
    for (long g = 0; g < S->N && where < 0; g++)
      if (all[g] != ref[g])
        where = g;
  }
  MPI_Bcast(&where, 1, MPI_LONG, 0, S->comm);
  free(all);
  free(ref);
  free(counts);
  free(displs);
  return where;
}

/* Collects the checks of the current keys (team-parallel, then reduced). */
static void run_checks(app_t *app, sort_run_t *S, checks_t *c)
{
  int rc = tiers_team_parallel(app->team, check_body, S);
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());
  reduce_checksum(S, c);
}

int main(int argc, char **argv)
{
  app_t app;
  app_init(&app, "tiers-radixsort", &argc, &argv);
  long keys = 0, bits = 8, seed = 1;
  for (int i = 1; i < argc; i++) {
    if (app_common_option(&app, argc, argv, &i))
      continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--size") == 0) {
      uint64_t k = 0;
      app_check(&app, !v || tiers_parse_size(v, &k) != 0 || k < 1 || k > (uint64_t)LONG_MAX,
                "--size needs a positive key count such as 4194304 or 4M (got %s)",
                v ? v : "nothing");
      keys = (long)k;
      i++;
    } else if (strcmp(a, "--bits") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &bits) != 0 || (bits != 8 && bits != 11),
                "--bits must be 8 or 11 (got %s)", v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--seed") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &seed) != 0,
                "--seed needs a non-negative integer (got %s)", v ? v : "nothing");
      i++;
    } else {
      app_check(&app, 1, "unknown option %s (see tiers-radixsort --help)", a);
    }
  }
  app_check(&app, app.opts.grid[0] != 0, "radixsort has no process grid: --grid does not apply");
  app_check(&app, app.opts.overlap, "radixsort has no halo exchange to overlap (--overlap)");
  if (keys == 0)
    keys = app.opts.quick ? QUICK_KEYS : DEFAULT_KEYS;
  app_check(&app, keys < app.size, "--size %ld is smaller than the %d processes: every process "
            "needs at least one key", keys, app.size);
  app_check(&app, keys / app.size + 1 > INT_MAX, "--size %ld puts more than %d keys on a "
            "process: use more processes", keys, INT_MAX);

  app_team(&app, MPI_COMM_WORLD);
  tiers_team_t team = app.team;
  sort_run_t S;
  memset(&S, 0, sizeof S);
  S.N = keys;
  S.bits = (int)bits;
  S.passes = (32 + S.bits - 1) / S.bits;
  S.seed = (uint64_t)seed;
  S.base = mix64(S.seed ^ 0x7261646978736f72ULL); /* "radixsor" */
  S.nprocs = app.size;
  S.rank = app.rank;
  S.nthreads = tiers_team_nthreads(team);
  S.comm = tiers_team_comm(team);
  long hi;
  tiers_split_range(S.N, S.nprocs, S.rank, &S.g0, &hi);
  S.n = hi - S.g0;
  long radix = 1L << S.bits;
  int T = S.nthreads, P = S.nprocs;
  S.keys = malloc((size_t)S.n * sizeof *S.keys);
  S.tmp = malloc((size_t)S.n * sizeof *S.tmp);
  S.recv = malloc((size_t)S.n * sizeof *S.recv);
  S.thist = malloc((size_t)T * (size_t)radix * sizeof *S.thist);
  S.lhist = malloc((size_t)radix * sizeof *S.lhist);
  S.ghist = malloc((size_t)radix * sizeof *S.ghist);
  S.ehist = malloc((size_t)radix * sizeof *S.ehist);
  S.block_hi = malloc((size_t)P * sizeof *S.block_hi);
  S.scounts = malloc((size_t)P * sizeof(int));
  S.sdispls = malloc((size_t)P * sizeof(int));
  S.rcounts = malloc((size_t)P * sizeof(int));
  S.rdispls = malloc((size_t)P * sizeof(int));
  S.hsum = malloc((size_t)T * sizeof *S.hsum);
  S.hxor = malloc((size_t)T * sizeof *S.hxor);
  S.unsorted = malloc((size_t)T * sizeof *S.unsorted);
  S.kmin = malloc((size_t)T * sizeof *S.kmin);
  S.kmax = malloc((size_t)T * sizeof *S.kmax);
  int bad = !S.keys || !S.tmp || !S.recv || !S.thist || !S.lhist || !S.ghist || !S.ehist ||
            !S.block_hi || !S.scounts || !S.sdispls || !S.rcounts || !S.rdispls || !S.hsum ||
            !S.hxor || !S.unsorted || !S.kmin || !S.kmax;
  app_check(&app, bad, "out of memory for %ld keys per process", S.n);
  for (int p = 0; p < P; p++) {
    long lo;
    tiers_split_range(S.N, P, p, &lo, &S.block_hi[p]);
  }
  app_check(&app, tiers_barrier_create(&S.bar, T) != TIERS_OK, "%s", tiers_last_error());
  app_comm(&app); /* --comm mbc: the sort's messages through tiers/mbc.h */
  S.mbc = app.mbc;
  if (S.mbc) {
    S.allhist = malloc((size_t)P * (size_t)radix * sizeof *S.allhist);
    S.reqs = calloc((size_t)(2 * P), sizeof *S.reqs);
  }
  app_check(&app, S.mbc && (!S.allhist || !S.reqs), "out of memory for the --comm mbc "
            "buffers");
  int rc = tiers_team_parallel(team, generate_body, &S);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());
  checks_t before, after;
  run_checks(&app, &S, &before);

  tiers_team_barrier(team);
  tiers_team_timers_reset(team);
  if (S.mbc)
    tiers_mbc_stats_reset(S.mbc); /* Table 3 statistics of the timed part */
  double t0 = tiers_now();
  rc = tiers_team_parallel(team, sort_body, &S);
  double elapsed = tiers_now() - t0;
  double times[TIERS_PHASE_COUNT];
  tiers_team_times(team, times);
  app_comm_stats(&app); /* the layer's Table 3 figures of the timed part */
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());

  run_checks(&app, &S, &after);
  int64_t boundaries = check_boundaries(&S);
  int verify = app.opts.verify < 0 ? S.N <= VERIFY_AUTO_LIMIT : app.opts.verify;
  long differs = verify ? serial_compare(&app, &S) : -1;
  double time_s = elapsed, sent_mean = (double)S.sent_bytes;
  MPI_Allreduce(&elapsed, &time_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &sent_mean, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  sent_mean /= P;

  int multiset = before.count == after.count && after.count == S.N &&
                 before.hsum == after.hsum && before.hxor == after.hxor;
  int sorted = after.unsorted == 0 && boundaries == 0;
  int passed = multiset && sorted && differs < 0;
  char why[256] = "";
  if (after.unsorted)
    snprintf(why, sizeof why, "%" PRId64 " adjacent key pairs out of order inside the "
             "processes' blocks", after.unsorted);
  else if (boundaries)
    snprintf(why, sizeof why, "%" PRId64 " process boundaries out of order (a process's last "
             "key exceeds the next one's first)", boundaries);
  else if (!multiset)
    snprintf(why, sizeof why, "the key multiset changed: %" PRId64 " keys with checksum "
             "%016" PRIx64 " before, %" PRId64 " with %016" PRIx64 " after", before.count,
             before.hsum, after.count, after.hsum);
  else if (differs >= 0)
    snprintf(why, sizeof why, "the result differs from a serial sort at position %ld",
             differs);

  tiers_json_t j;
  app_json_head(&app, &j, elapsed, times);
  if (app.rank == 0) {
    char hs[32], hx[32];
    snprintf(hs, sizeof hs, "%016" PRIx64, after.hsum);
    snprintf(hx, sizeof hx, "%016" PRIx64, after.hxor);
    tiers_json_key(&j, "params");
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "size", S.N);
    tiers_json_kv_int(&j, "bits", S.bits);
    tiers_json_kv_int(&j, "seed", seed);
    tiers_json_kv_bool(&j, "quick", app.opts.quick);
    tiers_json_object_end(&j);
    tiers_json_key(&j, "result");
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "keys", S.N);
    tiers_json_kv_int(&j, "bits", S.bits);
    tiers_json_kv_int(&j, "passes", S.passes);
    tiers_json_kv_int(&j, "seed", seed);
    tiers_json_kv_string(&j, "checksum", hs);
    tiers_json_kv_string(&j, "checksum_xor", hx);
    tiers_json_kv_int(&j, "min_key", after.kmin);
    tiers_json_kv_int(&j, "max_key", after.kmax);
    tiers_json_kv_double(&j, "exchange_bytes_mean", sent_mean);
    tiers_json_object_end(&j);
    app_json_merit(&j, "keys sorted per second", (double)S.N / 1e6, time_s, "Mkeys/s");
    tiers_json_key(&j, "verification");
    tiers_json_object_begin(&j);
    tiers_json_kv_bool(&j, "passed", passed);
    tiers_json_kv_bool(&j, "sorted", sorted);
    tiers_json_kv_int(&j, "unsorted_pairs", after.unsorted);
    tiers_json_kv_int(&j, "unsorted_boundaries", boundaries);
    tiers_json_kv_bool(&j, "multiset_equal", multiset);
    tiers_json_kv_int(&j, "count_before", before.count);
    tiers_json_kv_int(&j, "count_after", after.count);
    snprintf(hs, sizeof hs, "%016" PRIx64, before.hsum);
    tiers_json_kv_string(&j, "checksum_before", hs);
    tiers_json_kv_bool(&j, "serial_compared", verify);
    if (verify)
      tiers_json_kv_bool(&j, "serial_equal", differs < 0);
    tiers_json_object_end(&j);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  tiers_barrier_destroy(&S.bar);
  free(S.keys);
  free(S.tmp);
  free(S.recv);
  free(S.thist);
  free(S.lhist);
  free(S.ghist);
  free(S.ehist);
  free(S.block_hi);
  free(S.scounts);
  free(S.sdispls);
  free(S.rcounts);
  free(S.rdispls);
  free(S.allhist);
  free(S.reqs);
  free(S.hsum);
  free(S.hxor);
  free(S.unsorted);
  free(S.kmin);
  free(S.kmax);
  app_finish(&app, passed, why);
}
