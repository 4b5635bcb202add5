/*
 * tiers-jacobi3d: the 3-D Poisson heat problem of seed 002's benchmark,
 * solved by Jacobi iteration on a block decomposition NX x NY x NZ with
 * face halos, in the COMPaS hybrid model (one thread team per process).
 *
 *   mpirun -n P tiers-jacobi3d [--size N | --size NX,NY,NZ] [--iters K]
 *       [--threads T] [--pin none|compact|scatter] [--grid PX,PY,PZ]
 *       [--overlap] [--verify | --no-verify] [--quick] [--comm mpi|mbc]
 *       [--permutation FILE]
 *
 * Problem: -laplace(u) = f on the unit cube, u = 0 on its boundary,
 * f = 3 pi^2 sin(pi x) sin(pi y) sin(pi z), whose solution is
 * u = sin(pi x) sin(pi y) sin(pi z); NX x NY x NZ interior points with
 * spacing 1/(N+1) per axis, u = 0 at the start.  One Jacobi sweep is
 *   u'(p) = (sum of the 6 neighbours of p + h^2 f(p)) / 6      (equal h)
 * and, with unequal spacings, the usual weighted form.  Every sweep also
 * yields the residual of the iterate it read, r = f - A u =
 * (u' - u) * diag(A), whose norm sqrt(h^3 sum r^2) every process learns
 * through one hybrid reduction per iteration (app_allreduce_double: over
 * MPI or, with --comm mbc, over tiers/mbc.h like the halos).  The field
 * never depends on the reductions, so it is the same bit for bit in both
 * modes; the residuals are too at 1 and 2 processes, and within rounding
 * (1e-12 relative) at more, where MPI picks its own summation order.
 *
 * Verification: (1) the residual of the final iterate is below that of
 * the first; (2) with --verify (default up to 2^21 points) rank 0 gathers
 * the field and repeats the run serially with the same sweep code: the
 * results must be equal bit for bit, since every point's update is the
 * same arithmetic whatever the decomposition.  The maximum error against
 * the exact solution is reported too (an exact maximum: identical across
 * decompositions and thread counts).
 *
 * --permutation FILE reads the file `tiers map --stencil 3d:PX,PY,PZ:...
 * --numbering cart --permutation FILE` writes: line s holds the
 * MPI_COMM_WORLD rank that computes subdomain s, subdomains numbered as
 * MPI_Cart_create numbers them (the last axis fastest).
 *
 * Memory traffic: f is separable, f = (F sin(pi x)) sin(pi y) sin(pi z), so
 * the sweep multiplies three 1-D tables (fx, fy, fz) instead of streaming a
 * third grid: the product is evaluated in the order C evaluates
 * 3 pi^2 sin(pi x) sin(pi y) sin(pi z), left to right, so f is the same
 * bit for bit as that formula, and a sweep streams only u (read) and u'
 * (written): 16 bytes per update as STREAM counts.  The grids are 2 MiB
 * aligned and advised for transparent huge pages (fewer TLB misses on the
 * seven streams of the update).  When the grids exceed the last-level cache
 * and a row fits in a quarter of L1 (app_stencil_nt) each row is computed
 * into a row buffer and copied to u' with non-temporal stores, which saves the read-for-ownership of every
 * written line: 16 bytes per update move instead of 24.  params.stores
 * says which.  When the four planes a sweep works on (three of u, one of
 * u') exceed the L2 cache, the sweep goes through tiles of rows (j) that
 * fill half of it, each through all its planes (tile_rows; params.tile_rows,
 * 0 when untiled), so that every plane of u is read from memory once per
 * sweep; the residual is still summed in row order (sweep_box).
 *
 * Output: the tiers.app/1 document of hybrid_app.h; "result" holds
 * iterations, residual_initial, residual, error_max and the grid; the
 * figure of merit is lattice updates per second.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "hybrid_app.h"

#define VERIFY_AUTO_LIMIT (1L << 21)

typedef struct grid3 {
  long nx, ny, nz;   /* owned points */
  long sx, sxy;      /* strides of the ghosted array: (nx+2), (nx+2)(ny+2) */
  double cx, cy, cz; /* 1/hx^2, ... */
  double diag;       /* 2 (cx + cy + cz) */
} grid3_t;

