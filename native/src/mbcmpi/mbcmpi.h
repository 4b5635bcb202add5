/*
 * libtiers-mbc-mpi internals shared by its source files (nothing here is
 * exported: the library exports only the MPI_ and PMPI_ names).
 */
#ifndef TIERS_MBCMPI_H
#define TIERS_MBCMPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "tiers/mbc.h"

/* The MPI functions this library defines (both MPI_ and PMPI_ names); the
 * calls counted in the statistics ("carried", "passed_to_mpi") are named
 * after them. */
#define MBCMPI_FUNCTIONS(X)                                                                  \
  X(Init) X(Init_thread) X(Finalize)                                                         \
  X(Send) X(Ssend) X(Bsend) X(Rsend) X(Isend) X(Issend) X(Ibsend) X(Irsend) X(Irecv) X(Recv) \
  X(Sendrecv) X(Sendrecv_replace) X(Probe) X(Iprobe) X(Mprobe) X(Improbe)                    \
  X(Mrecv) X(Imrecv)                                                                         \
  X(Wait) X(Waitall) X(Waitany) X(Waitsome) X(Test) X(Testall) X(Testany) X(Testsome)        \
  X(Cancel) X(Request_free) X(Request_get_status)                                            \
  X(Send_init) X(Ssend_init) X(Bsend_init) X(Rsend_init) X(Recv_init) X(Start) X(Startall)  \
  X(Comm_dup) X(Comm_dup_with_info) X(Comm_split) X(Comm_split_type) X(Comm_create)          \
  X(Comm_create_group) X(Cart_create) X(Cart_sub) X(Graph_create) X(Dist_graph_create)       \
  X(Dist_graph_create_adjacent) X(Intercomm_merge) X(Comm_free) X(Comm_disconnect)           \
  X(Comm_spawn) X(Comm_spawn_multiple)                                                       \
  X(Barrier) X(Bcast) X(Reduce) X(Allreduce) X(Gather) X(Gatherv) X(Scatter) X(Scatterv)    \
  X(Allgather) X(Allgatherv) X(Alltoall) X(Alltoallv) X(Alltoallw) X(Reduce_scatter)        \
  X(Reduce_scatter_block) X(Scan) X(Exscan)

#define MBCMPI_ENUM(name) F_##name,
enum mbcmpi_fn { MBCMPI_FUNCTIONS(MBCMPI_ENUM) F_COUNT };
#undef MBCMPI_ENUM

/* The real functions (the next definition after this library's, found
 * with dlsym(RTLD_NEXT, "PMPI_...")). */
#define MBCMPI_REAL(name) extern __typeof__(PMPI_##name) *mbcmpi_real_##name;
MBCMPI_FUNCTIONS(MBCMPI_REAL)
#undef MBCMPI_REAL
#define REAL(name) mbcmpi_real_##name

/* A communicator carried over memory-based messaging. */
struct mbcmpi_ctx {
  tiers_mbc_t mbc;
  MPI_Comm comm;
  int rank, size;
  struct mbcmpi_ctx *next; /* creation order, newest first */
};

struct mbcmpi_state {
  int active;  /* set up at MPI_Init and not switched off */
  int off;     /* TIERS_MBC_MPI_OFF=1: pass every call through */
  int inside;  /* > 0 while this library runs MPI or libtiers-mbc calls */
  int in_coll; /* > 0 while a collective is carried on the transport */
  int keyval;
  struct mbcmpi_ctx *world, *ctxs;
  MPI_Comm last_comm;
  struct mbcmpi_ctx *last_ctx;
  uint64_t carried[F_COUNT], passed[F_COUNT];
};
extern struct mbcmpi_state mbcmpi;

