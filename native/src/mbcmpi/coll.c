/*
 * libtiers-mbc-mpi collectives.
 *
 * Every collective on a carried communicator is either
 *  - carried on the transport (libtiers-mbc's own barrier, allreduce and a
 *    binomial broadcast on internal tags), where the choice table below
 *    says so for its size, or
 *  - passed to MPI as its non-blocking form (MPI_Ibarrier, MPI_Iallreduce,
 *    ...) and waited on while the transport makes progress: a process in
 *    a collective keeps draining its FIFOs, so a peer blocked in a
 *    memory-based send to it cannot stall the collective.
 * The choice depends only on the collective and its size in bytes, the
 * same on every process, so all processes of a communicator take the same
 * path.  Collectives on intercommunicators (or with the library off) go
 * straight to the blocking MPI call.
 */
#include <stdlib.h>
#include <string.h>

#include "mbc_internal.h"
#include "mbcmpi.h"

/* The choice table, in one place: a collective is carried on the
 * transport when enabled and its payload (bytes per process) is at most
 * max_bytes.  The alternative is not MPI's blocking call but its
 * non-blocking form polled with transport progress (see above).
 *  - barrier: carried.  libtiers-mbc's dissemination barrier measured
 *    1.19x MPI_Barrier at 2 processes and 0.95x at 4 oversubscribed ones
 *    against the blocking call (docs/benchmarks.md, mbc_vs_mpi), and
 *    about half the time of the passed path (MPI_Ibarrier polled);
 *  - bcast up to 4 KiB and allreduce up to 512 B: carried; through this
 *    library carried took 0.01-0.3x (bcast) and 0.04-0.7x (allreduce) the
 *    time of the passed path at 8 B-4 KiB on 2 ranks, in one quick run of
 *    bench/mbc_vs_mpi/run on a busy 2-CPU machine (its "collectives"
 *    table; to be re-measured on a quiet one).  Allreduce is linear
 *    through rank 0 in libtiers-mbc, so it stays small.
 * Allreduce is carried only for MPI_INT/INT32/LONG/LONG_LONG/INT64/DOUBLE
 * with MPI_SUM/MIN/MAX (MPI requires the same datatype and op on every
 * process, so the choice agrees).
 * TIERS_MBC_MPI_COLL=mpi passes every collective to MPI. */
static const struct {
  int fn;
  size_t max_bytes;
} carry_table[] = {
    {F_Barrier, 0},
    {F_Bcast, 4096},
    {F_Allreduce, 512},
};
static const int carry_enabled[] = {
    1, /* barrier */
    1, /* bcast */
    1, /* allreduce */
};

static int coll_mode = -1; /* 0: table, 1: all to MPI, 2: all carried */

static int carry(int fn, size_t bytes)
{
  if (coll_mode < 0) {
    const char *s = getenv("TIERS_MBC_MPI_COLL");
    coll_mode = s && !strcmp(s, "mpi") ? 1 : s && !strcmp(s, "mbc") ? 2 : 0;
  }
  if (coll_mode == 1)
    return 0;
  for (size_t i = 0; i < sizeof carry_table / sizeof carry_table[0]; i++)
    if (carry_table[i].fn == fn)
      return coll_mode == 2 || (carry_enabled[i] && bytes <= carry_table[i].max_bytes);
  return 0;
}

#define PASS(name) (mbcmpi.passed[F_##name]++)

static int wait_coll(int rc, MPI_Request *req)
{
  if (rc != MPI_SUCCESS)
    return rc;
  return mbcmpi_wait_real(req, MPI_STATUS_IGNORE);
}

static void coll_fail(const char *fn)
{
  mbcmpi_fatal(fn, "collective on the transport failed");
}

/* ------------------------------------------------------------------ */

static int w_Barrier(MPI_Comm comm)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (!c)
    return REAL(Barrier)(comm);
  if (carry(F_Barrier, 0)) {
    CARRY(Barrier);
    mbcmpi.in_coll++;
    ENTER();
    int rc = tiers_mbc_barrier(c->mbc);
    LEAVE();
    mbcmpi.in_coll--;
    if (rc != TIERS_OK)
      coll_fail("MPI_Barrier");
    return MPI_SUCCESS;
  }
  PASS(Barrier);
  MPI_Request r;
  return wait_coll(PMPI_Ibarrier(comm, &r), &r);
}
EXPORT(Barrier)

static int type_bytes(MPI_Datatype t, int count, size_t *bytes)
{
  int size;
  if (count < 0 || PMPI_Type_size(t, &size) != MPI_SUCCESS)
    return -1;
  *bytes = (size_t)size * (size_t)count;
  return 0;
}

