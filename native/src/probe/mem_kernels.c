/*
 * The memory-bandwidth kernels of tiers-probe-mem.
 *
 * Regular-store kernels are plain loops over restrict pointers that GCC
 * vectorises at -O3; each is compiled three times with
 * __attribute__((target)) for AVX-512F, AVX2+FMA and the x86-64 baseline
 * (SSE2), and the driver picks one at run time with __builtin_cpu_supports,
 * so the binary runs on any x86-64 CPU.  This file is built with
 * -fno-tree-loop-distribute-patterns so that GCC keeps the copy and fill
 * loops as loops instead of turning them into memcpy/memset calls: "copy"
 * measures a copy loop, "memcpy" measures libc's memcpy.
 *
 * Non-temporal kernels write with _mm512/_mm256/_mm_stream_pd: a scalar
 * prologue until the destination is aligned to the vector, the streaming
 * body, a scalar epilogue, then _mm_sfence().  The sum ("read") kernel keeps
 * four vector accumulators so that the add latency does not limit it.
 */
#include "mem_kernels.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* ---- regular stores: plain loops, vectorised by the compiler ---------- */

#define REGULAR_KERNELS(SUF, ATTR)                                                            \
  ATTR static void copy_##SUF(double *restrict c, const double *restrict a, size_t n)        \
  {                                                                                           \
    for (size_t i = 0; i < n; i++)                                                            \
      c[i] = a[i];                                                                            \
  }                                                                                           \
  ATTR static void scale_##SUF(double *restrict b, const double *restrict c, double s,       \
                               size_t n)                                                      \
  {                                                                                           \
    for (size_t i = 0; i < n; i++)                                                            \
      b[i] = s * c[i];                                                                        \
  }                                                                                           \
  ATTR static void add_##SUF(double *restrict c, const double *restrict a,                   \
                             const double *restrict b, size_t n)                              \
  {                                                                                           \
    for (size_t i = 0; i < n; i++)                                                            \
      c[i] = a[i] + b[i];                                                                     \
  }                                                                                           \
  ATTR static void triad_##SUF(double *restrict a, const double *restrict b,                 \
                               const double *restrict c, double s, size_t n)                  \
  {                                                                                           \
    for (size_t i = 0; i < n; i++)                                                            \
      a[i] = b[i] + s * c[i];                                                                 \
  }                                                                                           \
  ATTR static void write_##SUF(double *restrict c, double w, size_t n)                       \
  {                                                                                           \
    for (size_t i = 0; i < n; i++)                                                            \
      c[i] = w;                                                                               \
  }

/* Portable sum with eight independent accumulators. */
static double read_generic(const double *restrict a, size_t n)
{
  double acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++)
      acc[j] += a[i + (size_t)j];
  double s = 0.0;
  for (; i < n; i++)
    s += a[i];
  for (int j = 0; j < 8; j++)
    s += acc[j];
  return s;
}

REGULAR_KERNELS(generic, )

static const tiers_mem_kernels_t kernels_generic = {
    "generic", copy_generic, scale_generic, add_generic, triad_generic, read_generic,
    write_generic};

#if HAVE_X86

#define T_AVX512 __attribute__((target("avx512f")))
#define T_AVX2 __attribute__((target("avx2,fma")))

REGULAR_KERNELS(avx512, T_AVX512)
REGULAR_KERNELS(avx2, T_AVX2)

/* ---- sums (read-only kernel) ------------------------------------------ */

T_AVX512 static double read_avx512(const double *restrict a, size_t n)
{
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_add_pd(s0, _mm512_loadu_pd(a + i));
    s1 = _mm512_add_pd(s1, _mm512_loadu_pd(a + i + 8));
    s2 = _mm512_add_pd(s2, _mm512_loadu_pd(a + i + 16));
    s3 = _mm512_add_pd(s3, _mm512_loadu_pd(a + i + 24));
  }
  double s = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
  for (; i < n; i++)
    s += a[i];
  return s;
}

