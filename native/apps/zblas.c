/*
 * tiers-zblas: the complex level-1 and level-2 BLAS kernels of seed 000
 * (zaxpy, zdotc, dznrm2 and zgemv in its three forms), parallel over the
 * processes (MPI) and over a thread team in each (OpenMP), checked against
 * a straightforward serial reference.
 *
 *   mpirun -n P tiers-zblas [--kernel all|zaxpy|zdotc|dznrm2|zgemv|zgemv_n|
 *       zgemv_t|zgemv_c[,...]] [--size N] [--matrix M] [--iters K]
 *       [--scale S] [--simd auto|avx512|avx2|generic] [--threads T]
 *       [--pin none|compact|scatter] [--verify | --no-verify] [--quick]
 *
 * The kernels (complex double, interleaved real/imaginary as in BLAS):
 *   zaxpy    y := alpha x + y
 *   zdotc    z := conjg(x)' y
 *   dznrm2   sqrt(conjg(x)' x), overflow- and underflow-safe
 *   zgemv_n  y := alpha A x + beta y
 *   zgemv_t  y := alpha A' x + beta y
 *   zgemv_c  y := alpha conjg(A') x + beta y
 * with alpha = 0.75 - 0.5i, beta = 0.5 + 0.25i.  Vectors hold N complex
 * numbers (--size, default 256^2 = 65536 as in the seed; --quick: 64^2);
 * the zgemv matrix is square, M x M, column-major, with M = --matrix or
 * floor(sqrt(N)) (default 256: the matrix holds as many numbers as one
 * vector, 1 MiB), and its vectors have length M.
 *
 * Data over processes (seed 004 step 1; the problem size is fixed, so
 * flat P x 1 and hybrid P/T x T runs do the same work): every vector is
 * split into P equal blocks, and the matrix into P blocks of M/P rows.
 * N and M must be multiples of P.  zaxpy needs no message; zdotc and
 * dznrm2 end in one hybrid reduction per call (the team's partial sums in
 * thread order, then one MPI_Allreduce by the master); zgemv_n gathers x
 * (MPI_Allgather, every process needs all of it), zgemv_t and zgemv_c sum
 * the processes' partial products (MPI_Reduce_scatter_block) -- with one
 * process neither happens.
 *
 * Data over threads (step 2): each kernel is parallel at its outermost
 * loop, in blocks of the same static split in every call (so consecutive
 * calls need no barrier in between: the `nowait` of seed 000), with the
 * accumulators private to each thread; zgemv_n splits rows, zgemv_t/_c
 * columns, in blocks of 8 (whole cache lines of y, which two threads
 * writing the same line would bounce between them every call).  One
 * parallel region runs a whole timed batch of --iters calls
 * (default 100; --quick 10).  The only waits in a batch are those a call
 * needs: the reductions of zdotc and dznrm2 (each thread hands the master
 * one cache line per call, no barrier), and with more than one process
 * the two barriers around zgemv's message.
 *
 * dznrm2 is Blue's algorithm (as in reference LAPACK/BLAS since 3.10):
 * squares of mid-range components are summed directly, huge ones scaled
 * down by 2^-538 and tiny ones up by 2^537 into separate sums, so nothing
 * overflows or underflows; the sums combine by addition across threads
 * and processes.  The serial reference is the older scale/ssq recurrence
 * of reference BLAS -- a different algorithm.  --scale S multiplies
 * dznrm2's input by S (try 1e300 or 1e-300).
 *
 * Vector kernels: AVX-512 when the CPU has AVX-512F/DQ, else AVX2+FMA,
 * else portable C;
 * chosen at run time, --simd avx512|avx2|generic forces one.
 *
 * Values: x_i, y_i and A_ij are fixed functions of the global indices:
 *   x_i = (((7i) mod 13) - 6) / 8 + i (((3i) mod 11) - 5) / 8
 *   y_i = (((5i) mod 17) - 8) / 16 + i (((11i) mod 7) - 3) / 4
 *   A_ij = (((3i + 5j) mod 19) - 9) / 16 + i (((7i + 2j) mod 23) - 11) / 32
 *
 * Verification (rank 0 gathers every result and repeats each kernel
 * serially, with the same number of calls): zaxpy and zgemv normwise,
 * max |got - ref| <= 16 (K + M) eps * scale, where scale bounds the
 * magnitudes involved; zdotc |got - ref| <= 4 N eps sum |x||y|; dznrm2
 * |got - ref| <= 4 N eps ref.  A miss exits 3 and names the kernel and the
 * margin.
 *
 * Output: the tiers.app/1 document of hybrid_app.h; "result": {"kernels":
 * [{"name","calls","seconds","seconds_per_call","bytes_per_call",
 * "flops_per_call","gbytes_per_s","gflops_per_s","error","tolerance",
 * "passed"}...], "simd", "length", "matrix", "zdotc": [re, im],
 * "dznrm2": value}.  Bytes per call count each array element read or
 * written once (16 B per complex): zaxpy 48 N, zdotc 32 N, dznrm2 16 N,
 * zgemv 16 M^2 + 48 M (A, x, y read and written); flops per call: zaxpy
 * 8 N, zdotc 8 N, dznrm2 4 N, zgemv 8 M^2.  Seconds are the slowest
 * process's.  Figure of merit: all bytes over all seconds, GB/s (10^9).
 * Breakdown: comm = MPI_Allreduce / Allgather / Reduce_scatter, sync =
 * waits in barriers, compute = the rest.
 */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/wait.h"
#include "hybrid_app.h"

#define SIZE_DEFAULT 65536L
#define SIZE_QUICK 4096L
#define ITERS_DEFAULT 100L
#define ITERS_QUICK 10L
#define SIZE_LIMIT (1L << 28)
#define MATRIX_LIMIT 32768L

static const double ALPHA[2] = {0.75, -0.5};
static const double BETA[2] = {0.5, 0.25};

/* Blue's constants for IEEE double (LAPACK la_constants). */
#define TSML 0x1p-511  /* below: scale up */
#define TBIG 0x1p486   /* above: scale down */
#define SSML 0x1p537
#define SBIG 0x1p-538

enum kern { K_ZAXPY, K_ZDOTC, K_DZNRM2, K_ZGEMV_N, K_ZGEMV_T, K_ZGEMV_C, K_COUNT };
static const char *KNAMES[K_COUNT] = {"zaxpy", "zdotc", "dznrm2", "zgemv_n", "zgemv_t",
                                      "zgemv_c"};

/* ---------------------------------------------------------------------
 * Portable kernels.  Complex numbers are pairs of doubles.
 * --------------------------------------------------------------------- */

static void zaxpy_c(long n, const double *a, const double *restrict x, double *restrict y)
{
  const double ar = a[0], ai = a[1];
  for (long i = 0; i < n; i++) {
    double xr = x[2 * i], xi = x[2 * i + 1];
    y[2 * i] += ar * xr - ai * xi;
    y[2 * i + 1] += ar * xi + ai * xr;
  }
}

static void zdotc_c(long n, const double *restrict x, const double *restrict y, double out[2])
{
  double re = 0, im = 0;
  for (long i = 0; i < n; i++) {
    re += x[2 * i] * y[2 * i] + x[2 * i + 1] * y[2 * i + 1];
    im += x[2 * i] * y[2 * i + 1] - x[2 * i + 1] * y[2 * i];
  }
  out[0] = re;
  out[1] = im;
}

/* Blue's three sums over @p n doubles: acc[0] small, acc[1] mid, acc[2] big. */
static void nrm2_c(long n, const double *restrict v, double acc[3])
{
  double s = 0, m = 0, b = 0;
  for (long i = 0; i < n; i++) {
    double a = fabs(v[i]);
    if (a > TBIG) {
      b += (a * SBIG) * (a * SBIG);
    } else if (a < TSML) {
      s += (a * SSML) * (a * SSML);
    } else {
      m += a * a;
    }
  }
  acc[0] = s;
  acc[1] = m;
  acc[2] = b;
}

/* y[i] := alpha sum_j A(i,j) x_j + beta y[i] for rows [0, m) of a
 * column-major block with leading dimension lda (complex elements). */
static void gemv_n_c(long m, long ncol, const double *restrict A, long lda,
                     const double *restrict x, const double *alpha, const double *beta,
                     double *restrict y)
{
  for (long i = 0; i < m; i++) {
    double sr = 0, si = 0;
    for (long j = 0; j < ncol; j++) {
      const double *a = A + 2 * (i + j * lda);
      sr += a[0] * x[2 * j] - a[1] * x[2 * j + 1];
      si += a[0] * x[2 * j + 1] + a[1] * x[2 * j];
    }
    double yr = y[2 * i], yi = y[2 * i + 1];
    y[2 * i] = alpha[0] * sr - alpha[1] * si + beta[0] * yr - beta[1] * yi;
    y[2 * i + 1] = alpha[0] * si + alpha[1] * sr + beta[0] * yi + beta[1] * yr;
  }
}

/* y[j] := alpha sum_i op(A(i,j)) x_i + beta y[j] for columns [j0, j1),
 * rows [0, m); op conjugates when conj. */
static void gemv_t_c(long m, long j0, long j1, const double *restrict A, long lda,
                     const double *restrict x, int conj, const double *alpha,
                     const double *beta, double *restrict y)
{
  double sg = conj ? -1.0 : 1.0;
  for (long j = j0; j < j1; j++) {
    const double *a = A + 2 * j * lda;
    double sr = 0, si = 0;
    for (long i = 0; i < m; i++) {
      double ar = a[2 * i], ai = sg * a[2 * i + 1];
      sr += ar * x[2 * i] - ai * x[2 * i + 1];
      si += ar * x[2 * i + 1] + ai * x[2 * i];
    }
    double yr = y[2 * j], yi = y[2 * j + 1];
    y[2 * j] = alpha[0] * sr - alpha[1] * si + beta[0] * yr - beta[1] * yi;
    y[2 * j + 1] = alpha[0] * si + alpha[1] * sr + beta[0] * yi + beta[1] * yr;
  }
}

/* ---------------------------------------------------------------------
 * AVX2+FMA kernels.  A ymm register holds two complex numbers
 * [r0 i0 r1 i1]; _mm256_permute_pd(v, 5) swaps each pair.
 * --------------------------------------------------------------------- */

#define AVX2 __attribute__((target("avx2,fma")))

/* Keeps a loaded vector in its register.  Without it GCC folds the load
 * into every instruction that uses the value (an FMA and a permute, say),
 * loading it twice; for data that stream from L2 or memory the loads are
 * the bound, and the second load cost zdotc about a fifth of its rate. */
#define KEEP(v) __asm__("" : "+v"(v))
/* How far ahead (in doubles: 2 KiB) zaxpy and zdotc prefetch their
 * streams; about 5% from L2, L3 and memory alike. */
#define PF_AHEAD 256

/* alpha v, alpha a broadcast pair */
AVX2 static inline __m256d cmul_bc(__m256d v, __m256d ar, __m256d ai_signed)
{
  return _mm256_fmadd_pd(ai_signed, _mm256_permute_pd(v, 5), _mm256_mul_pd(ar, v));
}

AVX2 static inline double hsum(__m256d v)
{
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* even lanes minus odd lanes (re - im parts) */
AVX2 static inline double hdiff(__m256d v)
{
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_sub_sd(s, _mm_unpackhi_pd(s, s)));
}

