/*
 * tiers-probe-net: what messages cost between MPI processes.  An MPI
 * program; rank 0 prints one JSON object on stdout (docs/schemas/probe-net.md).
 *
 * Three tests, chosen with --tests:
 *
 * pingpong  Between two ranks (--pair A,B; default 0,1), for every size of
 *           --sizes: the round-trip time of a ping-pong (up to 1 KiB as
 *           osu_latency: A sends with MPI_Send and waits in MPI_Recv, B
 *           receives and answers; larger sizes, and every size with
 *           --yield, as the MPI/MBCF paper measures: each side pre-posts
 *           MPI_Irecv, A sends and waits for the answer), averaged over the
 *           iterations after the warm-up ones (osu_latency's loop counts:
 *           10000 + 100 skipped up to 8 KiB, 1000 + 10 above); one-way
 *           latency = round trip / 2.  Then the streaming bandwidth as
 *           osu_bw measures it: A posts a window of 64 non-blocking sends,
 *           B a window of receives; after each window B acknowledges with a
 *           4-byte message; bandwidth = bytes of all timed windows / time.
 *
 * allpairs  The parallel all-pairs measurement of Ito et al. (seed 002,
 *           §3.2).  At step k unit i exchanges with unit i XOR k; units
 *           whose partner does not exist (>= the unit count) sit the step
 *           out, so with 2^(m-1) < n <= 2^m every pair meets exactly once in
 *           2^m - 1 steps.  Two phases:
 *             intra  the units are the ranks of one node (every node at
 *                    once); with --flat, or on one host, all ranks;
 *             inter  the units are the nodes; only the first c ranks of a
 *                    node take part (--cores-per-node c, default 1), rank q
 *                    of every node measuring step r*c + q + 1 in round r, so
 *                    that the 2^M - 1 steps take ceil((2^M - 1) / c) rounds.
 *           Nodes are the distinct host names, or blocks of --node-size
 *           consecutive ranks (to study the schedule on one machine).
 *           Each pair exchanges every size of centre x factors (default
 *           1.5 MB x 0.667, 0.8, 1, 1.25, 1.5) as --warmup untimed and then
 *           timed ping-pongs, and 0-byte round trips in blocks of --iters for
 *           the pair's latency; each repeats by the statistics layer's
 *           rule (until the 95 % interval of its median is within +-5 %,
 *           --figure-time / 10 seconds pass, or --reps times (50 latency
 *           blocks) are taken); every one-way time (round trip / 2) is
 *           reported.  A barrier separates steps, so that one step's
 *           exchanges run at the same time and never overlap the next's.
 *           The least-squares fit time = latency + size / bandwidth is done
 *           by the Python side, which reads these times.
 *
 * barrier   MPI_Barrier over the first p ranks, p = 2 .. n (2, 4, 8, ..., n
 *           above 16 ranks): minimum, mean and maximum over ranks of each
 *           rank's mean time per barrier, after warm-up barriers (as IMB
 *           and osu_barrier), timed in blocks as the allreduce test below.
 *           Then the hybrid barrier of libtiers-hybrid (tiers_team_barrier:
 *           a team spin barrier, MPI_Barrier by the master thread, a team
 *           barrier again) over the same process counts, with a team of
 *           --barrier-threads T threads in every process (default: 2, or
 *           fewer when a rank's cpuset has fewer PUs).  All episodes of a
 *           series run inside one tiers_team_parallel region; the master
 *           thread times them, so one rank's time per episode is the time
 *           of the whole hybrid barrier (its threads and all processes).
 *           --barrier-kinds mpi or hybrid times one of the two only; MPI
 *           starts with MPI_THREAD_FUNNELED only when the hybrid barrier
 *           is timed (the thread level slows MPI_Barrier itself), and
 *           "thread_level" in the output says which it was.
 *
 * allreduce MPI_Allreduce of 8 B (one double, MPI_SUM) over the same process
 *           counts, as osu_allreduce: warm-up calls, then calls each
 *           timed on its own and followed by an untimed MPI_Barrier, in
 *           blocks of --barrier-iters / 10 (at least 100) that repeat until
 *           the statistics layer's rule stops; per block the mean over
 *           ranks of the time per call, and min, mean and max over ranks
 *           of each rank's mean time per call.  Not run unless asked for.
 *
 * No wait is unbounded: every message completion and every step barrier is
 * a loop of MPI_Test calls against a deadline of --timeout seconds (default
 * 60).  A rank whose deadline passes prints one line naming the peer and the
 * test and calls MPI_Abort.  (MPI_Barrier in the barrier test and MPI_Allreduce in the
 * allreduce test are the blocking calls, since that is what is measured; a deadline-checked
 * barrier of point-to-point messages before each series makes sure every rank is
 * still there.  The probe's own bookkeeping uses no non-blocking collective: see
 * coll_gather.
 * The hybrid barrier is watched by a thread of its own: when no episode
 * completes within --timeout seconds the rank says so in one line and
 * leaves, which ends the job.)
 *
 * Errors in the options are found by every rank alike; rank 0 prints the
 * line "tiers-probe-net: error: ..." and every rank exits with status 2.
 */
#define _GNU_SOURCE
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/stats.h"
#include "common/tool.h"
#include "tiers/error.h"
#include "tiers/hybrid.h" /* after <mpi.h>: the team API */
#include "tiers/topo.h"

#define HOST_CHARS 256
#define SET_CHARS 256
#define MAX_SIZES 64
#define MAX_FACTORS 32
#define LARGE_MESSAGE 8192 /* osu: above this, fewer iterations */
#define TAG_PINGPONG 10
#define TAG_BW 11
#define TAG_ACK 12
#define TAG_PAIR 100
#define TAG_DECIDE 13
#define TAG_COLL 14
#define MAX_BLOCKS 200 /* timed blocks per ping-pong figure, at most */

enum { TEST_PINGPONG, TEST_ALLPAIRS, TEST_BARRIER, TEST_ALLREDUCE, NTESTS };
static const char *test_names[NTESTS] = {"pingpong", "allpairs", "barrier", "allreduce"};
enum { PHASE_INTRA, PHASE_INTER };
static const char *phase_names[2] = {"intra", "inter"};

static struct {
  int selected[NTESTS];
  uint64_t sizes[MAX_SIZES];
  int nsizes;
  long iters, skip, iters_large, skip_large; /* ping-pong loop counts */
  long bw_iters, bw_skip, bw_iters_large, bw_skip_large;
  long window;
  double figure_time; /* seconds per ping-pong figure before sampling stops */
  long max_blocks;    /* timed blocks per figure, at most */
  long pair_a, pair_b;
  double center;
  double factors[MAX_FACTORS];
  int nfactors;
  long reps, warmup;
  long cores_per_node, node_size;
  int flat;
  long barrier_iters, barrier_warmup;
  long barrier_threads; /* 0: the default (2, or the PUs of the smallest cpuset) */
  int barrier_mpi, barrier_hybrid; /* which barriers the barrier test times */
  double timeout;
  int yield;
  int quick;
  long die_rank;   /* test hooks: a rank that exits or stalls ... */
  int die_test;    /* ... at the start of this test */
  int die_stall;   /* 1: stall (sleep) instead of exiting */
} opt;

static int rank, nranks;

/* ------------------------------------------------------------------ */
/* Failing                                                             */

/* An error every rank found alike: rank 0 says it, every rank leaves. */
static void __attribute__((noreturn, format(printf, 1, 2))) fail_all(const char *fmt, ...)
{
  if (rank == 0) {
    va_list ap;
    fprintf(stderr, "tiers-probe-net: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
  }
  MPI_Finalize();
  exit(TIERS_TOOL_EXIT_USAGE);
}

/* An error of this rank alone: say it and stop the whole job. */
static void __attribute__((noreturn, format(printf, 1, 2))) fail_here(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "tiers-probe-net: error: rank %d: ", rank);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, TIERS_TOOL_EXIT_USAGE);
  exit(TIERS_TOOL_EXIT_USAGE);
}

/* ------------------------------------------------------------------ */
/* Bounded waits                                                       */

/*
 * Waits for n requests with MPI_Test calls until --timeout seconds pass.
 * A busy wait (a timed exchange) polls as fast as it can, yielding the CPU
 * between polls with --yield (more ranks than cores); an idle wait (a rank
 * sitting out) sleeps 20 us between polls.  "what" and "peer" (-1: all
 * ranks) word the error.
 */
static void wait_all(int n, MPI_Request *req, int idle, const char *what, int peer)
{
  int done = 0;
  if (n == 1) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done)
      return;
  }
  /* The clock is read only every 1024 polls of a busy wait (and the
   * deadline set at the first reading), so that a short wait -- a small
   * message's round trip -- costs no more than MPI_Test itself. */
  double deadline = idle ? tiers_now() + opt.timeout : 0;
  const struct timespec nap = {0, 20000};
  for (unsigned spins = 1;; spins++) {
    MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
    if (done)
      return;
    if (idle)
      nanosleep(&nap, NULL);
    else if (opt.yield)
      sched_yield();
    if (!idle && (spins & 1023) != 0)
      continue;
    if (deadline == 0) {
      deadline = tiers_now() + opt.timeout;
      continue;
    }
    if (tiers_now() > deadline) {
      if (peer >= 0)
        fail_here("no answer from rank %d within %g s (%s); a rank may have died or "
                  "stalled, or use --timeout to wait longer", peer, opt.timeout, what);
      fail_here("not every rank reached the end of %s within %g s; a rank may have died or "
                "stalled, or use --timeout to wait longer", what, opt.timeout);
    }
  }
}

/*
 * A series deadline for blocking waits.  A small message's round trip is
 * timed with blocking MPI_Wait calls, as osu_latency does: a polling loop
 * of MPI_Test calls costs Open MPI about 20 ns more per round trip.  Their
 * time limit is one SIGALRM for the whole series, --timeout seconds after
 * it starts; when it fires, the rank prints the line prepared here and
 * ends, and the launcher ends the others.
 */
static char alarm_line[320];
static size_t alarm_len;

static void on_alarm(int sig)
{
  (void)sig;
  ssize_t n = write(STDERR_FILENO, alarm_line, alarm_len); /* async-signal-safe */
  (void)n;
  _exit(TIERS_TOOL_EXIT_USAGE);
}

static void deadline_arm(int peer, const char *what)
{
  int n = snprintf(alarm_line, sizeof alarm_line,
                   "tiers-probe-net: error: rank %d: no answer from rank %d within %g s (%s); "
                   "a rank may have died or stalled, or use --timeout to wait longer\n",
                   rank, peer, opt.timeout, what);
  alarm_len = n > 0 && (size_t)n < sizeof alarm_line ? (size_t)n : sizeof alarm_line - 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it;
  memset(&it, 0, sizeof it);
  it.it_value.tv_sec = (time_t)opt.timeout;
  it.it_value.tv_usec = (suseconds_t)((opt.timeout - (double)(time_t)opt.timeout) * 1e6);
  if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
    it.it_value.tv_usec = 1;
  setitimer(ITIMER_REAL, &it, NULL);
}

