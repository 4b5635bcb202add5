#include "probe/sync_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double sync_t95(int df)
{
  static const double table[30] = {
      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
      2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
      2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1)
    return 0.0;
  if (df <= 30)
    return table[df - 1];
  /* Cornish-Fisher expansion around the normal quantile; within 1e-4 of
   * the exact value from 30 degrees of freedom on. */
  const double z = 1.959963984540054, v = (double)df;
  const double z3 = z * z * z, z5 = z3 * z * z;
  return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void mean_sd(const double *x, int n, double *mean, double *sd)
{
  double sum = 0.0;
  for (int i = 0; i < n; i++)
    sum += x[i];
  double m = sum / n, ss = 0.0;
  for (int i = 0; i < n; i++)
    ss += (x[i] - m) * (x[i] - m);
  *mean = m;
  *sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

int sync_stats_compute(const double *x, int n, double sigma, sync_stats_t *s)
{
  memset(s, 0, sizeof *s);
  s->n = n;
  double *kept = malloc(sizeof *kept * (size_t)(n > 0 ? n : 1));
  s->dropped = malloc(sizeof *s->dropped * (size_t)(n > 0 ? n : 1));
  if (!kept || !s->dropped) {
    free(kept);
    free(s->dropped);
    s->dropped = NULL;
    return -1;
  }
  double m_all, sd_all;
  mean_sd(x, n, &m_all, &sd_all);
  int k = 0, d = 0;
  for (int i = 0; i < n; i++) {
    if (sd_all > 0 && fabs(x[i] - m_all) > sigma * sd_all)
      s->dropped[d++] = x[i];
    else
      kept[k++] = x[i];
  }
  s->kept = k;
  mean_sd(kept, k, &s->mean, &s->stddev);
  qsort(kept, (size_t)k, sizeof *kept, cmp_double);
  s->median = k % 2 ? kept[k / 2] : 0.5 * (kept[k / 2 - 1] + kept[k / 2]);
  s->min = kept[0];
  s->max = kept[k - 1];
  s->t95 = sync_t95(k - 1);
  double half = k > 1 ? s->t95 * s->stddev / sqrt((double)k) : 0.0;
  s->ci_low = s->mean - half;
  s->ci_high = s->mean + half;
  /* the statistics layer's median and CI of the median, on all samples
   * (kept's memory serves as its scratch) */
  tiers_stats_summarize(x, (size_t)n, kept, &s->med);
  free(kept);
  return 0;
}

void sync_stats_free(sync_stats_t *s)
{
  free(s->dropped);
  s->dropped = NULL;
}

void sync_stats_json(tiers_json_t *j, const char *key, const sync_stats_t *s, double hz)
{
  const double cyc = hz * 1e-6; /* cycles per microsecond */
  tiers_json_key(j, key);
  tiers_json_object_begin(j);
  tiers_json_kv_int(j, "n", s->n);
  tiers_json_kv_int(j, "kept", s->kept);
  tiers_json_kv_int(j, "dropped", s->n - s->kept);
  tiers_json_kv_double_array(j, "dropped_us", s->dropped, (size_t)(s->n - s->kept));
  tiers_json_kv_double(j, "mean_us", s->mean);
  tiers_json_kv_double(j, "median_us", s->median);
  tiers_json_kv_double(j, "stddev_us", s->stddev);
  tiers_json_kv_double(j, "min_us", s->min);
  tiers_json_kv_double(j, "max_us", s->max);
  double ci[2] = {s->ci_low, s->ci_high};
  tiers_json_kv_double_array(j, "ci95_us", ci, 2);
  tiers_json_kv_double(j, "t95", s->t95);
  tiers_json_kv_double(j, "mean_cycles", s->mean * cyc);
  tiers_json_kv_double(j, "median_cycles", s->median * cyc);
  tiers_json_kv_double(j, "stddev_cycles", s->stddev * cyc);
  tiers_json_kv_double(j, "min_cycles", s->min * cyc);
  tiers_json_kv_double(j, "max_cycles", s->max * cyc);
  double cic[2] = {s->ci_low * cyc, s->ci_high * cyc};
  tiers_json_kv_double_array(j, "ci95_cycles", cic, 2);
  /* the statistics layer (docs/statistics.md): median of all samples after
   * Tukey's far-out fences, its 95 % CI from order statistics (null below
   * 6 samples), and noisy = CI wider than +-5 % of the median */
  tiers_json_key(j, "median_stats");
  tiers_json_object_begin(j);
  tiers_stats_json(j, "", &s->med);
  tiers_json_kv_double(j, "median_cycles", s->med.median * cyc);
  tiers_json_kv_double(j, "min_cycles", s->med.min * cyc);
  tiers_json_object_end(j);
  tiers_json_kv_bool(j, "noisy", s->med.noisy);
  tiers_json_object_end(j);
}

void sync_epcc_figure(const double *values, size_t n, sync_epcc_t *e)
{
  e->n = n > 1 ? (int)(n - 1) : 0;
  e->mean = e->sd = NAN;
  e->outliers = 0;
  if (n < 2)
    return;
  mean_sd(values + 1, e->n, &e->mean, &e->sd);
  if (e->n < 2)
    e->sd = NAN;
  for (int i = 1; i <= e->n; i++)
    if (e->sd > 0 && fabs(values[i] - e->mean) > 3.0 * e->sd)
      e->outliers++;
}

int sync_resolved(const tiers_stats_t *m, double res, char *why, size_t size)
{
  if (isfinite(res) && isfinite(m->median) && m->median < res) {
    snprintf(why, size,
             "below resolution: the median overhead %.4g us is smaller than %.4g us, twice "
             "the spread (interquartile range) of the reference loop timed beside it",
             m->median, res);
    return 0;
  }
  why[0] = '\0';
  return 1;
}

int sync_reliability(const tiers_stats_t *m, int has_ref, char *why, size_t size)
{
  const char *what = has_ref ? "overhead (test minus reference, per pair)" : "time";
  if (!(m->n > 0) || !isfinite(m->median)) {
    snprintf(why, size, "no finite samples");
    return 0;
  }
  if (m->median <= 0) {
    snprintf(why, size, "below noise: the median %s is at or below zero", what);
    return 0;
  }
  if (m->ci_l > 0 && m->ci_low <= 0) {
    snprintf(why, size,
             "below noise: the 95 %% CI of the median %s includes zero (its upper end: "
             "%.4g us)",
             what, m->ci_high);
    return 0;
  }
  why[0] = '\0';
  return 1;
}

void sync_result_json(tiers_json_t *j, const char *ref_name, long innerreps, long ref_innerreps,
                      const double *times, const double *refs, const double *values, size_t n,
                      double ref_median, const sync_stats_t *s, double hz, double timer_us)
{
  tiers_json_key(j, "reference");
  if (ref_name)
    tiers_json_string(j, ref_name);
  else
    tiers_json_null(j);
  /* the median of the reference loop timed beside the test (0: no reference) */
  tiers_json_kv_double(j, "reference_us", refs ? ref_median : 0.0);
  tiers_json_kv_int(j, "innerreps", innerreps);
  if (refs)
    tiers_json_kv_int(j, "reference_innerreps", ref_innerreps);
  tiers_json_kv_int(j, "reps", (int64_t)n);
  tiers_json_kv_double_array(j, "times_us", times, n);
  if (refs)
    tiers_json_kv_double_array(j, "reference_times_us", refs, n);
  /* per-pair differences: single samples may be below zero on a noisy
   * machine; the figure is the statistics below */
  tiers_json_kv_double_array(j, "overheads_us", values, n);
  sync_stats_json(j, "stats", s, hz);
  char why[300];
  int ok = sync_reliability(&s->med, refs != NULL, why, sizeof why), below_res = 0;
  if (refs) {
    const double cyc = hz * 1e-6;
    sync_epcc_t e;
    sync_epcc_figure(values, n, &e);
    tiers_json_key(j, "epcc");
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "method", "mean over the outer repetitions of (test - reference) "
                                      "per inner repetition, the first repetition dropped");
    tiers_json_kv_int(j, "n", e.n);
    /* a mean at or below zero is not a cost (disturbed references pulled
     * it down): null, as every figure of a document */
    int positive = e.mean > 0;
    tiers_json_kv_double(j, "mean_us", positive ? e.mean : NAN);
    tiers_json_kv_double(j, "sd_us", e.sd);
    tiers_json_kv_double(j, "mean_cycles", positive ? e.mean * cyc : NAN);
    tiers_json_kv_int(j, "outliers", e.outliers);
    tiers_json_kv_bool(j, "reliable", positive);
    if (!positive)
      tiers_json_kv_string(j, "why", e.n ? "the mean of the per-pair overheads is at or below "
                                           "zero: not a cost"
                                         : "fewer than 2 repetitions");
    tiers_json_object_end(j);
    double *scratch = malloc(sizeof *scratch * (n ? n : 1));
    double res = scratch ? tiers_stats_resolution(refs, n, scratch, timer_us) : NAN;
    free(scratch);
    tiers_json_kv_double(j, "resolution_us", res);
    if (ok && !sync_resolved(&s->med, res, why, sizeof why))
      ok = 0, below_res = 1;
  }
  tiers_json_kv_bool(j, "reliable", ok);
  if (!ok) {
    tiers_json_kv_string(j, "why", why);
    tiers_json_kv_bool(j, "below_resolution", below_res);
  }
}
