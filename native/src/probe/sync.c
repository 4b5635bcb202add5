/*
 * tiers-probe-sync: synchronisation and loop-scheduling overheads of
 * OpenMP (the EPCC micro-benchmark method), and the barriers of the COMPaS
 * paper §2 (the tiers spin barrier, pthread_barrier_t, and a mutex /
 * condition-variable barrier).  Prints one JSON object on stdout; see
 * docs/schemas/probe-sync.md.
 *
 * The EPCC method: delay() is a loop of dependent floating-point adds whose
 * length is calibrated to --delay-time.  A reference runs the delays alone
 * on one thread; a test runs the same delays inside the construct.  Each
 * is repeated innerreps times, innerreps chosen so that one repetition
 * lasts about --test-time; the time per construct execution is the
 * elapsed time / innerreps.  Every outer repetition is a pair: the
 * reference loop and the test timed one beside the other; its overhead is
 * the test's time per construct minus the reference's time per iteration.
 * The figures are sampled in turns of BLOCK_REPS pairs each, by the
 * repeat-until rule of common/stats.h; the figure is the median of the
 * per-pair overheads (with its 95 % CI), below resolution when smaller
 * than twice the reference's interquartile range, and EPCC's own figure
 * (the mean, first repetition dropped) and the 3-sigma statistics stand
 * beside it (sync_stats.h), in microseconds and in CPU cycles.
 *
 * LOCK/UNLOCK takes its lock from LOCK_PAGES pages of its own in turn
 * (pairs 2k and 2k+1 on page k), and reports each page's median: where the
 * lock's line lies in physical memory sets its cost, so one launch samples
 * several placements (see lock_pages_init).
 *
 * Every thread is pinned (one per PU, compact or scatter order): the
 * OpenMP threads with tiers_topo_bind_thread before every test, the
 * barrier teams when they start.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/pulink.h"
#include "common/tool.h"
#include "probe/sync_stats.h"
#include "tiers/error.h"
#include "tiers/hybrid.h"
#include "tiers/topo.h"

#define OUTLIER_SIGMA 3.0
#define MAX_REPS 100000
#define DEFAULT_MAX_REPS 2000

/* ------------------------------------------------------------------ */
/* delay()                                                             */

static int delay_length = 1;
static volatile double delay_sink;

/* A chain of dependent adds: cannot be vectorised or shortened without
 * -ffast-math.  Kept out of line, as in EPCC, so every call costs the same.
 * Aligned to 64 bytes so that its loop (about 20 bytes, 16 in) never
 * straddles a 64-byte boundary: where the linker put it across one, the
 * same length took 30 % longer (0.091 against 0.070 us for 139 iterations
 * in a program of the same loop placed within one), so the time of a
 * delay length depended on the rest of the binary. */
static __attribute__((noinline, noclone, aligned(64))) void delay(int length)
{
  double a = 0.0;
  for (int i = 0; i < length; i++)
    a += (double)i;
  if (a < 0)
    delay_sink = a;
}

/* Seconds per call of delay(length), over @p calls calls. */
static double time_delay(int length, long calls)
{
  double t0 = tiers_now();
  for (long i = 0; i < calls; i++)
    delay(length);
  return (tiers_now() - t0) / (double)calls;
}

/* The fastest of 50 runs of about 1 ms of delay(delay_length), in us per call. */
static double measure_delay_us(void)
{
  double per_call = time_delay(delay_length, 16);
  long calls = (long)(0.001 / (per_call > 0 ? per_call : 1e-9)) + 1;
  double best = INFINITY;
  for (int r = 0; r < 50; r++) {
    double t = time_delay(delay_length, calls);
    if (t < best)
      best = t;
  }
  return best * 1e6;
}

static int calibration_attempts;

/* One calibration of delay_length for @p target_us (see calibrate_delay). */
static double calibrate_delay_once(double target_us)
{
  const int probe = 1 << 12;
  double best = INFINITY;
  for (int r = 0; r < 50; r++) {
    double t = time_delay(probe, 64);
    if (t < best)
      best = t;
  }
  double per_iter = best / probe;
  double len = round(target_us * 1e-6 / per_iter);
  if (len < 1)
    len = 1;
  if (len > INT_MAX / 2)
    len = INT_MAX / 2;
  delay_length = (int)len;
  /* One refinement against the delay at its own length (call overhead,
   * clock changes since the first step). */
  double measured = INFINITY;
  for (int step = 0; step < 2; step++) {
    long calls = (long)(0.001 / (per_iter * delay_length)) + 1;
    measured = INFINITY;
    for (int r = 0; r < 50; r++) {
      double t = time_delay(delay_length, calls);
      if (t < measured)
        measured = t;
    }
    if (step == 0) {
      double refined = round(delay_length * target_us * 1e-6 / measured);
      delay_length = refined < 1 ? 1 : refined > INT_MAX / 2 ? INT_MAX / 2 : (int)refined;
      per_iter = measured / len;
    }
  }
  return measured * 1e6;
}

/* Picks delay_length for @p target_us; returns the measured microseconds.
 * Every step takes the fastest of many short runs (about 1 ms each), so
 * that a run in which the thread was preempted does not count; a whole
 * calibration slowed throughout (a vCPU that its host shares) would still
 * set a length that is too short, so the calibration is repeated until two
 * in a row pick lengths within 2 % of each other (at most 6 times; the
 * attempts are reported as params.delay_calibrations). */
static double calibrate_delay(double target_us)
{
  int prev = -1;
  double us = NAN;
  for (calibration_attempts = 1; calibration_attempts <= 6; calibration_attempts++) {
    us = calibrate_delay_once(target_us);
    if (prev > 0 && fabs((double)delay_length - prev) <= 0.02 * prev)
      break;
    prev = delay_length;
  }
  if (calibration_attempts > 6)
    calibration_attempts = 6;
  return us;
}

/* The cost of one reading of the clock, in us: the median of 1001
 * back-to-back differences of tiers_now(). */
