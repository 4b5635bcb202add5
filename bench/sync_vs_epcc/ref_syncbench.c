/*
 * A reference for OpenMP synchronisation overheads, written from the
 * published method of the EPCC OpenMP micro-benchmarks (syncbench):
 *
 *  - delay(n) is a loop of n dependent additions; n is grown by 10 % + 1
 *    until one call lasts at least the requested delay time;
 *  - a test runs `innerreps` constructs, each around one delay(); a
 *    reference runs the same delays with no construct on one thread;
 *  - innerreps starts at 10 and doubles until one run of the test lasts at
 *    least the target test time; every test (and reference) finds its own;
 *  - each is run outerreps + 1 times (the first is a warm-up and dropped);
 *    one run's time is its elapsed time / innerreps;
 *  - the mean and standard deviation over the outer repetitions are
 *    reported; runs further than 3 standard deviations from the mean are
 *    counted as outliers (the suite reports them and keeps them);
 *  - overhead = mean test time - mean reference time.
 *
 * CRITICAL, LOCK/UNLOCK and ATOMIC share innerreps among the threads
 * (ATOMIC with its loop bound computed once per thread, as in EPCC 4.0);
 * ATOMIC and REDUCTION have references of their own (an addition loop;
 * delay() and an addition).
 *
 *   OMP_NUM_THREADS=T ref_syncbench [DELAY_US [OUTERREPS [TEST_US [DELAY_LENGTH
 *                                     [NAME=INNERREPS ...]]]]]
 *
 * DELAY_LENGTH (when above 0) replaces the calibration, and NAME=INNERREPS
 * replaces the search for innerreps of one test or reference (names as
 * printed; references: ref_delay, ref_atomic, ref_reduction), so that a comparison can
 * run exactly the delays and inner repetitions of another program.
 *
 * Two more lines, critical_local and lock_local, are CRITICAL and LOCK with
 * the loop bound computed once (as tiers' loops have it) instead of
 * EPCC's innerreps / nthreads of globals in every iteration.
 *
 * prints one line per construct:
 *   NAME OVERHEAD_US MEAN_US SD_US REF_US OUTLIERS INNERREPS MEDIAN_OVERHEAD_US
 * (MEDIAN_OVERHEAD_US: the median test time minus the median reference
 * time, over the same outer repetitions -- not part of EPCC's method, for
 * comparison with a median) and first a line "delay DELAY_LENGTH MEASURED_US"
 * (the fastest of 50 runs of about 1 ms of delay(), as tiers measures its own);
 * last, two diagnostic lines that are not part of EPCC's method, measured
 * after every test: "handoffs CRITICAL LOCK" (the fraction of constructs
 * whose lock changed hands, median of 5 counted runs each) and "line_ns NS"
 * (one-way time of a cache line between threads 0 and 1), then per page
 * of PAGES pages of their own "pages_line_ns NS..." and "pages_lock_us
 * US..." (that line time and LOCK/UNLOCK's median overhead with the lock
 * in that page).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int delaylength;
static long innerreps;
static int nthreads;
static double test_us = 1000.0;
static int outerreps = 20;
/* The lock on cache lines of its own (two: adjacent-line prefetch), as
 * tiers places it: beside the loop's parameters (innerreps, nthreads,
 * delaylength, which every thread reads in every iteration) each set and
 * unset would invalidate the line the other thread reads next, and
 * LOCK/UNLOCK would hold that false sharing as well as the lock. */
static struct {
  _Alignas(128) omp_lock_t lock;
  _Alignas(128) char end;
} locked;
#define lock (locked.lock)
static volatile double sink;

/* Aligned to 64 bytes, as tiers' delay(): a loop that straddles a 64-byte
 * boundary (wherever the linker happens to put it) takes longer for the
 * same length, and both programs must time the same delay. */
static void __attribute__((noinline, noclone, aligned(64))) delay(int n)
{
  float a = 0.0f;
  for (int i = 0; i < n; i++)
    a += (float)i;
  if (a < 0)
    sink = a;
}

