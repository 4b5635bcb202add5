/* Internal: the calibration and set-up parts of common/wait.h. */
#include "common/wait.h"

#include "common/clock.h"

#include <sched.h>

static _Atomic uint32_t polls_per_us; /* 0: not measured yet */

uint32_t tiers_wait_polls_per_us(void)
{
  uint32_t known = atomic_load_explicit(&polls_per_us, memory_order_relaxed);
  if (known)
    return known;
  /* Best of three short runs: an interrupt in one does not skew it.  Two
   * threads measuring at once both store a valid figure. */
  const int n = 2048;
  int64_t best = 0;
  for (int r = 0; r < 3; r++) {
    int64_t t0 = tiers_now_ns();
    for (int i = 0; i < n; i++)
      tiers_cpu_relax();
    int64_t dt = tiers_now_ns() - t0;
    if (dt > 0 && (best == 0 || dt < best))
      best = dt;
  }
  uint32_t per_us = best > 0 ? (uint32_t)((int64_t)n * 1000 / best) : 100;
  if (per_us < 1)
    per_us = 1;
  atomic_store_explicit(&polls_per_us, per_us, memory_order_relaxed);
  return per_us;
}

void tiers_spin_init(tiers_spin_t *s, uint32_t cap, uint32_t yields_cap)
{
  s->yields_cap = yields_cap;
  atomic_store_explicit(&s->yields, yields_cap, memory_order_relaxed);
  atomic_store_explicit(&s->blocked, 0, memory_order_relaxed);
  s->cap = cap;
  /* The floor still catches a peer that arrives right behind us. */
  s->floor = cap < 32 ? cap : 32;
  atomic_store_explicit(&s->polls, cap, memory_order_relaxed);
}

void tiers_spin_waited(tiers_spin_t *s, uint32_t budget, double waited)
{
  if (s->cap == TIERS_SPIN_FOREVER)
    return;
  uint32_t next;
  if (waited <= (double)s->cap) {
    double grown = waited > (double)budget ? 2.0 * waited : 2.0 * budget;
    next = grown >= (double)s->cap ? s->cap : (uint32_t)grown;
  } else {
    next = budget / 2 > s->floor ? budget / 2 : s->floor;
  }
  if (next != budget)
    atomic_store_explicit(&s->polls, next, memory_order_relaxed);
}

void tiers_spin_blocked(tiers_spin_t *s, uint32_t budget, int64_t blocked_ns)
{
  /* the whole wait, in polls */
  tiers_spin_waited(s, budget,
                    (double)budget + 1e-3 * (double)blocked_ns * tiers_wait_polls_per_us());
}

int tiers_spin_yield_while_equal(const _Atomic uint32_t *word, uint32_t expected,
                                 tiers_spin_t *s)
{
  if (s->yields_cap == 0)
    return 0;
  uint32_t n = atomic_load_explicit(&s->yields, memory_order_relaxed);
  if (n == 0) {
    /* now and then, try again: the stranger may have gone */
    uint32_t k = atomic_fetch_add_explicit(&s->blocked, 1, memory_order_relaxed);
    if (k % 64 != 63)
      return 0;
    n = 1;
  }
  for (uint32_t i = 0; i < n; i++) {
    int64_t t0 = tiers_now_ns();
    sched_yield();
    int64_t dt = tiers_now_ns() - t0;
    if (atomic_load_explicit(word, memory_order_acquire) != expected) {
      uint32_t grown = n < s->yields_cap ? n + 1 : n;
      if (dt > TIERS_YIELD_LONG_NS)
        grown = n / 2;
      if (grown != atomic_load_explicit(&s->yields, memory_order_relaxed))
        atomic_store_explicit(&s->yields, grown, memory_order_relaxed);
      return 1;
    }
    if (dt > TIERS_YIELD_LONG_NS) {
      atomic_store_explicit(&s->yields, n / 2, memory_order_relaxed);
      return 0;
    }
  }
  return 0;
}

void tiers_wait_while_equal(_Atomic uint32_t *word, uint32_t expected, tiers_spin_t *s,
                            atomic_int *sleepers)
{
  uint32_t budget;
  if (tiers_spin_while_equal(word, expected, s, &budget))
    return;
  int64_t t0 = tiers_now_ns();
  if (tiers_spin_yield_while_equal(word, expected, s)) {
    tiers_spin_blocked(s, budget, tiers_now_ns() - t0);
    return;
  }
#ifdef TIERS_WAIT_HAVE_FUTEX
  /* announce the sleep before the last check (seq_cst on both sides, see
   * tiers_wake_waiters) */
  atomic_fetch_add_explicit(sleepers, 1, memory_order_seq_cst);
  while (atomic_load_explicit(word, memory_order_seq_cst) == expected)
    tiers_futex_wait(word, expected, 0, 0);
  atomic_fetch_sub_explicit(sleepers, 1, memory_order_relaxed);
#else
  (void)sleepers;
  while (atomic_load_explicit(word, memory_order_acquire) == expected)
    sched_yield();
#endif
  tiers_spin_blocked(s, budget, tiers_now_ns() - t0);
}