AVX2 static void zaxpy_avx2(long n, const double *a, const double *restrict x,
                            double *restrict y)
{
  const __m256d ar = _mm256_set1_pd(a[0]);
  const __m256d ai = _mm256_setr_pd(-a[1], a[1], -a[1], a[1]);
  long i = 0;
  for (; i + 8 <= n; i += 8) { /* 8 complex = 4 registers */
    __m256d x0 = _mm256_loadu_pd(x + 2 * i), x1 = _mm256_loadu_pd(x + 2 * i + 4);
    __m256d x2 = _mm256_loadu_pd(x + 2 * i + 8), x3 = _mm256_loadu_pd(x + 2 * i + 12);
    KEEP(x0); KEEP(x1); KEEP(x2); KEEP(x3);
    __m256d y0 = _mm256_fmadd_pd(ar, x0, _mm256_loadu_pd(y + 2 * i));
    __m256d y1 = _mm256_fmadd_pd(ar, x1, _mm256_loadu_pd(y + 2 * i + 4));
    __m256d y2 = _mm256_fmadd_pd(ar, x2, _mm256_loadu_pd(y + 2 * i + 8));
    __m256d y3 = _mm256_fmadd_pd(ar, x3, _mm256_loadu_pd(y + 2 * i + 12));
    _mm256_storeu_pd(y + 2 * i, _mm256_fmadd_pd(ai, _mm256_permute_pd(x0, 5), y0));
    _mm256_storeu_pd(y + 2 * i + 4, _mm256_fmadd_pd(ai, _mm256_permute_pd(x1, 5), y1));
    _mm256_storeu_pd(y + 2 * i + 8, _mm256_fmadd_pd(ai, _mm256_permute_pd(x2, 5), y2));
    _mm256_storeu_pd(y + 2 * i + 12, _mm256_fmadd_pd(ai, _mm256_permute_pd(x3, 5), y3));
  }
  for (; i + 2 <= n; i += 2) {
    __m256d x0 = _mm256_loadu_pd(x + 2 * i);
    __m256d y0 = _mm256_fmadd_pd(ar, x0, _mm256_loadu_pd(y + 2 * i));
    _mm256_storeu_pd(y + 2 * i, _mm256_fmadd_pd(ai, _mm256_permute_pd(x0, 5), y0));
  }
  if (i < n)
    zaxpy_c(n - i, a, x + 2 * i, y + 2 * i);
}

AVX2 static void zdotc_avx2(long n, const double *restrict x, const double *restrict y,
                            double out[2])
{
  /* p += x y = [xr yr, xi yi]; q += x swap(y) = [xr yi, xi yr];
   * re = sum p, im = even(q) - odd(q). */
  __m256d p0 = _mm256_setzero_pd(), p1 = p0, p2 = p0, p3 = p0;
  __m256d q0 = p0, q1 = p0, q2 = p0, q3 = p0;
  long i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256d x0 = _mm256_loadu_pd(x + 2 * i), x1 = _mm256_loadu_pd(x + 2 * i + 4);
    __m256d x2 = _mm256_loadu_pd(x + 2 * i + 8), x3 = _mm256_loadu_pd(x + 2 * i + 12);
    __m256d y0 = _mm256_loadu_pd(y + 2 * i), y1 = _mm256_loadu_pd(y + 2 * i + 4);
    __m256d y2 = _mm256_loadu_pd(y + 2 * i + 8), y3 = _mm256_loadu_pd(y + 2 * i + 12);
    KEEP(x0); KEEP(x1); KEEP(x2); KEEP(x3); KEEP(y0); KEEP(y1); KEEP(y2); KEEP(y3);
    p0 = _mm256_fmadd_pd(x0, y0, p0);
    p1 = _mm256_fmadd_pd(x1, y1, p1);
    p2 = _mm256_fmadd_pd(x2, y2, p2);
    p3 = _mm256_fmadd_pd(x3, y3, p3);
    q0 = _mm256_fmadd_pd(x0, _mm256_permute_pd(y0, 5), q0);
    q1 = _mm256_fmadd_pd(x1, _mm256_permute_pd(y1, 5), q1);
    q2 = _mm256_fmadd_pd(x2, _mm256_permute_pd(y2, 5), q2);
    q3 = _mm256_fmadd_pd(x3, _mm256_permute_pd(y3, 5), q3);
  }
  for (; i + 2 <= n; i += 2) {
    __m256d x0 = _mm256_loadu_pd(x + 2 * i), y0 = _mm256_loadu_pd(y + 2 * i);
    p0 = _mm256_fmadd_pd(x0, y0, p0);
    q0 = _mm256_fmadd_pd(x0, _mm256_permute_pd(y0, 5), q0);
  }
  __m256d p = _mm256_add_pd(_mm256_add_pd(p0, p1), _mm256_add_pd(p2, p3));
  __m256d q = _mm256_add_pd(_mm256_add_pd(q0, q1), _mm256_add_pd(q2, q3));
  double tail[2] = {0, 0};
  if (i < n)
    zdotc_c(n - i, x + 2 * i, y + 2 * i, tail);
  out[0] = hsum(p) + tail[0];
  out[1] = hdiff(q) + tail[1];
}

AVX2 static void nrm2_avx2(long n, const double *restrict v, double acc[3])
{
  const __m256d sign = _mm256_set1_pd(-0.0), tsml = _mm256_set1_pd(TSML);
  const __m256d tbig = _mm256_set1_pd(TBIG), ssml = _mm256_set1_pd(SSML);
  const __m256d sbig = _mm256_set1_pd(SBIG);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, m0 = s0, m1 = s0, b0 = s0, b1 = s0;
  long i = 0;
#define NRM2_STEP(V, S, M, B)                                                   \
  do {                                                                          \
    __m256d a_ = _mm256_andnot_pd(sign, V);                                     \
    __m256d big_ = _mm256_cmp_pd(a_, tbig, _CMP_GT_OQ);                         \
    __m256d sml_ = _mm256_cmp_pd(a_, tsml, _CMP_LT_OQ);                         \
    __m256d mid_ = _mm256_andnot_pd(_mm256_or_pd(big_, sml_), a_);              \
    __m256d bb_ = _mm256_and_pd(big_, _mm256_mul_pd(a_, sbig));                 \
    __m256d ss_ = _mm256_and_pd(sml_, _mm256_mul_pd(a_, ssml));                 \
    M = _mm256_fmadd_pd(mid_, mid_, M);                                         \
    B = _mm256_fmadd_pd(bb_, bb_, B);                                           \
    S = _mm256_fmadd_pd(ss_, ss_, S);                                           \
  } while (0)
  for (; i + 8 <= n; i += 8) {
    __m256d v0 = _mm256_loadu_pd(v + i), v1 = _mm256_loadu_pd(v + i + 4);
    NRM2_STEP(v0, s0, m0, b0);
    NRM2_STEP(v1, s1, m1, b1);
  }
  for (; i + 4 <= n; i += 4) {
    __m256d v0 = _mm256_loadu_pd(v + i);
    NRM2_STEP(v0, s0, m0, b0);
  }
#undef NRM2_STEP
  double tail[3] = {0, 0, 0};
  if (i < n)
    nrm2_c(n - i, v + i, tail);
  acc[0] = hsum(_mm256_add_pd(s0, s1)) + tail[0];
  acc[1] = hsum(_mm256_add_pd(m0, m1)) + tail[1];
  acc[2] = hsum(_mm256_add_pd(b0, b1)) + tail[2];
}

/* alpha s + beta y for one register of two complex numbers. */
AVX2 static inline __m256d axpby2(__m256d s, __m256d y, __m256d alr, __m256d ali,
                                  __m256d ber, __m256d bei)
{
  return _mm256_add_pd(cmul_bc(s, alr, ali), cmul_bc(y, ber, bei));
}

/* zgemv_n, column-oriented: for a block of up to GEMV_RB rows, the sums
 * R = sum_j A(:,j) xr_j and I = sum_j A(:,j) xi_j are built four columns
 * at a time in two small buffers (contiguous column segments stream
 * through; the buffers stay in L1), then A x = R + flip(swap(I)) and
 * y := alpha A x + beta y.  Walking along rows instead (8 rows, all
 * columns) strides by the leading dimension and thrashes L1's sets. */
#define GEMV_RB 256
AVX2 static void gemv_n_avx2(long m, long ncol, const double *restrict A, long lda,
                             const double *restrict x, const double *alpha,
                             const double *beta, double *restrict y)
{
  const __m256d alr = _mm256_set1_pd(alpha[0]);
  const __m256d ali = _mm256_setr_pd(-alpha[1], alpha[1], -alpha[1], alpha[1]);
  const __m256d ber = _mm256_set1_pd(beta[0]);
  const __m256d bei = _mm256_setr_pd(-beta[1], beta[1], -beta[1], beta[1]);
  const __m256d flip = _mm256_setr_pd(-1.0, 1.0, -1.0, 1.0);
  double rs[2 * GEMV_RB] __attribute__((aligned(32)));
  double is[2 * GEMV_RB] __attribute__((aligned(32)));
  for (long i0 = 0; i0 < m; i0 += GEMV_RB) {
    long rb = m - i0 < GEMV_RB ? m - i0 : GEMV_RB;
    long rb2 = rb & ~1L;
    memset(rs, 0, sizeof(double) * 2 * (size_t)rb);
    memset(is, 0, sizeof(double) * 2 * (size_t)rb);
    const double *a0 = A + 2 * i0;
    long j = 0;
    for (; j + 4 <= ncol; j += 4, a0 += 8 * lda) {
      const double *a1 = a0 + 2 * lda, *a2 = a1 + 2 * lda, *a3 = a2 + 2 * lda;
      const __m256d r0 = _mm256_broadcast_sd(x + 2 * j), i0v = _mm256_broadcast_sd(x + 2 * j + 1);
      const __m256d r1 = _mm256_broadcast_sd(x + 2 * j + 2);
      const __m256d i1v = _mm256_broadcast_sd(x + 2 * j + 3);
      const __m256d r2 = _mm256_broadcast_sd(x + 2 * j + 4);
      const __m256d i2v = _mm256_broadcast_sd(x + 2 * j + 5);
      const __m256d r3 = _mm256_broadcast_sd(x + 2 * j + 6);
      const __m256d i3v = _mm256_broadcast_sd(x + 2 * j + 7);
      for (long i = 0; i < rb2; i += 2) {
        __m256d v0 = _mm256_loadu_pd(a0 + 2 * i), v1 = _mm256_loadu_pd(a1 + 2 * i);
        __m256d v2 = _mm256_loadu_pd(a2 + 2 * i), v3 = _mm256_loadu_pd(a3 + 2 * i);
        __m256d R = _mm256_fmadd_pd(v0, r0, _mm256_load_pd(rs + 2 * i));
        __m256d I = _mm256_fmadd_pd(v0, i0v, _mm256_load_pd(is + 2 * i));
        R = _mm256_fmadd_pd(v1, r1, R);
        I = _mm256_fmadd_pd(v1, i1v, I);
        R = _mm256_fmadd_pd(v2, r2, R);
        I = _mm256_fmadd_pd(v2, i2v, I);
        R = _mm256_fmadd_pd(v3, r3, R);
        I = _mm256_fmadd_pd(v3, i3v, I);
        _mm256_store_pd(rs + 2 * i, R);
        _mm256_store_pd(is + 2 * i, I);
      }
      for (long i = rb2; i < rb; i++)
        for (int c = 0; c < 4; c++) {
          const double *ac = a0 + 2 * c * lda + 2 * i;
          rs[2 * i] += ac[0] * x[2 * (j + c)];
          rs[2 * i + 1] += ac[1] * x[2 * (j + c)];
          is[2 * i] += ac[0] * x[2 * (j + c) + 1];
          is[2 * i + 1] += ac[1] * x[2 * (j + c) + 1];
        }
    }
    for (; j < ncol; j++, a0 += 2 * lda)
      for (long i = 0; i < rb; i++) {
        rs[2 * i] += a0[2 * i] * x[2 * j];
        rs[2 * i + 1] += a0[2 * i + 1] * x[2 * j];
        is[2 * i] += a0[2 * i] * x[2 * j + 1];
        is[2 * i + 1] += a0[2 * i + 1] * x[2 * j + 1];
      }
    double *yp = y + 2 * i0;
    for (long i = 0; i < rb2; i += 2) {
      __m256d s = _mm256_fmadd_pd(flip, _mm256_permute_pd(_mm256_load_pd(is + 2 * i), 5),
                                  _mm256_load_pd(rs + 2 * i));
      _mm256_storeu_pd(yp + 2 * i, axpby2(s, _mm256_loadu_pd(yp + 2 * i), alr, ali, ber, bei));
    }
    for (long i = rb2; i < rb; i++) {
      double sr = rs[2 * i] - is[2 * i + 1], si = rs[2 * i + 1] + is[2 * i];
      double yr = yp[2 * i], yi = yp[2 * i + 1];
      yp[2 * i] = alpha[0] * sr - alpha[1] * si + beta[0] * yr - beta[1] * yi;
      yp[2 * i + 1] = alpha[0] * si + alpha[1] * sr + beta[0] * yi + beta[1] * yr;
    }
  }
}

