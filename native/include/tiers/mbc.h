/**
 * @file tiers/mbc.h
 * @brief Memory-based message passing (MPI/MBCF, the MPI/MBCF paper's §2): MPI-style
 *        point-to-point messages that travel through memory instead of
 *        through a message channel.
 *
 * A tiers_mbc_t is created over an MPI communicator (MPI starts the
 * processes and stays the engine for setup and for the collectives of
 * create/destroy); messages between its processes then move through
 * memory:
 *
 *  - when the receiver posted the receive first and told the sender where
 *    to write (a *send request*), the sender writes the data straight into
 *    the receive buffer (a *direct remote write*: one copy, no buffering);
 *  - otherwise the sender puts header and data into its own FIFO in the
 *    receiver's memory, and the receiver copies them out when it matches
 *    the message.
 *
 * Messages and send requests go through separate FIFOs, one of each per
 * pair of processes; both are numbered, so that a send request that raced
 * with a message already in the FIFO is recognised by the sender as stale
 * and dropped, and the receiver matches the FIFO copy instead.
 * docs/mbc.md describes the protocol, the FIFO layout and the limits.
 *
 * Transports, chosen per pair of processes (MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED finds the node):
 *  - inside a node, shared memory: FIFOs in an MPI-3 shared-memory window
 *    written with plain stores and a release-stored stamp, direct writes
 *    with Linux cross-memory attach (process_vm_writev) where permitted;
 *  - between nodes, MPI-3 one-sided operations with passive-target
 *    synchronisation: FIFOs in an MPI_Win_allocate window, written with
 *    MPI_Put and MPI_Accumulate and completed with MPI_Win_flush under
 *    MPI_Win_lock_all (no direct writes: every message uses the FIFO).
 * tiers_mbc_options_t::transport (or $TIERS_MBC_TRANSPORT) forces one of
 * them for every pair; the statistics count the messages of each.
 *
 * Semantics follow MPI's point-to-point rules: messages between one pair
 * of processes are matched in the order they were sent (non-overtaking);
 * a message matches the earliest posted receive whose source and tag
 * match; TIERS_MBC_ANY_SOURCE and TIERS_MBC_ANY_TAG are wildcards.
 * Messages are untyped byte strings.
 *
 * Errors: every function returns TIERS_OK or a code of tiers/error.h, and
 * records a message for tiers_last_error().  A receive whose buffer is
 * smaller than the message stores the first bytes that fit, never writes
 * past the buffer, sets tiers_mbc_status_t::truncated and returns
 * TIERS_ERR_ARG (MPI's MPI_ERR_TRUNCATE).  Waits give up after the time
 * limit of the options (TIERS_ERR_STATE) and also when a process they
 * wait on has exited (TIERS_ERR_STATE, naming the rank).
 *
 * Thread safety: like MPI_THREAD_FUNNELED, one thread of each process
 * makes all the tiers_mbc_* calls on a given handle.  Progress is made
 * only inside tiers_mbc_* calls.
 */
#ifndef TIERS_MBC_H
#define TIERS_MBC_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "tiers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Wildcard source of a receive: a message from any process matches. */
#define TIERS_MBC_ANY_SOURCE (-1)
/** Wildcard tag of a receive: a message with any tag matches. */
#define TIERS_MBC_ANY_TAG (-1)
/** Largest tag a message may carry; tags are 0..TIERS_MBC_TAG_UB. */
#define TIERS_MBC_TAG_UB 0x7fffffff

/** Opaque handle to a memory-based communicator. */
typedef struct tiers_mbc *tiers_mbc_t;

/** Opaque handle to a non-blocking send or receive. */
typedef struct tiers_mbc_request *tiers_mbc_request_t;

/** Whether send requests and direct remote writes are used. */
enum tiers_mbc_direct_mode {
  TIERS_MBC_DIRECT_AUTO = 0, /**< use direct writes where every process can (default) */
  TIERS_MBC_DIRECT_OFF = 1   /**< every message goes through the FIFOs */
};

/** Which transport carries the messages between two processes. */
enum tiers_mbc_transport_kind {
  TIERS_MBC_TRANSPORT_AUTO = 0, /**< shared memory inside a node, RMA across (default) */
  TIERS_MBC_TRANSPORT_SHM = 1,  /**< shared memory only: the communicator must lie in one node */
  TIERS_MBC_TRANSPORT_RMA = 2   /**< MPI-3 one-sided operations for every pair, even inside a
                                     node (to test the inter-node path on one machine) */
};

/**
 * Options of tiers_mbc_create().  Fill with tiers_mbc_options_init() and
 * change the fields wanted; every process must pass the same values.
 */