/* Binomial-tree broadcast of a contiguous buffer on internal tags. */
static int mbc_bcast(struct mbcmpi_ctx *c, void *buf, size_t bytes, int root)
{
  int n = c->size, me = (c->rank - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (me & mask) {
      tiers_mbc_request_t r;
      int src = (me - mask + root) % n;
      int rc = mbc_irecv_internal(c->mbc, buf, bytes, src, MBC_TAG_BCAST - 1, &r);
      if (rc == TIERS_OK)
        rc = tiers_mbc_wait(c->mbc, &r, NULL);
      if (rc != TIERS_OK)
        return rc;
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  tiers_mbc_request_t rs[32];
  int k = 0;
  for (; mask > 0; mask >>= 1)
    if (me + mask < n) {
      int dst = (me + mask + root) % n;
      int rc = mbc_isend_internal(c->mbc, buf, bytes, dst, MBC_TAG_BCAST - 1, &rs[k++]);
      if (rc != TIERS_OK)
        return rc;
    }
  return tiers_mbc_waitall(c->mbc, k, rs, NULL);
}

static int contiguous_named(MPI_Datatype t)
{
  int ni, na, nd, comb, size;
  MPI_Aint lb, extent;
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS || comb != MPI_COMBINER_NAMED)
    return 0;
  PMPI_Type_size(t, &size);
  PMPI_Type_get_extent(t, &lb, &extent);
  return lb == 0 && extent == size;
}

static int w_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (!c)
    return REAL(Bcast)(buf, count, type, root, comm);
  size_t bytes;
  /* the choice depends on the bytes only: the processes' type maps may
   * differ (only the type signatures must match), so a layout that is not
   * plain bytes goes through a packed copy */
  if (!type_bytes(type, count, &bytes) && root >= 0 && root < c->size && carry(F_Bcast, bytes)) {
    CARRY(Bcast);
    void *data = buf, *tmp = NULL;
    int psize = 0, pos = 0;
    if (!contiguous_named(type)) {
      PMPI_Pack_size(count, type, comm, &psize);
      tmp = malloc(psize > 0 ? (size_t)psize : 1);
      if (!tmp) {
        tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "out of memory");
        coll_fail("MPI_Bcast");
        return MPI_ERR_NO_MEM;
      }
      if (c->rank == root)
        PMPI_Pack(buf, count, type, tmp, psize, &pos, comm);
      data = tmp;
    }
    mbcmpi.in_coll++;
    ENTER();
    int rc = mbc_bcast(c, data, bytes, root);
    LEAVE();
    mbcmpi.in_coll--;
    if (rc != TIERS_OK)
      coll_fail("MPI_Bcast");
    if (tmp && c->rank != root) {
      pos = 0;
      PMPI_Unpack(tmp, psize, &pos, buf, count, type, comm);
    }
    free(tmp);
    return MPI_SUCCESS;
  }
  PASS(Bcast);
  MPI_Request r;
  return wait_coll(PMPI_Ibcast(buf, count, type, root, comm, &r), &r);
}
EXPORT(Bcast)

static int mbc_type_of(MPI_Datatype t)
{
  if (t == MPI_INT || t == MPI_INT32_T)
    return TIERS_MBC_INT32;
  if (t == MPI_LONG_LONG || t == MPI_INT64_T || (t == MPI_LONG && sizeof(long) == 8))
    return TIERS_MBC_INT64;
  if (t == MPI_DOUBLE)
    return TIERS_MBC_DOUBLE;
  return -1;
}

static int mbc_op_of(MPI_Op op)
{
  if (op == MPI_SUM)
    return TIERS_MBC_SUM;
  if (op == MPI_MIN)
    return TIERS_MBC_MIN;
  if (op == MPI_MAX)
    return TIERS_MBC_MAX;
  return -1;
}

static int w_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm)
{
  struct mbcmpi_ctx *c = mbcmpi_ctx_of(comm);
  if (!c)
    return REAL(Allreduce)(sbuf, rbuf, count, type, op, comm);
  size_t bytes;
  int mt = mbc_type_of(type), mo = mbc_op_of(op);
  if (mt >= 0 && mo >= 0 && !type_bytes(type, count, &bytes) && carry(F_Allreduce, bytes)) {
    CARRY(Allreduce);
    mbcmpi.in_coll++;
    ENTER();
    int rc = tiers_mbc_allreduce(c->mbc, sbuf == MPI_IN_PLACE ? rbuf : sbuf, rbuf, count, mt, mo);
    LEAVE();
    mbcmpi.in_coll--;
    if (rc != TIERS_OK)
      coll_fail("MPI_Allreduce");
    return MPI_SUCCESS;
  }
  PASS(Allreduce);
  MPI_Request r;
  return wait_coll(PMPI_Iallreduce(sbuf, rbuf, count, type, op, comm, &r), &r);
}
EXPORT(Allreduce)

/* The rest: always MPI's non-blocking form, waited on with progress. */

static int w_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op,
                    int root, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Reduce)(sbuf, rbuf, count, type, op, root, comm);
  PASS(Reduce);
  MPI_Request r;
  return wait_coll(PMPI_Ireduce(sbuf, rbuf, count, type, op, root, comm, &r), &r);
}
EXPORT(Reduce)

