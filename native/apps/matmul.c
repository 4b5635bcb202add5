/*
 * tiers-matmul: the dense matrix multiply C = A B of seed 004 (blocked,
 * and blocked + tiled, 1800 x 1800 by default) and the column-broadcast
 * multiply of seed 003 Fig. 4, flat (MPI only) or hybrid (MPI + a thread
 * team per process).
 *
 *   mpirun -n P tiers-matmul [--algo blocked|tiled|bcast] [--size N]
 *       [--block L] [--iters K] [--simd auto|avx512|avx2|generic]
 *       [--schedule auto|shared|static] [--perturb I,J] [--threads T]
 *       [--pin none|compact|scatter] [--verify | --no-verify] [--quick]
 *
 * N must be a multiple of P: process p owns rows [p N/P, (p+1) N/P) of A
 * and C (step 1 of the COMPaS model); its team splits those rows over
 * the threads (step 2).
 *
 * --algo blocked   seed 004's layout: rank 0 holds A and B; the timed
 *                  part scatters the row blocks of A, broadcasts the whole
 *                  of B (replicated: every row block of C needs all of
 *                  it, and one broadcast per process is the cheapest way to
 *                  get it there), multiplies, and gathers C on rank 0.
 *                  The multiply is cache-blocked (i-k-j order over blocks
 *                  of k and j, the j loop left to the compiler's vectoriser).
 * --algo tiled     the same layout and messages; the multiply adds
 *                  register blocking (tiling): panels of A and B are packed
 *                  into contiguous micro-panels and an MR x NR micro-kernel
 *                  keeps its block of C in registers (12 x 16 with
 *                  AVX-512, 6 x 8 with AVX2+FMA, 4 x 4 in portable C);
 *                  the AVX-512 kernel prefetches the next micro-panel
 *                  of B and its C tile, and A is packed with in-register
 *                  8 x 8 transposes.  With two or more threads,
 *                  --schedule shared has the team pack each panel of B
 *                  once, into a buffer all threads read, and the threads
 *                  take row blocks of C from a shared counter (see
 *                  team_gemm_run); --schedule static gives each thread a
 *                  fixed share of the rows and its own panels; auto (the
 *                  default) is shared where a panel of B outgrows the L2
 *                  cache.
 * --algo bcast     seed 003 Fig. 4: A distributed by rows, B by columns
 *                  (process q owns columns [q N/P, (q+1) N/P), stored
 *                  column by column), both generated in place.  The loop
 *                  walks the columns of B; every L columns (--block L,
 *                  default 64; a broadcast never spans two owners) the
 *                  owner broadcasts them with MPI_Bcast on MPI_COMM_WORLD
 *                  and every process computes those L columns of its rows
 *                  of C with the tiled kernel.  C stays distributed by rows.
 *                  P ceil((N/P)/L) broadcasts in all.
 *
 * Values: A(i,k) and B(k,j) are small integers in [-8, 8] from a hash of
 * (i, k), so every product and sum is exact in double precision (|C| <=
 * 64 N) whatever the summation order, fused or not.
 *
 * Verification (untimed, on by default; exit 3 with the miss when it
 * fails), all in exact integer arithmetic, independent of the multiply:
 *  - every row of C: C 1 = A (B 1) and C w = A (B w) with w_j = j mod 7 + 1;
 *  - every column: 1' C = (1' A) B (column sums reduced over processes);
 *  - 64 sampled entries per process recomputed as dot products.
 * For blocked and tiled, rank 0 checks the C it gathered; for bcast every
 * process checks its rows.  --perturb I,J adds 1 to C(I,J) after the
 * timed part, before the checks: a self-test that shows the verification
 * catches a one-entry error (the run then exits 3).
 *
 * --simd picks the tiled micro-kernel: auto (the best the CPU runs,
 * chosen at run time), avx512 (12 x 16, AVX-512F), avx2 (6 x 8, AVX2+FMA)
 * or generic (4 x 4, portable C).
 *
 * Output: the tiers.app/1 document of hybrid_app.h.  "result": algo,
 * size, iters, flops (2 N^3 per iteration), gflops, simd, the micro-kernel
 * (mr, nr), thread_busy_s (rank 0's threads: seconds each spent in the
 * multiplies), for tiled schedule (the one used) and, shared, row_blocks
 * (per panel) and thread_blocks (the blocks, or pieces of one in the last
 * panel, each thread computed), and for bcast block, broadcasts and
 * bcast_bytes (doubles broadcast, times 8).  Figure of merit: GFLOP/s.
 * Breakdown: comm = scatter, broadcasts and gather; sync = the final
 * barrier (waiting for the slowest process); compute = the rest.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "hybrid_app.h"

#define SIZE_DEFAULT 1800
#define SIZE_QUICK 240
#define SIZE_MAX_ALLOWED 20000
#define BLOCK_DEFAULT 64
#define SAMPLES_PER_RANK 64

/* ---------------------------------------------------------------------
 * The matrices: exact small integers.
 * --------------------------------------------------------------------- */

static inline int64_t hval(uint64_t i, uint64_t k, uint64_t salt)
{
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (k + salt) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return (int64_t)(h % 17) - 8;
}

static inline int64_t a_int(long i, long k) { return hval((uint64_t)i, (uint64_t)k, 11); }
static inline int64_t b_int(long k, long j) { return hval((uint64_t)k, (uint64_t)j, 7777); }
static inline int64_t w_int(long j) { return j % 7 + 1; }

/* ---------------------------------------------------------------------
 * The tiled multiply: packing and micro-kernels.
 * --------------------------------------------------------------------- */

/* Blocking: the packed A block (MC x KC, 288 KiB) stays in L2; the packed
 * B block (KC x NC, up to 6 MiB) lives in L3, and each of its KC x NR
 * micro-panels serves MC / MR kernels in a row.  The first NR / 4 of those
 * kernels prefetch the next micro-panel towards L2 (see ukernel_fn), so
 * that it does not arrive from L3 at the pace of the kernel's loads: that
 * prefetch gave about 10% at N = 1024-2048 on a Xeon with AVX-512.  KC =
 * 384 and MC = 96 measured best of KC 192-512 and MC 96-384. */
#define KC 384  /* depth of a packed panel */
#define MC 96   /* rows of a packed block of A (a multiple of every MR) */
#define NC 2048 /* columns of a packed block of B (a multiple of every NR) */
#define MR_MAX 12
#define NR_MAX 16

/* pf: where the kernel may prefetch (towards L2) one cache line every two
 * steps of k, kc / 2 lines in all -- a stretch of the next micro-panel of
 * B --, or NULL. */
typedef void (*ukernel_fn)(long kc, const double *a, const double *b, double *c, long ldc,
                           int first, const double *pf);

typedef struct kernel {
  const char *name;
  int mr, nr;
  ukernel_fn full; /* an mr x nr block of C */
} kernel_t;

/* C(mr x nr) (=|+=) sum_p a[p*MR + i] b[p*NR + j]; portable C, 4 x 4. */
static void ukernel_generic(long kc, const double *restrict a, const double *restrict b,
                            double *restrict c, long ldc, int first, const double *pf)
{
  (void)pf;
  double acc[4][4] = {{0}};
  for (long p = 0; p < kc; p++) {
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++)
        acc[i][j] += a[i] * b[j];
    a += 4;
    b += 4;
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      c[i * ldc + j] = first ? acc[i][j] : c[i * ldc + j] + acc[i][j];
}

