/* Point-to-point semantics under libtiers-mbc-mpi (tests/test_mbc_mpi.py).
 * Plain MPI: every check compares what arrived with what was sent and
 * prints "FAIL <what>" on a mismatch; rank 0 prints "checks N failed F"
 * with the totals of all ranks; the exit status is 1 when one failed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define TIERS_CHECK_WITH_LINE
#include "tiers_check.h"

static int rank, size;

static unsigned char pat(int src, int tag, size_t i) { return (unsigned char)(src * 31 + tag * 7 + i * 13); }

static void fill(unsigned char *b, size_t n, int src, int tag)
{
  for (size_t i = 0; i < n; i++)
    b[i] = pat(src, tag, i);
}

static int same(const unsigned char *b, size_t n, int src, int tag)
{
  for (size_t i = 0; i < n; i++)
    if (b[i] != pat(src, tag, i))
      return 0;
  return 1;
}

/* blocking ring at several sizes, status and MPI_Get_count */
static void test_ring(void)
{
  const size_t sizes[] = {0, 1, 33, 4096, 70000, 1 << 20};
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char *s = malloc(n + 1), *r = malloc(n + 1);
    fill(s, n, rank, (int)k);
    memset(r, 0xee, n + 1);
    MPI_Status st;
    if (rank % 2 == 0) {
      MPI_Send(s, (int)n, MPI_BYTE, next, (int)k, MPI_COMM_WORLD);
      MPI_Recv(r, (int)n, MPI_BYTE, prev, (int)k, MPI_COMM_WORLD, &st);
    } else {
      MPI_Recv(r, (int)n, MPI_BYTE, prev, (int)k, MPI_COMM_WORLD, &st);
      MPI_Send(s, (int)n, MPI_BYTE, next, (int)k, MPI_COMM_WORLD);
    }
    int cnt = -1;
    MPI_Get_count(&st, MPI_BYTE, &cnt);
    CHECK(same(r, n, prev, (int)k), "ring data of %zu bytes", n);
    CHECK(r[n] == 0xee, "ring wrote past %zu bytes", n);
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == (int)k && cnt == (int)n,
          "ring status src %d tag %d count %d for %zu", st.MPI_SOURCE, st.MPI_TAG, cnt, n);
    free(s);
    free(r);
  }
}

/* non-overtaking: 200 messages 0 -> 1 of one tag arrive in order; a later
 * tag can be received first */
