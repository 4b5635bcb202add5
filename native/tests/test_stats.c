/*
 * The native statistics layer (native/src/common/stats.c) on synthetic
 * samples: a quiet lognormal cloud with a few 100x outliers, bimodal
 * samples, constant samples, n = 1..3, a wide cloud.  The interval's ranks
 * are checked against the binomial tail summed with exact combinations, the
 * median against a direct count.  With --print the tool prints one line per
 * case (name, then the summary), which tests/test_stats.py compares with the
 * Python layer on the same generated inputs.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/stats.h"

/* xorshift64*, the same generator as tests/test_stats.py's */
static uint64_t state;
static double uniform(void)
{
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  uint64_t r = state * 2685821657736338717ULL;
  return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

/* approximately normal: the sum of 12 uniforms minus 6 */
static double normal(void)
{
  double s = 0;
  for (int i = 0; i < 12; i++)
    s += uniform();
  return s - 6.0;
}

#define MAXN 128
typedef struct {
  const char *name;
  double x[MAXN];
  size_t n;
} case_t;

static void lognormal(case_t *c, uint64_t seed, size_t n, double median, double sigma)
{
  state = seed;
  for (size_t i = 0; i < n; i++)
    c->x[c->n++] = median * exp(sigma * normal());
}

static int make_cases(case_t *cs)
{
  int k = 0;
  memset(cs, 0, sizeof(case_t) * 16);
  cs[k].name = "quiet_with_outliers";
  lognormal(&cs[k], 1, 50, 10.0, 0.01);
  cs[k].x[7] *= 100;
  cs[k].x[21] *= 100;
  cs[k].x[40] *= 100;
  k++;
  cs[k].name = "bimodal";
  lognormal(&cs[k], 2, 20, 10.0, 0.005);
  lognormal(&cs[k], 3, 20, 20.0, 0.005);
  k++;
  cs[k].name = "constant";
  for (int i = 0; i < 10; i++)
    cs[k].x[cs[k].n++] = 5.0;
  k++;
  cs[k].name = "n1";
  cs[k].x[cs[k].n++] = 3.0;
  k++;
  cs[k].name = "n2";
  cs[k].x[cs[k].n++] = 4.0;
  cs[k].x[cs[k].n++] = 3.0;
  k++;
  cs[k].name = "n3";
  cs[k].x[cs[k].n++] = 5.0;
  cs[k].x[cs[k].n++] = 3.0;
  cs[k].x[cs[k].n++] = 4.0;
  k++;
  cs[k].name = "n6_quiet";
  lognormal(&cs[k], 4, 6, 2.0, 0.005);
  k++;
  cs[k].name = "wide";
  lognormal(&cs[k], 5, 40, 100.0, 0.3);
  k++;
  return k;
}

/* P(B <= k), B ~ Binomial(n, 1/2), with exact combinations (n <= 60) */
static double binom_cdf(int n, int k)
{
  double sum = 0;
  for (int i = 0; i <= k; i++) {
    /* C(n, i) exactly in a double while n <= 60 fits in 53 bits for i small enough;
     * computed as a product of exact integers */
    long double c = 1;
    for (int j = 1; j <= i; j++)
      c = c * (n - i + j) / j;
    sum += (double)(c / powl(2.0L, n));
  }
  return sum;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
  case_t cs[16];
  int ncases = make_cases(cs);
  double scratch[MAXN];
  int print = argc > 1 && strcmp(argv[1], "--print") == 0;

  if (print) {
    for (int i = 0; i < ncases; i++) {
      tiers_stats_t s;
      tiers_stats_summarize(cs[i].x, cs[i].n, scratch, &s);
      printf("%s %zu %zu %.17g %.17g %.17g %.17g %d %d %.17g %d\n", cs[i].name, s.n, s.kept,
             s.min, s.median, s.ci_low, s.ci_high, s.ci_l, s.ci_u, s.rel_halfwidth, s.noisy);
    }
    return 0;
  }

  /* the interval's ranks against the exact binomial tail */
  for (int n = 1; n <= 60; n++) {
    int l = 0, u = 0;
    int rc = tiers_stats_ci_ranks((size_t)n, &l, &u);
    int want = 0;
    for (int k = 1; k <= n; k++)
      if (binom_cdf(n, k - 1) <= 0.025)
        want = k;
    if (want == 0) {
      CHECK(rc != 0);
      CHECK(n < TIERS_STATS_MIN_SAMPLES);
    } else {
      CHECK(rc == 0 && l == want && u == n + 1 - want);
      CHECK(1 - 2 * binom_cdf(n, l - 1) >= 0.95);
    }
  }
  int l, u;
  CHECK(tiers_stats_ci_ranks(6, &l, &u) == 0 && l == 1 && u == 6);
  CHECK(tiers_stats_ci_ranks(5, &l, &u) != 0);

  for (int i = 0; i < ncases; i++) {
    case_t *c = &cs[i];
    tiers_stats_t s;
    tiers_stats_summarize(c->x, c->n, scratch, &s);
    CHECK(s.n == c->n);
    if (strcmp(c->name, "quiet_with_outliers") == 0) {
      CHECK(s.kept == 47);
      /* the median of the 47 quiet samples, by sorting them here */
      double q[MAXN];
      size_t m = 0;
      for (size_t k = 0; k < c->n; k++)
        if (c->x[k] < 100)
          q[m++] = c->x[k];
      qsort(q, m, sizeof *q, cmp);
      CHECK(m == 47 && s.median == q[23] && s.min == q[0]);
      tiers_stats_ci_ranks(47, &l, &u);
      CHECK(s.ci_low == q[l - 1] && s.ci_high == q[u - 1]);
      CHECK(!s.noisy && s.rel_halfwidth < 0.05);
    } else if (strcmp(c->name, "bimodal") == 0) {
      CHECK(s.kept == 40);
      CHECK(s.median > 10.3 && s.median < 19.7); /* between the modes */
      CHECK(s.noisy);
    } else if (strcmp(c->name, "constant") == 0) {
      CHECK(s.kept == 10 && s.median == 5.0 && s.min == 5.0);
      CHECK(s.ci_low == 5.0 && s.ci_high == 5.0 && s.rel_halfwidth == 0 && !s.noisy);
    } else if (c->n <= 3) {
      CHECK(s.kept == c->n && s.min == 3.0);
      CHECK(s.median == (c->n == 1 ? 3.0 : c->n == 2 ? 3.5 : 4.0));
      CHECK(isnan(s.ci_low) && isnan(s.ci_high) && s.ci_l == 0 && s.noisy);
    } else if (strcmp(c->name, "n6_quiet") == 0) {
      double q[6];
      memcpy(q, c->x, sizeof q);
      qsort(q, 6, sizeof *q, cmp);
      CHECK(s.ci_low == q[0] && s.ci_high == q[5] && s.median == (q[2] + q[3]) / 2);
      CHECK(!s.noisy);
    } else if (strcmp(c->name, "wide") == 0) {
      CHECK(s.noisy && s.rel_halfwidth > 0.05);
    }
  }

  /* the stopping rule */
  double quiet[20], wide[20], scr[20];
  for (int i = 0; i < 20; i++) {
    quiet[i] = 10.0 + 0.01 * (i % 3);
    wide[i] = i % 2 ? 10.0 : 20.0;
  }
  CHECK(tiers_stats_should_stop(quiet, 5, scr, 100, 0.0, 1.0) == TIERS_STATS_GO_ON);
  CHECK(tiers_stats_should_stop(quiet, 6, scr, 100, 0.0, 1.0) == TIERS_STATS_CONVERGED);
  CHECK(tiers_stats_should_stop(wide, 20, scr, 100, 0.5, 1.0) == TIERS_STATS_GO_ON);
  CHECK(tiers_stats_should_stop(wide, 20, scr, 100, 1.0, 1.0) == TIERS_STATS_TIME_LIMIT);
  CHECK(tiers_stats_should_stop(wide, 20, scr, 20, 0.0, 1.0) == TIERS_STATS_MAX_SAMPLES);
  CHECK(tiers_stats_should_stop(quiet, 1, scr, 1, 0.0, 1.0) == TIERS_STATS_MAX_SAMPLES);
  CHECK(strcmp(tiers_stats_stop_name(TIERS_STATS_TIME_LIMIT), "time limit") == 0);

  /* the best is the fastest of all samples, even outside the fences */
  double quant[10] = {10, 10, 10, 10, 9.9, 10, 10, 10, 10, 10};
  tiers_stats_t b;
  tiers_stats_summarize(quant, 10, scr, &b);
  CHECK(b.kept == 9 && b.median == 10.0 && b.min == 9.9);

  /* non-finite samples are ignored */
  double with_nan[4] = {NAN, 2.0, INFINITY, 4.0};
  tiers_stats_t s;
  tiers_stats_summarize(with_nan, 4, scr, &s);
  CHECK(s.n == 2 && s.median == 3.0);
  return TIERS_TEST_RESULT;
}