/* The 6 x 8 AVX2+FMA kernel: 12 accumulators, two loads of B and six
 * broadcasts of A per step of k. */
__attribute__((target("avx2,fma"))) static void
ukernel_avx2(long kc, const double *restrict a, const double *restrict b, double *restrict c,
             long ldc, int first, const double *pf)
{
  (void)pf;
  __m256d c0l = _mm256_setzero_pd(), c0h = c0l, c1l = c0l, c1h = c0l, c2l = c0l, c2h = c0l;
  __m256d c3l = c0l, c3h = c0l, c4l = c0l, c4h = c0l, c5l = c0l, c5h = c0l;
  for (long p = 0; p < kc; p++) {
    __m256d bl = _mm256_load_pd(b), bh = _mm256_load_pd(b + 4), x;
    x = _mm256_broadcast_sd(a + 0);
    c0l = _mm256_fmadd_pd(x, bl, c0l);
    c0h = _mm256_fmadd_pd(x, bh, c0h);
    x = _mm256_broadcast_sd(a + 1);
    c1l = _mm256_fmadd_pd(x, bl, c1l);
    c1h = _mm256_fmadd_pd(x, bh, c1h);
    x = _mm256_broadcast_sd(a + 2);
    c2l = _mm256_fmadd_pd(x, bl, c2l);
    c2h = _mm256_fmadd_pd(x, bh, c2h);
    x = _mm256_broadcast_sd(a + 3);
    c3l = _mm256_fmadd_pd(x, bl, c3l);
    c3h = _mm256_fmadd_pd(x, bh, c3h);
    x = _mm256_broadcast_sd(a + 4);
    c4l = _mm256_fmadd_pd(x, bl, c4l);
    c4h = _mm256_fmadd_pd(x, bh, c4h);
    x = _mm256_broadcast_sd(a + 5);
    c5l = _mm256_fmadd_pd(x, bl, c5l);
    c5h = _mm256_fmadd_pd(x, bh, c5h);
    a += 6;
    b += 8;
  }
  __m256d lo[6] = {c0l, c1l, c2l, c3l, c4l, c5l}, hi[6] = {c0h, c1h, c2h, c3h, c4h, c5h};
  for (int i = 0; i < 6; i++) {
    double *ci = c + i * ldc;
    if (!first) {
      lo[i] = _mm256_add_pd(lo[i], _mm256_loadu_pd(ci));
      hi[i] = _mm256_add_pd(hi[i], _mm256_loadu_pd(ci + 4));
    }
    _mm256_storeu_pd(ci, lo[i]);
    _mm256_storeu_pd(ci + 4, hi[i]);
  }
}

/* The 12 x 16 AVX-512 kernel: 24 accumulators (12 rows x two 8-wide
 * halves), two loads of B and twelve broadcasts of A per step of k; the
 * k loop is unrolled by two. */
#define UK512_ROW(I)                                                                        \
  do {                                                                                      \
    __m512d x_ = _mm512_set1_pd(a[I]);                                                      \
    c##I##l = _mm512_fmadd_pd(x_, bl, c##I##l);                                             \
    c##I##h = _mm512_fmadd_pd(x_, bh, c##I##h);                                             \
  } while (0)
#define UK512_STEP()                                                                        \
  do {                                                                                      \
    __m512d bl = _mm512_load_pd(b), bh = _mm512_load_pd(b + 8);                            \
    UK512_ROW(0); UK512_ROW(1); UK512_ROW(2); UK512_ROW(3); UK512_ROW(4); UK512_ROW(5);      \
    UK512_ROW(6); UK512_ROW(7); UK512_ROW(8); UK512_ROW(9); UK512_ROW(10); UK512_ROW(11);    \
    a += 12;                                                                                \
    b += 16;                                                                                \
  } while (0)
#define UK512_TAIL 32 /* steps of k before the end at which C is fetched into L1 */
__attribute__((target("avx512f,avx2,fma"))) static void
ukernel_avx512(long kc, const double *restrict a, const double *restrict b, double *restrict c,
               long ldc, int first, const double *pf)
{
  __m512d c0l = _mm512_setzero_pd(), c0h = c0l, c1l = c0l, c1h = c0l, c2l = c0l, c2h = c0l;
  __m512d c3l = c0l, c3h = c0l, c4l = c0l, c4h = c0l, c5l = c0l, c5h = c0l;
  __m512d c6l = c0l, c6h = c0l, c7l = c0l, c7h = c0l, c8l = c0l, c8h = c0l;
  __m512d c9l = c0l, c9h = c0l, c10l = c0l, c10h = c0l, c11l = c0l, c11h = c0l;
  /* The C tile is read (or written) only at the end.  Start its lines
   * towards L2 now, and into L1 some steps before the end: prefetched into
   * L1 at the start, they would be evicted again by the panels streaming
   * through it. */
  for (int i = 0; i < 12; i++) {
    _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T1);
    _mm_prefetch((const char *)(c + i * ldc + 15), _MM_HINT_T1);
  }
  long p = 0, pend = kc - UK512_TAIL > 0 ? kc - UK512_TAIL : 0;
  for (; p + 2 <= pend; p += 2) {
    if (pf)
      _mm_prefetch((const char *)(pf + 4 * p), _MM_HINT_T1);
    UK512_STEP();
    UK512_STEP();
  }
  for (int i = 0; i < 12; i++) {
    _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch((const char *)(c + i * ldc + 15), _MM_HINT_T0);
  }
  for (; p + 2 <= kc; p += 2) {
    if (pf)
      _mm_prefetch((const char *)(pf + 4 * p), _MM_HINT_T1);
    UK512_STEP();
    UK512_STEP();
  }
  if (p < kc)
    UK512_STEP();
  __m512d lo[12] = {c0l, c1l, c2l, c3l, c4l, c5l, c6l, c7l, c8l, c9l, c10l, c11l};
  __m512d hi[12] = {c0h, c1h, c2h, c3h, c4h, c5h, c6h, c7h, c8h, c9h, c10h, c11h};
  for (int i = 0; i < 12; i++) {
    double *ci = c + i * ldc;
    if (!first) {
      lo[i] = _mm512_add_pd(lo[i], _mm512_loadu_pd(ci));
      hi[i] = _mm512_add_pd(hi[i], _mm512_loadu_pd(ci + 8));
    }
    _mm512_storeu_pd(ci, lo[i]);
    _mm512_storeu_pd(ci + 8, hi[i]);
  }
}
#undef UK512_STEP
#undef UK512_ROW

static const kernel_t KERNEL_GENERIC = {"generic", 4, 4, ukernel_generic};
static const kernel_t KERNEL_AVX2 = {"avx2-fma", 6, 8, ukernel_avx2};
static const kernel_t KERNEL_AVX512 = {"avx512", 12, 16, ukernel_avx512};

