/*
 * tiers-probe-mem: memory bandwidth per thread count, pinning policy and
 * data placement, measured the way STREAM measures it.
 *
 * For every configuration (threads x pin x placement) the tool allocates
 * three arrays a, b, c of --size bytes each, initialises them (each thread
 * its own slice for first-touch, thread 0 alone for master), then runs
 * the selected kernels in STREAM's order (copy, scale, add, triad, then
 * read, write, memcpy), each one --ntimes repetitions back to back as
 * likwid-bench runs its iterations.  Each repetition is timed by thread 0
 * from before any thread starts (the clock is read between two barriers)
 * to after all have finished; the first repetition is dropped; the
 * best rate is bytes / minimum time with STREAM's byte counts (16, 16, 24,
 * 24 B per element; 8 for read and write, 16 for memcpy), in MB/s where
 * MB = 10^6 B.  Afterwards the kernels are replayed on scalars and every
 * array's average is checked against it (STREAM's checkSTREAMresults), and
 * every repetition's sum from the read kernel against n times the expected
 * value.
 *
 * Output: one JSON object on stdout (layout in docs/schemas/probe-mem.md).
 * Bad input: one line "tiers-probe-mem: error: ..." on stderr, exit 2.  A
 * failed validation prints the JSON (with "validation_passed": false) and
 * then such a line, exit 2.
 *
 * Test hook: with TIERS_PROBE_MEM_CORRUPT=1 in the environment, array b is
 * overwritten after the measurement, so that the tests can check that the
 * validation catches wrong results.
 */
#define _GNU_SOURCE /* sched_getcpu */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <hwloc.h>
#include <omp.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/pulink.h"
#include "common/stats.h"
#include "common/tool.h"
#include "tiers/topo.h"

#include "mem_kernels.h"

#define ELEM_BYTES ((size_t)sizeof(double))
#define PAGE_ELEMS ((size_t)512)        /* threads' slices start on 4 KiB boundaries */
#define HUGE_BYTES ((size_t)2 << 20)    /* arrays start on 2 MiB boundaries (huge pages) */
#define HUGE_ELEMS (HUGE_BYTES / ELEM_BYTES)
/* Slices follow huge pages when each thread gets at least this many of them. */
#define HUGE_SLICE_MIN 8
#define MIN_ARRAY_BYTES ((uint64_t)4096)
#define MIN_DEFAULT_BYTES ((uint64_t)64 << 20)
#define DEFAULT_NTIMES 10
#define QUICK_NTIMES 7 /* 6 timed: the fewest with a 95 % CI of the median */
#define MAX_NTIMES 200
#define MAX_THREADS 1024
#define NARRAYS 3
#define SCALAR 3.0
#define FILL 7.0
#define EPSILON 1e-13 /* STREAM's relative tolerance for 8-byte reals */

/* Store kinds: --stores regular, nt, or auto (the default where both
 * exist): every repetition runs both variants of each storing kernel, one
 * right after the other, and each kernel reports the variant with the
 * shorter mean time (likwid-bench reports the mean), the other one's
 * figures beside it.  Every kernel reads only arrays it does not write, so
 * running it twice leaves the same values: the validation is unchanged. */
enum stores { STORES_REGULAR = 0, STORES_NT = 1, STORES_AUTO = 2 };
#define NVARIANTS 2 /* regular, nt */
static const char *const store_names[] = {"regular", "nt", "auto"};

enum placement { PLACE_FIRST_TOUCH = 0, PLACE_MASTER = 1, PLACE_COUNT = 2 };

static const char *const placement_names[PLACE_COUNT] = {"first-touch", "master"};

static const char *const kernel_names[TIERS_MEM_NKERNELS] = {
    "copy", "scale", "add", "triad", "read", "write", "memcpy"};
static const int kernel_bytes[TIERS_MEM_NKERNELS] = {16, 16, 24, 24, 8, 8, 16};
static const char *const kernel_formulas[TIERS_MEM_NKERNELS] = {
    "c[i] = a[i]",  "b[i] = s*c[i]", "c[i] = a[i] + b[i]", "a[i] = b[i] + s*c[i]",
    "sum += a[i]",  "c[i] = w",      "memcpy(c, a, n*8)"};

struct options {
  int *threads;
  int nthreads;
  tiers_pin_policy_t pins[3];
  int npins;
  int placements[PLACE_COUNT];
  int nplacements;
  int selected[TIERS_MEM_NKERNELS];
  uint64_t size; /* bytes per array, a multiple of 8 */
  int size_given;
  long ntimes;
  int nt;
  const char *isa;
  int quick;
  int progress;
};

/* The kernels a run uses: K[v] for variant v (regular, nt); NULL where not run. */
typedef const tiers_mem_kernels_t *kernel_set_t[NVARIANTS];

/* Everything one configuration reports, filled by the measuring threads. */
struct run {
  int threads;
  tiers_pin_policy_t pin;
  int placement;
  int *pin_order;   /* [threads], -1 for none */
  int *bound;       /* [threads * npus]: PUs each thread is bound to, read back */
  int *nbound;      /* [threads] */
  int *cpu;         /* [threads]: logical PU each thread ran on at the end */
  double *times;    /* [(kernel * NVARIANTS + variant) * ntimes] */
  double *sums;     /* [ntimes]: the read kernel's total per repetition */
  double *partial;  /* [threads * 8]: per-thread sums, padded to a cache line */
  int bind_error;   /* a thread could not be bound */
  char bind_message[256];
};

static void usage(void)
{
  printf("usage: tiers-probe-mem [--threads LIST] [--pin LIST] [--placement LIST]\n"
         "                       [--kernels LIST] [--size BYTES] [--ntimes N]\n"
         "                       [--stores auto|regular|nt] [--isa NAME] [--quick] [--progress]\n"
         "Memory bandwidth (STREAM copy/scale/add/triad, read, write, memcpy) per thread\n"
         "count, pinning (none, compact, scatter) and placement (first-touch, master).\n"
         "Prints one JSON document.  --size is per array (3 arrays); --isa is one of\n"
         "avx512f, avx2, sse2, generic (default: the best this CPU runs).\n");
}