/* One column's dot product sums for gemv_t: p = sum a x, q = sum a swap(x). */
AVX2 static inline void gemv_t_finish(__m256d p, __m256d q, int conj, double tr, double ti,
                                      const double *alpha, const double *beta, double *yj)
{
  /* a x:        re = even(p) - odd(p), im = even(q) + odd(q)
   * conj(a) x:  re = even(p) + odd(p), im = even(q) - odd(q) */
  double sr = (conj ? hsum(p) : hdiff(p)) + tr;
  double si = (conj ? hdiff(q) : hsum(q)) + ti;
  double yr = yj[0], yi = yj[1];
  yj[0] = alpha[0] * sr - alpha[1] * si + beta[0] * yr - beta[1] * yi;
  yj[1] = alpha[0] * si + alpha[1] * sr + beta[0] * yi + beta[1] * yr;
}

/* The tail rows [i0, m) of column a for gemv_t, in scalar code. */
static void gemv_t_tail(long i0, long m, const double *a, const double *x, int conj,
                        double *tr, double *ti)
{
  double sg = conj ? -1.0 : 1.0, sr = 0, si = 0;
  for (long i = i0; i < m; i++) {
    double ar = a[2 * i], ai = sg * a[2 * i + 1];
    sr += ar * x[2 * i] - ai * x[2 * i + 1];
    si += ar * x[2 * i + 1] + ai * x[2 * i];
  }
  *tr = sr;
  *ti = si;
}

AVX2 static void gemv_t_avx2(long m, long j0, long j1, const double *restrict A, long lda,
                             const double *restrict x, int conj, const double *alpha,
                             const double *beta, double *restrict y)
{
  long m2 = m & ~1L; /* rows done two at a time */
  long j = j0;
  for (; j + 4 <= j1; j += 4) { /* four columns share every load of x */
    const double *a0 = A + 2 * j * lda, *a1 = a0 + 2 * lda, *a2 = a1 + 2 * lda,
                 *a3 = a2 + 2 * lda;
    __m256d p0 = _mm256_setzero_pd(), p1 = p0, p2 = p0, p3 = p0;
    __m256d q0 = p0, q1 = p0, q2 = p0, q3 = p0;
    for (long i = 0; i < m2; i += 2) {
      __m256d xv = _mm256_loadu_pd(x + 2 * i);
      KEEP(xv);
      __m256d xs = _mm256_permute_pd(xv, 5);
      __m256d v0 = _mm256_loadu_pd(a0 + 2 * i), v1 = _mm256_loadu_pd(a1 + 2 * i);
      __m256d v2 = _mm256_loadu_pd(a2 + 2 * i), v3 = _mm256_loadu_pd(a3 + 2 * i);
      KEEP(v0); KEEP(v1); KEEP(v2); KEEP(v3);
      p0 = _mm256_fmadd_pd(v0, xv, p0);
      p1 = _mm256_fmadd_pd(v1, xv, p1);
      p2 = _mm256_fmadd_pd(v2, xv, p2);
      p3 = _mm256_fmadd_pd(v3, xv, p3);
      q0 = _mm256_fmadd_pd(v0, xs, q0);
      q1 = _mm256_fmadd_pd(v1, xs, q1);
      q2 = _mm256_fmadd_pd(v2, xs, q2);
      q3 = _mm256_fmadd_pd(v3, xs, q3);
    }
    double tr[4] = {0, 0, 0, 0}, ti[4] = {0, 0, 0, 0};
    if (m2 < m) {
      gemv_t_tail(m2, m, a0, x, conj, &tr[0], &ti[0]);
      gemv_t_tail(m2, m, a1, x, conj, &tr[1], &ti[1]);
      gemv_t_tail(m2, m, a2, x, conj, &tr[2], &ti[2]);
      gemv_t_tail(m2, m, a3, x, conj, &tr[3], &ti[3]);
    }
    gemv_t_finish(p0, q0, conj, tr[0], ti[0], alpha, beta, y + 2 * j);
    gemv_t_finish(p1, q1, conj, tr[1], ti[1], alpha, beta, y + 2 * j + 2);
    gemv_t_finish(p2, q2, conj, tr[2], ti[2], alpha, beta, y + 2 * j + 4);
    gemv_t_finish(p3, q3, conj, tr[3], ti[3], alpha, beta, y + 2 * j + 6);
  }
  for (; j < j1; j++) {
    const double *a0 = A + 2 * j * lda;
    __m256d p0 = _mm256_setzero_pd(), q0 = p0;
    for (long i = 0; i < m2; i += 2) {
      __m256d xv = _mm256_loadu_pd(x + 2 * i), v0 = _mm256_loadu_pd(a0 + 2 * i);
      p0 = _mm256_fmadd_pd(v0, xv, p0);
      q0 = _mm256_fmadd_pd(v0, _mm256_permute_pd(xv, 5), q0);
    }
    double tr = 0, ti = 0;
    if (m2 < m)
      gemv_t_tail(m2, m, a0, x, conj, &tr, &ti);
    gemv_t_finish(p0, q0, conj, tr, ti, alpha, beta, y + 2 * j);
  }
}

/* ---------------------------------------------------------------------
 * AVX-512 kernels.
 * A zmm register holds four complex numbers; _mm512_permute_pd(v, 0x55)
 * swaps each real/imaginary pair.  Tails use masked loads and stores.
 * --------------------------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma")))

/* The mask of the first 2 r doubles (r complex numbers, r < 4). */
AVX512 static inline __mmask8 tail_mask(long r) { return (__mmask8)((1u << (2 * r)) - 1u); }

AVX512 static void zaxpy_avx512(long n, const double *a, const double *restrict x,
                                double *restrict y)
{
  const __m512d ar = _mm512_set1_pd(a[0]);
  const __m512d ai = _mm512_setr_pd(-a[1], a[1], -a[1], a[1], -a[1], a[1], -a[1], a[1]);
  long i = 0;
  for (; i + 16 <= n; i += 16) { /* 16 complex = 4 registers */
    const double *xp = x + 2 * i;
    double *yp = y + 2 * i;
    for (int q = 0; q < 32; q += 8) {
      _mm_prefetch((const char *)(xp + PF_AHEAD + q), _MM_HINT_T0);
      _mm_prefetch((const char *)(yp + PF_AHEAD + q), _MM_HINT_T0);
    }
    __m512d x0 = _mm512_loadu_pd(xp), x1 = _mm512_loadu_pd(xp + 8);
    __m512d x2 = _mm512_loadu_pd(xp + 16), x3 = _mm512_loadu_pd(xp + 24);
    KEEP(x0); KEEP(x1); KEEP(x2); KEEP(x3);
    __m512d y0 = _mm512_fmadd_pd(ar, x0, _mm512_loadu_pd(yp));
    __m512d y1 = _mm512_fmadd_pd(ar, x1, _mm512_loadu_pd(yp + 8));
    __m512d y2 = _mm512_fmadd_pd(ar, x2, _mm512_loadu_pd(yp + 16));
    __m512d y3 = _mm512_fmadd_pd(ar, x3, _mm512_loadu_pd(yp + 24));
    _mm512_storeu_pd(yp, _mm512_fmadd_pd(ai, _mm512_permute_pd(x0, 0x55), y0));
    _mm512_storeu_pd(yp + 8, _mm512_fmadd_pd(ai, _mm512_permute_pd(x1, 0x55), y1));
    _mm512_storeu_pd(yp + 16, _mm512_fmadd_pd(ai, _mm512_permute_pd(x2, 0x55), y2));
    _mm512_storeu_pd(yp + 24, _mm512_fmadd_pd(ai, _mm512_permute_pd(x3, 0x55), y3));
  }
  for (; i < n; i += 4) {
    __mmask8 k = n - i >= 4 ? (__mmask8)0xff : tail_mask(n - i);
    __m512d x0 = _mm512_maskz_loadu_pd(k, x + 2 * i);
    __m512d y0 = _mm512_fmadd_pd(ar, x0, _mm512_maskz_loadu_pd(k, y + 2 * i));
    _mm512_mask_storeu_pd(y + 2 * i, k, _mm512_fmadd_pd(ai, _mm512_permute_pd(x0, 0x55), y0));
  }
}

