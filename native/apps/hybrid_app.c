/* The shared part of the hybrid reference applications; see hybrid_app.h. */
#include "hybrid_app.h"

#include <omp.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The usage text each application prints for --help. */
static const struct {
  const char *name, *usage;
} app_usages[] = {
    {"tiers-jacobi3d",
    "usage: mpirun -n P tiers-jacobi3d [--size N | --size NX,NY,NZ] [--iters K]\n"
    "           [--threads T] [--pin none|compact|scatter] [--grid PX,PY,PZ]\n"
    "           [--overlap] [--verify | --no-verify] [--quick] [--comm mpi|mbc]\n"
    "           [--permutation FILE]\n"
    "The 3-D Poisson heat problem by Jacobi iteration with face halos, in the\n"
    "hybrid model (one thread team per process); prints a tiers.app/1 document.\n"
    "Usually run through 'tiers bench jacobi3d'.\n"},
    {"tiers-laplace2d",
    "usage: mpirun -n P tiers-laplace2d [--size N | --size NX,NY] [--iters K]\n"
    "           [--threads T] [--pin none|compact|scatter] [--grid PX,PY]\n"
    "           [--overlap] [--verify | --no-verify] [--quick] [--comm mpi|mbc]\n"
    "The 2-D Laplace equation by Jacobi iteration, flat or hybrid; prints a\n"
    "tiers.app/1 document.  Usually run through 'tiers bench laplace2d'.\n"},
    {"tiers-matmul",
    "usage: mpirun -n P tiers-matmul [--algo blocked|tiled|bcast] [--size N]\n"
    "           [--block L] [--iters K] [--simd auto|avx512|avx2|generic]\n"
    "           [--schedule auto|shared|static] [--perturb I,J]\n"
    "           [--threads T] [--pin none|compact|scatter] [--verify | --no-verify]\n"
    "           [--quick]\n"
    "Dense matrix multiply, flat or hybrid; prints a tiers.app/1 document.\n"
    "Usually run through 'tiers bench matmul'.\n"},
    {"tiers-radixsort",
    "usage: mpirun -n P tiers-radixsort [--size N] [--bits 8|11] [--seed S]\n"
    "           [--threads T] [--pin none|compact|scatter] [--verify | --no-verify]\n"
    "           [--quick] [--comm mpi|mbc]\n"
    "Parallel radix sort with an all-to-all key exchange; prints a tiers.app/1\n"
    "document.  Usually run through 'tiers bench radixsort'.\n"},
    {"tiers-cg",
    "usage: mpirun -n P tiers-cg [--class S|W|A|B] [--quick] [--threads T]\n"
    "           [--pin none|compact|scatter] [--comm mpi|mbc]\n"
    "       mpirun -n P tiers-cg --matrix FILE.mtx [--tol 1e-10] [--iters K]\n"
    "           [--solution FILE] [--threads T] [--pin ...] [--comm mpi|mbc]\n"
    "NPB CG (conjugate gradient), or CG on a Matrix Market matrix; prints a\n"
    "tiers.app/1 document.  Usually run through 'tiers bench cg'.\n"},
    {"tiers-zblas",
    "usage: mpirun -n P tiers-zblas [--kernel all|zaxpy|zdotc|dznrm2|zgemv|zgemv_n|\n"
    "           zgemv_t|zgemv_c[,...]] [--size N] [--matrix M] [--iters K]\n"
    "           [--scale S] [--simd auto|avx512|avx2|generic] [--threads T]\n"
    "           [--pin none|compact|scatter] [--verify | --no-verify] [--quick]\n"
    "Complex level-1/2 kernels with OpenMP threads; prints a tiers.app/1\n"
    "document.  Usually run through 'tiers bench zblas'.\n"},
};

/* Answers --help (before MPI starts: no launcher needed). */
static void app_help(const char *name, int argc, char **argv)
{
  for (size_t i = 0; i < sizeof app_usages / sizeof app_usages[0]; i++)
    if (strcmp(app_usages[i].name, name) == 0)
      tiers_tool_help(argc, argv, app_usages[i].usage);
}

