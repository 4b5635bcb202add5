/*
 * Internal: what every reference application of the hybrid runtime shares
 * -- the common options, the one-line collective failure, and the JSON
 * document with the time breakdown (seed 004 Fig. 13).
 *
 * Common options (each app adds its own):
 *   --threads T     threads per process (default: OMP_NUM_THREADS)
 *   --pin P         none, compact (default) or scatter, within the
 *                   process's cpuset
 *   --grid A,B[,C]  processes per axis (default: MPI_Dims_create)
 *   --overlap       overlap the halo exchange with interior computation
 *   --verify        compare with a serial recomputation on rank 0
 *   --no-verify     skip it (the default above the app's size limit)
 *   --quick         small problem that runs in well under a second
 *   --comm mpi|mbc  messaging of the halo exchanges, reductions and
 *                   other exchanges of the timed part: MPI (default) or
 *                   tiers' memory-based layer (tiers/mbc.h; apps that call
 *                   app_comm / app_halo_comm and reduce with
 *                   app_allreduce_*); with mbc the document gets
 *                   "comm":"mbc" and "mbc":{its Table 3 statistics}
 *
 * Output: rank 0 prints one JSON document, schema "tiers.app/1":
 *   {"schema","app","ranks","threads","pin",
 *    "thread_pus": per rank, the logical PU (tiers/topo.h) of each thread,
 *                  -1 when not pinned,
 *    "params":{...},
 *    "time_s": slowest process's time of the timed part,
 *    "breakdown": {"compute_s","comm_s","sync_s": each {"max","mean",
 *                  "per_rank":[...]}},
 *    "result": {...app figures...},
 *    "figure_of_merit": {"name","value","unit"},
 *    "verification": {"passed": bool, ...}}
 * A failed verification exits 3 after the document, with one line
 * "APP: error: verification failed: ..." on stderr.
 */
#ifndef TIERS_APPS_HYBRID_APP_H
#define TIERS_APPS_HYBRID_APP_H

#include <mpi.h>

#include "common/json.h"
#include "common/tool.h"
#include "tiers/hybrid.h"
#include "tiers/mbc.h"

/* Exit status of a run whose result failed its verification. */
#define APP_EXIT_VERIFY 3

typedef struct app_opts {
  long threads;            /* 0: OMP_NUM_THREADS */
  tiers_pin_policy_t pin;
  int grid[3];             /* 0: free */
  int overlap;
  int verify;              /* 1 yes, 0 no, -1 automatic */
  int quick;
  int comm;                /* APP_COMM_MPI or APP_COMM_MBC */
} app_opts_t;

/* --comm values */
enum { APP_COMM_MPI = 0, APP_COMM_MBC = 1 };

typedef struct app {
  const char *name;
  int rank, size, provided;
  app_opts_t opts;
  tiers_team_t team;
  tiers_mbc_t mbc;         /* with --comm mbc, after app_comm (or app_halo_comm):
                              point-to-point of the app's own exchanges */
  tiers_halo_messenger_t msgr;
  /* app_allreduce_* over mbc inside a parallel region: the team's
   * contributions meet here (allocated by app_comm) */
  tiers_barrier_t red_bar;
  const void **red_in;     /* per thread */
  void *red_out;           /* the master thread's result buffer */
  int red_rc;
  tiers_mbc_stats_t mbc_stats; /* taken by app_comm_stats */
  int have_mbc_stats;
} app_t;

/* MPI_Init_thread (FUNNELED) and defaults. */
void app_init(app_t *app, const char *name, int *argc, char ***argv);

/* Parses one common option at argv[*i]; returns 1 when it was one (and
 * advances *i over its value), 0 when it is not a common option. */
int app_common_option(app_t *app, int argc, char **argv, int *i);

/* Collective: when any process passes bad != 0, the lowest such rank
 * prints "APP: error: MESSAGE", every process finalises MPI and exits 2. */