static double timer_cost_us(void)
{
  enum { N = 1001 };
  static double d[N];
  for (int i = 0; i < N; i++) {
    double a = tiers_now();
    d[i] = (tiers_now() - a) * 1e6;
  }
  for (int i = 1; i < N; i++) /* insertion sort: small and once */
    for (int k = i; k > 0 && d[k - 1] > d[k]; k--) {
      double t = d[k];
      d[k] = d[k - 1];
      d[k - 1] = t;
    }
  return d[N / 2];
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */

typedef struct team team_t;

typedef struct ctx {
  int nthreads;
  int chunk;          /* schedule tests */
  int iters_per_thr;  /* schedule tests */
  team_t *team;       /* barrier tests */
} ctx_t;

/* Runs @p innerreps constructs; returns the elapsed seconds. */
typedef double (*test_fn)(const ctx_t *c, long innerreps);

static volatile double atomic_sink;

/* LOCK/UNLOCK's lock lies on LOCK_PAGES pages of its own, one lock per
 * page at the same offset, and the pairs take them in turn (pair_page).
 * Where the lock's line lies in physical memory sets how long it takes
 * between the two PUs (its home in the host's mesh of cores is chosen from
 * its physical address): in one process the same LOCK/UNLOCK loop read
 * 16-26 ns on 16 pages, and an EPCC-method program's figure varied up to
 * 9x between 8 pages.  A process gets its physical pages anew, so a lock
 * at one place made every launch one sample of one placement; on several
 * pages every launch samples several, and the figure is the median of the
 * pages' medians (tiers.probe.sync). */
#define LOCK_PAGES 8
#define LOCK_OFFSET 0x200
static char *lock_pages;
static long lock_page_size;
static omp_lock_t *lock_at; /* the lock the next LOCK/UNLOCK run takes */

static omp_lock_t *page_lock(int page)
{
  return (omp_lock_t *)(lock_pages + (size_t)lock_page_size * (size_t)page + LOCK_OFFSET);
}

/* Maps the lock pages (each touched, so that each has its physical page
 * before any run) and points lock_at at the first. */
static void lock_pages_init(void)
{
  lock_page_size = sysconf(_SC_PAGESIZE);
  if (lock_page_size < 2 * LOCK_OFFSET)
    lock_page_size = 4096;
  void *p = mmap(NULL, (size_t)lock_page_size * LOCK_PAGES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    tiers_tool_fail("cannot map the lock pages: %s", strerror(errno));
  lock_pages = p;
  for (int k = 0; k < LOCK_PAGES; k++)
    omp_init_lock(page_lock(k));
  lock_at = page_lock(0);
}

/* The page of pair @p r of a paged figure: pairs 2k and 2k+1 (one timed
 * reference first, one test first) share page k mod @p pages, so that the
 * order of a pair does not go with its page. */
static int pair_page(size_t r, int pages)
{
  return (int)((r / 2) % (size_t)pages);
}

static double ref_delay(const ctx_t *c, long n)
{
  (void)c;
  double t0 = tiers_now();
  for (long j = 0; j < n; j++)
    delay(delay_length);
  return tiers_now() - t0;
}

/* ATOMIC's reference and test follow EPCC's: the added value b is itself
 * a chain (b *= c), so that the compiler can neither hoist nor fold the
 * additions, and the reference is that same loop without the atomic. */
#define ATOMIC_C (1.0 + 1.0e-15)

static double ref_atomic(const ctx_t *c, long n)
{
  (void)c;
  double a = 0.0, b = 1.0;
  double t0 = tiers_now();
  for (long j = 0; j < n; j++) {
    a += b;
    b *= ATOMIC_C;
  }
  double t = tiers_now() - t0;
  atomic_sink = a;
  return t;
}

/* REDUCTION's reference and test follow EPCC's: an int reduction
 * variable, a += 1 after the delay.  A double one, as here before, is
 * combined by a compare-and-swap loop (load, add, lock cmpxchg, retry
 * while the other thread's combine got in first) where an int is one
 * lock add, and the reference then kept a volatile double in memory
 * (a load and a store per iteration) where EPCC's keeps a register. */
static double ref_reduction(const ctx_t *c, long n)
{
  (void)c;
  int a = 0;
  double t0 = tiers_now();
  for (long j = 0; j < n; j++) {
    delay(delay_length);
    a += 1;
  }
  double t = tiers_now() - t0;
  atomic_sink = a;
  return t;
}

static double ref_sched(const ctx_t *c, long n)
{
  double t0 = tiers_now();
  for (long j = 0; j < n; j++)
    for (int i = 0; i < c->iters_per_thr; i++)
      delay(delay_length);
  return tiers_now() - t0;
}

static double test_parallel(const ctx_t *c, long n)
{
  double t0 = tiers_now();
  for (long j = 0; j < n; j++) {
#pragma omp parallel num_threads(c->nthreads)
    delay(delay_length);
  }
  return tiers_now() - t0;
}

static double test_for(const ctx_t *c, long n)
{
  const int T = c->nthreads;
  double t0 = tiers_now();
#pragma omp parallel num_threads(T)
  for (long j = 0; j < n; j++) {
#pragma omp for
    for (int i = 0; i < T; i++)
      delay(delay_length);
  }
  return tiers_now() - t0;
}

static double test_parallel_for(const ctx_t *c, long n)
{
  const int T = c->nthreads;
  double t0 = tiers_now();
  for (long j = 0; j < n; j++) {
#pragma omp parallel for num_threads(T)
    for (int i = 0; i < T; i++)
      delay(delay_length);
  }
  return tiers_now() - t0;
}

static double test_barrier(const ctx_t *c, long n)
{
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads)
  for (long j = 0; j < n; j++) {
    delay(delay_length);
#pragma omp barrier
  }
  return tiers_now() - t0;
}

static double test_single(const ctx_t *c, long n)
{
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads)
  for (long j = 0; j < n; j++) {
#pragma omp single
    delay(delay_length);
  }
  return tiers_now() - t0;
}

/* critical, lock and atomic: each thread runs n / nthreads of the n
 * constructs (n is a multiple of nthreads), so n run in all. */
static double test_critical(const ctx_t *c, long n)
{
  const long each = n / c->nthreads;
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads)
  for (long j = 0; j < each; j++) {
#pragma omp critical
    delay(delay_length);
  }
  return tiers_now() - t0;
}

static double test_lock(const ctx_t *c, long n)
{
  const long each = n / c->nthreads;
  omp_lock_t *lock = lock_at;
  omp_init_lock(lock);
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads)
  for (long j = 0; j < each; j++) {
    omp_set_lock(lock);
    delay(delay_length);
    omp_unset_lock(lock);
  }
  double t = tiers_now() - t0;
  omp_destroy_lock(lock);
  return t;
}

/* ATOMIC's counter is where EPCC's syncbench keeps it: a local of the
 * function that opens the region, shared.  The region's shared-data block
 * (which holds the counter's address) lies next to it in that frame, and
 * every thread reloads the address from it after each atomic, so the
 * atomic's line is also read by both threads between writes: part of the
 * figure the suite reports.  With the counter on a line of its own the
 * same loop read 10-30 % less on a 2-CPU KVM guest (six processes), as
 * this probe's figure did before it followed the suite. */
static double test_atomic(const ctx_t *c, long n)
{
  const long each = n / c->nthreads;
  double a = 0.0;
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads) shared(a)
  {
    double b = 1.0;
    for (long j = 0; j < each; j++) {
#pragma omp atomic
      a += b;
      b *= ATOMIC_C;
    }
  }
  double t = tiers_now() - t0;
  atomic_sink = a;
  return t;
}

static double test_reduction(const ctx_t *c, long n)
{
  int a = 0;
  double t0 = tiers_now();
  for (long j = 0; j < n; j++) {
#pragma omp parallel num_threads(c->nthreads) reduction(+ : a)
    {
      delay(delay_length);
      a += 1;
    }
  }
  double t = tiers_now() - t0;
  atomic_sink = a;
  return t;
}

/* Schedule tests (EPCC schedbench): one loop construct of
 * iters_per_thr * nthreads iterations of delay() per inner repetition. */
static double test_static(const ctx_t *c, long n)
{
  const int iters = c->iters_per_thr * c->nthreads, chunk = c->chunk;
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads)
  for (long j = 0; j < n; j++) {
#pragma omp for schedule(static, chunk)
    for (int i = 0; i < iters; i++)
      delay(delay_length);
  }
  return tiers_now() - t0;
}

static double test_dynamic(const ctx_t *c, long n)
{
  const int iters = c->iters_per_thr * c->nthreads, chunk = c->chunk;
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads)
  for (long j = 0; j < n; j++) {
#pragma omp for schedule(dynamic, chunk)
    for (int i = 0; i < iters; i++)
      delay(delay_length);
  }
  return tiers_now() - t0;
}

static double test_guided(const ctx_t *c, long n)
{
  const int iters = c->iters_per_thr * c->nthreads, chunk = c->chunk;
  double t0 = tiers_now();
#pragma omp parallel num_threads(c->nthreads)
  for (long j = 0; j < n; j++) {
#pragma omp for schedule(guided, chunk)
    for (int i = 0; i < iters; i++)
      delay(delay_length);
  }
  return tiers_now() - t0;
}

/* ------------------------------------------------------------------ */
/* Barrier teams: nthreads-1 pinned pthreads plus the calling thread.    */

typedef struct bar_ops {
  int (*create)(void **bar, int n);
  void (*wait)(void *bar);
  void (*destroy)(void *bar);
} bar_ops_t;

static int spin_create(void **bar, int n)
{
  tiers_barrier_t b;
  if (tiers_barrier_create(&b, n) != TIERS_OK)
    return -1;
  *bar = b;
  return 0;
}
static void spin_wait(void *bar) { tiers_barrier_wait(bar); }
static void spin_destroy(void *bar)
{
  tiers_barrier_t b = bar;
  tiers_barrier_destroy(&b);
}

