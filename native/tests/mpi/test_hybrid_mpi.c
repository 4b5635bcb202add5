/*
 * tiers-hybrid-check: checks the hybrid runtime of tiers/hybrid.h under a
 * real MPI launch -- hybrid barrier, hybrid reductions, halo exchange --
 * with several processes and threads.  Built as an installed tool so that
 * it can also check an MPI installation on a new cluster.
 *
 *   mpirun -n P tiers-hybrid-check [--threads T] [--pin none|compact|scatter]
 *                                   [--rounds R] [--delay-us D]
 *
 * Rank 0 prints one JSON document:
 *   {"schema":"tiers.hybrid-check/1","ranks":P,"threads":T,
 *    "sum_double":[...], "max_double":[...], "min_double":[...],
 *    "sum_int64":[...], "max_int64":[...], "min_int64":[...],
 *    "barrier":{"rounds":R,"violations":V,"min_slack_s":S},
 *    "halo":{"2d":{"checked":N,"wrong":W},"3d":...,"3d_overlap":...},
 *    "failures":["..."], "ok":true}
 * and the program exits 1 when any check failed.
 *
 * Reductions: thread t of rank r contributes g = r*T + t + 1 (times i+1
 * for element i; int64 values are offset by 2^40) so that the exact
 * answers are known: sum = N(N+1)/2, max = N, min = 1 (N = P*T).
 *
 * Barrier ordering: in round k, thread k % T of rank k % P arrives late
 * (it sleeps D microseconds first).  Every thread records when it arrived
 * and when it left (CLOCK_MONOTONIC: one clock on one host); the round is
 * right when the earliest departure follows the latest arrival.
 */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/tool.h"
#include "tiers/hybrid.h"

#define COUNT 5
#define MAX_FAILURES 32

static char failures[MAX_FAILURES][200];
static int n_failures;

static void fail(const char *what)
{
  if (n_failures < MAX_FAILURES)
    snprintf(failures[n_failures], sizeof failures[0], "%s", what);
  n_failures++;
}

struct reduce_out {
  double dsum[COUNT], dmax[COUNT], dmin[COUNT];
  int64_t isum[COUNT], imax[COUNT], imin[COUNT];
  int mismatch; /* a thread got a result differing from the master's */
};

struct barrier_args {
  int rounds;
  long delay_us;
  double *arrive, *leave; /* [round][thread] of this rank */
};

struct ctx {
  struct reduce_out red;
  struct barrier_args bar;
  int rc;
};