static int kernel_parse(const char *name)
{
  for (int k = 0; k < TIERS_MEM_NKERNELS; k++)
    if (strcmp(name, kernel_names[k]) == 0)
      return k;
  return -1;
}

/*
 * Splits a comma-separated list and calls @p item on each word; fails with
 * one line for an empty list or an empty word.
 */
static void for_each_word(const char *option, const char *text, void (*item)(const char *, void *),
                          void *data)
{
  if (!text || !*text)
    tiers_tool_fail("%s: empty list", option);
  char *copy = strdup(text);
  if (!copy)
    tiers_tool_fail("out of memory");
  char *p = copy;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma)
      *comma = '\0';
    if (!*p)
      tiers_tool_fail("%s: empty item in '%s'", option, text);
    item(p, data);
    if (!comma)
      break;
    p = comma + 1;
  }
  free(copy);
}

static void add_pin(const char *word, void *data)
{
  struct options *o = data;
  tiers_pin_policy_t p;
  if (tiers_pin_policy_parse(word, &p) != TIERS_OK)
    tiers_tool_fail("--pin: unknown policy '%s' (choose among none, compact, scatter)", word);
  for (int i = 0; i < o->npins; i++)
    if (o->pins[i] == p)
      return;
  o->pins[o->npins++] = p;
}

static void add_placement(const char *word, void *data)
{
  struct options *o = data;
  int p = -1;
  for (int i = 0; i < PLACE_COUNT; i++)
    if (strcmp(word, placement_names[i]) == 0)
      p = i;
  if (p < 0)
    tiers_tool_fail("--placement: unknown placement '%s' (choose among first-touch, master)",
                    word);
  for (int i = 0; i < o->nplacements; i++)
    if (o->placements[i] == p)
      return;
  o->placements[o->nplacements++] = p;
}

static void add_kernel(const char *word, void *data)
{
  struct options *o = data;
  int k = kernel_parse(word);
  if (k < 0)
    tiers_tool_fail("--kernels: unknown kernel '%s' (choose among copy, scale, add, triad, "
                    "read, write, memcpy)",
                    word);
  o->selected[k] = 1;
}

static const char *need_value(int argc, char **argv, int *i)
{
  if (*i + 1 >= argc)
    tiers_tool_fail("%s needs a value", argv[*i]);
  return argv[++*i];
}

/* Formats a byte count for messages: "1.5 GiB". */
static const char *human_bytes(double bytes, char *buf, size_t len)
{
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    u++;
  }
  snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