void app_init(app_t *app, const char *name, int *argc, char ***argv)
{
  memset(app, 0, sizeof *app);
  app->name = name;
  tiers_tool_init(name);
  app_help(name, *argc, *argv);
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &app->provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &app->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &app->size);
  app->opts.pin = TIERS_PIN_COMPACT;
  app->opts.verify = -1;
}

/* Frees what app_comm made (collective: tiers_mbc_destroy). */
static void app_comm_free(app_t *app)
{
  tiers_mbc_destroy(&app->mbc);
  tiers_barrier_destroy(&app->red_bar);
  free(app->red_in);
  app->red_in = NULL;
}

void app_check(app_t *app, int bad, const char *fmt, ...)
{
  int first = bad ? app->rank : app->size;
  int lowest = first;
  MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (lowest == app->size)
    return;
  if (lowest == app->rank) {
    va_list ap;
    fprintf(stderr, "%s: error: ", app->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
  }
  app_comm_free(app);
  tiers_team_destroy(&app->team);
  MPI_Finalize();
  exit(TIERS_TOOL_EXIT_USAGE);
}

int app_parse_triple(const char *text, long *out, int max)
{
  int n = 0;
  const char *p = text;
  while (p && *p && n < max) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > APP_TRIPLE_MAX)
      return -1;
    out[n++] = v;
    if (*end == ',')
      p = end + 1;
    else if (*end == '\0')
      p = NULL;
    else
      return -1;
  }
  if (p && *p)
    return -1; /* more values than max */
  return n;
}

int app_common_option(app_t *app, int argc, char **argv, int *i)
{
  const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  int bad_value = 0;
  if (strcmp(a, "--overlap") == 0) {
    app->opts.overlap = 1;
    return 1;
  }
  if (strcmp(a, "--verify") == 0) {
    app->opts.verify = 1;
    return 1;
  }
  if (strcmp(a, "--no-verify") == 0) {
    app->opts.verify = 0;
    return 1;
  }
  if (strcmp(a, "--quick") == 0) {
    app->opts.quick = 1;
    return 1;
  }
  if (strcmp(a, "--threads") == 0) {
    bad_value = !v || tiers_parse_long(v, &app->opts.threads) != 0 || app->opts.threads < 1;
    app_check(app, bad_value, "--threads needs a positive number (got %s)", v ? v : "nothing");
  } else if (strcmp(a, "--comm") == 0) {
    bad_value = !v || (strcmp(v, "mpi") != 0 && strcmp(v, "mbc") != 0);
    app_check(app, bad_value, "--comm must be mpi or mbc (got %s)", v ? v : "nothing");
    app->opts.comm = strcmp(v, "mbc") == 0 ? APP_COMM_MBC : APP_COMM_MPI;
  } else if (strcmp(a, "--pin") == 0) {
    bad_value = !v || tiers_pin_policy_parse(v, &app->opts.pin) != TIERS_OK;
    app_check(app, bad_value, "--pin must be none, compact or scatter (got %s)",
              v ? v : "nothing");
  } else if (strcmp(a, "--grid") == 0) {
    long g[3] = {0, 0, 0};
    int n = v ? app_parse_triple(v, g, 3) : -1;
    app_check(app, n < 2 || g[0] < 1 || g[1] < 1 || (n == 3 && g[2] < 1),
              "--grid needs 2 or 3 positive process counts such as 2,2,1 (got %s)",
              v ? v : "nothing");
    for (int k = 0; k < 3; k++)
      app->opts.grid[k] = (int)g[k];
  } else {
    return 0;
  }
  (*i)++;
  return 1;
}

void app_team(app_t *app, MPI_Comm comm)
{
  int rc = tiers_team_create(&app->team, comm, (int)app->opts.threads, app->opts.pin);
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());
}

static int msgr_irecv(void *ctx, void *buf, size_t bytes, int peer, int tag, void **req)
{
  return tiers_mbc_irecv(ctx, buf, bytes, peer, tag, (tiers_mbc_request_t *)req);
}

static int msgr_isend(void *ctx, const void *buf, size_t bytes, int peer, int tag, void **req)
{
  return tiers_mbc_isend(ctx, buf, bytes, peer, tag, (tiers_mbc_request_t *)req);
}

