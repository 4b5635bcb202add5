/* Long messages, checked byte by byte (tests/test_mbc_mpi.py): every rank
 * sends to the next rank of a ring and receives from the previous one, a
 * window of messages of each size, in four phases per round:
 *   posted   the receives are posted (and a barrier passed) before the
 *            sends start: libtiers-mbc-mpi answers them by remote write,
 *            the longest half by each side (split copy)
 *   late     the sends start (and a barrier passes) before the receives
 *            are posted: the receiver copies them out of the send buffers
 *   vector   posted first into a strided datatype (packed, then unpacked)
 *   trunc    posted first with a receive buffer shorter than the message:
 *            MPI_ERR_TRUNCATE, the buffer filled up to its end, not beyond
 * Each message has its own pattern (sender, receiver, size, index, round);
 * the status (source, tag, MPI_Get_count) and the guard bytes after every
 * receive buffer are checked too.  Prints "checks N failed M".
 *
 *   mpirun -n P mbcmpi_large [ROUNDS [notrunc]]
 *
 * notrunc leaves the truncation phase out: Open MPI 4.1's own single-copy
 * path (CMA) writes past a receive buffer shorter than the message. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tiers_check.h"

enum { WINDOW = 6, GUARD = 64 };
static const int sizes[] = {20000, 65536, 100003, 262144, 1048579, 3 << 20};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

/* the first 10 failures of a rank say what went wrong, on stderr */
static void check(int ok, int rank, const char *what, int size, int i)
{
  if (!tiers_tally(ok) && tiers_failed <= 10)
    fprintf(stderr, "rank %d: %s wrong (size %d, message %d)\n", rank, what, size, i);
}

static unsigned char pat(int src, int dst, int size, int i, int round, size_t k)
{
  unsigned long v = (unsigned long)k * 2654435761u + (unsigned long)src * 40503u +
                    (unsigned long)dst * 9973u + (unsigned long)size * 31u +
                    (unsigned long)i * 131u + (unsigned long)round * 7919u;
  return (unsigned char)(v ^ (v >> 13) ^ (v >> 24));
}

static void fill(unsigned char *b, int src, int dst, int size, int i, int round)
{
  for (size_t k = 0; k < (size_t)size; k++)
    b[k] = pat(src, dst, size, i, round, k);
}

/* the first n bytes hold the pattern, the GUARD bytes after `cap` are 0xEE */
static int intact(const unsigned char *b, size_t n, size_t cap, int src, int dst, int size,
                  int i, int round)
{
  for (size_t k = 0; k < n; k++)
    if (b[k] != pat(src, dst, size, i, round, k))
      return 0;
  for (size_t k = cap; k < cap + GUARD; k++)
    if (b[k] != 0xEE)
      return 0;
  return 1;
}

static void status_ok(const MPI_Status *st, int rank, int src, int tag, int count, int size,
                      int i)
{
  int got = -1;
  MPI_Get_count(st, MPI_BYTE, &got);
  check(st->MPI_SOURCE == src && st->MPI_TAG == tag && got == count, rank, "status", size, i);
}