AVX512 static void zdotc_avx512(long n, const double *restrict x, const double *restrict y,
                                double out[2])
{
  /* as zdotc_avx2: p += x y, q += x swap(y); re = sum p, im = even(q) - odd(q) */
  __m512d p0 = _mm512_setzero_pd(), p1 = p0, p2 = p0, p3 = p0;
  __m512d q0 = p0, q1 = p0, q2 = p0, q3 = p0;
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    const double *xp = x + 2 * i, *yp = y + 2 * i;
    _mm_prefetch((const char *)(xp + PF_AHEAD), _MM_HINT_T0);
    _mm_prefetch((const char *)(xp + PF_AHEAD + 8), _MM_HINT_T0);
    _mm_prefetch((const char *)(xp + PF_AHEAD + 16), _MM_HINT_T0);
    _mm_prefetch((const char *)(xp + PF_AHEAD + 24), _MM_HINT_T0);
    _mm_prefetch((const char *)(yp + PF_AHEAD), _MM_HINT_T0);
    _mm_prefetch((const char *)(yp + PF_AHEAD + 8), _MM_HINT_T0);
    _mm_prefetch((const char *)(yp + PF_AHEAD + 16), _MM_HINT_T0);
    _mm_prefetch((const char *)(yp + PF_AHEAD + 24), _MM_HINT_T0);
    __m512d x0 = _mm512_loadu_pd(xp), x1 = _mm512_loadu_pd(xp + 8);
    __m512d x2 = _mm512_loadu_pd(xp + 16), x3 = _mm512_loadu_pd(xp + 24);
    __m512d y0 = _mm512_loadu_pd(yp), y1 = _mm512_loadu_pd(yp + 8);
    __m512d y2 = _mm512_loadu_pd(yp + 16), y3 = _mm512_loadu_pd(yp + 24);
    KEEP(x0); KEEP(x1); KEEP(x2); KEEP(x3); KEEP(y0); KEEP(y1); KEEP(y2); KEEP(y3);
    p0 = _mm512_fmadd_pd(x0, y0, p0);
    p1 = _mm512_fmadd_pd(x1, y1, p1);
    p2 = _mm512_fmadd_pd(x2, y2, p2);
    p3 = _mm512_fmadd_pd(x3, y3, p3);
    q0 = _mm512_fmadd_pd(x0, _mm512_permute_pd(y0, 0x55), q0);
    q1 = _mm512_fmadd_pd(x1, _mm512_permute_pd(y1, 0x55), q1);
    q2 = _mm512_fmadd_pd(x2, _mm512_permute_pd(y2, 0x55), q2);
    q3 = _mm512_fmadd_pd(x3, _mm512_permute_pd(y3, 0x55), q3);
  }
  for (; i < n; i += 4) {
    __mmask8 k = n - i >= 4 ? (__mmask8)0xff : tail_mask(n - i);
    __m512d x0 = _mm512_maskz_loadu_pd(k, x + 2 * i), y0 = _mm512_maskz_loadu_pd(k, y + 2 * i);
    p0 = _mm512_fmadd_pd(x0, y0, p0);
    q0 = _mm512_fmadd_pd(x0, _mm512_permute_pd(y0, 0x55), q0);
  }
  const __m512d alt = _mm512_setr_pd(1, -1, 1, -1, 1, -1, 1, -1);
  __m512d p = _mm512_add_pd(_mm512_add_pd(p0, p1), _mm512_add_pd(p2, p3));
  __m512d q = _mm512_add_pd(_mm512_add_pd(q0, q1), _mm512_add_pd(q2, q3));
  out[0] = _mm512_reduce_add_pd(p);
  out[1] = _mm512_reduce_add_pd(_mm512_mul_pd(q, alt));
}

/* dznrm2's sums, blocked: every block of NRM2_BLOCK doubles first takes
 * the fast path (the plain sum of squares into the mid sum) while it
 * tracks, on the bit patterns of |v|, the largest value and the smallest
 * nonzero one (|v| - 1 as an unsigned integer wraps zero round to the
 * top).  A block whose values all lie in Blue's mid range [TSML, TBIG]
 * keeps that sum; any other block (huge, tiny, infinite or NaN values) is
 * summed again by Blue's three-way split. */
#define NRM2_BLOCK 1024
AVX512 static void nrm2_avx512(long n, const double *restrict v, double acc[3])
{
  const __m512i absmask = _mm512_set1_epi64(0x7fffffffffffffffLL);
  const __m512i one = _mm512_set1_epi64(1);
  union { double d; int64_t i; } big = {TBIG}, sml = {TSML};
  const __m512i bigbits = _mm512_set1_epi64(big.i), smlbits1 = _mm512_set1_epi64(sml.i - 1);
  __m512d t0 = _mm512_setzero_pd(), t1 = t0; /* accepted blocks' mid sums */
  double slow[3] = {0, 0, 0};
  for (long b0 = 0; b0 < n; b0 += NRM2_BLOCK) {
    long len = n - b0 < NRM2_BLOCK ? n - b0 : NRM2_BLOCK;
    const double *p = v + b0;
    __m512d m0 = _mm512_setzero_pd(), m1 = m0, m2 = m0, m3 = m0;
    __m512i hi = _mm512_setzero_si512(), lo = _mm512_set1_epi64(-1);
    long i = 0;
#define NRM2_FAST(V, M)                                                           \
  do {                                                                            \
    __m512i a_ = _mm512_and_si512(_mm512_castpd_si512(V), absmask);               \
    hi = _mm512_max_epu64(hi, a_);                                                \
    lo = _mm512_min_epu64(lo, _mm512_sub_epi64(a_, one));                         \
    M = _mm512_fmadd_pd(V, V, M);                                                 \
  } while (0)
    for (; i + 32 <= len; i += 32) {
      __m512d v0 = _mm512_loadu_pd(p + i), v1 = _mm512_loadu_pd(p + i + 8);
      __m512d v2 = _mm512_loadu_pd(p + i + 16), v3 = _mm512_loadu_pd(p + i + 24);
      NRM2_FAST(v0, m0);
      NRM2_FAST(v1, m1);
      NRM2_FAST(v2, m2);
      NRM2_FAST(v3, m3);
    }
    for (; i < len; i += 8) {
      __mmask8 k = len - i >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (len - i)) - 1u);
      __m512d v0 = _mm512_maskz_loadu_pd(k, p + i);
      /* masked-off lanes load 0, which the wrap sends to the top of lo */
      NRM2_FAST(v0, m0);
    }
#undef NRM2_FAST
    __mmask8 out = _mm512_cmpgt_epu64_mask(hi, bigbits) | _mm512_cmplt_epu64_mask(lo, smlbits1);
    if (!out) {
      t0 = _mm512_add_pd(t0, _mm512_add_pd(m0, m1));
      t1 = _mm512_add_pd(t1, _mm512_add_pd(m2, m3));
    } else {
      double part[3];
      nrm2_avx2(len, p, part);
      slow[0] += part[0];
      slow[1] += part[1];
      slow[2] += part[2];
    }
  }
  acc[0] = slow[0];
  acc[1] = slow[1] + _mm512_reduce_add_pd(_mm512_add_pd(t0, t1));
  acc[2] = slow[2];
}

/* zgemv_n with AVX-512, for a block of rows: the product A x is built in
 * one L1-resident buffer ys, a few columns at a time.  For each register
 * of four rows, R = ys + sum_c A(:,c) Re x_c and I = sum_c A(:,c) Im x_c
 * gather in two registers over the pass's columns, and only their
 * combination R + flip(swap(I)) goes back to the buffer: one load and one
 * store of it per step.  (Keeping both sums in two buffers, as the AVX2
 * kernel does, costs twice that traffic: 10% at L1- and L2-resident
 * orders; splitting each sum into two FMA chains cost another 10% at
 * orders up to 40 -- the steps are independent, and out-of-order
 * execution overlaps their chains anyway.) */
AVX512 static inline __attribute__((always_inline)) void
gemv_n_cols512(int cols, const double *a0, long lda, const double *x, long rb, __mmask8 tail,
               double *ys, __m512d flip)
{
  const double *ac[8];
  __m512d xr[8], xi[8];
  for (int c = 0; c < cols; c++) {
    ac[c] = a0 + 2 * c * lda;
    xr[c] = _mm512_set1_pd(x[2 * c]);
    xi[c] = _mm512_set1_pd(x[2 * c + 1]);
  }
  for (long i = 0; i < rb; i += 4) {
    __mmask8 k = i + 4 <= rb ? (__mmask8)0xff : tail;
    __m512d v[8];
    for (int c = 0; c < cols; c++) {
      v[c] = _mm512_maskz_loadu_pd(k, ac[c] + 2 * i);
      KEEP(v[c]);
    }
    __m512d R = _mm512_load_pd(ys + 2 * i), I = _mm512_mul_pd(v[0], xi[0]);
    R = _mm512_fmadd_pd(v[0], xr[0], R);
    for (int c = 1; c < cols; c++) {
      R = _mm512_fmadd_pd(v[c], xr[c], R);
      I = _mm512_fmadd_pd(v[c], xi[c], I);
    }
    __m512d acc = _mm512_fmadd_pd(flip, _mm512_permute_pd(I, 0x55), R);
    _mm512_store_pd(ys + 2 * i, acc);
  }
}

/* Row blocks of GEMV_RB512 = 1024 (a 16 KiB buffer): each pass streams up
 * to 16 KiB of every column, where 4 KiB segments (256 rows) made the
 * hardware prefetcher start again at every segment -- about 10% slower
 * once the matrix comes from memory.  Eight columns per pass, except
 * where the block is whole columns of the process's matrix (one thread,
 * at most 1024 rows) and that matrix outgrows the L2 cache: there
 * consecutive passes over two columns read one sequential stream from
 * L3, which ran 3-10% faster than eight columns (orders 441-799 on the
 * 2 MiB-L2 Xeon; 4% more than four columns at 441).  Blocks of rows
 * (threads' halves, row blocks of larger orders) read short segments a
 * column's length apart: there eight concurrent streams won (two columns:
 * 0.86x at order 2640, and 0.84x OpenBLAS for two threads' halves of
 * order 441, which each fit in L2).
 * A ragged row tail uses masked loads (the buffer is padded to whole
 * registers). */
#define GEMV_RB512 1024
static long l2_bytes = 2L << 20; /* the L2 cache per core; set in main */
AVX512 static void gemv_n_avx512(long m, long ncol, const double *restrict A, long lda,
                                 const double *restrict x, const double *alpha,
                                 const double *beta, double *restrict y)
{
  const __m512d alr = _mm512_set1_pd(alpha[0]);
  const __m512d ali = _mm512_setr_pd(-alpha[1], alpha[1], -alpha[1], alpha[1], -alpha[1],
                                     alpha[1], -alpha[1], alpha[1]);
  const __m512d ber = _mm512_set1_pd(beta[0]);
  const __m512d bei = _mm512_setr_pd(-beta[1], beta[1], -beta[1], beta[1], -beta[1], beta[1],
                                     -beta[1], beta[1]);
  const __m512d flip = _mm512_setr_pd(-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0);
  double ys[2 * GEMV_RB512] __attribute__((aligned(64)));
  for (long i0 = 0; i0 < m; i0 += GEMV_RB512) {
    long rb = m - i0 < GEMV_RB512 ? m - i0 : GEMV_RB512;
    long rb4 = (rb + 3) & ~3L; /* padded to whole registers */
    __mmask8 tail = (rb & 3) ? tail_mask(rb & 3) : (__mmask8)0xff;
    memset(ys, 0, sizeof(double) * 2 * (size_t)rb4);
    const double *a0 = A + 2 * i0;
    long j = 0;
    if (rb != lda || rb * ncol * 16 <= l2_bytes) {
      for (; j + 8 <= ncol; j += 8, a0 += 16 * lda)
        gemv_n_cols512(8, a0, lda, x + 2 * j, rb, tail, ys, flip);
      for (; j + 4 <= ncol; j += 4, a0 += 8 * lda)
        gemv_n_cols512(4, a0, lda, x + 2 * j, rb, tail, ys, flip);
    }
    for (; j + 2 <= ncol; j += 2, a0 += 4 * lda)
      gemv_n_cols512(2, a0, lda, x + 2 * j, rb, tail, ys, flip);
    for (; j < ncol; j++, a0 += 2 * lda) {
      const __m512d xr = _mm512_set1_pd(x[2 * j]), xi = _mm512_set1_pd(x[2 * j + 1]);
      for (long i = 0; i < rb; i += 4) {
        __mmask8 k = i + 4 <= rb ? (__mmask8)0xff : tail;
        __m512d v = _mm512_maskz_loadu_pd(k, a0 + 2 * i);
        __m512d acc = _mm512_fmadd_pd(v, xr, _mm512_load_pd(ys + 2 * i));
        acc = _mm512_fmadd_pd(flip, _mm512_permute_pd(_mm512_mul_pd(v, xi), 0x55), acc);
        _mm512_store_pd(ys + 2 * i, acc);
      }
    }
    double *yp = y + 2 * i0;
    for (long i = 0; i < rb; i += 4) {
      __mmask8 k = i + 4 <= rb ? (__mmask8)0xff : tail;
      __m512d s = _mm512_load_pd(ys + 2 * i);
      __m512d yv = _mm512_maskz_loadu_pd(k, yp + 2 * i);
      __m512d out = _mm512_add_pd(
          _mm512_fmadd_pd(ali, _mm512_permute_pd(s, 0x55), _mm512_mul_pd(alr, s)),
          _mm512_fmadd_pd(bei, _mm512_permute_pd(yv, 0x55), _mm512_mul_pd(ber, yv)));
      _mm512_mask_storeu_pd(yp + 2 * i, k, out);
    }
  }
}