static int msgr_waitall(void *ctx, int count, void **reqs)
{
  return tiers_mbc_waitall(ctx, count, (tiers_mbc_request_t *)reqs, NULL);
}

void app_comm(app_t *app)
{
  if (app->opts.comm != APP_COMM_MBC || app->mbc)
    return;
  int nthreads = tiers_team_nthreads(app->team);
  int rc = tiers_mbc_create(tiers_team_comm(app->team), NULL, &app->mbc);
  app_check(app, rc != TIERS_OK, "--comm mbc: %s", tiers_last_error());
  rc = tiers_barrier_create(&app->red_bar, nthreads > 0 ? nthreads : 1);
  app->red_in = calloc((size_t)(nthreads > 0 ? nthreads : 1), sizeof *app->red_in);
  app_check(app, rc != TIERS_OK || !app->red_in, "--comm mbc: out of memory");
  app->msgr.ctx = app->mbc;
  app->msgr.irecv = msgr_irecv;
  app->msgr.isend = msgr_isend;
  app->msgr.waitall = msgr_waitall;
}

void app_halo_comm(app_t *app, tiers_halo_t halo)
{
  if (app->opts.comm != APP_COMM_MBC)
    return;
  app_comm(app);
  int rc = tiers_halo_set_messenger(halo, &app->msgr);
  app_check(app, rc != TIERS_OK, "--comm mbc: %s", tiers_last_error());
}

void app_comm_stats(app_t *app)
{
  if (!app->mbc)
    return;
  app->have_mbc_stats = tiers_mbc_stats(app->mbc, TIERS_MBC_GLOBAL, &app->mbc_stats) == TIERS_OK;
}

/* acc op= v, in the team's and the layer's way (MAX/MIN exact). */
#define COMBINE(T, acc, v, op)                                   \
  do {                                                           \
    if ((op) == TIERS_OP_SUM)                                    \
      (acc) += (v);                                              \
    else if ((op) == TIERS_OP_MAX)                               \
      (acc) = (v) > (acc) ? (v) : (acc);                         \
    else                                                         \
      (acc) = (v) < (acc) ? (v) : (acc);                         \
  } while (0)

/* out[i] = in[0][i] op in[1][i] op ... in thread order, as the team's own
 * reduction does; each element is read before it is written (out may
 * alias in[0]). */
static void combine_threads(const void **in, void *out, int count, int nthreads, int is_double,
                            tiers_op_t op)
{
  for (int i = 0; i < count; i++) {
    if (is_double) {
      double acc = ((const double *)in[0])[i];
      for (int t = 1; t < nthreads; t++)
        COMBINE(double, acc, ((const double *)in[t])[i], op);
      ((double *)out)[i] = acc;
    } else {
      int64_t acc = ((const int64_t *)in[0])[i];
      for (int t = 1; t < nthreads; t++)
        COMBINE(int64_t, acc, ((const int64_t *)in[t])[i], op);
      ((int64_t *)out)[i] = acc;
    }
  }
}

/* The process-level step over the layer (master thread). */
static int mbc_reduce(app_t *app, void *buf, int count, int is_double, tiers_op_t op)
{
  int mop = op == TIERS_OP_SUM ? TIERS_MBC_SUM : op == TIERS_OP_MAX ? TIERS_MBC_MAX
                                                                    : TIERS_MBC_MIN;
  if (count == 0)
    return TIERS_OK;
  return tiers_mbc_allreduce(app->mbc, buf, buf, count,
                             is_double ? TIERS_MBC_DOUBLE : TIERS_MBC_INT64, mop);
}

