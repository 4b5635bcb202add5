/*
 * Internal: spin-then-block waiting, shared by the spin barrier
 * (hybrid/barrier.c, and through it the team barrier and reductions of
 * hybrid/team.c) and the waits of libtiers-mbc (mbc/mbc.c).
 *
 * A waiter first polls for a bounded number of times, then blocks (a
 * futex sleep in the barrier; mbc, whose peers are other processes with no
 * futex word shared, naps and keeps its bound in nanoseconds).  The bound is learned
 * from recent waits, as production OpenMP runtimes tune their spin counts,
 * but adaptively and per object:
 *   - a wait that ended during the spin doubles the bound (up to its cap):
 *     the threads are running side by side, spinning pays;
 *   - a wait that outlasted the spin is timed to its end.  If the whole
 *     wait was still shorter than the cap, the peer was running, only
 *     later than the bound (typically: it was asleep itself and a futex
 *     wake-up takes tens of microseconds); the bound grows, or both sides
 *     would sleep for ever after, each waking the other.  If the wait was
 *     longer than the cap, the awaited thread was not running (it shares
 *     its CPU with another process, or threads outnumber CPUs): the bound
 *     halves, down to a small floor, since polls then only burn the CPU
 *     that thread or a neighbour could use, and spend the waiter's fair
 *     share of the CPU so that the scheduler no longer favours it when it
 *     is woken.
 * A sched_yield() phase is dangerous: under the Linux CFS scheduler a
 * yield hands the CPU to a busy neighbour process for the rest of its time
 * slice (milliseconds) and does not make a sleeping or preempted peer run
 * any sooner, whereas a futex sleep does both right (the sleeper is woken
 * by the peer and preempts the busy neighbour at once).  Yields help only
 * when the waiters themselves outnumber the CPUs (the yield then hands the
 * CPU to the peer we wait for).  So an object whose waiters outnumber the
 * CPUs may yield a few times after the spin, and each yield is timed: one
 * that kept the waiter off the CPU longer than TIERS_YIELD_LONG_NS went to
 * a stranger, and the yield budget halves (to none; every 64th blocked
 * wait tries one yield again); a wait that ended during the yields grows it.
 *
 * The budget word is shared by the waiters of one object and updated with
 * relaxed atomics only when it changes: lost updates are harmless.
 */
#ifndef TIERS_COMMON_WAIT_H
#define TIERS_COMMON_WAIT_H

#include <stdatomic.h>
#include <stdint.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define TIERS_WAIT_HAVE_FUTEX 1
#endif

/* An adaptive spin bound, in polls (or in the unit its user keeps). */
typedef struct tiers_spin {
  _Atomic uint32_t polls; /* the bound the next wait uses */
  uint32_t cap;           /* its ceiling (TIERS_SPIN_FOREVER: never give up) */
  uint32_t floor;         /* its floor */
  _Atomic uint32_t yields; /* yields after the spin, before blocking */
  uint32_t yields_cap;     /* their ceiling; 0: never yield */
  _Atomic uint32_t blocked; /* waits that reached the yield phase */
} tiers_spin_t;

/* A yield that kept the waiter off the CPU longer than this went to
 * another process. */
#define TIERS_YIELD_LONG_NS 50000

/* cap of a spin that never gives up */
#define TIERS_SPIN_FOREVER UINT32_MAX

/* Waits at most this long spinning when the waiters fit in the CPUs. */
#define TIERS_SPIN_CAP_US 200.0

static inline void tiers_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Polls of tiers_cpu_relax() per microsecond on this CPU (measured once per
 * process, about 20 us the first time; at least 1). */
uint32_t tiers_wait_polls_per_us(void);

/* Sets @p s to a cap of @p cap polls (TIERS_SPIN_FOREVER: spin forever;
 * 0: never spin) and up to @p yields_cap yields; starts at the caps. */
void tiers_spin_init(tiers_spin_t *s, uint32_t cap, uint32_t yields_cap);

/* The yield phase after a spin that did not end the wait: returns 1 when
 * @p word no longer equals @p expected (the wait is over), 0 when the
 * caller must block.  See the top of this file. */
int tiers_spin_yield_while_equal(const _Atomic uint32_t *word, uint32_t expected,
                                 tiers_spin_t *s);