static inline size_t at3(const grid3_t *g, long i, long j, long k)
{
  return (size_t)((i + 1) + g->sx * (j + 1) + g->sxy * (k + 1));
}

/* The source term as three 1-D tables over the ghosted index range
 * (entry i + 1 for block index i): f(i,j,k) = (x[i+1] * y[j+1]) * z[k+1],
 * with x holding 3 pi^2 sin(pi x): the left-to-right order of the formula. */
typedef struct source3 {
  double *x, *y, *z;
} source3_t;

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
/* Software prefetch distance in doubles (2 KiB): measured on a 2-CPU Xeon
 * VM, 1.3x faster sweeps at 192^3 and 1.2x at 410^3 than with the hardware
 * prefetchers alone (a prefetch never faults, so it may run past a row). */
#define PREFETCH_AHEAD 256

/* Updates the row of n points that starts at u[p0] into dst[0..n) and
 * leaves its LANES partial residual sums in acc. */
static inline __attribute__((always_inline)) void
sweep_row(const grid3_t *g, const double *restrict u, double *restrict dst,
          const double *restrict fx, double fy, double fz, size_t p0, long n,
          double acc[LANES])
{
  const double cx = g->cx, cy = g->cy, cz = g->cz, diag = g->diag, inv = 1.0 / g->diag;
  const size_t sx = (size_t)g->sx, sxy = (size_t)g->sxy;
  const double *restrict c = u + p0;
  double a[LANES] = {0};
  long i = 0;
  for (; i + LANES <= n; i += LANES) {
    const double *q = c + i;
    /* the one stream from beyond L2 (plane k+1) and the written row, a
     * few lines ahead: the L2 streamer restarts at every 4 KiB page */
    __builtin_prefetch(q + sxy + PREFETCH_AHEAD, 0, 3);
    __builtin_prefetch(dst + i + PREFETCH_AHEAD, 1, 3);
#pragma omp simd
    for (int l = 0; l < LANES; l++) {
      const double f = (fx[i + l] * fy) * fz;
      const double s = cx * (q[l - 1] + q[l + 1]) + cy * (q[l - (long)sx] + q[l + sx]) +
                       cz * (q[l - (long)sxy] + q[l + sxy]) + f;
      const double v = s * inv;
      const double r = (v - q[l]) * diag;
      a[l] += r * r;
      dst[i + l] = v;
    }
  }
  for (int l = 0; l < LANES; l++)
    acc[l] = a[l];
  for (; i < n; i++) {
    const double *q = c + i;
    const double f = (fx[i] * fy) * fz;
    const double s = cx * (q[-1] + q[1]) + cy * (q[-(long)sx] + q[sx]) +
                     cz * (q[-(long)sxy] + q[sxy]) + f;
    const double v = s * inv;
    const double r = (v - q[0]) * diag;
    acc[0] += r * r;
    dst[i] = v;
  }
}

