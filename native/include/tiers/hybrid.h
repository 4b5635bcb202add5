/**
 * @file tiers/hybrid.h
 * @brief The hybrid shared/distributed runtime (COMPaS model, the COMPaS paper):
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
 * The wait spins, then blocks, as production OpenMP runtimes do, so that
 * the barrier is fast when every thread has a CPU of its own and still
 * makes progress when a thread shares its CPU with another process (a
 * daemon, another job) or threads outnumber CPUs (a pure spin barrier
 * would then burn whole time slices waiting for a thread that cannot run):
 *  1. spin: up to a bounded number of polls of the sense word, each with a
 *     CPU pause hint.  The bound adapts to recent episodes: it doubles when
 *     a wait ends during the spin or soon after it, and halves when a wait
 *     lasts longer than the cap (the awaited thread was not running);
 *     see tiers_barrier_set_spin() for the cap;
 *  2. only when the team outnumbers the CPUs: a few polls each preceded by
 *     sched_yield(), dropped as soon as a yield hands the CPU to another
 *     process for long (a yield does not help against a busy neighbour:
 *     it gives the neighbour the rest of a time slice);
 *  3. sleep: the thread sleeps on a Linux futex on the sense word.  The
 *     last arrival wakes sleepers only when some thread has announced
 *     that it sleeps; the announcement and the sense word are ordered
 *     sequentially consistently and the kernel rechecks the sense word
 *     before sleeping, so no wake-up is lost.  A woken sleeper preempts a
 *     busy neighbour at once, where a spinning or yielding thread would
 *     wait for the neighbour's time slice to end.
 *
 * The default cap is about 200 microseconds of polls when the team fits in
 * the machine's online CPUs, and 100 polls when it does not.
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
 * @brief Sets the cap of the adaptive spin: the most times a waiting
 *        thread polls before it blocks (yields when the team outnumbers
 *        the CPUs, then sleeps).  The learned bound restarts at the cap.
 *
 * @param barrier the barrier
 * @param spins number of polls, 0 or more (0: block at once);
 *        TIERS_BARRIER_SPIN_FOREVER: never yield nor sleep (the pure spin
 *        barrier of the COMPaS paper; use only when every thread has a
 *        CPU of its own).
 * @return TIERS_OK; TIERS_ERR_ARG when @p barrier is NULL or @p spins is
 *         below -1.
 *
 * Thread-safety: call it while no thread waits on the barrier (a thread
 * already waiting keeps the bound it started with; the learned bound may
 * be overwritten by a waiter that finishes).
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

/* ======================================================================
 * Part 2: the MPI-free helpers of the hybrid model (in libtiers).
 * ====================================================================== */
#include <stdint.h>

#include "tiers/topo.h"

/**
 * @brief Block split: the range [*lo, *hi) of item @p index when @p n
 *        items are cut into @p parts contiguous blocks as evenly as
 *        possible (the first n % parts blocks hold one item more).
 *
 * Used for step 1 (data over processes) and step 2 (data over the
 * threads of a team) of the COMPaS model alike.
 *
 * @param n items, 0 or more
 * @param parts blocks, at least 1
 * @param index which block, 0 <= index < parts
 * @param[out] lo first item of the block
 * @param[out] hi one past its last item (hi == lo for an empty block)
 * @return TIERS_OK; TIERS_ERR_ARG for a negative @p n, @p parts < 1,
 *         @p index out of range or a NULL output.
 *
 * Thread-safety: pure function.  Not an MPI call.
 */
TIERS_API int tiers_split_range(long n, int parts, int index, long *lo, long *hi);

/** The three parts every run's time is split into (the COMPaS paper's Fig. 13). */
typedef enum tiers_phase {
  TIERS_PHASE_COMPUTE = 0, /**< local computation (step 3) */
  TIERS_PHASE_COMM = 1,    /**< messages: halo exchange, reductions (step 4) */
  TIERS_PHASE_SYNC = 2,    /**< waiting in barriers: team and MPI */
  TIERS_PHASE_COUNT = 3
} tiers_phase_t;

