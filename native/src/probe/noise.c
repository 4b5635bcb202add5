/*
 * tiers-probe-noise: is this machine quiet enough to measure on?
 *
 * A fixed-work-quantum (FWQ) test, the kind used to detect operating-system
 * noise: one thread pinned to every PU repeats the same fixed amount of
 * work (a dependent chain of integer multiply-adds, calibrated to take
 * --quantum-us on an undisturbed CPU) a fixed number of times and times
 * each repetition.  A quiet PU gives quanta close to the fastest one; time
 * taken by interrupts, daemons or another process sharing the PU shows as
 * longer quanta.  Per PU the tool reports the fastest quantum, the median,
 * the 99th percentile and the slowest, the fraction of quanta longer than
 * 1.5 times the fastest ("noise fraction"), and the fraction of the time
 * lost against the fastest quantum ("lost fraction": sum(t - min) /
 * sum(t)).  A CPU hog that shares a PU takes about half of its time under
 * Linux's fair scheduler; an idle PU loses a percent or less.
 *
 * Then the pairs of PUs (each PU with the next one in the list, at most
 * PAIRS_MAX pairs), sampled --pair-samples times with a pause between
 * samples: the round trip of a cache line between threads pinned to the
 * two PUs (common/pulink.h).  On a virtual machine the host may put two
 * virtual CPUs on one core's hyperthreads, on cores that share a cache or
 * on different dies, and move them while a program runs: samples that
 * disagree show it, and the topology's own layer for the pair is written
 * beside them.
 *
 * Beside it, the machine's load: /proc/loadavg, the runnable tasks
 * (procs_running of /proc/stat) before the test, and the CPU time that
 * everything but this process used during the test, from /proc/stat and
 * /proc/self/stat, as a fraction of the PUs' time (steal time, on a
 * virtual machine, separately).
 *
 *   tiers-probe-noise [--quick] [--quantum-us Q] [--duration-ms D] [--pus LIST]
 *                     [--pair-samples N]
 *
 * Prints one JSON object; bad input gives one "error:" line and exit 2.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pulink.h"
#include "common/tool.h"
#include "tiers/topo.h"

#define NOISE_THRESHOLD 1.5 /* a quantum this many times the fastest is noisy */
#define PAIRS_MAX 32        /* pairs of PUs sampled, at most */
#define PAIR_SAMPLES_MAX 100

static struct {
  double quantum_us;
  double duration_ms;
  int *pus; /* logical PU indices */
  int npus;
  int quick;
  int pair_samples; /* -1: the default (3, or 5 without --quick) */
} opt = {100.0, 1000.0, NULL, 0, 0, -1};

static tiers_topo_t topo;

/* The work: a dependent chain the compiler cannot shorten. */
static uint64_t __attribute__((noinline)) work(uint64_t x, long n)
{
  for (long i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ __volatile__("" : "+r"(x));
  }
  return x;
}

static volatile uint64_t sink;

/* Work units per quantum: the fastest of several tries, so that a try
 * disturbed by noise does not shorten the quantum. */
static long calibrate(double quantum_us)
{
  const long probe = 100000;
  int64_t best = 0;
  for (int r = 0; r < 30; r++) {
    int64_t t0 = tiers_now_ns();
    sink = work(sink + (uint64_t)r, probe);
    int64_t dt = tiers_now_ns() - t0;
    if (dt > 0 && (best == 0 || dt < best))
      best = dt;
  }
  double per_ns = (double)probe / (double)(best > 0 ? best : 1);
  long n = (long)(per_ns * quantum_us * 1e3);
  return n > 0 ? n : 1;
}

struct fwq {
  int pu;           /* logical index */
  long quanta;
  long units;
  pthread_barrier_t *start;
  int64_t *ns;      /* one per quantum */
  int bind_failed;
};