static int pth_create(void **bar, int n)
{
  pthread_barrier_t *b = malloc(sizeof *b);
  if (!b || pthread_barrier_init(b, NULL, (unsigned)n) != 0) {
    free(b);
    return -1;
  }
  *bar = b;
  return 0;
}
static void pth_wait(void *bar) { pthread_barrier_wait(bar); }
static void pth_destroy(void *bar)
{
  pthread_barrier_destroy(bar);
  free(bar);
}

/* The mutex / condition-variable barrier of COMPaS §2: a counter under a
 * mutex; the last arrival advances the generation and broadcasts. */
typedef struct cv_barrier {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int n, count;
  unsigned generation;
} cv_barrier_t;

static int cv_create(void **bar, int n)
{
  cv_barrier_t *b = calloc(1, sizeof *b);
  if (!b)
    return -1;
  pthread_mutex_init(&b->mutex, NULL);
  pthread_cond_init(&b->cond, NULL);
  b->n = n;
  *bar = b;
  return 0;
}
static void cv_wait(void *bar)
{
  cv_barrier_t *b = bar;
  pthread_mutex_lock(&b->mutex);
  unsigned gen = b->generation;
  if (++b->count == b->n) {
    b->count = 0;
    b->generation++;
    pthread_cond_broadcast(&b->cond);
  } else {
    while (b->generation == gen)
      pthread_cond_wait(&b->cond, &b->mutex);
  }
  pthread_mutex_unlock(&b->mutex);
}
static void cv_destroy(void *bar)
{
  cv_barrier_t *b = bar;
  pthread_cond_destroy(&b->cond);
  pthread_mutex_destroy(&b->mutex);
  free(b);
}

static const bar_ops_t spin_ops = {spin_create, spin_wait, spin_destroy};
static const bar_ops_t pth_ops = {pth_create, pth_wait, pth_destroy};
static const bar_ops_t cv_ops = {cv_create, cv_wait, cv_destroy};

static tiers_topo_t topo;

struct team {
  int n;
  const bar_ops_t *ops;
  void *bar;
  const int *pus;
  long cmd; /* inner repetitions of the next run, -1 to quit; read after a barrier */
  int bind_failed;
  pthread_t tid[];
};

typedef struct worker_arg {
  team_t *team;
  int id;
} worker_arg_t;

static worker_arg_t *worker_args;

static void *team_worker(void *p)
{
  worker_arg_t *w = p;
  team_t *t = w->team;
  if (tiers_topo_bind_thread(topo, t->pus[w->id]) != TIERS_OK)
    __atomic_store_n(&t->bind_failed, 1, __ATOMIC_RELAXED);
  for (;;) {
    t->ops->wait(t->bar); /* start of a run */
    long n = t->cmd;
    if (n < 0)
      break;
    for (long j = 0; j < n; j++)
      t->ops->wait(t->bar);
  }
  return NULL;
}

static team_t *team_start(const bar_ops_t *ops, int n, const int *pus)
{
  team_t *t = calloc(1, sizeof *t + sizeof(pthread_t) * (size_t)n);
  worker_args = calloc((size_t)n, sizeof *worker_args);
  if (!t || !worker_args)
    tiers_tool_fail("out of memory");
  t->n = n;
  t->ops = ops;
  t->pus = pus;
  if (ops->create(&t->bar, n) != 0)
    tiers_tool_fail("cannot create a barrier for %d threads", n);
  for (int i = 1; i < n; i++) {
    worker_args[i] = (worker_arg_t){t, i};
    int rc = pthread_create(&t->tid[i], NULL, team_worker, &worker_args[i]);
    if (rc != 0)
      tiers_tool_fail("cannot start a thread: %s", strerror(rc));
  }
  return t;
}

static void team_stop(team_t *t)
{
  t->cmd = -1;
  t->ops->wait(t->bar);
  for (int i = 1; i < t->n; i++)
    pthread_join(t->tid[i], NULL);
  t->ops->destroy(t->bar);
  free(t);
  free(worker_args);
  worker_args = NULL;
}

/* One run of a barrier test: n back-to-back episodes, timed by thread 0
 * from the end of the start episode to the end of the last one. */
static double test_team_barrier(const ctx_t *c, long n)
{
  team_t *t = c->team;
  t->cmd = n;
  t->ops->wait(t->bar);
  double t0 = tiers_now();
  for (long j = 0; j < n; j++)
    t->ops->wait(t->bar);
  double el = tiers_now() - t0;
  if (__atomic_load_n(&t->bind_failed, __ATOMIC_RELAXED))
    tiers_tool_fail("cannot pin a barrier thread: %s", tiers_last_error());
  return el;
}

/* ------------------------------------------------------------------ */
/* The test table                                                      */

enum group { G_SYNC, G_SCHED, G_BARRIERS, G_COUNT };
static const char *group_names[G_COUNT] = {"sync", "sched", "barriers"};

enum ref { R_NONE = -1, R_DELAY, R_ATOMIC, R_REDUCTION, R_SCHED, R_COUNT };
static const char *ref_names[R_COUNT] = {"delay", "atomic", "reduction", "sched"};
static const test_fn ref_fns[R_COUNT] = {ref_delay, ref_atomic, ref_reduction, ref_sched};

typedef struct test_def {
  const char *name;  /* as --tests takes it */
  const char *label; /* as EPCC / COMPaS name it */
  enum group group;
  test_fn fn;
  enum ref ref;
  int split;         /* innerreps divided among the threads */
  const bar_ops_t *ops;
  int paged;         /* takes its lock from the lock pages in turn (LOCK_PAGES) */
} test_def_t;

static const test_def_t tests[] = {
    {"parallel", "PARALLEL", G_SYNC, test_parallel, R_DELAY, 0, NULL, 0},
    {"for", "FOR", G_SYNC, test_for, R_DELAY, 0, NULL, 0},
    {"parallel_for", "PARALLEL FOR", G_SYNC, test_parallel_for, R_DELAY, 0, NULL, 0},
    {"barrier", "BARRIER", G_SYNC, test_barrier, R_DELAY, 0, NULL, 0},
    {"single", "SINGLE", G_SYNC, test_single, R_DELAY, 0, NULL, 0},
    {"critical", "CRITICAL", G_SYNC, test_critical, R_DELAY, 1, NULL, 0},
    {"lock", "LOCK/UNLOCK", G_SYNC, test_lock, R_DELAY, 1, NULL, 1},
    {"atomic", "ATOMIC", G_SYNC, test_atomic, R_ATOMIC, 1, NULL, 0},
    {"reduction", "REDUCTION", G_SYNC, test_reduction, R_REDUCTION, 0, NULL, 0},
    {"static", "STATIC", G_SCHED, test_static, R_SCHED, 0, NULL, 0},
    {"dynamic", "DYNAMIC", G_SCHED, test_dynamic, R_SCHED, 0, NULL, 0},
    {"guided", "GUIDED", G_SCHED, test_guided, R_SCHED, 0, NULL, 0},
    {"spin", "spin barrier", G_BARRIERS, test_team_barrier, R_NONE, 0, &spin_ops, 0},
    {"pthread", "pthread barrier", G_BARRIERS, test_team_barrier, R_NONE, 0, &pth_ops, 0},
    {"condvar", "mutex/condvar barrier", G_BARRIERS, test_team_barrier, R_NONE, 0, &cv_ops, 0},
};
#define NTESTS ((int)(sizeof tests / sizeof tests[0]))

/* ------------------------------------------------------------------ */
/* Measurement                                                         */

typedef struct options {
  int *threads, nthreads;
  int *chunks, nchunks;
  int selected[NTESTS];
  long reps;     /* repetitions at least */
  long max_reps; /* repetitions at most (repeat-until cap) */
  double figure_time_s; /* repeat-until time limit per figure */
  double test_time_us, delay_time_us;
  long delay_length; /* --delay-length: given, not calibrated (0: calibrate) */
  long iters_per_thr;
  tiers_pin_policy_t pin;
  int progress; /* print "progress DONE TOTAL" on stderr after each test */
} options_t;

