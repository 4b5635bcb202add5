/*
 * The floating-point peak of one core, measured, for bench/matmul_vs_openblas:
 * a loop of independent fused multiply-adds (24 chains of AVX-512 FMAs on
 * 8 doubles, or 12 chains of AVX2 FMAs on 4 where the CPU lacks AVX-512;
 * enough chains to cover the FMA latency on two units), timed best of 5,
 * and the clock, from a chain of dependent integer multiplies (three
 * cycles each), both on the thread's CPU time (time-slicing by other programs
 * does not count).  Prints one JSON line:
 *   {"isa": "avx512", "gflops": G, "ghz": F, "fma_per_cycle": G / (F * lanes * 2)}
 * isa "none" (gflops 0) on a CPU with neither.
 *
 *   peak            (one thread; pin it, e.g. with taskset, for a steady clock)
 */
#include <stdio.h>
#include <time.h>

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* the time this thread ran */
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define Z(r) "vfmadd231pd %%zmm30, %%zmm31, %%zmm" #r "\n\t"
#define Y(r) "vfmadd231pd %%ymm14, %%ymm15, %%ymm" #r "\n\t"

/* iters x 24 AVX-512 FMAs */
__attribute__((target("avx512f"))) static void fma512(long iters)
{
  __asm__ volatile("vxorpd %%xmm30, %%xmm30, %%xmm30\n\t"
                   "vxorpd %%xmm31, %%xmm31, %%xmm31\n\t"
                   "1:\n\t" Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11) Z(12)
                       Z(13) Z(14) Z(15) Z(16) Z(17) Z(18) Z(19) Z(20) Z(21) Z(22) Z(23)
                   "dec %0\n\t"
                   "jnz 1b"
                   : "+r"(iters)
                   :
                   : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                     "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
                     "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",
                     "xmm30", "xmm31");
}

/* iters x 12 AVX2 FMAs */
__attribute__((target("avx2,fma"))) static void fma256(long iters)
{
  __asm__ volatile("vxorpd %%xmm14, %%xmm14, %%xmm14\n\t"
                   "vxorpd %%xmm15, %%xmm15, %%xmm15\n\t"
                   "1:\n\t" Y(0) Y(1) Y(2) Y(3) Y(4) Y(5) Y(6) Y(7) Y(8) Y(9) Y(10) Y(11)
                   "dec %0\n\t"
                   "jnz 1b"
                   : "+r"(iters)
                   :
                   : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                     "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15");
}

/* iters x 8 dependent integer multiplies, 3 cycles each (x86 cores since
 * the Pentium Pro): 24 cycles per iteration.  (A chain of add-immediates
 * is no clock: recent cores fold some of them at rename.) */
static void muls(long iters)
{
  long x = 1, k = 3;
  __asm__ volatile("1:\n\t"
                   "imul %2, %1\n\timul %2, %1\n\timul %2, %1\n\timul %2, %1\n\t"
                   "imul %2, %1\n\timul %2, %1\n\timul %2, %1\n\timul %2, %1\n\t"
                   "dec %0\n\t"
                   "jnz 1b"
                   : "+r"(iters), "+r"(x)
                   : "r"(k));
}

int main(void)
{
  __builtin_cpu_init();
  int z = __builtin_cpu_supports("avx512f");
  int y = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const char *isa = z ? "avx512" : y ? "avx2" : "none";
  int lanes = z ? 8 : 4, chains = z ? 24 : 12;
  long iters = 20000000;
  double best = 1e30, bestc = 1e30;
  for (int r = 0; r < 5 && (z || y); r++) {
    double t0 = now();
    if (z)
      fma512(iters);
    else
      fma256(iters);
    double t = now() - t0;
    best = t < best ? t : best;
    t0 = now();
    muls(iters / 3);
    t = now() - t0;
    bestc = t < bestc ? t : bestc;
  }
  double gflops = z || y ? (double)iters * chains * lanes * 2 / best / 1e9 : 0.0;
  double ghz = 24.0 * (double)(iters / 3) / bestc / 1e9;
  printf("{\"isa\": \"%s\", \"gflops\": %.6g, \"ghz\": %.4g, \"fma_per_cycle\": %.4g}\n", isa,
         gflops, ghz, gflops > 0 ? gflops / (ghz * lanes * 2) : 0.0);
  return 0;
}