static void *fwq_thread(void *arg)
{
  struct fwq *f = arg;
  if (tiers_topo_bind_thread(topo, f->pu) != TIERS_OK)
    f->bind_failed = 1;
  uint64_t x = (uint64_t)f->pu + 1;
  x = work(x, f->units); /* warm-up */
  pthread_barrier_wait(f->start);
  for (long q = 0; q < f->quanta; q++) {
    int64_t t0 = tiers_now_ns();
    x = work(x, f->units);
    f->ns[q] = tiers_now_ns() - t0;
  }
  sink = x;
  return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------------ */
/* Load */

struct cpu_times {
  long long busy;  /* user + nice + system + irq + softirq, all CPUs, in ticks */
  long long steal;
  long running;    /* procs_running */
  int ok;
};

static struct cpu_times read_stat(void)
{
  struct cpu_times c = {0, 0, -1, 0};
  FILE *f = fopen("/proc/stat", "r");
  if (!f)
    return c;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    long long v[10] = {0};
    if (strncmp(line, "cpu ", 4) == 0 &&
        sscanf(line + 4, "%lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) >= 8) {
      c.busy = v[0] + v[1] + v[2] + v[5] + v[6];
      c.steal = v[7];
      c.ok = 1;
    } else if (strncmp(line, "procs_running ", 14) == 0) {
      c.running = strtol(line + 14, NULL, 10);
    }
  }
  fclose(f);
  return c;
}

/* This process's CPU time (all threads), in clock ticks; -1 when unknown. */
static long long self_ticks(void)
{
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f)
    return -1;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!p)
    return -1;
  unsigned long long utime = 0, stime = 0;
  /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
    return -1;
  return (long long)(utime + stime);
}

static void json_load_before(tiers_json_t *j, long running_before)
{
  FILE *f = fopen("/proc/loadavg", "r");
  double l1 = -1, l5 = -1, l15 = -1;
  long runnable = -1, total = -1;
  if (f) {
    if (fscanf(f, "%lf %lf %lf %ld/%ld", &l1, &l5, &l15, &runnable, &total) != 5)
      l1 = -1;
    fclose(f);
  }
  tiers_json_key(j, "loadavg");
  if (l1 >= 0) {
    double l[3] = {l1, l5, l15};
    tiers_json_array_begin(j);
    for (int i = 0; i < 3; i++)
      tiers_json_double(j, l[i]);
    tiers_json_array_end(j);
  } else {
    tiers_json_null(j);
  }
  tiers_json_key(j, "procs_running");
  /* this process's own thread is one of them */
  if (running_before >= 0)
    tiers_json_int(j, running_before - 1 > 0 ? running_before - 1 : 0);
  else
    tiers_json_null(j);
  tiers_json_kv_int(j, "online_cpus", sysconf(_SC_NPROCESSORS_ONLN));
}

/* ------------------------------------------------------------------ */
/* Options */

static void usage_fail(const char *fmt, const char *arg)
{
  char msg[256];
  snprintf(msg, sizeof msg, fmt, arg);
  tiers_tool_fail("%s (usage: tiers-probe-noise [--quick] [--quantum-us Q] "
                  "[--duration-ms D] [--pus LIST] [--pair-samples N])", msg);
}