static void sleep_us(long us)
{
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static int team_body(tiers_team_t team, int t, void *arg)
{
  struct ctx *c = arg;
  int T = tiers_team_nthreads(team), r = tiers_team_rank(team), P = tiers_team_size(team);
  double din[COUNT], dout[COUNT];
  int64_t iin[COUNT], iout[COUNT];
  double g = (double)(r * T + t + 1);
  for (int i = 0; i < COUNT; i++) {
    din[i] = g * (i + 1);
    iin[i] = ((int64_t)1 << 40) + (int64_t)g * (i + 1);
  }
  /* sum, max, min of doubles; in == out aliasing for max. */
  TIERS_CALL(tiers_team_allreduce_double(team, din, dout, COUNT, TIERS_OP_SUM));
  if (t == 0)
    memcpy(c->red.dsum, dout, sizeof dout);
  double dmax[COUNT];
  memcpy(dmax, din, sizeof din);
  TIERS_CALL(tiers_team_allreduce_double(team, dmax, dmax, COUNT, TIERS_OP_MAX));
  if (t == 0)
    memcpy(c->red.dmax, dmax, sizeof dmax);
  TIERS_CALL(tiers_team_allreduce_double(team, din, dout, COUNT, TIERS_OP_MIN));
  if (t == 0)
    memcpy(c->red.dmin, dout, sizeof dout);
  TIERS_CALL(tiers_team_allreduce_int64(team, iin, iout, COUNT, TIERS_OP_SUM));
  if (t == 0)
    memcpy(c->red.isum, iout, sizeof iout);
  TIERS_CALL(tiers_team_allreduce_int64(team, iin, iout, COUNT, TIERS_OP_MAX));
  if (t == 0)
    memcpy(c->red.imax, iout, sizeof iout);
  TIERS_CALL(tiers_team_allreduce_int64(team, iin, iout, COUNT, TIERS_OP_MIN));
  if (t == 0)
    memcpy(c->red.imin, iout, sizeof iout);
  TIERS_CALL(tiers_team_barrier(team)); /* the master's copies are complete */
  /* Every thread must hold what the master holds. */
  int wrong = 0;
  for (int i = 0; i < COUNT; i++)
    wrong |= iout[i] != c->red.imin[i];
  TIERS_CALL(tiers_team_allreduce_double(team, din, dout, COUNT, TIERS_OP_SUM));
  for (int i = 0; i < COUNT; i++)
    wrong |= dout[i] != c->red.dsum[i];
  TIERS_CALL(tiers_team_allreduce_double(team, din, dout, 0, TIERS_OP_SUM)); /* count 0 */
  if (wrong) {
#pragma omp atomic write
    c->red.mismatch = 1;
  }

  /* Barrier ordering. */
  for (int k = 0; k < c->bar.rounds; k++) {
    if (r == k % P && t == k % T)
      sleep_us(c->bar.delay_us);
    c->bar.arrive[k * T + t] = tiers_now();
    TIERS_CALL(tiers_team_barrier(team));
    c->bar.leave[k * T + t] = tiers_now();
  }
  return TIERS_OK;
}

/* Value of grid point (x, y, z) in the halo test: unique and exact. */
static double point_value(long x, long y, long z)
{
  return (double)(x + 1000 * y + 1000000 * z) + 0.5;
}

struct halo_args {
  tiers_halo_t halo;
  const tiers_decomp_t *d;
  double *field;
  int overlap;
};

static int halo_body(tiers_team_t team, int t, void *arg)
{
  (void)t;
  struct halo_args *h = arg;
  if (h->overlap) {
    TIERS_CALL(tiers_halo_begin(h->halo, h->field));
    TIERS_CALL(tiers_halo_end(h->halo, h->field));
  } else {
    TIERS_CALL(tiers_halo_exchange(h->halo, h->field));
  }
  (void)team;
  return TIERS_OK;
}

/* Runs one halo test; returns the number of wrong points (ghosts facing a
 * neighbour that do not hold the neighbour's value, or edge ghosts and
 * owned points that changed), and the number checked in *checked. */
static long halo_test(tiers_team_t team, int ndims, const long *global, int overlap,
                      long *checked)
{
  int dims[3] = {0, 0, 0};
  tiers_decomp_t d;
  if (tiers_decomp_create(team, ndims, global, dims, 0, &d) != TIERS_OK)
    tiers_tool_fail_last("tiers_decomp_create");
  long n0 = d.local[0] + 2, n1 = d.local[1] + 2, n2 = ndims == 3 ? d.local[2] + 2 : 1;
  size_t total = (size_t)(n0 * n1 * n2);
  double *field = malloc(total * sizeof *field);
  if (!field)
    tiers_tool_fail("out of memory");
  const double SENTINEL = -7.25;
  long g2 = ndims == 3 ? 1 : 0;
  for (long k = 0; k < n2; k++)
    for (long j = 0; j < n1; j++)
      for (long i = 0; i < n0; i++) {
        long bi = i - 1, bj = j - 1, bk = k - g2;
        int owned = bi >= 0 && bi < d.local[0] && bj >= 0 && bj < d.local[1] &&
                    (ndims == 2 || (bk >= 0 && bk < d.local[2]));
        field[i + n0 * (j + n1 * k)] =
            owned ? point_value(d.lo[0] + bi, d.lo[1] + bj, ndims == 3 ? d.lo[2] + bk : 0)
                  : SENTINEL;
      }
  tiers_halo_t halo;
  if (tiers_halo_create(&halo, team, &d) != TIERS_OK)
    tiers_tool_fail_last("tiers_halo_create");
  struct halo_args args = {halo, &d, field, overlap};
  if (tiers_team_parallel(team, halo_body, &args) != TIERS_OK)
    tiers_tool_fail_last("halo exchange");
  /* Serial use too, outside any region: must give the same. */
  if (tiers_halo_exchange(halo, field) != TIERS_OK)
    tiers_tool_fail_last("serial halo exchange");
  long wrong = 0;
  *checked = 0;
  for (long k = 0; k < n2; k++)
    for (long j = 0; j < n1; j++)
      for (long i = 0; i < n0; i++) {
        long b[3] = {i - 1, j - 1, k - g2};
        int outside = 0, axis = -1;
        for (int a = 0; a < ndims; a++)
          if (b[a] < 0 || b[a] >= d.local[a]) {
            outside++;
            axis = a;
          }
        double want = SENTINEL;
        if (outside == 0) {
          want = point_value(d.lo[0] + b[0], d.lo[1] + b[1], ndims == 3 ? d.lo[2] + b[2] : 0);
        } else if (outside == 1) { /* a face ghost: the neighbour's value, if any */
          int side = b[axis] < 0 ? 0 : 1;
          if (d.neighbor[axis][side] != MPI_PROC_NULL)
            want = point_value(d.lo[0] + b[0], d.lo[1] + b[1], ndims == 3 ? d.lo[2] + b[2] : 0);
        } /* edges and corners are never exchanged */
        (*checked)++;
        if (field[i + n0 * (j + n1 * k)] != want)
          wrong++;
      }
  tiers_halo_destroy(&halo);
  free(field);
  return wrong;
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  tiers_tool_help(argc, argv,
                  "usage: mpirun -n P tiers-hybrid-check [--threads T] "
                  "[--pin none|compact|scatter]\n"
                  "           [--rounds R] [--delay-us D]\n"
                  "Multi-rank self-test of the hybrid runtime (thread teams, barriers,\n"
                  "hybrid collectives); prints a tiers.hybrid-check/1 document.\n");
  long threads = 0, rounds = 20, delay_us = 2000;
  tiers_pin_policy_t pin = TIERS_PIN_NONE;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--threads") == 0 && v && tiers_parse_long(v, &threads) == 0)
      i++;
    else if (strcmp(a, "--rounds") == 0 && v && tiers_parse_long(v, &rounds) == 0)
      i++;
    else if (strcmp(a, "--delay-us") == 0 && v && tiers_parse_long(v, &delay_us) == 0)
      i++;
    else if (strcmp(a, "--pin") == 0 && v && tiers_pin_policy_parse(v, &pin) == 0)
      i++;
    else
      tiers_tool_fail("bad option %s (use --threads T, --pin none|compact|scatter, "
                      "--rounds R, --delay-us D)", a);
  }
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  tiers_team_t team;
  if (tiers_team_create(&team, MPI_COMM_WORLD, (int)threads, pin) != TIERS_OK)
    tiers_tool_fail_last("tiers_team_create");
  int T = tiers_team_nthreads(team), P = tiers_team_size(team), r = tiers_team_rank(team);

  struct ctx c;
  memset(&c, 0, sizeof c);
  c.bar.rounds = (int)rounds;
  c.bar.delay_us = delay_us;
  c.bar.arrive = calloc((size_t)(rounds * T) + 1, sizeof(double));
  c.bar.leave = calloc((size_t)(rounds * T) + 1, sizeof(double));
  if (!c.bar.arrive || !c.bar.leave)
    tiers_tool_fail("out of memory");
  if (tiers_team_parallel(team, team_body, &c) != TIERS_OK)
    tiers_tool_fail_last("team checks");

  /* Reduction checks against the exact answers. */
  long N = (long)P * T;
  char line[200];
  for (int i = 0; i < COUNT; i++) {
    double m = i + 1;
    if (c.red.dsum[i] != (double)(N * (N + 1) / 2) * m || c.red.dmax[i] != N * m ||
        c.red.dmin[i] != m) {
      snprintf(line, sizeof line, "double reduction element %d: sum %.17g max %.17g min %.17g",
               i, c.red.dsum[i], c.red.dmax[i], c.red.dmin[i]);
      fail(line);
    }
    int64_t base = (int64_t)1 << 40, mi = i + 1;
    if (c.red.isum[i] != base * N + N * (N + 1) / 2 * mi || c.red.imax[i] != base + N * mi ||
        c.red.imin[i] != base + mi) {
      snprintf(line, sizeof line, "int64 reduction element %d wrong", i);
      fail(line);
    }
  }
  if (c.red.mismatch)
    fail("a thread received a different reduction result than its master");
  /* Serial (outside a region) reduction. */
  double one = 1.0, all = 0.0;
  tiers_team_allreduce_double(team, &one, &all, 1, TIERS_OP_SUM);
  if (all != P)
    fail("serial reduction outside a parallel region is wrong");

  /* Barrier ordering: gather every rank's times on rank 0. */
  int per = (int)rounds * T;
  double *arr_all = r == 0 ? calloc((size_t)per * P + 1, sizeof(double)) : NULL;
  double *lea_all = r == 0 ? calloc((size_t)per * P + 1, sizeof(double)) : NULL;
  MPI_Gather(c.bar.arrive, per, MPI_DOUBLE, arr_all, per, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(c.bar.leave, per, MPI_DOUBLE, lea_all, per, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  long violations = 0;
  double min_slack = 1e30;
  if (r == 0) {
    for (int k = 0; k < rounds; k++) {
      double last_arrival = -1e30, first_leave = 1e30;
      for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++) {
          double a = arr_all[(size_t)p * per + k * T + t], l = lea_all[(size_t)p * per + k * T + t];
          last_arrival = a > last_arrival ? a : last_arrival;
          first_leave = l < first_leave ? l : first_leave;
        }
      if (first_leave < last_arrival)
        violations++;
      if (first_leave - last_arrival < min_slack)
        min_slack = first_leave - last_arrival;
    }
    if (violations) {
      snprintf(line, sizeof line, "%ld barrier rounds let a thread leave before the last "
               "arrived", violations);
      fail(line);
    }
  }

  /* Halo exchange: 2-D, 3-D, 3-D with begin/end. */
  static const long g2d[2] = {13, 10}, g3d[3] = {7, 6, 9};
  long checked[3], wrong[3];
  wrong[0] = halo_test(team, 2, g2d, 0, &checked[0]);
  wrong[1] = halo_test(team, 3, g3d, 0, &checked[1]);
  wrong[2] = halo_test(team, 3, g3d, 1, &checked[2]);
  long wrong_all[3];
  MPI_Reduce(wrong, wrong_all, 3, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  long checked_all[3];
  MPI_Reduce(checked, checked_all, 3, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  static const char *halo_names[3] = {"2d", "3d", "3d_overlap"};
  if (r == 0)
    for (int h = 0; h < 3; h++)
      if (wrong_all[h]) {
        snprintf(line, sizeof line, "halo %s: %ld of %ld points wrong", halo_names[h],
                 wrong_all[h], checked_all[h]);
        fail(line);
      }

  double times[TIERS_PHASE_COUNT];
  tiers_team_times(team, times);

  if (r == 0) {
    tiers_json_t j;
    tiers_json_init(&j, stdout);
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "schema", "tiers.hybrid-check/1");
    tiers_json_kv_int(&j, "ranks", P);
    tiers_json_kv_int(&j, "threads", T);
    tiers_json_kv_string(&j, "pin", tiers_pin_policy_name(pin));
    tiers_json_kv_int(&j, "mpi_thread_provided", provided);
    tiers_json_kv_double_array(&j, "sum_double", c.red.dsum, COUNT);
    tiers_json_kv_double_array(&j, "max_double", c.red.dmax, COUNT);
    tiers_json_kv_double_array(&j, "min_double", c.red.dmin, COUNT);
    tiers_json_kv_int_array(&j, "sum_int64", c.red.isum, COUNT);
    tiers_json_kv_int_array(&j, "max_int64", c.red.imax, COUNT);
    tiers_json_kv_int_array(&j, "min_int64", c.red.imin, COUNT);
    tiers_json_key(&j, "barrier");
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "rounds", rounds);
    tiers_json_kv_int(&j, "violations", violations);
    tiers_json_kv_double(&j, "min_slack_s", min_slack);
    tiers_json_object_end(&j);
    tiers_json_key(&j, "halo");
    tiers_json_object_begin(&j);
    for (int h = 0; h < 3; h++) {
      tiers_json_key(&j, halo_names[h]);
      tiers_json_object_begin(&j);
      tiers_json_kv_int(&j, "checked", checked_all[h]);
      tiers_json_kv_int(&j, "wrong", wrong_all[h]);
      tiers_json_object_end(&j);
    }
    tiers_json_object_end(&j);
    tiers_json_key(&j, "times_rank0");
    tiers_json_object_begin(&j);
    for (int p = 0; p < TIERS_PHASE_COUNT; p++)
      tiers_json_kv_double(&j, tiers_phase_name((tiers_phase_t)p), times[p]);
    tiers_json_object_end(&j);
    tiers_json_key(&j, "failures");
    tiers_json_array_begin(&j);
    for (int f = 0; f < n_failures && f < MAX_FAILURES; f++)
      tiers_json_string(&j, failures[f]);
    tiers_json_array_end(&j);
    tiers_json_kv_bool(&j, "ok", n_failures == 0);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  int status = n_failures > 0;
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  free(arr_all);
  free(lea_all);
  free(c.bar.arrive);
  free(c.bar.leave);
  tiers_team_destroy(&team);
  MPI_Finalize();
  if (status && r == 0)
    fprintf(stderr, "tiers-hybrid-check: error: %d check%s failed: %s\n", n_failures,
            n_failures == 1 ? "" : "s", failures[0]);
  return status;
}
