/*
 * Internal to tiers-probe-sync: the statistics of one test's outer
 * repetitions, as the EPCC micro-benchmarks report them.
 *
 * One pass of outlier rejection: the mean and the sample standard deviation
 * of all samples are taken, and samples farther than sigma standard
 * deviations from that mean are dropped (none when the deviation is 0).
 * On the samples kept: mean, median (mean of the two middle values for an
 * even count), sample standard deviation (n-1), min, max, and the 95%
 * confidence interval of the mean, mean -/+ t * sd / sqrt(kept) with t the
 * 0.975 quantile of Student's t with kept-1 degrees of freedom.
 *
 * Beside them, the statistics layer of every probe (common/stats.h) on all
 * n samples: median, 95 % CI of the median, and the noisy flag.
 */
#ifndef TIERS_PROBE_SYNC_STATS_H
#define TIERS_PROBE_SYNC_STATS_H

#include "common/json.h"
#include "common/stats.h"

typedef struct sync_stats {
  int n;         /* samples given */
  int kept;      /* samples kept after the outlier filter */
  double mean, median, stddev, min, max;
  double ci_low, ci_high;
  double t95;    /* the t quantile used for the interval (0 when kept < 2) */
  double *dropped; /* the dropped samples, in input order (n - kept of them) */
  tiers_stats_t med; /* the statistics layer's summary of all n samples: median,
                      * its 95 % CI from order statistics, noisy (docs/statistics.md) */
} sync_stats_t;

/* EPCC's own figure of an overhead: the mean over the outer repetitions of
 * (test - reference) per inner repetition, the first outer repetition
 * dropped (a warm-up), the standard deviation, and the repetitions further
 * than 3 standard deviations from the mean counted (EPCC reports them and
 * keeps them in the mean).  NAN where undefined (fewer than 2 repetitions). */
typedef struct sync_epcc {
  int n;          /* repetitions in the mean (all but the first) */
  double mean, sd;
  int outliers;   /* of the n, beyond 3 sd from the mean (counted, kept) */
} sync_epcc_t;

void sync_epcc_figure(const double *values, size_t n, sync_epcc_t *e);

/* The 0.975 quantile of Student's t with @p df degrees of freedom (df >= 1). */
double sync_t95(int df);

/* Computes the statistics of x[0..n-1] (n >= 1); fills s (s->dropped is
 * malloc'd; release with sync_stats_free).  Returns 0, or -1 when out of memory. */
int sync_stats_compute(const double *x, int n, double sigma, sync_stats_t *s);

void sync_stats_free(sync_stats_t *s);

/* Whether the statistics layer's summary @p m of a figure is a cost that
 * can be given: its median above zero and, with a reference (@p has_ref:
 * an overhead = test - reference), the 95 % CI of the median above zero
 * too.  Returns 1, or 0 with the reason ("below noise: ...") in @p why. */
int sync_reliability(const tiers_stats_t *m, int has_ref, char *why, size_t size);

/* Whether the median @p m of an overhead is at least the resolution @p res
 * (tiers_stats_resolution of the reference samples); returns 1, or 0 with
 * "below resolution: ..." in @p why. */
int sync_resolved(const tiers_stats_t *m, double res, char *why, size_t size);

/* Writes the members of one test's result: reference name (null without),
 * reference_us (the median of @p refs; 0 without), innerreps, reps, the
 * samples (times, reference times, values = per-pair differences or
 * times), the statistics of the values (sync_stats_json), with a reference
 * EPCC's figure ("epcc", sync_epcc_figure) and the resolution
 * ("resolution_us", tiers_stats_resolution of @p refs with @p timer_us per
 * inner repetition), and "reliable" with "why" (sync_reliability, then
 * sync_resolved; "below_resolution": true when that is why).  @p refs may
 * be NULL. */
void sync_result_json(tiers_json_t *j, const char *ref_name, long innerreps, long ref_innerreps,
                      const double *times, const double *refs, const double *values, size_t n,
                      double ref_median, const sync_stats_t *s, double hz, double timer_us);

/* Writes the statistics object: every figure in microseconds (the samples'
 * unit) and, using @p hz, in CPU cycles. */
void sync_stats_json(tiers_json_t *j, const char *key, const sync_stats_t *s, double hz);

#endif