void app_check(app_t *app, int bad, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Collective: creates the team from the options, failing in one line. */
void app_team(app_t *app, MPI_Comm comm);

/* Collective: gathers every process's phase times onto rank 0; rank 0
 * writes the head of the document (up to and including "breakdown") to
 * *j.  @p elapsed is this process's time of the timed part and @p times
 * its phase times (tiers_team_times) taken when that part ended. */
void app_json_head(app_t *app, tiers_json_t *j, double elapsed,
                   const double times[TIERS_PHASE_COUNT]);

/* Collective over the team's processes (after app_team): with --comm mbc,
 * creates the memory-based communicator app->mbc over the team's
 * communicator (once; ranks in app->mbc are the team's ranks) and what
 * app_allreduce_* needs; with --comm mpi, does nothing.  Fails in one
 * line. */
void app_comm(app_t *app);

/* Collective: with --comm mbc, takes the layer's statistics (summed over
 * the processes) for the document now -- call it when the timed part
 * ends, after tiers_mbc_stats_reset at its start, so that the Table 3
 * rates cover the timed part only; without this call app_json_head takes
 * them when it runs.  With --comm mpi, does nothing. */
void app_comm_stats(app_t *app);

/* The hybrid reduction of the app's messaging mode.  Called either by
 * every thread of the team inside a parallel region (then the team's
 * contributions are combined in thread order, the master thread makes one
 * process-level reduction and every thread gets the result) or by the
 * master thread outside any region (one process-level reduction).
 * --comm mpi: tiers_team_allreduce_double/int64 (MPI_Allreduce).
 * --comm mbc: the same team step, then tiers_mbc_allreduce (contributions
 * combined in rank order on rank 0).  MAX and MIN are exact in both modes;
 * a SUM of doubles over more than 2 processes may differ in its last bits
 * between the modes (MPI's reduction order is the library's choice; with
 * 1 or 2 processes both are the same commutative additions).  Integer
 * sums are exact.  @p in and @p out may be the same buffer.  Returns
 * TIERS_OK or the error code (the same in every thread); collective. */
int app_allreduce_double(app_t *app, const double *in, double *out, int count, tiers_op_t op);
int app_allreduce_int64(app_t *app, const int64_t *in, int64_t *out, int count, tiers_op_t op);

/* Collective over the team's processes: with --comm mbc, creates the
 * memory-based communicator over the team's communicator (app_comm) and makes
 * @p halo send through it; with --comm mpi, does nothing.  Fails in one
 * line. */
void app_halo_comm(app_t *app, tiers_halo_t halo);

/* Rank 0: writes the "figure_of_merit" entry {"name","value","unit"} of
 * the document; @p value is 0 when @p seconds is not positive (the rate
 * is @p amount / @p seconds). */
void app_json_merit(tiers_json_t *j, const char *name, double amount, double seconds,
                    const char *unit);

/* Largest value app_parse_triple accepts: grid points per axis, process
 * counts per axis and matrix indices all stay far below it, and products of
 * three such values still fit in 64 bits. */
#define APP_TRIPLE_MAX (1L << 20)

/* Parses "A,B[,C]" into n longs (n = 2 or 3, or 1 value repeated), each
 * 0..APP_TRIPLE_MAX; returns the count read, or -1. */
int app_parse_triple(const char *text, long *out, int max);

/* A grid of n doubles for a stencil sweep: 2 MiB aligned and advised for
 * transparent huge pages (best effort: fewer TLB misses on the sweep's
 * streams); no page is backed until first written, so the threads that
 * initialise it place it.  NULL when out of memory; release with
 * app_grid_free(x, n). */
double *app_grid_alloc(size_t n);
void app_grid_free(double *x, size_t n);

/* 1 when a stencil's sweeps should write with non-temporal stores through
 * a row buffer of @p row_bytes: when the grids of all this node's processes
 * (@p bytes each) exceed the last-level cache, so that the written grid
 * would not stay in cache anyway and the read-for-ownership of every
 * written line is traffic saved, and the row buffer takes at most a
 * quarter of the L1 data cache (a larger one would push the rows the
 * stencil reads out of L1).  The environment variable
 * TIERS_STENCIL_STORES=nt|regular overrides it.  Collective over
 * MPI_COMM_WORLD. */
int app_stencil_nt(size_t bytes, size_t row_bytes);

/* Copies n doubles from @p src (a row just computed, in L1) to @p dst with
 * non-temporal stores where the CPU has them (AVX-512F, AVX2, SSE2).  Call
 * app_stream_fence() before other threads or processes read @p dst. */
void app_stream_row(double *restrict dst, const double *restrict src, size_t n);
void app_stream_fence(void);

/* Ends the run: frees the team, finalises MPI and exits 0; when !passed,
 * rank 0 prints @p why first and exits APP_EXIT_VERIFY (the others exit 0,
 * so that the launcher cannot stop rank 0 before its line is out). */
void app_finish(app_t *app, int passed, const char *why) __attribute__((noreturn));

#endif