static void deadline_disarm(void)
{
  struct itimerval it;
  memset(&it, 0, sizeof it);
  setitimer(ITIMER_REAL, &it, NULL);
}

/*
 * The bounded collectives of the probe's own bookkeeping (start-up,
 * gathering results, the repeat-until decisions), built from point-to-point
 * messages to and from rank 0 of the communicator and wait_all's deadline.
 * Not MPI's non-blocking collectives: in Open MPI 4.1 the first
 * MPI_Ibarrier/MPI_Ireduce of a process hooks the non-blocking collectives'
 * progress into every later wait, and MPI_Allreduce of 8 B on 2 ranks
 * became ~1.2x slower (0.58 against 0.47 us, the same loop with and
 * without one MPI_Ireduce before it).
 *
 * coll_gather: rank 0 of comm receives `bytes` from every rank into
 * all + r * bytes (its own copied); the others send theirs.
 */
static void coll_gather(const void *mine, void *all, int bytes, MPI_Comm comm, int idle,
                        const char *what)
{
  int me, n;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  if (me != 0) {
    MPI_Request r;
    MPI_Isend(mine, bytes, MPI_BYTE, 0, TAG_COLL, comm, &r);
    wait_all(1, &r, idle, what, -1);
    return;
  }
  if (bytes > 0)
    memcpy(all, mine, (size_t)bytes);
  if (n == 1)
    return;
  MPI_Request *req = malloc(sizeof *req * (size_t)(n - 1));
  if (!req)
    fail_here("out of memory");
  for (int r = 1; r < n; r++)
    MPI_Irecv((char *)all + (size_t)r * (size_t)bytes, bytes, MPI_BYTE, r, TAG_COLL, comm,
              &req[r - 1]);
  wait_all(n - 1, req, idle, what, -1);
  free(req);
}

/* Rank 0 of comm sends `bytes` of buf to every other rank. */
static void coll_bcast(void *buf, int bytes, MPI_Comm comm, int idle, const char *what)
{
  int me, n;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  if (n == 1)
    return;
  if (me != 0) {
    MPI_Request r;
    MPI_Irecv(buf, bytes, MPI_BYTE, 0, TAG_COLL, comm, &r);
    wait_all(1, &r, idle, what, -1);
    return;
  }
  MPI_Request *req = malloc(sizeof *req * (size_t)(n - 1));
  if (!req)
    fail_here("out of memory");
  for (int r = 1; r < n; r++)
    MPI_Isend(buf, bytes, MPI_BYTE, r, TAG_COLL, comm, &req[r - 1]);
  wait_all(n - 1, req, idle, what, -1);
  free(req);
}

/* min, max and sum over the ranks of comm of one double, on rank 0. */
static void coll_reduce3(double mine, double *lo, double *hi, double *sum, MPI_Comm comm,
                         int idle, const char *what)
{
  int me, n;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  double *all = me == 0 ? malloc(sizeof(double) * (size_t)n) : NULL;
  if (me == 0 && !all)
    fail_here("out of memory");
  coll_gather(&mine, all, (int)sizeof mine, comm, idle, what);
  if (me == 0) {
    *lo = *hi = *sum = all[0];
    for (int r = 1; r < n; r++) {
      *lo = all[r] < *lo ? all[r] : *lo;
      *hi = all[r] > *hi ? all[r] : *hi;
      *sum += all[r];
    }
    free(all);
  }
}

static void barrier_bounded(MPI_Comm comm, const char *what)
{
  char none = 0;
  coll_gather(&none, NULL, 0, comm, 1, what);
  coll_bcast(&none, 0, comm, 1, what);
}

/* Test hook: the chosen rank dies or stalls when a test starts. */
static void maybe_die(int test)
{
  if (rank != opt.die_rank || test != opt.die_test)
    return;
  if (opt.die_stall) {
    fprintf(stderr, "tiers-probe-net: rank %d stalling on purpose in %s\n", rank,
            test_names[test]);
    fflush(stderr);
    for (;;)
      sleep(1000);
  }
  fprintf(stderr, "tiers-probe-net: rank %d dying on purpose in %s\n", rank, test_names[test]);
  fflush(stderr);
  _exit(3);
}

/* ------------------------------------------------------------------ */
/* Options                                                             */

/* "mpi", "hybrid" or both, comma-separated: which barriers are timed. */
static int parse_barrier_kinds(const char *text, int *mpi, int *hybrid)
{
  char buf[64];
  if (strlen(text) >= sizeof buf)
    return -1;
  strcpy(buf, text);
  *mpi = *hybrid = 0;
  for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
    if (strcmp(w, "mpi") == 0)
      *mpi = 1;
    else if (strcmp(w, "hybrid") == 0)
      *hybrid = 1;
    else
      return -1;
  }
  return *mpi || *hybrid ? 0 : -1;
}

static int parse_test_list(const char *text, int *selected)
{
  char buf[256];
  if (strlen(text) >= sizeof buf)
    return -1;
  strcpy(buf, text);
  memset(selected, 0, sizeof(int) * NTESTS);
  int any = 0;
  for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int t = 0; t < NTESTS; t++)
      if (strcmp(w, test_names[t]) == 0)
        selected[t] = found = any = 1;
    if (!found)
      return -1;
  }
  return any ? 0 : -1;
}

/*
 * Splits a comma-separated list and parses each word with @p parse into the
 * next element of @p out (elements of @p size bytes).  Returns the count,
 * or -1 for an empty list, more than @p max words or a word @p parse
 * refuses.
 */
static int parse_list(const char *text, void *out, size_t size, int max,
                      int (*parse)(const char *word, void *value))
{
  char buf[1024];
  if (strlen(text) >= sizeof buf)
    return -1;
  strcpy(buf, text);
  int n = 0;
  for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
    if (n == max || parse(w, (char *)out + (size_t)n * size) != 0)
      return -1;
    n++;
  }
  return n ? n : -1;
}

static int parse_size_word(const char *word, void *value)
{
  return tiers_parse_size(word, value);
}

static int parse_double_word(const char *word, void *value)
{
  return tiers_parse_double(word, value);
}

/* "0,8,1K,4M" -> sizes; a size may be 0.  Returns the count or -1. */
static int parse_size_list(const char *text, uint64_t *out, int max)
{
  return parse_list(text, out, sizeof *out, max, parse_size_word);
}

static int parse_double_list(const char *text, double *out, int max)
{
  return parse_list(text, out, sizeof *out, max, parse_double_word);
}

static int parse_pair(const char *text, long *a, long *b)
{
  char buf[64];
  if (strlen(text) >= sizeof buf)
    return -1;
  strcpy(buf, text);
  char *comma = strchr(buf, ',');
  if (!comma)
    return -1;
  *comma = '\0';
  return tiers_parse_long(buf, a) == 0 && tiers_parse_long(comma + 1, b) == 0 ? 0 : -1;
}

static const char *usage =
    "use --tests LIST (pingpong,allpairs,barrier,allreduce), --sizes LIST, --iters N, --skip N, "
    "--window N, --bw-iters N, --figure-time S, --max-blocks N, --pair A,B, --center BYTES, --factors LIST, --reps N, "
    "--warmup N, --cores-per-node C, --node-size P, --flat, --barrier-iters N, "
    "--barrier-threads T, --barrier-kinds mpi,hybrid, --timeout S, --yield, --quick";