static void parse_args(int argc, char **argv)
{
  int duration_given = 0;
  const char *pus = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--quick") == 0) {
      opt.quick = 1;
    } else if (strcmp(a, "--quantum-us") == 0) {
      if (!v || tiers_parse_double(v, &opt.quantum_us) != 0 || opt.quantum_us < 1 ||
          opt.quantum_us > 100000)
        usage_fail("--quantum-us needs microseconds from 1 to 100000 (got '%s')", v ? v : "");
      i++;
    } else if (strcmp(a, "--duration-ms") == 0) {
      if (!v || tiers_parse_double(v, &opt.duration_ms) != 0 || opt.duration_ms < 1 ||
          opt.duration_ms > 600000)
        usage_fail("--duration-ms needs milliseconds from 1 to 600000 (got '%s')", v ? v : "");
      duration_given = 1;
      i++;
    } else if (strcmp(a, "--pus") == 0) {
      if (!v)
        usage_fail("--pus needs a list of PU indices%s", "");
      pus = v;
      i++;
    } else if (strcmp(a, "--pair-samples") == 0) {
      long k = -1;
      if (!v || tiers_parse_long(v, &k) != 0 || k < 0 || k > PAIR_SAMPLES_MAX)
        usage_fail("--pair-samples needs a count from 0 to 100 (got '%s')", v ? v : "");
      opt.pair_samples = (int)k;
      i++;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: tiers-probe-noise [--quick] [--quantum-us Q] [--duration-ms D] "
             "[--pus LIST] [--pair-samples N]\n");
      exit(0);
    } else {
      usage_fail("unknown option '%s'", a);
    }
  }
  if (opt.quick && !duration_given)
    opt.duration_ms = 250.0;
  if (opt.pair_samples < 0)
    opt.pair_samples = opt.quick ? 3 : 5;
  if (opt.duration_ms < opt.quantum_us / 1000.0 * 10)
    tiers_tool_fail("--duration-ms %g holds fewer than 10 quanta of %g us", opt.duration_ms,
                    opt.quantum_us);
  if (tiers_topo_load(&topo, NULL) != TIERS_OK)
    tiers_tool_fail_last("cannot read this machine's topology");
  int n = tiers_topo_num_pus(topo);
  if (pus) {
    /* logical indices from 0 ("0,1,4-7"): tiers_parse_int_list takes
     * positive numbers only, so parse here */
    int cap = n > 0 ? n : 1, count = 0;
    opt.pus = malloc(sizeof *opt.pus * (size_t)cap);
    if (!opt.pus)
      tiers_tool_fail("out of memory");
    const char *p = pus;
    while (*p) {
      char *end;
      long lo = strtol(p, &end, 10), hi;
      if (end == p || lo < 0)
        usage_fail("--pus needs PU indices such as 0,1 or 0-3 (got '%s')", pus);
      hi = lo;
      if (*end == '-') {
        p = end + 1;
        hi = strtol(p, &end, 10);
        if (end == p || hi < lo)
          usage_fail("--pus needs PU indices such as 0,1 or 0-3 (got '%s')", pus);
      }
      if (hi >= n)
        tiers_tool_fail("--pus: PU %ld does not exist (this machine has PUs 0-%d)", hi, n - 1);
      for (long v = lo; v <= hi; v++) {
        int dup = 0;
        for (int k = 0; k < count; k++)
          dup |= opt.pus[k] == v;
        if (!dup)
          opt.pus[count++] = (int)v;
      }
      if (*end == ',' && end[1])
        p = end + 1;
      else if (*end)
        usage_fail("--pus needs PU indices such as 0,1 or 0-3 (got '%s')", pus);
      else
        p = end;
    }
    opt.npus = count;
  } else {
    opt.npus = n;
    opt.pus = malloc(sizeof *opt.pus * (size_t)(n > 0 ? n : 1));
    if (!opt.pus)
      tiers_tool_fail("out of memory");
    for (int i = 0; i < n; i++)
      opt.pus[i] = i;
  }
  if (opt.npus < 1)
    tiers_tool_fail("no PU to test");
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  parse_args(argc, argv);
  long quanta = (long)(opt.duration_ms * 1000.0 / opt.quantum_us);

  if (tiers_topo_bind_thread(topo, opt.pus[0]) != TIERS_OK)
    tiers_tool_fail_last("cannot pin the calibration thread");
  long units = calibrate(opt.quantum_us);

  struct fwq *f = calloc((size_t)opt.npus, sizeof *f);
  pthread_t *tid = calloc((size_t)opt.npus, sizeof *tid);
  pthread_barrier_t start;
  if (!f || !tid || pthread_barrier_init(&start, NULL, (unsigned)opt.npus + 1) != 0)
    tiers_tool_fail("out of memory");
  for (int i = 0; i < opt.npus; i++) {
    f[i] = (struct fwq){opt.pus[i], quanta, units, &start, malloc(sizeof(int64_t) * (size_t)quanta),
                        0};
    if (!f[i].ns)
      tiers_tool_fail("out of memory for %ld quanta", quanta);
  }
  /* The main thread sleeps during the test: it must not take a PU. */
  struct cpu_times before = read_stat();
  long long self_before = self_ticks();
  for (int i = 0; i < opt.npus; i++) {
    int rc = pthread_create(&tid[i], NULL, fwq_thread, &f[i]);
    if (rc != 0)
      tiers_tool_fail("cannot start a thread: %s", strerror(rc));
  }
  pthread_barrier_wait(&start);
  double t0 = tiers_now();
  for (int i = 0; i < opt.npus; i++)
    pthread_join(tid[i], NULL);
  double window = tiers_now() - t0;
  struct cpu_times after = read_stat();
  long long self_after = self_ticks();
  for (int i = 0; i < opt.npus; i++)
    if (f[i].bind_failed)
      tiers_tool_fail("cannot pin a thread to PU %d: %s", f[i].pu, tiers_last_error());

  /* the pairs, after the FWQ window (they would disturb its quanta) */
  const int npairs = opt.npus - 1 < PAIRS_MAX ? opt.npus - 1 : PAIRS_MAX;
  const int nsamples = npairs > 0 ? opt.pair_samples : 0;
  const double gap_s = opt.quick ? 0.05 : 0.2;
  tiers_pulink_t *links = calloc((size_t)(npairs > 0 ? npairs : 1) *
                                 (size_t)(nsamples > 0 ? nsamples : 1), sizeof *links);
  double *when = calloc((size_t)(nsamples > 0 ? nsamples : 1), sizeof *when);
  char (*why)[160] = calloc((size_t)(npairs > 0 ? npairs : 1), sizeof *why);
  if (!links || !when || !why)
    tiers_tool_fail("out of memory");
  const double p0 = tiers_now();
  for (int k = 0; k < nsamples; k++) {
    if (k > 0) {
      struct timespec ts = {0, (long)(gap_s * 1e9)};
      nanosleep(&ts, NULL);
    }
    when[k] = tiers_now() - p0;
    for (int q = 0; q < npairs; q++) {
      if (why[q][0])
        continue;
      if (tiers_pulink_measure(topo, opt.pus[q], opt.pus[q + 1], opt.quick,
                               &links[(size_t)q * nsamples + k]) != TIERS_OK)
        snprintf(why[q], sizeof why[q], "%s", tiers_last_error());
    }
  }

  tiers_json_t j;
  tiers_json_init(&j, stdout);
  tiers_json_object_begin(&j);
  tiers_tool_json_native(&j);
  tiers_json_key(&j, "params");
  tiers_json_object_begin(&j);
  tiers_json_kv_string(&j, "method", "fixed work quantum (FWQ), one pinned thread per PU");
  tiers_json_kv_double(&j, "quantum_us", opt.quantum_us);
  tiers_json_kv_int(&j, "quanta", quanta);
  tiers_json_kv_int(&j, "work_units", units);
  tiers_json_kv_double(&j, "duration_ms", opt.duration_ms);
  tiers_json_kv_double(&j, "noise_threshold", NOISE_THRESHOLD);
  tiers_json_kv_bool(&j, "quick", opt.quick);
  tiers_json_kv_int(&j, "pair_samples", nsamples);
  tiers_json_kv_double(&j, "pair_gap_ms", gap_s * 1e3);
  tiers_json_kv_string(&j, "pairs_method",
                       "each PU with the next one in the list: the round trip of a cache line "
                       "between two threads pinned to them, the median of blocks of 200 round "
                       "trips");
  tiers_json_object_end(&j);

  tiers_json_key(&j, "load");
  tiers_json_object_begin(&j);
  json_load_before(&j, before.running);
  tiers_json_kv_double(&j, "window_s", window);
  long hz = sysconf(_SC_CLK_TCK);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  tiers_json_key(&j, "other_cpu_fraction");
  if (before.ok && after.ok && self_before >= 0 && self_after >= 0 && hz > 0 && cpus > 0 &&
      window > 0) {
    long long other = (after.busy - before.busy) - (self_after - self_before);
    double frac = (double)(other > 0 ? other : 0) / (double)hz / window / (double)cpus;
    tiers_json_double(&j, frac);
    tiers_json_kv_double(&j, "steal_fraction",
                         (double)(after.steal - before.steal) / (double)hz / window / (double)cpus);
  } else {
    tiers_json_null(&j);
    tiers_json_key(&j, "steal_fraction");
    tiers_json_null(&j);
  }
  tiers_json_object_end(&j);

  tiers_json_key(&j, "pus");
  tiers_json_array_begin(&j);
  int worst = 0;
  double worst_lost = -1;
  for (int i = 0; i < opt.npus; i++) {
    int64_t *ns = f[i].ns;
    double sum = 0;
    for (long q = 0; q < quanta; q++)
      sum += (double)ns[q];
    qsort(ns, (size_t)quanta, sizeof *ns, cmp_i64);
    double mn = (double)ns[0];
    long noisy = 0;
    for (long q = 0; q < quanta; q++)
      noisy += (double)ns[q] > NOISE_THRESHOLD * mn;
    long p99 = (long)((double)(quanta - 1) * 0.99 + 0.5);
    double lost = sum > 0 ? (sum - mn * (double)quanta) / sum : 0;
    hwloc_obj_t pu = tiers_topo_pu(topo, f[i].pu);
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "pu", f[i].pu);
    tiers_json_kv_int(&j, "os_index", pu ? (int64_t)pu->os_index : -1);
    tiers_json_kv_double(&j, "min_us", mn / 1e3);
    tiers_json_kv_double(&j, "median_us", (double)ns[quanta / 2] / 1e3);
    tiers_json_kv_double(&j, "p99_us", (double)ns[p99] / 1e3);
    tiers_json_kv_double(&j, "max_us", (double)ns[quanta - 1] / 1e3);
    tiers_json_kv_double(&j, "mean_us", sum / (double)quanta / 1e3);
    tiers_json_kv_double(&j, "noise_fraction", (double)noisy / (double)quanta);
    tiers_json_kv_double(&j, "lost_fraction", lost);
    tiers_json_object_end(&j);
    if (lost > worst_lost) {
      worst_lost = lost;
      worst = i;
    }
  }
  tiers_json_array_end(&j);
  tiers_json_kv_int(&j, "worst_pu", f[worst].pu);
  tiers_json_key(&j, "pairs");
  tiers_json_array_begin(&j);
  for (int q = 0; q < npairs && nsamples > 0; q++) {
    const int a = opt.pus[q], b = opt.pus[q + 1];
    hwloc_obj_t pa = tiers_topo_pu(topo, a), pb = tiers_topo_pu(topo, b);
    tiers_layer_t layer = TIERS_LAYER_MACHINE;
    int level = 0;
    tiers_topo_layer(topo, a, b, &layer, &level);
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "pu_a", a);
    tiers_json_kv_int(&j, "pu_b", b);
    tiers_json_kv_int(&j, "os_a", pa ? (int64_t)pa->os_index : -1);
    tiers_json_kv_int(&j, "os_b", pb ? (int64_t)pb->os_index : -1);
    tiers_json_kv_string(&j, "layer", tiers_layer_name(layer));
    tiers_json_kv_int(&j, "cache_level", level);
    if (why[q][0]) {
      tiers_json_kv_string(&j, "error", why[q]);
    } else {
      tiers_json_key(&j, "samples");
      tiers_json_array_begin(&j);
      for (int k = 0; k < nsamples; k++) {
        const tiers_pulink_t *l = &links[(size_t)q * nsamples + k];
        tiers_json_object_begin(&j);
        tiers_json_kv_double(&j, "t_s", when[k]);
        tiers_json_kv_double(&j, "rtt_ns", l->rtt_ns);
        tiers_json_kv_bool(&j, "timed_out", l->timed_out);
        tiers_json_object_end(&j);
      }
      tiers_json_array_end(&j);
    }
    tiers_json_object_end(&j);
  }
  tiers_json_array_end(&j);
  tiers_json_object_end(&j);
  free(links);
  free(when);
  free(why);

  for (int i = 0; i < opt.npus; i++)
    free(f[i].ns);
  free(f);
  free(tid);
  free(opt.pus);
  pthread_barrier_destroy(&start);
  tiers_topo_destroy(&topo);
  if (tiers_json_finish(&j) != 0)
    tiers_tool_fail("cannot write the result: %s", strerror(errno));
  return 0;
}
