/*
 * The spin barrier of tiers/hybrid.h: a centralised sense-reversing
 * barrier whose sense is a whole episode counter, with an adaptive
 * bounded spin (common/wait.h), then a futex sleep.  The header explains
 * the algorithm and the memory ordering; the comments here say why each
 * order is enough.
 */
#include "tiers/hybrid.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/wait.h"

/* Two 64-byte lines: keeps the adjacent-line prefetcher from pairing the
 * hot fields with each other. */
#define BARRIER_LINE 128

/* Spin cap when the team outnumbers the CPUs: a waiter then almost always
 * waits for a thread that is not running. */
#define BARRIER_SPINS_OVERSUBSCRIBED 100u
/* Yields after the spin when the team outnumbers the CPUs: they hand the
 * CPU to the team thread we wait for (common/wait.h drops them when they
 * hand it to another process instead). */
#define BARRIER_YIELDS_OVERSUBSCRIBED 8u

struct tiers_barrier {
  /* Arrivals still expected in the current episode; every arrival
   * decrements it, the last one resets it. */
  _Alignas(BARRIER_LINE) atomic_uint remaining;
  /* The sense word: the episode counter.  Waiters poll it and sleep on it. */
  _Alignas(BARRIER_LINE) _Atomic uint32_t sense;
  /* Threads in (or entering) the futex sleep.  Written rarely, so it may
   * share the line that waiters poll. */
  atomic_int sleepers;
  /* Read-mostly configuration. */
  _Alignas(BARRIER_LINE) unsigned nthreads;
  /* The learned spin bound: written only when a wait changes it, which
   * happens when waits stop (or start) ending during the spin. */
  _Alignas(BARRIER_LINE) tiers_spin_t spin;
};

/* CPUs of the machine that are online, at least 1.  Not the calling
 * thread's affinity mask: a program commonly pins its first thread to one
 * PU before it creates the barrier of a team that spans many. */
static int usable_cpus(void)
{
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (int)online : 1;
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
  int fit = nthreads <= usable_cpus();
  tiers_spin_init(&b->spin,
                  fit ? (uint32_t)(TIERS_SPIN_CAP_US * tiers_wait_polls_per_us())
                      : BARRIER_SPINS_OVERSUBSCRIBED,
                  fit ? 0 : BARRIER_YIELDS_OVERSUBSCRIBED);
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
  if (spins > (long)(TIERS_SPIN_FOREVER - 1))
    spins = (long)(TIERS_SPIN_FOREVER - 1);
  tiers_spin_init(&barrier->spin, spins < 0 ? TIERS_SPIN_FOREVER : (uint32_t)spins,
                  barrier->spin.yields_cap);
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

/* Slow path of a thread that is not the last to arrive: wait until the
 * sense word moves on from @p episode. */
static __attribute__((noinline)) void wait_episode(struct tiers_barrier *b, unsigned episode)
{
  tiers_wait_while_equal(&b->sense, episode, &b->spin, &b->sleepers);
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
    tiers_wake_waiters(&b->sense, &b->sleepers);
    return TIERS_OK;
  }
  if (atomic_load_explicit(&b->sense, memory_order_acquire) != episode)
    return TIERS_OK;
  wait_episode(b, episode);
  return TIERS_OK;
}