/* Each wrapper w_X is exported as MPI_X and PMPI_X. */
#define EXPORT(name)                                                                    \
  __typeof__(PMPI_##name) MPI_##name __attribute__((alias("w_" #name), visibility("default"))); \
  __typeof__(PMPI_##name) PMPI_##name __attribute__((alias("w_" #name), visibility("default")));

/* Counts a call carried over memory-based messaging. */
#define CARRY(name) (mbcmpi.carried[F_##name]++)

#define ENTER() (mbcmpi.inside++)
#define LEAVE() (mbcmpi.inside--)

/* The context of comm, or NULL when the call must pass through to MPI
 * (library off, re-entered, intercommunicator or a communicator this
 * library did not see created). */
struct mbcmpi_ctx *mbcmpi_ctx_slow(MPI_Comm comm);
static inline struct mbcmpi_ctx *mbcmpi_ctx_of(MPI_Comm comm)
{
  if (!mbcmpi.active || mbcmpi.inside)
    return NULL;
  if (comm == MPI_COMM_WORLD)
    return mbcmpi.world;
  if (comm == mbcmpi.last_comm)
    return mbcmpi.last_ctx;
  return mbcmpi_ctx_slow(comm);
}

/* One line `tiers mbc: FN: not supported (WHY)` and PMPI_Abort(.., 2). */
void mbcmpi_unsupported(const char *fn, const char *why);
/* One line `tiers mbc: FN: WHAT: <libtiers error>` and PMPI_Abort(.., 2). */
void mbcmpi_fatal(const char *fn, const char *what);
/* One round of progress on every context and on the detached sends. */
void mbcmpi_progress_all(void);
/* Waits for a real MPI request while making progress on the transport. */
int mbcmpi_wait_real(MPI_Request *req, MPI_Status *status);

/* during.c: a blocking call passed to MPI runs between
 * mbcmpi_during_begin and mbcmpi_during_end (FN: its name, for a failure
 * message) while a helper thread makes transport progress on the node's
 * peers; the caller touches no libtiers-mbc handle in between.
 * mbcmpi_during_stop ends the helper (MPI_Finalize). */
void mbcmpi_during_begin(void);
void mbcmpi_during_end(const char *fn);
void mbcmpi_during_stop(void);
/* The value of the MPI call EXPR, run with the helper's progress unless
 * the library is off or re-entered. */
#define WITH_PROGRESS(fn, expr)                  \
  __extension__({                                \
    int rc_;                                     \
    if (mbcmpi.active && !mbcmpi.inside) {       \
      mbcmpi_during_begin();                     \
      rc_ = (expr);                              \
      mbcmpi_during_end(fn);                     \
    } else {                                     \
      rc_ = (expr);                              \
    }                                            \
    rc_;                                         \
  })

/* mbc_fast.c: the small-message fast paths, on libtiers-mbc's private
 * state.  Neither waits for anything beyond `spin` polls, neither fails:
 * 0 means "take the general path" (tiers_mbc_isend / tiers_mbc_irecv),
 * which then does the same the long way.
 *  - mbcmpi_fast_send: a message of up to 4 KiB (and below the
 *    single-copy threshold) to dest (valid rank,
 *    tag >= 0, buf valid for `bytes`) written into the FIFO at once, when
 *    no send to dest is queued and no send request of dest waits; 1: sent
 *    and complete.  It does not call mbc_sent_hook: the caller counts it
 *    (it always goes through the FIFO).
 *  - mbcmpi_fast_recv: a receive from source (a valid rank, not the
 *    wildcard) of a message that is the next whole unasked entry of
 *    source's FIFO and fits cap bytes, when no receive is posted and no
 *    message is buffered; polls up to `spin` more times (0: looks once);
 *    1: received, *st filled.
 *  - mbcmpi_fast_post: posts a receive from source (a valid rank, not the
 *    wildcard, a node peer) into buf (room for cap bytes, below the
 *    direct-write threshold) when no message is buffered: what
 *    tiers_mbc_irecv does then, less the look into the FIFO, which the
 *    next progress round makes (the caller has just looked); 1: posted,
 *    *req is the libtiers-mbc request. */
int mbcmpi_fast_send(tiers_mbc_t m, const void *buf, size_t bytes, int dest, int tag);
int mbcmpi_fast_recv(tiers_mbc_t m, void *buf, size_t cap, int source, int tag, unsigned spin,
                     tiers_mbc_status_t *st);
int mbcmpi_fast_post(tiers_mbc_t m, void *buf, size_t cap, int source, int tag,
                     tiers_mbc_request_t *req);

/* coll.c */
int mbcmpi_coll_barrier(struct mbcmpi_ctx *c, int *carried);
int mbcmpi_coll_bcast(struct mbcmpi_ctx *c, void *buf, int count, MPI_Datatype type, int root,
                      int *carried);
int mbcmpi_coll_allreduce(struct mbcmpi_ctx *c, const void *sbuf, void *rbuf, int count,
                          MPI_Datatype type, MPI_Op op, int *carried);

#endif
