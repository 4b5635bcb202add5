/*
 * tiers-laplace2d: the explicit (Jacobi) solution of the 2-D Laplace
 * equation of seed 004 §5, 640 x 640 points by default, in the COMPaS
 * hybrid model: a block decomposition PX x PY over the processes, the
 * rows of each block split over the process's thread team, face halos
 * between neighbours, one hybrid reduction of the residual per iteration.
 *
 *   mpirun -n P tiers-laplace2d [--size N | --size NX,NY] [--iters K]
 *       [--threads T] [--pin none|compact|scatter] [--grid PX,PY]
 *       [--overlap] [--verify | --no-verify] [--quick] [--comm mpi|mbc]
 *
 * Problem: laplace(u) = 0 on the unit square with u = 1 on the edge y = 1
 * and u = 0 on the other three; u = 0 inside at the start.  A sweep is
 *   u'(i,j) = (u(i-1,j) + u(i+1,j) + u(i,j-1) + u(i,j+1)) / 4
 * (equal spacing; weighted by 1/hx^2, 1/hy^2 otherwise), and the residual
 * of the iterate read is (u' - u) * diag, reported as sqrt(hx hy sum r^2).
 * With --comm mbc the halos and the reductions (app_allreduce_double) go
 * through tiers/mbc.h: the field is the same bit for bit; the residuals
 * are too at 1 and 2 processes and within rounding (1e-12 relative) at
 * more, where MPI picks its own summation order.
 *
 * Verification: the residual of the final iterate is below that of the
 * first; the discrete maximum principle holds (0 <= u <= 1 everywhere,
 * checked exactly); and with --verify (default up to 2^21 points) rank 0
 * repeats the run serially with the same sweep code and the fields must
 * be equal bit for bit.
 *
 * A sweep streams u (read) and u' (written), 16 bytes per update as STREAM
 * counts; the grids are 2 MiB aligned and advised for transparent huge
 * pages (app_grid_alloc).  When the grids exceed the last-level cache
 * and a row fits in a quarter of L1 (app_stencil_nt) each row is computed
 * into a row buffer and copied to u' with non-temporal stores, saving the read-for-ownership of every written
 * line (16 bytes per update instead of 24); params.stores says which.
 *
 * Output: the tiers.app/1 document of hybrid_app.h; "result" holds
 * iterations, residual_initial, residual, u_max and u_center; the figure
 * of merit is lattice updates per second.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "hybrid_app.h"

#define VERIFY_AUTO_LIMIT (1L << 21)

typedef struct grid2 {
  long nx, ny;   /* owned points */
  long sx;       /* nx + 2 */
  double cx, cy; /* 1/hx^2, 1/hy^2 */
  double diag;   /* 2 (cx + cy) */
} grid2_t;

static inline size_t at2(const grid2_t *g, long i, long j)
{
  return (size_t)((i + 1) + g->sx * (j + 1));
}

/* The sweep goes through a row in groups of LANES points, one lane per
 * point of a group (vectorised at the build's width: one zmm with AVX-512,
 * two ymm with AVX2, two-double xmm with SSE2): every point gets the same
 * IEEE operations in the same order as in scalar code (no contraction into
 * FMAs, -ffp-contract=off), and the residual sum of a row keeps LANES
 * partial sums whatever the instruction set: lane l sums the points
 * i0 + l, i0 + l + LANES, ...; the points after the last full group go into
 * lane 0; then the row's lanes are added to the running sum in lane order.
 * (This is the order an `omp simd` reduction of width 8 gave, so the
 * residuals are the same bit for bit as those of the earlier AVX-512 build;
 * they no longer depend on the vector width.) */
#define LANES 8
/* Software prefetch distance in doubles (2 KiB; a prefetch never faults,
 * so it may run past a row). */
#define PREFETCH_AHEAD 256