static void parse_options(int argc, char **argv, struct options *o, tiers_topo_t topo)
{
  const char *threads_text = NULL, *pin_text = NULL, *placement_text = NULL, *kernels_text = NULL;
  const char *size_text = NULL, *ntimes_text = NULL, *stores_text = NULL;
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage();
      exit(0);
    } else if (strcmp(a, "--threads") == 0) {
      threads_text = need_value(argc, argv, &i);
    } else if (strcmp(a, "--pin") == 0) {
      pin_text = need_value(argc, argv, &i);
    } else if (strcmp(a, "--placement") == 0) {
      placement_text = need_value(argc, argv, &i);
    } else if (strcmp(a, "--kernels") == 0) {
      kernels_text = need_value(argc, argv, &i);
    } else if (strcmp(a, "--size") == 0) {
      size_text = need_value(argc, argv, &i);
    } else if (strcmp(a, "--ntimes") == 0) {
      ntimes_text = need_value(argc, argv, &i);
    } else if (strcmp(a, "--stores") == 0) {
      stores_text = need_value(argc, argv, &i);
    } else if (strcmp(a, "--isa") == 0) {
      o->isa = need_value(argc, argv, &i);
    } else if (strcmp(a, "--quick") == 0) {
      o->quick = 1;
    } else if (strcmp(a, "--progress") == 0) {
      o->progress = 1;
    } else {
      tiers_tool_fail("unknown option '%s' (see --help)", a);
    }
  }

  int npus = tiers_topo_num_pus(topo);

  /* Kernels: all unless chosen. */
  if (kernels_text)
    for_each_word("--kernels", kernels_text, add_kernel, o);
  else
    for (int k = 0; k < TIERS_MEM_NKERNELS; k++)
      o->selected[k] = 1;

  /* Pinning and placement; --quick narrows the defaults to compact + first-touch. */
  for_each_word("--pin", pin_text ? pin_text : o->quick ? "compact" : "none,compact,scatter",
                add_pin, o);
  for_each_word("--placement",
                placement_text ? placement_text : o->quick ? "first-touch" : "first-touch,master",
                add_placement, o);

  /* Thread counts: 1..all PUs, or 1 and all for --quick; duplicates dropped. */
  if (threads_text) {
    int *list = NULL;
    int n = tiers_parse_int_list(threads_text, &list);
    if (n < 0)
      tiers_tool_fail("--threads: '%s' is not a list of positive counts such as 1,2,4-8",
                      threads_text);
    o->threads = malloc(sizeof *o->threads * (size_t)n);
    if (!o->threads)
      tiers_tool_fail("out of memory");
    for (int i = 0; i < n; i++) {
      int dup = 0;
      for (int j = 0; j < o->nthreads; j++)
        dup |= o->threads[j] == list[i];
      if (!dup)
        o->threads[o->nthreads++] = list[i];
    }
    free(list);
  } else {
    o->threads = malloc(sizeof *o->threads * (size_t)npus);
    if (!o->threads)
      tiers_tool_fail("out of memory");
    if (o->quick) {
      o->threads[o->nthreads++] = 1;
      if (npus > 1)
        o->threads[o->nthreads++] = npus;
    } else {
      for (int t = 1; t <= npus; t++)
        o->threads[o->nthreads++] = t;
    }
  }
  for (int i = 0; i < o->nthreads; i++) {
    int t = o->threads[i];
    if (t > MAX_THREADS)
      tiers_tool_fail("--threads: %d threads is more than the %d this probe runs", t,
                      MAX_THREADS);
    for (int p = 0; p < o->npins; p++)
      if (o->pins[p] != TIERS_PIN_NONE && t > npus)
        tiers_tool_fail("--threads: %d threads cannot be pinned (--pin %s) to the %d PUs of "
                        "this machine; use --pin none to oversubscribe",
                        t, tiers_pin_policy_name(o->pins[p]), npus);
  }

  /* Repetitions. */
  o->ntimes = o->quick ? QUICK_NTIMES : DEFAULT_NTIMES;
  if (ntimes_text && (tiers_parse_long(ntimes_text, &o->ntimes) != 0 || o->ntimes < 2 ||
                      o->ntimes > MAX_NTIMES))
    tiers_tool_fail("--ntimes: '%s' must be a whole number from 2 to %d (the first repetition "
                    "is dropped)",
                    ntimes_text, MAX_NTIMES);

  /* Stores. */
  o->nt = tiers_mem_have_nt() ? STORES_AUTO : STORES_REGULAR;
  if (stores_text) {
    if (strcmp(stores_text, "regular") == 0)
      o->nt = STORES_REGULAR;
    else if (strcmp(stores_text, "nt") == 0)
      o->nt = STORES_NT;
    else if (strcmp(stores_text, "auto") == 0)
      o->nt = tiers_mem_have_nt() ? STORES_AUTO : STORES_REGULAR;
    else
      tiers_tool_fail("--stores: unknown kind '%s' (choose auto, regular or nt)", stores_text);
    if (o->nt == STORES_NT && !tiers_mem_have_nt())
      tiers_tool_fail("--stores nt: non-temporal stores need an x86-64 build");
  }

  /* Instruction set. */
  if (o->isa) {
    if (!tiers_mem_isa_usable(o->isa))
      tiers_tool_fail("--isa: '%s' is unknown or this CPU cannot run it (choose among "
                      "avx512f, avx2, sse2, generic)",
                      o->isa);
    if (o->nt == STORES_NT && !tiers_mem_kernels(o->isa, 1))
      tiers_tool_fail("--isa %s has no non-temporal kernels; use --stores regular", o->isa);
    if (o->nt == STORES_AUTO && !tiers_mem_kernels(o->isa, 1))
      o->nt = STORES_REGULAR;
  } else {
    o->isa = tiers_mem_best_isa();
    if (o->nt != STORES_REGULAR && !tiers_mem_kernels(o->isa, 1))
      o->nt = STORES_REGULAR;
  }

  /* Array size: per array, at least 4x the last-level caches (STREAM's rule). */
  char h1[32], h2[32];
  if (size_text) {
    if (tiers_parse_size(size_text, &o->size) != 0)
      tiers_tool_fail("--size: '%s' is not a size such as 512M or 2G", size_text);
    o->size_given = 1;
    o->size -= o->size % ELEM_BYTES;
    if (o->size < MIN_ARRAY_BYTES)
      tiers_tool_fail("--size: '%s' is too small: an array needs at least %llu bytes", size_text,
                      (unsigned long long)MIN_ARRAY_BYTES);
  } else {
    uint64_t llc = tiers_topo_llc_total(topo);
    uint64_t want = 4 * llc > MIN_DEFAULT_BYTES ? 4 * llc : MIN_DEFAULT_BYTES;
    uint64_t step = (uint64_t)2 << 20;
    o->size = (want + step - 1) / step * step;
  }
  double total = (double)o->size * NARRAYS;
  size_t avail = tiers_topo_available_memory();
  if (total > 1e18 || (avail > 0 && total > (double)avail))
    tiers_tool_fail("--size: the %d arrays need %s in all but only %s of memory is available",
                    NARRAYS, human_bytes(total, h1, sizeof h1),
                    human_bytes((double)avail, h2, sizeof h2));
}

/* The slice granularity: 2 MiB (one huge page, so that first touch
 * places whole huge pages) when every thread gets at least
 * HUGE_SLICE_MIN of them, else 4 KiB. */
static size_t slice_unit(size_t n, int nthreads)
{
  return n / HUGE_ELEMS >= (size_t)nthreads * HUGE_SLICE_MIN ? HUGE_ELEMS : PAGE_ELEMS;
}

/* Thread t's slice [lo, hi) of n elements: whole units, the last thread takes the rest. */
static void slice(size_t n, int t, int nthreads, size_t *lo, size_t *hi)
{
  const size_t unit = slice_unit(n, nthreads);
  size_t pages = (n + unit - 1) / unit;
  size_t p0 = pages * (size_t)t / (size_t)nthreads;
  size_t p1 = pages * (size_t)(t + 1) / (size_t)nthreads;
  *lo = p0 * unit < n ? p0 * unit : n;
  *hi = p1 * unit < n ? p1 * unit : n;
}

/*
 * One array: an anonymous mapping (no page is backed until written, so
 * the first writer places it), 2 MiB aligned and advised for transparent
 * huge pages (MADV_HUGEPAGE): with 4 KiB pages a streaming kernel takes a
 * TLB miss every 64 cache lines, and a guest's nested page walks make
 * those dear.  The advice is best effort; params.huge_pages says whether
 * the kernel takes it, and each configuration how many bytes huge pages
 * back.
 */
struct array_map {
  void *base;
  size_t len;
  double *x;
};

