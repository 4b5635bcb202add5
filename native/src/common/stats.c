/* The statistics layer of the native probes: see stats.h. */
#include "common/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y ? 1 : 0;
}

/* The p quantile of sorted values, linear interpolation (numpy's default). */
static double quantile(const double *s, size_t n, double p)
{
  if (n == 0)
    return NAN;
  double h = (double)(n - 1) * p;
  size_t lo = (size_t)floor(h);
  size_t hi = lo + 1 < n ? lo + 1 : n - 1;
  return s[lo] + (h - (double)lo) * (s[hi] - s[lo]);
}

int tiers_stats_ci_ranks(size_t n, int *l, int *u)
{
  if (n < 1)
    return -1;
  const double alpha = 0.025;
  double term = pow(0.5, (double)n); /* P(B = 0) */
  double tail = 0;
  size_t best = 0;
  for (size_t k = 0; k < n; k++) {
    tail += term; /* P(B <= k) */
    if (tail > alpha * (1 + 1e-12))
      break;
    best = k + 1;
    term = term * (double)(n - k) / (double)(k + 1);
  }
  if (best < 1)
    return -1;
  *l = (int)best;
  *u = (int)(n + 1 - best);
  return 0;
}

void tiers_stats_summarize(const double *x, size_t n, double *scratch, tiers_stats_t *s)
{
  memset(s, 0, sizeof *s);
  s->min = s->median = s->ci_low = s->ci_high = s->rel_halfwidth = NAN;
  s->noisy = 1;
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(x[i]))
      scratch[m++] = x[i];
  s->n = m;
  if (m == 0)
    return;
  qsort(scratch, m, sizeof *scratch, cmp_double);
  /* Tukey's far-out fences, with 4 samples or more */
  size_t first = 0, last = m; /* kept: scratch[first .. last-1] */
  if (m >= 4) {
    double q1 = quantile(scratch, m, 0.25), q3 = quantile(scratch, m, 0.75);
    double lo = q1 - TIERS_STATS_FENCE * (q3 - q1), hi = q3 + TIERS_STATS_FENCE * (q3 - q1);
    while (first < m && scratch[first] < lo)
      first++;
    while (last > first && scratch[last - 1] > hi)
      last--;
  }
  const double *k = scratch + first;
  size_t kept = last - first;
  s->kept = kept;
  s->min = scratch[0]; /* the best of all samples: disturbances only slow */
  s->median = quantile(k, kept, 0.5);
  int l, u;
  if (tiers_stats_ci_ranks(kept, &l, &u) != 0)
    return;
  s->ci_l = l;
  s->ci_u = u;
  s->ci_low = k[l - 1];
  s->ci_high = k[u - 1];
  double a = s->median - s->ci_low, b = s->ci_high - s->median;
  double half = a > b ? a : b;
  if (s->median > 0)
    s->rel_halfwidth = half / s->median;
  else
    s->rel_halfwidth = half == 0 ? 0 : INFINITY;
  s->noisy = s->rel_halfwidth > TIERS_STATS_NOISY_REL;
}

double tiers_stats_resolution(const double *ref, size_t n, double *scratch, double timer_us)
{
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(ref[i]))
      scratch[m++] = ref[i];
  if (m == 0)
    return NAN;
  qsort(scratch, m, sizeof *scratch, cmp_double);
  double iqr = quantile(scratch, m, 0.75) - quantile(scratch, m, 0.25);
  double r = TIERS_STATS_RESOLUTION_FACTOR * iqr;
  double floor_us = isfinite(timer_us) && timer_us > 0 ? 2.0 * timer_us : 0.0;
  return r > floor_us ? r : floor_us;
}

tiers_stats_stop_t tiers_stats_should_stop(const double *x, size_t n, double *scratch,
                                           size_t max_samples, double elapsed_s,
                                           double time_limit_s)
{
  if (n > 0) {
    tiers_stats_t s;
    tiers_stats_summarize(x, n, scratch, &s);
    if (!s.noisy)
      return TIERS_STATS_CONVERGED;
  }
  if (n >= max_samples)
    return TIERS_STATS_MAX_SAMPLES;
  if (elapsed_s >= time_limit_s)
    return TIERS_STATS_TIME_LIMIT;
  return TIERS_STATS_GO_ON;
}

const char *tiers_stats_stop_name(tiers_stats_stop_t why)
{
  switch (why) {
  case TIERS_STATS_CONVERGED:
    return "converged";
  case TIERS_STATS_MAX_SAMPLES:
    return "max samples";
  case TIERS_STATS_TIME_LIMIT:
    return "time limit";
  default:
    return "";
  }
}

void tiers_stats_json(tiers_json_t *j, const char *prefix, const tiers_stats_t *s)
{
  char key[96];
#define KV(name, fn, v)                                         \
  do {                                                          \
    snprintf(key, sizeof key, "%s%s", prefix, name);            \
    fn(j, key, v);                                              \
  } while (0)
  KV("min", tiers_json_kv_double, s->min);
  KV("median", tiers_json_kv_double, s->median);
  KV("ci_low", tiers_json_kv_double, s->ci_low);
  KV("ci_high", tiers_json_kv_double, s->ci_high);
  KV("rel_halfwidth", tiers_json_kv_double, s->rel_halfwidth);
  KV("n", tiers_json_kv_int, (int64_t)s->n);
  KV("kept", tiers_json_kv_int, (int64_t)s->kept);
  KV("noisy", tiers_json_kv_bool, s->noisy);
#undef KV
}
