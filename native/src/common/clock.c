#include "common/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TIERS_HAVE_TSC 1
#endif

double tiers_clock_resolution(void)
{
  struct timespec res;
  if (clock_getres(CLOCK_MONOTONIC, &res) != 0)
    return 1e-6;
  return (double)res.tv_sec + 1e-9 * (double)res.tv_nsec;
}

static double cpuinfo_mhz(void)
{
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return 0.0;
  char line[256];
  double mhz = 0.0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "cpu MHz", 7) == 0) {
      const char *colon = strchr(line, ':');
      if (colon)
        mhz = strtod(colon + 1, NULL);
      break;
    }
  }
  fclose(f);
  return mhz * 1e6;
}

double tiers_cycle_hz(double calibrate_s)
{
#ifdef TIERS_HAVE_TSC
  if (calibrate_s > 0) {
    double t0 = tiers_now();
    uint64_t c0 = __rdtsc();
    double t1;
    do {
      t1 = tiers_now();
    } while (t1 - t0 < calibrate_s);
    uint64_t c1 = __rdtsc();
    if (c1 > c0 && t1 > t0)
      return (double)(c1 - c0) / (t1 - t0);
  }
#else
  (void)calibrate_s;
#endif
  return cpuinfo_mhz();
}