static void calibrate(double delay_us)
{
  const int reps = 1000;
  double actual = 0;
  delaylength = 0;
  delay(delaylength);
  while (actual < delay_us) {
    delaylength = (int)(delaylength * 1.1) + 1;
    double t0 = omp_get_wtime();
    for (int i = 0; i < reps; i++)
      delay(delaylength);
    actual = (omp_get_wtime() - t0) * 1e6 / reps;
  }
}

/* The time of one delay(delaylength) in us, measured as tiers measures its
 * own: the fastest of 50 runs of about 1 ms each (a single run, as this
 * program timed it before, holds whatever disturbed it and the clock's
 * ramp at start-up, and made the same length look 20 % longer or shorter
 * than in tiers). */
static double delay_time_us(void)
{
  double t0 = omp_get_wtime();
  for (int i = 0; i < 16; i++)
    delay(delaylength);
  double per = (omp_get_wtime() - t0) / 16;
  long calls = (long)(0.001 / (per > 0 ? per : 1e-9)) + 1;
  double best = INFINITY;
  for (int r = 0; r < 50; r++) {
    t0 = omp_get_wtime();
    for (long i = 0; i < calls; i++)
      delay(delaylength);
    double t = (omp_get_wtime() - t0) / (double)calls;
    if (t < best)
      best = t;
  }
  return best * 1e6;
}

/* references */
static void refer(void)
{
  for (long j = 0; j < innerreps; j++)
    delay(delaylength);
}

static void referatom(void)
{
  double a = 0.0, b = 1.0, c = 1.0 + 1.0e-15;
  for (long j = 0; j < innerreps; j++) {
    a += b;
    b *= c;
  }
  if (a < 0.0)
    sink = a;
}

static void referred(void)
{
  int a = 0;
  for (long j = 0; j < innerreps; j++) {
    delay(delaylength);
    a += 1;
  }
  sink = a;
}

/* tests */
static void testpr(void)
{
  for (long j = 0; j < innerreps; j++) {
#pragma omp parallel
    delay(delaylength);
  }
}

static void testfor(void)
{
#pragma omp parallel
  for (long j = 0; j < innerreps; j++) {
#pragma omp for
    for (int i = 0; i < nthreads; i++)
      delay(delaylength);
  }
}

static void testbar(void)
{
#pragma omp parallel
  for (long j = 0; j < innerreps; j++) {
    delay(delaylength);
#pragma omp barrier
  }
}

static void testsing(void)
{
#pragma omp parallel
  for (long j = 0; j < innerreps; j++) {
#pragma omp single
    delay(delaylength);
  }
}

static void testcrit(void)
{
#pragma omp parallel
  for (long j = 0; j < innerreps / nthreads; j++) {
#pragma omp critical
    delay(delaylength);
  }
}

static void testlock(void)
{
#pragma omp parallel
  for (long j = 0; j < innerreps / nthreads; j++) {
    omp_set_lock(&lock);
    delay(delaylength);
    omp_unset_lock(&lock);
  }
}

/* CRITICAL and LOCK as above but with the loop bound computed once, into a
 * local, as tiers' loops have it.  Not part of EPCC's method: in EPCC's
 * code (and above) innerreps and nthreads are globals, re-read after every
 * external call, so every iteration divides them again between the
 * release of the lock and the next acquire; these two show, in the same
 * program and run, whether that division changes the figure. */
static void testcrit_local(void)
{
  const long each = innerreps / nthreads;
#pragma omp parallel
  for (long j = 0; j < each; j++) {
#pragma omp critical
    delay(delaylength);
  }
}

static void testlock_local(void)
{
  const long each = innerreps / nthreads;
#pragma omp parallel
  for (long j = 0; j < each; j++) {
    omp_set_lock(&lock);
    delay(delaylength);
    omp_unset_lock(&lock);
  }
}

