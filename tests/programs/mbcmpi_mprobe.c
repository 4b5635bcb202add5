/*
 * Matched probes, plain MPI: MPI_Mprobe, MPI_Improbe, MPI_Mrecv and
 * MPI_Imrecv.  Ranks pair up (0-1, 2-3, ...); the even rank sends, the odd
 * one probes and receives.  Cases:
 *  1. order: 24 messages of mixed tags and sizes (0 B to 200 KB) matched
 *     with MPI_Mprobe(partner, MPI_ANY_TAG) arrive in the order sent, with
 *     the right tag, MPI_Get_count and payload;
 *  2. a matched message is off the matching queue: after MPI_Mprobe matched
 *     message A, an MPI_Recv of the same source and tag gets the next
 *     message B, and MPI_Mrecv still gets A;
 *  3. MPI_Improbe polled until a message matches, MPI_Imrecv + MPI_Test;
 *  4. a non-contiguous receive datatype (MPI_Type_vector) with MPI_Mrecv;
 *  5. truncation: MPI_Mrecv into a shorter buffer returns MPI_ERR_TRUNCATE
 *     (MPI_ERRORS_RETURN) with the first bytes delivered;
 *  6. communicators: MPI_Mprobe on MPI_COMM_WORLD does not match a message
 *     sent earlier on a duplicate with the same tag;
 *  7. MPI_PROC_NULL: MPI_MESSAGE_NO_PROC, an empty status, MPI_Mrecv and
 *     MPI_Imrecv on it;
 *  8. wildcards: every rank sends two tagged messages to rank 0, which
 *     takes them all with MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG), each
 *     exactly once, each source's in the order sent.
 * Rank 0 prints "checks N failed F".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tiers_check.h"

static int rank, size;

static void fill(int *b, int n, int seed)
{
  for (int i = 0; i < n; i++)
    b[i] = i * 31 + seed;
}

static int same(const int *b, int n, int seed)
{
  for (int i = 0; i < n; i++)
    if (b[i] != i * 31 + seed)
      return 0;
  return 1;
}

#define NORDER 24
static int order_len(int i) /* ints */
{
  static const int lens[] = {0, 1, 8, 100, 5000, 50000};
  return lens[i % 6];
}

static int buf[60000], rbuf[60000];

static void order_case(int partner, int sender)
{
  if (sender) {
    for (int i = 0; i < NORDER; i++) {
      fill(buf, order_len(i), 1000 * i);
      MPI_Send(buf, order_len(i), MPI_INT, partner, i % 3, MPI_COMM_WORLD);
    }
    return;
  }
  for (int i = 0; i < NORDER; i++) {
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status s;
    int n = -1;
    MPI_Mprobe(partner, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &s);
    MPI_Get_count(&s, MPI_INT, &n);
    CHECK(s.MPI_SOURCE == partner && s.MPI_TAG == i % 3 && n == order_len(i),
          "order %d: probe source %d tag %d count %d", i, s.MPI_SOURCE, s.MPI_TAG, n);
    memset(rbuf, 0xff, sizeof rbuf);
    MPI_Status r;
    MPI_Mrecv(rbuf, 60000, MPI_INT, &msg, &r);
    MPI_Get_count(&r, MPI_INT, &n);
    CHECK(msg == MPI_MESSAGE_NULL && r.MPI_SOURCE == partner && r.MPI_TAG == i % 3 &&
              n == order_len(i) && same(rbuf, n, 1000 * i),
          "order %d: received tag %d count %d", i, r.MPI_TAG, n);
  }
}

