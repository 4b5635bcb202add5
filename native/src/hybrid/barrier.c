/*
 * The spin barrier of tiers/hybrid.h: a centralised sense-reversing
 * barrier whose sense is a whole episode counter, with a bounded spin,
 * then yields, then a futex sleep.  The header explains the algorithm and
 * the memory ordering; the comments here say why each order is enough.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "tiers/hybrid.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#define BARRIER_HAVE_FUTEX 1
#endif

/* Two 64-byte lines: keeps the adjacent-line prefetcher from pairing the
 * hot fields with each other. */
#define BARRIER_LINE 128

/* Polls after the spin phase, each preceded by sched_yield(), before a
 * waiter goes to sleep on the futex. */
#define BARRIER_YIELDS 32

#define BARRIER_SPINS_FIT 10000L
#define BARRIER_SPINS_OVERSUBSCRIBED 100L

struct tiers_barrier {
  /* Arrivals still expected in the current episode; every arrival
   * decrements it, the last one resets it. */
  _Alignas(BARRIER_LINE) atomic_uint remaining;
  /* The sense word: the episode counter.  Waiters poll it and sleep on it. */
  _Alignas(BARRIER_LINE) atomic_uint sense;
  /* Threads in (or entering) the futex sleep.  Written rarely, so it may
   * share the line that waiters poll. */
  atomic_int sleepers;
  /* Read-mostly configuration. */
  _Alignas(BARRIER_LINE) unsigned nthreads;
  atomic_long spins;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* CPUs this process may run on (its affinity mask), at least 1. */
static int usable_cpus(void)
{
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0)
      return n;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (int)online : 1;
#else
  return 1;
#endif
}

int tiers_barrier_create(tiers_barrier_t *barrier, int nthreads)
{
  if (!barrier)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_barrier_create: NULL handle pointer");
  if (nthreads < 1)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_barrier_create: nthreads must be at least 1 (got %d)",
                nthreads);
  struct tiers_barrier *b = aligned_alloc(BARRIER_LINE, sizeof *b);
  if (!b)
    TIERS_ERROR(TIERS_ERR_NOMEM, "tiers_barrier_create: cannot allocate %zu bytes", sizeof *b);
  memset(b, 0, sizeof *b);
  atomic_init(&b->remaining, (unsigned)nthreads);
  atomic_init(&b->sense, 0u);
  atomic_init(&b->sleepers, 0);
  b->nthreads = (unsigned)nthreads;
  atomic_init(&b->spins,
              nthreads <= usable_cpus() ? BARRIER_SPINS_FIT : BARRIER_SPINS_OVERSUBSCRIBED);
  *barrier = b;
  return TIERS_OK;
}

int tiers_barrier_set_spin(tiers_barrier_t barrier, long spins)
{
  if (!barrier)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_barrier_set_spin: NULL barrier");
  if (spins < TIERS_BARRIER_SPIN_FOREVER)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_barrier_set_spin: spins must be -1 or more (got %ld)",
                spins);
  atomic_store_explicit(&barrier->spins, spins, memory_order_relaxed);
  return TIERS_OK;
}

int tiers_barrier_nthreads(tiers_barrier_t barrier)
{
  return barrier ? (int)barrier->nthreads : -1;
}

int tiers_barrier_destroy(tiers_barrier_t *barrier)
{
  if (barrier && *barrier) {
    free(*barrier);
    *barrier = NULL;
  }
  return TIERS_OK;
}

#ifdef BARRIER_HAVE_FUTEX
static void futex_wait(atomic_uint *word, unsigned expected)
{
  /* Returns at once (EAGAIN) when *word no longer equals expected: the
   * kernel compares and sleeps atomically with respect to futex_wake. */
  syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
  syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, __INT_MAX__, NULL, NULL, 0);
}
#endif

/* Slow path of a thread that is not the last to arrive: wait until the
 * sense word moves on from @p episode. */
static __attribute__((noinline)) void wait_episode(struct tiers_barrier *b, unsigned episode)
{
  long spins = atomic_load_explicit(&b->spins, memory_order_relaxed);
  for (long i = 0; spins < 0 || i < spins; i++) {
    if (atomic_load_explicit(&b->sense, memory_order_acquire) != episode)
      return;
    cpu_relax();
  }
  for (int i = 0; i < BARRIER_YIELDS; i++) {
    if (atomic_load_explicit(&b->sense, memory_order_acquire) != episode)
      return;
    sched_yield();
  }
#ifdef BARRIER_HAVE_FUTEX
  /* Announce the sleep before the last check (seq_cst on both sides, see
   * tiers_barrier_wait): either the last arrival sees sleepers > 0 and
   * wakes us, or we see its new sense word here or in the kernel. */
  atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
  while (atomic_load_explicit(&b->sense, memory_order_seq_cst) == episode)
    futex_wait(&b->sense, episode);
  atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
#else
  while (atomic_load_explicit(&b->sense, memory_order_acquire) == episode)
    sched_yield();
#endif
}

int tiers_barrier_wait(tiers_barrier_t b)
{
  if (__builtin_expect(!b, 0))
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_barrier_wait: NULL barrier");
  /* The local sense: read before counting ourselves in, so it names the
   * episode we arrive in (the word cannot advance before our arrival). */
  unsigned episode = atomic_load_explicit(&b->sense, memory_order_acquire);
  /* acq_rel: release publishes our earlier writes; in the last arrival,
   * acquire (through the release sequence of this counter) collects the
   * writes of every earlier arrival. */
  if (atomic_fetch_sub_explicit(&b->remaining, 1, memory_order_acq_rel) == 1) {
    /* Last to arrive.  The reset is ordered before the sense store
     * (release), so a thread that sees the new sense sees the reset. */
    atomic_store_explicit(&b->remaining, b->nthreads, memory_order_relaxed);
    atomic_store_explicit(&b->sense, episode + 1u, memory_order_seq_cst);
#ifdef BARRIER_HAVE_FUTEX
    if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst) > 0)
      futex_wake_all(&b->sense);
#endif
    return TIERS_OK;
  }
  if (atomic_load_explicit(&b->sense, memory_order_acquire) != episode)
    return TIERS_OK;
  wait_episode(b, episode);
  return TIERS_OK;
}