static void parse_args(int argc, char **argv)
{
  int quick = 0;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
  opt.quick = quick;
  /* defaults: osu_latency / osu_bw loop counts; quick mode for surveys */
  opt.selected[TEST_PINGPONG] = opt.selected[TEST_BARRIER] = 1;
  /* per timed block; blocks repeat until the 95 % interval of the median
   * is within +-5 % (docs/statistics.md), --figure-time s pass or
   * --max-blocks are timed; --quick shortens the blocks and the time */
  opt.iters = quick ? 50 : 200;
  opt.skip = quick ? 20 : 100;
  opt.iters_large = quick ? 4 : 20;
  opt.skip_large = quick ? 2 : 10;
  opt.bw_iters = quick ? 2 : 5;
  opt.bw_skip = quick ? 2 : 10;
  opt.bw_iters_large = 1;
  opt.bw_skip_large = quick ? 1 : 2;
  opt.figure_time = quick ? 0.5 : 1.0;
  opt.max_blocks = quick ? 50 : MAX_BLOCKS;
  opt.window = 64;
  opt.pair_a = 0;
  opt.pair_b = 1;
  opt.center = 1.5e6;
  const double paper_factors[] = {0.667, 0.8, 1.0, 1.25, 1.5};
  opt.nfactors = 5;
  memcpy(opt.factors, paper_factors, sizeof paper_factors);
  opt.reps = quick ? 20 : 50; /* all pairs: times per size, at most */
  opt.warmup = 1;
  opt.cores_per_node = 1;
  opt.node_size = 0;
  opt.barrier_iters = quick ? 100 : 1000;
  opt.barrier_warmup = quick ? 10 : 100;
  opt.barrier_mpi = opt.barrier_hybrid = 1;
  opt.timeout = 60.0;
  opt.die_rank = -1;
  /* sizes: 0 and powers of two up to 4 MiB (quick: powers of four) */
  opt.nsizes = 0;
  opt.sizes[opt.nsizes++] = 0;
  for (uint64_t s = 1; s <= (4u << 20); s *= quick ? 4 : 2)
    opt.sizes[opt.nsizes++] = s;

  int iters_set = 0, skip_set = 0, bw_iters_set = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = 1;
    if (strcmp(a, "--quick") == 0) {
      takes = 0;
    } else if (strcmp(a, "--flat") == 0) {
      opt.flat = 1;
      takes = 0;
    } else if (strcmp(a, "--yield") == 0) {
      opt.yield = 1;
      takes = 0;
    } else if (!v || (strncmp(a, "--", 2) != 0)) {
      if (strncmp(a, "--", 2) == 0 && strstr(usage, a))
        fail_all("option %s needs a value", a);
      fail_all("unknown option %s (%s)", a, usage);
    } else if (strcmp(a, "--tests") == 0) {
      if (parse_test_list(v, opt.selected) != 0)
        fail_all("bad --tests '%s': a list among pingpong, allpairs, barrier, allreduce", v);
    } else if (strcmp(a, "--sizes") == 0) {
      opt.nsizes = parse_size_list(v, opt.sizes, MAX_SIZES);
      if (opt.nsizes < 0)
        fail_all("bad --sizes '%s': a list of at most %d byte sizes such as 0,8,1K,4M", v,
                 MAX_SIZES);
    } else if (strcmp(a, "--iters") == 0) {
      if (tiers_parse_long(v, &opt.iters) != 0 || opt.iters < 1)
        fail_all("bad --iters '%s': a positive integer", v);
      iters_set = 1;
    } else if (strcmp(a, "--skip") == 0) {
      if (tiers_parse_long(v, &opt.skip) != 0)
        fail_all("bad --skip '%s': a non-negative integer", v);
      skip_set = 1;
    } else if (strcmp(a, "--bw-iters") == 0) {
      if (tiers_parse_long(v, &opt.bw_iters) != 0 || opt.bw_iters < 1)
        fail_all("bad --bw-iters '%s': a positive integer", v);
      bw_iters_set = 1;
    } else if (strcmp(a, "--figure-time") == 0) {
      if (tiers_parse_double(v, &opt.figure_time) != 0 || !(opt.figure_time > 0))
        fail_all("bad --figure-time '%s': a positive number of seconds", v);
    } else if (strcmp(a, "--max-blocks") == 0) {
      if (tiers_parse_long(v, &opt.max_blocks) != 0 || opt.max_blocks < 1 ||
          opt.max_blocks > MAX_BLOCKS)
        fail_all("bad --max-blocks '%s': an integer from 1 to %d", v, MAX_BLOCKS);
    } else if (strcmp(a, "--window") == 0) {
      if (tiers_parse_long(v, &opt.window) != 0 || opt.window < 1 || opt.window > 4096)
        fail_all("bad --window '%s': an integer from 1 to 4096", v);
    } else if (strcmp(a, "--pair") == 0) {
      if (parse_pair(v, &opt.pair_a, &opt.pair_b) != 0 || opt.pair_a == opt.pair_b)
        fail_all("bad --pair '%s': two different ranks A,B", v);
    } else if (strcmp(a, "--center") == 0) {
      uint64_t c;
      if (tiers_parse_size(v, &c) != 0)
        fail_all("bad --center '%s': a byte size such as 1500000 or 1M", v);
      opt.center = (double)c;
    } else if (strcmp(a, "--factors") == 0) {
      opt.nfactors = parse_double_list(v, opt.factors, MAX_FACTORS);
      if (opt.nfactors < 0)
        fail_all("bad --factors '%s': at most %d positive numbers such as 0.667,1,1.5", v,
                 MAX_FACTORS);
    } else if (strcmp(a, "--reps") == 0) {
      if (tiers_parse_long(v, &opt.reps) != 0 || opt.reps < 1 || opt.reps > 100000)
        fail_all("bad --reps '%s': an integer from 1 to 100000", v);
    } else if (strcmp(a, "--warmup") == 0) {
      if (tiers_parse_long(v, &opt.warmup) != 0)
        fail_all("bad --warmup '%s': a non-negative integer", v);
    } else if (strcmp(a, "--cores-per-node") == 0) {
      if (tiers_parse_long(v, &opt.cores_per_node) != 0 || opt.cores_per_node < 1)
        fail_all("bad --cores-per-node '%s': a positive integer", v);
    } else if (strcmp(a, "--node-size") == 0) {
      if (tiers_parse_long(v, &opt.node_size) != 0 || opt.node_size < 1)
        fail_all("bad --node-size '%s': a positive integer", v);
    } else if (strcmp(a, "--barrier-iters") == 0) {
      if (tiers_parse_long(v, &opt.barrier_iters) != 0 || opt.barrier_iters < 1)
        fail_all("bad --barrier-iters '%s': a positive integer", v);
      opt.barrier_warmup = opt.barrier_iters / 10;
    } else if (strcmp(a, "--barrier-threads") == 0) {
      if (tiers_parse_long(v, &opt.barrier_threads) != 0 || opt.barrier_threads < 1 ||
          opt.barrier_threads > 4096)
        fail_all("bad --barrier-threads '%s': an integer from 1 to 4096", v);
    } else if (strcmp(a, "--barrier-kinds") == 0) {
      if (parse_barrier_kinds(v, &opt.barrier_mpi, &opt.barrier_hybrid) != 0)
        fail_all("bad --barrier-kinds '%s': a list among mpi, hybrid", v);
    } else if (strcmp(a, "--timeout") == 0) {
      if (tiers_parse_double(v, &opt.timeout) != 0)
        fail_all("bad --timeout '%s': a positive number of seconds", v);
    } else if (strcmp(a, "--die") == 0 || strcmp(a, "--stall") == 0) {
      /* test hook: --die R:TEST / --stall R:TEST */
      char buf[64];
      snprintf(buf, sizeof buf, "%s", v);
      char *colon = strchr(buf, ':');
      int t = -1;
      if (colon) {
        *colon = '\0';
        for (int k = 0; k < NTESTS; k++)
          if (strcmp(colon + 1, test_names[k]) == 0)
            t = k;
      }
      if (t < 0 || tiers_parse_long(buf, &opt.die_rank) != 0)
        fail_all("bad %s '%s': RANK:TEST", a, v);
      opt.die_test = t;
      opt.die_stall = strcmp(a, "--stall") == 0;
    } else {
      fail_all("unknown option %s (%s)", a, usage);
    }
    i += takes;
  }
  /* one --iters / --skip for all sizes when given, as osu's -i / -x */
  if (iters_set)
    opt.iters_large = opt.iters;
  if (skip_set)
    opt.skip_large = opt.skip;
  if (bw_iters_set)
    opt.bw_iters_large = opt.bw_iters;
}

/* ------------------------------------------------------------------ */
/* Placement                                                           */

typedef struct {
  char host[HOST_CHARS];
  char cpuset[SET_CHARS]; /* OS indices, hwloc list syntax */
  char pus[SET_CHARS];    /* logical indices, hwloc list syntax */
} place_t;

static place_t *places; /* every rank's, on every rank */
static int *node_of, *local_of; /* per rank */
static int nnodes;
static int **node_ranks; /* per node, its ranks in order */
static int *node_count;

static void read_own_place(place_t *me)
{
  memset(me, 0, sizeof *me);
  gethostname(me->host, sizeof me->host - 1);
  hwloc_topology_t hw;
  if (hwloc_topology_init(&hw) != 0)
    return;
  if (hwloc_topology_load(hw) == 0) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc(), logical = hwloc_bitmap_alloc();
    if (set && logical && hwloc_get_cpubind(hw, set, HWLOC_CPUBIND_PROCESS) == 0) {
      hwloc_bitmap_list_snprintf(me->cpuset, sizeof me->cpuset, set);
      int os;
      hwloc_bitmap_foreach_begin(os, set) {
        hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(hw, (unsigned)os);
        if (pu)
          hwloc_bitmap_set(logical, pu->logical_index);
      }
      hwloc_bitmap_foreach_end();
      hwloc_bitmap_list_snprintf(me->pus, sizeof me->pus, logical);
    }
    hwloc_bitmap_free(set);
    hwloc_bitmap_free(logical);
  }
  hwloc_topology_destroy(hw);
}

/* Gathers every rank's place and groups ranks into nodes. */
static void find_placement(void)
{
  place_t me;
  read_own_place(&me);
  places = calloc((size_t)nranks, sizeof *places);
  node_of = calloc((size_t)nranks, sizeof *node_of);
  local_of = calloc((size_t)nranks, sizeof *local_of);
  node_count = calloc((size_t)nranks, sizeof *node_count);
  node_ranks = calloc((size_t)nranks, sizeof *node_ranks);
  if (!places || !node_of || !local_of || !node_count || !node_ranks)
    fail_here("out of memory for the placement of %d ranks", nranks);
  coll_gather(&me, places, (int)sizeof me, MPI_COMM_WORLD, 1, "start-up");
  coll_bcast(places, (int)(sizeof me * (size_t)nranks), MPI_COMM_WORLD, 1, "start-up");

  nnodes = 0;
  for (int r = 0; r < nranks; r++) {
    int node = -1;
    if (opt.flat) {
      node = 0;
    } else if (opt.node_size > 0) {
      node = (int)(r / opt.node_size);
    } else {
      for (int q = 0; q < r && node < 0; q++)
        if (strcmp(places[q].host, places[r].host) == 0)
          node = node_of[q];
      if (node < 0)
        node = nnodes;
    }
    if (node >= nnodes)
      nnodes = node + 1;
    node_of[r] = node;
    local_of[r] = node_count[node]++;
  }
  for (int nd = 0; nd < nnodes; nd++) {
    node_ranks[nd] = malloc(sizeof(int) * (size_t)(node_count[nd] ? node_count[nd] : 1));
    if (!node_ranks[nd])
      fail_here("out of memory");
  }
  for (int r = 0; r < nranks; r++)
    node_ranks[node_of[r]][local_of[r]] = r;
}

/* ------------------------------------------------------------------ */
/* Ping-pong and streaming bandwidth                                   */

typedef struct {
  uint64_t bytes;
  long iters, skip, bw_iters, bw_skip; /* per block; warm-up before the first */
  int nrtt, nbw;                       /* blocks timed */
  int rtt_stop, bw_stop;               /* why sampling stopped (tiers_stats_stop_t) */
  double rtt[MAX_BLOCKS];              /* us per round trip, one value per block */
  double bwt[MAX_BLOCKS];              /* us per window, one value per block */
} pp_row_t;

/* The doubles a row travels as from rank a to rank 0. */
#define PP_WIRE (4 + 2 * MAX_BLOCKS)

static char *sbuf, *rbuf;

/*
 * Sends a ping-pong message.  Messages up to EAGER_BYTES go with MPI_Send:
 * every MPI library sends them eagerly (buffered, without waiting for the
 * receiver), so the call cannot block on a dead or stalled peer, and it
 * takes the library's fast path for short blocking sends, as osu_latency
 * does.  Longer messages go with MPI_Isend and a bounded wait.
 */
#define EAGER_BYTES 1024
static void send_bounded(int count, int peer, MPI_Request *req)
{
  if (count <= EAGER_BYTES) {
    MPI_Send(sbuf, count, MPI_BYTE, peer, TAG_PINGPONG, MPI_COMM_WORLD);
    return;
  }
  MPI_Isend(sbuf, count, MPI_BYTE, peer, TAG_PINGPONG, MPI_COMM_WORLD, req);
  wait_all(1, req, 0, "ping-pong", peer);
}

/*
 * One round trip of `count` bytes as osu_latency times it: the side that
 * starts sends with MPI_Send and waits in a blocking MPI_Recv, the other
 * receives, then answers.  Only for eager sizes outside --yield, under the
 * caller's deadline (deadline_arm): a receive posted in advance and
 * completed with MPI_Wait costs Open MPI's shared-memory transport 0.02-0.035
 * us more a one-way trip (0.21-0.25 against 0.18-0.22 us at 0 B, 6 of 6
 * interleaved runs on a 2-CPU EPYC guest), which the OSU suite's figure
 * does not include.
 */