/* The end of one column of zgemv_t with AVX-512: p = sum a x, q = sum a
 * swap(x) lane by lane; as gemv_t_finish. */
AVX512 static inline void gemv_t_finish512(__m512d p, __m512d q, int conj, const double *alpha,
                                           const double *beta, double *yj)
{
  /* fold each register to [sum of its even lanes, sum of its odd lanes] */
  __m256d p4 = _mm256_add_pd(_mm512_castpd512_pd256(p), _mm512_extractf64x4_pd(p, 1));
  __m256d q4 = _mm256_add_pd(_mm512_castpd512_pd256(q), _mm512_extractf64x4_pd(q, 1));
  __m128d p2 = _mm_add_pd(_mm256_castpd256_pd128(p4), _mm256_extractf128_pd(p4, 1));
  __m128d q2 = _mm_add_pd(_mm256_castpd256_pd128(q4), _mm256_extractf128_pd(q4, 1));
  double pe = _mm_cvtsd_f64(p2), po = _mm_cvtsd_f64(_mm_unpackhi_pd(p2, p2));
  double qe = _mm_cvtsd_f64(q2), qo = _mm_cvtsd_f64(_mm_unpackhi_pd(q2, q2));
  double sr = conj ? pe + po : pe - po, si = conj ? qe - qo : qe + qo;
  double yr = yj[0], yi = yj[1];
  yj[0] = alpha[0] * sr - alpha[1] * si + beta[0] * yr - beta[1] * yi;
  yj[1] = alpha[0] * si + alpha[1] * sr + beta[0] * yi + beta[1] * yr;
}

/* zgemv_t/_c with AVX-512: four columns share every load of x; a ragged
 * row tail uses masked loads (zeros add nothing). */
#define GEMV_T_SPLIT_BYTES (1L << 20)
AVX512 static void gemv_t_avx512(long m, long j0, long j1, const double *restrict A, long lda,
                                 const double *restrict x, int conj, const double *alpha,
                                 const double *beta, double *restrict y)
{
  /* Columns that do not start on a cache line (lda not a multiple of
   * four complex numbers) make every 64-byte load span two lines.  From
   * L1 and L2 that costs little, but once the columns stream from L3 the
   * split loads held zgemv_t about 5% below the same kernel on aligned
   * columns, and the AVX2 kernel's 32-byte loads (half of them split)
   * ran about 5% faster: take it there. */
  if ((lda & 3) != 0 && (j1 - j0) * m * 16 > GEMV_T_SPLIT_BYTES) {
    gemv_t_avx2(m, j0, j1, A, lda, x, conj, alpha, beta, y);
    return;
  }
  __mmask8 tail = (m & 3) ? tail_mask(m & 3) : (__mmask8)0xff;
  long j = j0;
  for (; j + 4 <= j1; j += 4) {
    const double *a0 = A + 2 * j * lda, *a1 = a0 + 2 * lda, *a2 = a1 + 2 * lda,
                 *a3 = a2 + 2 * lda;
    __m512d p0 = _mm512_setzero_pd(), p1 = p0, p2 = p0, p3 = p0;
    __m512d q0 = p0, q1 = p0, q2 = p0, q3 = p0;
    for (long i = 0; i < m; i += 4) {
      __mmask8 k = i + 4 <= m ? (__mmask8)0xff : tail;
      __m512d xv = _mm512_maskz_loadu_pd(k, x + 2 * i);
      KEEP(xv);
      __m512d xs = _mm512_permute_pd(xv, 0x55);
      __m512d v0 = _mm512_maskz_loadu_pd(k, a0 + 2 * i), v1 = _mm512_maskz_loadu_pd(k, a1 + 2 * i);
      __m512d v2 = _mm512_maskz_loadu_pd(k, a2 + 2 * i), v3 = _mm512_maskz_loadu_pd(k, a3 + 2 * i);
      KEEP(v0); KEEP(v1); KEEP(v2); KEEP(v3);
      p0 = _mm512_fmadd_pd(v0, xv, p0);
      p1 = _mm512_fmadd_pd(v1, xv, p1);
      p2 = _mm512_fmadd_pd(v2, xv, p2);
      p3 = _mm512_fmadd_pd(v3, xv, p3);
      q0 = _mm512_fmadd_pd(v0, xs, q0);
      q1 = _mm512_fmadd_pd(v1, xs, q1);
      q2 = _mm512_fmadd_pd(v2, xs, q2);
      q3 = _mm512_fmadd_pd(v3, xs, q3);
    }
    gemv_t_finish512(p0, q0, conj, alpha, beta, y + 2 * j);
    gemv_t_finish512(p1, q1, conj, alpha, beta, y + 2 * j + 2);
    gemv_t_finish512(p2, q2, conj, alpha, beta, y + 2 * j + 4);
    gemv_t_finish512(p3, q3, conj, alpha, beta, y + 2 * j + 6);
  }
  for (; j < j1; j++) {
    const double *a0 = A + 2 * j * lda;
    __m512d p0 = _mm512_setzero_pd(), q0 = p0;
    for (long i = 0; i < m; i += 4) {
      __mmask8 k = i + 4 <= m ? (__mmask8)0xff : tail;
      __m512d xv = _mm512_maskz_loadu_pd(k, x + 2 * i), v0 = _mm512_maskz_loadu_pd(k, a0 + 2 * i);
      p0 = _mm512_fmadd_pd(v0, xv, p0);
      q0 = _mm512_fmadd_pd(v0, _mm512_permute_pd(xv, 0x55), q0);
    }
    gemv_t_finish512(p0, q0, conj, alpha, beta, y + 2 * j);
  }
}

typedef struct kernels {
  const char *name;
  void (*zaxpy)(long, const double *, const double *, double *);
  void (*zdotc)(long, const double *, const double *, double *);
  void (*nrm2)(long, const double *, double *);
  void (*gemv_n)(long, long, const double *, long, const double *, const double *,
                 const double *, double *);
  void (*gemv_t)(long, long, long, const double *, long, const double *, int, const double *,
                 const double *, double *);
} kernels_t;

static const kernels_t KERNELS_C = {"generic", zaxpy_c, zdotc_c, nrm2_c, gemv_n_c, gemv_t_c};
static const kernels_t KERNELS_AVX2 = {"avx2-fma", zaxpy_avx2, zdotc_avx2, nrm2_avx2,
                                       gemv_n_avx2, gemv_t_avx2};
static const kernels_t KERNELS_AVX512 = {"avx512", zaxpy_avx512, zdotc_avx512, nrm2_avx512,
                                         gemv_n_avx512, gemv_t_avx512};

/* Blue's final step: the norm from the three sums. */
static double nrm2_combine(const double acc[3])
{
  double asml = acc[0], amed = acc[1], abig = acc[2], scl, sumsq;
  if (abig > 0.0) {
    if (amed > 0.0 || isnan(amed))
      abig += (amed * SBIG) * SBIG;
    scl = 1.0 / SBIG;
    sumsq = abig;
  } else if (asml > 0.0) {
    if (amed > 0.0 || isnan(amed)) {
      double ymed = sqrt(amed), ysml = sqrt(asml) / SSML;
      double ymin = ysml > ymed ? ymed : ysml, ymax = ysml > ymed ? ysml : ymed;
      scl = 1.0;
      sumsq = ymax * ymax * (1.0 + (ymin / ymax) * (ymin / ymax));
    } else {
      scl = 1.0 / SSML;
      sumsq = asml;
    }
  } else {
    scl = 1.0;
    sumsq = amed;
  }
  return scl * sqrt(sumsq);
}

/* ---------------------------------------------------------------------
 * Data.
 * --------------------------------------------------------------------- */

static void x_at(long i, double s, double *v)
{
  v[0] = s * ((double)((7 * i) % 13) - 6.0) / 8.0;
  v[1] = s * ((double)((3 * i) % 11) - 5.0) / 8.0;
}

static void y_at(long i, double *v)
{
  v[0] = ((double)((5 * i) % 17) - 8.0) / 16.0;
  v[1] = ((double)((11 * i) % 7) - 3.0) / 4.0;
}

static void a_at(long i, long j, double *v)
{
  v[0] = ((double)((3 * i + 5 * j) % 19) - 9.0) / 16.0;
  v[1] = ((double)((7 * i + 2 * j) % 23) - 11.0) / 32.0;
}

/* ---------------------------------------------------------------------
 * The run.
 * --------------------------------------------------------------------- */

/* A call counter one thread advances and others wait for (the waits of
 * common/wait.h: a learned spin, then a futex sleep; the writer wakes
 * sleepers only when there are some). */
struct zseq {
  _Atomic uint32_t n;
  atomic_int sleepers;
  tiers_spin_t spin;
};

/* One call's partial sums from one thread, in one cache line with the
 * number (+ 1) of the call they belong to. */
struct zslot {
  _Alignas(64) struct zseq seq;
  double v[4];
};
_Static_assert(sizeof(struct zslot) == 64, "a slot is one cache line");

/* Slots per thread: a thread may run this many calls ahead of the master. */
#define SLOT_RING 4

struct run {
  const kernels_t *K;
  int nprocs;
  enum kern kern;  /* the batch being run */
  long iters;
  long nl, ml, m;  /* local vector length; local matrix rows; matrix order */
  double *x, *xs;  /* local x; local S x for dznrm2 (x itself when S = 1) */
  double *yaxpy;   /* local y, updated by zaxpy */
  double *A;       /* ml x m column-major, lda = ml */
  double *gx;      /* local x of zgemv (length ml) */
  double *yg[3];   /* local y of zgemv_n, _t, _c (length ml) */
  double *yd;      /* local y of zdotc (untouched) */
  double *xfull;   /* zgemv_n: all of x (m); zgemv_t/_c: the partial products (m) */
  double *part;    /* zgemv_t/_c: this process's block of the summed products (ml) */
  tiers_barrier_t bar;
  struct zslot *slots; /* zdotc/dznrm2 partial sums: per thread SLOT_RING slots */
  _Alignas(64) struct zseq done; /* calls whose partial sums the master has added */
  char done_pad[64 - sizeof(struct zseq)];
  double dot[2], nrm;
  long v0, r0;     /* global index of the first local vector element, matrix row */
  double scale;    /* dznrm2's input scale */
};