/* Jacobi update of [i0,i1) x [j0,j1); returns the sum of squared
 * residuals, row after row.  With a row buffer (non-temporal stores) each
 * row goes there first, then to u' (app_stream_row).  Built for AVX-512,
 * AVX2 and the baseline, picked at load time. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static double
sweep_box(const grid2_t *g, const double *restrict u, double *restrict un,
          double *restrict row, long i0, long i1, long j0, long j1)
{
  const double cx = g->cx, cy = g->cy, diag = g->diag, inv = 1.0 / g->diag;
  const size_t sx = (size_t)g->sx;
  const long n = i1 - i0;
  double r2 = 0.0;
  for (long j = j0; j < j1; j++) {
    const size_t p0 = at2(g, i0, j);
    const double *restrict c = u + p0;
    double *restrict dst = row ? row : un + p0;
    double a[LANES] = {0};
    long i = 0;
    for (; i + LANES <= n; i += LANES) {
      const double *q = c + i;
      /* the row from beyond L1 (j+1) and the written row, a few lines
       * ahead: the L2 streamer restarts at every 4 KiB page */
      __builtin_prefetch(q + sx + PREFETCH_AHEAD, 0, 3);
      __builtin_prefetch(dst + i + PREFETCH_AHEAD, 1, 3);
#pragma omp simd
      for (int l = 0; l < LANES; l++) {
        const double s = cx * (q[l - 1] + q[l + 1]) + cy * (q[l - (long)sx] + q[l + sx]);
        const double v = s * inv;
        const double r = (v - q[l]) * diag;
        a[l] += r * r;
        dst[i + l] = v;
      }
    }
    double acc0 = a[0];
    for (; i < n; i++) {
      const double *q = c + i;
      const double s = cx * (q[-1] + q[1]) + cy * (q[-(long)sx] + q[sx]);
      const double v = s * inv;
      const double r = (v - q[0]) * diag;
      acc0 += r * r;
      dst[i] = v;
    }
    r2 += acc0;
    for (int l = 1; l < LANES; l++)
      r2 += a[l];
    if (row)
      app_stream_row(un + p0, row, (size_t)n);
  }
  if (row)
    app_stream_fence();
  return r2;
}

/* Rows [j0,j1): the points that touch a ghost layer. */
static double sweep_shell(const grid2_t *g, const double *u, double *un, double *row, long j0,
                          long j1)
{
  double r2 = 0.0;
  for (long j = j0; j < j1; j++) {
    if (j == 0 || j == g->ny - 1) {
      r2 += sweep_box(g, u, un, row, 0, g->nx, j, j + 1);
      continue;
    }
    r2 += sweep_box(g, u, un, row, 0, 1, j, j + 1);
    if (g->nx > 1)
      r2 += sweep_box(g, u, un, row, g->nx - 1, g->nx, j, j + 1);
  }
  return r2;
}

static grid2_t make_grid(long nx, long ny, const double h[2])
{
  grid2_t g = {nx, ny, nx + 2, 1.0 / (h[0] * h[0]), 1.0 / (h[1] * h[1]), 0};
  g.diag = 2.0 * (g.cx + g.cy);
  return g;
}

/* Sets the boundary values in the ghosts of a block at global offset
 * (lo0, lo1) of a global grid of size[0] x size[1]: 1 on the row above
 * the top edge (y = 1), 0 elsewhere, in both arrays. */
static void set_boundary(const grid2_t *g, const long lo[2], const long size[2], double *u,
                         double *un)
{
  if (lo[1] + g->ny == size[1])
    for (long i = -1; i <= g->nx; i++)
      u[at2(g, i, g->ny)] = un[at2(g, i, g->ny)] = 1.0;
}

struct run {
  app_t *app;         /* its reductions follow --comm */
  grid2_t g;
  double *u, *un;
  tiers_halo_t halo;
  long iters;
  int overlap;
  int nt;             /* the sweeps write u' with non-temporal stores */
  double res2_first;
};

