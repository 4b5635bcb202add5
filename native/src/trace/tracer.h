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
  MPI_Request *req;             /* copies of the requests (C handles) */
  MPI_Status *st;               /* C statuses given to PMPI (the caller's or ours), or NULL */
  MPI_Fint *fst;                /* Fortran statuses given to pmpi_ (the caller's or ours), or NULL */
  void *own;                    /* heap block of ours to free, or NULL */
  MPI_Request req_stack[TIERS_REQ_STACK];
  MPI_Status st_stack[TIERS_REQ_STACK];
} tiers_reqsave_t;

/* A Fortran status: MPI_STATUS_SIZE integers (the C status's size in
 * Open MPI and MPICH); TIERS_FSTATUS_MAX bounds it for local copies. */
#define TIERS_FSTATUS_WORDS (sizeof(MPI_Status) / sizeof(MPI_Fint))
#define TIERS_FSTATUS_MAX 16
_Static_assert(TIERS_FSTATUS_WORDS <= TIERS_FSTATUS_MAX, "Fortran status larger than expected");
_Static_assert(sizeof(MPI_Fint) == sizeof(int), "MPI_Fint is not int");

TIERS_HIDDEN int tiers_trace_begin(int func, const void *ra);
TIERS_HIDDEN void tiers_trace_end(int func);
TIERS_HIDDEN void tiers_trace_coll_begin(void);
TIERS_HIDDEN void tiers_trace_coll_end(int op, MPI_Comm comm, int root, uint64_t sent,
                                       uint64_t recvd);
TIERS_HIDDEN void tiers_trace_icoll_end(int op, MPI_Comm comm, int root, uint64_t sent,
                                        uint64_t recvd);
TIERS_HIDDEN void tiers_trace_persist_init(int recv, int peer, int tag, MPI_Comm comm, int count,
                                           MPI_Datatype type, MPI_Request req);
TIERS_HIDDEN void tiers_trace_pcoll_init(int op, MPI_Comm comm, int root, uint64_t sent,
                                         uint64_t recvd, MPI_Request req);
TIERS_HIDDEN void tiers_trace_start(MPI_Request req);
TIERS_HIDDEN void tiers_trace_request_free(MPI_Request req);
/* what: the TIERS_XFER_ kinds of one-sided and file transfers */
enum { TIERS_XFER_PUT = 1, TIERS_XFER_GET = 2, TIERS_XFER_ACC = 3, TIERS_XFER_GET_ACC = 4,
       TIERS_XFER_FETCH_OP = 5, TIERS_XFER_CAS = 6, TIERS_XFER_READ = 7, TIERS_XFER_WRITE = 8,
       TIERS_XFER_NBR = 9 /* a neighbourhood collective's block to one neighbour */ };
TIERS_HIDDEN void tiers_trace_rma(int what, MPI_Win win, int target, uint64_t bytes);
TIERS_HIDDEN void tiers_trace_io(int what, int collective, uint64_t bytes);
TIERS_HIDDEN void tiers_trace_spawn_refused(void);
TIERS_HIDDEN void tiers_trace_comm_name(MPI_Comm comm, const char *name);
TIERS_HIDDEN void tiers_trace_send(int dest, int tag, MPI_Comm comm, int count,
                                   MPI_Datatype type);
TIERS_HIDDEN void tiers_trace_recv(const MPI_Status *st, MPI_Comm comm);
/* a receive as the call names it (MPI_Isendrecv): nothing for
 * MPI_PROC_NULL, MPI_ANY_SOURCE or MPI_ANY_TAG */
TIERS_HIDDEN void tiers_trace_recv_named(int source, int tag, MPI_Comm comm, int count,
                                         MPI_Datatype type);
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
TIERS_HIDDEN void tiers_trace_comm_idup(MPI_Comm parent, MPI_Comm *newcomm, MPI_Request req);
/* the same for Fortran: the new communicator's Fortran handle, read when the request completes */
TIERS_HIDDEN void tiers_trace_fcomm_idup(MPI_Comm parent, MPI_Fint *newcomm, MPI_Request req);
TIERS_HIDDEN int64_t tiers_trace_clock(void);
TIERS_HIDDEN void tiers_trace_after_init(int provided, int func, int64_t t_enter);
TIERS_HIDDEN void tiers_trace_before_finalize(void);
TIERS_HIDDEN void tiers_trace_after_finalize(int func, int began);
TIERS_HIDDEN void tiers_trace_at_abort(void);
TIERS_HIDDEN uint64_t tiers_trace_type_size(MPI_Datatype t);
TIERS_HIDDEN uint64_t tiers_trace_sum(const int *a, MPI_Comm comm);
TIERS_HIDDEN int tiers_trace_comm_size(MPI_Comm comm);
/* Alltoallw: sum of counts[i] x size of types[i] over the communicator */
TIERS_HIDDEN uint64_t tiers_trace_sumw(const int *counts, const MPI_Datatype *types,
                                       MPI_Comm comm);
