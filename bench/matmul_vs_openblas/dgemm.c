/*
 * The OpenBLAS side of bench/matmul_vs_openblas: C = A B with cblas_dgemm
 * (row-major, N x N doubles, the layout tiers-matmul uses), one untimed
 * warm-up call, then ITERS timed calls; prints one JSON line
 *   {"size": N, "iters": ITERS, "threads": T, "seconds": [...],
 *    "gflops": 2 N^3 / mean seconds / 1e9}
 *
 *   dgemm N ITERS          (threads: OPENBLAS_NUM_THREADS)
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
  if (argc != 3) {
    fprintf(stderr, "dgemm: error: usage: dgemm N ITERS\n");
    return 2;
  }
  long n = atol(argv[1]), iters = atol(argv[2]);
  if (n < 1 || iters < 1 || iters > 1000) {
    fprintf(stderr, "dgemm: error: N must be positive and ITERS from 1 to 1000\n");
    return 2;
  }
  size_t bytes = sizeof(double) * (size_t)n * (size_t)n;
  double *a = aligned_alloc(64, (bytes + 63) / 64 * 64), *b = aligned_alloc(64, (bytes + 63) / 64 * 64);
  double *c = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!a || !b || !c) {
    fprintf(stderr, "dgemm: error: out of memory\n");
    return 2;
  }
  /* small integers, like tiers-matmul's */
  for (long i = 0; i < n * n; i++) {
    a[i] = (double)((i * 7 + 3) % 17) - 8.0;
    b[i] = (double)((i * 5 + 1) % 13) - 6.0;
    c[i] = 0.0;
  }
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0, a, (int)n,
              b, (int)n, 0.0, c, (int)n);
  double sum = 0;
  printf("{\"size\": %ld, \"iters\": %ld, \"threads\": %d, \"seconds\": [", n, iters,
         openblas_get_num_threads());
  for (long it = 0; it < iters; it++) {
    double t0 = now();
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0, a,
                (int)n, b, (int)n, 0.0, c, (int)n);
    double t = now() - t0;
    sum += t;
    printf("%s%.9g", it ? ", " : "", t);
  }
  double mean = sum / (double)iters;
  printf("], \"gflops\": %.6g}\n", 2.0 * (double)n * (double)n * (double)n / mean / 1e9);
  free(a);
  free(b);
  free(c);
  return 0;
}