static int app_allreduce(app_t *app, const void *in, void *out, int count, int is_double,
                         tiers_op_t op)
{
  if (app->opts.comm != APP_COMM_MBC || !app->mbc)
    return is_double ? tiers_team_allreduce_double(app->team, in, out, count, op)
                     : tiers_team_allreduce_int64(app->team, in, out, count, op);
  if (count < 0 || (count > 0 && (!in || !out)) ||
      (op != TIERS_OP_SUM && op != TIERS_OP_MAX && op != TIERS_OP_MIN))
    TIERS_ERROR(TIERS_ERR_ARG, "app_allreduce: invalid arguments");
  tiers_team_t team = app->team;
  size_t bytes = (size_t)count * 8;
  int nthreads = tiers_team_nthreads(team);
  int region = omp_in_parallel() && omp_get_num_threads() > 1;
  if (region && omp_get_num_threads() != nthreads)
    TIERS_ERROR(TIERS_ERR_STATE, "app_allreduce: called in a region of %d threads; the team "
                "has %d", omp_get_num_threads(), nthreads);
  if (!region) { /* one thread: the master alone */
    tiers_phase_t prev = tiers_team_phase(team, TIERS_PHASE_COMM);
    if (in != out && count > 0)
      memmove(out, in, bytes);
    int rc = mbc_reduce(app, out, count, is_double, op);
    if (prev != TIERS_PHASE_COUNT)
      tiers_team_phase(team, prev);
    return rc;
  }
  int t = omp_get_thread_num();
  tiers_phase_t prev = tiers_team_phase(team, TIERS_PHASE_SYNC);
  app->red_in[t] = in;
  if (t == 0)
    app->red_out = out;
  tiers_barrier_wait(app->red_bar); /* every contribution is published */
  if (t == 0) {
    tiers_team_phase(team, TIERS_PHASE_COMM);
    combine_threads(app->red_in, out, count, nthreads, is_double, op);
    app->red_rc = mbc_reduce(app, out, count, is_double, op);
    tiers_team_phase(team, TIERS_PHASE_SYNC);
  }
  tiers_barrier_wait(app->red_bar); /* the result is in the master's out */
  int rc = app->red_rc;
  if (t != 0 && rc == TIERS_OK && count > 0)
    memcpy(out, app->red_out, bytes);
  tiers_barrier_wait(app->red_bar); /* every copy is done before the master moves on */
  if (prev != TIERS_PHASE_COUNT)
    tiers_team_phase(team, prev);
  return rc;
}

int app_allreduce_double(app_t *app, const double *in, double *out, int count, tiers_op_t op)
{
  return app_allreduce(app, in, out, count, 1, op);
}

int app_allreduce_int64(app_t *app, const int64_t *in, int64_t *out, int count, tiers_op_t op)
{
  return app_allreduce(app, in, out, count, 0, op);
}

static void stats(tiers_json_t *j, const char *key, const double *v, int n)
{
  double max = v[0], sum = 0;
  for (int i = 0; i < n; i++) {
    max = v[i] > max ? v[i] : max;
    sum += v[i];
  }
  tiers_json_key(j, key);
  tiers_json_object_begin(j);
  tiers_json_kv_double(j, "max", max);
  tiers_json_kv_double(j, "mean", sum / n);
  tiers_json_kv_double_array(j, "per_rank", v, (size_t)n);
  tiers_json_object_end(j);
}