static void array_map(size_t bytes, struct array_map *m)
{
  m->len = bytes + HUGE_BYTES;
  m->base = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m->base == MAP_FAILED)
    tiers_tool_fail("cannot allocate the arrays (%zu bytes each): %s", bytes, strerror(errno));
  uintptr_t p = ((uintptr_t)m->base + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
  m->x = (double *)p;
#ifdef MADV_HUGEPAGE
  (void)madvise(m->x, bytes, MADV_HUGEPAGE); /* best effort */
#endif
}

/* 1 when the kernel takes MADV_HUGEPAGE advice (tried on a small mapping). */
static int huge_pages_advisable(void)
{
#ifdef MADV_HUGEPAGE
  size_t len = 2 * HUGE_BYTES;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return 0;
  int ok = madvise(p, len, MADV_HUGEPAGE) == 0;
  munmap(p, len);
  return ok;
#else
  return 0;
#endif
}

static void array_unmap(struct array_map *m)
{
  if (m->base && m->base != MAP_FAILED)
    munmap(m->base, m->len);
  m->base = NULL;
}

/* Bytes of this process's memory backed by huge pages now (Linux
 * /proc/self/smaps_rollup, AnonHugePages), -1 when unknown. */
static long long huge_page_bytes(void)
{
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f)
    return -1;
  char line[256];
  long long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %lld kB", &kib) == 1)
      break;
  fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

static void fill(double *x, size_t lo, size_t hi, double v)
{
  for (size_t i = lo; i < hi; i++)
    x[i] = v;
}

/* 1 when kernel k has store variants (read stores nothing, memcpy is libc's). */
static int kernel_has_variants(int k) { return k != TIERS_MEM_READ && k != TIERS_MEM_MEMCPY; }

/* Runs kernel k on the slice; returns the read kernel's sum (0 otherwise). */
static double run_kernel(const tiers_mem_kernels_t *K, int k, double *a, double *b, double *c,
                         size_t lo, size_t hi)
{
  size_t m = hi - lo;
  if (m == 0)
    return 0.0;
  switch (k) {
  case TIERS_MEM_COPY: K->copy(c + lo, a + lo, m); break;
  case TIERS_MEM_SCALE: K->scale(b + lo, c + lo, SCALAR, m); break;
  case TIERS_MEM_ADD: K->add(c + lo, a + lo, b + lo, m); break;
  case TIERS_MEM_TRIAD: K->triad(a + lo, b + lo, c + lo, SCALAR, m); break;
  case TIERS_MEM_READ: return K->read(a + lo, m);
  case TIERS_MEM_WRITE: K->write(c + lo, FILL, m); break;
  case TIERS_MEM_MEMCPY: memcpy(c + lo, a + lo, m * ELEM_BYTES); break;
  default: break;
  }
  return 0.0;
}

/* The logical index of the PU the calling thread runs on now, -1 if unknown. */
static int current_pu(hwloc_topology_t hw)
{
  int os = sched_getcpu();
  if (os < 0)
    return -1;
  hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(hw, (unsigned)os);
  return pu ? (int)pu->logical_index : -1;
}

/*
 * Measures one configuration.  Thread binding happens first: a pinned
 * thread is bound to its PU; under "none" every thread (libgomp keeps its
 * threads from earlier, possibly pinned, regions) is bound back to the
 * cpuset the process started with.
 */
static void measure(tiers_topo_t topo, hwloc_const_cpuset_t initial, const struct options *o,
                    const kernel_set_t K, double *a, double *b, double *c, size_t n,
                    struct run *r)
{
  hwloc_topology_t hw = tiers_topo_hwloc(topo);
  int npus = tiers_topo_num_pus(topo);
  const long ntimes = o->ntimes;

#pragma omp parallel num_threads(r->threads)
  {
    const int t = omp_get_thread_num();
    const int T = omp_get_num_threads();
    size_t lo, hi;
    slice(n, t, T, &lo, &hi);

    int rc;
    if (r->pin == TIERS_PIN_NONE)
      rc = hwloc_set_cpubind(hw, initial, HWLOC_CPUBIND_THREAD) == 0 ? TIERS_OK : TIERS_ERR_SYS;
    else
      rc = tiers_topo_bind_thread(topo, r->pin_order[t]);
    if (rc != TIERS_OK) {
#pragma omp critical(tiers_mem_bind)
      {
        r->bind_error = 1;
        snprintf(r->bind_message, sizeof r->bind_message, "thread %d: %s", t,
                 r->pin == TIERS_PIN_NONE ? strerror(errno) : tiers_last_error());
      }
    }
    if (T != r->threads) {
#pragma omp critical(tiers_mem_bind)
      {
        r->bind_error = 1;
        snprintf(r->bind_message, sizeof r->bind_message,
                 "OpenMP gave %d threads instead of %d", T, r->threads);
      }
    }
#pragma omp barrier

    /* Placement: each thread writes its own slice first, or thread 0 all. */
    if (r->placement == PLACE_FIRST_TOUCH) {
      fill(a, lo, hi, 1.0);
      fill(b, lo, hi, 2.0);
      fill(c, lo, hi, 0.0);
    } else if (t == 0) {
      fill(a, 0, n, 1.0);
      fill(b, 0, n, 2.0);
      fill(c, 0, n, 0.0);
    }

    /* Each kernel (and under auto each store variant) runs its ntimes
     * repetitions back to back, as likwid-bench runs its iterations, so
     * that no repetition pays for the cache state another kernel left. */
    double t0 = 0.0;
    for (int kv = 0; kv < TIERS_MEM_NKERNELS * NVARIANTS; kv++) {
      const int k = kv / NVARIANTS, v = kv % NVARIANTS;
      /* read and memcpy run once, with the first kernel set there is */
      if (!o->selected[k] || !K[v] || (!kernel_has_variants(k) && v > 0 && K[0]))
        continue;
      for (long rep = 0; rep < ntimes; rep++) {
        /* Two barriers around the start time: no thread may start before
         * thread 0 has read the clock, else a preempted thread 0 would
         * miss the others' work and report an impossible rate. */
#pragma omp barrier
        if (t == 0)
          t0 = tiers_now();
#pragma omp barrier
        double s = run_kernel(K[v], k, a, b, c, lo, hi);
        if (k == TIERS_MEM_READ)
          r->partial[(size_t)t * 8] = s;
#pragma omp barrier
        if (t == 0) {
          r->times[(size_t)kv * (size_t)ntimes + (size_t)rep] = tiers_now() - t0;
          if (k == TIERS_MEM_READ) {
            double sum = 0.0;
            for (int u = 0; u < T; u++)
              sum += r->partial[(size_t)u * 8];
            r->sums[rep] = sum;
          }
        }
      }
    }

    /* Read the binding back from the OS, and where the thread runs now. */
    int nb = 0;
    if (tiers_topo_get_thread_binding(topo, r->bound + (size_t)t * (size_t)npus, &nb) != TIERS_OK)
      nb = 0;
    r->nbound[t] = nb;
    r->cpu[t] = current_pu(hw);
  }
}