/* Neighbourhood collectives on a process topology communicator: the bytes
 * to all destinations (out = 1) or from all sources (out = 0), block j being
 * count x type, counts[j] x type (counts given) or counts[j] x types[j]
 * (types given); MPI_PROC_NULL neighbours carry nothing.  nbr_xfer records
 * one TIERS_XFER_NBR transfer per destination (its world rank, its bytes). */
TIERS_HIDDEN uint64_t tiers_trace_nbr_bytes(MPI_Comm comm, int out, int count,
                                            MPI_Datatype type, const int *counts,
                                            const MPI_Datatype *types);
TIERS_HIDDEN void tiers_trace_nbr_xfer(MPI_Comm comm, int count, MPI_Datatype type,
                                       const int *counts, const MPI_Datatype *types);
/* the same blocks for a persistent one (after tiers_trace_pcoll_init of its
 * request): recorded at each MPI_Start(all) */
TIERS_HIDDEN void tiers_trace_pcoll_nbr(MPI_Request req, MPI_Comm comm, int count,
                                        MPI_Datatype type, const int *counts,
                                        const MPI_Datatype *types);
/* Matched probes: MPI_Mprobe/Improbe keep the message's communicator,
 * MPI_Mrecv/Imrecv take it back (MPI_COMM_NULL: unknown) */
TIERS_HIDDEN void tiers_trace_message(MPI_Message msg, MPI_Comm comm);
TIERS_HIDDEN MPI_Comm tiers_trace_message_comm(MPI_Message msg);
/* Fortran datatype arrays (Alltoallw, Neighbor_alltoallw): the C handles of
 * the first n (which = 0: the communicator's size, 1: its destinations,
 * 2: its sources), malloc'd (tiers_trace_ffree frees), NULL on failure */
TIERS_HIDDEN MPI_Datatype *tiers_trace_ftypes(const MPI_Fint *f, MPI_Comm comm, int which);
TIERS_HIDDEN void tiers_trace_ffree(void *p);
TIERS_HIDDEN int tiers_trace_comm_rank(MPI_Comm comm);

/* Fortran support (the mpi_*_ entry points of wrappers.c).
 * tiers_trace_freal: the Fortran library's entry point pmpi_NAME_ (or its
 *   other manglings), looked up once and cached in *slot; NULL if absent.
 * tiers_trace_fbuf: a Fortran buffer address with MPI_IN_PLACE and
 *   MPI_BOTTOM (Fortran common blocks) turned into the C constants.
 * tiers_trace_fstatus_ignore: whether st is Fortran's MPI_STATUS_IGNORE.
 * tiers_trace_freqs_save: tiers_trace_reqs_save for Fortran handles and
 *   statuses (MPI_STATUSES_IGNORE replaced by a local array, returned).
 * tiers_trace_freqs_done: tiers_trace_reqs_done with 1-based indices. */
TIERS_HIDDEN void *tiers_trace_freal(void **slot, const char *name);
TIERS_HIDDEN const void *tiers_trace_fbuf(const void *p);
/* tiers_trace_fstring: a Fortran CHARACTER argument (len bytes, blank
 * padded) as a C string in dst (cap bytes), trailing blanks dropped. */
TIERS_HIDDEN void tiers_trace_fstring(char *dst, size_t cap, const char *src, size_t len);
TIERS_HIDDEN int tiers_trace_fstatus_ignore(const MPI_Fint *st);
TIERS_HIDDEN MPI_Fint *tiers_trace_freqs_save(tiers_reqsave_t *sv, int count, const MPI_Fint *req,
                                               MPI_Fint *st);
TIERS_HIDDEN void tiers_trace_freqs_done(tiers_reqsave_t *sv, int nidx, const MPI_Fint *idx);

/* Names of the wrapped functions, indexed by the TIERS_FN_ ids of wrappers.c. */
extern TIERS_HIDDEN const char *const tiers_trace_fn_names[];
extern TIERS_HIDDEN const int tiers_trace_fn_count;

#endif
