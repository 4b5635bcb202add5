/**
 * @file tiers/hybrid.h
 * @brief The hybrid shared/distributed runtime (COMPaS model, seed 004):
 *        thread-level synchronisation used inside one MPI process.
 *
 * For now this holds the spin barrier of the COMPaS paper §2; the hybrid
 * runtime builds its node barrier from it (a team barrier, then
 * MPI_Barrier by the master thread, then a team barrier again).
 *
 * ## The spin barrier
 *
 * A centralised sense-reversing barrier.  Each thread that arrives reads
 * the barrier's sense word (an episode counter; its parity is the classic
 * one-bit sense), then counts itself out of the arrivals still expected.
 * The last thread to arrive resets that count for the next episode and
 * advances the sense word; the others wait until the sense word changes.
 * A thread cannot fall a whole episode behind (the next episode cannot
 * complete without it), so the barrier can be reused back to back with
 * no reinitialisation, and a thread never passes an episode early.
 *
 * Memory ordering: every write a thread made before it called
 * tiers_barrier_wait() is visible to every thread of the team once that
 * thread's tiers_barrier_wait() of the same episode returns (arrivals are
 * acquire-release read-modify-writes; the last arrival publishes the new
 * sense with a release store; waiters read it with acquire loads).
 *
 * The wait has three phases, so that the barrier is fast when every
 * thread has a CPU of its own and still makes progress when threads
 * outnumber CPUs (a pure spin barrier would then burn whole time slices
 * waiting for a thread that cannot run):
 *  1. spin: up to a bounded number of polls of the sense word, each with a
 *     CPU pause hint (see tiers_barrier_set_spin());
 *  2. yield: a few polls each preceded by sched_yield();
 *  3. sleep: the thread sleeps on a Linux futex on the sense word.  The
 *     last arrival wakes sleepers only when some thread has announced
 *     that it sleeps; the announcement and the sense word are ordered
 *     sequentially consistently and the kernel rechecks the sense word
 *     before sleeping, so no wake-up is lost.
 *
 * The default spin bound is 10000 polls when the team fits in the CPUs the
 * process may run on, and 100 polls when it does not.
 *
 * The hot fields (arrival count, sense word) sit on cache lines of their
 * own, padded to 128 bytes so that neither adjacent-line prefetching nor
 * the read-only configuration causes false sharing.
 *
 * None of these functions is an MPI call.
 */
#ifndef TIERS_HYBRID_H
#define TIERS_HYBRID_H

#include "tiers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque handle to a spin barrier for a fixed number of threads. */
typedef struct tiers_barrier *tiers_barrier_t;

/** tiers_barrier_set_spin(): spin without ever yielding or sleeping. */
#define TIERS_BARRIER_SPIN_FOREVER (-1L)

/**
 * @brief Creates a barrier for a team of @p nthreads threads.
 *
 * @param[out] barrier the new handle; left unchanged on failure
 * @param nthreads number of threads that must call tiers_barrier_wait()
 *        in every episode; at least 1
 * @return TIERS_OK; TIERS_ERR_ARG when @p barrier is NULL or
 *         @p nthreads < 1; TIERS_ERR_NOMEM when allocation fails.
 *
 * Thread-safety: creates a new object; safe to call from any thread.
 */
TIERS_API int tiers_barrier_create(tiers_barrier_t *barrier, int nthreads);

/**
 * @brief Waits until all threads of the team have called this function
 *        in the current episode, then returns in every one of them.
 *
 * Exactly nthreads calls make one episode; the next nthreads calls make
 * the next one, with no reset in between.  On return, the caller sees
 * every write that any team thread made before its call of this episode.
 *
 * @param barrier the barrier
 * @return TIERS_OK; TIERS_ERR_ARG when @p barrier is NULL.
 *
 * Thread-safety: meant to be called concurrently by the nthreads team
 * threads.  More than nthreads concurrent callers of one episode is a
 * usage error (the extra threads join the next episode).
 */
TIERS_API int tiers_barrier_wait(tiers_barrier_t barrier);

/**
 * @brief Sets how many times a waiting thread polls before it starts to
 *        yield the CPU and then to sleep.
 *
 * @param barrier the barrier
 * @param spins number of polls, 0 or more (0: yield at once);
 *        TIERS_BARRIER_SPIN_FOREVER: never yield nor sleep (the pure spin
 *        barrier of the COMPaS paper; use only when every thread has a
 *        CPU of its own).
 * @return TIERS_OK; TIERS_ERR_ARG when @p barrier is NULL or @p spins is
 *         below -1.
 *
 * Thread-safety: may be called at any time, also while threads wait; a
 * thread already waiting keeps the bound it started with.
 */
TIERS_API int tiers_barrier_set_spin(tiers_barrier_t barrier, long spins);

/**
 * @brief The number of threads the barrier was created for.
 * @param barrier the barrier
 * @return nthreads, or -1 when @p barrier is NULL.
 *
 * Thread-safety: safe at any time.
 */
TIERS_API int tiers_barrier_nthreads(tiers_barrier_t barrier);

/**
 * @brief Releases a barrier.
 *
 * @param barrier pointer to the handle; NULL, or a pointer to a NULL
 *        handle, is accepted and does nothing.  The handle is set to NULL.
 * @return TIERS_OK.
 *
 * Thread-safety: no thread may be inside tiers_barrier_wait() on this
 * barrier, nor call it afterwards.
 */
TIERS_API int tiers_barrier_destroy(tiers_barrier_t *barrier);

#ifdef __cplusplus
}
#endif
#endif