static options_t opt;
static double cycle_hz;
static double timer_us; /* one reading of the clock (timer_cost_us) */
static long progress_done, progress_total;

static void progress_step(void)
{
  progress_done++;
  if (opt.progress) {
    fprintf(stderr, "progress %ld %ld\n", progress_done, progress_total);
    fflush(stderr);
  }
}

/* Tests (one per chunk size for the schedules) over all thread counts. */
static long count_tests(void)
{
  long per = 0;
  for (int i = 0; i < NTESTS; i++)
    if (opt.selected[i])
      per += tests[i].group == G_SCHED ? opt.nchunks : 1;
  return per * opt.nthreads;
}

/* Fastest of three runs of @p n constructs: a run in which a thread was
 * preempted (the machine may be shared) must not set innerreps. */
static double best_of_3(const ctx_t *c, test_fn fn, long n)
{
  double best = INFINITY;
  for (int k = 0; k < 3; k++) {
    double t = fn(c, n);
    if (t < best)
      best = t;
  }
  return best;
}

/* innerreps such that one run lasts about --test-time; a multiple of
 * @p multiple.  The calibration runs double as warm-up.  n doubles until
 * the best of three runs lasts an eighth of the target *and* has grown
 * with n (at least 1.5x the time of n/2): a short run in which a thread
 * was woken late or preempted lasts as long as the disturbance whatever
 * n is, and scaling from it gave innerreps of 1 or 2 -- a repetition of
 * one construct, dominated by the clock and the wake-up -- in one run and
 * hundreds in the next.  Stops after 2 s of calibration whatever. */
static long calibrate_reps(const ctx_t *c, test_fn fn, long multiple)
{
  const double target = opt.test_time_us * 1e-6;
  long n = multiple;
  double t, prev = -1.0, start = tiers_now();
  fn(c, n); /* warm-up: first touches, thread start, binding */
  int linear = 0;
  for (;;) {
    t = best_of_3(c, fn, n);
    linear = prev > 0 && t >= 1.5 * prev;
    if ((t >= 0.125 * target && linear) || n > LONG_MAX / 16 || tiers_now() - start > 2.0)
      break;
    prev = t;
    n *= 2;
  }
  /* scaled from a time that grew with n; a time that never did (every run
   * disturbed, the 2 s spent) says nothing of one construct: keep n */
  if (t > 0 && linear) {
    double scaled = ceil((double)n * target / t);
    if (scaled < (double)(LONG_MAX / 4))
      n = (long)scaled;
  }
  n = (n + multiple - 1) / multiple * multiple;
  return n < multiple ? multiple : n;
}

/* A growing list of samples. */
typedef struct samples {
  double *v;
  size_t n, cap;
} samples_t;

static void samples_push(samples_t *s, double x)
{
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    double *v = realloc(s->v, sizeof *v * cap);
    if (!v)
      tiers_tool_fail("out of memory");
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = x;
}

/* The samples of one figure: the time per construct of each repetition of
 * the test, the reference loop's time per iteration timed right beside it
 * (empty without a reference) and their per-pair differences. */
typedef struct figure {
  samples_t test, ref, value;
  samples_t page;          /* page of each pair of a paged figure (empty otherwise) */
  samples_t round;         /* round of turns each pair was taken in (see link_round) */
  int pages;               /* lock pages taken in turn (0: not paged) */
  long innerreps, ref_innerreps;
  long warm;               /* constructs of the untimed run before each timed test run (0: none) */
  double seconds;          /* time spent sampling */
  long blocks;             /* turns it was sampled in (BLOCK_REPS pairs each) */
  tiers_stats_stop_t stop; /* why sampling stopped */
} figure_t;

static void figure_free(figure_t *f)
{
  free(f->test.v);
  free(f->ref.v);
  free(f->value.v);
  free(f->page.v);
  free(f->round.v);
  memset(f, 0, sizeof *f);
}

/* Pairs of one figure taken in a row before the next figure's turn. */
#define BLOCK_REPS 5

/* The round of turns being sampled: every figure's pairs carry it, and the
 * round trip of a cache line between the team's first two PUs is measured
 * before each round (link_rtt[round]) and once after the last, so that
 * each pair can be told apart by where the host had placed the PUs. */
static int link_round;

/* Takes @p count more repetitions of one figure.  With a reference, every
 * repetition is a pair: the reference loop and the test, in alternating
 * order (by the repetition's index, across blocks), so that both see the
 * same conditions; the value of the pair is test minus reference (EPCC's
 * overhead), and a disturbed reference moves only its own pair, not every
 * figure measured against it.
 *
 * Every timed test run follows an untimed run of f->warm constructs.  EPCC
 * times a test's outer repetitions back to back, so each starts with the
 * team awake from the one before; here half of them would follow the
 * serial reference loop (about --test-time of one thread alone), after
 * which the OpenMP runtime's idle threads may have stopped spinning and
 * gone to sleep, and the first construct of the run would hold their
 * wake-up -- a cost of an idle team, not of the construct, spread over
 * innerreps. */
static void figure_block(const ctx_t *c, test_fn fn, test_fn ref, figure_t *f, long count)
{
  for (long k = 0; k < count; k++) {
    size_t r = f->test.n;
    double a = 0.0, b;
    if (f->pages > 0) {
      int page = pair_page(r, f->pages);
      lock_at = page_lock(page);
      samples_push(&f->page, (double)page);
    }
    if (ref && r % 2 == 0)
      a = ref(c, f->ref_innerreps) * 1e6 / (double)f->ref_innerreps;
    if (f->warm > 0)
      (void)fn(c, f->warm);
    b = fn(c, f->innerreps) * 1e6 / (double)f->innerreps;
    if (ref && r % 2 == 1)
      a = ref(c, f->ref_innerreps) * 1e6 / (double)f->ref_innerreps;
    samples_push(&f->test, b);
    if (ref)
      samples_push(&f->ref, a);
    samples_push(&f->value, b - a);
    samples_push(&f->round, (double)link_round);
  }
}

/* The repeat-until rule (common/stats.h) on a figure's values so far, with
 * @p elapsed_s its own sampling time: at least --reps repetitions, then on
 * until the 95 % CI of the median is within +-5 %, --figure-time seconds
 * of its own sampling have passed or --max-reps were taken. */
static tiers_stats_stop_t figure_check(const figure_t *f, double elapsed_s)
{
  if ((long)f->value.n < opt.reps)
    return TIERS_STATS_GO_ON;
  double *scratch = malloc(sizeof *scratch * f->value.n);
  if (!scratch)
    tiers_tool_fail("out of memory");
  tiers_stats_stop_t why = tiers_stats_should_stop(f->value.v, f->value.n, scratch,
                                                   (size_t)opt.max_reps, elapsed_s,
                                                   opt.figure_time_s);
  free(scratch);
  return why;
}

/* Runs --reps repetitions (the references' own block); fills times_us with
 * the time per iteration. */
static long run_reps(const ctx_t *c, test_fn fn, long multiple, double *times_us)
{
  long n = calibrate_reps(c, fn, multiple);
  for (long r = 0; r < opt.reps; r++)
    times_us[r] = fn(c, n) * 1e6 / (double)n;
  return n;
}

static void stats_or_fail(const double *x, size_t n, sync_stats_t *s)
{
  if (sync_stats_compute(x, (int)n, OUTLIER_SIGMA, s) != 0)
    tiers_tool_fail("out of memory");
}

static void bind_self(int pu)
{
  if (tiers_topo_bind_thread(topo, pu) != TIERS_OK)
    tiers_tool_fail_last("cannot pin the main thread");
}

/* Pins OpenMP thread i of a team of T to pus[i] (libgomp keeps the same
 * threads for the next parallel regions of the same size). */
