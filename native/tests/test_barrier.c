/*
 * The spin barrier of tiers/hybrid.h never lets a thread pass early, never
 * loses a wake-up, makes every write before the barrier visible after it,
 * and can be reused back to back; argument errors are reported, and
 * destroy accepts NULL.
 *
 * Each thread, in every episode e, adds 1 to a shared arrival counter and
 * writes e into its slot of a plain (non-atomic) array, then waits.  After
 * the wait it checks that
 *   - the counter is at least nthreads*(e+1): every thread has arrived at
 *     episode e (an early pass fails this);
 *   - the counter is below nthreads*(e+2): no thread has passed episode
 *     e+1 yet (a barrier that lost track of its episode fails this);
 *   - every slot written in episode e holds e (the barrier orders memory);
 *   - the reduction of the episode, every thread's contribution
 *     (e * nthreads + id + 1, written before the wait) summed after it in
 *     thread order, is exactly the closed-form sum.
 * The slots alternate between two arrays, so that a write of episode e+1
 * never races with a read of episode e.
 *
 * Millions of thread-episodes run in total, with the default spin bound
 * (threads up to and beyond the CPUs, where waiters must sleep), with no
 * spinning (the futex sleep path), with pure spinning, and with a thread
 * that arrives more than 10 ms late (the others' spin gives up and they
 * sleep; the learned spin bound shrinks and must grow back).  A watchdog
 * alarm turns a hang into a failure.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tiers/hybrid.h"

#include "check.h"


#define MAX_THREADS 8

struct stress {
  tiers_barrier_t barrier;
  int nthreads;
  long episodes;
  long stall_every; /* >0: every stall_every episodes one thread naps first */
  long stall_ns;    /* for how long */
  atomic_long arrivals;
  long slot[2][MAX_THREADS];
  long contrib[2][MAX_THREADS];
  atomic_long errors;
  atomic_long first_bad_episode;
  atomic_int first_bad_kind;
};

struct worker {
  struct stress *s;
  int id;
};

static void report(struct stress *s, long episode, int kind)
{
  if (atomic_fetch_add(&s->errors, 1) == 0) {
    atomic_store(&s->first_bad_episode, episode);
    atomic_store(&s->first_bad_kind, kind);
  }
}

static void *stress_thread(void *arg)
{
  struct worker *w = arg;
  struct stress *s = w->s;
  const long n = s->nthreads;
  for (long e = 0; e < s->episodes; e++) {
    if (s->stall_every > 0 && e % s->stall_every == 0 && e / s->stall_every % n == w->id) {
      /* the others reach the futex sleep */
      struct timespec nap = {s->stall_ns / 1000000000L, s->stall_ns % 1000000000L};
      nanosleep(&nap, NULL);
    }
    atomic_fetch_add_explicit(&s->arrivals, 1, memory_order_relaxed);
    s->slot[e & 1][w->id] = e;
    s->contrib[e & 1][w->id] = e * n + w->id + 1;
    if (tiers_barrier_wait(s->barrier) != TIERS_OK)
      report(s, e, 0);
    long seen = atomic_load_explicit(&s->arrivals, memory_order_relaxed);
    if (seen < n * (e + 1))
      report(s, e, 1); /* passed before everyone arrived */
    if (seen >= n * (e + 2))
      report(s, e, 2); /* someone passed the next episode without us */
    for (int k = 0; k < s->nthreads; k++)
      if (s->slot[e & 1][k] != e)
        report(s, e, 3); /* a write before the barrier is not visible */
    long sum = 0;
    for (int k = 0; k < s->nthreads; k++)
      sum += s->contrib[e & 1][k];
    if (sum != e * n * n + n * (n + 1) / 2)
      report(s, e, 4); /* the episode's reduction is wrong */
  }
  return NULL;
}

/* Runs nthreads threads through @p episodes episodes; spins < -1 keeps the
 * default spin bound; stall_every > 0 makes one thread (each in turn) nap
 * stall_ns nanoseconds every that many episodes before it arrives. */