static void test_order(void)
{
  if (rank == 0) {
    MPI_Request rq[200];
    int vals[200];
    for (int i = 0; i < 200; i++) {
      vals[i] = i;
      MPI_Isend(&vals[i], 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &rq[i]);
    }
    MPI_Waitall(200, rq, MPI_STATUSES_IGNORE);
    int a = 111, b = 222;
    MPI_Send(&a, 1, MPI_INT, 1, 1, MPI_COMM_WORLD);
    MPI_Send(&b, 1, MPI_INT, 1, 2, MPI_COMM_WORLD);
  } else if (rank == 1) {
    int inorder = 1;
    for (int i = 0; i < 200; i++) {
      int v = -1;
      MPI_Recv(&v, 1, MPI_INT, (i % 2) ? MPI_ANY_SOURCE : 0, (i % 3) ? MPI_ANY_TAG : 5,
               MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      inorder &= v == i;
    }
    CHECK(inorder, "200 messages of one source and tag out of order");
    int a = 0, b = 0;
    MPI_Recv(&b, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(&a, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(a == 111 && b == 222, "tag selection: a %d b %d", a, b);
  }
}

/* every rank sends its rank to 0, which receives with MPI_ANY_SOURCE */
static void test_anysource(void)
{
  if (rank == 0) {
    int seen = 0;
    for (int i = 1; i < size; i++) {
      int v = -1;
      MPI_Status st;
      MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &st);
      CHECK(v == st.MPI_SOURCE && st.MPI_TAG == 77, "any-source status %d for %d", st.MPI_SOURCE, v);
      seen |= 1 << v;
    }
    CHECK(seen == ((1 << size) - 2), "any-source senders %x", seen);
  } else {
    MPI_Send(&rank, 1, MPI_INT, 0, 77, MPI_COMM_WORLD);
  }
}

/* the send modes, Sendrecv and Sendrecv_replace */
static void test_modes(void)
{
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int bufsize = 4 * (MPI_BSEND_OVERHEAD + 64);
  void *attached = malloc((size_t)bufsize);
  MPI_Buffer_attach(attached, bufsize);
  int v[4] = {rank, rank + 100, rank + 200, rank + 300}, r[4] = {-1, -1, -1, -1};
  MPI_Request rq[8];
  MPI_Irecv(&r[0], 1, MPI_INT, prev, 10, MPI_COMM_WORLD, &rq[0]);
  MPI_Irecv(&r[1], 1, MPI_INT, prev, 11, MPI_COMM_WORLD, &rq[1]);
  MPI_Irecv(&r[2], 1, MPI_INT, prev, 12, MPI_COMM_WORLD, &rq[2]);
  MPI_Irecv(&r[3], 1, MPI_INT, prev, 13, MPI_COMM_WORLD, &rq[3]);
  MPI_Barrier(MPI_COMM_WORLD); /* receives posted: Rsend is allowed */
  MPI_Bsend(&v[0], 1, MPI_INT, next, 10, MPI_COMM_WORLD);
  MPI_Rsend(&v[1], 1, MPI_INT, next, 11, MPI_COMM_WORLD);
  MPI_Issend(&v[2], 1, MPI_INT, next, 12, MPI_COMM_WORLD, &rq[4]);
  MPI_Ibsend(&v[3], 1, MPI_INT, next, 13, MPI_COMM_WORLD, &rq[5]);
  MPI_Waitall(6, rq, MPI_STATUSES_IGNORE);
  CHECK(r[0] == prev && r[1] == prev + 100 && r[2] == prev + 200 && r[3] == prev + 300,
        "send modes %d %d %d %d", r[0], r[1], r[2], r[3]);
  int s1 = rank * 10, g1 = -1;
  MPI_Request self;
  MPI_Isend(&s1, 1, MPI_INT, 0, 14, MPI_COMM_SELF, &self);
  MPI_Recv(&g1, 1, MPI_INT, 0, 14, MPI_COMM_SELF, MPI_STATUS_IGNORE);
  MPI_Wait(&self, MPI_STATUS_IGNORE);
  if (rank % 2 == 0) {
    MPI_Ssend(&s1, 1, MPI_INT, next, 15, MPI_COMM_WORLD);
    MPI_Recv(&g1, 1, MPI_INT, prev, 15, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(&g1, 1, MPI_INT, prev, 15, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Ssend(&s1, 1, MPI_INT, next, 15, MPI_COMM_WORLD);
  }
  CHECK(g1 == prev * 10, "self send and ssend %d", g1);
  MPI_Status st;
  int out = rank * 3, in = -1;
  MPI_Sendrecv(&out, 1, MPI_INT, next, 20, &in, 1, MPI_INT, MPI_ANY_SOURCE, 20, MPI_COMM_WORLD, &st);
  CHECK(in == prev * 3 && st.MPI_SOURCE == prev, "sendrecv %d from %d", in, st.MPI_SOURCE);
  double d[3] = {rank + 0.5, rank + 1.5, rank + 2.5};
  MPI_Sendrecv_replace(d, 3, MPI_DOUBLE, next, 21, prev, 21, MPI_COMM_WORLD, &st);
  CHECK(d[0] == prev + 0.5 && d[2] == prev + 2.5, "sendrecv_replace %g %g", d[0], d[2]);
  void *det;
  int detsize;
  MPI_Buffer_detach(&det, &detsize);
  free(attached);
}

/* Probe/Iprobe then a receive of exactly the probed size; Get_count */
static void test_probe(void)
{
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int n = 3 + rank;
  int *s = malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++)
    s[i] = rank * 1000 + i;
  MPI_Request rq;
  MPI_Isend(s, n, MPI_INT, next, 30, MPI_COMM_WORLD, &rq);
  MPI_Status st;
  MPI_Probe(MPI_ANY_SOURCE, 30, MPI_COMM_WORLD, &st);
  int cnt = -1, elems = -1, bytes = -1;
  MPI_Get_count(&st, MPI_INT, &cnt);
  MPI_Get_elements(&st, MPI_INT, &elems);
  MPI_Get_count(&st, MPI_BYTE, &bytes);
  CHECK(st.MPI_SOURCE == prev && cnt == 3 + prev && elems == cnt && bytes == 4 * cnt,
        "probe src %d count %d elems %d bytes %d", st.MPI_SOURCE, cnt, elems, bytes);
  int *r = malloc(sizeof(int) * (size_t)cnt);
  MPI_Recv(r, cnt, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CHECK(r[cnt - 1] == prev * 1000 + cnt - 1, "probed message %d", r[cnt - 1]);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
  int flag = 1;
  MPI_Iprobe(MPI_ANY_SOURCE, 31, MPI_COMM_WORLD, &flag, &st);
  CHECK(flag == 0, "iprobe found a message never sent");
  free(s);
  free(r);
}

/* derived datatypes: a strided vector against contiguous doubles, and an
 * indexed type whose blocks are in reverse memory order */
static void test_datatypes(void)
{
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  MPI_Datatype vec, rev;
  MPI_Type_vector(50, 1, 2, MPI_DOUBLE, &vec);
  MPI_Type_commit(&vec);
  int lens[2] = {1, 1}, displs[2] = {1, 0};
  MPI_Type_indexed(2, lens, displs, MPI_INT, &rev);
  MPI_Type_commit(&rev);
  double a[100], b[50], c[100];
  for (int i = 0; i < 100; i++) {
    a[i] = rank * 1000 + i;
    c[i] = -1;
  }
  MPI_Request rq[2];
  MPI_Irecv(b, 50, MPI_DOUBLE, prev, 40, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(a, 1, vec, next, 40, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  int ok = 1;
  for (int i = 0; i < 50; i++)
    ok &= b[i] == prev * 1000 + 2 * i;
  CHECK(ok, "vector send into contiguous receive");
  MPI_Status st;
  MPI_Sendrecv(b, 50, MPI_DOUBLE, next, 41, c, 1, vec, prev, 41, MPI_COMM_WORLD, &st);
  ok = 1;
  for (int i = 0; i < 100; i++)
    ok &= c[i] == (i % 2 ? -1 : (rank + size - 2) % size * 1000 + i);
  int cnt = -1;
  MPI_Get_count(&st, vec, &cnt);
  CHECK(ok && cnt == 1, "contiguous send into vector receive (count %d)", cnt);
  int pair[2] = {rank, rank + 50}, got[2] = {-1, -1};
  MPI_Sendrecv(pair, 1, rev, next, 42, got, 2, MPI_INT, prev, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CHECK(got[0] == prev + 50 && got[1] == prev, "indexed type order %d %d", got[0], got[1]);
  MPI_Type_free(&vec);
  MPI_Type_free(&rev);
}

/* persistent requests, started several times */
static void test_persistent(void)
{
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int out = 0, in = -1;
  MPI_Request rq[2];
  MPI_Recv_init(&in, 1, MPI_INT, prev, 50, MPI_COMM_WORLD, &rq[0]);
  MPI_Send_init(&out, 1, MPI_INT, next, 50, MPI_COMM_WORLD, &rq[1]);
  int ok = 1;
  for (int it = 0; it < 5; it++) {
    out = rank * 100 + it;
    if (it % 2)
      MPI_Startall(2, rq);
    else {
      MPI_Start(&rq[0]);
      MPI_Start(&rq[1]);
    }
    MPI_Status sts[2];
    MPI_Waitall(2, rq, sts);
    ok &= in == prev * 100 + it && sts[0].MPI_SOURCE == prev;
    ok &= rq[0] != MPI_REQUEST_NULL && rq[1] != MPI_REQUEST_NULL;
  }
  CHECK(ok, "persistent requests");
  int flag = 0;
  MPI_Test(&rq[0], &flag, MPI_STATUS_IGNORE); /* inactive: completes at once */
  CHECK(flag == 1, "test of an inactive persistent request");
  MPI_Request_free(&rq[0]);
  MPI_Request_free(&rq[1]);
  CHECK(rq[0] == MPI_REQUEST_NULL, "request_free sets the handle to null");
}

/* communicators: split, dup (messages never cross communicators), cart */
static void test_comms(void)
{
  MPI_Comm half, dup, cart;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
  int hr, hs;
  MPI_Comm_rank(half, &hr);
  MPI_Comm_size(half, &hs);
  CHECK(hs == (size + 1 - rank % 2) / 2, "split size %d", hs);
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half);
  int want = 0;
  for (int i = rank % 2; i < size; i += 2)
    want += i;
  CHECK(sum == want, "allreduce on split %d vs %d", sum, want);
  if (hs > 1) {
    int v = rank, g = -1;
    MPI_Status st;
    MPI_Sendrecv(&v, 1, MPI_INT, (hr + 1) % hs, 60, &g, 1, MPI_INT, MPI_ANY_SOURCE, 60, half, &st);
    /* key -rank: half rank k is the k-th largest world rank of the parity */
    int from = (hr + hs - 1) % hs, top = (size - 1) - ((size - 1) % 2 != rank % 2);
    CHECK(g == top - 2 * from && st.MPI_SOURCE == from,
          "split ring got %d from %d", g, st.MPI_SOURCE);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (rank == 0) {
    int a = 1, b = 2;
    MPI_Send(&a, 1, MPI_INT, 1, 61, MPI_COMM_WORLD);
    MPI_Send(&b, 1, MPI_INT, 1, 61, dup);
  } else if (rank == 1) {
    int a = 0, b = 0;
    MPI_Recv(&b, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, MPI_STATUS_IGNORE);
    MPI_Recv(&a, 1, MPI_INT, 0, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(a == 1 && b == 2, "dup keeps messages apart: %d %d", a, b);
  }
  int dims[1] = {size}, periods[1] = {1};
  MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);
  int lo, hi, v = rank * 7, g = -1;
  MPI_Cart_shift(cart, 0, 1, &lo, &hi);
  MPI_Sendrecv(&v, 1, MPI_INT, hi, 62, &g, 1, MPI_INT, lo, 62, cart, MPI_STATUS_IGNORE);
  CHECK(g == lo * 7, "cart shift %d", g);
  MPI_Comm_free(&cart);
  MPI_Comm_free(&dup);
  MPI_Comm_free(&half);
  CHECK(half == MPI_COMM_NULL, "comm_free sets null");
}

/* progress on one communicator while waiting on another: rank 1 sends
 * 1 MiB on a duplicate (more than a FIFO holds) and then a word on
 * MPI_COMM_WORLD; rank 0 posted the big receive first and waits on the
 * word, which MPI's progress rule lets the program expect to arrive */
static void test_cross_progress(void)
{
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  enum { BIG = 1 << 20 };
  if (rank <= 1) {
    unsigned char *b = malloc(BIG);
    int w = 0;
    if (rank == 0) {
      MPI_Request rq;
      memset(b, 0, BIG);
      MPI_Irecv(b, BIG, MPI_BYTE, 1, 3, dup, &rq);
      MPI_Recv(&w, 1, MPI_INT, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
      CHECK(w == 99 && same(b, BIG, 1, 3), "cross-communicator progress");
    } else {
      fill(b, BIG, 1, 3);
      w = 99;
      MPI_Send(b, BIG, MPI_BYTE, 0, 3, dup);
      MPI_Send(&w, 1, MPI_INT, 0, 4, MPI_COMM_WORLD);
    }
    free(b);
  }
  MPI_Comm_free(&dup);
}

/* an intercommunicator between the even and the odd ranks (passed to
 * MPI), and the intracommunicator merged from it (carried) */
static void test_intercomm(void)
{
  MPI_Comm half, inter, merged;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 55, &inter);
  int hr, rsize;
  MPI_Comm_rank(half, &hr);
  MPI_Comm_remote_size(inter, &rsize);
  if (hr < rsize) {
    int v = rank, g = -1;
    MPI_Status st;
    MPI_Sendrecv(&v, 1, MPI_INT, hr, 56, &g, 1, MPI_INT, hr, 56, inter, &st);
    int partner = rank % 2 ? rank - 1 : rank + 1;
    CHECK(g == partner && st.MPI_SOURCE == hr, "intercomm exchange %d", g);
  }
  MPI_Intercomm_merge(inter, rank % 2, &merged);
  int mr, ms, sum = -1;
  MPI_Comm_rank(merged, &mr);
  MPI_Comm_size(merged, &ms);
  int v = mr, g = -1;
  MPI_Sendrecv(&v, 1, MPI_INT, (mr + 1) % ms, 57, &g, 1, MPI_INT, MPI_ANY_SOURCE, 57, merged,
               MPI_STATUS_IGNORE);
  CHECK(ms == size && g == (mr + ms - 1) % ms, "merged ring %d", g);
  MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, merged);
  CHECK(sum == size * (size - 1) / 2, "merged allreduce %d", sum);
  MPI_Comm_free(&merged);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
}

/* a real MPI request (Ibarrier) and ours in one array; Waitany, Testsome */
static void test_mixed(void)
{
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int v = rank, g = -1, h = -1;
  MPI_Request rq[4];
  MPI_Irecv(&g, 1, MPI_INT, prev, 70, MPI_COMM_WORLD, &rq[0]);
  MPI_Ibarrier(MPI_COMM_WORLD, &rq[1]);
  MPI_Isend(&v, 1, MPI_INT, next, 70, MPI_COMM_WORLD, &rq[2]);
  rq[3] = MPI_REQUEST_NULL;
  MPI_Status sts[4];
  MPI_Waitall(4, rq, sts);
  CHECK(g == prev && sts[0].MPI_SOURCE == prev && rq[0] == MPI_REQUEST_NULL &&
            rq[1] == MPI_REQUEST_NULL && rq[2] == MPI_REQUEST_NULL,
        "mixed waitall");
  MPI_Irecv(&h, 1, MPI_INT, prev, 71, MPI_COMM_WORLD, &rq[0]);
  MPI_Ibarrier(MPI_COMM_WORLD, &rq[1]);
  MPI_Isend(&v, 1, MPI_INT, next, 71, MPI_COMM_WORLD, &rq[2]);
  int done = 0, seen[3] = {0, 0, 0};
  while (done < 3) {
    int idx = -1;
    MPI_Waitany(3, rq, &idx, sts);
    if (idx >= 0 && idx < 3)
      seen[idx]++;
    done++;
  }
  CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && h == prev, "waitany");
  int idx = 0, flag = 0;
  MPI_Testany(3, rq, &idx, &flag, MPI_STATUS_IGNORE);
  CHECK(flag == 1 && idx == MPI_UNDEFINED, "testany on null requests");
  MPI_Irecv(&h, 1, MPI_INT, prev, 72, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(&v, 1, MPI_INT, next, 72, MPI_COMM_WORLD, &rq[1]);
  int left = 2, out, ids[2];
  while (left > 0) {
    MPI_Testsome(2, rq, &out, ids, sts);
    if (out > 0)
      left -= out;
  }
  CHECK(h == prev, "testsome");
}

/* cancel of a receive nothing matches; truncation reported; PROC_NULL */
static void test_cancel_trunc_null(void)
{
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int v = -1;
  MPI_Request rq;
  MPI_Irecv(&v, 1, MPI_INT, prev, 999, MPI_COMM_WORLD, &rq);
  MPI_Cancel(&rq);
  MPI_Status st;
  MPI_Wait(&rq, &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  CHECK(cancelled && rq == MPI_REQUEST_NULL && v == -1, "cancelled receive");

  MPI_Comm ret;
  MPI_Comm_dup(MPI_COMM_WORLD, &ret);
  MPI_Comm_set_errhandler(ret, MPI_ERRORS_RETURN);
  int big[4] = {1, 2, 3, 4}, small[2] = {0, 0};
  MPI_Request sr;
  MPI_Isend(big, 4, MPI_INT, next, 80, ret, &sr);
  int rc = MPI_Recv(small, 2, MPI_INT, prev, 80, ret, &st);
  int eclass = -1;
  MPI_Error_class(rc, &eclass);
  CHECK(eclass == MPI_ERR_TRUNCATE && small[0] == 1 && small[1] == 2, "truncation rc %d", rc);
  MPI_Wait(&sr, MPI_STATUS_IGNORE);
  MPI_Comm_free(&ret);

  int x = 5;
  MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
  MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
  int cnt = -1;
  MPI_Get_count(&st, MPI_INT, &cnt);
  CHECK(x == 5 && st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && cnt == 0,
        "proc_null receive");
}

/* sends still in flight across collectives, and collectives' results */
static void test_collectives(void)
{
  int n = 64, next = (rank + 1) % size, prev = (rank + size - 1) % size;
  enum { LEN = 4096 };
  unsigned char *s = malloc((size_t)n * LEN), *r = malloc((size_t)n * LEN);
  MPI_Request *rq = malloc(sizeof *rq * (size_t)n);
  for (int i = 0; i < n; i++) {
    fill(s + (size_t)i * LEN, LEN, rank, i);
    MPI_Isend(s + (size_t)i * LEN, LEN, MPI_BYTE, next, 90 + i, MPI_COMM_WORLD, &rq[i]);
  }
  /* 256 KiB in flight to each peer, more than its FIFO: the peer drains it
   * while it waits in the collectives below */
  double x = rank + 1, sum = 0;
  MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == size * (size + 1) / 2.0, "allreduce %g", sum);
  int root_val = rank == size - 1 ? 4242 : 0;
  MPI_Bcast(&root_val, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
  CHECK(root_val == 4242, "bcast %d", root_val);
  /* one broadcast, different type maps of one signature on different ranks */
  MPI_Datatype four;
  MPI_Type_contiguous(4, MPI_INT, &four);
  MPI_Type_commit(&four);
  int bv[4] = {0, 0, 0, 0};
  if (rank == 0)
    bv[0] = 5, bv[1] = 6, bv[2] = 7, bv[3] = 8;
  if (rank % 2)
    MPI_Bcast(bv, 1, four, 0, MPI_COMM_WORLD);
  else
    MPI_Bcast(bv, 4, MPI_INT, 0, MPI_COMM_WORLD);
  CHECK(bv[0] == 5 && bv[3] == 8, "bcast with mixed type maps %d %d", bv[0], bv[3]);
  MPI_Type_free(&four);
  int mx = rank * 3;
  MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(mx == (size - 1) * 3, "allreduce in place max %d", mx);
  MPI_Barrier(MPI_COMM_WORLD);
  int *all = malloc(sizeof(int) * (size_t)size);
  MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  int ok = 1;
  for (int i = 0; i < size; i++)
    ok &= all[i] == i;
  CHECK(ok, "allgather");
  for (int i = n - 1; i >= 0; i--)
    MPI_Recv(r + (size_t)i * LEN, LEN, MPI_BYTE, prev, 90 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
  ok = 1;
  for (int i = 0; i < n; i++)
    ok &= same(r + (size_t)i * LEN, LEN, prev, i);
  CHECK(ok, "messages across collectives");
  /* a freed send still completes */
  MPI_Request fr;
  int fv = rank + 7, fg = -1;
  MPI_Isend(&fv, 1, MPI_INT, next, 95, MPI_COMM_WORLD, &fr);
  MPI_Request_free(&fr);
  MPI_Recv(&fg, 1, MPI_INT, prev, 95, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CHECK(fg == prev + 7 && fr == MPI_REQUEST_NULL, "freed send %d", fg);
  free(s);
  free(r);
  free(rq);
  free(all);
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  test_ring();
  test_order();
  test_anysource();
  test_modes();
  test_probe();
  test_datatypes();
  test_persistent();
  test_comms();
  test_intercomm();
  test_cross_progress();
  test_mixed();
  test_cancel_trunc_null();
  test_collectives();
  tiers_check_summary();
  MPI_Finalize();
  return tiers_failed ? 1 : 0;
}
