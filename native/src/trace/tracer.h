/*
 * Internal: the recording runtime of libtiers-trace that the generated
 * wrappers (wrappers.c, from mpi_functions.txt) call.  Every function here
 * is safe to call when tracing is off or stopped: it then does nothing.
 *
 * A wrapper brackets its PMPI call with tiers_trace_begin() and
 * tiers_trace_end().  tiers_trace_begin() returns 0 when the call must not
 * be recorded (tracing off, paused, stopped, or a call made from inside
 * another wrapper); the wrapper then calls PMPI directly.
 */
#ifndef TIERS_TRACE_TRACER_H
#define TIERS_TRACE_TRACER_H

#include <mpi.h>
#include <stdint.h>

#define TIERS_HIDDEN __attribute__((visibility("hidden")))
#define TIERS_EXPORT __attribute__((visibility("default")))

/* Requests copied before a wait/test call, so that completed ones can be
 * looked up afterwards (the call overwrites them with MPI_REQUEST_NULL). */
#define TIERS_REQ_STACK 32
typedef struct tiers_reqsave {
  int count;
  MPI_Request *req;             /* copies of the requests */
  MPI_Status *st;               /* statuses to pass to PMPI */
  MPI_Request req_stack[TIERS_REQ_STACK];
  MPI_Status st_stack[TIERS_REQ_STACK];
} tiers_reqsave_t;

TIERS_HIDDEN int tiers_trace_begin(int func);
TIERS_HIDDEN void tiers_trace_end(int func);
TIERS_HIDDEN void tiers_trace_coll_begin(void);
TIERS_HIDDEN void tiers_trace_coll_end(int op, MPI_Comm comm, int root, uint64_t sent,
                                       uint64_t recvd);
TIERS_HIDDEN void tiers_trace_send(int dest, int tag, MPI_Comm comm, int count,
                                   MPI_Datatype type);
TIERS_HIDDEN void tiers_trace_recv(const MPI_Status *st, MPI_Comm comm);
TIERS_HIDDEN void tiers_trace_isend(int dest, int tag, MPI_Comm comm, int count,
                                    MPI_Datatype type, MPI_Request req);
TIERS_HIDDEN void tiers_trace_irecv(MPI_Comm comm, MPI_Request req);
TIERS_HIDDEN void tiers_trace_complete(MPI_Request saved, const MPI_Status *st);
TIERS_HIDDEN MPI_Status *tiers_trace_reqs_save(tiers_reqsave_t *sv, int count,
                                                const MPI_Request *req, MPI_Status *st);
TIERS_HIDDEN void tiers_trace_reqs_done(tiers_reqsave_t *sv, int nidx, const int *idx);
TIERS_HIDDEN void tiers_trace_reqs_release(tiers_reqsave_t *sv);
TIERS_HIDDEN void tiers_trace_comm_new(MPI_Comm parent, MPI_Comm comm);
TIERS_HIDDEN void tiers_trace_comm_free(MPI_Comm comm);
TIERS_HIDDEN int64_t tiers_trace_clock(void);
TIERS_HIDDEN void tiers_trace_after_init(int provided, int func, int64_t t_enter);
TIERS_HIDDEN void tiers_trace_before_finalize(void);
TIERS_HIDDEN void tiers_trace_at_abort(void);
TIERS_HIDDEN uint64_t tiers_trace_type_size(MPI_Datatype t);
TIERS_HIDDEN uint64_t tiers_trace_sum(const int *a, MPI_Comm comm);
TIERS_HIDDEN int tiers_trace_comm_size(MPI_Comm comm);
TIERS_HIDDEN int tiers_trace_comm_rank(MPI_Comm comm);

/* Names of the wrapped functions, indexed by the TIERS_FN_ ids of wrappers.c. */
extern TIERS_HIDDEN const char *const tiers_trace_fn_names[];
extern TIERS_HIDDEN const int tiers_trace_fn_count;

#endif