static int team_wait(tiers_team_t team, tiers_barrier_t bar)
{
  tiers_phase_t was = tiers_team_phase(team, TIERS_PHASE_SYNC);
  int rc = tiers_barrier_wait(bar);
  if (was != TIERS_PHASE_COUNT)
    tiers_team_phase(team, was);
  return rc;
}

/* zdotc and dznrm2 end every call in a team reduction (each thread hands
 * the master one cache line): below DOT_PAR_MIN (NRM2_PAR_MIN) complex
 * numbers per thread that hand-over costs more than the split saves, so
 * they run on fewer threads (one: no reduction at all with one process).
 * Measured at 2 threads: zdotc on one thread wins at n = 1,024 (the
 * vectors in its L1 cache), on two from 1,536; dznrm2 on two from 768.
 * zaxpy needs no synchronisation between calls and splits from
 * AXPY_PAR_MIN numbers a thread; zgemv always uses every thread. */
#define DOT_PAR_MIN 768L
#define NRM2_PAR_MIN 384L
#define AXPY_PAR_MIN 1024L /* zaxpy: numbers per thread, at least */

static int active_threads(long n, long par_min, int nthreads)
{
  long a = n / par_min;
  if (a < 1)
    a = 1;
  return a < nthreads ? (int)a : nthreads;
}

/* Thread t's block [lo, hi) of n items among the first act threads, on
 * boundaries that are multiples of 8 items (whole cache lines); threads
 * from act on get an empty block. */
static void vsplit(long n, int act, int t, long *lo, long *hi)
{
  if (t >= act) {
    *lo = *hi = n;
    return;
  }
  long chunks = (n + 7) / 8, c0 = chunks * t / act, c1 = chunks * (t + 1) / act;
  *lo = c0 * 8 < n ? c0 * 8 : n;
  *hi = c1 * 8 < n ? c1 * 8 : n;
}

/* First-touch placement: every thread writes the blocks it computes on
 * (vectors by the vector split, the matrix by columns as zgemv_t/_c read
 * it), so that on a NUMA machine its pages sit on that thread's node. */
static int init_body(tiers_team_t team, int t, void *arg)
{
  struct run *R = arg;
  int nt = tiers_team_nthreads(team);
  long lo, hi;
  vsplit(R->nl, nt, t, &lo, &hi);
  for (long i = lo; i < hi; i++) {
    x_at(R->v0 + i, 1.0, R->x + 2 * i);
    if (R->xs != R->x)
      x_at(R->v0 + i, R->scale, R->xs + 2 * i);
    y_at(R->v0 + i, R->yaxpy + 2 * i);
    y_at(R->v0 + i, R->yd + 2 * i);
  }
  vsplit(R->m, nt, t, &lo, &hi);
  for (long j = lo; j < hi; j++)
    for (long i = 0; i < R->ml; i++)
      a_at(R->r0 + i, j, R->A + 2 * (i + j * R->ml));
  vsplit(R->ml, nt, t, &lo, &hi);
  for (long i = lo; i < hi; i++) {
    x_at(R->r0 + i, 1.0, R->gx + 2 * i);
    for (int f = 0; f < 3; f++)
      y_at(R->r0 + i, R->yg[f] + 2 * i);
  }
  return TIERS_OK;
}

/* Whether counter value @p v has reached @p target (modulo 2^32). */
static inline int seq_reached(uint32_t v, uint32_t target) { return (int32_t)(v - target) >= 0; }

static void seq_publish(struct zseq *q, uint32_t v)
{
  atomic_store_explicit(&q->n, v, memory_order_seq_cst);
  tiers_wake_waiters(&q->n, &q->sleepers);
}

/* Waits until q has reached target (the other thread is normally running
 * and a call away: the spin usually ends it). */
static void seq_wait(struct zseq *q, uint32_t target)
{
  for (;;) {
    uint32_t v = atomic_load_explicit(&q->n, memory_order_acquire);
    if (seq_reached(v, target))
      return;
    tiers_wait_while_equal(&q->n, v, &q->spin, &q->sleepers);
  }
}

/* One call's reduction of zdotc or dznrm2 over the first act threads of
 * the team, without a barrier: thread t > 0 writes its @p count partial
 * sums (in @p part, computed into its slot for call it) and publishes the
 * call number in that slot's own cache line, then goes on to its next
 * call; the master adds the slots in thread order as each is published
 * (the result does not depend on timing) and, with several processes,
 * sums over them, then publishes that it is done with call it.  A thread
 * may run SLOT_RING calls ahead: it writes slot it % SLOT_RING again only
 * once the master is done with call it - SLOT_RING, which it rarely has to
 * wait for.  Per call the master reads one line per thread and each
 * thread hands over one line, where a barrier had every thread wait for
 * the slowest. */
static double *call_slot(struct run *R, int t, long it)
{
  return R->slots[(size_t)t * SLOT_RING + (size_t)(it % SLOT_RING)].v;
}

static int worker_ready(struct run *R, long it)
{
  if (it >= SLOT_RING)
    seq_wait(&R->done, (uint32_t)(it - SLOT_RING + 1));
  return TIERS_OK;
}

static int reduce_call(tiers_team_t team, struct run *R, int t, int act, long it, int count,
                       double *out)
{
  if (t != 0) {
    seq_publish(&R->slots[(size_t)t * SLOT_RING + (size_t)(it % SLOT_RING)].seq,
                (uint32_t)(it + 1));
    return TIERS_OK;
  }
  const double *mine = call_slot(R, 0, it);
  double acc[4];
  for (int i = 0; i < count; i++)
    acc[i] = mine[i];
  for (int u = 1; u < act; u++) {
    struct zslot *sl = &R->slots[(size_t)u * SLOT_RING + (size_t)(it % SLOT_RING)];
    if (!seq_reached(atomic_load_explicit(&sl->seq.n, memory_order_acquire), (uint32_t)(it + 1))) {
      tiers_phase_t was = tiers_team_phase(team, TIERS_PHASE_SYNC);
      seq_wait(&sl->seq, (uint32_t)(it + 1));
      if (was != TIERS_PHASE_COUNT)
        tiers_team_phase(team, was);
    }
    for (int i = 0; i < count; i++)
      acc[i] += sl->v[i];
  }
  seq_publish(&R->done, (uint32_t)(it + 1));
  for (int i = 0; i < count; i++)
    out[i] = acc[i];
  if (R->nprocs > 1) {
    tiers_team_phase(team, TIERS_PHASE_COMM);
    int rc = MPI_Allreduce(MPI_IN_PLACE, out, count, MPI_DOUBLE, MPI_SUM,
                           tiers_team_comm(team));
    tiers_team_phase(team, TIERS_PHASE_COMPUTE);
    if (rc != MPI_SUCCESS)
      TIERS_ERROR(TIERS_ERR_MPI, "zblas: MPI_Allreduce failed");
  }
  return TIERS_OK;
}

/* zgemv_t/_c over columns [lo, hi) of call it.  Odd calls walk the
 * columns backwards, GEMV_T_BACK at a time: a thread's columns a little
 * larger than its L2 cache (order 540 at two threads: 2.3 MiB a thread
 * against 2 MiB) thrash it when every call reads them in the same order
 * -- the columns read last push out the ones the next call reads first --
 * while in alternating order each call starts on the columns the last one
 * read last, still in L2.  Every column's sums are computed the same way
 * in either order, so the results do not change.  Measured on the 2 MiB-L2
 * Xeon (one process, calls in batches): order 540 1.3x at one thread (4.7
 * MiB) and two, order 799 1.08x at one thread and 1.2-1.3x at two; beyond
 * GEMV_T_BACK_MAX times the L2 the share found there is too small (order
 * 1448 at one thread, 33 MiB: 0.97-0.99x) and every call runs forward. */
#define GEMV_T_BACK 16
#define GEMV_T_BACK_MAX 8 /* up to this many times the L2 size */
static void gemv_t_call(const kernels_t *K, long it, long m, long lo, long hi,
                        const double *A, long lda, const double *x, int conj,
                        const double *alpha, const double *beta, double *y)
{
  long bytes = (hi - lo) * m * 16;
  if ((it & 1) == 0 || bytes <= l2_bytes || bytes > GEMV_T_BACK_MAX * l2_bytes) {
    K->gemv_t(m, lo, hi, A, lda, x, conj, alpha, beta, y);
    return;
  }
  /* the AVX-512 kernel picks the AVX2 one for unaligned columns beyond
   * GEMV_T_SPLIT_BYTES; decide on the whole block, not on each piece */
  void (*f)(long, long, long, const double *, long, const double *, int, const double *,
            const double *, double *) = K->gemv_t;
  if (f == gemv_t_avx512 && (lda & 3) != 0 && (hi - lo) * m * 16 > GEMV_T_SPLIT_BYTES)
    f = gemv_t_avx2;
  for (long j1 = hi; j1 > lo;) {
    long j0 = j1 - GEMV_T_BACK > lo ? j1 - GEMV_T_BACK : lo;
    f(m, j0, j1, A, lda, x, conj, alpha, beta, y);
    j1 = j0;
  }
}