static void bind_omp_team(int T, const int *pus)
{
  int failed = 0, got = 0;
#pragma omp parallel num_threads(T) reduction(+ : failed)
  {
    if (omp_get_thread_num() == 0)
      got = omp_get_num_threads();
    if (tiers_topo_bind_thread(topo, pus[omp_get_thread_num()]) != TIERS_OK)
      failed++;
  }
  if (got != T)
    tiers_tool_fail("OpenMP ran %d threads where %d were asked (OMP_THREAD_LIMIT?)", got, T);
  if (failed)
    tiers_tool_fail("cannot pin the OpenMP threads to their PUs");
}

static void json_int_list(tiers_json_t *j, const char *key, const int *v, int n)
{
  tiers_json_key(j, key);
  tiers_json_array_begin(j);
  for (int i = 0; i < n; i++)
    tiers_json_int(j, v[i]);
  tiers_json_array_end(j);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of @p n values, sorted in place (NAN for none). */
static double median_sorting(double *v, size_t n)
{
  if (n == 0)
    return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The lock pages of a paged figure: the page of every pair, and per page
 * the statistics layer's median of its pairs' values (outliers beyond the
 * far-out fences left out, as every block median of tiers.stats) and their
 * count; page_median_us is the median of the pages' medians (pages without
 * pairs left out), the launch's figure that tiers.probe.sync takes. */
static void json_pages(tiers_json_t *j, const figure_t *f)
{
  double meds[LOCK_PAGES], pmeds[LOCK_PAGES];
  int64_t counts[LOCK_PAGES];
  size_t cap = f->value.n ? f->value.n : 1;
  int64_t *pages = malloc(sizeof *pages * (f->page.n ? f->page.n : 1));
  double *buf = malloc(sizeof *buf * cap), *scratch = malloc(sizeof *scratch * cap);
  if (!pages || !buf || !scratch)
    tiers_tool_fail("out of memory");
  int have = 0;
  for (int p = 0; p < f->pages; p++) {
    size_t k = 0;
    for (size_t r = 0; r < f->value.n && r < f->page.n; r++)
      if ((int)f->page.v[r] == p)
        buf[k++] = f->value.v[r];
    counts[p] = (int64_t)k;
    meds[p] = NAN;
    if (k > 0) {
      tiers_stats_t st;
      tiers_stats_summarize(buf, k, scratch, &st);
      meds[p] = st.median;
      pmeds[have++] = meds[p];
    }
  }
  for (size_t r = 0; r < f->page.n; r++)
    pages[r] = (int64_t)f->page.v[r];
  tiers_json_kv_int(j, "lock_pages", f->pages);
  tiers_json_kv_int(j, "lock_page_offset", LOCK_OFFSET);
  tiers_json_kv_int_array(j, "pair_pages", pages, f->page.n);
  tiers_json_kv_double_array(j, "page_medians_us", meds, (size_t)f->pages);
  tiers_json_kv_int_array(j, "page_reps", counts, (size_t)f->pages);
  tiers_json_kv_double(j, "page_median_us", median_sorting(pmeds, (size_t)have));
  free(pages);
  free(buf);
  free(scratch);
}

/* Writes the result of one test: its samples, the statistics of its values
 * (overheads, or times per episode for the barriers) and whether the figure
 * is a cost that can be given (sync_reliability). */
static void json_test_result(tiers_json_t *j, const test_def_t *d, int chunk, const figure_t *f,
                             const char *ref_name)
{
  sync_stats_t s;
  stats_or_fail(f->value.v, f->value.n, &s);
  double ref_median = NAN;
  if (f->ref.n) {
    sync_stats_t rs;
    stats_or_fail(f->ref.v, f->ref.n, &rs);
    ref_median = rs.med.median;
    sync_stats_free(&rs);
  }

  tiers_json_object_begin(j);
  tiers_json_kv_string(j, "group", group_names[d->group]);
  tiers_json_kv_string(j, "name", d->name);
  tiers_json_kv_string(j, "label", d->label);
  if (d->group == G_SCHED)
    tiers_json_kv_int(j, "chunk", chunk);
  /* a repetition is timed by two readings of the clock: their cost per
   * inner repetition is the least difference the samples can hold */
  double timer_per_rep = f->innerreps > 0 ? 2.0 * timer_us / (double)f->innerreps : 0.0;
  sync_result_json(j, ref_name, f->innerreps, f->ref_innerreps, f->test.v,
                   f->ref.n ? f->ref.v : NULL, f->value.v, f->value.n, ref_median, &s,
                   cycle_hz, timer_per_rep);
  if (f->pages > 0)
    json_pages(j, f);
  {
    int64_t *rounds = malloc(sizeof *rounds * (f->round.n ? f->round.n : 1));
    if (!rounds)
      tiers_tool_fail("out of memory");
    for (size_t r = 0; r < f->round.n; r++)
      rounds[r] = (int64_t)f->round.v[r];
    tiers_json_kv_int_array(j, "pair_rounds", rounds, f->round.n);
    free(rounds);
  }
  tiers_json_kv_string(j, "stopped", tiers_stats_stop_name(f->stop));
  tiers_json_kv_double(j, "seconds", f->seconds);
  tiers_json_kv_int(j, "blocks", f->blocks);
  tiers_json_object_end(j);
  sync_stats_free(&s);
}

/* delay() timed on every thread of the team at once (the fastest of 20
 * runs of about 1 ms each), into @p us_out[i] for thread i, in us per
 * call.  EPCC's overheads take every PU to run delay() as fast as the
 * reference's PU; a PU that its host shares with another guest does not,
 * and a loop's overhead then holds the difference. */
static void measure_pu_delays(int T, const int *pus, double *us_out)
{
  bind_omp_team(T, pus);
  double per_call = time_delay(delay_length, 16);
  long calls = (long)(0.001 / (per_call > 0 ? per_call : 1e-9)) + 1;
#pragma omp parallel num_threads(T)
  {
    double best = INFINITY;
    for (int r = 0; r < 20; r++) {
      double t = time_delay(delay_length, calls);
      if (t < best)
        best = t;
    }
    us_out[omp_get_thread_num()] = best * 1e6;
  }
}

/* One figure of a run: a test (and chunk size) and its samples. */
typedef struct job {
  const test_def_t *d;
  int chunk;
  figure_t f;
  int done;
} job_t;

/* Sets up the team of one figure's turn: the OpenMP threads re-pinned, or
 * a barrier team started. */
static void job_enter(ctx_t *c, const job_t *b, int T, const int *pus)
{
  c->chunk = b->chunk;
  if (b->d->group == G_BARRIERS)
    c->team = team_start(b->d->ops, T, pus);
  else
    bind_omp_team(T, pus);
}

static void job_leave(ctx_t *c, const job_t *b)
{
  if (b->d->group == G_BARRIERS) {
    team_stop(c->team);
    c->team = NULL;
  }
}

/* The round trip of a cache line between pus[0] and pus[1] before the next
 * round of turns, pushed on @p rtt (0 where it could not be measured);
 * returns the round's index.  OpenMP's idle workers spin for a while
 * before they sleep (libgomp: a few hundred thousand polls), and one of
 * them on pus[1] would share its PU with the measurement: a pause first. */
static int link_before_round(const int *pus, samples_t *rtt)
{
  struct timespec pause = {0, 2000000};
  nanosleep(&pause, NULL);
  tiers_pulink_t l = {0, 0, 0, 0};
  if (tiers_pulink_measure(topo, pus[0], pus[1], 1, &l) != TIERS_OK || l.timed_out)
    l.rtt_ns = 0;
  samples_push(rtt, l.rtt_ns);
  return (int)rtt->n - 1;
}

static void measure_threads(tiers_json_t *j, int T)
{
  int *pus = malloc(sizeof *pus * (size_t)T);
  if (!pus)
    tiers_tool_fail("out of memory");
  if (tiers_topo_pin_order(topo, opt.pin, T, pus) != TIERS_OK)
    tiers_tool_fail_last("cannot place the threads");
  bind_self(pus[0]);

  double *times = malloc(sizeof *times * (size_t)opt.reps);
  if (!times)
    tiers_tool_fail("out of memory");

  ctx_t c = {.nthreads = T, .chunk = 1, .iters_per_thr = (int)opt.iters_per_thr};

  tiers_json_object_begin(j);
  tiers_json_kv_int(j, "threads", T);
  json_int_list(j, "pus", pus, T);
  double *pu_delay = malloc(sizeof *pu_delay * (size_t)T);
  if (!pu_delay)
    tiers_tool_fail("out of memory");
  measure_pu_delays(T, pus, pu_delay);
  double lo = INFINITY, hi = 0;
  for (int i = 0; i < T; i++) {
    lo = pu_delay[i] < lo ? pu_delay[i] : lo;
    hi = pu_delay[i] > hi ? pu_delay[i] : hi;
  }
  tiers_json_kv_double_array(j, "pu_delay_us", pu_delay, (size_t)T);
  tiers_json_kv_double(j, "pu_delay_spread", (hi - lo) / lo);
  free(pu_delay);
  /* the team's first two PUs, as the host placed them now: a cache line's
   * round trip between them, again before every round of turns and after
   * the last (link_before_round; written as pu_link) */
  tiers_pulink_t link_start = {0, 0, 0, 0};
  const int have_link = T >= 2 && pus[0] != pus[1] &&
                        tiers_pulink_measure(topo, pus[0], pus[1], 1, &link_start) == TIERS_OK;
  if (link_start.timed_out)
    link_start.rtt_ns = 0; /* the second PU was taken: not measured */

  /* References that the selected tests need (serial, on the first PU). */
  int need[R_COUNT] = {0};
  for (int i = 0; i < NTESTS; i++)
    if (opt.selected[i] && tests[i].ref != R_NONE)
      need[tests[i].ref] = 1;
  long ref_n[R_COUNT] = {0};
  tiers_json_key(j, "references");
  tiers_json_array_begin(j);
  for (int r = 0; r < R_COUNT; r++) {
    if (!need[r])
      continue;
    long n = run_reps(&c, ref_fns[r], 1, times);
    ref_n[r] = n;
    sync_stats_t s;
    stats_or_fail(times, (size_t)opt.reps, &s);
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "name", ref_names[r]);
    tiers_json_kv_int(j, "innerreps", n);
    tiers_json_kv_double_array(j, "times_us", times, (size_t)opt.reps);
    sync_stats_json(j, "stats", &s, cycle_hz);
    tiers_json_object_end(j);
    sync_stats_free(&s);
  }
  tiers_json_array_end(j);

  /* The figures: one per test, one per chunk size for the schedules. */
  int njobs = 0;
  job_t *jobs = calloc((size_t)(NTESTS * (opt.nchunks + 1)), sizeof *jobs);
  if (!jobs)
    tiers_tool_fail("out of memory");
  for (int i = 0; i < NTESTS; i++) {
    if (!opt.selected[i])
      continue;
    int nch = tests[i].group == G_SCHED ? opt.nchunks : 1;
    for (int k = 0; k < nch; k++)
      jobs[njobs++] = (job_t){.d = &tests[i],
                              .chunk = tests[i].group == G_SCHED ? opt.chunks[k] : 1};
  }
  /* innerreps of each, in the table's order */
  for (int q = 0; q < njobs; q++) {
    job_t *b = &jobs[q];
    const test_def_t *d = b->d;
    job_enter(&c, b, T, pus);
    lock_at = page_lock(0);
    b->f.innerreps = calibrate_reps(&c, d->fn, d->split ? T : 1);
    b->f.ref_innerreps = d->ref != R_NONE ? ref_n[d->ref] : 0;
    b->f.warm = d->ref != R_NONE ? (d->split ? T : 1) : 0;
    b->f.pages = d->paged ? LOCK_PAGES : 0;
    job_leave(&c, b);
  }
  /* Sampling in turns: every figure of a kind (the OpenMP tests, then the
   * barrier teams) takes BLOCK_REPS pairs in turn, its team re-pinned
   * (OpenMP) or started afresh (barriers) for each turn, until each one's
   * rule says stop.  Pairs taken in one stretch share that stretch's
   * conditions (a neighbour's time slices, the host's other guests, the
   * state the team was left in), so a figure sampled in one stretch had
   * an interval that fits that stretch and moved from run to run; in
   * turns, each figure's pairs are spread over the whole run. */
  samples_t round_rtt = {NULL, 0, 0};
  link_round = 0;
  for (int kind = 0; kind < 2; kind++) {
    int active = 0;
    for (int q = 0; q < njobs; q++)
      active += (jobs[q].d->group == G_BARRIERS) == kind;
    while (active > 0) {
      if (have_link)
        link_round = link_before_round(pus, &round_rtt);
      for (int q = 0; q < njobs; q++) {
        job_t *b = &jobs[q];
        if (b->done || (b->d->group == G_BARRIERS) != kind)
          continue;
        job_enter(&c, b, T, pus);
        double t0 = tiers_now();
        figure_block(&c, b->d->fn, b->d->ref != R_NONE ? ref_fns[b->d->ref] : NULL, &b->f,
                     BLOCK_REPS);
        b->f.seconds += tiers_now() - t0;
        b->f.blocks++;
        job_leave(&c, b);
        b->f.stop = figure_check(&b->f, b->f.seconds);
        if (b->f.stop != TIERS_STATS_GO_ON) {
          b->done = 1;
          active--;
          progress_step();
        }
      }
    }
  }
  tiers_json_key(j, "tests");
  tiers_json_array_begin(j);
  for (int q = 0; q < njobs; q++) {
    const test_def_t *d = jobs[q].d;
    json_test_result(j, d, jobs[q].chunk, &jobs[q].f,
                     d->ref != R_NONE ? ref_names[d->ref] : NULL);
    figure_free(&jobs[q].f);
  }
  free(jobs);
  tiers_json_array_end(j);
  tiers_json_key(j, "pu_link");
  if (have_link) {
    /* after the last round: its end */
    link_before_round(pus, &round_rtt);
    tiers_json_object_begin(j);
    json_int_list(j, "pus", pus, 2);
    /* 0 where a measurement ran out of time (the PU was taken) */
    const double rtt[2] = {link_start.rtt_ns, round_rtt.v[round_rtt.n - 1]};
    tiers_json_kv_double_array(j, "rtt_ns", rtt, 2);
    tiers_json_kv_double_array(j, "round_rtt_ns", round_rtt.v, round_rtt.n);
    tiers_json_object_end(j);
  } else {
    tiers_json_null(j);
  }
  free(round_rtt.v);
  tiers_json_object_end(j);
  free(times);
  free(pus);
}