/* The round trip (ns) of a cache line between the first two pinned threads'
 * PUs now: where the host has placed them (on a 2-vCPU guest two threads'
 * Triad read 23-34 GB/s with the PUs near, 34-38 far), 0 where it could not
 * be measured.  OpenMP's idle workers spin for a while before
 * they sleep, and one of them on the second PU would share it with the
 * measurement: a pause first. */
static double pu_link_now(tiers_topo_t topo, const struct run *r)
{
  struct timespec pause = {0, 2000000};
  nanosleep(&pause, NULL);
  tiers_pulink_t l = {0, 0, 0, 0};
  if (tiers_pulink_measure(topo, r->pin_order[0], r->pin_order[1], 1, &l) != TIERS_OK ||
      l.timed_out)
    return 0.0;
  return l.rtt_ns;
}

/* Expected values after the run: the kernels replayed on scalars. */
struct expected {
  double a, b, c;
  double *sums; /* [ntimes] expected read sums */
};

static void replay(const struct options *o, size_t n, struct expected *e)
{
  /* Every kernel reads only arrays it does not write, so its repetitions
   * (and both store variants) leave what one run leaves: one pass over the
   * kernels in their order gives the final values, and every repetition of
   * read sums the same a. */
  double a = 1.0, b = 2.0, c = 0.0;
  for (int k = 0; k < TIERS_MEM_NKERNELS; k++) {
    if (!o->selected[k])
      continue;
    switch (k) {
    case TIERS_MEM_COPY: c = a; break;
    case TIERS_MEM_SCALE: b = SCALAR * c; break;
    case TIERS_MEM_ADD: c = a + b; break;
    case TIERS_MEM_TRIAD: a = b + SCALAR * c; break;
    case TIERS_MEM_READ:
      for (long rep = 0; rep < o->ntimes; rep++)
        e->sums[rep] = a * (double)n;
      break;
    case TIERS_MEM_WRITE: c = FILL; break;
    case TIERS_MEM_MEMCPY: c = a; break;
    default: break;
    }
  }
  e->a = a;
  e->b = b;
  e->c = c;
}

/* Average absolute error of x against v, over all elements (parallel). */
static double avg_abs_error(const double *x, size_t n, double v, int threads)
{
  double sum = 0.0;
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static)
  for (size_t i = 0; i < n; i++)
    sum += fabs(x[i] - v);
  return sum / (double)n;
}

static double rel_error(double err, double expected)
{
  return expected != 0.0 ? err / fabs(expected) : err;
}

/* Checks the arrays and sums, writes the "validation" object; returns 1 when valid. */
static int validate(tiers_json_t *j, const struct options *o, const struct run *r, double *a,
                    double *b, double *c, size_t n, char *why, size_t why_len)
{
  struct expected e = {0};
  e.sums = calloc((size_t)o->ntimes, sizeof *e.sums);
  if (!e.sums)
    tiers_tool_fail("out of memory");
  replay(o, n, &e);

  const char *names[NARRAYS] = {"a", "b", "c"};
  const double *arrays[NARRAYS] = {a, b, c};
  const double want[NARRAYS] = {e.a, e.b, e.c};
  int ok = 1;

  tiers_json_key(j, "validation");
  tiers_json_object_begin(j);
  tiers_json_kv_double(j, "epsilon", EPSILON);
  tiers_json_key(j, "arrays");
  tiers_json_array_begin(j);
  for (int x = 0; x < NARRAYS; x++) {
    double err = avg_abs_error(arrays[x], n, want[x], r->threads);
    double rel = rel_error(err, want[x]);
    int pass = rel <= EPSILON; /* NaN fails */
    if (!pass && ok) {
      snprintf(why, why_len, "array %s averages a relative %.3g away from the expected %.17g",
               names[x], rel, want[x]);
      ok = 0;
    }
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "array", names[x]);
    tiers_json_kv_double(j, "expected", want[x]);
    tiers_json_kv_double(j, "avg_abs_error", err);
    tiers_json_kv_double(j, "rel_error", rel);
    tiers_json_kv_bool(j, "passed", pass);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);

  /* Sums: recursive summation of n terms errs by at most n * eps relative. */
  tiers_json_key(j, "read");
  if (o->selected[TIERS_MEM_READ]) {
    double tol = (double)n * DBL_EPSILON;
    if (tol < EPSILON)
      tol = EPSILON;
    double worst = 0.0;
    long worst_rep = 0;
    for (long rep = 0; rep < o->ntimes; rep++) {
      double rel = rel_error(fabs(r->sums[rep] - e.sums[rep]), e.sums[rep]);
      if (!(rel <= worst)) {
        worst = rel;
        worst_rep = rep;
      }
    }
    int pass = worst <= tol;
    if (!pass && ok) {
      snprintf(why, why_len, "the read kernel's sum in repetition %ld is off by a relative %.3g",
               worst_rep + 1, worst);
      ok = 0;
    }
    tiers_json_object_begin(j);
    tiers_json_kv_double_array(j, "sums", r->sums, (size_t)o->ntimes);
    tiers_json_kv_double_array(j, "expected_sums", e.sums, (size_t)o->ntimes);
    tiers_json_kv_double(j, "max_rel_error", worst);
    tiers_json_kv_double(j, "tolerance", tol);
    tiers_json_kv_bool(j, "passed", pass);
    tiers_json_object_end(j);
  } else {
    tiers_json_null(j);
  }
  tiers_json_kv_bool(j, "passed", ok);
  tiers_json_object_end(j);
  free(e.sums);
  return ok;
}