static int batch_body(tiers_team_t team, int t, void *arg)
{
  struct run *R = arg;
  const kernels_t *K = R->K;
  const int nt = tiers_team_nthreads(team);
  long lo, hi;
  int act;
  switch (R->kern) {
  case K_ZAXPY:
    /* no barrier between calls, but the batch waits for its slowest
     * thread: below AXPY_PAR_MIN numbers a thread, waking the others
     * costs more than their share (2 threads at n = 512 ran at a third
     * of one thread's rate) */
    act = (int)(R->nl / AXPY_PAR_MIN < 1 ? 1 : R->nl / AXPY_PAR_MIN < nt ? R->nl / AXPY_PAR_MIN : nt);
    vsplit(R->nl, act, t, &lo, &hi);
    for (long it = 0; it < R->iters; it++)
      K->zaxpy(hi - lo, ALPHA, R->x + 2 * lo, R->yaxpy + 2 * lo);
    break;
  case K_ZDOTC:
    act = active_threads(R->nl, DOT_PAR_MIN, nt);
    vsplit(R->nl, act, t, &lo, &hi);
    if (act == 1 && R->nprocs == 1) { /* one thread, nothing to reduce */
      if (t == 0)
        for (long it = 0; it < R->iters; it++)
          K->zdotc(R->nl, R->x, R->yd, R->dot);
      break;
    }
    if (t >= act)
      break; /* no share: the master reads only the active threads' slots */
    for (long it = 0; it < R->iters; it++) {
      TIERS_CALL(worker_ready(R, it));
      K->zdotc(hi - lo, R->x + 2 * lo, R->yd + 2 * lo, call_slot(R, t, it));
      TIERS_CALL(reduce_call(team, R, t, act, it, 2, R->dot));
    }
    break;
  case K_DZNRM2:
    act = active_threads(R->nl, NRM2_PAR_MIN, nt);
    vsplit(2 * R->nl, act, t, &lo, &hi);
    if (act == 1 && R->nprocs == 1) {
      if (t == 0)
        for (long it = 0; it < R->iters; it++) {
          double acc[3];
          K->nrm2(2 * R->nl, R->xs, acc);
          R->nrm = nrm2_combine(acc);
        }
      break;
    }
    if (t >= act)
      break;
    for (long it = 0; it < R->iters; it++) {
      double all[3];
      TIERS_CALL(worker_ready(R, it));
      K->nrm2(hi - lo, R->xs + lo, call_slot(R, t, it));
      TIERS_CALL(reduce_call(team, R, t, act, it, 3, all));
      if (t == 0)
        R->nrm = nrm2_combine(all);
    }
    break;
  case K_ZGEMV_N: /* rows, and columns for _t/_c, split on whole cache lines of y: a
                   * line shared by two threads would bounce between them every call */
    vsplit(R->ml, nt, t, &lo, &hi);
    for (long it = 0; it < R->iters; it++) {
      const double *xf = R->gx;
      if (R->nprocs > 1) {
        TIERS_CALL(team_wait(team, R->bar)); /* nobody reads xfull any more */
        if (t == 0) {
          tiers_team_phase(team, TIERS_PHASE_COMM);
          MPI_Allgather(R->gx, (int)(2 * R->ml), MPI_DOUBLE, R->xfull, (int)(2 * R->ml),
                        MPI_DOUBLE, tiers_team_comm(team));
          tiers_team_phase(team, TIERS_PHASE_COMPUTE);
        }
        TIERS_CALL(team_wait(team, R->bar));
        xf = R->xfull;
      }
      K->gemv_n(hi - lo, R->m, R->A + 2 * lo, R->ml, xf, ALPHA, BETA, R->yg[0] + 2 * lo);
    }
    break;
  case K_ZGEMV_T:
  case K_ZGEMV_C: {
    int conj = R->kern == K_ZGEMV_C;
    double *y = R->yg[R->kern - K_ZGEMV_N];
    static const double one[2] = {1.0, 0.0}, zero[2] = {0.0, 0.0};
    if (R->nprocs == 1) {
      vsplit(R->m, nt, t, &lo, &hi);
      for (long it = 0; it < R->iters; it++)
        gemv_t_call(K, it, R->ml, lo, hi, R->A, R->ml, R->gx, conj, ALPHA, BETA, y);
      break;
    }
    long plo, phi;
    vsplit(R->m, nt, t, &lo, &hi);
    vsplit(R->ml, nt, t, &plo, &phi);
    for (long it = 0; it < R->iters; it++) {
      gemv_t_call(K, it, R->ml, lo, hi, R->A, R->ml, R->gx, conj, one, zero, R->xfull);
      TIERS_CALL(team_wait(team, R->bar)); /* all partial products written */
      if (t == 0) {
        tiers_team_phase(team, TIERS_PHASE_COMM);
        MPI_Reduce_scatter_block(R->xfull, R->part, (int)(2 * R->ml), MPI_DOUBLE, MPI_SUM,
                                 tiers_team_comm(team));
        tiers_team_phase(team, TIERS_PHASE_COMPUTE);
      }
      TIERS_CALL(team_wait(team, R->bar)); /* the sums are here */
      for (long i = plo; i < phi; i++) {
        double sr = R->part[2 * i], si = R->part[2 * i + 1];
        double yr = y[2 * i], yi = y[2 * i + 1];
        y[2 * i] = ALPHA[0] * sr - ALPHA[1] * si + BETA[0] * yr - BETA[1] * yi;
        y[2 * i + 1] = ALPHA[0] * si + ALPHA[1] * sr + BETA[0] * yi + BETA[1] * yr;
      }
    }
    break;
  }
  default:
    break;
  }
  return TIERS_OK;
}

/* ---------------------------------------------------------------------
 * Serial reference (rank 0, full data) and checks.
 * --------------------------------------------------------------------- */

typedef struct outcome {
  double seconds, error, tolerance;
  int passed;
} outcome_t;

static double cabs2(const double *v) { return hypot(v[0], v[1]); }

/* The pre-3.10 reference BLAS dznrm2: running scale and scaled sum of
 * squares. */
static double ref_nrm2(long n, const double *x)
{
  double scale = 0.0, ssq = 1.0;
  for (long i = 0; i < 2 * n; i++) {
    if (x[i] != 0.0) {
      double a = fabs(x[i]);
      if (scale < a) {
        ssq = 1.0 + ssq * (scale / a) * (scale / a);
        scale = a;
      } else {
        ssq += (a / scale) * (a / scale);
      }
    }
  }
  return scale * sqrt(ssq);
}

static double max_diff(long n, const double *a, const double *b, double *maxref)
{
  double d = 0, r = 0;
  for (long i = 0; i < n; i++) {
    double e = cabs2((double[]){a[2 * i] - b[2 * i], a[2 * i + 1] - b[2 * i + 1]});
    d = e > d || isnan(e) ? e : d;
    double m = cabs2(b + 2 * i);
    r = m > r ? m : r;
  }
  if (maxref)
    *maxref = r;
  return d;
}

/* Gathers a distributed vector (nl complex per process) onto rank 0. */
static double *gather(app_t *app, const double *local, long nl)
{
  double *all = app->rank == 0 ? malloc(sizeof(double) * 2 * (size_t)nl * (size_t)app->size)
                               : NULL;
  if (app->rank == 0 && !all)
    tiers_tool_fail("out of memory gathering a result");
  MPI_Gather(local, (int)(2 * nl), MPI_DOUBLE, all, (int)(2 * nl), MPI_DOUBLE, 0,
             MPI_COMM_WORLD);
  return all;
}

/* ---------------------------------------------------------------------
 * Main.
 * --------------------------------------------------------------------- */

static double *zalloc(app_t *app, long complex_count)
{
  size_t bytes = sizeof(double) * 2 * (size_t)(complex_count > 0 ? complex_count : 1);
  bytes = (bytes + 63) / 64 * 64;
  double *p = aligned_alloc(64, bytes);
  app_check(app, !p, "cannot allocate %ld complex numbers", complex_count);
  return p;
}

/* The same, on one process only (rank 0's reference): fails alone. */
static double *zalloc_local(long complex_count)
{
  size_t bytes = sizeof(double) * 2 * (size_t)(complex_count > 0 ? complex_count : 1);
  double *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p)
    tiers_tool_fail("out of memory for the serial reference (%ld complex numbers)",
                    complex_count);
  return p;
}

static int parse_kernels(const char *text, int want[K_COUNT], char *bad, size_t badlen)
{
  char buf[256];
  if (strlen(text) >= sizeof buf)
    return -1;
  strcpy(buf, text);
  memset(want, 0, sizeof(int) * K_COUNT);
  for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
    if (strcmp(w, "all") == 0) {
      for (int k = 0; k < K_COUNT; k++)
        want[k] = 1;
    } else if (strcmp(w, "zgemv") == 0) {
      want[K_ZGEMV_N] = want[K_ZGEMV_T] = want[K_ZGEMV_C] = 1;
    } else {
      int found = 0;
      for (int k = 0; k < K_COUNT; k++)
        if (strcmp(w, KNAMES[k]) == 0)
          want[k] = found = 1;
      if (!found) {
        snprintf(bad, badlen, "%s", w);
        return -1;
      }
    }
  }
  int any = 0;
  for (int k = 0; k < K_COUNT; k++)
    any |= want[k];
  return any ? 0 : -1;
}