static void round_trip_blocking(int count, int peer, int first, int tag)
{
  if (first) {
    MPI_Send(sbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    MPI_Recv(rbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(rbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(sbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
  }
}

/*
 * Rank a's repeat-until decision after a block, told to rank b (untimed):
 * returns the stop reason (0: go on) on both ranks.
 */
static int block_decision(const double *samples, int n, double elapsed, int peer,
                          const char *what)
{
  int why = 0;
  MPI_Request r;
  if (rank == opt.pair_a) {
    double scratch[MAX_BLOCKS];
    why = (int)tiers_stats_should_stop(samples, (size_t)n, scratch, (size_t)opt.max_blocks,
                                       elapsed, opt.figure_time);
    MPI_Isend(&why, 1, MPI_INT, peer, TAG_DECIDE, MPI_COMM_WORLD, &r);
  } else {
    MPI_Irecv(&why, 1, MPI_INT, peer, TAG_DECIDE, MPI_COMM_WORLD, &r);
  }
  wait_all(1, &r, 0, what, peer);
  return why;
}

/* One ping-pong round trip of `count` bytes: round_trip_blocking when
 * `blocking`, else each side's receive pre-posted, the sends bounded and
 * the wait polled (`req`: two requests). */
static void pingpong_round_trip(int count, int peer, int first, int blocking,
                                MPI_Request *req)
{
  if (blocking) {
    round_trip_blocking(count, peer, first, TAG_PINGPONG);
    return;
  }
  MPI_Irecv(rbuf, count, MPI_BYTE, peer, TAG_PINGPONG, MPI_COMM_WORLD, &req[0]);
  if (first)
    send_bounded(count, peer, &req[1]);
  wait_all(1, req, 0, "ping-pong", peer);
  if (!first)
    send_bounded(count, peer, &req[1]);
}

static void pingpong_size(uint64_t bytes, pp_row_t *row)
{
  int a = (int)opt.pair_a, b = (int)opt.pair_b;
  int large = bytes > LARGE_MESSAGE;
  row->bytes = bytes;
  row->iters = large ? opt.iters_large : opt.iters;
  row->skip = large ? opt.skip_large : opt.skip;
  row->bw_iters = large ? opt.bw_iters_large : opt.bw_iters;
  row->bw_skip = large ? opt.bw_skip_large : opt.bw_skip;
  row->nrtt = row->nbw = 0;
  row->rtt_stop = row->bw_stop = 0;
  int count = (int)bytes;
  MPI_Request req[4096 + 1];

  /* round trips, in blocks of row->iters after row->skip warm-up ones,
   * until the statistics layer's rule stops.  Eager-sized ones as
   * osu_latency times them (round_trip_blocking: MPI_Send, blocking
   * MPI_Recv) under the series deadline; larger ones, and every size with
   * --yield (ranks must give up the CPU), with the receive pre-posted, as
   * the MPI/MBCF paper measures, and a bounded, polling wait */
  if (rank == a || rank == b) {
    int peer = rank == a ? b : a;
    int blocking = count <= EAGER_BYTES && !opt.yield;
    double start = tiers_now();
    if (blocking)
      deadline_arm(peer, "ping-pong");
    for (long i = 0; i < row->skip; i++)
      pingpong_round_trip(count, peer, rank == a, blocking, req);
    if (blocking)
      deadline_disarm();
    for (;;) {
      if (blocking)
        deadline_arm(peer, "ping-pong");
      double t0 = tiers_now();
      for (long i = 0; i < row->iters; i++)
        pingpong_round_trip(count, peer, rank == a, blocking, req);
      row->rtt[row->nrtt++] = (tiers_now() - t0) * 1e6 / (double)row->iters;
      if (blocking)
        deadline_disarm();
      row->rtt_stop = block_decision(row->rtt, row->nrtt, tiers_now() - start, peer,
                                     "ping-pong");
      if (row->rtt_stop)
        break;
    }

    /* streaming bandwidth, osu_bw's window (no data in a 0-byte window):
     * blocks of row->bw_iters windows after row->bw_skip warm-up ones */
    if (bytes > 0) {
      int w = (int)opt.window;
      char ack[4] = {0};
      start = tiers_now();
      for (long i = 0;; i++) {
        int timed = i >= row->bw_skip;
        double t0 = tiers_now();
        for (long k = 0; k < (timed ? row->bw_iters : 1); k++) {
          if (rank == a) {
            for (int q = 0; q < w; q++)
              MPI_Isend(sbuf, count, MPI_BYTE, peer, TAG_BW, MPI_COMM_WORLD, &req[q]);
            wait_all(w, req, 0, "streaming bandwidth", peer);
            MPI_Irecv(ack, 4, MPI_BYTE, peer, TAG_ACK, MPI_COMM_WORLD, &req[0]);
            wait_all(1, req, 0, "streaming bandwidth", peer);
          } else {
            for (int q = 0; q < w; q++)
              MPI_Irecv(rbuf, count, MPI_BYTE, peer, TAG_BW, MPI_COMM_WORLD, &req[q]);
            wait_all(w, req, 0, "streaming bandwidth", peer);
            MPI_Isend(ack, 4, MPI_BYTE, peer, TAG_ACK, MPI_COMM_WORLD, &req[0]);
            wait_all(1, req, 0, "streaming bandwidth", peer);
          }
        }
        if (!timed)
          continue;
        row->bwt[row->nbw++] = (tiers_now() - t0) * 1e6 / (double)row->bw_iters;
        row->bw_stop = block_decision(row->bwt, row->nbw, tiers_now() - start, peer,
                                      "streaming bandwidth");
        if (row->bw_stop)
          break;
      }
    }
  }
  /* the samples are known on rank a; rank 0 needs them */
  if (a != 0 && (rank == a || rank == 0)) {
    double v[PP_WIRE];
    MPI_Request r;
    if (rank == a) {
      v[0] = row->nrtt;
      v[1] = row->nbw;
      v[2] = row->rtt_stop;
      v[3] = row->bw_stop;
      memcpy(v + 4, row->rtt, sizeof row->rtt);
      memcpy(v + 4 + MAX_BLOCKS, row->bwt, sizeof row->bwt);
      MPI_Isend(v, PP_WIRE, MPI_DOUBLE, 0, TAG_PINGPONG, MPI_COMM_WORLD, &r);
      wait_all(1, &r, 1, "ping-pong report", 0);
    } else {
      MPI_Irecv(v, PP_WIRE, MPI_DOUBLE, a, TAG_PINGPONG, MPI_COMM_WORLD, &r);
      wait_all(1, &r, 1, "ping-pong report", a);
      row->nrtt = (int)v[0];
      row->nbw = (int)v[1];
      row->rtt_stop = (int)v[2];
      row->bw_stop = (int)v[3];
      memcpy(row->rtt, v + 4, sizeof row->rtt);
      memcpy(row->bwt, v + 4 + MAX_BLOCKS, sizeof row->bwt);
    }
  }
  barrier_bounded(MPI_COMM_WORLD, "a ping-pong size");
}

/* ------------------------------------------------------------------ */
/* All pairs                                                           */

typedef struct {
  int phase, units, m, steps, rounds, cores;
  double seconds;
} phase_t;

/* One measured pair, kept by the initiating (lower) rank:
 * [phase, step, round, a, b, then per size: the count of one-way times (us)
 * and opt.reps slots for them, then the count of latency blocks and
 * AP_LAT_BLOCKS slots].  Every figure of a pair repeats by the statistics
 * layer's rule: until its 95 % interval of the median is within +-5 %,
 * ap_figure_time() seconds pass, or its slots are full. */
#define PAIR_HEAD 5
#define AP_LAT_BLOCKS 50 /* small-message latency blocks per pair, at most ... */
/* ... of ap_lat_iters() round trips: the ping-pong's --iters (50 with
 * --quick, else 200), not 10 -- the untimed decision after every block left
 * the first round trips of the next one out of step, and blocks of 10 held
 * few undisturbed ones */
static long ap_lat_iters(void)
{
  return opt.iters;
}
static double *pair_recs;
static int pair_nrec, pair_cap, pair_len;
static uint64_t ap_sizes[MAX_FACTORS];

/* Seconds per all-pairs figure (one size, or the latency, of one pair). */
static double ap_figure_time(void)
{
  return opt.figure_time / 10;
}

/* Offset in a pair record of size f's count (its times follow). */
static size_t ap_size_at(int f)
{
  return PAIR_HEAD + (size_t)f * (size_t)(1 + opt.reps);
}

/* Offset of the latency blocks' count (the blocks follow). */
static size_t ap_lat_at(void)
{
  return ap_size_at(opt.nfactors);
}

/*
 * The repeat-until decision of one all-pairs figure, taken by the pair's
 * initiator on its samples and told to the other rank (untimed): returns
 * nonzero on both when sampling stops.
 */
static int pair_decision(int initiator, const double *x, int n, int cap, double elapsed, int peer,
                         int tag)
{
  int why = 0;
  MPI_Request r;
  if (initiator) {
    double *tmp = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!tmp)
      fail_here("out of memory");
    why = (int)tiers_stats_should_stop(x, (size_t)n, tmp, (size_t)cap, elapsed,
                                       ap_figure_time());
    free(tmp);
    MPI_Isend(&why, 1, MPI_INT, peer, tag, MPI_COMM_WORLD, &r);
  } else {
    MPI_Irecv(&why, 1, MPI_INT, peer, tag, MPI_COMM_WORLD, &r);
  }
  wait_all(1, &r, 0, "all-pairs decision", peer);
  return why;
}

static int ceil_log2(int n)
{
  int m = 0;
  while ((1 << m) < n)
    m++;
  return m;
}

static void exchange_pair(int phase, int step, int round, int peer)
{
  int initiator = rank < peer;
  double *rec = NULL;
  if (initiator) {
    if (pair_nrec == pair_cap) {
      pair_cap = pair_cap ? 2 * pair_cap : 16;
      double *grown = realloc(pair_recs, sizeof(double) * (size_t)pair_cap * (size_t)pair_len);
      if (!grown)
        fail_here("out of memory for the all-pairs results");
      pair_recs = grown;
    }
    rec = pair_recs + (size_t)pair_nrec++ * (size_t)pair_len;
    rec[0] = phase;
    rec[1] = step;
    rec[2] = round;
    rec[3] = rank;
    rec[4] = peer;
  }
  int tag = TAG_PAIR + (phase * 4096 + step) % 30000;
  MPI_Request req[2];
  double lat[AP_LAT_BLOCKS], *times = malloc(sizeof(double) * (size_t)opt.reps);
  if (!times)
    fail_here("out of memory");
  /* the small-message latency of the pair: blocks of ap_lat_iters() 0-byte
   * round trips after as many warm-up ones, repeated by the
   * statistics layer's rule; the fit's intercept is often not a usable
   * latency (docs/statistics.md).  Each round trip is the ping-pong test's
   * (pingpong_size): osu_latency's MPI_Send and blocking MPI_Recv
   * (round_trip_blocking) under one deadline for the whole series (polling
   * with MPI_Test cost ~0.02 us more a one-way trip: 0.28 against 0.26 us
   * on 2 ranks of one machine), the receive pre-posted and polled only
   * with --yield, so that the pair's latency is the same quantity as the
   * ping-pong's 0-byte one. */
  int nlat = 0;
  int blocking = !opt.yield;
  double start = tiers_now();
  for (int blk = -1; blk < AP_LAT_BLOCKS; blk++) {
    if (blocking)
      deadline_arm(peer, "all-pairs latency");
    double t0 = tiers_now();
    for (long i = 0; i < ap_lat_iters(); i++) {
      if (blocking) {
        round_trip_blocking(0, peer, initiator, tag);
        continue;
      }
      MPI_Irecv(rbuf, 0, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[0]);
      if (initiator)
        MPI_Send(sbuf, 0, MPI_BYTE, peer, tag, MPI_COMM_WORLD); /* eager: returns at once */
      wait_all(1, req, 0, "all-pairs latency", peer);
      if (!initiator)
        MPI_Send(sbuf, 0, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    }
    double t1 = tiers_now();
    if (blocking)
      deadline_disarm();
    if (blk < 0)
      continue;
    lat[nlat++] = (t1 - t0) * 1e6 / (2.0 * (double)ap_lat_iters());
    if (pair_decision(initiator, lat, nlat, AP_LAT_BLOCKS, tiers_now() - start, peer,
                      TAG_DECIDE))
      break;
  }
  if (initiator) {
    rec[ap_lat_at()] = nlat;
    memcpy(rec + ap_lat_at() + 1, lat, sizeof(double) * (size_t)nlat);
  }
  for (int f = 0; f < opt.nfactors; f++) {
    int count = (int)ap_sizes[f];
    int n = 0;
    for (long i = 0; i < opt.warmup; i++) {
      MPI_Irecv(rbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[0]);
      if (initiator) {
        MPI_Isend(sbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[1]);
        wait_all(2, req, 0, "all-pairs exchange", peer);
      } else {
        wait_all(1, req, 0, "all-pairs exchange", peer);
        MPI_Isend(sbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[1]);
        wait_all(1, req + 1, 0, "all-pairs exchange", peer);
      }
    }
    start = tiers_now();
    for (;;) {
      double t0 = tiers_now();
      if (initiator) {
        MPI_Irecv(rbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(sbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[1]);
        wait_all(2, req, 0, "all-pairs exchange", peer);
        times[n] = (tiers_now() - t0) * 1e6 / 2;
      } else {
        MPI_Irecv(rbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[0]);
        wait_all(1, req, 0, "all-pairs exchange", peer);
        MPI_Isend(sbuf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[1]);
        wait_all(1, req + 1, 0, "all-pairs exchange", peer);
      }
      n++;
      if (pair_decision(initiator, times, n, (int)opt.reps, tiers_now() - start, peer,
                        TAG_DECIDE))
        break;
    }
    if (initiator) {
      rec[ap_size_at(f)] = n;
      memcpy(rec + ap_size_at(f) + 1, times, sizeof(double) * (size_t)n);
    }
  }
  free(times);
}

/* Runs both phases; fills phases[0..1]. */
static void all_pairs(phase_t *phases)
{
  pair_len = (int)ap_lat_at() + 1 + AP_LAT_BLOCKS;
  int me_node = node_of[rank], me_local = local_of[rank];

  /* intra: the ranks of every node, all nodes at once */
  int max_local = 0;
  for (int nd = 0; nd < nnodes; nd++)
    if (node_count[nd] > max_local)
      max_local = node_count[nd];
  phase_t *p = &phases[PHASE_INTRA];
  p->phase = PHASE_INTRA;
  p->units = max_local;
  p->m = ceil_log2(max_local);
  p->steps = (1 << p->m) - 1;
  p->cores = 1;
  p->rounds = p->steps;
  double t0 = MPI_Wtime();
  for (int k = 1; k <= p->steps; k++) {
    int partner = me_local ^ k;
    if (partner < node_count[me_node])
      exchange_pair(PHASE_INTRA, k, k, node_ranks[me_node][partner]);
    barrier_bounded(MPI_COMM_WORLD, "an all-pairs step");
  }
  p->seconds = MPI_Wtime() - t0;

  /* inter: the nodes, c ranks of each at once */
  p = &phases[PHASE_INTER];
  p->phase = PHASE_INTER;
  p->units = nnodes;
  p->m = ceil_log2(nnodes);
  p->steps = (1 << p->m) - 1;
  p->cores = (int)opt.cores_per_node;
  p->rounds = (p->steps + p->cores - 1) / p->cores;
  t0 = MPI_Wtime();
  for (int r = 0; r < p->rounds; r++) {
    int k = r * p->cores + me_local + 1;
    if (me_local < p->cores && k <= p->steps) {
      int partner_node = me_node ^ k;
      if (partner_node < nnodes)
        exchange_pair(PHASE_INTER, k, r + 1, node_ranks[partner_node][me_local]);
    }
    barrier_bounded(MPI_COMM_WORLD, "an all-pairs round");
  }
  p->seconds = MPI_Wtime() - t0;
}

/* Brings every rank's pair records to rank 0; returns their count there. */
static int gather_pairs(double **all)
{
  int mine = pair_nrec * pair_len;
  int *counts = rank == 0 ? calloc((size_t)nranks, sizeof(int)) : NULL;
  int *offsets = rank == 0 ? calloc((size_t)nranks, sizeof(int)) : NULL;
  if (rank == 0 && (!counts || !offsets))
    fail_here("out of memory");
  coll_gather(&mine, counts, (int)sizeof mine, MPI_COMM_WORLD, 1,
              "gathering the all-pairs results");
  long total = 0;
  if (rank == 0) {
    for (int r = 0; r < nranks; r++) {
      offsets[r] = (int)total;
      total += counts[r];
    }
    if (total > (long)INT32_MAX)
      fail_here("too many all-pairs results to gather (use fewer --reps or factors)");
    *all = malloc(sizeof(double) * (size_t)(total ? total : 1));
    if (!*all)
      fail_here("out of memory for the all-pairs results");
  }
  /* then every rank's records, each rank's in one message to rank 0 */
  if (rank != 0) {
    MPI_Request req;
    MPI_Isend(pair_recs, mine, MPI_DOUBLE, 0, TAG_COLL, MPI_COMM_WORLD, &req);
    wait_all(1, &req, 1, "gathering the all-pairs results", -1);
  } else {
    if (mine > 0)
      memcpy(*all, pair_recs, sizeof(double) * (size_t)mine);
    MPI_Request *req = malloc(sizeof *req * (size_t)(nranks > 1 ? nranks - 1 : 1));
    if (!req)
      fail_here("out of memory");
    for (int r = 1; r < nranks; r++)
      MPI_Irecv(*all + offsets[r], counts[r], MPI_DOUBLE, r, TAG_COLL, MPI_COMM_WORLD,
                &req[r - 1]);
    wait_all(nranks - 1, req, 1, "gathering the all-pairs results", -1);
    free(req);
  }
  free(counts);
  free(offsets);
  return rank == 0 ? (int)(total / pair_len) : 0;
}

/* ------------------------------------------------------------------ */
/* Barrier                                                             */

typedef struct {
  int ranks;
  int threads; /* per process; 1 for MPI_Barrier */
  double min_us, avg_us, max_us;
} barrier_row_t;

static int barrier_counts(int *counts)
{
  int n = 0;
  if (nranks <= 16) {
    for (int p = 2; p <= nranks; p++)
      counts[n++] = p;
  } else {
    for (int p = 2; p < nranks; p *= 2)
      counts[n++] = p;
    counts[n++] = nranks;
  }
  return n;
}

/* ------------------------------------------------------------------ */
/* Allreduce                                                           */

#define ALLREDUCE_BYTES 8 /* one double, MPI_SUM: osu_allreduce's 8 B figure */
#define COLL_BLOCK_MIN 100 /* timed calls per collective block, at least */

typedef struct {
  int ranks;
  double min_us, avg_us, max_us; /* over ranks, of each rank's mean time per call */
  int nblocks;
  double blocks[MAX_BLOCKS]; /* per block: mean over ranks of the time per call (us) */
  int stop;                  /* why sampling stopped (tiers_stats_stop_t) */
} allreduce_row_t;

/* Timed calls per block of a collective series: --barrier-iters / 10, at
 * least COLL_BLOCK_MIN. */
static long coll_block_calls(void)
{
  return opt.barrier_iters / 10 > COLL_BLOCK_MIN ? opt.barrier_iters / 10 : COLL_BLOCK_MIN;
}

/*
 * MPI_Allreduce of 8 B (allreduce != 0) or MPI_Barrier over the first p
 * ranks, as osu_allreduce and osu_barrier time them (warm-up calls, then
 * every call timed on its own -- an allreduce followed by an untimed
 * MPI_Barrier -- and summed; each rank's mean time per call; min, mean and
 * max over the ranks), the timed calls cut into blocks of --barrier-iters / 10 calls
 * (at least COLL_BLOCK_MIN) that repeat until the statistics layer's rule stops (rank
 * 0 decides after each untimed reduction of the block times).
 */
static void collective_series(int p, int allreduce, allreduce_row_t *row)
{
  const char *what = allreduce ? "the allreduce test" : "the barrier test";
  barrier_bounded(MPI_COMM_WORLD, what);
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < p ? 0 : MPI_UNDEFINED, rank, &sub);
  if (sub == MPI_COMM_NULL)
    return;
  /* blocks of at least COLL_BLOCK_MIN calls: the untimed decision after a
   * block and the barrier that lines the ranks up again leave the first
   * calls of the next block out of step; with blocks of 10 (--quick's 100
   * calls / 10) those calls were a third of every block, and 2-rank
   * MPI_Barrier read 0.33 or 0.43 us by the block (the mean over a launch
   * moved with their mix) against 0.31-0.33 us in blocks of 100 or more */
  long per_block = coll_block_calls();
  double in = 1.0 + rank, out = 0;
  for (long i = 0; i < (opt.barrier_warmup > 0 ? opt.barrier_warmup : 1); i++) {
    if (allreduce)
      MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, sub);
    else
      MPI_Barrier(sub);
  }
  if (allreduce && out != (double)p * (p + 1) / 2)
    fail_here("MPI_Allreduce over %d ranks gave %g, not %g", p, out, (double)p * (p + 1) / 2);
  double total = 0, start = tiers_now();
  long calls = 0;
  int n = 0, why = 0;
  while (!why) {
    /* the ranks leave the decision at different times: line them up with
     * blocking calls (as osu_allreduce's barrier before its timed loop) */
    MPI_Barrier(sub);
    /* each call timed on its own, as the OSU benchmarks do; an allreduce
     * is followed by an untimed MPI_Barrier (osu_allreduce), so that every
     * timed call starts with the ranks together instead of overlapping the
     * previous one */
    double t = 0;
    if (allreduce) {
      for (long i = 0; i < per_block; i++) {
        double t0 = tiers_now();
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, sub);
        t += tiers_now() - t0;
        MPI_Barrier(sub);
      }
    } else {
      for (long i = 0; i < per_block; i++) {
        double t0 = tiers_now();
        MPI_Barrier(sub);
        t += tiers_now() - t0;
      }
    }
    total += t;
    calls += per_block;
    double mine = t * 1e6 / (double)per_block, sum = 0, lo_b, hi_b;
    coll_reduce3(mine, &lo_b, &hi_b, &sum, sub, 0, what);
    if (rank == 0) {
      row->blocks[n] = sum / p;
      double scratch[MAX_BLOCKS];
      why = (int)tiers_stats_should_stop(row->blocks, (size_t)(n + 1), scratch,
                                         (size_t)opt.max_blocks, tiers_now() - start,
                                         opt.figure_time);
    }
    n++;
    coll_bcast(&why, (int)sizeof why, sub, 0, what);
  }
  double mine = total * 1e6 / (double)calls, lo, hi, sum;
  coll_reduce3(mine, &lo, &hi, &sum, sub, 1, what);
  row->ranks = p;
  row->min_us = lo;
  row->max_us = hi;
  row->avg_us = sum / p;
  row->nblocks = n;
  row->stop = why;
  MPI_Comm_free(&sub);
}

/* One collective row's members: min/avg/max over ranks, the blocks' summary. */
static void write_coll_row(tiers_json_t *j, const allreduce_row_t *r)
{
  double scratch[MAX_BLOCKS];
  tiers_stats_t s;
  tiers_stats_summarize(r->blocks, (size_t)r->nblocks, scratch, &s);
  tiers_json_kv_int(j, "ranks", r->ranks);
  tiers_json_kv_double(j, "min_us", r->min_us);
  tiers_json_kv_double(j, "avg_us", r->avg_us);
  tiers_json_kv_double(j, "max_us", r->max_us);
  tiers_stats_json(j, "block_", &s);
  tiers_json_kv_string(j, "stopped", tiers_stats_stop_name((tiers_stats_stop_t)r->stop));
  tiers_json_kv_double_array(j, "blocks_us", r->blocks, (size_t)r->nblocks);
}

static void write_allreduce(tiers_json_t *j, const allreduce_row_t *rows, int n, double seconds)
{
  tiers_json_key(j, "allreduce");
  tiers_json_object_begin(j);
  tiers_json_kv_int(j, "bytes", ALLREDUCE_BYTES);
  tiers_json_key(j, "rows");
  tiers_json_array_begin(j);
  for (int i = 0; i < n; i++) {
    tiers_json_object_begin(j);
    write_coll_row(j, &rows[i]);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
  tiers_json_kv_double(j, "seconds", seconds);
  tiers_json_object_end(j);
}

/*
 * The hybrid barrier (libtiers-hybrid's tiers_team_barrier).
 *
 * Threads per process: --barrier-threads, or 2 where every rank has 2 PUs
 * of its own -- the PUs of its cpuset divided by the ranks of its host whose
 * cpusets overlap it -- else 1, so that the default never puts more threads
 * than PUs on a host.  The team's threads are pinned (compact) when this
 * rank's cpuset shares no PU with another rank of its host; otherwise --
 * unbound or overlapping ranks, or more ranks than cores -- compact
 * pinning would stack several ranks' threads on the same PUs, so the OS
 * places them.
 */

/* Counts the PUs of a list such as "0-3,8" (0 when it cannot be read). */
static int count_pus(const char *list)
{
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  int n = 0;
  if (set && list[0] && hwloc_bitmap_list_sscanf(set, list) == 0)
    n = hwloc_bitmap_weight(set);
  hwloc_bitmap_free(set);
  return n > 0 ? n : 0;
}

static int hybrid_threads(void)
{
  if (opt.barrier_threads > 0)
    return (int)opt.barrier_threads;
  int pus = count_pus(places[rank].pus);
  int sharing = 0; /* ranks of this host whose cpusets overlap this rank's, itself included */
  hwloc_bitmap_t mine_set = hwloc_bitmap_alloc(), other = hwloc_bitmap_alloc();
  if (mine_set && other && hwloc_bitmap_list_sscanf(mine_set, places[rank].cpuset) == 0) {
    for (int r = 0; r < nranks; r++)
      if (strcmp(places[r].host, places[rank].host) == 0 &&
          hwloc_bitmap_list_sscanf(other, places[r].cpuset) == 0 &&
          hwloc_bitmap_intersects(mine_set, other))
        sharing++;
  }
  hwloc_bitmap_free(mine_set);
  hwloc_bitmap_free(other);
  if (sharing < 1)
    sharing = 1;
  double mine = pus / sharing >= 2 ? 2 : 1, lo = 1, hi, sum;
  coll_reduce3(mine, &lo, &hi, &sum, MPI_COMM_WORLD, 1, "start-up");
  int all = (int)lo;
  coll_bcast(&all, (int)sizeof all, MPI_COMM_WORLD, 1, "start-up");
  return all;
}

static tiers_pin_policy_t hybrid_pin(void)
{
  if (opt.yield)
    return TIERS_PIN_NONE;
  hwloc_bitmap_t mine = hwloc_bitmap_alloc(), other = hwloc_bitmap_alloc();
  int own = mine && other && places[rank].cpuset[0] &&
            hwloc_bitmap_list_sscanf(mine, places[rank].cpuset) == 0 &&
            !hwloc_bitmap_iszero(mine);
  for (int r = 0; own && r < nranks; r++) {
    if (r == rank || strcmp(places[r].host, places[rank].host) != 0)
      continue;
    if (!places[r].cpuset[0] || hwloc_bitmap_list_sscanf(other, places[r].cpuset) != 0 ||
        hwloc_bitmap_intersects(mine, other))
      own = 0;
  }
  hwloc_bitmap_free(mine);
  hwloc_bitmap_free(other);
  return own ? TIERS_PIN_COMPACT : TIERS_PIN_NONE;
}

/* What the watchdog of a hybrid series watches. */
typedef struct {
  atomic_long progress; /* episodes the master has finished */
  atomic_int stop;      /* set when the series is over */
  int ranks, threads;
} watch_t;

/*
 * The deadline of the hybrid barrier: MPI_Barrier inside it blocks, so a
 * thread of its own checks every 10 ms that the master still finishes
 * episodes.  When none finishes within --timeout seconds it says so and
 * leaves the process (no MPI call: only the master thread may make them),
 * which makes the launcher end the job.
 */
static void *watchdog(void *arg)
{
  watch_t *w = arg;
  const struct timespec nap = {0, 10 * 1000 * 1000};
  long seen = -1;
  double since = tiers_now();
  while (!atomic_load(&w->stop)) {
    nanosleep(&nap, NULL);
    long now = atomic_load_explicit(&w->progress, memory_order_relaxed);
    if (now != seen) {
      seen = now;
      since = tiers_now();
    } else if (tiers_now() - since > opt.timeout) {
      fprintf(stderr, "tiers-probe-net: error: rank %d: no hybrid barrier over %d ranks x %d "
              "threads completed within %g s; a rank may have died or stalled, or use "
              "--timeout to wait longer\n", rank, w->ranks, w->threads, opt.timeout);
      fflush(stderr);
      _exit(TIERS_TOOL_EXIT_USAGE);
    }
  }
  return NULL;
}

typedef struct {
  long warmup, iters;
  double seconds; /* of the timed episodes, on the master */
  watch_t *watch;
} episodes_t;

/* One series in one parallel region: every team thread runs it. */
static int hybrid_episodes(tiers_team_t team, int thread, void *arg)
{
  episodes_t *e = arg;
  long done = 0;
  double t0 = 0;
  for (long i = 0; i < e->warmup + e->iters; i++) {
    if (i == e->warmup && thread == 0)
      t0 = tiers_now();
    int rc = tiers_team_barrier(team);
    if (rc != TIERS_OK)
      return rc;
    if (thread == 0)
      atomic_store_explicit(&e->watch->progress, ++done, memory_order_relaxed);
  }
  if (thread == 0)
    e->seconds = tiers_now() - t0;
  return TIERS_OK;
}

/* Warm-up episodes of the hybrid barrier: as MPI_Barrier's, at least one,
 * so that the timed episodes never include the threads' start. */
static long hybrid_warmup(void)
{
  return opt.barrier_warmup > 0 ? opt.barrier_warmup : 1;
}

static void hybrid_barrier_series(int p, int threads, tiers_pin_policy_t pin,
                                  barrier_row_t *row)
{
  barrier_bounded(MPI_COMM_WORLD, "the hybrid barrier test");
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < p ? 0 : MPI_UNDEFINED, rank, &sub);
  if (sub == MPI_COMM_NULL)
    return;
  tiers_team_t team = NULL;
  if (tiers_team_create(&team, sub, threads, pin) != TIERS_OK)
    fail_here("cannot start a team of %d threads: %s", threads, tiers_last_error());
  watch_t watch = {.ranks = p, .threads = threads};
  atomic_init(&watch.progress, 0);
  atomic_init(&watch.stop, 0);
  pthread_t tid;
  int watched = pthread_create(&tid, NULL, watchdog, &watch) == 0;
  episodes_t e = {.warmup = hybrid_warmup(), .iters = opt.barrier_iters, .watch = &watch};
  int rc = tiers_team_parallel(team, hybrid_episodes, &e);
  atomic_store(&watch.stop, 1);
  if (watched)
    pthread_join(tid, NULL);
  if (rc != TIERS_OK)
    fail_here("the hybrid barrier over %d ranks x %d threads failed: %s", p, threads,
              tiers_last_error());
  double mine = e.seconds * 1e6 / (double)opt.barrier_iters, lo, hi, sum;
  coll_reduce3(mine, &lo, &hi, &sum, sub, 1, "the hybrid barrier test");
  row->ranks = p;
  row->threads = threads;
  row->min_us = lo;
  row->max_us = hi;
  row->avg_us = sum / p;
  tiers_team_destroy(&team);
  MPI_Comm_free(&sub);
}

/* ------------------------------------------------------------------ */
/* Output                                                              */

static void json_sizes(tiers_json_t *j, const char *key, const uint64_t *v, int n)
{
  tiers_json_key(j, key);
  tiers_json_array_begin(j);
  for (int i = 0; i < n; i++)
    tiers_json_int(j, (int64_t)v[i]);
  tiers_json_array_end(j);
}

static void write_params(tiers_json_t *j, int hthreads, tiers_pin_policy_t hpin)
{
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  MPI_Get_library_version(library, &len);
  char *nl = strchr(library, '\n');
  if (nl)
    *nl = '\0';
  tiers_json_key(j, "params");
  tiers_json_object_begin(j);
  tiers_json_kv_int(j, "ranks", nranks);
  tiers_json_key(j, "tests");
  tiers_json_array_begin(j);
  for (int t = 0; t < NTESTS; t++)
    if (opt.selected[t])
      tiers_json_string(j, test_names[t]);
  tiers_json_array_end(j);
  tiers_json_kv_bool(j, "quick", opt.quick);
  tiers_json_kv_double(j, "timeout_s", opt.timeout);
  tiers_json_kv_bool(j, "yield", opt.yield);
  tiers_json_kv_string(j, "mpi_library", library);
  tiers_json_kv_string(j, "clock", "clock_gettime(CLOCK_MONOTONIC)");
  tiers_json_key(j, "pingpong");
  tiers_json_object_begin(j);
  json_sizes(j, "sizes", opt.sizes, opt.nsizes);
  int64_t pair[2] = {opt.pair_a, opt.pair_b};
  tiers_json_kv_int_array(j, "pair", pair, 2);
  tiers_json_kv_int(j, "iters", opt.iters);
  tiers_json_kv_int(j, "skip", opt.skip);
  tiers_json_kv_int(j, "iters_large", opt.iters_large);
  tiers_json_kv_int(j, "skip_large", opt.skip_large);
  tiers_json_kv_int(j, "large_above_bytes", LARGE_MESSAGE);
  tiers_json_kv_int(j, "bw_iters", opt.bw_iters);
  tiers_json_kv_int(j, "bw_skip", opt.bw_skip);
  tiers_json_kv_int(j, "bw_iters_large", opt.bw_iters_large);
  tiers_json_kv_int(j, "bw_skip_large", opt.bw_skip_large);
  tiers_json_kv_int(j, "window", opt.window);
  tiers_json_kv_double(j, "figure_time_s", opt.figure_time);
  tiers_json_kv_int(j, "max_blocks", opt.max_blocks);
  tiers_json_kv_string(j, "statistics",
                       "per size, blocks of iters round trips (bw_iters windows) repeated "
                       "until the 95 % CI of the median block is within +-5 %, figure_time_s "
                       "pass or max_blocks are timed (docs/statistics.md); best = fastest "
                       "block, median beside it");
  tiers_json_object_end(j);
  tiers_json_key(j, "allpairs");
  tiers_json_object_begin(j);
  tiers_json_kv_double(j, "center_bytes", opt.center);
  tiers_json_kv_double_array(j, "factors", opt.factors, (size_t)opt.nfactors);
  json_sizes(j, "sizes", ap_sizes, opt.nfactors);
  tiers_json_kv_int(j, "reps", opt.reps);
  tiers_json_kv_int(j, "warmup", opt.warmup);
  tiers_json_kv_int(j, "cores_per_node", opt.cores_per_node);
  tiers_json_kv_int(j, "node_size", opt.node_size);
  tiers_json_kv_bool(j, "flat", opt.flat);
  tiers_json_kv_string(j, "time", "one-way time = round trip / 2, per repetition");
  tiers_json_kv_int(j, "latency_blocks", AP_LAT_BLOCKS); /* at most */
  tiers_json_kv_double(j, "figure_time_s", ap_figure_time());
  tiers_json_kv_string(j, "statistics",
                       "per pair, every size's one-way times and the latency blocks repeat "
                       "until the 95 % CI of the median is within +-5 %, figure_time_s pass "
                       "or reps (latency_blocks) are taken (docs/statistics.md)");
  tiers_json_kv_int(j, "latency_iters", ap_lat_iters());
  tiers_json_kv_int(j, "latency_bytes", 0);
  tiers_json_object_end(j);
  tiers_json_key(j, "barrier");
  tiers_json_object_begin(j);
  tiers_json_kv_int(j, "iters", opt.barrier_iters);
  tiers_json_kv_int(j, "warmup", opt.barrier_warmup);
  tiers_json_kv_int(j, "block_calls", coll_block_calls());
  if (opt.selected[TEST_BARRIER]) {
    tiers_json_key(j, "kinds");
    tiers_json_array_begin(j);
    if (opt.barrier_mpi)
      tiers_json_string(j, "mpi");
    if (opt.barrier_hybrid)
      tiers_json_string(j, "hybrid");
    tiers_json_array_end(j);
  }
  if (opt.selected[TEST_BARRIER] && opt.barrier_hybrid) {
    tiers_json_kv_int(j, "threads", hthreads);
    tiers_json_kv_int(j, "hybrid_warmup", hybrid_warmup());
    tiers_json_kv_string(j, "pin", hpin == TIERS_PIN_COMPACT ? "compact" : "none");
  }
  tiers_json_object_end(j);
  tiers_json_object_end(j);
}

/*
 * One ping-pong size: the per-block samples, their summary by the
 * statistics layer, and the figures derived from it -- the best block (the
 * lowest time, so the highest rate) and the median block beside it.
 */
static void write_pp_row(tiers_json_t *j, const pp_row_t *r)
{
  double scratch[MAX_BLOCKS];
  tiers_stats_t rs, bs;
  tiers_stats_summarize(r->rtt, (size_t)r->nrtt, scratch, &rs);
  tiers_stats_summarize(r->bwt, (size_t)r->nbw, scratch, &bs);
  double bytes = (double)r->bytes;
  /* bytes per microsecond is MB/s */
  double bytes_window = bytes * (double)opt.window;
  tiers_json_object_begin(j);
  tiers_json_kv_int(j, "bytes", (int64_t)r->bytes);
  tiers_json_kv_int(j, "iters", r->iters);
  tiers_json_kv_int(j, "skip", r->skip);
  tiers_json_kv_double(j, "rtt_us", rs.min);
  tiers_json_kv_double(j, "rtt_median_us", rs.median);
  tiers_json_kv_double(j, "latency_us", rs.min / 2);
  tiers_json_kv_double(j, "latency_median_us", rs.median / 2);
  /* ping-pong bandwidth: bytes per one-way time */
  tiers_json_kv_double(j, "pingpong_mbps", r->bytes ? bytes / (rs.min / 2) : NAN);
  tiers_json_kv_double(j, "pingpong_median_mbps", r->bytes ? bytes / (rs.median / 2) : NAN);
  tiers_stats_json(j, "rtt_", &rs);
  tiers_json_kv_string(j, "rtt_stopped", tiers_stats_stop_name((tiers_stats_stop_t)r->rtt_stop));
  tiers_json_kv_double_array(j, "rtt_samples_us", r->rtt, (size_t)r->nrtt);
  tiers_json_kv_int(j, "bw_iters", r->bytes ? r->bw_iters : 0);
  tiers_json_kv_int(j, "bw_skip", r->bytes ? r->bw_skip : 0);
  tiers_json_kv_int(j, "bw_window", opt.window);
  tiers_json_kv_double(j, "bw_mbps", r->nbw ? bytes_window / bs.min : NAN);
  tiers_json_kv_double(j, "bw_median_mbps", r->nbw ? bytes_window / bs.median : NAN);
  if (r->nbw) {
    tiers_stats_json(j, "bw_window_", &bs);
    tiers_json_kv_bool(j, "bw_noisy", bs.noisy);
    tiers_json_kv_string(j, "bw_stopped",
                         tiers_stats_stop_name((tiers_stats_stop_t)r->bw_stop));
  }
  tiers_json_kv_double_array(j, "bw_window_samples_us", r->bwt, (size_t)r->nbw);
  tiers_json_object_end(j);
}

static void write_placement(tiers_json_t *j)
{
  tiers_json_key(j, "placement");
  tiers_json_array_begin(j);
  for (int r = 0; r < nranks; r++) {
    tiers_json_object_begin(j);
    tiers_json_kv_int(j, "rank", r);
    tiers_json_kv_string(j, "host", places[r].host);
    tiers_json_kv_string(j, "cpuset", places[r].cpuset);
    tiers_json_kv_string(j, "pus", places[r].pus);
    tiers_json_kv_int(j, "node", node_of[r]);
    tiers_json_kv_int(j, "local", local_of[r]);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
  tiers_json_key(j, "nodes");
  tiers_json_array_begin(j);
  for (int nd = 0; nd < nnodes; nd++) {
    tiers_json_object_begin(j);
    tiers_json_kv_int(j, "node", nd);
    tiers_json_kv_string(j, "host", places[node_ranks[nd][0]].host);
    tiers_json_key(j, "ranks");
    tiers_json_array_begin(j);
    for (int q = 0; q < node_count[nd]; q++)
      tiers_json_int(j, node_ranks[nd][q]);
    tiers_json_array_end(j);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
}

static int cmp_rec(const void *x, const void *y)
{
  const double *a = x, *b = y;
  for (int k = 0; k < PAIR_HEAD; k++)
    if (a[k] != b[k])
      return a[k] < b[k] ? -1 : 1;
  return 0;
}

static void write_allpairs(tiers_json_t *j, const phase_t *phases, double *recs, int nrec)
{
  qsort(recs, (size_t)nrec, sizeof(double) * (size_t)pair_len, cmp_rec);
  tiers_json_key(j, "allpairs");
  tiers_json_object_begin(j);
  json_sizes(j, "sizes", ap_sizes, opt.nfactors);
  tiers_json_kv_int(j, "reps", opt.reps);
  tiers_json_key(j, "phases");
  tiers_json_array_begin(j);
  for (int ph = 0; ph < 2; ph++) {
    const phase_t *p = &phases[ph];
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "phase", phase_names[ph]);
    tiers_json_kv_int(j, "units", p->units);
    tiers_json_kv_int(j, "m", p->m);
    tiers_json_kv_int(j, "steps", p->steps);
    tiers_json_kv_int(j, "cores_per_node", p->cores);
    tiers_json_kv_int(j, "rounds", p->rounds);
    tiers_json_kv_double(j, "seconds", p->seconds);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
  /* the schedule that ran: per phase and step, the pairs that exchanged */
  tiers_json_key(j, "schedule");
  tiers_json_array_begin(j);
  for (int i = 0; i < nrec;) {
    const double *head = recs + (size_t)i * (size_t)pair_len;
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "phase", phase_names[(int)head[0]]);
    tiers_json_kv_int(j, "step", (int64_t)head[1]);
    tiers_json_kv_int(j, "round", (int64_t)head[2]);
    tiers_json_key(j, "pairs");
    tiers_json_array_begin(j);
    int k = i;
    for (; k < nrec; k++) {
      const double *r = recs + (size_t)k * (size_t)pair_len;
      if (r[0] != head[0] || r[1] != head[1])
        break;
      int64_t ab[2] = {(int64_t)r[3], (int64_t)r[4]};
      tiers_json_array_begin(j);
      tiers_json_int(j, ab[0]);
      tiers_json_int(j, ab[1]);
      tiers_json_array_end(j);
    }
    tiers_json_array_end(j);
    tiers_json_object_end(j);
    i = k;
  }
  tiers_json_array_end(j);
  tiers_json_key(j, "pairs");
  tiers_json_array_begin(j);
  for (int i = 0; i < nrec; i++) {
    const double *r = recs + (size_t)i * (size_t)pair_len;
    tiers_json_object_begin(j);
    tiers_json_kv_int(j, "a", (int64_t)r[3]);
    tiers_json_kv_int(j, "b", (int64_t)r[4]);
    tiers_json_kv_string(j, "phase", phase_names[(int)r[0]]);
    tiers_json_kv_int(j, "step", (int64_t)r[1]);
    tiers_json_kv_int(j, "round", (int64_t)r[2]);
    tiers_json_key(j, "times_us");
    tiers_json_array_begin(j);
    for (int f = 0; f < opt.nfactors; f++) {
      const double *at = r + ap_size_at(f);
      tiers_json_array_begin(j);
      for (long q = 0; q < (long)at[0]; q++)
        tiers_json_double(j, at[1 + q]);
      tiers_json_array_end(j);
    }
    tiers_json_array_end(j);
    tiers_json_kv_double_array(j, "latency_samples_us", r + ap_lat_at() + 1,
                               (size_t)r[ap_lat_at()]);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
  tiers_json_object_end(j);
}

/* ------------------------------------------------------------------ */

/*
 * Whether this run measures the hybrid barrier (--tests names "barrier", or
 * is not given: the default includes it; and --barrier-kinds, when given,
 * names "hybrid").  Read before MPI starts, since the thread level is
 * fixed then.
 */
static int hybrid_requested(int argc, char **argv)
{
  int barrier = 1, hybrid = 1;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--tests") == 0)
      barrier = strstr(argv[i + 1], "barrier") != NULL;
    else if (strcmp(argv[i], "--barrier-kinds") == 0)
      hybrid = strstr(argv[i + 1], "hybrid") != NULL;
  }
  return barrier && hybrid;
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  tiers_tool_help(argc, argv,
                  "usage: mpirun -n P tiers-probe-net [--tests LIST] [--sizes LIST] [--iters N]\n"
                  "           [--window N] [--pair A,B] [--center BYTES] [--factors LIST]\n"
                  "           [--reps N] [--cores-per-node C] [--node-size P] [--flat]\n"
                  "           [--barrier-iters N] [--barrier-threads T]\n"
                  "           [--barrier-kinds mpi,hybrid] [--timeout S]\n"
                  "           [--yield] [--quick] (and --skip, --bw-iters, --figure-time,\n"
                  "           --max-blocks, --warmup)\n"
                  "Message costs between MPI processes: ping-pong, the XOR all-pairs\n"
                  "schedule, MPI and hybrid barriers; prints one JSON document.  Usually\n"
                  "run through 'tiers probe net'.\n");
  /* The hybrid barrier's team needs MPI_THREAD_FUNNELED (only the thread
   * that initialised MPI calls it), but asking Open MPI for more than
   * MPI_THREAD_SINGLE slows every small message (about 40 ns one way on a
   * 2-core EPYC VM with Open MPI 4.1) and MPI_Barrier on 2 ranks by about
   * 0.09 us of 0.36 (2-CPU Xeon VM, Open MPI 4.1.4): only runs that time
   * the hybrid barrier ask for it (--barrier-kinds mpi times MPI_Barrier
   * as a flat MPI program sees it). */
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv,
                  hybrid_requested(argc, argv) ? MPI_THREAD_FUNNELED : MPI_THREAD_SINGLE,
                  &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  parse_args(argc, argv);
  double start = MPI_Wtime();

  if (nranks < 2)
    fail_all("a single rank cannot measure anything: run tiers-probe-net on at least 2 ranks");
  if (opt.selected[TEST_PINGPONG] && (opt.pair_a >= nranks || opt.pair_b >= nranks))
    fail_all("--pair %ld,%ld names a rank beyond the %d ranks", opt.pair_a, opt.pair_b, nranks);
  uint64_t need = 0;
  if (opt.selected[TEST_PINGPONG])
    for (int i = 0; i < opt.nsizes; i++)
      if (opt.sizes[i] > need)
        need = opt.sizes[i];
  for (int f = 0; f < opt.nfactors; f++) {
    double s = round(opt.center * opt.factors[f]);
    if (opt.selected[TEST_ALLPAIRS] && !(s >= 1))
      fail_all("all-pairs message size %.0f B (centre %.0f x factor %g) is zero: the fit "
               "needs messages of at least 1 byte", s, opt.center, opt.factors[f]);
    ap_sizes[f] = s >= 1 ? (uint64_t)s : 0;
    if (opt.selected[TEST_ALLPAIRS] && ap_sizes[f] > need)
      need = ap_sizes[f];
  }
  if (need > (uint64_t)INT32_MAX)
    fail_all("message size %llu B is larger than one MPI message of MPI_BYTE can be "
             "(at most %d B)", (unsigned long long)need, INT32_MAX);

  /* memory: two buffers per rank, on every rank of this host */
  MPI_Comm host_comm;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host_comm);
  int on_host = 1;
  MPI_Comm_size(host_comm, &on_host);
  MPI_Comm_free(&host_comm);
  double want = 2.0 * (double)(need ? need : 1) * on_host;
  size_t avail = tiers_topo_available_memory();
  int too_big = avail > 0 && want > 0.9 * (double)avail;
  int any_too_big = 0;
  MPI_Allreduce(&too_big, &any_too_big, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_too_big)
    fail_all("messages of %llu B need %.1f GiB of buffers for the ranks of one host, more "
             "than its free memory: choose smaller sizes", (unsigned long long)need,
             want / (1 << 30));
  sbuf = malloc(need ? need : 1);
  rbuf = malloc(need ? need : 1);
  if (!sbuf || !rbuf)
    fail_here("cannot allocate two buffers of %llu B", (unsigned long long)need);
  memset(sbuf, 'a' + rank % 26, need ? need : 1);
  memset(rbuf, 0, need ? need : 1);

  find_placement();
  if (opt.selected[TEST_ALLPAIRS] && nnodes > 1) {
    for (int nd = 0; nd < nnodes; nd++)
      if (node_count[nd] < opt.cores_per_node)
        fail_all("--cores-per-node %ld, but node %d (%s) has only %d rank%s", opt.cores_per_node,
                 nd, places[node_ranks[nd][0]].host, node_count[nd],
                 node_count[nd] == 1 ? "" : "s");
  }

  /* the hybrid barrier's team, tried once over all ranks before anything
   * is measured: a thread count the ranks cannot run is a usage error */
  int hthreads = 0;
  tiers_pin_policy_t hpin = TIERS_PIN_NONE;
  if (opt.selected[TEST_BARRIER] && opt.barrier_hybrid) {
    hthreads = hybrid_threads();
    if (hthreads > 1 && provided < MPI_THREAD_FUNNELED)
      fail_all("the hybrid barrier needs MPI_THREAD_FUNNELED, which this MPI library does "
               "not give: use --barrier-threads 1");
    hpin = hybrid_pin();
    tiers_team_t team = NULL;
    if (tiers_team_create(&team, MPI_COMM_WORLD, hthreads, hpin) != TIERS_OK)
      fail_all("cannot run the hybrid barrier with %d threads per rank: %s (give ranks more "
               "PUs, e.g. --map-by slot:PE=%d, or lower --barrier-threads)", hthreads,
               tiers_last_error(), hthreads);
    tiers_team_destroy(&team);
  }

  pp_row_t *pp = calloc((size_t)opt.nsizes, sizeof *pp);
  int bcounts[64];
  int nbarrier = barrier_counts(bcounts);
  barrier_row_t hrows[64];
  allreduce_row_t *arows = calloc(64, sizeof *arows), *brows = calloc(64, sizeof *brows);
  phase_t phases[2];
  memset(phases, 0, sizeof phases);
  double *recs = NULL;
  int nrec = 0;
  double seconds[NTESTS] = {0};
  if (!pp || !arows || !brows)
    fail_here("out of memory");

  barrier_bounded(MPI_COMM_WORLD, "start-up");
  if (opt.selected[TEST_PINGPONG]) {
    double t0 = MPI_Wtime();
    maybe_die(TEST_PINGPONG);
    for (int i = 0; i < opt.nsizes; i++)
      pingpong_size(opt.sizes[i], &pp[i]);
    seconds[TEST_PINGPONG] = MPI_Wtime() - t0;
  }
  if (opt.selected[TEST_ALLPAIRS]) {
    double t0 = MPI_Wtime();
    maybe_die(TEST_ALLPAIRS);
    all_pairs(phases);
    nrec = gather_pairs(&recs);
    seconds[TEST_ALLPAIRS] = MPI_Wtime() - t0;
  }
  if (opt.selected[TEST_BARRIER]) {
    double t0 = MPI_Wtime();
    maybe_die(TEST_BARRIER);
    for (int i = 0; opt.barrier_mpi && i < nbarrier; i++)
      collective_series(bcounts[i], 0, &brows[i]);
    for (int i = 0; opt.barrier_hybrid && i < nbarrier; i++)
      hybrid_barrier_series(bcounts[i], hthreads, hpin, &hrows[i]);
    seconds[TEST_BARRIER] = MPI_Wtime() - t0;
  }
  if (opt.selected[TEST_ALLREDUCE]) {
    double t0 = MPI_Wtime();
    maybe_die(TEST_ALLREDUCE);
    for (int i = 0; i < nbarrier; i++)
      collective_series(bcounts[i], 1, &arows[i]);
    seconds[TEST_ALLREDUCE] = MPI_Wtime() - t0;
  }
  barrier_bounded(MPI_COMM_WORLD, "the end of the measurements");

  if (rank == 0) {
    tiers_json_t j;
    tiers_json_init(&j, stdout);
    tiers_json_object_begin(&j);
    tiers_tool_json_native(&j);
    write_params(&j, hthreads, hpin);
    write_placement(&j);
    if (opt.selected[TEST_PINGPONG]) {
      tiers_json_key(&j, "pingpong");
      tiers_json_object_begin(&j);
      int64_t pair[2] = {opt.pair_a, opt.pair_b};
      tiers_json_kv_int_array(&j, "pair", pair, 2);
      tiers_json_key(&j, "rows");
      tiers_json_array_begin(&j);
      for (int i = 0; i < opt.nsizes; i++) {
        write_pp_row(&j, &pp[i]);
      }
      tiers_json_array_end(&j);
      tiers_json_kv_double(&j, "seconds", seconds[TEST_PINGPONG]);
      tiers_json_object_end(&j);
    }
    if (opt.selected[TEST_ALLPAIRS]) {
      write_allpairs(&j, phases, recs, nrec);
    }
    if (opt.selected[TEST_BARRIER]) {
      tiers_json_key(&j, "barrier");
      tiers_json_object_begin(&j);
      tiers_json_kv_int(&j, "iters", opt.barrier_iters);
      tiers_json_kv_string(&j, "thread_level",
                           provided >= MPI_THREAD_FUNNELED ? "funneled" : "single");
      tiers_json_key(&j, "mpi");
      tiers_json_array_begin(&j);
      for (int i = 0; opt.barrier_mpi && i < nbarrier; i++) {
        tiers_json_object_begin(&j);
        write_coll_row(&j, &brows[i]);
        tiers_json_object_end(&j);
      }
      tiers_json_array_end(&j);
      tiers_json_key(&j, "hybrid");
      tiers_json_array_begin(&j);
      for (int i = 0; opt.barrier_hybrid && i < nbarrier; i++) {
        tiers_json_object_begin(&j);
        tiers_json_kv_int(&j, "ranks", hrows[i].ranks);
        tiers_json_kv_int(&j, "threads", hrows[i].threads);
        tiers_json_kv_double(&j, "min_us", hrows[i].min_us);
        tiers_json_kv_double(&j, "avg_us", hrows[i].avg_us);
        tiers_json_kv_double(&j, "max_us", hrows[i].max_us);
        tiers_json_object_end(&j);
      }
      tiers_json_array_end(&j);
      tiers_json_kv_double(&j, "seconds", seconds[TEST_BARRIER]);
      tiers_json_object_end(&j);
    }
    if (opt.selected[TEST_ALLREDUCE])
      write_allreduce(&j, arows, nbarrier, seconds[TEST_ALLREDUCE]);
    tiers_json_kv_double(&j, "seconds", MPI_Wtime() - start);
    tiers_json_object_end(&j);
    if (tiers_json_finish(&j) != 0)
      fail_here("cannot write the report to stdout");
  }
  free(recs);
  free(pair_recs);
  free(pp);
  free(arows);
  free(brows);
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return 0;
}