typedef struct tiers_mbc_options {
  size_t fifo_bytes;       /**< size of each message FIFO (one per sender in
                                each receiver); default 65536, at least 4096,
                                rounded up to a multiple of 64 */
  int request_slots;       /**< entries of each send-request FIFO; default 64, at least 4 */
  size_t direct_min_bytes; /**< messages at least this long go by direct
                                remote write when the receiver asked for
                                them, and unasked ones to a process of the
                                node are left in the send buffer for the
                                receiver to copy (single-copy rendezvous;
                                $TIERS_MBC_SINGLE_COPY=0 turns it off,
                                $TIERS_MBC_SINGLE_COPY_MIN moves it); shorter
                                answers to a send request go through the
                                FIFO (a copy is cheaper than a system call),
                                and receives with less room than this send
                                no request; default 16384 */
  double timeout_s;        /**< time limit of every wait, in seconds; 0: no
                                limit (a wait still ends when a process it
                                waits on has exited); default 0, or
                                $TIERS_MBC_TIMEOUT_S when set */
  int direct;              /**< a tiers_mbc_direct_mode */
  int debug_fifo_first;    /**< testing hook: this process's first N sends
                                go into the FIFO before it reads the send
                                requests that are already waiting, which
                                forces the stale-request race; default 0, or
                                $TIERS_MBC_DEBUG_FIFO_FIRST when set */
  int transport;           /**< a tiers_mbc_transport_kind; default AUTO, or
                                $TIERS_MBC_TRANSPORT (auto, shm or rma) */
} tiers_mbc_options_t;

/** What a completed receive (or send) delivered. */
typedef struct tiers_mbc_status {
  int source;           /**< rank of the sender (receives; the destination for sends) */
  int tag;              /**< tag of the message */
  size_t bytes;         /**< bytes stored in the receive buffer (sends: bytes sent) */
  size_t message_bytes; /**< bytes the sender sent (> bytes when truncated) */
  int truncated;        /**< 1 when the message did not fit the receive buffer */
  int error;            /**< TIERS_OK or the code this request completed with */
} tiers_mbc_status_t;

/** Reduction operations of tiers_mbc_allreduce(). */
enum tiers_mbc_op { TIERS_MBC_SUM = 0, TIERS_MBC_MIN = 1, TIERS_MBC_MAX = 2 };

/** Element types of tiers_mbc_allreduce(). */
enum tiers_mbc_type { TIERS_MBC_INT32 = 0, TIERS_MBC_INT64 = 1, TIERS_MBC_DOUBLE = 2 };

/** Scope of tiers_mbc_stats(). */
enum tiers_mbc_scope {
  TIERS_MBC_LOCAL = 0, /**< this process's counters (not collective) */
  TIERS_MBC_GLOBAL = 1 /**< counters summed over all processes (collective) */
};

/**
 * Message-path counters and the traffic statistics of the MPI/MBCF paper's Table 3.
 * Counts include the messages of tiers_mbc_barrier() and
 * tiers_mbc_allreduce(), which are built on the point-to-point layer.
 */
typedef struct tiers_mbc_stats {
  uint64_t msgs_sent;          /**< messages sent */
  uint64_t bytes_sent;         /**< payload bytes sent (headers excluded) */
  uint64_t msgs_direct;        /**< messages sent by direct remote write */
  uint64_t bytes_direct;       /**< their payload bytes */
  uint64_t msgs_fifo;          /**< messages sent through the FIFO, unasked */
  uint64_t bytes_fifo;         /**< their payload bytes */
  uint64_t msgs_answered_fifo; /**< messages a send request asked for that
                                    went through the FIFO (shorter than
                                    direct_min_bytes) */
  uint64_t bytes_answered_fifo; /**< their payload bytes */
  uint64_t fifo_chunks;        /**< FIFO entries written for messages (a
                                    message longer than the free space is
                                    written in several chunks) */
  uint64_t fifo_full_waits;    /**< times a sender found a FIFO full and had to wait */
  uint64_t requests_sent;      /**< send requests this process sent as a receiver */
  uint64_t requests_received;  /**< send requests this process received as a sender */
  uint64_t requests_used;      /**< received send requests answered with a message */
  uint64_t requests_stale;     /**< received send requests dropped as stale */
  uint64_t requests_unsent;    /**< receives that could not send a request
                                    (request FIFO full, a wildcard receive
                                    pending, or an earlier one unasked) */
  uint64_t msgs_received;      /**< messages received */
  uint64_t bytes_received;     /**< bytes stored in receive buffers */
  uint64_t msgs_unexpected;    /**< messages that arrived before their receive
                                    and were buffered */
  uint64_t truncations;        /**< receives that truncated a message */
  uint64_t msgs_shm;           /**< messages sent to peers served by shared memory */
  uint64_t bytes_shm;          /**< their payload bytes */
  uint64_t msgs_rma;           /**< messages sent to peers served by MPI-3 RMA */
  uint64_t bytes_rma;          /**< their payload bytes */
  uint64_t msgs_read;          /**< messages sent unasked and left in the send
                                    buffer for the receiver to copy (single-copy
                                    rendezvous, direct_min_bytes and up, inside a
                                    node); msgs_sent = msgs_direct + msgs_fifo +
                                    msgs_answered_fifo + msgs_read */
  uint64_t bytes_read;         /**< their payload bytes */
  double elapsed_s;            /**< seconds since create or the last reset
                                    (GLOBAL: the longest over processes) */
  double data_rate_Bps;        /**< bytes_sent / elapsed_s (Table 3 "data rate") */
  double msg_rate_per_s;       /**< msgs_sent / elapsed_s (Table 3 "message rate") */
  double direct_share;         /**< bytes_direct / bytes_sent, 0..1 (Table 3
                                    "remote write share"); 0 when nothing was sent */
  int direct_available;        /**< 1 when direct remote writes are in use */
  int nprocs;                  /**< processes in the communicator */
} tiers_mbc_stats_t;