/** @return "compute", "comm" or "sync"; "?" for anything else. */
TIERS_API const char *tiers_phase_name(tiers_phase_t phase);

/** Reduction operators of the hybrid reductions. */
typedef enum tiers_op {
  TIERS_OP_SUM = 0, /**< sum */
  TIERS_OP_MAX = 1, /**< maximum */
  TIERS_OP_MIN = 2  /**< minimum */
} tiers_op_t;

/* ======================================================================
 * Part 3: the thread team and the hybrid collectives (libtiers-hybrid).
 *
 * These declarations need MPI: they are visible only when <mpi.h> was
 * included before this header, and they live in the separate library
 * libtiers-hybrid (link it and libtiers), built only where CMake found
 * MPI.  libtiers itself stays MPI-free.
 *
 * The model (the COMPaS paper's §4):
 *  1. split the data over the processes (tiers_decomp_create,
 *     tiers_split_range);
 *  2. start a team of threads in every process and split each process's
 *     part over them (tiers_team_create, tiers_team_parallel,
 *     tiers_team_split);
 *  3. every thread computes on its part;
 *  4. when all are done, exchange data between processes
 *     (tiers_halo_exchange, or tiers_halo_begin/end around the interior
 *     computation to overlap), reduce (tiers_team_allreduce_double/int64)
 *     or synchronise (tiers_team_barrier);
 *  5. repeat 3-4.
 *
 * Threading: the library needs only MPI_THREAD_FUNNELED.  Every MPI call
 * is made by the team's master thread (OpenMP thread 0 of a region opened
 * by the thread that initialised MPI); the other threads wait in the spin
 * barrier meanwhile.  The collective helpers may be called either by all
 * threads of the team inside a parallel region (then they are team
 * collectives: every thread must call, in the same order), or outside any
 * parallel region by the master thread alone (then they are plain MPI
 * collectives).
 *
 * Timing: the team keeps, on the master thread, the seconds spent in each
 * tiers_phase_t since tiers_team_timers_reset().  The collectives switch
 * the phase themselves (barrier: sync; reductions and halo exchange:
 * comm; a reduction's or halo's wait for the other threads: sync) and
 * switch back to compute on return; applications may switch by hand with
 * tiers_team_phase().
 * ====================================================================== */
#if defined(MPI_VERSION)

/** Opaque handle to a thread team of one MPI process. */
typedef struct tiers_team *tiers_team_t;

/**
 * @brief Creates the thread team of this process over communicator
 *        @p comm (collective over @p comm).
 *
 * The team duplicates @p comm for its own messages.  With a pinning
 * policy, thread t of the team is bound to the t-th PU of the process's
 * cpuset (the PUs it may run on when the call is made) in @p pin order:
 * compact fills one core, cache, package after another, scatter spreads
 * over the widest level first (tiers_topo_pin_order restricted to the
 * cpuset).  Processes of one node that share the same cpuset (their
 * launcher did not bind them, e.g. mpirun --bind-to none) take successive
 * blocks of that order: the k-th of them starts at its PU k * nthreads,
 * wrapping around, rather than all on the first PU.  Threads are bound
 * now and again at every tiers_team_parallel().
 *
 * @param[out] team the new team
 * @param comm the processes of the run (MPI must be initialised with at
 *        least MPI_THREAD_FUNNELED when @p nthreads > 1)
 * @param nthreads threads per process; 0: omp_get_max_threads()
 * @param pin TIERS_PIN_NONE, TIERS_PIN_COMPACT or TIERS_PIN_SCATTER
 * @return TIERS_OK; TIERS_ERR_ARG for a NULL @p team or a negative
 *         @p nthreads, or when @p nthreads exceeds the PUs of the
 *         process's cpuset, under any policy (the message says how many);
 *         TIERS_ERR_STATE when MPI is not initialised or gives less than
 *         MPI_THREAD_FUNNELED for a multi-thread team; TIERS_ERR_HWLOC /
 *         TIERS_ERR_SYS when the topology or the binding fails;
 *         TIERS_ERR_MPI; TIERS_ERR_NOMEM.  The result is the same on every
 *         process (an error anywhere fails the call everywhere).
 *
 * Thread-safety: call from the master thread, outside parallel regions.
 */