void app_json_head(app_t *app, tiers_json_t *j, double elapsed,
                   const double times[TIERS_PHASE_COUNT])
{
  double mine[TIERS_PHASE_COUNT + 1];
  for (int p = 0; p < TIERS_PHASE_COUNT; p++)
    mine[p] = times[p];
  mine[TIERS_PHASE_COUNT] = elapsed;
  int n = app->size, k = TIERS_PHASE_COUNT + 1;
  double *all = app->rank == 0 ? malloc(sizeof(double) * (size_t)(n * k)) : NULL;
  MPI_Gather(mine, k, MPI_DOUBLE, all, k, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  /* where every thread ran: the team's PU per thread (-1: not pinned) */
  int nt = tiers_team_nthreads(app->team);
  int *my_pus = malloc(sizeof(int) * (size_t)nt);
  int *all_pus = app->rank == 0 ? malloc(sizeof(int) * (size_t)(n * nt)) : NULL;
  if (!my_pus || (app->rank == 0 && !all_pus))
    tiers_tool_fail("out of memory");
  for (int t = 0; t < nt; t++)
    my_pus[t] = tiers_team_thread_pu(app->team, t);
  MPI_Gather(my_pus, nt, MPI_INT, all_pus, nt, MPI_INT, 0, MPI_COMM_WORLD);
  free(my_pus);
  if (app->mbc && !app->have_mbc_stats) /* collective: every process has one, or none */
    app_comm_stats(app);
  int have_mbc = app->have_mbc_stats;
  const tiers_mbc_stats_t ms = app->mbc_stats;
  if (app->rank != 0)
    return;
  if (!all)
    tiers_tool_fail("out of memory");
  double *col = malloc(sizeof(double) * (size_t)n);
  if (!col)
    tiers_tool_fail("out of memory");
  tiers_json_init(j, stdout);
  tiers_json_object_begin(j);
  tiers_json_kv_string(j, "schema", "tiers.app/1");
  tiers_json_kv_string(j, "app", app->name);
  tiers_json_kv_int(j, "ranks", app->size);
  tiers_json_kv_int(j, "threads", tiers_team_nthreads(app->team));
  tiers_json_kv_string(j, "pin", tiers_pin_policy_name(app->opts.pin));
  tiers_json_key(j, "thread_pus");
  tiers_json_array_begin(j);
  for (int r = 0; r < n; r++) {
    tiers_json_array_begin(j);
    for (int t = 0; t < nt; t++)
      tiers_json_int(j, all_pus[r * nt + t]);
    tiers_json_array_end(j);
  }
  tiers_json_array_end(j);
  free(all_pus);
  tiers_json_kv_bool(j, "overlap", app->opts.overlap);
  tiers_json_kv_int(j, "mpi_thread_provided", app->provided);
  tiers_json_kv_string(j, "comm", app->opts.comm == APP_COMM_MBC ? "mbc" : "mpi");
  if (have_mbc) {
    /* seed 001 Table 3, summed over the processes, for the whole run */
    const char *tname = "?";
    tiers_mbc_transport_name(app->mbc, &tname);
    tiers_json_key(j, "mbc");
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "transport", tname);
    tiers_json_kv_int(j, "direct_available", ms.direct_available);
    tiers_json_kv_int(j, "msgs_sent", (int64_t)ms.msgs_sent);
    tiers_json_kv_int(j, "bytes_sent", (int64_t)ms.bytes_sent);
    tiers_json_kv_int(j, "msgs_direct", (int64_t)ms.msgs_direct);
    tiers_json_kv_int(j, "bytes_direct", (int64_t)ms.bytes_direct);
    tiers_json_kv_double(j, "remote_write_share", ms.direct_share);
    tiers_json_kv_double(j, "data_rate_Bps", ms.data_rate_Bps);
    tiers_json_kv_double(j, "msg_rate_per_s", ms.msg_rate_per_s);
    tiers_json_kv_double(j, "elapsed_s", ms.elapsed_s);
    tiers_json_object_end(j);
  }
  double slowest = 0;
  for (int r = 0; r < n; r++)
    slowest = all[r * k + TIERS_PHASE_COUNT] > slowest ? all[r * k + TIERS_PHASE_COUNT] : slowest;
  tiers_json_kv_double(j, "time_s", slowest);
  tiers_json_key(j, "breakdown");
  tiers_json_object_begin(j);
  static const char *keys[TIERS_PHASE_COUNT] = {"compute_s", "comm_s", "sync_s"};
  for (int p = 0; p < TIERS_PHASE_COUNT; p++) {
    for (int r = 0; r < n; r++)
      col[r] = all[r * k + p];
    stats(j, keys[p], col, n);
  }
  tiers_json_object_end(j);
  free(col);
  free(all);
}

void app_json_merit(tiers_json_t *j, const char *name, double amount, double seconds,
                    const char *unit)
{
  tiers_json_key(j, "figure_of_merit");
  tiers_json_object_begin(j);
  tiers_json_kv_string(j, "name", name);
  tiers_json_kv_double(j, "value", seconds > 0 ? amount / seconds : 0.0);
  tiers_json_kv_string(j, "unit", unit);
  tiers_json_object_end(j);
}