/* ------------------------------------------------------------------ */
/* Command line                                                        */

static void usage(void)
{
  printf("usage: tiers-probe-sync [--threads LIST] [--tests LIST] [--reps N]\n"
         "         [--test-time US] [--delay-time US] [--chunks LIST]\n"
         "         [--iters-per-thread N] [--pin compact|scatter] [--progress]\n"
         "         [--figure-time S] [--max-reps N] [--delay-length N]\n"
         "       tiers-probe-sync --stats X1,X2,...   (statistics of the numbers, as JSON)\n"
         "       tiers-probe-sync --pair-stats REFS|none TESTS   (one test's result)\n"
         "tests: groups sync, sched, barriers, or single tests:");
  for (int i = 0; i < NTESTS; i++)
    printf(" %s", tests[i].name);
  printf("\n");
}

static void parse_tests(const char *text)
{
  char *copy = strdup(text);
  if (!copy)
    tiers_tool_fail("out of memory");
  int any = 0;
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int g = 0; g < G_COUNT; g++)
      if (strcmp(tok, group_names[g]) == 0) {
        for (int i = 0; i < NTESTS; i++)
          if ((int)tests[i].group == g)
            opt.selected[i] = 1;
        found = 1;
      }
    for (int i = 0; i < NTESTS && !found; i++)
      if (strcmp(tok, tests[i].name) == 0)
        opt.selected[i] = found = 1;
    if (!found)
      tiers_tool_fail("unknown test group or test '%s' in --tests (groups: sync, sched, "
                      "barriers)",
                      tok);
    any = 1;
  }
  free(copy);
  if (!any)
    tiers_tool_fail("--tests is empty (groups: sync, sched, barriers)");
}