static int body(tiers_team_t team, int t, void *arg)
{
  struct run *R = arg;
  const grid2_t *g = &R->g;
  long j0, j1;
  TIERS_CALL(tiers_team_split(team, g->ny, t, &j0, &j1));
  double *u = R->u, *un = R->un;
  /* non-temporal stores through a row buffer (regular ones if it cannot be had) */
  double *row = R->nt ? malloc((size_t)g->nx * sizeof *row) : NULL;
  for (long it = 0; it < R->iters; it++) {
    double r2;
    if (R->overlap) {
      TIERS_CALL(tiers_halo_begin(R->halo, u));
      long ja = j0 > 1 ? j0 : 1, jb = j1 < g->ny - 1 ? j1 : g->ny - 1;
      r2 = ja < jb ? sweep_box(g, u, un, row, 1, g->nx - 1, ja, jb) : 0.0;
      TIERS_CALL(tiers_halo_end(R->halo, u));
      r2 += sweep_shell(g, u, un, row, j0, j1);
    } else {
      TIERS_CALL(tiers_halo_exchange(R->halo, u));
      r2 = sweep_box(g, u, un, row, 0, g->nx, j0, j1);
    }
    double all;
    TIERS_CALL(app_allreduce_double(R->app, &r2, &all, 1, TIERS_OP_SUM));
    if (t == 0 && it == 0)
      R->res2_first = all;
    double *tmp = u;
    u = un;
    un = tmp;
  }
  if (t == 0 && (R->iters % 2) == 1) {
    double *tmp = R->u;
    R->u = R->un;
    R->un = tmp;
  }
  free(row);
  return TIERS_OK;
}

/* Zeroes the rows of thread t, ghosts included (first touch). */
static int init_body(tiers_team_t team, int t, void *arg)
{
  struct run *R = arg;
  long j0, j1;
  TIERS_CALL(tiers_team_split(team, R->g.ny + 2, t, &j0, &j1));
  size_t a = (size_t)(j0 * R->g.sx), b = (size_t)(j1 * R->g.sx);
  memset(R->u + a, 0, (b - a) * sizeof(double));
  memset(R->un + a, 0, (b - a) * sizeof(double));
  return TIERS_OK;
}