T_AVX2 static double read_avx2(const double *restrict a, size_t n)
{
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_pd(s0, _mm256_loadu_pd(a + i));
    s1 = _mm256_add_pd(s1, _mm256_loadu_pd(a + i + 4));
    s2 = _mm256_add_pd(s2, _mm256_loadu_pd(a + i + 8));
    s3 = _mm256_add_pd(s3, _mm256_loadu_pd(a + i + 12));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; i++)
    s += a[i];
  return s;
}

static double read_sse2(const double *restrict a, size_t n)
{
  __m128d s0 = _mm_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = _mm_add_pd(s0, _mm_loadu_pd(a + i));
    s1 = _mm_add_pd(s1, _mm_loadu_pd(a + i + 2));
    s2 = _mm_add_pd(s2, _mm_loadu_pd(a + i + 4));
    s3 = _mm_add_pd(s3, _mm_loadu_pd(a + i + 6));
  }
  double lanes[2];
  _mm_storeu_pd(lanes, _mm_add_pd(_mm_add_pd(s0, s1), _mm_add_pd(s2, s3)));
  double s = lanes[0] + lanes[1];
  for (; i < n; i++)
    s += a[i];
  return s;
}

/* ---- non-temporal stores ---------------------------------------------- */

/*
 * One NT kernel body: DST is the written array, W the vector width in
 * doubles, SCALAR(i) the element expression, VEC(i) the vector expression
 * and STREAM the streaming store.  The prologue runs until DST + i is
 * aligned to the vector, as the streaming stores require.
 */
#define NT_BODY(DST, W, SCALAR, VEC, STREAM, FENCE)                          \
  size_t i = 0;                                                             \
  while (i < n && ((uintptr_t)(DST + i) & (W * sizeof(double) - 1)) != 0) { \
    DST[i] = SCALAR(i);                                                     \
    i++;                                                                    \
  }                                                                         \
  for (; i + 2 * W <= n; i += 2 * W) {                                      \
    STREAM(DST + i, VEC(i));                                                \
    STREAM(DST + i + W, VEC(i + W));                                        \
  }                                                                         \
  for (; i < n; i++)                                                        \
    DST[i] = SCALAR(i);                                                     \
  FENCE()

#define NT_KERNELS(SUF, ATTR, W, VT, SET1, STREAM)                                             \
  ATTR static void copy_nt_##SUF(double *restrict c, const double *restrict a, size_t n)     \
  {                                                                                           \
    NT_BODY(c, W, COPY_S, COPY_V, STREAM, _mm_sfence);                                        \
  }                                                                                           \
  ATTR static void scale_nt_##SUF(double *restrict b, const double *restrict c, double s,    \
                                  size_t n)                                                   \
  {                                                                                           \
    const VT vs = SET1(s);                                                                    \
    NT_BODY(b, W, SCALE_S, SCALE_V, STREAM, _mm_sfence);                                      \
  }                                                                                           \
  ATTR static void add_nt_##SUF(double *restrict c, const double *restrict a,                \
                                const double *restrict b, size_t n)                           \
  {                                                                                           \
    NT_BODY(c, W, ADD_S, ADD_V, STREAM, _mm_sfence);                                          \
  }                                                                                           \
  ATTR static void triad_nt_##SUF(double *restrict a, const double *restrict b,              \
                                  const double *restrict c, double s, size_t n)               \
  {                                                                                           \
    const VT vs = SET1(s);                                                                    \
    NT_BODY(a, W, TRIAD_S, TRIAD_V, STREAM, _mm_sfence);                                      \
  }                                                                                           \
  ATTR static void write_nt_##SUF(double *restrict c, double w, size_t n)                    \
  {                                                                                           \
    const VT vw = SET1(w);                                                                    \
    NT_BODY(c, W, WRITE_S, WRITE_V, STREAM, _mm_sfence);                                      \
  }

/* Element expressions shared by the three widths; V_LOADU, V_MUL and V_ADD
 * are bound to the width's intrinsics around each instantiation. */
#define COPY_S(i) a[i]
#define SCALE_S(i) (s * c[i])
#define ADD_S(i) (a[i] + b[i])
#define TRIAD_S(i) (b[i] + s * c[i])
#define WRITE_S(i) w