static int cmp_int(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Sorts and removes duplicates; returns the new count. */
static int sort_unique(int *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_int);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (m == 0 || v[m - 1] != v[i])
      v[m++] = v[i];
  return m;
}

/* A comma-separated list of numbers; returns the count, *out malloc'd. */
static int parse_numbers(const char *text, const char *option, double **out)
{
  int cap = 16, n = 0;
  double *x = malloc(sizeof *x * (size_t)cap);
  const char *p = text;
  while (x && *p) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !isfinite(v) || (*end && *end != ','))
      tiers_tool_fail("bad number list for %s: '%s'", option, text);
    if (n == cap) {
      cap *= 2;
      x = realloc(x, sizeof *x * (size_t)cap);
      if (!x)
        break;
    }
    x[n++] = v;
    p = *end ? end + 1 : end;
  }
  if (!x)
    tiers_tool_fail("out of memory");
  if (n == 0)
    tiers_tool_fail("bad number list for %s: '%s'", option, text);
  *out = x;
  return n;
}

/* --stats: prints the statistics of a list of numbers (for the tests). */
static int stats_mode(const char *text)
{
  double *x;
  int n = parse_numbers(text, "--stats", &x);
  sync_stats_t s;
  if (sync_stats_compute(x, n, OUTLIER_SIGMA, &s) != 0)
    tiers_tool_fail("out of memory");
  const double hz = 1e9;
  tiers_json_t j;
  tiers_json_init(&j, stdout);
  tiers_json_object_begin(&j);
  tiers_json_kv_double(&j, "outlier_sigma", OUTLIER_SIGMA);
  tiers_json_kv_double(&j, "cycles_per_second", hz);
  tiers_json_kv_double_array(&j, "samples_us", x, (size_t)n);
  sync_stats_json(&j, "stats", &s, hz);
  tiers_json_object_end(&j);
  sync_stats_free(&s);
  free(x);
  return tiers_json_finish(&j) == 0 ? 0 : 1;
}

static const char *need_value(int argc, char **argv, int *i)
{
  if (*i + 1 >= argc)
    tiers_tool_fail("option %s needs a value", argv[*i]);
  return argv[++*i];
}

/* --pair-stats REFS TESTS: the result of one test from given samples, as a
 * measurement writes it (REFS "none": no reference, the values are the
 * times), for the tests of the statistics. */
static int pair_stats_mode(const char *refs_text, const char *tests_text)
{
  double *refs = NULL, *times, *values;
  int n = parse_numbers(tests_text, "--pair-stats", &times);
  if (strcmp(refs_text, "none") != 0 &&
      parse_numbers(refs_text, "--pair-stats", &refs) != n)
    tiers_tool_fail("--pair-stats needs as many reference samples as test samples");
  values = malloc(sizeof *values * (size_t)n);
  if (!values)
    tiers_tool_fail("out of memory");
  for (int i = 0; i < n; i++)
    values[i] = times[i] - (refs ? refs[i] : 0.0);
  sync_stats_t s, rs;
  stats_or_fail(values, (size_t)n, &s);
  double ref_median = NAN;
  if (refs) {
    stats_or_fail(refs, (size_t)n, &rs);
    ref_median = rs.med.median;
    sync_stats_free(&rs);
  }
  const double hz = 1e9;
  tiers_json_t j;
  tiers_json_init(&j, stdout);
  tiers_json_object_begin(&j);
  tiers_json_kv_string(&j, "group", refs ? "sync" : "barriers");
  tiers_json_kv_string(&j, "name", refs ? "barrier" : "spin");
  tiers_json_kv_string(&j, "label", refs ? "BARRIER" : "spin barrier");
  sync_result_json(&j, refs ? "delay" : NULL, 1, 1, times, refs, values, (size_t)n, ref_median,
                   &s, hz, 0.0);
  tiers_json_object_end(&j);
  sync_stats_free(&s);
  free(refs);
  free(times);
  free(values);
  return tiers_json_finish(&j) == 0 ? 0 : 1;
}

