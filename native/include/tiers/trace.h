/**
 * @file tiers/trace.h
 * @brief Run-time control of the tiers MPI tracer (libtiers-trace.so).
 *
 * The tracer is loaded with LD_PRELOAD by `tiers trace -- CMD...`; programs
 * need no change to be traced.  A program that wants to steer the tracer
 * may call the functions below; to stay runnable without the tracer it
 * should declare them weak and check them for NULL:
 *
 * @code
 * #pragma weak tiers_trace_pause
 * #pragma weak tiers_trace_resume
 * if (tiers_trace_pause) tiers_trace_pause();
 * @endcode
 *
 * What the tracer leaves per rank, before `tiers` converts it into an OTF2
 * archive, is described in docs/trace.md ("raw event files").
 */
#ifndef TIERS_TRACE_H
#define TIERS_TRACE_H

#ifdef __cplusplus
extern "C" {
#endif

/** Tracer settings read from the environment by MPI_Init (set by `tiers trace`). */
#define TIERS_TRACE_ENV_DIR "TIERS_TRACE_DIR"             /**< output folder; unset: tracer inert */
#define TIERS_TRACE_ENV_BUDGET "TIERS_TRACE_BUDGET"       /**< buffer bytes per rank */
#define TIERS_TRACE_ENV_POLICY "TIERS_TRACE_POLICY"       /**< sync, full or off */
#define TIERS_TRACE_ENV_TAU "TIERS_TRACE_TAU"             /**< swap-out length in s; 0: auto */
#define TIERS_TRACE_ENV_THRESHOLD "TIERS_TRACE_THRESHOLD" /**< sync: fill fraction that triggers */
#define TIERS_TRACE_ENV_SWAP_EVERY "TIERS_TRACE_SWAP_EVERY" /**< sync: swap out every N-th world collective; 0 or unset: by fill */

/** The smallest buffer budget the tracer accepts, in bytes. */
#define TIERS_TRACE_MIN_BUDGET (64 * 1024)

/**
 * @brief Stop recording MPI calls of the calling process until
 *        tiers_trace_resume().
 *
 * Calls made while paused are not recorded at all (not even enter/leave).
 * Pausing on some ranks only leaves unmatched messages in the trace.
 * Thread-safe; not collective.  Does nothing when the tracer is inactive.
 */
__attribute__((visibility("default"))) void tiers_trace_pause(void);

/**
 * @brief Start recording again after tiers_trace_pause().
 * Thread-safe; not collective.
 */
__attribute__((visibility("default"))) void tiers_trace_resume(void);

/**
 * @brief Write the calling process's trace buffer to its file now.
 *
 * Under the `sync` policy this is a swap-out outside the collective
 * schedule: it is not padded and so breaks the equal-overhead property
 * ("condition C") for this rank.  Thread-safe; not collective.
 * @return 0 on success, -1 when the tracer is inactive or stopped.
 */
__attribute__((visibility("default"))) int tiers_trace_flush(void);

/**
 * @brief Whether MPI calls of this process are being recorded now.
 * @return 1 when recording, 0 when the tracer is inactive, paused or was
 *         stopped (by a write error or a full buffer).  Thread-safe.
 */
__attribute__((visibility("default"))) int tiers_trace_active(void);

#ifdef __cplusplus
}
#endif
#endif