int main(int argc, char **argv)
{
  app_t app;
  app_init(&app, "tiers-zblas", &argc, &argv);
  long n = 0, m = 0, iters = 0;
  double scale = 1.0;
  int want[K_COUNT];
  const char *simd = "auto";
  for (int k = 0; k < K_COUNT; k++)
    want[k] = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    app_check(&app, strcmp(a, "--grid") == 0,
              "--grid does not apply: zblas splits vectors and matrix rows over all %d "
              "processes", app.size);
    app_check(&app, strcmp(a, "--overlap") == 0, "zblas has no halo exchange to overlap");
    if (app_common_option(&app, argc, argv, &i))
      continue;
    if (strcmp(a, "--size") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &n) != 0 || n < 1 || n > SIZE_LIMIT,
                "--size needs a vector length from 1 to %ld (got %s)", SIZE_LIMIT,
                v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--matrix") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &m) != 0 || m < 1 || m > MATRIX_LIMIT,
                "--matrix needs a matrix order from 1 to %ld (got %s)", MATRIX_LIMIT,
                v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--iters") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &iters) != 0 || iters < 1,
                "--iters needs a positive number (got %s)", v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--scale") == 0) {
      app_check(&app, !v || tiers_parse_double(v, &scale) != 0 || !(scale > 0) ||
                          !isfinite(scale),
                "--scale needs a positive finite number (got %s)", v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--kernel") == 0) {
      char bad[64] = "";
      int rc = v ? parse_kernels(v, want, bad, sizeof bad) : -1;
      app_check(&app, rc != 0,
                "unknown --kernel %s (known: all, zaxpy, zdotc, dznrm2, zgemv, zgemv_n, "
                "zgemv_t, zgemv_c; comma-separated)", bad[0] ? bad : (v ? v : "(nothing)"));
      i++;
    } else if (strcmp(a, "--simd") == 0) {
      app_check(&app, !v || (strcmp(v, "auto") && strcmp(v, "avx512") && strcmp(v, "avx2") &&
                             strcmp(v, "generic")),
                "--simd must be auto, avx512, avx2 or generic (got %s)", v ? v : "nothing");
      simd = v;
      i++;
    } else {
      app_check(&app, 1, "unknown option %s (see tiers-zblas --help)", a);
    }
  }
  if (n == 0)
    n = app.opts.quick ? SIZE_QUICK : SIZE_DEFAULT;
  if (iters == 0)
    iters = app.opts.quick ? ITERS_QUICK : ITERS_DEFAULT;
  if (m == 0)
    m = (long)floor(sqrt((double)n));
  app_check(&app, n % app.size != 0,
            "--size %ld is not divisible by the %d processes (each owns N/P of every vector)",
            n, app.size);
  app_check(&app, m % app.size != 0,
            "the zgemv matrix order %ld is not divisible by the %d processes (each owns M/P "
            "rows); set --matrix", m, app.size);
  __builtin_cpu_init();
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 >= (64L << 10))
    l2_bytes = l2;
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  app_check(&app, strcmp(simd, "avx2") == 0 && !avx2, "--simd avx2: this CPU lacks AVX2/FMA");
  app_check(&app, strcmp(simd, "avx512") == 0 && !avx512,
            "--simd avx512: this CPU lacks AVX-512F/DQ");
  const kernels_t *K = &KERNELS_C;
  if (strcmp(simd, "avx512") == 0 || (strcmp(simd, "auto") == 0 && avx512))
    K = &KERNELS_AVX512;
  else if (strcmp(simd, "avx2") == 0 || (strcmp(simd, "auto") == 0 && avx2))
    K = &KERNELS_AVX2;
  app_team(&app, MPI_COMM_WORLD);
  tiers_team_t team = app.team;
  int nthreads = tiers_team_nthreads(team);

  struct run R;
  memset(&R, 0, sizeof R);
  R.K = K;
  R.nprocs = app.size;
  R.iters = iters;
  R.m = m;
  R.nl = n / app.size;
  R.ml = m / app.size;
  long v0 = R.nl * app.rank, r0 = R.ml * app.rank;
  R.x = zalloc(&app, R.nl);
  /* dznrm2 reads x itself unless --scale asks for another vector: a
   * separate copy would come cold from memory or L3 after the other
   * kernels ran, where OpenBLAS's dznrm2 (and any caller's) finds the x
   * that zdotc has just read. */
  R.xs = scale == 1.0 ? R.x : zalloc(&app, R.nl);
  R.yaxpy = zalloc(&app, R.nl);
  R.yd = zalloc(&app, R.nl);
  R.A = zalloc(&app, R.ml * m);
  R.gx = zalloc(&app, R.ml);
  for (int f = 0; f < 3; f++)
    R.yg[f] = zalloc(&app, R.ml);
  R.xfull = zalloc(&app, m);
  R.part = zalloc(&app, R.ml);
  memset(R.xfull, 0, sizeof(double) * 2 * (size_t)m);
  memset(R.part, 0, sizeof(double) * 2 * (size_t)R.ml);
  R.slots = aligned_alloc(64, sizeof *R.slots * SLOT_RING * (size_t)nthreads);
  app_check(&app, !R.slots, "cannot allocate the reduction slots");
  memset(R.slots, 0, sizeof *R.slots * SLOT_RING * (size_t)nthreads);
  /* A reduction wait polls while the awaited thread is surely running
   * (this node's threads fit in its CPUs); otherwise it sleeps almost at
   * once, leaving the CPU to the thread it waits for. */
  {
    MPI_Comm node;
    int node_procs = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
      MPI_Comm_size(node, &node_procs);
      MPI_Comm_free(&node);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double spin_us = (long)node_procs * nthreads <= (cpus > 0 ? cpus : 1) ? TIERS_SPIN_CAP_US : 2.0;
    uint32_t cap = (uint32_t)(spin_us * tiers_wait_polls_per_us());
    for (int u = 0; u < nthreads * SLOT_RING; u++)
      tiers_spin_init(&R.slots[u].seq.spin, cap, 0);
    tiers_spin_init(&R.done.spin, cap, 0);
  }
  int rc = tiers_barrier_create(&R.bar, nthreads);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());
  R.v0 = v0;
  R.r0 = r0;
  R.scale = scale;
  rc = tiers_team_parallel(team, init_body, &R);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());

  /* The timed part: one batch (one parallel region) per kernel. */
  double secs[K_COUNT] = {0}, total = 0;
  tiers_team_barrier(team);
  tiers_team_timers_reset(team);
  for (int k = 0; k < K_COUNT; k++) {
    if (!want[k])
      continue;
    R.kern = (enum kern)k;
    /* every batch numbers its calls from 0 (and finds no sums left over) */
    for (int u = 0; u < nthreads * SLOT_RING; u++) {
      atomic_store_explicit(&R.slots[u].seq.n, 0u, memory_order_relaxed);
      memset(R.slots[u].v, 0, sizeof R.slots[u].v);
    }
    atomic_store_explicit(&R.done.n, 0u, memory_order_relaxed);
    rc = tiers_team_barrier(team);
    double t0 = tiers_now();
    if (rc == TIERS_OK)
      rc = tiers_team_parallel(team, batch_body, &R);
    secs[k] = tiers_now() - t0;
    total += secs[k];
    if (rc != TIERS_OK)
      break;
  }
  double times[TIERS_PHASE_COUNT];
  tiers_team_times(team, times);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());
  double slowest[K_COUNT];
  MPI_Allreduce(secs, slowest, K_COUNT, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  /* Verification on rank 0 against the serial reference. */
  int verify = app.opts.verify != 0;
  outcome_t out[K_COUNT];
  memset(out, 0, sizeof out);
  const double eps = DBL_EPSILON / 2;
  double *gy_axpy = verify ? gather(&app, R.yaxpy, R.nl) : NULL;
  double *gy[3] = {NULL, NULL, NULL};
  for (int f = 0; f < 3 && verify; f++)
    gy[f] = gather(&app, R.yg[f], R.ml);
  if (verify && app.rank == 0) {
    double *x = zalloc_local(n), *xs = zalloc_local(n), *y = zalloc_local(n);
    double *A = zalloc_local(m * m), *gx = zalloc_local(m), *ry = zalloc_local(m);
    for (long i = 0; i < n; i++) {
      x_at(i, 1.0, x + 2 * i);
      x_at(i, scale, xs + 2 * i);
      y_at(i, y + 2 * i);
    }
    for (long j = 0; j < m; j++)
      for (long i = 0; i < m; i++)
        a_at(i, j, A + 2 * (i + j * m));
    for (long i = 0; i < m; i++)
      x_at(i, 1.0, gx + 2 * i);
    if (want[K_ZDOTC]) { /* before zaxpy changes y */
      double ref[2], sabs = 0;
      zdotc_c(n, x, y, ref);
      for (long i = 0; i < n; i++)
        sabs += cabs2(x + 2 * i) * cabs2(y + 2 * i);
      out[K_ZDOTC].error = hypot(R.dot[0] - ref[0], R.dot[1] - ref[1]);
      out[K_ZDOTC].tolerance = 4.0 * (double)n * eps * sabs;
    }
    if (want[K_ZAXPY]) {
      for (long it = 0; it < iters; it++)
        zaxpy_c(n, ALPHA, x, y);
      double maxref;
      out[K_ZAXPY].error = max_diff(n, gy_axpy, y, &maxref);
      out[K_ZAXPY].tolerance = 16.0 * (double)(iters + 1) * eps * maxref;
    }
    if (want[K_DZNRM2]) {
      double ref = ref_nrm2(n, xs);
      out[K_DZNRM2].error = fabs(R.nrm - ref);
      out[K_DZNRM2].tolerance = 4.0 * (double)n * eps * ref;
    }
    double arow = 0; /* max_i sum_j |A_ij| |x_j| */
    for (long i = 0; i < m; i++) {
      double s = 0;
      for (long j = 0; j < m; j++)
        s += cabs2(A + 2 * (i + j * m)) * cabs2(gx + 2 * j);
      arow = s > arow ? s : arow;
    }
    for (long j = 0; j < m; j++) { /* and the column sums, for the transposes */
      double s = 0;
      for (long i = 0; i < m; i++)
        s += cabs2(A + 2 * (i + j * m)) * cabs2(gx + 2 * i);
      arow = s > arow ? s : arow;
    }
    double gscale = cabs2(ALPHA) * arow / (1.0 - cabs2(BETA)) + 2.0;
    for (int f = 0; f < 3; f++) {
      int k = K_ZGEMV_N + f;
      if (!want[k])
        continue;
      for (long i = 0; i < m; i++)
        y_at(i, ry + 2 * i);
      for (long it = 0; it < iters; it++) {
        if (f == 0)
          gemv_n_c(m, m, A, m, gx, ALPHA, BETA, ry);
        else
          gemv_t_c(m, 0, m, A, m, gx, f == 2, ALPHA, BETA, ry);
      }
      out[k].error = max_diff(m, gy[f], ry, NULL);
      out[k].tolerance = 16.0 * (double)(iters + m) * eps * gscale;
    }
    free(x);
    free(xs);
    free(y);
    free(A);
    free(gx);
    free(ry);
  }
  free(gy_axpy);
  for (int f = 0; f < 3; f++)
    free(gy[f]);
  int passed = 1;
  char why[256] = "";
  for (int k = 0; k < K_COUNT; k++) {
    out[k].seconds = slowest[k];
    out[k].passed = !verify || !want[k] || out[k].error <= out[k].tolerance;
    if (!out[k].passed && passed) {
      passed = 0;
      snprintf(why, sizeof why, "%s differs from the serial reference by %.3g (tolerance %.3g)",
               KNAMES[k], out[k].error, out[k].tolerance);
    }
  }
  MPI_Bcast(&passed, 1, MPI_INT, 0, MPI_COMM_WORLD);

  tiers_json_t j;
  app_json_head(&app, &j, total, times);
  if (app.rank == 0) {
    double bytes[K_COUNT], flops[K_COUNT], nd = (double)n, md = (double)m;
    bytes[K_ZAXPY] = 48.0 * nd;
    bytes[K_ZDOTC] = 32.0 * nd;
    bytes[K_DZNRM2] = 16.0 * nd;
    flops[K_ZAXPY] = flops[K_ZDOTC] = 8.0 * nd;
    flops[K_DZNRM2] = 4.0 * nd;
    for (int f = 0; f < 3; f++) {
      bytes[K_ZGEMV_N + f] = 16.0 * md * md + 48.0 * md;
      flops[K_ZGEMV_N + f] = 8.0 * md * md;
    }
    double all_bytes = 0, all_secs = 0;
    tiers_json_key(&j, "params");
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "size", n);
    tiers_json_kv_int(&j, "matrix", m);
    tiers_json_kv_int(&j, "iters", iters);
    tiers_json_kv_double(&j, "scale", scale);
    tiers_json_kv_string(&j, "simd", simd);
    tiers_json_kv_bool(&j, "quick", app.opts.quick);
    tiers_json_object_end(&j);
    tiers_json_key(&j, "result");
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "simd", K->name);
    tiers_json_kv_int(&j, "length", n);
    tiers_json_kv_int(&j, "matrix", m);
    tiers_json_kv_int(&j, "iters", iters);
    tiers_json_key(&j, "kernels");
    tiers_json_array_begin(&j);
    for (int k = 0; k < K_COUNT; k++) {
      if (!want[k])
        continue;
      double s = out[k].seconds, per = s / (double)iters;
      all_bytes += bytes[k] * (double)iters;
      all_secs += s;
      tiers_json_object_begin(&j);
      tiers_json_kv_string(&j, "name", KNAMES[k]);
      tiers_json_kv_int(&j, "calls", iters);
      tiers_json_kv_double(&j, "seconds", s);
      tiers_json_kv_double(&j, "seconds_per_call", per);
      tiers_json_kv_double(&j, "bytes_per_call", bytes[k]);
      tiers_json_kv_double(&j, "flops_per_call", flops[k]);
      tiers_json_kv_double(&j, "gbytes_per_s", per > 0 ? bytes[k] / per / 1e9 : 0.0);
      tiers_json_kv_double(&j, "gflops_per_s", per > 0 ? flops[k] / per / 1e9 : 0.0);
      if (verify) {
        tiers_json_kv_double(&j, "error", out[k].error);
        tiers_json_kv_double(&j, "tolerance", out[k].tolerance);
      }
      tiers_json_kv_bool(&j, "passed", out[k].passed);
      tiers_json_object_end(&j);
    }
    tiers_json_array_end(&j);
    if (want[K_ZDOTC])
      tiers_json_kv_double_array(&j, "zdotc", R.dot, 2);
    if (want[K_DZNRM2])
      tiers_json_kv_double(&j, "dznrm2", R.nrm);
    tiers_json_object_end(&j);
    app_json_merit(&j, "bandwidth", all_bytes / 1e9, all_secs, "GB/s");
    tiers_json_key(&j, "verification");
    tiers_json_object_begin(&j);
    tiers_json_kv_bool(&j, "passed", passed);
    tiers_json_kv_bool(&j, "checked", verify);
    tiers_json_kv_string(&j, "method", "serial reference on rank 0, error bounds");
    tiers_json_object_end(&j);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  tiers_barrier_destroy(&R.bar);
  free(R.slots);
  free(R.x);
  if (R.xs != R.x)
    free(R.xs);
  free(R.yaxpy);
  free(R.yd);
  free(R.A);
  free(R.gx);
  for (int f = 0; f < 3; f++)
    free(R.yg[f]);
  free(R.xfull);
  free(R.part);
  app_finish(&app, passed, why);
}