TIERS_API int tiers_team_create(tiers_team_t *team, MPI_Comm comm, int nthreads,
                                tiers_pin_policy_t pin);

/**
 * @brief Releases a team (collective over its communicator: frees the
 *        duplicate).  Accepts NULL or a pointer to NULL; sets *team to NULL.
 * @return TIERS_OK.
 */
TIERS_API int tiers_team_destroy(tiers_team_t *team);

/** @return the team's threads per process, or -1 for a NULL team. */
TIERS_API int tiers_team_nthreads(tiers_team_t team);

/** @return this process's rank in the team's communicator, or -1. */
TIERS_API int tiers_team_rank(tiers_team_t team);

/** @return the number of processes in the team's communicator, or -1. */
TIERS_API int tiers_team_size(tiers_team_t team);

/** @return the team's communicator (a duplicate owned by the team). */
TIERS_API MPI_Comm tiers_team_comm(tiers_team_t team);

/**
 * @brief The logical PU index (tiers/topo.h numbering of this machine)
 *        thread @p thread is pinned to, or -1 without pinning or out of
 *        range.
 */
TIERS_API int tiers_team_thread_pu(tiers_team_t team, int thread);

/**
 * @brief Runs @p fn(team, thread, arg) on every thread of the team in
 *        one OpenMP parallel region of tiers_team_nthreads() threads,
 *        each bound as the pin policy says; returns when all have
 *        returned.
 *
 * @return TIERS_OK, or the first non-zero value a thread's @p fn
 *         returned (lowest thread number wins); TIERS_ERR_ARG for NULL
 *         arguments; TIERS_ERR_STATE when OpenMP gave fewer threads.
 *
 * Thread-safety: call from the master thread outside parallel regions.
 */
TIERS_API int tiers_team_parallel(tiers_team_t team,
                                  int (*fn)(tiers_team_t team, int thread, void *arg),
                                  void *arg);

/**
 * @brief Step 2 of the model: the range [*lo, *hi) of @p n items (this
 *        process's part) that team thread @p thread works on
 *        (tiers_split_range over the team's threads).
 */
TIERS_API int tiers_team_split(tiers_team_t team, long n, int thread, long *lo, long *hi);

/**
 * @brief The hybrid barrier: returns when every thread of every process
 *        of the team has called it.
 *
 * Inside a parallel region (all team threads call): a team spin barrier,
 * then MPI_Barrier by the master thread, then a second team barrier that
 * releases the others.  Outside a parallel region: MPI_Barrier.  The
 * time counts as TIERS_PHASE_SYNC.
 *
 * @return TIERS_OK; TIERS_ERR_ARG for a NULL team; TIERS_ERR_STATE when
 *         the region's thread count is not the team's; TIERS_ERR_MPI when
 *         MPI_Barrier fails (returned in every thread).
 * Collective over the team's threads and processes.
 */
TIERS_API int tiers_team_barrier(tiers_team_t team);

/**
 * @brief The hybrid reduction of doubles: every thread of every process
 *        contributes @p count values; every caller receives the reduction
 *        over all of them.
 *
 * Inside a parallel region: the team's contributions are combined in
 * thread order (so that the result does not depend on which thread came
 * first), then the master makes one MPI_Allreduce, then every thread
 * copies the result.  Outside a parallel region: one MPI_Allreduce.
 * @p in and @p out may be the same buffer.  MAX and MIN are exact; SUM
 * is rounded and reproducible for a given process and thread count.
 *
 * @param team the team
 * @param in this thread's @p count values
 * @param[out] out the @p count results
 * @param count values per thread, 0 or more
 * @param op TIERS_OP_SUM, TIERS_OP_MAX or TIERS_OP_MIN
 * @return TIERS_OK; TIERS_ERR_ARG; TIERS_ERR_STATE; TIERS_ERR_NOMEM;
 *         TIERS_ERR_MPI.  Every thread gets the same code.
 * Collective over the team's threads and processes; counts and ops must
 * match.
 */