static void parse_args(int argc, char **argv)
{
  const char *threads = NULL, *test_list = "sync,sched,barriers", *chunks = NULL;
  opt.reps = 20;
  opt.max_reps = DEFAULT_MAX_REPS;
  opt.figure_time_s = 1.0;
  opt.test_time_us = 1000.0;
  opt.delay_time_us = 0.1;
  opt.iters_per_thr = 128;
  opt.pin = TIERS_PIN_COMPACT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage();
      exit(0);
    } else if (strcmp(a, "--stats") == 0) {
      exit(stats_mode(need_value(argc, argv, &i)));
    } else if (strcmp(a, "--pair-stats") == 0) {
      const char *r = need_value(argc, argv, &i);
      exit(pair_stats_mode(r, need_value(argc, argv, &i)));
    } else if (strcmp(a, "--figure-time") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (tiers_parse_double(v, &opt.figure_time_s) != 0 || opt.figure_time_s > 3600)
        tiers_tool_fail("--figure-time must be a number of seconds above 0 and at most 3600 "
                        "(got '%s')",
                        v);
    } else if (strcmp(a, "--max-reps") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (tiers_parse_long(v, &opt.max_reps) != 0 || opt.max_reps < 2 || opt.max_reps > MAX_REPS)
        tiers_tool_fail("--max-reps must be an integer from 2 to %d (got '%s')", MAX_REPS, v);
    } else if (strcmp(a, "--progress") == 0) {
      opt.progress = 1;
    } else if (strcmp(a, "--threads") == 0) {
      threads = need_value(argc, argv, &i);
    } else if (strcmp(a, "--tests") == 0) {
      test_list = need_value(argc, argv, &i);
    } else if (strcmp(a, "--chunks") == 0) {
      chunks = need_value(argc, argv, &i);
    } else if (strcmp(a, "--reps") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (tiers_parse_long(v, &opt.reps) != 0 || opt.reps < 2 || opt.reps > MAX_REPS)
        tiers_tool_fail("--reps must be an integer from 2 to %d (got '%s')", MAX_REPS, v);
    } else if (strcmp(a, "--iters-per-thread") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (tiers_parse_long(v, &opt.iters_per_thr) != 0 || opt.iters_per_thr < 1 ||
          opt.iters_per_thr > 1000000)
        tiers_tool_fail("--iters-per-thread must be an integer from 1 to 1000000 (got '%s')",
                        v);
    } else if (strcmp(a, "--test-time") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (tiers_parse_double(v, &opt.test_time_us) != 0 || opt.test_time_us > 1e7)
        tiers_tool_fail("--test-time must be a number of microseconds above 0 and at most "
                        "1e7 (got '%s')",
                        v);
    } else if (strcmp(a, "--delay-time") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (tiers_parse_double(v, &opt.delay_time_us) != 0 || opt.delay_time_us > 1e5)
        tiers_tool_fail("--delay-time must be a number of microseconds above 0 and at most "
                        "1e5 (got '%s')",
                        v);
    } else if (strcmp(a, "--delay-length") == 0) {
      /* the delay of an earlier launch of the same measurement, so that
       * every launch times the same delay() (tiers.probe.sync's launches) */
      const char *v = need_value(argc, argv, &i);
      if (tiers_parse_long(v, &opt.delay_length) != 0 || opt.delay_length < 1 ||
          opt.delay_length > INT_MAX / 2)
        tiers_tool_fail("--delay-length must be an integer from 1 to %d (got '%s')",
                        INT_MAX / 2, v);
    } else if (strcmp(a, "--pin") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (strcmp(v, "compact") == 0)
        opt.pin = TIERS_PIN_COMPACT;
      else if (strcmp(v, "scatter") == 0)
        opt.pin = TIERS_PIN_SCATTER;
      else
        tiers_tool_fail("--pin must be compact or scatter (sync always pins; got '%s')", v);
    } else {
      tiers_tool_fail("unknown option '%s' (see --help)", a);
    }
  }
  parse_tests(test_list);
  if (opt.max_reps < opt.reps)
    opt.max_reps = opt.reps;

  if (tiers_topo_load(&topo, "this") != TIERS_OK)
    tiers_tool_fail_last("cannot read the topology of this machine");
  int npus = tiers_topo_num_pus(topo);
  if (threads) {
    opt.nthreads = tiers_parse_int_list(threads, &opt.threads);
    if (opt.nthreads < 0)
      tiers_tool_fail("bad thread list '%s' for --threads (positive integers, e.g. 2,4 or "
                      "2-8)",
                      threads);
    opt.nthreads = sort_unique(opt.threads, opt.nthreads);
    if (opt.threads[opt.nthreads - 1] > npus)
      tiers_tool_fail("thread count %d exceeds the %d PUs of this machine (sync pins one "
                      "thread per PU)",
                      opt.threads[opt.nthreads - 1], npus);
  } else {
    int lo = npus >= 2 ? 2 : 1;
    opt.nthreads = npus - lo + 1;
    opt.threads = malloc(sizeof *opt.threads * (size_t)opt.nthreads);
    if (!opt.threads)
      tiers_tool_fail("out of memory");
    for (int i = 0; i < opt.nthreads; i++)
      opt.threads[i] = lo + i;
  }
  if (chunks) {
    opt.nchunks = tiers_parse_int_list(chunks, &opt.chunks);
    if (opt.nchunks < 0)
      tiers_tool_fail("bad chunk list '%s' for --chunks (positive integers, e.g. 1,8,64)",
                      chunks);
    opt.nchunks = sort_unique(opt.chunks, opt.nchunks);
    if (opt.chunks[opt.nchunks - 1] > 1000000)
      tiers_tool_fail("chunk size %d is too large (at most 1000000)",
                      opt.chunks[opt.nchunks - 1]);
  } else {
    opt.nchunks = 8;
    opt.chunks = malloc(sizeof *opt.chunks * 8);
    if (!opt.chunks)
      tiers_tool_fail("out of memory");
    for (int i = 0; i < 8; i++)
      opt.chunks[i] = 1 << i;
  }
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  parse_args(argc, argv);
  omp_set_dynamic(0);
  omp_set_nested(0);
  lock_pages_init();

  int first_pu = 0;
  if (tiers_topo_pin_order(topo, opt.pin, 1, &first_pu) != TIERS_OK)
    tiers_tool_fail_last("cannot place the threads");
  bind_self(first_pu); /* calibrations run on the PU of thread 0 */
  cycle_hz = tiers_cycle_hz(0.1);
  if (!(cycle_hz > 0))
    tiers_tool_fail("cannot find the CPU clock rate to express times in cycles");
  double delay_us;
  if (opt.delay_length > 0) {
    delay_length = (int)opt.delay_length;
    calibration_attempts = 0;
    delay_us = measure_delay_us();
  } else {
    delay_us = calibrate_delay(opt.delay_time_us);
  }
  timer_us = timer_cost_us();

  tiers_json_t j;
  tiers_json_init(&j, stdout);
  tiers_json_object_begin(&j);
  tiers_tool_json_native(&j);
  tiers_json_key(&j, "params");
  tiers_json_object_begin(&j);
  json_int_list(&j, "threads", opt.threads, opt.nthreads);
  tiers_json_key(&j, "tests");
  tiers_json_array_begin(&j);
  for (int i = 0; i < NTESTS; i++)
    if (opt.selected[i])
      tiers_json_string(&j, tests[i].name);
  tiers_json_array_end(&j);
  json_int_list(&j, "chunks", opt.chunks, opt.nchunks);
  tiers_json_kv_int(&j, "reps", opt.reps);
  tiers_json_kv_int(&j, "max_reps", opt.max_reps);
  tiers_json_kv_double(&j, "figure_time_s", opt.figure_time_s);
  tiers_json_kv_string(&j, "rule",
                       "repeat until the 95 % CI of the median is within +-5 %, "
                       "figure_time_s passes or max_reps are taken; at least reps");
  tiers_json_kv_string(&j, "pairs",
                       "reference and test timed in alternating order per repetition; "
                       "overhead = median of the per-pair differences");
  tiers_json_kv_int(&j, "block_reps", BLOCK_REPS);
  tiers_json_kv_string(&j, "warm_up",
                       "every timed test run follows an untimed run of one construct "
                       "(one per thread where the threads share the constructs), so that it "
                       "starts with the team awake, as EPCC's back-to-back repetitions do");
  tiers_json_kv_int(&j, "lock_pages", LOCK_PAGES);
  tiers_json_kv_string(&j, "lock_placement",
                       "LOCK/UNLOCK's lock on lock_pages pages of its own (one lock per page at "
                       "the same offset), pairs 2k and 2k+1 on page k mod lock_pages; per "
                       "page the median of its pairs (page_medians_us)");
  tiers_json_kv_string(&j, "turns",
                       "the figures of one kind (OpenMP tests, barrier teams) are sampled in "
                       "turns of block_reps repetitions, the team re-pinned or restarted per "
                       "turn, so that each figure's repetitions spread over the whole run");
  tiers_json_kv_double(&j, "test_time_us", opt.test_time_us);
  tiers_json_kv_double(&j, "delay_time_us", opt.delay_time_us);
  tiers_json_kv_int(&j, "delay_length", delay_length);
  tiers_json_kv_double(&j, "delay_measured_us", delay_us);
  tiers_json_kv_int(&j, "delay_calibrations", calibration_attempts);
  tiers_json_kv_double(&j, "timer_us", timer_us);
  tiers_json_kv_string(&j, "resolution",
                       "an overhead below twice the interquartile range of the reference "
                       "loop's repetitions (at least two clock readings per inner repetition) "
                       "is below resolution: reliable false");
  tiers_json_kv_int(&j, "iters_per_thread", opt.iters_per_thr);
  tiers_json_kv_double(&j, "cycles_per_second", cycle_hz);
  tiers_json_kv_string(&j, "pin", tiers_pin_policy_name(opt.pin));
  tiers_json_kv_int(&j, "pus_available", tiers_topo_num_pus(topo));
  tiers_json_kv_double(&j, "outlier_sigma", OUTLIER_SIGMA);
  tiers_json_kv_string(&j, "interval", "student-t 95% confidence interval of the mean");
  tiers_json_kv_int(&j, "openmp_version", _OPENMP);
  const char *wait_policy = getenv("OMP_WAIT_POLICY");
  tiers_json_key(&j, "omp_wait_policy");
  if (wait_policy)
    tiers_json_string(&j, wait_policy);
  else
    tiers_json_null(&j);
  tiers_json_object_end(&j);

  progress_total = count_tests();
  tiers_json_key(&j, "runs");
  tiers_json_array_begin(&j);
  for (int i = 0; i < opt.nthreads; i++)
    measure_threads(&j, opt.threads[i]);
  tiers_json_array_end(&j);
  /* the delay measured again after the tests: a machine whose speed
   * changed during the run (another guest on the host, a clock change)
   * shows here, and every overhead of the run is suspect */
  double delay_end_us = measure_delay_us();
  tiers_json_key(&j, "delay_check");
  tiers_json_object_begin(&j);
  tiers_json_kv_double(&j, "start_us", delay_us);
  tiers_json_kv_double(&j, "end_us", delay_end_us);
  tiers_json_kv_double(&j, "drift", (delay_end_us - delay_us) / delay_us);
  tiers_json_object_end(&j);
  tiers_json_object_end(&j);
  tiers_topo_destroy(&topo);
  munmap(lock_pages, (size_t)lock_page_size * LOCK_PAGES);
  free(opt.threads);
  free(opt.chunks);
  if (tiers_json_finish(&j) != 0)
    tiers_tool_fail("cannot write the result: %s", strerror(errno));
  return 0;
}