/* posted: receives first; late: sends first (a barrier between) */
static void window(int rank, int next, int prev, int size, int round, int posted)
{
  unsigned char *s[WINDOW], *r[WINDOW];
  MPI_Request sq[WINDOW], rq[WINDOW];
  MPI_Status st[WINDOW];
  int tag = posted ? 10 : 20;
  for (int i = 0; i < WINDOW; i++) {
    s[i] = malloc((size_t)size);
    r[i] = malloc((size_t)size + GUARD);
    fill(s[i], rank, next, size, i, round);
    memset(r[i], 0xEE, (size_t)size + GUARD);
  }
  if (posted) {
    for (int i = 0; i < WINDOW; i++)
      MPI_Irecv(r[i], size, MPI_BYTE, prev, tag, MPI_COMM_WORLD, &rq[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < WINDOW; i++)
      MPI_Isend(s[i], size, MPI_BYTE, next, tag, MPI_COMM_WORLD, &sq[i]);
  } else {
    for (int i = 0; i < WINDOW; i++)
      MPI_Isend(s[i], size, MPI_BYTE, next, tag, MPI_COMM_WORLD, &sq[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < WINDOW; i++)
      MPI_Irecv(r[i], size, MPI_BYTE, prev, tag, MPI_COMM_WORLD, &rq[i]);
  }
  MPI_Waitall(WINDOW, rq, st);
  MPI_Waitall(WINDOW, sq, MPI_STATUSES_IGNORE);
  for (int i = 0; i < WINDOW; i++) {
    check(intact(r[i], (size_t)size, (size_t)size, prev, rank, size, i, round), rank,
          posted ? "posted-first payload" : "send-first payload", size, i);
    status_ok(&st[i], rank, prev, tag, size, size, i);
    free(s[i]);
    free(r[i]);
  }
}

/* posted first into every other int of a buffer (MPI_Type_vector) */
static void vector(int rank, int next, int prev, int size, int round)
{
  int n = size / (int)sizeof(int);
  size_t bytes = (size_t)n * sizeof(int);
  MPI_Datatype v;
  MPI_Type_vector(n, 1, 2, MPI_INT, &v);
  MPI_Type_commit(&v);
  unsigned char *s = malloc(bytes), *r = malloc(2 * bytes + GUARD);
  fill(s, rank, next, size, 99, round);
  memset(r, 0xEE, 2 * bytes + GUARD);
  MPI_Request q;
  MPI_Status st;
  MPI_Irecv(r, 1, v, prev, 30, MPI_COMM_WORLD, &q);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Send(s, (int)bytes, MPI_BYTE, next, 30, MPI_COMM_WORLD);
  MPI_Wait(&q, &st);
  int ok = 1;
  for (int j = 0; j < n && ok; j++)
    for (size_t b = 0; b < sizeof(int); b++) {
      size_t k = (size_t)j * sizeof(int) + b;
      ok &= r[2 * k - b] == pat(prev, rank, size, 99, round, k) && /* element j at 2j ints */
            r[2 * k - b + sizeof(int)] == 0xEE;                    /* the gap after it */
    }
  check(ok, rank, "strided payload", size, 99);
  int got = -1;
  MPI_Get_count(&st, v, &got);
  check(st.MPI_SOURCE == prev && st.MPI_TAG == 30 && got == 1, rank, "strided status", size, 99);
  MPI_Type_free(&v);
  free(s);
  free(r);
}

/* posted first, the receive buffer holds only cap of the size bytes */
static void truncated(int rank, int next, int prev, int size, int cap, int round)
{
  unsigned char *s = malloc((size_t)size), *r = malloc((size_t)cap + GUARD);
  fill(s, rank, next, size, 77, round);
  memset(r, 0xEE, (size_t)cap + GUARD);
  MPI_Request q;
  MPI_Status st;
  MPI_Irecv(r, cap, MPI_BYTE, prev, 40, MPI_COMM_WORLD, &q);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Send(s, size, MPI_BYTE, next, 40, MPI_COMM_WORLD);
  int rc = MPI_Wait(&q, &st), cls = MPI_SUCCESS;
  MPI_Error_class(rc, &cls);
  check(cls == MPI_ERR_TRUNCATE, rank, "truncation error", size, 77);
  check(intact(r, (size_t)cap, (size_t)cap, prev, rank, size, 77, round), rank,
        "truncated payload", size, 77);
  free(s);
  free(r);
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, nproc;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nproc);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rounds = argc > 1 ? atoi(argv[1]) : 2;
  int with_trunc = !(argc > 2 && !strcmp(argv[2], "notrunc"));
  int next = (rank + 1) % nproc, prev = (rank + nproc - 1) % nproc;
  for (int round = 0; round < rounds; round++) {
    for (int k = 0; k < NSIZES; k++) {
      window(rank, next, prev, sizes[k], round, 1);
      window(rank, next, prev, sizes[k], round, 0);
    }
    vector(rank, next, prev, 262144, round);
    if (with_trunc) {
      truncated(rank, next, prev, 200000, 70001, round);
      truncated(rank, next, prev, 1 << 20, 300000, round);
    }
  }
  tiers_check_summary();
  MPI_Finalize();
  return tiers_failed != 0;
}