/* Jacobi update of the box [i0,i1) x [j0,j1) x [k0,k1) (block
 * coordinates); returns the sum of squared residuals of the points read,
 * row after row (k outer, j inner).  With tile > 0 it sweeps tiles of
 * `tile` rows (j) through all the planes, so that the three planes the
 * update reads stay in L2 (tile_rows); the rows' partial sums wait
 * in part[] (LANES per row of the box) and are added in the untiled order,
 * so the sum is the same bit for bit.  With a row buffer (non-temporal
 * stores) each row goes there first, then to u' (app_stream_row).  Built
 * for AVX-512, AVX2 and the baseline, picked at load time. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static double
sweep_box(const grid3_t *g, const double *restrict u, double *restrict un,
          const source3_t *src, double *restrict row, double *restrict part, long tile,
          long i0, long i1, long j0, long j1, long k0, long k1)
{
  double r2 = 0.0, acc[LANES];
  const double *restrict fx = src->x + 1 + i0;
  const long n = i1 - i0, rows = j1 - j0;
  if (tile <= 0 || tile >= rows || !part)
    tile = rows;
  for (long jt = j0; jt < j1; jt += tile) {
    const long je = jt + tile < j1 ? jt + tile : j1;
    for (long k = k0; k < k1; k++)
      for (long j = jt; j < je; j++) {
        const size_t p0 = at3(g, i0, j, k);
        double *restrict dst = row ? row : un + p0;
        sweep_row(g, u, dst, fx, src->y[j + 1], src->z[k + 1], p0, n, acc);
        if (row)
          app_stream_row(un + p0, row, (size_t)n);
        if (tile == rows) {
          for (int l = 0; l < LANES; l++)
            r2 += acc[l];
        } else {
          double *to = part + ((size_t)(k - k0) * (size_t)rows + (size_t)(j - j0)) * LANES;
          for (int l = 0; l < LANES; l++)
            to[l] = acc[l];
        }
      }
  }
  if (tile != rows) {
    const size_t m = (size_t)(k1 - k0) * (size_t)rows * LANES;
    for (size_t q = 0; q < m; q++)
      r2 += part[q];
  }
  if (row)
    app_stream_fence();
  return r2;
}

/* The points of planes [k0,k1) that touch a ghost layer (the shell). */
static double sweep_shell(const grid3_t *g, const double *u, double *un, const source3_t *f,
                          double *row, long k0, long k1)
{
  double r2 = 0.0;
  for (long k = k0; k < k1; k++) {
    if (k == 0 || k == g->nz - 1) {
      r2 += sweep_box(g, u, un, f, row, NULL, 0, 0, g->nx, 0, g->ny, k, k + 1);
      continue;
    }
    r2 += sweep_box(g, u, un, f, row, NULL, 0, 0, g->nx, 0, 1, k, k + 1);
    if (g->ny > 1)
      r2 += sweep_box(g, u, un, f, row, NULL, 0, 0, g->nx, g->ny - 1, g->ny, k, k + 1);
    if (g->ny > 2) {
      r2 += sweep_box(g, u, un, f, row, NULL, 0, 0, 1, 1, g->ny - 1, k, k + 1);
      if (g->nx > 1)
        r2 += sweep_box(g, u, un, f, row, NULL, 0, g->nx - 1, g->nx, 1, g->ny - 1, k, k + 1);
    }
  }
  return r2;
}

/* f's first factor, 3 pi^2 sin(pi x); f = (it * sin(pi y)) * sin(pi z). */
static double source_x(double x) { return 3.0 * M_PI * M_PI * sin(M_PI * x); }

/* Fills the tables of a block of n[] points at global offset lo[] with
 * spacings h[]: entry i + 1 for block index i, zero at the two ghosts.
 * Returns 0, or -1 when out of memory. */
static int source_tables(source3_t *s, const long n[3], const long lo[3], const double h[3])
{
  double *t[3];
  for (int a = 0; a < 3; a++) {
    t[a] = calloc((size_t)n[a] + 2, sizeof(double));
    if (!t[a]) {
      for (int b = 0; b < a; b++)
        free(t[b]);
      return -1;
    }
    for (long i = 0; i < n[a]; i++) {
      double x = (double)(lo[a] + i + 1) * h[a];
      t[a][i + 1] = a == 0 ? source_x(x) : sin(M_PI * x);
    }
  }
  s->x = t[0];
  s->y = t[1];
  s->z = t[2];
  return 0;
}

static void source_free(source3_t *s)
{
  free(s->x);
  free(s->y);
  free(s->z);
  s->x = s->y = s->z = NULL;
}


static double exact(double x, double y, double z)
{
  return sin(M_PI * x) * sin(M_PI * y) * sin(M_PI * z);
}