TIERS_API int tiers_team_allreduce_double(tiers_team_t team, const double *in, double *out,
                                          int count, tiers_op_t op);

/** @brief As tiers_team_allreduce_double() for 64-bit integers (exact). */
TIERS_API int tiers_team_allreduce_int64(tiers_team_t team, const int64_t *in, int64_t *out,
                                         int count, tiers_op_t op);

/**
 * @brief Zeroes the phase timers and starts TIERS_PHASE_COMPUTE now.
 * Called by the master thread (other threads: no effect).  Not collective.
 */
TIERS_API int tiers_team_timers_reset(tiers_team_t team);

/**
 * @brief Charges the time since the last switch to the current phase and
 *        makes @p phase the current one.  Only the master thread records;
 *        in other threads this does nothing.
 * @return the phase that was current, or TIERS_PHASE_COUNT for a NULL
 *         team or another thread.
 */
TIERS_API tiers_phase_t tiers_team_phase(tiers_team_t team, tiers_phase_t phase);

/**
 * @brief The seconds charged to each phase since tiers_team_timers_reset()
 *        (the current phase up to now), in @p seconds[TIERS_PHASE_COUNT].
 * @return TIERS_OK; TIERS_ERR_ARG for NULL arguments.  Local; any thread.
 */
TIERS_API int tiers_team_times(tiers_team_t team, double seconds[TIERS_PHASE_COUNT]);

/** Most dimensions of a block decomposition. */
#define TIERS_DECOMP_MAX_DIMS 3

/**
 * A Cartesian block decomposition of a 2-D or 3-D grid of points over the
 * processes of a team (step 1).  Axis 0 is the fastest-varying index of
 * the local arrays (x).  Plain data: read it freely.
 */
typedef struct tiers_decomp {
  int ndims;                                /**< 2 or 3 */
  long global[TIERS_DECOMP_MAX_DIMS];       /**< grid points per axis (unused axes: 1) */
  int dims[TIERS_DECOMP_MAX_DIMS];          /**< processes per axis (unused axes: 1) */
  int coords[TIERS_DECOMP_MAX_DIMS];        /**< this process's coordinates */
  long lo[TIERS_DECOMP_MAX_DIMS];           /**< first owned point per axis (global index) */
  long hi[TIERS_DECOMP_MAX_DIMS];           /**< one past the last owned point */
  long local[TIERS_DECOMP_MAX_DIMS];        /**< hi - lo */
  int neighbor[TIERS_DECOMP_MAX_DIMS][2];   /**< ranks of the lower and upper neighbour per
                                                 axis; MPI_PROC_NULL at the domain's edge */
} tiers_decomp_t;

/**
 * @brief Decomposes a grid of @p global points per axis into blocks, one
 *        per process of @p team, arranged @p dims.  Local (no message),
 *        but every process must pass the same values.
 *
 * Ranks are laid out row-major with the last axis fastest, as
 * MPI_Cart_create does (rank = (c0 * dims1 + c1) * dims2 + c2).  Each
 * axis is split with tiers_split_range.
 *
 * @param team the team (its communicator's size and rank)
 * @param ndims 2 or 3
 * @param global points per axis (ndims entries, each at least 1)
 * @param[in,out] dims processes per axis (ndims entries); zeros are
 *        filled in by MPI_Dims_create
 * @param exact when non-zero, every axis must divide evenly
 * @param[out] d the decomposition of this process
 * @return TIERS_OK; TIERS_ERR_ARG when the product of @p dims is not the
 *         number of processes, an axis has more processes than points, or
 *         (@p exact) an axis does not divide evenly; the message names the
 *         axis and the numbers.
 */
TIERS_API int tiers_decomp_create(tiers_team_t team, int ndims, const long *global, int *dims,
                                  int exact, tiers_decomp_t *d);