void app_finish(app_t *app, int passed, const char *why)
{
  app_comm_free(app);
  tiers_team_destroy(&app->team);
  /* Rank 0 says why before anything ends, and only rank 0 fails: were every
   * rank to exit non-zero, the launcher could kill rank 0 before its line
   * was out. */
  if (!passed && app->rank == 0) {
    fprintf(stderr, "%s: error: verification failed: %s\n", app->name, why);
    fflush(stderr);
  }
  MPI_Finalize();
  exit(!passed && app->rank == 0 ? APP_EXIT_VERIFY : 0);
}

#define GRID_ALIGN ((size_t)2 << 20)

static size_t grid_bytes(size_t n) { return (n * sizeof(double) + 4095) & ~(size_t)4095; }

double *app_grid_alloc(size_t n)
{
  size_t keep = grid_bytes(n), len = keep + GRID_ALIGN;
  void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return NULL;
  uintptr_t p = ((uintptr_t)base + GRID_ALIGN - 1) & ~(uintptr_t)(GRID_ALIGN - 1);
  size_t head = p - (uintptr_t)base; /* keep [p, p + keep): unmap the rest */
  if (head > 0)
    munmap(base, head);
  if (len - head > keep)
    munmap((char *)p + keep, len - head - keep);
#ifdef MADV_HUGEPAGE
  (void)madvise((void *)p, keep, MADV_HUGEPAGE);
#endif
  return (double *)p;
}

void app_grid_free(double *x, size_t n)
{
  if (x)
    munmap(x, grid_bytes(n));
}

int app_stencil_nt(size_t bytes, size_t row_bytes)
{
  const char *force = getenv("TIERS_STENCIL_STORES");
  int local = 1;
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
  }
  if (force && strcmp(force, "nt") == 0)
    return 1;
  if (force && strcmp(force, "regular") == 0)
    return 0;
  long llc = 0, l1 = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL1_DCACHE_SIZE)
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#endif
  return llc > 0 && l1 > 0 && (double)bytes * local > (double)llc &&
         row_bytes <= (size_t)l1 / 4;
}

#if defined(__x86_64__)
/* The streaming body of one width: scalar stores until dst is aligned to
 * the vector, streaming stores, scalar stores for the rest. */
#define STREAM_ROW(W, LOADU, STREAM)                                        \
  size_t i = 0;                                                             \
  while (i < n && ((uintptr_t)(dst + i) & (W * sizeof(double) - 1)) != 0) { \
    dst[i] = src[i];                                                        \
    i++;                                                                    \
  }                                                                         \
  for (; i + W <= n; i += W)                                                \
    STREAM(dst + i, LOADU(src + i));                                        \
  for (; i < n; i++)                                                        \
    dst[i] = src[i]

__attribute__((target("avx512f"))) static void stream_avx512(double *restrict dst,
                                                             const double *restrict src,
                                                             size_t n)
{
  STREAM_ROW(8, _mm512_loadu_pd, _mm512_stream_pd);
}

__attribute__((target("avx2"))) static void stream_avx2(double *restrict dst,
                                                        const double *restrict src, size_t n)
{
  STREAM_ROW(4, _mm256_loadu_pd, _mm256_stream_pd);
}

static void stream_sse2(double *restrict dst, const double *restrict src, size_t n)
{
  STREAM_ROW(2, _mm_loadu_pd, _mm_stream_pd);
}
#endif

void app_stream_row(double *restrict dst, const double *restrict src, size_t n)
{
#if defined(__x86_64__)
  static int cached = -1; /* 2 avx512f, 1 avx2, 0 sse2; threads may race to store the same */
  int isa = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (isa < 0) {
    __builtin_cpu_init();
    isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
    __atomic_store_n(&cached, isa, __ATOMIC_RELAXED);
  }
  if (isa == 2)
    stream_avx512(dst, src, n);
  else if (isa == 1)
    stream_avx2(dst, src, n);
  else
    stream_sse2(dst, src, n);
#else
  memcpy(dst, src, n * sizeof(double));
#endif
}

void app_stream_fence(void)
{
#if defined(__x86_64__)
  _mm_sfence();
#endif
}
