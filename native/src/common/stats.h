/*
 * Internal: the statistics layer of the native probes -- one summary of the
 * repeated samples of one figure and one "repeat until" rule, the same as
 * python/tiers/stats.py (docs/statistics.md gives the method):
 *
 *  - outliers: with 4 samples or more, samples outside Tukey's far-out
 *    fences [Q1 - 3 IQR, Q3 + 3 IQR] (quartiles by linear interpolation)
 *    are left out; the others are "kept";
 *  - min of all samples (disturbances only slow a timing), median of the
 *    kept ones;
 *  - the 95 % confidence interval of the median from order statistics:
 *    [x(l), x(n+1-l)], l the largest rank with P(B <= l-1) <= 0.025 for
 *    B ~ Binomial(n, 1/2); undefined below 6 kept samples;
 *  - relative half-width max(median - lo, hi - median) / median;
 *  - noisy: half-width above 5 % of the median, or the interval undefined.
 *
 * Not thread-safe per object; the functions keep no global state.
 */
#ifndef TIERS_COMMON_STATS_H
#define TIERS_COMMON_STATS_H

#include <stddef.h>

#include "common/json.h"

#define TIERS_STATS_NOISY_REL 0.05
#define TIERS_STATS_FENCE 3.0
#define TIERS_STATS_MIN_SAMPLES 6

/* The summary of one figure's samples; doubles are NAN where undefined. */
typedef struct tiers_stats {
  size_t n;        /* finite samples given */
  size_t kept;     /* samples inside the outlier fences */
  double min;      /* best sample (of all, outliers included) */
  double median;   /* median of the kept samples */
  double ci_low;   /* 95 % interval of the median (NAN: undefined) */
  double ci_high;
  int ci_l, ci_u;  /* 1-based ranks of the interval's order statistics (0: undefined) */
  double rel_halfwidth;
  int noisy;       /* 1: wider than +-5 % or undefined */
} tiers_stats_t;

/*
 * 1-based ranks of the order statistics bounding the 95 % interval of the
 * median of n samples.  Returns 0 and sets *l, *u, or -1 when n is too small.
 */
int tiers_stats_ci_ranks(size_t n, int *l, int *u);

/*
 * Summarises n samples (non-finite ones are ignored).  @p scratch must hold
 * n doubles (it receives the sorted samples); x is not changed.
 */
void tiers_stats_summarize(const double *x, size_t n, double *scratch, tiers_stats_t *s);

/*
 * The smallest difference that a figure measured against a reference can
 * resolve: TIERS_STATS_RESOLUTION_FACTOR times the spread of the
 * reference's samples (their interquartile range, linear interpolation), and
 * never less than twice @p timer_us (what one reading of the clock costs,
 * per sample).  A difference below it cannot be told from the reference's
 * own scatter.  @p scratch must hold n doubles.  Returns NAN without a
 * finite sample.
 */
#define TIERS_STATS_RESOLUTION_FACTOR 2.0
double tiers_stats_resolution(const double *ref, size_t n, double *scratch, double timer_us);

/* Why a repeat-until driver stopped. */
typedef enum {
  TIERS_STATS_GO_ON = 0,
  TIERS_STATS_CONVERGED,
  TIERS_STATS_MAX_SAMPLES,
  TIERS_STATS_TIME_LIMIT
} tiers_stats_stop_t;

/*
 * The repeat-until rule for one figure, on samples kept by the caller:
 * "converged" when the summary is not noisy (at least 6 kept samples and
 * the interval within +-5 %), else "max samples" when n >= max_samples,
 * else "time limit" when elapsed_s >= time_limit_s, else go on.
 * @p scratch as for tiers_stats_summarize.
 */
tiers_stats_stop_t tiers_stats_should_stop(const double *x, size_t n, double *scratch,
                                           size_t max_samples, double elapsed_s,
                                           double time_limit_s);

/* The word for a stop reason: "converged", "max samples", "time limit", "" */
const char *tiers_stats_stop_name(tiers_stats_stop_t why);

/*
 * Writes the summary as JSON members of the object being written: prefix +
 * "min", "median", "ci_low", "ci_high", "rel_halfwidth", "n", "kept",
 * "noisy" (e.g. prefix "rtt_" gives "rtt_median", ...).
 */
void tiers_stats_json(tiers_json_t *j, const char *prefix, const tiers_stats_t *s);

#endif