/* ATOMIC as EPCC's suite has it since version 4.0: the loop bound
 * innerreps / nthreads computed once per thread ("avoid division on every
 * iteration").  Version 3.1 divided in the loop condition, and gcc re-reads
 * and divides the globals after every atomic (a 64-bit idiv between one
 * lock cmpxchg and the next), which the reference loop (referatom) does
 * not: its 40-50 ns overhead held that division.  CRITICAL and LOCK keep
 * the division in the loop, as EPCC 4.0 does (critical_local and
 * lock_local below show whether it matters there). */
static void testatom(void)
{
  double a = 0.0, c = 1.0 + 1.0e-15;
#pragma omp parallel shared(a)
  {
    double b = 1.0;
    const long ub = innerreps / nthreads;
    for (long j = 0; j < ub; j++) {
#pragma omp atomic
      a += b;
      b *= c;
    }
  }
  if (a < 0.0)
    sink = a;
}

static void testred(void)
{
  int a = 0;
  for (long j = 0; j < innerreps; j++) {
#pragma omp parallel reduction(+ : a)
    {
      delay(delaylength);
      a += 1;
    }
  }
  sink = a;
}

/* Diagnostics, not part of EPCC's method, run after every test (so that
 * they change none of the figures above): how often the lock of CRITICAL
 * and LOCK/UNLOCK changes hands, and how long a cache line takes between
 * the two threads' PUs. */

/* Who held the lock last, on a line of its own; written inside the lock. */
static struct {
  _Alignas(128) int last;
  _Alignas(128) volatile long flag;
  _Alignas(128) char end;
} diag;

/* Hand-overs per construct in one run of innerreps CRITICAL (or, with
 * @p use_lock, LOCK/UNLOCK) constructs: a construct whose previous holder
 * was another thread.  The count costs one write of a line inside the
 * lock, in these runs only. */
static long count_handover(long h)
{
  const int me = omp_get_thread_num();
  if (diag.last != me) {
    diag.last = me;
    h++;
  }
  return h;
}

static double handoffs(int use_lock)
{
  long total = 0;
  diag.last = -1;
#pragma omp parallel reduction(+ : total)
  {
    const long each = innerreps / nthreads;
    long h = 0;
    if (use_lock)
      for (long j = 0; j < each; j++) {
        omp_set_lock(&lock);
        h = count_handover(h);
        delay(delaylength);
        omp_unset_lock(&lock);
      }
    else
      for (long j = 0; j < each; j++) {
#pragma omp critical
        {
          h = count_handover(h);
          delay(delaylength);
        }
      }
    total = h;
  }
  return (double)total / (double)(innerreps / nthreads * nthreads);
}

/* One-way time of a cache line between threads 0 and 1 in ns: the
 * fastest of 5 runs of 20,000 round trips of a counter that each thread
 * advances in turn (0 with one thread). */
static double line_transfer_ns(volatile long *flag)
{
  if (nthreads < 2)
    return 0.0;
  const long trips = 20000;
  double best = INFINITY;
  for (int r = 0; r < 5; r++) {
    double el = 0.0;
    *flag = 0;
#pragma omp parallel
    {
      const int me = omp_get_thread_num();
#pragma omp barrier
      if (me < 2) {
        double t0 = omp_get_wtime();
        for (long i = 0; i < trips; i++) {
          while (*flag != 2 * i + me)
            ;
          *flag = 2 * i + me + 1;
        }
        if (me == 0)
          el = omp_get_wtime() - t0;
      }
    }
    double ns = el / (double)trips / 2.0 * 1e9;
    if (ns < best)
      best = ns;
  }
  return best;
}

/* The same lock and line on PAGES pages of their own: within one process,
 * does the cost depend on where the line lies?  (On a mesh of cores the
 * line's home, chosen from its physical address, is part of every transfer
 * between two cores; ASLR does not change a static variable's place in its
 * page, but every process gets other physical pages.) */
#define PAGES 8

static int cmp_double(const void *a, const void *b);