static void queue_case(int partner, int sender)
{
  int a[4], b[4];
  if (sender) {
    fill(a, 4, 11);
    fill(b, 4, 22);
    MPI_Send(a, 4, MPI_INT, partner, 5, MPI_COMM_WORLD);
    MPI_Send(b, 4, MPI_INT, partner, 5, MPI_COMM_WORLD);
    return;
  }
  MPI_Message msg;
  MPI_Mprobe(partner, 5, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE);
  MPI_Recv(b, 4, MPI_INT, partner, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Mrecv(a, 4, MPI_INT, &msg, MPI_STATUS_IGNORE);
  CHECK(same(a, 4, 11), "matched message: wrong payload");
  CHECK(same(b, 4, 22), "the receive after a matched probe took the matched message");
}

static void improbe_case(int partner, int sender)
{
  if (sender) {
    MPI_Barrier(MPI_COMM_WORLD); /* the receiver polls before anything is sent */
    fill(buf, 3000, 7);
    MPI_Send(buf, 3000, MPI_INT, partner, 9, MPI_COMM_WORLD);
    return;
  }
  int flag = 1;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status s;
  MPI_Improbe(partner, 9, MPI_COMM_WORLD, &flag, &msg, &s);
  CHECK(!flag, "MPI_Improbe matched before anything was sent");
  MPI_Barrier(MPI_COMM_WORLD);
  long polls = 0;
  while (!flag) {
    MPI_Improbe(MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &flag, &msg, &s);
    polls++;
  }
  int n = -1;
  MPI_Get_count(&s, MPI_INT, &n);
  CHECK(s.MPI_SOURCE == partner && s.MPI_TAG == 9 && n == 3000, "improbe: source %d count %d",
        s.MPI_SOURCE, n);
  MPI_Request req;
  memset(rbuf, 0, sizeof rbuf);
  MPI_Imrecv(rbuf, 3000, MPI_INT, &msg, &req);
  CHECK(msg == MPI_MESSAGE_NULL, "MPI_Imrecv left the message handle set");
  int done = 0;
  MPI_Status r;
  while (!done)
    MPI_Test(&req, &done, &r);
  MPI_Get_count(&r, MPI_INT, &n);
  CHECK(req == MPI_REQUEST_NULL && r.MPI_SOURCE == partner && r.MPI_TAG == 9 && n == 3000 &&
            same(rbuf, 3000, 7),
        "imrecv: source %d tag %d count %d", r.MPI_SOURCE, r.MPI_TAG, n);
}

static void vector_case(int partner, int sender)
{
  if (sender) {
    fill(buf, 8, 3);
    MPI_Send(buf, 8, MPI_INT, partner, 4, MPI_COMM_WORLD);
    return;
  }
  MPI_Datatype vec;
  MPI_Type_vector(8, 1, 2, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  MPI_Message msg;
  MPI_Status s;
  MPI_Mprobe(partner, 4, MPI_COMM_WORLD, &msg, &s);
  int out[16];
  for (int i = 0; i < 16; i++)
    out[i] = -1;
  MPI_Mrecv(out, 1, vec, &msg, &s);
  int ok = 1, n = -1;
  for (int i = 0; i < 16; i++)
    ok &= out[i] == (i % 2 ? -1 : (i / 2) * 31 + 3);
  MPI_Get_count(&s, MPI_INT, &n);
  CHECK(ok && n == 8, "vector receive: wrong layout or count %d", n);
  MPI_Type_free(&vec);
}

static void truncate_case(int partner, int sender)
{
  if (sender) {
    fill(buf, 100, 5);
    MPI_Send(buf, 100, MPI_INT, partner, 6, MPI_COMM_WORLD);
    return;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Message msg;
  MPI_Mprobe(partner, 6, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE);
  int small[10];
  MPI_Status s;
  int rc = MPI_Mrecv(small, 10, MPI_INT, &msg, &s), cls = MPI_SUCCESS;
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_TRUNCATE && same(small, 10, 5), "truncated MPI_Mrecv: class %d", cls);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void comm_case(int partner, int sender)
{
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int v;
  if (sender) {
    v = 111;
    MPI_Send(&v, 1, MPI_INT, partner, 3, dup);
    v = 222;
    MPI_Send(&v, 1, MPI_INT, partner, 3, MPI_COMM_WORLD);
  } else {
    MPI_Message msg;
    MPI_Mprobe(MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE);
    MPI_Mrecv(&v, 1, MPI_INT, &msg, MPI_STATUS_IGNORE);
    CHECK(v == 222, "MPI_Mprobe on MPI_COMM_WORLD matched the duplicate's message (%d)", v);
    MPI_Mprobe(partner, MPI_ANY_TAG, dup, &msg, MPI_STATUS_IGNORE);
    MPI_Mrecv(&v, 1, MPI_INT, &msg, MPI_STATUS_IGNORE);
    CHECK(v == 111, "the duplicate's message: %d", v);
  }
  MPI_Comm_free(&dup);
}

static void proc_null_case(void)
{
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status s;
  int n = -1, flag = 0;
  MPI_Mprobe(MPI_PROC_NULL, 1, MPI_COMM_WORLD, &msg, &s);
  MPI_Get_count(&s, MPI_INT, &n);
  CHECK(msg == MPI_MESSAGE_NO_PROC && s.MPI_SOURCE == MPI_PROC_NULL && s.MPI_TAG == MPI_ANY_TAG &&
            n == 0,
        "MPI_Mprobe(MPI_PROC_NULL): source %d tag %d count %d", s.MPI_SOURCE, s.MPI_TAG, n);
  int x = 42;
  s.MPI_SOURCE = 0;
  MPI_Mrecv(&x, 1, MPI_INT, &msg, &s);
  MPI_Get_count(&s, MPI_INT, &n);
  CHECK(msg == MPI_MESSAGE_NULL && s.MPI_SOURCE == MPI_PROC_NULL && n == 0 && x == 42,
        "MPI_Mrecv(MPI_MESSAGE_NO_PROC): source %d count %d", s.MPI_SOURCE, n);
  MPI_Improbe(MPI_PROC_NULL, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &s);
  CHECK(flag && msg == MPI_MESSAGE_NO_PROC, "MPI_Improbe(MPI_PROC_NULL): flag %d", flag);
  MPI_Request req;
  MPI_Imrecv(&x, 1, MPI_INT, &msg, &req);
  MPI_Wait(&req, &s);
  MPI_Get_count(&s, MPI_INT, &n);
  CHECK(s.MPI_SOURCE == MPI_PROC_NULL && n == 0 && x == 42,
        "MPI_Imrecv(MPI_MESSAGE_NO_PROC): source %d count %d", s.MPI_SOURCE, n);
}

static void wildcard_case(void)
{
  if (rank != 0) {
    int v[3] = {rank, 7, 0};
    MPI_Send(v, 3, MPI_INT, 0, 7, MPI_COMM_WORLD);
    v[1] = 8;
    MPI_Send(v, 2, MPI_INT, 0, 8, MPI_COMM_WORLD);
    return;
  }
  int *seen = calloc((size_t)size, sizeof *seen), bad = 0;
  for (int k = 0; k < 2 * (size - 1); k++) {
    MPI_Message msg;
    MPI_Status s;
    int n = -1, v[3] = {-1, -1, -1};
    MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &s);
    MPI_Get_count(&s, MPI_INT, &n);
    MPI_Mrecv(v, 3, MPI_INT, &msg, MPI_STATUS_IGNORE);
    int src = s.MPI_SOURCE, tag = s.MPI_TAG;
    if (src <= 0 || src >= size || v[0] != src || v[1] != tag || n != (tag == 7 ? 3 : 2) ||
        seen[src] != (tag == 7 ? 0 : 1)) {
      bad++;
      printf("FAIL rank 0: wildcard message %d: source %d tag %d count %d payload %d %d\n", k,
             src, tag, n, v[0], v[1]);
    } else {
      seen[src]++;
    }
  }
  CHECK(bad == 0, "wildcard matched probes");
  free(seen);
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int partner = rank ^ 1, sender = rank % 2 == 0;
  if (partner >= size) { /* an odd rank count: the last rank only takes part in the rest */
    partner = MPI_PROC_NULL;
  }
  if (partner != MPI_PROC_NULL) {
    order_case(partner, sender);
    queue_case(partner, sender);
  }
  if (partner != MPI_PROC_NULL) {
    improbe_case(partner, sender);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (partner != MPI_PROC_NULL) {
    vector_case(partner, sender);
    truncate_case(partner, sender);
  }
  if (partner != MPI_PROC_NULL) {
    comm_case(partner, sender);
  } else {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_free(&dup);
  }
  proc_null_case();
  MPI_Barrier(MPI_COMM_WORLD);
  wildcard_case();
  tiers_check_summary();
  MPI_Finalize();
  return 0;
}