struct run {
  app_t *app;         /* its reductions follow --comm */
  grid3_t g;
  long glo[3];        /* global index of the first owned point */
  double h[3];
  double *u, *un;     /* ghosted arrays */
  source3_t src;      /* f as three 1-D tables */
  tiers_halo_t halo;
  long iters;
  int overlap;
  int nt;             /* the sweeps write u' with non-temporal stores */
  long tile;          /* rows per tile of the sweeps, 0: untiled (tile_rows) */
  double res2_first, res2_last;
  double hvol;        /* hx hy hz */
};

static int body(tiers_team_t team, int t, void *arg)
{
  struct run *R = arg;
  const grid3_t *g = &R->g;
  long k0, k1;
  TIERS_CALL(tiers_team_split(team, g->nz, t, &k0, &k1));
  double *u = R->u, *un = R->un;
  /* non-temporal stores through a row buffer (regular ones if it cannot be had) */
  double *row = R->nt ? malloc((size_t)g->nx * sizeof *row) : NULL;
  /* the rows' partial residual sums of a tiled sweep (untiled if it cannot be had) */
  double *part = R->tile > 0 && k1 > k0
                     ? malloc((size_t)(k1 - k0) * (size_t)g->ny * LANES * sizeof *part)
                     : NULL;
  for (long it = 0; it < R->iters; it++) {
    double r2;
    if (R->overlap) {
      TIERS_CALL(tiers_halo_begin(R->halo, u));
      long ka = k0 > 1 ? k0 : 1, kb = k1 < g->nz - 1 ? k1 : g->nz - 1;
      r2 = ka < kb ? sweep_box(g, u, un, &R->src, row, part, R->tile, 1, g->nx - 1, 1, g->ny - 1, ka, kb) : 0.0;
      TIERS_CALL(tiers_halo_end(R->halo, u));
      r2 += sweep_shell(g, u, un, &R->src, row, k0, k1);
    } else {
      TIERS_CALL(tiers_halo_exchange(R->halo, u));
      r2 = sweep_box(g, u, un, &R->src, row, part, R->tile, 0, g->nx, 0, g->ny, k0, k1);
    }
    double all;
    TIERS_CALL(app_allreduce_double(R->app, &r2, &all, 1, TIERS_OP_SUM));
    if (t == 0) {
      if (it == 0)
        R->res2_first = all;
      R->res2_last = all;
    }
    double *tmp = u;
    u = un;
    un = tmp;
  }
  if (t == 0 && (R->iters % 2) == 1) { /* the result is in un's buffer: swap the owners */
    double *tmp = R->u;
    R->u = R->un;
    R->un = tmp;
  }
  free(row);
  free(part);
  return TIERS_OK;
}

/* Zeroes u and un (ghosts included) in the planes of thread t (first
 * touch); thread 0 also takes the ghost planes. */
static int init_body(tiers_team_t team, int t, void *arg)
{
  struct run *R = arg;
  const grid3_t *g = &R->g;
  long k0, k1;
  TIERS_CALL(tiers_team_split(team, g->nz + 2, t, &k0, &k1));
  size_t a = (size_t)(k0 * g->sxy), b = (size_t)(k1 * g->sxy);
  memset(R->u + a, 0, (b - a) * sizeof(double));
  memset(R->un + a, 0, (b - a) * sizeof(double));
  return TIERS_OK;
}

/* Rows (j) per tile of a sweep: 0 (untiled) when the four planes a sweep
 * works on (three of u read, one of u' written) fit in the L2 cache, else
 * as many rows as fill half of it in those four planes (at least 8), so
 * that each plane of u comes from memory once per sweep instead of being
 * read again from a farther cache.  TIERS_STENCIL_TILE=ROWS (0: untiled)
 * overrides it. */
static long tile_rows(const grid3_t *g)
{
  const char *force = getenv("TIERS_STENCIL_TILE");
  long rows = -1;
  if (force && *force && tiers_parse_long(force, &rows) == 0 && rows >= 0)
    return rows;
  long l2 = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  const double row_bytes = (double)g->sx * sizeof(double);
  if (l2 <= 0 || 4.0 * row_bytes * (double)(g->ny + 2) <= (double)l2)
    return 0;
  rows = (long)((double)l2 / 2 / (4.0 * row_bytes));
  return rows < 8 ? 8 : rows;
}