/**
 * @brief Fill @p opts with the defaults (and the $TIERS_MBC_* overrides
 *        documented in tiers_mbc_options_t).
 * @return TIERS_OK, or TIERS_ERR_ARG when @p opts is NULL or an environment
 *         override is malformed.  Not an MPI call; thread-safe.
 */
TIERS_API int tiers_mbc_options_init(tiers_mbc_options_t *opts);

/**
 * @brief Create a memory-based communicator over the processes of @p comm.
 *
 * Collective over @p comm (every process calls it with the same options).
 * @p comm is duplicated; the caller may free its own.  Requires MPI to be
 * initialised and at most one calling thread per process.
 * @param comm  an intra-communicator
 * @param opts  options, or NULL for the defaults
 * @param out   receives the handle
 * @return TIERS_OK; TIERS_ERR_ARG (NULL @p out, invalid options);
 *         TIERS_ERR_UNSUPPORTED (transport SHM and processes on more than
 *         one node);
 *         TIERS_ERR_NOMEM; TIERS_ERR_MPI (an MPI call failed).
 */
TIERS_API int tiers_mbc_create(MPI_Comm comm, const tiers_mbc_options_t *opts, tiers_mbc_t *out);

/**
 * @brief Destroy a communicator: finish this process's outstanding sends,
 *        wait until every process got this far, free everything.
 *
 * Collective.  Accepts NULL and a pointer to NULL (nothing to do); sets
 * @p mbc to NULL.  Requests still outstanding are freed and their handles
 * become invalid.
 * @return TIERS_OK; TIERS_ERR_STATE when receives were still outstanding
 *         or the sends could not finish in the time limit (everything is
 *         freed all the same); TIERS_ERR_MPI.
 */
TIERS_API int tiers_mbc_destroy(tiers_mbc_t *mbc);

/**
 * @brief This process's rank and the number of processes.
 * @param rank, size  receive the values (either may be NULL)
 * @return TIERS_OK, or TIERS_ERR_ARG when @p mbc is NULL.  Local.
 */
TIERS_API int tiers_mbc_rank(tiers_mbc_t mbc, int *rank, int *size);

/**
 * @brief Start a send of @p bytes bytes from @p buf to rank @p dest.
 *
 * The buffer must not change until the request completes.  Local.
 * @param tag  0..TIERS_MBC_TAG_UB
 * @param req  receives the request; complete it with tiers_mbc_wait() or
 *             tiers_mbc_test() (and family)
 * @return TIERS_OK; TIERS_ERR_ARG (invalid rank or tag, NULL buffer with
 *         non-zero size, NULL handle); TIERS_ERR_NOMEM.
 */
TIERS_API int tiers_mbc_isend(tiers_mbc_t mbc, const void *buf, size_t bytes, int dest, int tag,
                              tiers_mbc_request_t *req);

/**
 * @brief Start a receive into @p buf (room for @p capacity bytes) of a
 *        message from @p source (or TIERS_MBC_ANY_SOURCE) with @p tag (or
 *        TIERS_MBC_ANY_TAG).  Local.
 * @return TIERS_OK; TIERS_ERR_ARG (invalid rank or tag, NULL buffer with
 *         non-zero capacity, NULL handle); TIERS_ERR_NOMEM.
 */
TIERS_API int tiers_mbc_irecv(tiers_mbc_t mbc, void *buf, size_t capacity, int source, int tag,
                              tiers_mbc_request_t *req);