static const char *kernel_stores(int k, int nt)
{
  if (k == TIERS_MEM_READ)
    return "none";
  if (k == TIERS_MEM_MEMCPY)
    return "libc";
  return store_names[nt];
}

/* Min, mean and max of the timed repetitions (the first is dropped). */
static void time_range(const double *times, long nt, double *min, double *avg, double *max)
{
  double lo = INFINITY, hi = 0.0, sum = 0.0;
  for (long rep = 1; rep < nt; rep++) {
    lo = times[rep] < lo ? times[rep] : lo;
    hi = times[rep] > hi ? times[rep] : hi;
    sum += times[rep];
  }
  *min = lo;
  *avg = sum / (double)(nt - 1);
  *max = hi;
}

/* The variant (0 regular, 1 nt) whose times kernel k reports: the only
 * one run, or under auto the one with the shorter mean time. */
static int chosen_variant(const struct options *o, const struct run *r, int k)
{
  if (o->nt != STORES_AUTO || !kernel_has_variants(k))
    return o->nt == STORES_NT;
  const long nt = o->ntimes;
  double lo, avg[NVARIANTS], hi;
  for (int v = 0; v < NVARIANTS; v++)
    time_range(r->times + (size_t)(k * NVARIANTS + v) * (size_t)nt, nt, &lo, &avg[v], &hi);
  return avg[1] < avg[0];
}

static void write_results(tiers_json_t *j, const struct options *o, const struct run *r, size_t n)
{
  const long nt = o->ntimes;
  tiers_json_key(j, "results");
  tiers_json_array_begin(j);
  for (int k = 0; k < TIERS_MEM_NKERNELS; k++) {
    if (!o->selected[k])
      continue;
    const int cv = chosen_variant(o, r, k);
    const double *times = r->times + (size_t)(k * NVARIANTS + cv) * (size_t)nt;
    double min, avg, max;
    time_range(times, nt, &min, &avg, &max);
    double bytes = (double)kernel_bytes[k] * (double)n;
    double best = min > 0 ? 1e-6 * bytes / min : INFINITY;
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "kernel", kernel_names[k]);
    tiers_json_kv_string(j, "stores", kernel_stores(k, o->nt));
    if (kernel_has_variants(k))
      tiers_json_kv_string(j, "variant", store_names[cv]);
    tiers_json_kv_int(j, "bytes_per_element", kernel_bytes[k]);
    tiers_json_kv_double(j, "bytes", bytes);
    tiers_json_kv_double_array(j, "times_s", times, (size_t)nt);
    tiers_json_kv_double(j, "min_time_s", min);
    tiers_json_kv_double(j, "avg_time_s", avg);
    tiers_json_kv_double(j, "max_time_s", max);
    tiers_json_kv_double(j, "best_rate_mbps", best);
    tiers_json_kv_double(j, "mean_rate_mbps", avg > 0 ? 1e-6 * bytes / avg : INFINITY);
    if (o->nt == STORES_AUTO && kernel_has_variants(k)) {
      /* both variants' figures, the chosen one first */
      tiers_json_key(j, "variants");
      tiers_json_array_begin(j);
      for (int u = 0; u < NVARIANTS; u++) {
        int v = u == 0 ? cv : 1 - cv;
        const double *vt = r->times + (size_t)(k * NVARIANTS + v) * (size_t)nt;
        double vmin, vavg, vmax;
        time_range(vt, nt, &vmin, &vavg, &vmax);
        tiers_json_object_begin(j);
        tiers_json_kv_string(j, "stores", store_names[v]);
        tiers_json_kv_double_array(j, "times_s", vt, (size_t)nt);
        tiers_json_kv_double(j, "min_time_s", vmin);
        tiers_json_kv_double(j, "avg_time_s", vavg);
        tiers_json_kv_double(j, "best_rate_mbps", vmin > 0 ? 1e-6 * bytes / vmin : INFINITY);
        tiers_json_kv_double(j, "mean_rate_mbps", vavg > 0 ? 1e-6 * bytes / vavg : INFINITY);
        tiers_json_object_end(j);
      }
      tiers_json_array_end(j);
    }
    tiers_json_kv_double(j, "per_thread_mbps", best / r->threads);
    /* the statistics layer on the timed repetitions (docs/statistics.md):
     * the median rate beside the best, and whether the figure is noisy */
    double scratch[MAX_NTIMES];
    tiers_stats_t st;
    tiers_stats_summarize(times + 1, (size_t)(nt - 1), scratch, &st);
    tiers_json_kv_double(j, "median_time_s", st.median);
    tiers_json_kv_double(j, "median_rate_mbps", st.median > 0 ? 1e-6 * bytes / st.median : NAN);
    tiers_json_key(j, "time_stats");
    tiers_json_object_begin(j);
    tiers_stats_json(j, "", &st);
    tiers_json_object_end(j);
    tiers_json_kv_bool(j, "noisy", st.noisy);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
}