static int cpu_has_avx2(void)
{
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int cpu_has_avx512(void)
{
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f");
}

/* Transposes the 8 x 8 block r[0..7] (rows of 8 doubles) into t[0..7]:
 * t[q] holds element q of every row. */
__attribute__((target("avx512f"))) static inline void transpose8(const __m512d r[8],
                                                                 __m512d t[8])
{
  __m512d a0 = _mm512_unpacklo_pd(r[0], r[1]), a1 = _mm512_unpackhi_pd(r[0], r[1]);
  __m512d a2 = _mm512_unpacklo_pd(r[2], r[3]), a3 = _mm512_unpackhi_pd(r[2], r[3]);
  __m512d a4 = _mm512_unpacklo_pd(r[4], r[5]), a5 = _mm512_unpackhi_pd(r[4], r[5]);
  __m512d a6 = _mm512_unpacklo_pd(r[6], r[7]), a7 = _mm512_unpackhi_pd(r[6], r[7]);
  /* u: 128-bit lanes (q, q + 4) of rows (0,1) then (2,3), or (4,5) then (6,7) */
  __m512d u0 = _mm512_shuffle_f64x2(a0, a2, 0x88), u1 = _mm512_shuffle_f64x2(a0, a2, 0xdd);
  __m512d u2 = _mm512_shuffle_f64x2(a1, a3, 0x88), u3 = _mm512_shuffle_f64x2(a1, a3, 0xdd);
  __m512d u4 = _mm512_shuffle_f64x2(a4, a6, 0x88), u5 = _mm512_shuffle_f64x2(a4, a6, 0xdd);
  __m512d u6 = _mm512_shuffle_f64x2(a5, a7, 0x88), u7 = _mm512_shuffle_f64x2(a5, a7, 0xdd);
  t[0] = _mm512_shuffle_f64x2(u0, u4, 0x88);
  t[4] = _mm512_shuffle_f64x2(u0, u4, 0xdd);
  t[2] = _mm512_shuffle_f64x2(u1, u5, 0x88);
  t[6] = _mm512_shuffle_f64x2(u1, u5, 0xdd);
  t[1] = _mm512_shuffle_f64x2(u2, u6, 0x88);
  t[5] = _mm512_shuffle_f64x2(u2, u6, 0xdd);
  t[3] = _mm512_shuffle_f64x2(u3, u7, 0x88);
  t[7] = _mm512_shuffle_f64x2(u3, u7, 0xdd);
}

/* One whole 12-row micro-panel of A (row-major, lda), depth [0, kc):
 * 8 x 8 blocks transposed in registers (rows 8-11 go through the same
 * transpose, twice over, and only the low half is kept). */
__attribute__((target("avx512f"))) static void pack_a12(long kc, const double *A, long lda,
                                                        double *out)
{
  long p = 0;
  for (; p + 8 <= kc; p += 8) {
    __m512d r[8], t[8];
    for (int i = 0; i < 8; i++)
      r[i] = _mm512_loadu_pd(A + i * lda + p);
    transpose8(r, t);
    for (int q = 0; q < 8; q++)
      _mm512_storeu_pd(out + (p + q) * 12, t[q]);
    for (int i = 0; i < 4; i++)
      r[i] = r[i + 4] = _mm512_loadu_pd(A + (8 + i) * lda + p);
    transpose8(r, t);
    for (int q = 0; q < 8; q++)
      _mm256_storeu_pd(out + (p + q) * 12 + 8, _mm512_castpd512_pd256(t[q]));
  }
  for (; p < kc; p++)
    for (int i = 0; i < 12; i++)
      out[p * 12 + i] = A[i * lda + p];
}

/* One whole 16-column micro-panel of a column-major B (element (k, j) at
 * B[k + j*ldb]), depth [0, kc): two 8 x 8 transposes per 8 steps. */
__attribute__((target("avx512f"))) static void pack_b16_cm(long kc, const double *B, long ldb,
                                                           double *out)
{
  long p = 0;
  for (; p + 8 <= kc; p += 8)
    for (int h = 0; h < 2; h++) {
      __m512d r[8], t[8];
      for (int j = 0; j < 8; j++)
        r[j] = _mm512_loadu_pd(B + (h * 8 + j) * ldb + p);
      transpose8(r, t);
      for (int q = 0; q < 8; q++)
        _mm512_storeu_pd(out + (p + q) * 16 + h * 8, t[q]);
    }
  for (; p < kc; p++)
    for (int j = 0; j < 16; j++)
      out[p * 16 + j] = B[j * ldb + p];
}

/* Packs rows [0, mc) x depth [0, kc) of A (row-major, lda) into
 * micro-panels of mr rows: panel r, step p holds A(r*mr + i, p), i < mr,
 * zero past mc. */
static void pack_a(const kernel_t *K, long mc, long kc, const double *A, long lda, double *out)
{
  int mr = K->mr;
  for (long r0 = 0; r0 < mc; r0 += mr) {
    int rows = mc - r0 < mr ? (int)(mc - r0) : mr;
    if (rows == 12 && mr == 12 && K->full == ukernel_avx512) {
      pack_a12(kc, A + r0 * lda, lda, out);
      out += 12 * kc;
      continue;
    }
    for (long p = 0; p < kc; p++) {
      for (int i = 0; i < rows; i++)
        out[i] = A[(r0 + i) * lda + p];
      for (int i = rows; i < mr; i++)
        out[i] = 0.0;
      out += mr;
    }
  }
}

/* Packs depth [0, kc) x columns [0, nc) of B, whose element (k, j) is
 * B[k*rs + j*cs], into micro-panels of nr columns, zero past nc. */
static void pack_b(const kernel_t *K, long kc, long nc, const double *B, long rs, long cs,
                   double *out)
{
  int nr = K->nr;
  for (long c0 = 0; c0 < nc; c0 += nr) {
    int cols = nc - c0 < nr ? (int)(nc - c0) : nr;
    if (cs == 1 && cols == 16 && nr == 16) { /* rows of B: 16 contiguous doubles */
      for (long p = 0; p < kc; p++, out += 16)
        memcpy(out, B + p * rs + c0, 16 * sizeof(double));
      continue;
    }
    if (rs == 1 && cols == 16 && K->full == ukernel_avx512) { /* column-major (bcast) */
      pack_b16_cm(kc, B + c0 * cs, cs, out);
      out += 16 * kc;
      continue;
    }
    for (long p = 0; p < kc; p++) {
      const double *bp = B + p * rs + c0 * cs;
      for (int j = 0; j < cols; j++)
        out[j] = bp[j * cs];
      for (int j = cols; j < nr; j++)
        out[j] = 0.0;
      out += nr;
    }
  }
}

/* Per-thread packing buffers (b: NULL where the thread packs no B of
 * its own). */
typedef struct packs {
  double *a, *b;
} packs_t;

/* A B panel buffer (KC x (NC + NR_MAX) doubles, touched now, so that the
 * timed part takes no page faults on it), or NULL. */
static double *panel_alloc(void)
{
  double *b = aligned_alloc(64, sizeof(double) * KC * (NC + NR_MAX));
  if (b)
    memset(b, 0, sizeof(double) * KC * (NC + NR_MAX));
  return b;
}

static int packs_alloc(packs_t *p, int with_b)
{
  p->a = aligned_alloc(64, sizeof(double) * MC * KC);
  p->b = with_b ? panel_alloc() : NULL;
  if (!p->a || (with_b && !p->b))
    return -1;
  memset(p->a, 0, sizeof(double) * MC * KC);
  return 0;
}

static void packs_free(packs_t *p)
{
  free(p->a);
  free(p->b);
  p->a = p->b = NULL;
}

/* C (mc x nc at C, row-major ldc) (= if first, else +=) the packed A
 * block (mc rows in micro-panels of mr, depth kc) times the packed B panel
 * (nc columns in micro-panels of nr). */
static void block_multiply(const kernel_t *K, long mc, long nc, long kc, const double *pa,
                           const double *pb, double *C, long ldc, int first)
{
  int mr = K->mr, nr = K->nr;
  double edge[MR_MAX * NR_MAX];
  for (long jr = 0; jr < nc; jr += nr) {
    int cols = nc - jr < nr ? (int)(nc - jr) : nr;
    const double *bp = pb + jr * kc;
    /* the next micro-panel of B comes from L3: the first nr / 4 kernels
     * on this one fetch it towards L2, kc / 2 lines each */
    const double *bnext = pb + (jr + nr < nc ? jr + nr : 0) * kc;
    for (long ir = 0; ir < mc; ir += mr) {
      int rows = mc - ir < mr ? (int)(mc - ir) : mr;
      const double *ap = pa + ir * kc;
      double *cp = C + ir * ldc + jr;
      long call = ir / mr;
      const double *pf = call < nr / 4 ? bnext + call * kc * 4 : NULL;
      if (rows == mr && cols == nr) {
        K->full(kc, ap, bp, cp, ldc, first, pf);
      } else { /* an edge block: compute into a scratch tile */
        K->full(kc, ap, bp, edge, nr, 1, pf);
        for (int i = 0; i < rows; i++)
          for (int j = 0; j < cols; j++)
            cp[i * ldc + j] = first ? edge[i * nr + j] : cp[i * ldc + j] + edge[i * nr + j];
      }
    }
  }
}

/* C (m x n, row-major ldc) = A (m x k, row-major lda) B (k x n, element
 * (k, j) at B[k*rsb + j*csb]); the tiled multiply of one thread that packs
 * its own panels. */
static void gemm_tiled(const kernel_t *K, long m, long n, long k, const double *A, long lda,
                       const double *B, long rsb, long csb, double *C, long ldc, packs_t *pk)
{
  if (m <= 0 || n <= 0)
    return;
  for (long jc = 0; jc < n; jc += NC) {
    long nc = n - jc < NC ? n - jc : NC;
    for (long pc = 0; pc < k; pc += KC) {
      long kc = k - pc < KC ? k - pc : KC;
      pack_b(K, kc, nc, B + pc * rsb + jc * csb, rsb, csb, pk->b);
      for (long ic = 0; ic < m; ic += MC) {
        long mc = m - ic < MC ? m - ic : MC;
        pack_a(K, mc, kc, A + ic * lda + pc, lda, pk->a);
        block_multiply(K, mc, nc, kc, pk->a, pk->b, C + ic * ldc + jc, ldc, pc == 0);
      }
    }
  }
}

/* ---------------------------------------------------------------------
 * The tiled multiply of a thread team: one shared B panel, row blocks
 * handed out as they are asked for.
 *
 * The multiply is a sequence of panels q = (column block jc, depth block
 * pc), each of which has packing items (PACK_GROUP micro-panels of B
 * each, into the shared buffer bbuf[q % 2]) followed by compute items
 * (one row block of C against the whole panel).  The items of all panels
 * are numbered in that order, and each thread takes the next number from
 * one atomic counter when it is done with its last item, so a thread
 * that runs slower (another process on its CPU, an interrupt) simply
 * takes fewer row blocks, and the one that finishes a panel first packs
 * the next one while the other computes.  Three waits keep it right; all
 * are for items with smaller numbers, which are already being worked on,
 * so they cannot deadlock and are rarely long:
 *  - a compute item of panel q waits until every packing item of q is
 *    done;
 *  - a compute item of row block b in panel q > 0 waits until b is done
 *    in panel q - 1 (it accumulates onto it);
 *  - a packing item of panel q waits until every compute item of panel
 *    q - 2 is done (they read the buffer it overwrites).
 * The row blocks are a multiple of the thread count, of nearly equal size
 * (whole micro-rows of mr), so that threads of equal speed finish
 * together, and in the last panel each block is cut into TAIL_SPLIT
 * pieces, so that the wait at the end is a fraction of a block.
 * --------------------------------------------------------------------- */

#define PACK_GROUP 8 /* micro-panels of B per packing item */
#define TAIL_SPLIT 2 /* pieces of each row block in the last panel */

typedef struct team_gemm {
  const kernel_t *K;
  long m, n, k;
  const double *A; /* m x k, row-major, lda */
  const double *B; /* k x n, row-major, ldb */
  double *C;       /* m x n, row-major, ldc */
  long lda, ldb, ldc;
  long npc, npanel; /* depth blocks per column block; panels */
  long urows, nblk; /* micro-rows of mr; row blocks per panel */
  long *start;      /* [npanel + 1]: the first item of each panel */
  _Atomic long ticket __attribute__((aligned(64)));
  _Atomic long *packed;   /* [npanel]: packing items done */
  _Atomic long *computed; /* [npanel]: compute items done */
  _Atomic long *rowdone;  /* [nblk]: panels done in each row block */
  double *bbuf[2];
} team_gemm_t;

/* Panel q's columns [*jc, *jc + *nc) and depth [*pc, *pc + *kc). */
static void panel_of(const team_gemm_t *G, long q, long *jc, long *nc, long *pc, long *kc)
{
  *jc = q / G->npc * NC;
  *nc = G->n - *jc < NC ? G->n - *jc : NC;
  *pc = q % G->npc * KC;
  *kc = G->k - *pc < KC ? G->k - *pc : KC;
}

static long pack_items(const team_gemm_t *G, long nc)
{
  long panels = (nc + G->K->nr - 1) / G->K->nr;
  return (panels + PACK_GROUP - 1) / PACK_GROUP;
}

static long compute_items(const team_gemm_t *G, long q)
{
  return G->nblk * (q == G->npanel - 1 ? TAIL_SPLIT : 1);
}

static void team_gemm_free(team_gemm_t *G)
{
  free(G->start);
  free(G->packed);
  free(G->computed);
  free(G->rowdone);
  free(G->bbuf[0]);
  free(G->bbuf[1]);
  memset(G, 0, sizeof *G);
}

/* Sets up the schedule of C = A B over nthreads threads; -1 when out of
 * memory. */
static int team_gemm_init(team_gemm_t *G, const kernel_t *K, long m, long n, long k,
                          const double *A, long lda, const double *B, long ldb, double *C,
                          long ldc, int nthreads)
{
  memset(G, 0, sizeof *G);
  G->K = K;
  G->m = m;
  G->n = n;
  G->k = k;
  G->A = A;
  G->B = B;
  G->C = C;
  G->lda = lda;
  G->ldb = ldb;
  G->ldc = ldc;
  G->npc = (k + KC - 1) / KC;
  G->npanel = (n + NC - 1) / NC * G->npc;
  G->urows = (m + K->mr - 1) / K->mr;
  long per = MC / K->mr; /* micro-rows of a full block */
  long blocks = (G->urows + per - 1) / per;
  G->nblk = (blocks + nthreads - 1) / nthreads * nthreads;
  G->start = calloc((size_t)G->npanel + 1, sizeof *G->start);
  G->packed = calloc((size_t)G->npanel, sizeof *G->packed);
  G->computed = calloc((size_t)G->npanel, sizeof *G->computed);
  G->rowdone = calloc((size_t)G->nblk, sizeof *G->rowdone);
  G->bbuf[0] = panel_alloc();
  G->bbuf[1] = G->npanel > 1 ? panel_alloc() : NULL;
  if (!G->start || !G->packed || !G->computed || !G->rowdone || !G->bbuf[0] ||
      (G->npanel > 1 && !G->bbuf[1])) {
    team_gemm_free(G);
    return -1;
  }
  for (long q = 0; q < G->npanel; q++) {
    long jc, nc, pc, kc;
    panel_of(G, q, &jc, &nc, &pc, &kc);
    G->start[q + 1] = G->start[q] + pack_items(G, nc) + compute_items(G, q);
  }
  return 0;
}

/* Before each multiply, by one thread outside the team's region. */
static void team_gemm_reset(team_gemm_t *G)
{
  atomic_store_explicit(&G->ticket, 0, memory_order_relaxed);
  for (long q = 0; q < G->npanel; q++) {
    atomic_store_explicit(&G->packed[q], 0, memory_order_relaxed);
    atomic_store_explicit(&G->computed[q], 0, memory_order_relaxed);
  }
  for (long b = 0; b < G->nblk; b++)
    atomic_store_explicit(&G->rowdone[b], 0, memory_order_relaxed);
}

/* Waits until *v >= want: spins on pause, then yields the CPU (the
 * thread it waits for may share the CPU when processes are
 * oversubscribed). */
static void wait_at_least(_Atomic long *v, long want)
{
  for (unsigned s = 0; atomic_load_explicit(v, memory_order_acquire) < want; s++) {
    if (s < 2000)
      _mm_pause();
    else
      sched_yield();
  }
}

/* One thread's part: items until there are none left.  Returns the
 * number of compute items it did. */
static long team_gemm_run(team_gemm_t *G, packs_t *pk)
{
  const kernel_t *K = G->K;
  long total = G->start[G->npanel], q = 0, done = 0;
  for (;;) {
    long t = atomic_fetch_add_explicit(&G->ticket, 1, memory_order_relaxed);
    if (t >= total)
      break;
    while (t >= G->start[q + 1])
      q++;
    long jc, nc, pc, kc;
    panel_of(G, q, &jc, &nc, &pc, &kc);
    double *bb = G->bbuf[q & 1];
    long i = t - G->start[q], npk = pack_items(G, nc);
    if (i < npk) {
      if (q >= 2)
        wait_at_least(&G->computed[q - 2], compute_items(G, q - 2));
      long c0 = i * PACK_GROUP * K->nr, c1 = c0 + PACK_GROUP * K->nr;
      if (c1 > nc)
        c1 = nc;
      pack_b(K, kc, c1 - c0, G->B + pc * G->ldb + jc + c0, G->ldb, 1, bb + c0 * kc);
      atomic_fetch_add_explicit(&G->packed[q], 1, memory_order_release);
      continue;
    }
    i -= npk;
    long split = q == G->npanel - 1 ? TAIL_SPLIT : 1, b = i / split, s = i % split;
    long u0 = b * G->urows / G->nblk, u1 = (b + 1) * G->urows / G->nblk;
    long v0 = u0 + s * (u1 - u0) / split, v1 = u0 + (s + 1) * (u1 - u0) / split;
    long r0 = v0 * K->mr, r1 = v1 * K->mr < G->m ? v1 * K->mr : G->m;
    wait_at_least(&G->packed[q], npk);
    if (q > 0)
      wait_at_least(&G->rowdone[b], q);
    if (r1 > r0) {
      pack_a(K, r1 - r0, kc, G->A + r0 * G->lda + pc, G->lda, pk->a);
      block_multiply(K, r1 - r0, nc, kc, pk->a, bb, G->C + r0 * G->ldc + jc, G->ldc, pc == 0);
    }
    if (split == 1)
      atomic_store_explicit(&G->rowdone[b], q + 1, memory_order_release);
    atomic_fetch_add_explicit(&G->computed[q], 1, memory_order_release);
    done++;
  }
  return done;
}

/* ---------------------------------------------------------------------
 * The cache-blocked multiply (no register tiling).
 * --------------------------------------------------------------------- */

#define BK 128
#define BJ 512

static void gemm_blocked(long m, long n, long k, const double *A, long lda, const double *B,
                         long ldb, double *C, long ldc)
{
  for (long i = 0; i < m; i++)
    memset(C + i * ldc, 0, sizeof(double) * (size_t)n);
  for (long kk = 0; kk < k; kk += BK) {
    long ke = kk + BK < k ? kk + BK : k;
    for (long jj = 0; jj < n; jj += BJ) {
      long je = jj + BJ < n ? jj + BJ : n;
      for (long i = 0; i < m; i++) {
        double *restrict ci = C + i * ldc;
        for (long p = kk; p < ke; p++) {
          const double a = A[i * lda + p];
          const double *restrict bp = B + p * ldb;
          for (long j = jj; j < je; j++)
            ci[j] += a * bp[j];
        }
      }
    }
  }
}

/* ---------------------------------------------------------------------
 * The run.
 * --------------------------------------------------------------------- */

enum algo { ALGO_BLOCKED, ALGO_TILED, ALGO_BCAST };
static const char *ALGO_NAMES[] = {"blocked", "tiled", "bcast"};

struct run {
  enum algo algo;
  const kernel_t *kern;
  long n, rows, row0; /* order; rows of A and C owned; first owned row */
  long cols, col0;    /* bcast: columns of B owned; first owned column */
  double *A;          /* rows x n, row-major (rank 0 of blocked/tiled: n x n) */
  double *B;          /* blocked/tiled: n x n row-major; bcast: n x cols column-major */
  double *C;          /* rows x n (rank 0 of blocked/tiled: n x n) */
  double *Aloc, *Cloc;/* blocked/tiled: the local row blocks */
  double *recv;       /* bcast: receive buffer for the columns of other owners */
  const double *chunk;/* bcast: the columns being multiplied, n x l column-major */
  long chunk_j0, chunk_l;
  packs_t *packs;     /* one per thread */
  int shared;         /* tiled on 2 or more threads: the team schedule tg */
  team_gemm_t tg;
  double *busy;       /* per thread: seconds in the multiply, summed */
  long *blocks;       /* per thread, shared schedule: row blocks computed */
};

static int multiply_body(tiers_team_t team, int t, void *arg)
{
  struct run *R = arg;
  double t0 = tiers_now();
  long lo, hi;
  TIERS_CALL(tiers_team_split(team, R->rows, t, &lo, &hi));
  long m = hi - lo;
  if (R->shared)
    R->blocks[t] += team_gemm_run(&R->tg, &R->packs[t]);
  else if (R->algo == ALGO_BLOCKED)
    gemm_blocked(m, R->n, R->n, R->Aloc + lo * R->n, R->n, R->B, R->n, R->Cloc + lo * R->n,
                 R->n);
  else if (R->algo == ALGO_TILED)
    gemm_tiled(R->kern, m, R->n, R->n, R->Aloc + lo * R->n, R->n, R->B, R->n, 1,
               R->Cloc + lo * R->n, R->n, &R->packs[t]);
  else
    gemm_tiled(R->kern, m, R->chunk_l, R->n, R->A + lo * R->n, R->n, R->chunk, 1, R->n,
               R->C + lo * R->n + R->chunk_j0, R->n, &R->packs[t]);
  R->busy[t] += tiers_now() - t0;
  return TIERS_OK;
}

/* One multiply of the blocked or tiled layout: scatter A, broadcast B,
 * multiply, gather C. */
static int run_rowblock(app_t *app, struct run *R)
{
  tiers_team_t team = app->team;
  int cnt = (int)(R->rows * R->n);
  tiers_team_phase(team, TIERS_PHASE_COMM);
  if (app->size > 1) {
    MPI_Scatter(R->A, cnt, MPI_DOUBLE, app->rank == 0 ? MPI_IN_PLACE : R->Aloc, cnt,
                MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(R->B, (int)(R->n * R->n), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  tiers_team_phase(team, TIERS_PHASE_COMPUTE);
  if (R->shared)
    team_gemm_reset(&R->tg);
  TIERS_CALL(tiers_team_parallel(team, multiply_body, R));
  TIERS_CALL(tiers_team_barrier(team));
  tiers_team_phase(team, TIERS_PHASE_COMM);
  if (app->size > 1)
    MPI_Gather(app->rank == 0 ? MPI_IN_PLACE : R->Cloc, cnt, MPI_DOUBLE, R->C, cnt, MPI_DOUBLE,
               0, MPI_COMM_WORLD);
  tiers_team_phase(team, TIERS_PHASE_COMPUTE);
  return TIERS_OK;
}

/* One multiply of seed 003 Fig. 4. */
static int run_bcast(app_t *app, struct run *R, long L, long *bcasts)
{
  tiers_team_t team = app->team;
  long per = R->n / app->size;
  for (int q = 0; q < app->size; q++)
    for (long c = 0; c < per; c += L) {
      long l = per - c < L ? per - c : L;
      tiers_team_phase(team, TIERS_PHASE_COMM);
      double *buf = q == app->rank ? R->B + c * R->n : R->recv;
      MPI_Bcast(buf, (int)(l * R->n), MPI_DOUBLE, q, MPI_COMM_WORLD);
      tiers_team_phase(team, TIERS_PHASE_COMPUTE);
      R->chunk = buf;
      R->chunk_j0 = (long)q * per + c;
      R->chunk_l = l;
      TIERS_CALL(tiers_team_parallel(team, multiply_body, R));
      (*bcasts)++;
    }
  TIERS_CALL(tiers_team_barrier(team));
  return TIERS_OK;
}

/* ---------------------------------------------------------------------
 * Verification.
 * --------------------------------------------------------------------- */

typedef struct check {
  long rows_checked, cols_checked, samples, misses;
  double max_diff;
  long where_i, where_j; /* first miss (row check: j = -1; column check: i = -1) */
  double got, want;
} check_t;

static void miss(check_t *ck, long i, long j, double got, double want)
{
  double d = fabs(got - want);
  if (ck->misses == 0) {
    ck->where_i = i;
    ck->where_j = j;
    ck->got = got;
    ck->want = want;
  }
  ck->misses++;
  if (d > ck->max_diff || isnan(d))
    ck->max_diff = isnan(d) ? INFINITY : d;
}

/* Collective.  Rows [row0, row0 + rows) of C are at C (row-major, n
 * columns); rows may be 0 on processes that hold none. */
static void verify(app_t *app, long n, const double *C, long row0, long rows, check_t *ck)
{
  memset(ck, 0, sizeof *ck);
  ck->where_i = ck->where_j = -1;
  int64_t *bw1 = calloc((size_t)n, sizeof *bw1), *bww = calloc((size_t)n, sizeof *bww);
  int64_t *acol = calloc((size_t)n, sizeof *acol), *want = calloc((size_t)n, sizeof *want);
  double *colsum = calloc((size_t)n, sizeof *colsum), *colall = calloc((size_t)n, sizeof *colall);
  app_check(app, !bw1 || !bww || !acol || !want || !colsum || !colall,
            "out of memory for the verification");
  /* B 1 and B w. */
  for (long k = 0; k < n; k++)
    for (long j = 0; j < n; j++) {
      int64_t b = b_int(k, j);
      bw1[k] += b;
      bww[k] += b * w_int(j);
    }
  /* Rows: C 1 = A (B 1), C w = A (B w). */
  for (long r = 0; r < rows; r++) {
    long i = row0 + r;
    int64_t e1 = 0, ew = 0;
    for (long k = 0; k < n; k++) {
      int64_t a = a_int(i, k);
      e1 += a * bw1[k];
      ew += a * bww[k];
    }
    double g1 = 0, gw = 0;
    const double *ci = C + r * n;
    for (long j = 0; j < n; j++) {
      g1 += ci[j];
      gw += ci[j] * (double)w_int(j);
      colsum[j] += ci[j];
    }
    if (g1 != (double)e1)
      miss(ck, i, -1, g1, (double)e1);
    else if (gw != (double)ew)
      miss(ck, i, -1, gw, (double)ew);
    ck->rows_checked++;
  }
  /* Sampled entries. */
  for (int s = 0; rows > 0 && s < SAMPLES_PER_RANK; s++) {
    long r = ((long)s * 7919 + (long)app->rank * 13) % rows;
    long j = (long)(((uint64_t)s * 104729u + (uint64_t)row0 * 31u) % (uint64_t)n);
    int64_t e = 0;
    for (long k = 0; k < n; k++)
      e += a_int(row0 + r, k) * b_int(k, j);
    if (C[r * n + j] != (double)e)
      miss(ck, row0 + r, j, C[r * n + j], (double)e);
    ck->samples++;
  }
  /* Columns: 1' C = (1' A) B, the column sums reduced over the processes
   * (exact: integers below 2^53). */
  MPI_Allreduce(colsum, colall, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (app->rank == 0) {
    for (long i = 0; i < n; i++)
      for (long k = 0; k < n; k++)
        acol[k] += a_int(i, k);
    for (long k = 0; k < n; k++)
      for (long j = 0; j < n; j++)
        want[j] += acol[k] * b_int(k, j);
    for (long j = 0; j < n; j++)
      if (colall[j] != (double)want[j])
        miss(ck, -1, j, colall[j], (double)want[j]);
    ck->cols_checked = n;
  }
  free(bw1);
  free(bww);
  free(acol);
  free(want);
  free(colsum);
  free(colall);
  /* Every process learns the totals; the first miss of the lowest rank
   * that has one is reported. */
  long mine[4] = {ck->rows_checked, ck->cols_checked, ck->samples, ck->misses}, all[4];
  MPI_Allreduce(mine, all, 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  double md = ck->max_diff, mdall;
  MPI_Allreduce(&md, &mdall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int first = ck->misses ? app->rank : app->size, lowest;
  MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (lowest < app->size) {
    double w[4] = {(double)ck->where_i, (double)ck->where_j, ck->got, ck->want};
    MPI_Bcast(w, 4, MPI_DOUBLE, lowest, MPI_COMM_WORLD);
    ck->where_i = (long)w[0];
    ck->where_j = (long)w[1];
    ck->got = w[2];
    ck->want = w[3];
  }
  ck->rows_checked = all[0];
  ck->cols_checked = all[1];
  ck->samples = all[2];
  ck->misses = all[3];
  ck->max_diff = mdall;
}

/* ---------------------------------------------------------------------
 * Main.
 * --------------------------------------------------------------------- */

/* 64-byte aligned doubles, or NULL (the caller checks collectively). */
static double *alloc_doubles(long count)
{
  size_t bytes = sizeof(double) * (size_t)(count > 0 ? count : 1);
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

int main(int argc, char **argv)
{
  app_t app;
  app_init(&app, "tiers-matmul", &argc, &argv);
  long n = 0, L = BLOCK_DEFAULT, iters = 1;
  enum algo algo = ALGO_TILED;
  const char *simd = "auto";
  const char *schedule = NULL;
  long perturb[2] = {-1, -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    app_check(&app, strcmp(a, "--grid") == 0,
              "--grid does not apply: matmul splits the rows over all %d processes", app.size);
    app_check(&app, strcmp(a, "--overlap") == 0, "matmul has no halo exchange to overlap");
    if (app_common_option(&app, argc, argv, &i))
      continue;
    if (strcmp(a, "--size") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &n) != 0 || n < 1 || n > SIZE_MAX_ALLOWED,
                "--size needs a matrix order from 1 to %d (got %s)", SIZE_MAX_ALLOWED,
                v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--block") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &L) != 0 || L < 1,
                "--block needs a positive number of columns (got %s)", v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--iters") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &iters) != 0 || iters < 1,
                "--iters needs a positive number (got %s)", v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--algo") == 0) {
      int found = -1;
      for (int k = 0; v && k < 3; k++)
        if (strcmp(v, ALGO_NAMES[k]) == 0)
          found = k;
      app_check(&app, found < 0, "unknown --algo %s (known: blocked, tiled, bcast)",
                v ? v : "(nothing)");
      algo = (enum algo)found;
      i++;
    } else if (strcmp(a, "--perturb") == 0) {
      app_check(&app, !v || app_parse_triple(v, perturb, 2) != 2,
                "--perturb needs a row and a column I,J (got %s)", v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--schedule") == 0) {
      app_check(&app, !v || (strcmp(v, "auto") && strcmp(v, "shared") && strcmp(v, "static")),
                "--schedule must be auto, shared or static (got %s)", v ? v : "nothing");
      schedule = v;
      i++;
    } else if (strcmp(a, "--simd") == 0) {
      app_check(&app, !v || (strcmp(v, "auto") && strcmp(v, "avx512") && strcmp(v, "avx2") &&
                             strcmp(v, "generic")),
                "--simd must be auto, avx512, avx2 or generic (got %s)", v ? v : "nothing");
      simd = v;
      i++;
    } else {
      app_check(&app, 1, "unknown option %s (see tiers-matmul --help)", a);
    }
  }
  if (n == 0)
    n = app.opts.quick ? SIZE_QUICK : SIZE_DEFAULT;
  const char *schedule_opt = schedule ? schedule : "auto";
  app_check(&app, schedule && strcmp(schedule, "auto") && algo != ALGO_TILED,
            "--schedule applies to --algo tiled only (%s splits the rows over the threads)",
            ALGO_NAMES[algo]);
  app_check(&app, perturb[0] >= n || perturb[1] >= n,
            "--perturb %ld,%ld is outside the %ld x %ld matrix", perturb[0], perturb[1], n, n);
  app_check(&app, n % app.size != 0,
            "--size %ld is not divisible by the %d processes (each owns N/P rows)", n, app.size);
  int avx2 = cpu_has_avx2();
  app_check(&app, strcmp(simd, "avx2") == 0 && !avx2, "--simd avx2: this CPU lacks AVX2/FMA");
  int avx512 = cpu_has_avx512();
  app_check(&app, strcmp(simd, "avx512") == 0 && !avx512, "--simd avx512: this CPU lacks AVX-512F");
  const kernel_t *kern = &KERNEL_GENERIC;
  if (strcmp(simd, "avx512") == 0 || (strcmp(simd, "auto") == 0 && avx512))
    kern = &KERNEL_AVX512;
  else if (strcmp(simd, "avx2") == 0 || (strcmp(simd, "auto") == 0 && avx2))
    kern = &KERNEL_AVX2;
  app_team(&app, MPI_COMM_WORLD);
  tiers_team_t team = app.team;
  int nthreads = tiers_team_nthreads(team);

  struct run R;
  memset(&R, 0, sizeof R);
  R.algo = algo;
  R.kern = kern;
  R.n = n;
  R.rows = n / app.size;
  R.row0 = R.rows * app.rank;
  R.cols = R.rows;
  R.col0 = R.row0;
  /* --schedule auto: shared where a panel of B outgrows the L2 cache.  A
   * panel that fits stays in the L2 of a thread that packed its own copy
   * (static), while a shared one is written by one core and read by the
   * others every multiply (2 threads at N = 256-384: static 5-10%
   * faster); a larger panel comes from L3 for every row block either way,
   * and packing it once halves the packing. */
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  double panel_bytes = 8.0 * (double)(n < KC ? n : KC) * (double)(n < NC ? n : NC);
  if (!schedule || strcmp(schedule, "auto") == 0)
    schedule = panel_bytes > (double)(l2 > 0 ? l2 : 2L << 20) ? "shared" : "static";
  R.shared = algo == ALGO_TILED && nthreads > 1 && strcmp(schedule, "shared") == 0;
  R.packs = calloc((size_t)nthreads, sizeof *R.packs);
  R.busy = calloc((size_t)nthreads, sizeof *R.busy);
  R.blocks = calloc((size_t)nthreads, sizeof *R.blocks);
  app_check(&app, !R.packs || !R.busy || !R.blocks, "out of memory");
  int bad = 0;
  for (int t = 0; t < nthreads; t++)
    bad |= packs_alloc(&R.packs[t], !R.shared);
  app_check(&app, bad, "out of memory for the packing buffers");

  /* Untimed set-up: the matrices where the algorithm starts from. */
  if (algo == ALGO_BCAST) {
    R.A = alloc_doubles(R.rows * n);
    R.C = alloc_doubles(R.rows * n);
    R.B = alloc_doubles(n * R.cols);
    R.recv = alloc_doubles(n * (L < R.cols ? L : R.cols));
    app_check(&app, !R.A || !R.C || !R.B || !R.recv, "cannot allocate the %ld x %ld blocks",
              R.rows, n);
    for (long r = 0; r < R.rows; r++)
      for (long k = 0; k < n; k++)
        R.A[r * n + k] = (double)a_int(R.row0 + r, k);
    for (long c = 0; c < R.cols; c++)
      for (long k = 0; k < n; k++)
        R.B[c * n + k] = (double)b_int(k, R.col0 + c);
    memset(R.C, 0, sizeof(double) * (size_t)(R.rows * n));
  } else {
    long full = app.rank == 0 ? n * n : 0;
    R.B = alloc_doubles(n * n);
    if (app.rank == 0) {
      R.A = alloc_doubles(full);
      R.C = alloc_doubles(full);
      R.Aloc = R.A;
      R.Cloc = R.C;
    } else {
      R.Aloc = alloc_doubles(R.rows * n);
      R.Cloc = alloc_doubles(R.rows * n);
    }
    app_check(&app, !R.B || !R.Aloc || !R.Cloc, "cannot allocate the %ld x %ld matrices", n, n);
    app_check(&app, R.shared && team_gemm_init(&R.tg, kern, R.rows, n, n, R.Aloc, n, R.B, n,
                                                R.Cloc, n, nthreads) != 0,
              "out of memory for the shared packing buffers");
    if (app.rank == 0) {
      for (long i = 0; i < n; i++)
        for (long k = 0; k < n; k++) {
          R.A[i * n + k] = (double)a_int(i, k);
          R.B[i * n + k] = (double)b_int(i, k);
        }
      memset(R.C, 0, sizeof(double) * (size_t)full);
    } else {
      memset(R.Aloc, 0, sizeof(double) * (size_t)(R.rows * n));
      memset(R.Cloc, 0, sizeof(double) * (size_t)(R.rows * n));
      memset(R.B, 0, sizeof(double) * (size_t)(n * n));
    }
  }

  /* The timed part. */
  long bcasts = 0;
  tiers_team_barrier(team);
  tiers_team_timers_reset(team);
  double t0 = tiers_now();
  int rc = TIERS_OK;
  for (long it = 0; it < iters && rc == TIERS_OK; it++)
    rc = algo == ALGO_BCAST ? run_bcast(&app, &R, L, &bcasts) : run_rowblock(&app, &R);
  double elapsed = tiers_now() - t0;
  double times[TIERS_PHASE_COUNT];
  tiers_team_times(team, times);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());

  /* Verification (after the optional self-test perturbation). */
  if (perturb[0] >= 0) {
    long i = perturb[0], jj = perturb[1];
    if (algo == ALGO_BCAST && i >= R.row0 && i < R.row0 + R.rows)
      R.C[(i - R.row0) * n + jj] += 1.0;
    else if (algo != ALGO_BCAST && app.rank == 0)
      R.C[i * n + jj] += 1.0;
  }
  int do_verify = app.opts.verify != 0;
  check_t ck;
  memset(&ck, 0, sizeof ck);
  if (do_verify) {
    if (algo == ALGO_BCAST)
      verify(&app, n, R.C, R.row0, R.rows, &ck);
    else
      verify(&app, n, R.C, 0, app.rank == 0 ? n : 0, &ck);
  }
  int passed = !do_verify || ck.misses == 0;
  char why[320] = "";
  if (!passed) {
    if (ck.where_j < 0)
      snprintf(why, sizeof why, "%ld of %ld checks missed; row %ld of C sums to %.17g, "
               "expected %.17g (largest miss %.3g)", ck.misses,
               ck.rows_checked + ck.cols_checked + ck.samples, ck.where_i, ck.got, ck.want,
               ck.max_diff);
    else if (ck.where_i < 0)
      snprintf(why, sizeof why, "%ld of %ld checks missed; column %ld of C sums to %.17g, "
               "expected %.17g (largest miss %.3g)", ck.misses,
               ck.rows_checked + ck.cols_checked + ck.samples, ck.where_j, ck.got, ck.want,
               ck.max_diff);
    else
      snprintf(why, sizeof why, "%ld of %ld checks missed; C(%ld,%ld) = %.17g, expected "
               "%.17g (largest miss %.3g)", ck.misses,
               ck.rows_checked + ck.cols_checked + ck.samples, ck.where_i, ck.where_j, ck.got,
               ck.want, ck.max_diff);
  }

  double flops = 2.0 * (double)n * (double)n * (double)n * (double)iters;
  double slowest; /* the document's time_s */
  MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  double gflops = slowest > 0 ? flops / slowest / 1e9 : 0.0;
  tiers_json_t j;
  app_json_head(&app, &j, elapsed, times);
  if (app.rank == 0) {
    tiers_json_key(&j, "params");
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "algo", ALGO_NAMES[algo]);
    tiers_json_kv_int(&j, "size", n);
    tiers_json_kv_int(&j, "iters", iters);
    if (algo == ALGO_BCAST)
      tiers_json_kv_int(&j, "block", L);
    tiers_json_kv_string(&j, "simd", simd);
    if (algo == ALGO_TILED)
      tiers_json_kv_string(&j, "schedule", schedule_opt);
    tiers_json_kv_bool(&j, "quick", app.opts.quick);
    tiers_json_object_end(&j);
    tiers_json_key(&j, "result");
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "algo", ALGO_NAMES[algo]);
    tiers_json_kv_int(&j, "size", n);
    tiers_json_kv_int(&j, "iters", iters);
    tiers_json_kv_int(&j, "rows_per_rank", R.rows);
    tiers_json_kv_double(&j, "flops", flops);
    tiers_json_kv_double(&j, "gflops", gflops);
    if (algo == ALGO_TILED)
      tiers_json_kv_string(&j, "schedule", R.shared ? "shared" : "static");
    if (R.shared)
      tiers_json_kv_int(&j, "row_blocks", R.tg.nblk);
    tiers_json_kv_double_array(&j, "thread_busy_s", R.busy, (size_t)nthreads);
    if (R.shared) {
      tiers_json_key(&j, "thread_blocks");
      tiers_json_array_begin(&j);
      for (int t = 0; t < nthreads; t++)
        tiers_json_int(&j, R.blocks[t]);
      tiers_json_array_end(&j);
    }
    if (algo == ALGO_BLOCKED) {
      tiers_json_kv_string(&j, "kernel", "blocked-c");
    } else {
      tiers_json_kv_string(&j, "kernel", kern->name);
      tiers_json_kv_int(&j, "mr", kern->mr);
      tiers_json_kv_int(&j, "nr", kern->nr);
    }
    if (algo == ALGO_BCAST) {
      tiers_json_kv_int(&j, "block", L);
      tiers_json_kv_int(&j, "broadcasts", bcasts);
      tiers_json_kv_double(&j, "bcast_bytes", 8.0 * (double)n * (double)n * (double)iters);
    }
    tiers_json_object_end(&j);
    app_json_merit(&j, "GFLOP/s", flops / 1e9, slowest, "GFLOP/s");
    tiers_json_key(&j, "verification");
    tiers_json_object_begin(&j);
    tiers_json_kv_bool(&j, "passed", passed);
    tiers_json_kv_bool(&j, "checked", do_verify);
    tiers_json_kv_string(&j, "method", "exact integer row, column and entry checks");
    tiers_json_kv_int(&j, "rows_checked", ck.rows_checked);
    tiers_json_kv_int(&j, "cols_checked", ck.cols_checked);
    tiers_json_kv_int(&j, "entries_sampled", ck.samples);
    tiers_json_kv_int(&j, "misses", ck.misses);
    tiers_json_kv_double(&j, "max_abs_diff", ck.max_diff);
    tiers_json_object_end(&j);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  for (int t = 0; t < nthreads; t++)
    packs_free(&R.packs[t]);
  free(R.packs);
  free(R.busy);
  free(R.blocks);
  if (R.shared)
    team_gemm_free(&R.tg);
  if (algo == ALGO_BCAST) {
    free(R.A);
    free(R.C);
    free(R.B);
    free(R.recv);
  } else {
    if (app.rank != 0) {
      free(R.Aloc);
      free(R.Cloc);
    }
    free(R.A);
    free(R.C);
    free(R.B);
  }
  app_finish(&app, passed, why);
}