static double lock_run_at(omp_lock_t *lk)
{
  const long each = innerreps / nthreads;
  double t0 = omp_get_wtime();
#pragma omp parallel
  for (long j = 0; j < each; j++) {
    omp_set_lock(lk);
    delay(delaylength);
    omp_unset_lock(lk);
  }
  return (omp_get_wtime() - t0) * 1e6 / (double)innerreps;
}

static double median_of(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Per page: the one-way line time (ns) and LOCK/UNLOCK's overhead (us; the
 * median of 5 runs minus @p ref_us), each the median of 3 passes over the
 * pages. */
static int pages_diag(double ref_us, double *line_ns, double *lock_us)
{
  char *base = mmap(NULL, 4096L * PAGES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
  if (base == MAP_FAILED)
    return -1;
  double ln[3][PAGES], lk[3][PAGES], runs[5];
  for (int p = 0; p < PAGES; p++) {
    base[4096L * p] = 1;
    omp_init_lock((omp_lock_t *)(base + 4096L * p + 0x200));
  }
  for (int pass = 0; pass < 3; pass++)
    for (int p = 0; p < PAGES; p++) {
      omp_lock_t *lk_p = (omp_lock_t *)(base + 4096L * p + 0x200);
      ln[pass][p] = line_transfer_ns((volatile long *)(base + 4096L * p + 0x800));
      (void)lock_run_at(lk_p);
      for (int k = 0; k < 5; k++)
        runs[k] = lock_run_at(lk_p);
      lk[pass][p] = median_of(runs, 5) - ref_us;
    }
  for (int p = 0; p < PAGES; p++) {
    double a[3] = {ln[0][p], ln[1][p], ln[2][p]}, b[3] = {lk[0][p], lk[1][p], lk[2][p]};
    line_ns[p] = median_of(a, 3);
    lock_us[p] = median_of(b, 3);
    omp_destroy_lock((omp_lock_t *)(base + 4096L * p + 0x200));
  }
  munmap(base, 4096L * PAGES);
  return 0;
}

static int nfixed;
static char **fixed; /* NAME=INNERREPS arguments */

/* innerreps given for @p name on the command line, or 0. */
static long fixed_innerreps(const char *name)
{
  size_t len = strlen(name);
  for (int i = 0; i < nfixed; i++)
    if (strncmp(fixed[i], name, len) == 0 && fixed[i][len] == '=')
      return atol(fixed[i] + len + 1);
  return 0;
}

static void getinnerreps(void (*fn)(void))
{
  innerreps = 10;
  double t = 0;
  while (t < test_us) {
    double t0 = omp_get_wtime();
    fn();
    t = (omp_get_wtime() - t0) * 1e6;
    if (t < test_us)
      innerreps *= 2;
    if (innerreps > 1L << 40) {
      fprintf(stderr, "ref_syncbench: error: a test never reaches %g us\n", test_us);
      exit(1);
    }
  }
}

typedef struct {
  double mean, sd, median;
  int outliers;
  long innerreps;
} result_t;

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* @p reps_name: the test whose NAME=INNERREPS applies (the *_local
 * variants run the inner repetitions of the test they vary). */
static result_t bench(const char *reps_name, void (*fn)(void))
{
  innerreps = fixed_innerreps(reps_name);
  if (innerreps <= 0)
    getinnerreps(fn);
  double *times = malloc(sizeof(double) * (size_t)(outerreps + 1));
  if (!times) {
    fprintf(stderr, "ref_syncbench: error: out of memory\n");
    exit(1);
  }
  for (int k = 0; k <= outerreps; k++) {
    double t0 = omp_get_wtime();
    fn();
    times[k] = (omp_get_wtime() - t0) * 1e6 / (double)innerreps;
  }
  result_t r = {0, 0, 0, 0, innerreps};
  for (int k = 1; k <= outerreps; k++)
    r.mean += times[k];
  r.mean /= outerreps;
  double ss = 0;
  for (int k = 1; k <= outerreps; k++)
    ss += (times[k] - r.mean) * (times[k] - r.mean);
  r.sd = outerreps > 1 ? sqrt(ss / (outerreps - 1)) : 0;
  for (int k = 1; k <= outerreps; k++)
    if (fabs(times[k] - r.mean) > 3.0 * r.sd)
      r.outliers++;
  qsort(times + 1, (size_t)outerreps, sizeof *times, cmp_double);
  r.median = outerreps % 2 ? times[1 + outerreps / 2]
                           : 0.5 * (times[outerreps / 2] + times[1 + outerreps / 2]);
  free(times);
  return r;
}

int main(int argc, char **argv)
{
  double delay_us = argc > 1 ? atof(argv[1]) : 0.1;
  if (argc > 2)
    outerreps = atoi(argv[2]);
  if (argc > 3)
    test_us = atof(argv[3]);
  int fixed_length = argc > 4 ? atoi(argv[4]) : 0;
  if (argc > 5) {
    nfixed = argc - 5;
    fixed = argv + 5;
  }
  if (!(delay_us > 0) || outerreps < 2 || !(test_us > 0)) {
    fprintf(stderr, "ref_syncbench: error: DELAY_US and TEST_US must be positive and "
                    "OUTERREPS at least 2\n");
    return 2;
  }
#pragma omp parallel
#pragma omp master
  nthreads = omp_get_num_threads();
  omp_init_lock(&lock);
  if (fixed_length > 0)
    delaylength = fixed_length;
  else
    calibrate(delay_us);
  printf("delay %d %.6f\n", delaylength, delay_time_us());

  result_t ref = bench("ref_delay", refer), refatom = bench("ref_atomic", referatom),
           refred = bench("ref_reduction", referred);
  struct {
    const char *name, *reps_name;
    void (*fn)(void);
    const result_t *ref;
  } tests[] = {{"parallel", "parallel", testpr, &ref},
               {"for", "for", testfor, &ref},
               {"barrier", "barrier", testbar, &ref},
               {"single", "single", testsing, &ref},
               {"critical", "critical", testcrit, &ref},
               {"lock", "lock", testlock, &ref},
               {"atomic", "atomic", testatom, &refatom},
               {"reduction", "reduction", testred, &refred},
               {"critical_local", "critical", testcrit_local, &ref},
               {"lock_local", "lock", testlock_local, &ref}};
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    result_t r = bench(tests[i].reps_name, tests[i].fn);
    printf("%s %.6f %.6f %.6f %.6f %d %ld %.6f\n", tests[i].name, r.mean - tests[i].ref->mean,
           r.mean, r.sd, tests[i].ref->mean, r.outliers, r.innerreps,
           r.median - tests[i].ref->median);
  }
  /* diagnostics (see handoffs, line_transfer_ns), with the inner
   * repetitions of CRITICAL and LOCK/UNLOCK: the median of 5 runs each */
  double hc[5], hl[5];
  innerreps = fixed_innerreps("critical");
  if (innerreps <= 0)
    getinnerreps(testcrit);
  for (int k = 0; k < 5; k++)
    hc[k] = handoffs(0);
  innerreps = fixed_innerreps("lock");
  if (innerreps <= 0)
    getinnerreps(testlock);
  for (int k = 0; k < 5; k++)
    hl[k] = handoffs(1);
  qsort(hc, 5, sizeof *hc, cmp_double);
  qsort(hl, 5, sizeof *hl, cmp_double);
  printf("handoffs %.6f %.6f\n", hc[2], hl[2]);
  printf("line_ns %.2f\n", line_transfer_ns(&diag.flag));
  double pl[PAGES], pk[PAGES];
  if (pages_diag(ref.median, pl, pk) == 0) {
    printf("pages_line_ns");
    for (int p = 0; p < PAGES; p++)
      printf(" %.2f", pl[p]);
    printf("\npages_lock_us");
    for (int p = 0; p < PAGES; p++)
      printf(" %.6f", pk[p]);
    printf("\n");
  }
  omp_destroy_lock(&lock);
  return 0;
}