/** Opaque handle to a face halo exchange over a decomposition. */
typedef struct tiers_halo *tiers_halo_t;

/**
 * @brief Prepares the exchange of one ghost layer on every face of this
 *        process's block (the 5-point / 7-point stencil pattern).
 *
 * The field is an array of doubles of (local[0]+2) x (local[1]+2)
 * [x (local[2]+2)] points, axis 0 fastest, whose outer layer holds the
 * ghosts: point (i, j, k) of the block (0-based) is at
 * field[(i+1) + (local[0]+2) * ((j+1) + (local[1]+2) * (k+1))].
 * Ghosts on a domain edge are never written.
 *
 * @return TIERS_OK; TIERS_ERR_ARG; TIERS_ERR_NOMEM.  Local.
 */
TIERS_API int tiers_halo_create(tiers_halo_t *halo, tiers_team_t team, const tiers_decomp_t *d);

/** @brief Releases a halo; accepts NULL or a pointer to NULL. */
TIERS_API int tiers_halo_destroy(tiers_halo_t *halo);

/**
 * @brief Exchanges the faces of @p field with the neighbours: afterwards
 *        every ghost that faces a neighbour holds that neighbour's
 *        boundary values.  Same as tiers_halo_begin() then
 *        tiers_halo_end().
 * Collective over the team's threads (or the master alone outside a
 * parallel region) and over the neighbouring processes.
 */
TIERS_API int tiers_halo_exchange(tiers_halo_t halo, double *field);

/**
 * @brief Starts the exchange: waits until every team thread has arrived
 *        (their writes to @p field are done), then the master packs the
 *        faces and posts non-blocking receives and sends.  The other
 *        threads return at once and may compute on points that neither
 *        read ghosts nor are sent (the interior), overlapping the
 *        messages; the master joins them after posting.
 *        @p field must not change until tiers_halo_end() returns.
 * @return as tiers_halo_exchange.
 */
TIERS_API int tiers_halo_begin(tiers_halo_t halo, double *field);

/**
 * @brief Completes the exchange begun on @p field: the master waits for
 *        the messages and unpacks the ghosts, then a team barrier makes
 *        them visible to every thread.
 * @return TIERS_OK; TIERS_ERR_STATE without a matching begin;
 *         TIERS_ERR_MPI.  Every thread gets the same code.
 */
TIERS_API int tiers_halo_end(tiers_halo_t halo, double *field);

/**
 * Another messaging layer for a halo's messages (e.g. the memory-based
 * one of tiers/mbc.h, wrapped by the caller): three calls with MPI's
 * non-blocking meaning on byte messages, ranks of the team's communicator,
 * tags >= 0.  Each returns TIERS_OK or a tiers error code.
 */
typedef struct tiers_halo_messenger {
  void *ctx; /**< passed to every call */
  /** start a receive of up to @p bytes from @p peer; *req receives a handle */
  int (*irecv)(void *ctx, void *buf, size_t bytes, int peer, int tag, void **req);
  /** start a send of @p bytes to @p peer; *req receives a handle */
  int (*isend)(void *ctx, const void *buf, size_t bytes, int peer, int tag, void **req);
  /** complete @p count handles (and release them) */
  int (*waitall)(void *ctx, int count, void **reqs);
} tiers_halo_messenger_t;

/**
 * @brief Sends the halo's messages through @p msgr instead of MPI
 *        point-to-point (NULL: back to MPI).  The messenger is copied;
 *        its ctx must outlive the halo's use.
 * @return TIERS_OK; TIERS_ERR_ARG (NULL halo, incomplete messenger);
 *         TIERS_ERR_STATE (an exchange is in flight).  Local; call it
 *         outside exchanges, from the master thread.
 */
TIERS_API int tiers_halo_set_messenger(tiers_halo_t halo, const tiers_halo_messenger_t *msgr);

#endif /* MPI_VERSION */

#ifdef __cplusplus
}
#endif
#endif