static grid3_t make_grid(long nx, long ny, long nz, const double h[3])
{
  grid3_t g = {nx, ny, nz, nx + 2, (nx + 2) * (ny + 2), 0, 0, 0, 0};
  g.cx = 1.0 / (h[0] * h[0]);
  g.cy = 1.0 / (h[1] * h[1]);
  g.cz = 1.0 / (h[2] * h[2]);
  g.diag = 2.0 * (g.cx + g.cy + g.cz);
  return g;
}

/* Reads the permutation (subdomain -> world rank); returns the subdomain,
 * i.e. the Cartesian rank, this world rank computes. */
static int read_permutation(app_t *app, const char *path)
{
  int *perm = calloc((size_t)app->size, sizeof *perm);
  int *seen = calloc((size_t)app->size, sizeof *seen);
  FILE *in = fopen(path, "r");
  int n = 0, bad = !in || !perm || !seen;
  char why[200] = "";
  if (bad)
    snprintf(why, sizeof why, "cannot read the permutation file %s", path);
  while (!bad) {
    long v;
    int got = fscanf(in, "%ld", &v);
    if (got == EOF)
      break;
    if (got != 1 || v < 0 || v >= app->size || n >= app->size || seen[v]) {
      bad = 1;
      snprintf(why, sizeof why, "%s is not a permutation of the %d ranks (entry %d)", path,
               app->size, n + 1);
      break;
    }
    seen[v] = 1;
    perm[n++] = (int)v;
  }
  if (!bad && n != app->size) {
    bad = 1;
    snprintf(why, sizeof why, "%s renumbers %d ranks; the run has %d", path, n, app->size);
  }
  if (in)
    fclose(in);
  app_check(app, bad, "%s", why);
  int mine = -1;
  for (int sub = 0; sub < app->size; sub++)
    if (perm[sub] == app->rank)
      mine = sub;
  free(perm);
  free(seen);
  return mine;
}