static void write_threads(tiers_json_t *j, const struct run *r, int npus)
{
  tiers_json_key(j, "thread_binding");
  tiers_json_array_begin(j);
  for (int t = 0; t < r->threads; t++) {
    tiers_json_object_begin(j);
    tiers_json_kv_int(j, "thread", t);
    tiers_json_key(j, "pin_pu");
    if (r->pin_order[t] >= 0)
      tiers_json_int(j, r->pin_order[t]);
    else
      tiers_json_null(j);
    tiers_json_key(j, "bound_pus");
    tiers_json_array_begin(j);
    for (int i = 0; i < r->nbound[t]; i++)
      tiers_json_int(j, r->bound[(size_t)t * (size_t)npus + (size_t)i]);
    tiers_json_array_end(j);
    tiers_json_key(j, "ran_on_pu");
    if (r->cpu[t] >= 0)
      tiers_json_int(j, r->cpu[t]);
    else
      tiers_json_null(j);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
}

static void write_params(tiers_json_t *j, const struct options *o, tiers_topo_t topo,
                         const int *initial_pus, int ninitial)
{
  size_t n = (size_t)(o->size / ELEM_BYTES);
  uint64_t llc = tiers_topo_llc_total(topo);
  tiers_json_key(j, "params");
  tiers_json_object_begin(j);
  tiers_json_kv_int(j, "array_bytes", (int64_t)o->size);
  tiers_json_kv_int(j, "array_elements", (int64_t)n);
  tiers_json_kv_int(j, "element_bytes", (int64_t)ELEM_BYTES);
  tiers_json_kv_int(j, "arrays", NARRAYS);
  tiers_json_kv_int(j, "total_bytes", (int64_t)(o->size * NARRAYS));
  tiers_json_kv_bool(j, "size_given", o->size_given);
  tiers_json_kv_int(j, "llc_total_bytes", (int64_t)llc);
  tiers_json_kv_bool(j, "size_meets_stream_rule", llc == 0 || o->size >= 4 * llc);
  tiers_json_kv_int(j, "available_memory_bytes", (int64_t)tiers_topo_available_memory());
  tiers_json_kv_int(j, "array_alignment_bytes", (int64_t)HUGE_BYTES);
  tiers_json_kv_string(j, "huge_pages", huge_pages_advisable() ? "advised" : "unavailable");
  tiers_json_kv_int(j, "ntimes", o->ntimes);
  tiers_json_kv_int(j, "timed_repetitions", o->ntimes - 1);
  tiers_json_kv_string(j, "stores", store_names[o->nt]);
  tiers_json_kv_string(j, "default_stores", tiers_mem_have_nt() ? "auto" : "regular");
  tiers_json_kv_string(j, "isa", o->isa);
  tiers_json_kv_string(j, "best_isa", tiers_mem_best_isa());
  tiers_json_kv_bool(j, "quick", o->quick);
  tiers_json_kv_double(j, "scalar", SCALAR);
  tiers_json_kv_double(j, "fill_value", FILL);
  tiers_json_kv_double(j, "clock_resolution_s", tiers_clock_resolution());
  tiers_json_kv_int(j, "num_pus", tiers_topo_num_pus(topo));
  tiers_json_key(j, "initial_binding");
  tiers_json_array_begin(j);
  for (int i = 0; i < ninitial; i++)
    tiers_json_int(j, initial_pus[i]);
  tiers_json_array_end(j);

  tiers_json_key(j, "threads");
  tiers_json_array_begin(j);
  for (int i = 0; i < o->nthreads; i++)
    tiers_json_int(j, o->threads[i]);
  tiers_json_array_end(j);
  tiers_json_key(j, "pin");
  tiers_json_array_begin(j);
  for (int i = 0; i < o->npins; i++)
    tiers_json_string(j, tiers_pin_policy_name(o->pins[i]));
  tiers_json_array_end(j);
  tiers_json_key(j, "placement");
  tiers_json_array_begin(j);
  for (int i = 0; i < o->nplacements; i++)
    tiers_json_string(j, placement_names[o->placements[i]]);
  tiers_json_array_end(j);
  tiers_json_key(j, "kernels");
  tiers_json_array_begin(j);
  for (int k = 0; k < TIERS_MEM_NKERNELS; k++) {
    if (!o->selected[k])
      continue;
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "name", kernel_names[k]);
    tiers_json_kv_string(j, "formula", kernel_formulas[k]);
    tiers_json_kv_int(j, "bytes_per_element", kernel_bytes[k]);
    tiers_json_kv_string(j, "stores", kernel_stores(k, o->nt));
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
  tiers_json_object_end(j);
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  tiers_topo_t topo = NULL;
  if (tiers_topo_load(&topo, "this") != TIERS_OK)
    tiers_tool_fail_last("cannot load the topology of this machine");
  hwloc_topology_t hw = tiers_topo_hwloc(topo);
  const int npus = tiers_topo_num_pus(topo);

  struct options o;
  parse_options(argc, argv, &o, topo);
  kernel_set_t K = {NULL, NULL};
  if (o.nt != STORES_NT)
    K[0] = tiers_mem_kernels(o.isa, 0);
  if (o.nt != STORES_REGULAR)
    K[1] = tiers_mem_kernels(o.isa, 1);
  if ((o.nt != STORES_NT && !K[0]) || (o.nt != STORES_REGULAR && !K[1]))
    tiers_tool_fail("no %s kernels for %s", o.nt == STORES_REGULAR ? "regular" : "non-temporal",
                    o.isa);

  /* The cpuset this thread started with: where "none" lets threads run. */
  hwloc_bitmap_t initial = hwloc_bitmap_alloc();
  if (!initial || hwloc_get_cpubind(hw, initial, HWLOC_CPUBIND_THREAD) != 0) {
    hwloc_bitmap_free(initial);
    initial = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(hw));
  }
  int *initial_pus = malloc(sizeof *initial_pus * (size_t)npus);
  int ninitial = 0;
  if (!initial_pus || tiers_topo_get_thread_binding(topo, initial_pus, &ninitial) != TIERS_OK)
    ninitial = 0;

  const size_t n = (size_t)(o.size / ELEM_BYTES);
  const size_t bytes = n * ELEM_BYTES;
  int max_threads = 1;
  for (int i = 0; i < o.nthreads; i++)
    max_threads = o.threads[i] > max_threads ? o.threads[i] : max_threads;

  struct run r;
  memset(&r, 0, sizeof r);
  r.pin_order = calloc((size_t)max_threads, sizeof *r.pin_order);
  r.bound = calloc((size_t)max_threads * (size_t)npus, sizeof *r.bound);
  r.nbound = calloc((size_t)max_threads, sizeof *r.nbound);
  r.cpu = calloc((size_t)max_threads, sizeof *r.cpu);
  r.times = calloc((size_t)TIERS_MEM_NKERNELS * NVARIANTS * (size_t)o.ntimes, sizeof *r.times);
  r.sums = calloc((size_t)o.ntimes, sizeof *r.sums);
  r.partial = calloc((size_t)max_threads * 8, sizeof *r.partial);
  if (!r.pin_order || !r.bound || !r.nbound || !r.cpu || !r.times || !r.sums || !r.partial)
    tiers_tool_fail("out of memory");

  const char *corrupt = getenv("TIERS_PROBE_MEM_CORRUPT");
  const int do_corrupt = corrupt && strcmp(corrupt, "1") == 0;

  tiers_json_t j;
  tiers_json_init(&j, stdout);
  tiers_json_object_begin(&j);
  tiers_tool_json_native(&j);
  write_params(&j, &o, topo, initial_pus, ninitial);

  tiers_json_key(&j, "configs");
  tiers_json_array_begin(&j);
  int all_ok = 1, done = 0;
  char why[512] = "", first_failure[768] = "";
  const int total = o.nthreads * o.npins * o.nplacements;
  for (int ti = 0; ti < o.nthreads; ti++) {
    for (int pi = 0; pi < o.npins; pi++) {
      for (int li = 0; li < o.nplacements; li++) {
        r.threads = o.threads[ti];
        r.pin = o.pins[pi];
        r.placement = o.placements[li];
        r.bind_error = 0;
        if (tiers_topo_pin_order(topo, r.pin, r.threads, r.pin_order) != TIERS_OK)
          tiers_tool_fail_last("cannot place the threads");

        struct array_map ma, mb, mc;
        array_map(bytes, &ma);
        array_map(bytes, &mb);
        array_map(bytes, &mc);
        double *a = ma.x, *b = mb.x, *c = mc.x;

        const int linked = r.threads >= 2 && r.pin_order[0] >= 0 && r.pin_order[1] >= 0 &&
                           r.pin_order[0] != r.pin_order[1];
        double link[2] = {0.0, 0.0};
        if (linked)
          link[0] = pu_link_now(topo, &r);
        measure(topo, initial, &o, K, a, b, c, n, &r);
        const long long huge_now = huge_page_bytes(); /* while the arrays are mapped */
        if (linked)
          link[1] = pu_link_now(topo, &r);
        if (r.bind_error)
          tiers_tool_fail("cannot bind the threads (--pin %s): %s", tiers_pin_policy_name(r.pin),
                          r.bind_message);
        if (do_corrupt)
          memset(b, 0, bytes);

        tiers_json_object_begin(&j);
        tiers_json_kv_int(&j, "threads", r.threads);
        tiers_json_kv_string(&j, "pin", tiers_pin_policy_name(r.pin));
        tiers_json_kv_string(&j, "placement", placement_names[r.placement]);
        tiers_json_kv_string(&j, "stores", store_names[o.nt]);
        tiers_json_kv_int(&j, "slice_unit_bytes", (int64_t)(slice_unit(n, r.threads) * ELEM_BYTES));
        tiers_json_key(&j, "huge_page_bytes");
        if (huge_now >= 0)
          tiers_json_int(&j, huge_now);
        else
          tiers_json_null(&j);
        tiers_json_key(&j, "pu_link");
        if (linked) {
          tiers_json_object_begin(&j);
          tiers_json_key(&j, "pus");
          tiers_json_array_begin(&j);
          tiers_json_int(&j, r.pin_order[0]);
          tiers_json_int(&j, r.pin_order[1]);
          tiers_json_array_end(&j);
          tiers_json_kv_double_array(&j, "rtt_ns", link, 2);
          tiers_json_object_end(&j);
        } else {
          tiers_json_null(&j);
        }
        write_threads(&j, &r, npus);
        write_results(&j, &o, &r, n);
        int ok = validate(&j, &o, &r, a, b, c, n, why, sizeof why);
        tiers_json_object_end(&j);
        if (!ok && all_ok) {
          snprintf(first_failure, sizeof first_failure, "%s (threads %d, pin %s, placement %s)",
                   why, r.threads, tiers_pin_policy_name(r.pin), placement_names[r.placement]);
          all_ok = 0;
        }

        array_unmap(&ma);
        array_unmap(&mb);
        array_unmap(&mc);
        done++;
        if (o.progress) {
          fprintf(stderr, "progress %d %d\n", done, total);
          fflush(stderr);
        }
      }
    }
  }
  tiers_json_array_end(&j);
  tiers_json_kv_bool(&j, "validation_passed", all_ok);
  tiers_json_object_end(&j);
  if (tiers_json_finish(&j) != 0)
    tiers_tool_fail("cannot write the result: %s", strerror(errno));

  hwloc_bitmap_free(initial);
  free(initial_pus);
  free(r.pin_order);
  free(r.bound);
  free(r.nbound);
  free(r.cpu);
  free(r.times);
  free(r.sums);
  free(r.partial);
  free(o.threads);
  tiers_topo_destroy(&topo);
  if (!all_ok)
    tiers_tool_fail("validation failed: %s", first_failure);
  return 0;
}