static int w_Gather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                    MPI_Datatype rtype, int root, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Gather)(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
  PASS(Gather);
  MPI_Request r;
  return wait_coll(PMPI_Igather(sbuf, scount, stype, rbuf, rcount, rtype, root, comm, &r), &r);
}
EXPORT(Gather)

static int w_Gatherv(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                     const int rcounts[], const int displs[], MPI_Datatype rtype, int root,
                     MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Gatherv)(sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm);
  PASS(Gatherv);
  MPI_Request r;
  return wait_coll(
      PMPI_Igatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm, &r), &r);
}
EXPORT(Gatherv)

static int w_Scatter(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                     MPI_Datatype rtype, int root, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Scatter)(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
  PASS(Scatter);
  MPI_Request r;
  return wait_coll(PMPI_Iscatter(sbuf, scount, stype, rbuf, rcount, rtype, root, comm, &r), &r);
}
EXPORT(Scatter)

static int w_Scatterv(const void *sbuf, const int scounts[], const int displs[],
                      MPI_Datatype stype, void *rbuf, int rcount, MPI_Datatype rtype, int root,
                      MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Scatterv)(sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm);
  PASS(Scatterv);
  MPI_Request r;
  return wait_coll(
      PMPI_Iscatterv(sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm, &r), &r);
}
EXPORT(Scatterv)

static int w_Allgather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                       MPI_Datatype rtype, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Allgather)(sbuf, scount, stype, rbuf, rcount, rtype, comm);
  PASS(Allgather);
  MPI_Request r;
  return wait_coll(PMPI_Iallgather(sbuf, scount, stype, rbuf, rcount, rtype, comm, &r), &r);
}
EXPORT(Allgather)

static int w_Allgatherv(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                        const int rcounts[], const int displs[], MPI_Datatype rtype,
                        MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Allgatherv)(sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm);
  PASS(Allgatherv);
  MPI_Request r;
  return wait_coll(
      PMPI_Iallgatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm, &r), &r);
}
EXPORT(Allgatherv)

static int w_Alltoall(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                      MPI_Datatype rtype, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Alltoall)(sbuf, scount, stype, rbuf, rcount, rtype, comm);
  PASS(Alltoall);
  MPI_Request r;
  return wait_coll(PMPI_Ialltoall(sbuf, scount, stype, rbuf, rcount, rtype, comm, &r), &r);
}
EXPORT(Alltoall)

static int w_Alltoallv(const void *sbuf, const int scounts[], const int sdispls[],
                       MPI_Datatype stype, void *rbuf, const int rcounts[], const int rdispls[],
                       MPI_Datatype rtype, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Alltoallv)(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm);
  PASS(Alltoallv);
  MPI_Request r;
  return wait_coll(PMPI_Ialltoallv(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype,
                                   comm, &r),
                   &r);
}
EXPORT(Alltoallv)

static int w_Alltoallw(const void *sbuf, const int scounts[], const int sdispls[],
                       const MPI_Datatype stypes[], void *rbuf, const int rcounts[],
                       const int rdispls[], const MPI_Datatype rtypes[], MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Alltoallw)(sbuf, scounts, sdispls, stypes, rbuf, rcounts, rdispls, rtypes, comm);
  PASS(Alltoallw);
  MPI_Request r;
  return wait_coll(PMPI_Ialltoallw(sbuf, scounts, sdispls, stypes, rbuf, rcounts, rdispls,
                                   rtypes, comm, &r),
                   &r);
}
EXPORT(Alltoallw)

static int w_Reduce_scatter(const void *sbuf, void *rbuf, const int rcounts[], MPI_Datatype type,
                            MPI_Op op, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Reduce_scatter)(sbuf, rbuf, rcounts, type, op, comm);
  PASS(Reduce_scatter);
  MPI_Request r;
  return wait_coll(PMPI_Ireduce_scatter(sbuf, rbuf, rcounts, type, op, comm, &r), &r);
}
EXPORT(Reduce_scatter)

static int w_Reduce_scatter_block(const void *sbuf, void *rbuf, int rcount, MPI_Datatype type,
                                  MPI_Op op, MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Reduce_scatter_block)(sbuf, rbuf, rcount, type, op, comm);
  PASS(Reduce_scatter_block);
  MPI_Request r;
  return wait_coll(PMPI_Ireduce_scatter_block(sbuf, rbuf, rcount, type, op, comm, &r), &r);
}
EXPORT(Reduce_scatter_block)

static int w_Scan(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Scan)(sbuf, rbuf, count, type, op, comm);
  PASS(Scan);
  MPI_Request r;
  return wait_coll(PMPI_Iscan(sbuf, rbuf, count, type, op, comm, &r), &r);
}
EXPORT(Scan)

static int w_Exscan(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op,
                    MPI_Comm comm)
{
  if (!mbcmpi_ctx_of(comm))
    return REAL(Exscan)(sbuf, rbuf, count, type, op, comm);
  PASS(Exscan);
  MPI_Request r;
  return wait_coll(PMPI_Iexscan(sbuf, rbuf, count, type, op, comm, &r), &r);
}
EXPORT(Exscan)