int main(int argc, char **argv)
{
  app_t app;
  app_init(&app, "tiers-jacobi3d", &argc, &argv);
  long size[3] = {0, 0, 0}, iters = -1;
  const char *perm_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (app_common_option(&app, argc, argv, &i))
      continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--size") == 0) {
      long s[3] = {0, 0, 0};
      int n = v ? app_parse_triple(v, s, 3) : -1;
      app_check(&app, !(n == 1 || n == 3) || s[0] < 1 || (n == 3 && (s[1] < 1 || s[2] < 1)),
                "--size needs N or NX,NY,NZ, each 1..1048576 (got %s)", v ? v : "nothing");
      for (int k = 0; k < 3; k++)
        size[k] = n == 1 ? s[0] : s[k];
      i++;
    } else if (strcmp(a, "--iters") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &iters) != 0 || iters < 1,
                "--iters needs a positive number (got %s)", v ? v : "nothing");
      i++;
    } else if (strcmp(a, "--permutation") == 0 && v) {
      perm_path = v;
      i++;
    } else {
      app_check(&app, 1, "unknown option %s (see tiers-jacobi3d --help)", a);
    }
  }
  if (size[0] == 0)
    for (int k = 0; k < 3; k++)
      size[k] = app.opts.quick ? 24 : 96;
  if (iters < 0)
    iters = app.opts.quick ? 20 : 100;

  MPI_Comm comm = MPI_COMM_WORLD;
  if (perm_path) {
    int key = read_permutation(&app, perm_path);
    MPI_Comm_split(MPI_COMM_WORLD, 0, key, &comm);
  }
  app_team(&app, comm);
  tiers_team_t team = app.team;
  int dims[3] = {app.opts.grid[0], app.opts.grid[1], app.opts.grid[2]};
  tiers_decomp_t d;
  int rc = tiers_decomp_create(team, 3, size, dims, 1, &d);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());

  struct run R;
  memset(&R, 0, sizeof R);
  for (int k = 0; k < 3; k++) {
    R.h[k] = 1.0 / (double)(size[k] + 1);
    R.glo[k] = d.lo[k];
  }
  R.hvol = R.h[0] * R.h[1] * R.h[2];
  R.g = make_grid(d.local[0], d.local[1], d.local[2], R.h);
  R.app = &app;
  R.iters = iters;
  R.overlap = app.opts.overlap;
  size_t n = (size_t)(R.g.sxy * (R.g.nz + 2));
  R.nt = app_stencil_nt(2 * n * sizeof(double), (size_t)R.g.nx * sizeof(double));
  R.tile = tile_rows(&R.g);
  R.u = app_grid_alloc(n);
  R.un = app_grid_alloc(n);
  app_check(&app, !R.u || !R.un || source_tables(&R.src, d.local, d.lo, R.h) != 0,
            "cannot allocate %zu points", n);
  rc = tiers_halo_create(&R.halo, team, &d);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());
  app_halo_comm(&app, R.halo); /* --comm mbc: halos through tiers/mbc.h */
  rc = tiers_team_parallel(team, init_body, &R);
  app_check(&app, rc != TIERS_OK, "%s", tiers_last_error());

  /* The timed part: the iterations. */
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

  /* Residual of the final iterate (one more untimed sweep into un). */
  tiers_halo_exchange(R.halo, R.u);
  double r2 = sweep_box(&R.g, R.u, R.un, &R.src, NULL, NULL, 0, 0, R.g.nx, 0, R.g.ny, 0, R.g.nz), r2_all;
  app_allreduce_double(&app, &r2, &r2_all, 1, TIERS_OP_SUM);
  double res0 = sqrt(R.hvol * R.res2_first), res = sqrt(R.hvol * r2_all);

  /* Error against the exact solution (exact maximum). */
  double err = 0.0;
  for (long k = 0; k < R.g.nz; k++)
    for (long j = 0; j < R.g.ny; j++)
      for (long i = 0; i < R.g.nx; i++) {
        double e = fabs(R.u[at3(&R.g, i, j, k)] -
                        exact((double)(d.lo[0] + i + 1) * R.h[0],
                              (double)(d.lo[1] + j + 1) * R.h[1],
                              (double)(d.lo[2] + k + 1) * R.h[2]));
        err = e > err ? e : err;
      }
  double err_all;
  app_allreduce_double(&app, &err, &err_all, 1, TIERS_OP_MAX);

  /* Serial recomputation on rank 0 of the team. */
  long total = size[0] * size[1] * size[2];
  int verify = app.opts.verify < 0 ? total <= VERIFY_AUTO_LIMIT : app.opts.verify;
  int trank = tiers_team_rank(team), tsize = tiers_team_size(team);
  double max_diff = 0.0;
  if (verify) {
    size_t mine = (size_t)(R.g.nx * R.g.ny * R.g.nz);
    double *pack = malloc((mine + 1) * sizeof *pack);
    app_check(&app, !pack, "out of memory packing the field");
    size_t m = 0;
    for (long k = 0; k < R.g.nz; k++)
      for (long j = 0; j < R.g.ny; j++)
        for (long i = 0; i < R.g.nx; i++)
          pack[m++] = R.u[at3(&R.g, i, j, k)];
    MPI_Comm tc = tiers_team_comm(team);
    if (trank != 0) {
      long box[6] = {d.lo[0], d.lo[1], d.lo[2], d.local[0], d.local[1], d.local[2]};
      MPI_Send(box, 6, MPI_LONG, 0, 1, tc);
      MPI_Send(pack, (int)mine, MPI_DOUBLE, 0, 2, tc);
    } else {
      grid3_t G = make_grid(size[0], size[1], size[2], R.h);
      size_t gn = (size_t)(G.sxy * (G.nz + 2));
      double *gu = calloc(gn, sizeof *gu), *gun = calloc(gn, sizeof *gun);
      double *got = calloc(gn, sizeof *got);
      source3_t gf;
      long zero[3] = {0, 0, 0};
      if (!gu || !gun || !got || source_tables(&gf, size, zero, R.h) != 0)
        tiers_tool_fail("out of memory for the serial check of %ld points", total);
      for (int src = 0; src < tsize; src++) {
        long box[6] = {d.lo[0], d.lo[1], d.lo[2], d.local[0], d.local[1], d.local[2]};
        double *buf = pack;
        if (src != 0) {
          MPI_Recv(box, 6, MPI_LONG, src, 1, tc, MPI_STATUS_IGNORE);
          buf = malloc((size_t)(box[3] * box[4] * box[5] + 1) * sizeof *buf);
          if (!buf)
            tiers_tool_fail("out of memory");
          MPI_Recv(buf, (int)(box[3] * box[4] * box[5]), MPI_DOUBLE, src, 2, tc,
                   MPI_STATUS_IGNORE);
        }
        size_t q = 0;
        for (long k = 0; k < box[5]; k++)
          for (long j = 0; j < box[4]; j++)
            for (long i = 0; i < box[3]; i++)
              got[at3(&G, box[0] + i, box[1] + j, box[2] + k)] = buf[q++];
        if (buf != pack)
          free(buf);
      }
      for (long it = 0; it < iters; it++) {
        sweep_box(&G, gu, gun, &gf, NULL, NULL, 0, 0, G.nx, 0, G.ny, 0, G.nz);
        double *tmp = gu;
        gu = gun;
        gun = tmp;
      }
      for (size_t p = 0; p < gn; p++) {
        double diff = fabs(gu[p] - got[p]);
        max_diff = diff > max_diff ? diff : max_diff;
      }
      free(gu);
      free(gun);
      source_free(&gf);
      free(got);
    }
    free(pack);
    MPI_Bcast(&max_diff, 1, MPI_DOUBLE, 0, tc);
  }
  int passed = res < res0 && (!verify || max_diff == 0.0);
  char why[256] = "";
  if (!(res < res0))
    snprintf(why, sizeof why, "the residual did not fall: %.6g at the start, %.6g after %ld "
             "iterations", res0, res, iters);
  else if (verify && max_diff != 0.0)
    snprintf(why, sizeof why, "the field differs from the serial run by up to %.3g (allowed: "
             "0, bit for bit)", max_diff);

  tiers_json_t j;
  app_json_head(&app, &j, elapsed, times);
  if (app.rank == 0) {
    tiers_json_key(&j, "params");
    tiers_json_object_begin(&j);
    tiers_json_kv_int_array(&j, "size", (int64_t[]){size[0], size[1], size[2]}, 3);
    tiers_json_kv_int_array(&j, "grid", (int64_t[]){d.dims[0], d.dims[1], d.dims[2]}, 3);
    tiers_json_kv_int(&j, "iters", iters);
    tiers_json_kv_bool(&j, "quick", app.opts.quick);
    tiers_json_kv_string(&j, "stores", R.nt ? "nt" : "regular");
    tiers_json_kv_int(&j, "tile_rows", R.tile);
    if (perm_path)
      tiers_json_kv_string(&j, "permutation", perm_path);
    tiers_json_object_end(&j);
    tiers_json_key(&j, "result");
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "iterations", iters);
    tiers_json_kv_double(&j, "residual_initial", res0);
    tiers_json_kv_double(&j, "residual", res);
    tiers_json_kv_double(&j, "error_max", err_all);
    tiers_json_kv_int(&j, "points", total);
    tiers_json_object_end(&j);
    app_json_merit(&j, "lattice updates/s", (double)total * iters, elapsed, "LUP/s");
    tiers_json_key(&j, "verification");
    tiers_json_object_begin(&j);
    tiers_json_kv_bool(&j, "passed", passed);
    tiers_json_kv_bool(&j, "residual_fell", res < res0);
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
  source_free(&R.src);
  app_finish(&app, passed, why);
}
