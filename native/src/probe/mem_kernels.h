/*
 * Internal to tiers-probe-mem: the memory-bandwidth kernels, built once per
 * instruction set (x86-64: SSE2, AVX2+FMA, AVX-512F) and picked at run time,
 * each with regular and non-temporal (streaming) stores.
 *
 * Every kernel works on one thread's slice [0, n) of the arrays; the caller
 * splits the arrays among threads.  Non-temporal kernels end with a store
 * fence, so their stores are globally visible when they return.
 */
#ifndef TIERS_PROBE_MEM_KERNELS_H
#define TIERS_PROBE_MEM_KERNELS_H

#include <stddef.h>

/* The kernels, in the order one repetition runs them (as STREAM: copy,
 * scale, add, triad; then the COMPaS read, write and memcpy). */
enum tiers_mem_kernel {
  TIERS_MEM_COPY = 0,   /* c[i] = a[i]           16 B/element */
  TIERS_MEM_SCALE = 1,  /* b[i] = s * c[i]       16 B/element */
  TIERS_MEM_ADD = 2,    /* c[i] = a[i] + b[i]    24 B/element */
  TIERS_MEM_TRIAD = 3,  /* a[i] = b[i] + s * c[i] 24 B/element */
  TIERS_MEM_READ = 4,   /* sum += a[i]            8 B/element */
  TIERS_MEM_WRITE = 5,  /* c[i] = w               8 B/element */
  TIERS_MEM_MEMCPY = 6, /* memcpy(c, a)          16 B/element */
  TIERS_MEM_NKERNELS = 7
};

/* One instruction set's kernels with one kind of stores. */
typedef struct tiers_mem_kernels {
  const char *isa; /* "avx512f", "avx2", "sse2" or "generic" */
  void (*copy)(double *restrict c, const double *restrict a, size_t n);
  void (*scale)(double *restrict b, const double *restrict c, double s, size_t n);
  void (*add)(double *restrict c, const double *restrict a, const double *restrict b, size_t n);
  void (*triad)(double *restrict a, const double *restrict b, const double *restrict c, double s,
                size_t n);
  double (*read)(const double *restrict a, size_t n);
  void (*write)(double *restrict c, double w, size_t n);
} tiers_mem_kernels_t;

/* The best instruction set this CPU runs: "avx512f", "avx2", "sse2" or "generic". */
const char *tiers_mem_best_isa(void);

/* 1 when this build and CPU can run @p isa (one of the names above). */
int tiers_mem_isa_usable(const char *isa);

/* 1 when this build has non-temporal kernels (x86-64 only). */
int tiers_mem_have_nt(void);

/*
 * The kernels for @p isa with regular (nt = 0) or non-temporal (nt = 1)
 * stores; NULL when the pair is not available.
 */
const tiers_mem_kernels_t *tiers_mem_kernels(const char *isa, int nt);

#endif