int main(int argc, char **argv)
{
  app_t app;
  app_init(&app, "tiers-laplace2d", &argc, &argv);
  long size[2] = {0, 0}, iters = -1;
  for (int i = 1; i < argc; i++) {
    if (app_common_option(&app, argc, argv, &i))
      continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--size") == 0) {
      long s[2] = {0, 0};
      int n = v ? app_parse_triple(v, s, 2) : -1;
      app_check(&app, n < 1 || s[0] < 1 || (n == 2 && s[1] < 1),
                "--size needs N or NX,NY, each 1..1048576 (got %s)", v ? v : "nothing");
      size[0] = s[0];
      size[1] = n == 1 ? s[0] : s[1];
      i++;
    } else if (strcmp(a, "--iters") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &iters) != 0 || iters < 1,
                "--iters needs a positive number (got %s)", v ? v : "nothing");
      i++;
    } else {
      app_check(&app, 1, "unknown option %s (see tiers-laplace2d --help)", a);
    }
  }
  app_check(&app, app.opts.grid[2] > 1, "laplace2d is 2-D: --grid takes PX,PY");
  if (size[0] == 0)
    size[0] = size[1] = app.opts.quick ? 64 : 640;
  if (iters < 0)
    iters = app.opts.quick ? 50 : 1000;

  app_team(&app, MPI_COMM_WORLD);
  tiers_team_t team = app.team;
  int dims[3] = {app.opts.grid[0], app.opts.grid[1], 1};
  tiers_decomp_t d;
  int rc = tiers_decomp_create(team, 2, size, dims, 1, &d);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());

  double h[2] = {1.0 / (double)(size[0] + 1), 1.0 / (double)(size[1] + 1)};
  struct run R;
  memset(&R, 0, sizeof R);
  R.g = make_grid(d.local[0], d.local[1], h);
  R.app = &app;
  R.iters = iters;
  R.overlap = app.opts.overlap;
  size_t n = (size_t)(R.g.sx * (R.g.ny + 2));
  R.nt = app_stencil_nt(2 * n * sizeof(double), (size_t)R.g.nx * sizeof(double));
  R.u = app_grid_alloc(n);
  R.un = app_grid_alloc(n);
  app_check(&app, !R.u || !R.un, "cannot allocate %zu points", n);
  rc = tiers_halo_create(&R.halo, team, &d);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());
  app_halo_comm(&app, R.halo); /* --comm mbc: halos through tiers/mbc.h */
  rc = tiers_team_parallel(team, init_body, &R);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());
  long lo[2] = {d.lo[0], d.lo[1]};
  set_boundary(&R.g, lo, size, R.u, R.un);

  tiers_team_barrier(team);
  tiers_team_timers_reset(team);
  if (app.mbc)
    tiers_mbc_stats_reset(app.mbc); /* Table 3 statistics of the timed part */
  double t0 = tiers_now();
  rc = tiers_team_parallel(team, body, &R);
  double elapsed = tiers_now() - t0;
  double times[TIERS_PHASE_COUNT];
  tiers_team_times(team, times);
  app_comm_stats(&app); /* the layer's Table 3 figures of the timed part */
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());

  tiers_halo_exchange(R.halo, R.u);
  double r2 = sweep_box(&R.g, R.u, R.un, NULL, 0, R.g.nx, 0, R.g.ny), r2_all;
  app_allreduce_double(&app, &r2, &r2_all, 1, TIERS_OP_SUM);
  double res0 = sqrt(h[0] * h[1] * R.res2_first), res = sqrt(h[0] * h[1] * r2_all);

  /* Maximum principle, and the value at the centre point (exact max). */
  double mm[2] = {-INFINITY, -INFINITY}; /* max u, max -u */
  double center = -INFINITY;
  long ci = size[0] / 2, cj = size[1] / 2;
  for (long j = 0; j < R.g.ny; j++)
    for (long i = 0; i < R.g.nx; i++) {
      double v = R.u[at2(&R.g, i, j)];
      mm[0] = v > mm[0] ? v : mm[0];
      mm[1] = -v > mm[1] ? -v : mm[1];
      if (d.lo[0] + i == ci && d.lo[1] + j == cj)
        center = v;
    }
  double mm_all[3], mine[3] = {mm[0], mm[1], center};
  app_allreduce_double(&app, mine, mm_all, 3, TIERS_OP_MAX);
  int bounded = mm_all[0] <= 1.0 && -mm_all[1] >= 0.0;

  long total = size[0] * size[1];
  int verify = app.opts.verify < 0 ? total <= VERIFY_AUTO_LIMIT : app.opts.verify;
  int trank = tiers_team_rank(team), tsize = tiers_team_size(team);
  double max_diff = 0.0;
  if (verify) {
    MPI_Comm tc = tiers_team_comm(team);
    size_t mine_n = (size_t)(R.g.nx * R.g.ny);
    double *pack = malloc((mine_n + 1) * sizeof *pack);
    app_check(&app, !pack, "out of memory packing the field");
    size_t m = 0;
    for (long j = 0; j < R.g.ny; j++)
      for (long i = 0; i < R.g.nx; i++)
        pack[m++] = R.u[at2(&R.g, i, j)];
    if (trank != 0) {
      long box[4] = {d.lo[0], d.lo[1], d.local[0], d.local[1]};
      MPI_Send(box, 4, MPI_LONG, 0, 1, tc);
      MPI_Send(pack, (int)mine_n, MPI_DOUBLE, 0, 2, tc);
    } else {
      grid2_t G = make_grid(size[0], size[1], h);
      size_t gn = (size_t)(G.sx * (G.ny + 2));
      double *gu = calloc(gn, sizeof *gu), *gun = calloc(gn, sizeof *gun);
      double *got = calloc(gn, sizeof *got);
      if (!gu || !gun || !got)
        tiers_tool_fail("out of memory for the serial check of %ld points", total);
      long zero[2] = {0, 0};
      set_boundary(&G, zero, size, gu, gun);
      for (int src = 0; src < tsize; src++) {
        long box[4] = {d.lo[0], d.lo[1], d.local[0], d.local[1]};
        double *buf = pack;
        if (src != 0) {
          MPI_Recv(box, 4, MPI_LONG, src, 1, tc, MPI_STATUS_IGNORE);
          buf = malloc((size_t)(box[2] * box[3] + 1) * sizeof *buf);
          if (!buf)
            tiers_tool_fail("out of memory");
          MPI_Recv(buf, (int)(box[2] * box[3]), MPI_DOUBLE, src, 2, tc, MPI_STATUS_IGNORE);
        }
        size_t q = 0;
        for (long j = 0; j < box[3]; j++)
          for (long i = 0; i < box[2]; i++)
            got[at2(&G, box[0] + i, box[1] + j)] = buf[q++];
        if (buf != pack)
          free(buf);
      }
      for (long it = 0; it < iters; it++) {
        sweep_box(&G, gu, gun, NULL, 0, G.nx, 0, G.ny);
        double *tmp = gu;
        gu = gun;
        gun = tmp;
      }
      for (long j = 0; j < G.ny; j++)
        for (long i = 0; i < G.nx; i++) {
          double diff = fabs(gu[at2(&G, i, j)] - got[at2(&G, i, j)]);
          max_diff = diff > max_diff ? diff : max_diff;
        }
      free(gu);
      free(gun);
      free(got);
    }
    free(pack);
    MPI_Bcast(&max_diff, 1, MPI_DOUBLE, 0, tc);
  }
  int passed = res < res0 && bounded && (!verify || max_diff == 0.0);
  char why[256] = "";
  if (!(res < res0))
    snprintf(why, sizeof why, "the residual did not fall: %.6g at the start, %.6g after %ld "
             "iterations", res0, res, iters);
  else if (!bounded)
    snprintf(why, sizeof why, "the maximum principle fails: u ranges over [%.17g, %.17g], "
             "outside [0, 1]", -mm_all[1], mm_all[0]);
  else if (verify && max_diff != 0.0)
    snprintf(why, sizeof why, "the field differs from the serial run by up to %.3g (allowed: "
             "0, bit for bit)", max_diff);

  tiers_json_t j;
  app_json_head(&app, &j, elapsed, times);
  if (app.rank == 0) {
    tiers_json_key(&j, "params");
    tiers_json_object_begin(&j);
    tiers_json_kv_int_array(&j, "size", (int64_t[]){size[0], size[1]}, 2);
    tiers_json_kv_int_array(&j, "grid", (int64_t[]){d.dims[0], d.dims[1]}, 2);
    tiers_json_kv_int(&j, "iters", iters);
    tiers_json_kv_bool(&j, "quick", app.opts.quick);
    tiers_json_kv_string(&j, "stores", R.nt ? "nt" : "regular");
    tiers_json_object_end(&j);
    tiers_json_key(&j, "result");
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "iterations", iters);
    tiers_json_kv_double(&j, "residual_initial", res0);
    tiers_json_kv_double(&j, "residual", res);
    tiers_json_kv_double(&j, "u_max", mm_all[0]);
    tiers_json_kv_double(&j, "u_center", mm_all[2]);
    tiers_json_kv_int(&j, "points", total);
    tiers_json_object_end(&j);
    app_json_merit(&j, "lattice updates/s", (double)total * iters, elapsed, "LUP/s");
    tiers_json_key(&j, "verification");
    tiers_json_object_begin(&j);
    tiers_json_kv_bool(&j, "passed", passed);
    tiers_json_kv_bool(&j, "residual_fell", res < res0);
    tiers_json_kv_bool(&j, "maximum_principle", bounded);
    tiers_json_kv_bool(&j, "serial_compared", verify);
    if (verify)
      tiers_json_kv_double(&j, "max_diff_serial", max_diff);
    tiers_json_object_end(&j);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  tiers_halo_destroy(&R.halo);
  app_grid_free(R.u, n);
  app_grid_free(R.un, n);
  app_finish(&app, passed, why);
}