#define COPY_V(i) V_LOADU(a + (i))
#define SCALE_V(i) V_MUL(vs, V_LOADU(c + (i)))
#define ADD_V(i) V_ADD(V_LOADU(a + (i)), V_LOADU(b + (i)))
#define TRIAD_V(i) V_ADD(V_LOADU(b + (i)), V_MUL(vs, V_LOADU(c + (i))))
#define WRITE_V(i) vw

#define V_LOADU _mm512_loadu_pd
#define V_MUL _mm512_mul_pd
#define V_ADD _mm512_add_pd
NT_KERNELS(avx512, T_AVX512, 8, __m512d, _mm512_set1_pd, _mm512_stream_pd)
#undef V_LOADU
#undef V_MUL
#undef V_ADD

#define V_LOADU _mm256_loadu_pd
#define V_MUL _mm256_mul_pd
#define V_ADD _mm256_add_pd
NT_KERNELS(avx2, T_AVX2, 4, __m256d, _mm256_set1_pd, _mm256_stream_pd)
#undef V_LOADU
#undef V_MUL
#undef V_ADD

#define V_LOADU _mm_loadu_pd
#define V_MUL _mm_mul_pd
#define V_ADD _mm_add_pd
NT_KERNELS(sse2, , 2, __m128d, _mm_set1_pd, _mm_stream_pd)
#undef V_LOADU
#undef V_MUL
#undef V_ADD

static const tiers_mem_kernels_t kernels_avx512 = {
    "avx512f", copy_avx512, scale_avx512, add_avx512, triad_avx512, read_avx512, write_avx512};
static const tiers_mem_kernels_t kernels_avx2 = {
    "avx2", copy_avx2, scale_avx2, add_avx2, triad_avx2, read_avx2, write_avx2};
/* The x86-64 baseline is SSE2: the generic loops compile to SSE2. */
static const tiers_mem_kernels_t kernels_sse2 = {
    "sse2", copy_generic, scale_generic, add_generic, triad_generic, read_sse2, write_generic};

static const tiers_mem_kernels_t kernels_nt_avx512 = {
    "avx512f", copy_nt_avx512, scale_nt_avx512, add_nt_avx512, triad_nt_avx512, read_avx512,
    write_nt_avx512};
static const tiers_mem_kernels_t kernels_nt_avx2 = {
    "avx2", copy_nt_avx2, scale_nt_avx2, add_nt_avx2, triad_nt_avx2, read_avx2, write_nt_avx2};
static const tiers_mem_kernels_t kernels_nt_sse2 = {
    "sse2", copy_nt_sse2, scale_nt_sse2, add_nt_sse2, triad_nt_sse2, read_sse2, write_nt_sse2};

#endif /* HAVE_X86 */

int tiers_mem_isa_usable(const char *isa)
{
  if (!isa)
    return 0;
  if (strcmp(isa, "generic") == 0)
    return 1;
#if HAVE_X86
  __builtin_cpu_init();
  if (strcmp(isa, "sse2") == 0)
    return 1;
  if (strcmp(isa, "avx2") == 0)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (strcmp(isa, "avx512f") == 0)
    return __builtin_cpu_supports("avx512f");
#endif
  return 0;
}

const char *tiers_mem_best_isa(void)
{
  static const char *order[] = {"avx512f", "avx2", "sse2", "generic"};
  for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
    if (tiers_mem_isa_usable(order[k]))
      return order[k];
  return "generic";
}

int tiers_mem_have_nt(void) { return HAVE_X86; }

const tiers_mem_kernels_t *tiers_mem_kernels(const char *isa, int nt)
{
  if (!tiers_mem_isa_usable(isa))
    return NULL;
  if (strcmp(isa, "generic") == 0)
    return nt ? NULL : &kernels_generic;
#if HAVE_X86
  if (strcmp(isa, "avx512f") == 0)
    return nt ? &kernels_nt_avx512 : &kernels_avx512;
  if (strcmp(isa, "avx2") == 0)
    return nt ? &kernels_nt_avx2 : &kernels_avx2;
  if (strcmp(isa, "sse2") == 0)
    return nt ? &kernels_nt_sse2 : &kernels_sse2;
#endif
  return NULL;
}
