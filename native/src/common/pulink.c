/*
 * How two PUs share the machine right now (see pulink.h).
 *
 * Thread A (on PU a) sets a flag word to 1, thread B (on PU b) sees it and
 * sets it back to 0, A sees that: one round trip of the line.  Blocks of
 * round trips, each timed; the median block is the figure (a block the
 * host interrupted is long and falls out of the median).  Both threads are
 * the function's own, so the caller's binding stays as it is.
 */
#define _GNU_SOURCE
#include "common/pulink.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "tiers/error.h"

#define RTT_BLOCKS 9
#define RTT_PER_BLOCK 200

typedef struct link_ctx {
  tiers_topo_t topo;
  int a, b, quick;
  _Alignas(64) atomic_int flag;  /* the line that travels */
  _Alignas(64) atomic_int phase; /* A tells B what comes next: 1 round trips, 2 done */
  pthread_barrier_t bar;
  int bind_failed;
  tiers_pulink_t res;
} link_ctx_t;

static int cmp_double(const void *p, const void *q)
{
  const double x = *(const double *)p, y = *(const double *)q;
  return x < y ? -1 : x > y;
}

static void *thread_b(void *arg)
{
  link_ctx_t *c = arg;
  if (tiers_topo_bind_thread(c->topo, c->b) != TIERS_OK)
    c->bind_failed = 1;
  pthread_barrier_wait(&c->bar); /* both pinned */
  if (c->bind_failed)
    return NULL;
  /* round trips until A says they are over */
  for (;;) {
    if (atomic_load_explicit(&c->flag, memory_order_acquire) == 1)
      atomic_store_explicit(&c->flag, 0, memory_order_release);
    else if (atomic_load_explicit(&c->phase, memory_order_acquire) == 2)
      break;
  }
  return NULL;
}

static void *thread_a(void *arg)
{
  link_ctx_t *c = arg;
  if (tiers_topo_bind_thread(c->topo, c->a) != TIERS_OK)
    c->bind_failed = 1;
  pthread_barrier_wait(&c->bar); /* both pinned */
  if (c->bind_failed) {
    atomic_store_explicit(&c->phase, 2, memory_order_release);
    return NULL;
  }
  /* blocks of round trips (the first warms the line up and is not kept),
   * within a deadline: where B's PU is taken by other work, a round trip
   * lasts a time slice, and the measurement must not */
  const int blocks = c->quick ? 5 : RTT_BLOCKS;
  const int64_t start = tiers_now_ns();
  const int64_t deadline = start + (c->quick ? 20 : 50) * 1000000LL;
  double per[RTT_BLOCKS];
  int kept = 0;
  for (int k = -1; k < blocks && !c->res.timed_out; k++) {
    const int64_t t0 = tiers_now_ns();
    int i = 0;
    for (; i < RTT_PER_BLOCK && !c->res.timed_out; i++) {
      atomic_store_explicit(&c->flag, 1, memory_order_release);
      unsigned spins = 0;
      while (atomic_load_explicit(&c->flag, memory_order_acquire) != 0)
        if ((++spins & 1023) == 0 && tiers_now_ns() > deadline) {
          c->res.timed_out = 1;
          break;
        }
    }
    if (k >= 0 && i > 0)
      per[kept++] = (double)(tiers_now_ns() - t0) / i;
  }
  atomic_store_explicit(&c->phase, 2, memory_order_release);
  if (kept > 0) {
    qsort(per, (size_t)kept, sizeof *per, cmp_double);
    c->res.rtt_ns = per[kept / 2];
  } else {
    /* not one block done: at least the time waited for one trip */
    c->res.rtt_ns = (double)(tiers_now_ns() - start);
  }
  return NULL;
}

int tiers_pulink_measure(tiers_topo_t topo, int a, int b, int quick, tiers_pulink_t *out)
{
  const int n = tiers_topo_num_pus(topo);
  if (!out || a == b || a < 0 || b < 0 || a >= n || b >= n)
    TIERS_ERROR(TIERS_ERR_ARG, "pulink: PUs %d and %d (need two different PUs of 0-%d)", a, b,
                n - 1);
  link_ctx_t *c = aligned_alloc(64, (sizeof *c + 63) / 64 * 64);
  if (!c)
    TIERS_ERROR(TIERS_ERR_NOMEM, "pulink: no memory");
  memset(c, 0, sizeof *c);
  c->topo = topo;
  c->a = a;
  c->b = b;
  c->quick = quick;
  c->res = (tiers_pulink_t){a, b, 0, 0};
  atomic_init(&c->flag, 0);
  atomic_init(&c->phase, 1);
  if (pthread_barrier_init(&c->bar, NULL, 2) != 0) {
    free(c);
    TIERS_ERROR(TIERS_ERR_SYS, "pulink: cannot make a barrier");
  }
  /* both sides on threads of their own: the caller's binding stays */
  pthread_t ta, tb;
  if (pthread_create(&tb, NULL, thread_b, c) != 0) {
    pthread_barrier_destroy(&c->bar);
    free(c);
    TIERS_ERROR(TIERS_ERR_SYS, "pulink: cannot start a thread");
  }
  if (pthread_create(&ta, NULL, thread_a, c) != 0) {
    /* B waits in the first barrier: this thread takes A's place there */
    c->bind_failed = 2;
    atomic_store_explicit(&c->phase, 2, memory_order_release);
    pthread_barrier_wait(&c->bar);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&c->bar);
    free(c);
    TIERS_ERROR(TIERS_ERR_SYS, "pulink: cannot start a thread");
  }
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  const int failed = c->bind_failed;
  *out = c->res;
  pthread_barrier_destroy(&c->bar);
  free(c);
  if (failed)
    TIERS_ERROR(TIERS_ERR_SYS, "pulink: cannot pin a thread to PU %d or %d", a, b);
  return TIERS_OK;
}