static void stress_late(int nthreads, long episodes, long spins, long stall_every, long stall_ns,
                        const char *what)
{
  static const char *kinds[] = {"wait returned an error", "early pass",
                                "passed the next episode", "write not visible",
                                "reduction wrong"};
  struct stress s = {.nthreads = nthreads, .episodes = episodes, .stall_every = stall_every,
                     .stall_ns = stall_ns};
  atomic_init(&s.arrivals, 0);
  atomic_init(&s.errors, 0);
  atomic_init(&s.first_bad_episode, -1);
  atomic_init(&s.first_bad_kind, -1);
  CHECK(tiers_barrier_create(&s.barrier, nthreads) == TIERS_OK);
  if (spins >= -1)
    CHECK(tiers_barrier_set_spin(s.barrier, spins) == TIERS_OK);

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t tid[MAX_THREADS];
  struct worker w[MAX_THREADS];
  for (int i = 0; i < nthreads; i++) {
    w[i] = (struct worker){&s, i};
    CHECK(pthread_create(&tid[i], NULL, stress_thread, &w[i]) == 0);
  }
  for (int i = 0; i < nthreads; i++)
    pthread_join(tid[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);

  long errors = atomic_load(&s.errors);
  if (errors) {
    int kind = atomic_load(&s.first_bad_kind);
    fprintf(stderr, "%s: %ld errors, first in episode %ld: %s\n", what, errors,
            atomic_load(&s.first_bad_episode), kind >= 0 ? kinds[kind] : "?");
  }
  CHECK(errors == 0);
  CHECK(atomic_load(&s.arrivals) == (long)nthreads * episodes);
  printf("%-34s %d threads x %8ld episodes  %7.3f s  %8.3f us/episode\n", what, nthreads,
         episodes, secs, 1e6 * secs / (double)episodes);
  CHECK(tiers_barrier_destroy(&s.barrier) == TIERS_OK);
  CHECK(s.barrier == NULL);
}

static void stress(int nthreads, long episodes, long spins, long stall_every, const char *what)
{
  stress_late(nthreads, episodes, spins, stall_every, 200000, what);
}

static void arguments(void)
{
  tiers_barrier_t b = (tiers_barrier_t)&failures; /* sentinel: must stay untouched */
  tiers_barrier_t sentinel = b;
  CHECK(tiers_barrier_create(NULL, 2) == TIERS_ERR_ARG);
  CHECK(tiers_barrier_create(&b, 0) == TIERS_ERR_ARG);
  CHECK(b == sentinel);
  CHECK(tiers_barrier_create(&b, -3) == TIERS_ERR_ARG);
  CHECK(b == sentinel);
  CHECK(tiers_last_error()[0] != '\0');
  CHECK(tiers_barrier_wait(NULL) == TIERS_ERR_ARG);
  CHECK(tiers_barrier_set_spin(NULL, 10) == TIERS_ERR_ARG);
  CHECK(tiers_barrier_nthreads(NULL) == -1);
  CHECK(tiers_barrier_destroy(NULL) == TIERS_OK);
  b = NULL;
  CHECK(tiers_barrier_destroy(&b) == TIERS_OK);
  CHECK(b == NULL);

  CHECK(tiers_barrier_create(&b, 3) == TIERS_OK);
  CHECK(b != NULL);
  CHECK(tiers_barrier_nthreads(b) == 3);
  CHECK(tiers_barrier_set_spin(b, -2) == TIERS_ERR_ARG);
  CHECK(tiers_barrier_set_spin(b, TIERS_BARRIER_SPIN_FOREVER) == TIERS_OK);
  CHECK(tiers_barrier_set_spin(b, 0) == TIERS_OK);
  CHECK(tiers_barrier_destroy(&b) == TIERS_OK);
  CHECK(b == NULL);
  CHECK(tiers_barrier_destroy(&b) == TIERS_OK);

  /* A team of one never waits. */
  CHECK(tiers_barrier_create(&b, 1) == TIERS_OK);
  int ok = 1;
  for (int i = 0; i < 100000; i++)
    ok &= tiers_barrier_wait(b) == TIERS_OK;
  CHECK(ok);
  CHECK(tiers_barrier_destroy(&b) == TIERS_OK);
}

int main(void)
{
  alarm(240); /* a lost wake-up would hang: let SIGALRM fail the test */
  setvbuf(stdout, NULL, _IOLBF, 0);
  arguments();

  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  stress(2, 500000, -2, 0, "default spin");
  stress(3, 200000, -2, 0, "default spin");
  stress(4, 100000, -2, 0, "default spin");
  stress(2, 50000, 0, 0, "no spin (sleep at once)");
  stress(4, 20000, 0, 0, "no spin (sleep at once)");
  stress(2, 20000, 0, 25, "no spin, one thread naps");
  stress(3, 20000, -2, 25, "default spin, one thread naps");
  if (cpus >= 2)
    stress(2, 200000, TIERS_BARRIER_SPIN_FOREVER, 0, "pure spin");
  /* Waiters that must sleep: twice as many threads as CPUs (at most
   * MAX_THREADS), and a thread 12 ms late every 4th episode; then the
   * episodes after each late one run with a spin bound that shrank and
   * grows again: none may be lost. */
  int over = cpus * 2 + 1 > MAX_THREADS ? MAX_THREADS : (int)cpus * 2 + 1;
  stress(over, 20000, -2, 0, "more threads than CPUs");
  stress_late(2, 40, -2, 4, 12000000, "one thread 12 ms late");
  stress_late(over, 24, -2, 3, 12000000, "over CPUs, one thread 12 ms late");

  if (failures)
    fprintf(stderr, "%d checks failed\n", failures);
  return failures ? 1 : 0;
}
