/* Internal: clocks for the probes. */
#ifndef TIERS_COMMON_CLOCK_H
#define TIERS_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic wall clock in seconds (clock_gettime, ns resolution). */
static inline double tiers_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Monotonic wall clock in nanoseconds. */
static inline int64_t tiers_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Resolution of tiers_now() in seconds, as clock_getres reports it. */
double tiers_clock_resolution(void);

/*
 * Core clock rate in Hz used to express times in cycles: the nominal rate of
 * the time-stamp counter where the CPU has an invariant one (x86), measured
 * against the monotonic clock over about @p calibrate_s seconds; otherwise
 * the "cpu MHz" of /proc/cpuinfo.  Returns 0 when neither is available.
 */
double tiers_cycle_hz(double calibrate_s);

#endif