/**
 * @brief Wait until @p req completes, free it and set @p req to NULL.
 *
 * A NULL request (e.g. one already completed) returns TIERS_OK at once
 * with an empty status (source and tag the wildcards, 0 bytes).
 * @param status  receives the status, or NULL
 * @return TIERS_OK; TIERS_ERR_ARG (truncated receive: see the file
 *         comment); TIERS_ERR_STATE (time limit passed or a peer exited:
 *         the request stays outstanding); TIERS_ERR_MPI.
 */
TIERS_API int tiers_mbc_wait(tiers_mbc_t mbc, tiers_mbc_request_t *req, tiers_mbc_status_t *status);

/**
 * @brief Make progress once and tell whether @p req has completed; if so,
 *        free it, set @p req to NULL and fill @p status.
 * @param flag  receives 1 when completed, 0 otherwise
 * @return as tiers_mbc_wait(), without waiting.
 */
TIERS_API int tiers_mbc_test(tiers_mbc_t mbc, tiers_mbc_request_t *req, int *flag,
                             tiers_mbc_status_t *status);

/**
 * @brief Wait for all @p count requests (NULL entries are allowed).
 * @param statuses  array of @p count statuses, or NULL
 * @return TIERS_OK when all completed without error; otherwise the first
 *         error code (each status says which request failed, e.g. was
 *         truncated); on TIERS_ERR_STATE (time limit, exited peer) the
 *         requests not yet completed stay outstanding.
 */
TIERS_API int tiers_mbc_waitall(tiers_mbc_t mbc, int count, tiers_mbc_request_t *reqs,
                                tiers_mbc_status_t *statuses);

/**
 * @brief Make progress once; when all @p count requests have completed,
 *        free them all, set them to NULL, fill @p statuses and set @p flag
 *        to 1 (otherwise 0, and no request is freed).
 * @return as tiers_mbc_waitall().
 */
TIERS_API int tiers_mbc_testall(tiers_mbc_t mbc, int count, tiers_mbc_request_t *reqs, int *flag,
                                tiers_mbc_status_t *statuses);

/** @brief Blocking send: tiers_mbc_isend() then tiers_mbc_wait(). */
TIERS_API int tiers_mbc_send(tiers_mbc_t mbc, const void *buf, size_t bytes, int dest, int tag);

/** @brief Blocking receive: tiers_mbc_irecv() then tiers_mbc_wait(). */
TIERS_API int tiers_mbc_recv(tiers_mbc_t mbc, void *buf, size_t capacity, int source, int tag,
                             tiers_mbc_status_t *status);

/**
 * @brief Barrier over the communicator's processes (dissemination
 *        algorithm on zero-byte messages of the layer itself).
 *
 * Collective.  Never matches user receives.
 * @return TIERS_OK; TIERS_ERR_STATE (time limit, exited peer); TIERS_ERR_MPI.
 */
TIERS_API int tiers_mbc_barrier(tiers_mbc_t mbc);

/**
 * @brief Combine @p count elements of every process with @p op and give the
 *        result to all.
 *
 * Collective.  The result is the same bit for bit on every process: rank
 * 0 combines the contributions in rank order and sends the result back.
 * @p sendbuf and @p recvbuf may be the same buffer.
 * @param type  a tiers_mbc_type; @param op  a tiers_mbc_op
 * @return TIERS_OK; TIERS_ERR_ARG (NULL buffers, negative count, unknown
 *         type or op); TIERS_ERR_NOMEM; TIERS_ERR_STATE.
 */
TIERS_API int tiers_mbc_allreduce(tiers_mbc_t mbc, const void *sendbuf, void *recvbuf, int count,
                                  int type, int op);

/**
 * @brief The message-path counters and Table 3 statistics.
 * @param scope  TIERS_MBC_LOCAL (local call) or TIERS_MBC_GLOBAL (collective:
 *               every process calls it, all get the sums)
 * @return TIERS_OK; TIERS_ERR_ARG; TIERS_ERR_MPI.
 */
TIERS_API int tiers_mbc_stats(tiers_mbc_t mbc, int scope, tiers_mbc_stats_t *stats);

/**
 * @brief Name the transports this process uses: "shm" (shared memory for
 *        every peer), "rma" (MPI-3 RMA for every peer) or "shm+rma".
 * @param name  receives a static string
 * @return TIERS_OK, or TIERS_ERR_ARG (NULL handle or pointer).  Local.
 */
TIERS_API int tiers_mbc_transport_name(tiers_mbc_t mbc, const char **name);

/** @brief Zero this process's counters and restart its clock.  Local. */
TIERS_API int tiers_mbc_stats_reset(tiers_mbc_t mbc);

#ifdef __cplusplus
}
#endif
#endif