/* The bound for the wait that starts now. */
static inline uint32_t tiers_spin_budget(const tiers_spin_t *s)
{
  return atomic_load_explicit(&s->polls, memory_order_relaxed);
}

/* Learns from a wait that ended during a spin of @p budget polls. */
static inline void tiers_spin_ended(tiers_spin_t *s, uint32_t budget)
{
  if (s->cap == TIERS_SPIN_FOREVER || budget >= s->cap)
    return;
  uint32_t next = budget >= s->cap / 2 ? s->cap : (budget ? budget * 2 : 1);
  atomic_store_explicit(&s->polls, next, memory_order_relaxed);
}

/* Learns from a wait that outlasted a spin of @p budget polls and then
 * blocked for @p blocked_ns nanoseconds. */
void tiers_spin_blocked(tiers_spin_t *s, uint32_t budget, int64_t blocked_ns);

/* The same for a bound kept in any unit (nanoseconds, rounds): the wait
 * outlasted a spin of @p budget and lasted @p waited in all, in that unit. */
void tiers_spin_waited(tiers_spin_t *s, uint32_t budget, double waited);

/* Polls @p word (acquire) until it differs from @p expected, within the
 * learned bound of @p s; returns 1 when it changed (the bound learns from
 * it), 0 when the caller must block, then tell tiers_spin_blocked() how
 * long, with *budget. */
static inline int tiers_spin_while_equal(const _Atomic uint32_t *word, uint32_t expected,
                                         tiers_spin_t *s, uint32_t *budget)
{
  uint32_t n = tiers_spin_budget(s);
  *budget = n;
  if (n == TIERS_SPIN_FOREVER) {
    while (atomic_load_explicit(word, memory_order_acquire) == expected)
      tiers_cpu_relax();
    return 1;
  }
  for (uint32_t i = 0; i < n; i++) {
    if (atomic_load_explicit(word, memory_order_acquire) != expected) {
      tiers_spin_ended(s, n);
      return 1;
    }
    tiers_cpu_relax();
  }
  if (atomic_load_explicit(word, memory_order_acquire) != expected) {
    tiers_spin_ended(s, n);
    return 1;
  }
  return 0;
}

#ifdef TIERS_WAIT_HAVE_FUTEX
/* Sleeps while *word == expected (the kernel compares and sleeps
 * atomically with respect to tiers_futex_wake), at most @p timeout_ns
 * (0: no limit).  @p shared: the word lies in memory shared between
 * processes (no FUTEX_PRIVATE_FLAG).  May return early (signal, spurious
 * wake-up): callers recheck. */
static inline void tiers_futex_wait(_Atomic uint32_t *word, uint32_t expected, int shared,
                                    long timeout_ns)
{
  struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
  syscall(SYS_futex, (uint32_t *)word, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, expected,
          timeout_ns > 0 ? &ts : NULL, NULL, 0);
}

/* Wakes every thread sleeping on @p word. */
static inline void tiers_futex_wake_all(_Atomic uint32_t *word, int shared)
{
  syscall(SYS_futex, (uint32_t *)word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT32_MAX,
          NULL, NULL, 0);
}
#endif

/* Waits, inside one process, until *@p word no longer equals @p expected:
 * polls within the learned bound of @p s, yields as @p s allows, then
 * sleeps on the futex, announced in *@p sleepers; learns from the wait.
 * The writer stores the new value (seq_cst) and calls tiers_wake_waiters():
 * either the waiter sees the value before it sleeps, or the writer sees
 * its announcement and wakes it. */
void tiers_wait_while_equal(_Atomic uint32_t *word, uint32_t expected, tiers_spin_t *s,
                            atomic_int *sleepers);

/* The writer's half of tiers_wait_while_equal(): wakes the sleepers of
 * @p word, if there are any, after a seq_cst store to it. */
static inline void tiers_wake_waiters(_Atomic uint32_t *word, atomic_int *sleepers)
{
#ifdef TIERS_WAIT_HAVE_FUTEX
  if (atomic_load_explicit(sleepers, memory_order_seq_cst) > 0)
    tiers_futex_wake_all(word, 0);
#else
  (void)word;
  (void)sleepers;
#endif
}

#endif
