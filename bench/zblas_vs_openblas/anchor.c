/*
 * The OpenBLAS side of bench/zblas_vs_openblas: times cblas_zaxpy,
 * cblas_zdotc_sub, cblas_dznrm2 and cblas_zgemv (N, T, C) on the data
 * tiers-zblas uses (same formulas, same sizes, same alpha and beta), one
 * timed batch of ITERS calls per kernel, and prints one JSON line:
 *   {"kernels": {"zaxpy": seconds_per_call, ...}, "zdotc": [re, im],
 *    "dznrm2": value, "threads": openblas_get_num_threads()}
 *
 *   anchor N M ITERS [KERNELS]     (threads: OPENBLAS_NUM_THREADS)
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The formulas of native/apps/zblas.c. */
static void x_at(long i, double *v)
{
  v[0] = ((double)((7 * i) % 13) - 6.0) / 8.0;
  v[1] = ((double)((3 * i) % 11) - 5.0) / 8.0;
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

static double *zalloc(long n)
{
  double *p = aligned_alloc(64, ((size_t)n * 16 + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "anchor: error: out of memory\n");
    exit(2);
  }
  return p;
}

int main(int argc, char **argv)
{
  if (argc < 4) {
    fprintf(stderr, "anchor: error: usage: anchor N M ITERS [KERNELS]\n");
    return 2;
  }
  long n = atol(argv[1]), m = atol(argv[2]), iters = atol(argv[3]);
  const char *want = argc > 4 ? argv[4] : "zaxpy,zdotc,dznrm2,zgemv_n,zgemv_t,zgemv_c";
  if (n < 1 || m < 1 || iters < 1) {
    fprintf(stderr, "anchor: error: N, M and ITERS must be positive\n");
    return 2;
  }
  const double alpha[2] = {0.75, -0.5}, beta[2] = {0.5, 0.25};
  double *x = zalloc(n), *y = zalloc(n), *yd = zalloc(n), *A = zalloc(m * m);
  double *gx = zalloc(m), *gy = zalloc(m);
  for (long i = 0; i < n; i++) {
    x_at(i, x + 2 * i);
    y_at(i, y + 2 * i);
    y_at(i, yd + 2 * i);
  }
  for (long j = 0; j < m; j++)
    for (long i = 0; i < m; i++)
      a_at(i, j, A + 2 * (i + j * m));
  for (long i = 0; i < m; i++)
    x_at(i, gx + 2 * i);
  double dot[2] = {0, 0}, nrm = 0;
  printf("{\"threads\": %d, \"kernels\": {", openblas_get_num_threads());
  const char *sep = "";
  static const char *names[] = {"zaxpy", "zdotc", "dznrm2", "zgemv_n", "zgemv_t", "zgemv_c"};
  for (int k = 0; k < 6; k++) {
    if (!strstr(want, names[k]))
      continue;
    for (long i = 0; i < m; i++)
      y_at(i, gy + 2 * i);
    double t0 = now();
    switch (k) {
    case 0:
      for (long it = 0; it < iters; it++)
        cblas_zaxpy((int)n, alpha, x, 1, y, 1);
      break;
    case 1:
      for (long it = 0; it < iters; it++)
        cblas_zdotc_sub((int)n, x, 1, yd, 1, dot);
      break;
    case 2:
      for (long it = 0; it < iters; it++)
        nrm = cblas_dznrm2((int)n, x, 1);
      break;
    default: {
      enum CBLAS_TRANSPOSE tr = k == 3 ? CblasNoTrans : k == 4 ? CblasTrans : CblasConjTrans;
      for (long it = 0; it < iters; it++)
        cblas_zgemv(CblasColMajor, tr, (int)m, (int)m, alpha, A, (int)m, gx, 1, beta, gy, 1);
    }
    }
    double t = now() - t0;
    printf("%s\"%s\": %.9g", sep, names[k], t / (double)iters);
    sep = ", ";
  }
  printf("}, \"zdotc\": [%.17g, %.17g], \"dznrm2\": %.17g, \"gy0\": [%.17g, %.17g]}\n", dot[0],
         dot[1], nrm, gy[0], gy[1]);
  free(x);
  free(y);
  free(yd);
  free(A);
  free(gx);
  free(gy);
  return 0;
}
