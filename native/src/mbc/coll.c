/*
 * Collectives and statistics of libtiers-mbc, built on its own
 * point-to-point layer (internal negative tags, never matched by user
 * receives).
 */
#include <stdlib.h>
#include <string.h>

#include "mbc_internal.h"

int tiers_mbc_barrier(tiers_mbc_t m)
{
  TIERS_CALL(mbc_check(m));
  int rank, size;
  tiers_mbc_rank(m, &rank, &size);
  /* dissemination: in round k, signal rank + 2^k and wait for rank - 2^k.
   * Within one barrier the offsets differ mod size, so each pair carries at
   * most one message per barrier and per-pair order keeps barriers apart. */
  int round = 0;
  for (int k = 1; k < size; k <<= 1, round++) {
    tiers_mbc_request_t r[2];
    int tag = MBC_TAG_BARRIER - round;
    TIERS_CALL(mbc_irecv_internal(m, NULL, 0, (rank - k + size) % size, tag, &r[0]));
    TIERS_CALL(mbc_isend_internal(m, NULL, 0, (rank + k) % size, tag, &r[1]));
    TIERS_CALL(tiers_mbc_waitall(m, 2, r, NULL));
  }
  return TIERS_OK;
}

static size_t type_size(int type)
{
  switch (type) {
  case TIERS_MBC_INT32: return 4;
  case TIERS_MBC_INT64: return 8;
  case TIERS_MBC_DOUBLE: return 8;
  default: return 0;
  }
}

#define COMBINE(T)                                                  \
  do {                                                              \
    T *a = acc;                                                     \
    const T *b = in;                                                \
    for (int i = 0; i < count; i++) {                               \
      if (op == TIERS_MBC_SUM)                                      \
        a[i] += b[i];                                               \
      else if (op == TIERS_MBC_MIN)                                 \
        a[i] = b[i] < a[i] ? b[i] : a[i];                           \
      else                                                          \
        a[i] = b[i] > a[i] ? b[i] : a[i];                           \
    }                                                               \
  } while (0)

static void combine(void *acc, const void *in, int count, int type, int op)
{
  if (type == TIERS_MBC_INT32)
    COMBINE(int32_t);
  else if (type == TIERS_MBC_INT64)
    COMBINE(int64_t);
  else
    COMBINE(double);
}

int tiers_mbc_allreduce(tiers_mbc_t m, const void *sendbuf, void *recvbuf, int count, int type,
                        int op)
{
  TIERS_CALL(mbc_check(m));
  size_t es = type_size(type);
  if (!es)
    TIERS_ERROR(TIERS_ERR_ARG, "unknown element type %d", type);
  if (op != TIERS_MBC_SUM && op != TIERS_MBC_MIN && op != TIERS_MBC_MAX)
    TIERS_ERROR(TIERS_ERR_ARG, "unknown reduction operation %d", op);
  if (count < 0)
    TIERS_ERROR(TIERS_ERR_ARG, "negative count %d", count);
  if (count > 0 && (!sendbuf || !recvbuf))
    TIERS_ERROR(TIERS_ERR_ARG, "NULL buffer");
  int rank, size;
  tiers_mbc_rank(m, &rank, &size);
  size_t bytes = es * (size_t)count;
  if (rank != 0) {
    tiers_mbc_request_t r[2];
    TIERS_CALL(mbc_irecv_internal(m, recvbuf, bytes, 0, MBC_TAG_BCAST, &r[0]));
    /* the send buffer may be the receive buffer: send a copy */
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy)
      TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory in allreduce");
    if (bytes)
      memcpy(copy, sendbuf, bytes);
    int rc = mbc_isend_internal(m, copy, bytes, 0, MBC_TAG_REDUCE, &r[1]);
    if (rc == TIERS_OK)
      rc = tiers_mbc_waitall(m, 2, r, NULL);
    else
      tiers_mbc_waitall(m, 1, r, NULL);
    free(copy);
    return rc;
  }
  /* rank 0: gather every contribution (receives posted first, so they can
   * be written directly), combine in rank order, send the result back */
  unsigned char *all = malloc(bytes * (size_t)size + 1);
  tiers_mbc_request_t *rq = calloc((size_t)size, sizeof *rq);
  if (!all || !rq) {
    free(all);
    free(rq);
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory in allreduce");
  }
  int rc = TIERS_OK;
  for (int p = 1; p < size && rc == TIERS_OK; p++)
    rc = mbc_irecv_internal(m, all + bytes * (size_t)p, bytes, p, MBC_TAG_REDUCE, &rq[p]);
  if (rc == TIERS_OK)
    rc = tiers_mbc_waitall(m, size, rq, NULL);
  if (rc == TIERS_OK) {
    if (bytes)
      memcpy(all, sendbuf, bytes);
    for (int p = 1; p < size; p++)
      combine(all, all + bytes * (size_t)p, count, type, op);
    for (int p = 1; p < size && rc == TIERS_OK; p++)
      rc = mbc_isend_internal(m, all, bytes, p, MBC_TAG_BCAST, &rq[p]);
    if (rc == TIERS_OK)
      rc = tiers_mbc_waitall(m, size, rq, NULL);
    if (rc == TIERS_OK && bytes)
      memcpy(recvbuf, all, bytes);
  }
  free(all);
  free(rq);
  return rc;
}

int tiers_mbc_stats(tiers_mbc_t m, int scope, tiers_mbc_stats_t *st)
{
  TIERS_CALL(tiers_mbc_rank(m, NULL, NULL)); /* NULL or destroyed handle */
  if (!st)
    TIERS_ERROR(TIERS_ERR_ARG, "stats pointer is NULL");
  if (scope != TIERS_MBC_LOCAL && scope != TIERS_MBC_GLOBAL)
    TIERS_ERROR(TIERS_ERR_ARG, "scope must be TIERS_MBC_LOCAL or TIERS_MBC_GLOBAL, not %d", scope);
  mbc_local_stats(m, st);
  if (scope == TIERS_MBC_GLOBAL) {
    /* the counters are the leading uint64_t fields, up to elapsed_s */
    enum { N = offsetof(tiers_mbc_stats_t, elapsed_s) / sizeof(uint64_t) };
    uint64_t sum[N];
    double el;
    if (MPI_Allreduce(st, sum, N, MPI_UINT64_T, MPI_SUM, mbc_comm(m)) != MPI_SUCCESS ||
        MPI_Allreduce(&st->elapsed_s, &el, 1, MPI_DOUBLE, MPI_MAX, mbc_comm(m)) != MPI_SUCCESS)
      TIERS_ERROR(TIERS_ERR_MPI, "MPI_Allreduce of the statistics failed");
    memcpy(st, sum, sizeof sum);
    st->elapsed_s = el;
  }
  st->data_rate_Bps = st->elapsed_s > 0 ? (double)st->bytes_sent / st->elapsed_s : 0;
  st->msg_rate_per_s = st->elapsed_s > 0 ? (double)st->msgs_sent / st->elapsed_s : 0;
  st->direct_share = st->bytes_sent ? (double)st->bytes_direct / (double)st->bytes_sent : 0;
  return TIERS_OK;
}
