/*
 * Synchronous-mode sends, plain MPI: an MPI_Ssend (and MPI_Issend,
 * MPI_Ssend_init) must not complete before the matching receive has
 * started.  Ranks pair up (0-1, 2-3, ...): in each case the odd rank
 * sleeps LATE seconds before it posts its receive, and the even rank
 * measures with MPI_Wtime how long its synchronous send took, which must
 * be at least most of LATE.  A standard MPI_Send of a small message must
 * not wait.  Payloads are checked.  Last, a cancelled receive large
 * enough to have asked its sender to write straight into its buffer:
 * MPI_Cancel succeeds, and the message sent afterwards goes to the next
 * receive, not into the cancelled buffer.  Rank 0 prints "checks N failed F".
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "tiers_check.h"

#define LATE 0.3       /* the receiver's delay, seconds */
#define MIN_WAIT 0.2   /* a synchronous send must have waited at least this */
#define MAX_STD 0.2    /* a standard small send returns well before the delay ends */

static int rank, size;

static void pause_s(double s)
{
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void fill(unsigned char *b, size_t n, int seed)
{
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(i * 7 + (size_t)seed);
}

static int same(const unsigned char *b, size_t n, int seed)
{
  for (size_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)(i * 7 + (size_t)seed))
      return 0;
  return 1;
}

static unsigned char sbuf[300000], rbuf[300000];

/* kind: 0 MPI_Ssend, 1 MPI_Issend + MPI_Test while waiting, 2 MPI_Ssend_init,
 * 3 MPI_Send (standard: must not wait) */
static void late_receiver(int kind, size_t n, int tag, int wildcard)
{
  int even = rank % 2 == 0, peer = even ? rank + 1 : rank - 1;
  /* every rank joins the barrier, the one without a partner (an odd
   * number of ranks) too, before it leaves */
  MPI_Barrier(MPI_COMM_WORLD);
  if (peer >= size)
    return;
  if (even) {
    fill(sbuf, n, tag);
    double t0 = MPI_Wtime(), took;
    if (kind == 0) {
      MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    } else if (kind == 1) {
      MPI_Request rq;
      int flag = 0, early = 0;
      MPI_Issend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq);
      while (MPI_Wtime() - t0 < MIN_WAIT / 2) {
        MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
        if (flag) {
          early = 1;
          break;
        }
      }
      CHECK(!early, "MPI_Issend of %zu B completed a test before the receive was posted", n);
      if (!early)
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
    } else if (kind == 2) {
      MPI_Request rq;
      MPI_Ssend_init(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq);
      MPI_Start(&rq);
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
      MPI_Request_free(&rq);
    } else {
      MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    }
    took = MPI_Wtime() - t0;
    if (kind == 3)
      CHECK(took < MAX_STD, "standard MPI_Send of %zu B waited %.3f s for a late receiver", n,
            took);
    else
      CHECK(took >= MIN_WAIT, "synchronous send (kind %d) of %zu B returned after %.3f s, "
            "before the receiver (%.1f s late) posted its receive", kind, n, took, LATE);
  } else {
    pause_s(LATE);
    MPI_Status st;
    memset(rbuf, 0, n);
    MPI_Recv(rbuf, (int)n, MPI_BYTE, wildcard ? MPI_ANY_SOURCE : peer,
             wildcard ? MPI_ANY_TAG : tag, MPI_COMM_WORLD, &st);
    int got = -1;
    MPI_Get_count(&st, MPI_BYTE, &got);
    CHECK(got == (int)n && st.MPI_SOURCE == peer && st.MPI_TAG == tag && same(rbuf, n, tag),
          "kind %d: %d of %zu B from %d tag %d", kind, got, n, st.MPI_SOURCE, st.MPI_TAG);
  }
}

/* The receive is posted first (the receiver says so with a standard send):
 * the synchronous send completes, with the right payload. */
static void early_receiver(size_t n, int tag)
{
  int even = rank % 2 == 0, peer = even ? rank + 1 : rank - 1;
  if (peer >= size)
    return;
  int token = 0;
  if (even) {
    fill(sbuf, n, tag);
    MPI_Recv(&token, 1, MPI_INT, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    CHECK(token == 1, "ready token");
  } else {
    MPI_Request rq;
    MPI_Status st;
    memset(rbuf, 0, n);
    MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq);
    token = 1;
    MPI_Send(&token, 1, MPI_INT, peer, 99, MPI_COMM_WORLD);
    MPI_Wait(&rq, &st);
    int got = -1;
    MPI_Get_count(&st, MPI_BYTE, &got);
    CHECK(got == (int)n && same(rbuf, n, tag), "posted first: %d of %zu B", got, n);
  }
}

/* Many synchronous sends in a row to a receiver that takes them in
 * reverse tag order: each completes only once taken, and all arrive. */
static void reversed(int count)
{
  int even = rank % 2 == 0, peer = even ? rank + 1 : rank - 1;
  if (peer >= size)
    return;
  if (even) {
    MPI_Request rq[64];
    int v[64];
    for (int i = 0; i < count; i++) {
      v[i] = 1000 + i;
      MPI_Issend(&v[i], 1, MPI_INT, peer, i, MPI_COMM_WORLD, &rq[i]);
    }
    MPI_Waitall(count, rq, MPI_STATUSES_IGNORE);
  } else {
    for (int i = count - 1; i >= 0; i--) {
      int x = -1;
      MPI_Recv(&x, 1, MPI_INT, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CHECK(x == 1000 + i, "reversed: tag %d got %d", i, x);
    }
  }
}

/* A receive of n bytes (large: it asks the sender for a remote write) is
 * cancelled before anything is sent; then the message comes. */
static void cancel_asked(size_t n, int tag)
{
  int even = rank % 2 == 0, peer = even ? rank + 1 : rank - 1;
  if (peer >= size)
    return;
  int token = 0;
  if (even) {
    fill(sbuf, n, tag);
    MPI_Recv(&token, 1, MPI_INT, peer, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
  } else {
    static unsigned char cbuf[300000];
    MPI_Request rq;
    MPI_Status st;
    int cancelled = 0;
    memset(cbuf, 0, n);
    memset(rbuf, 0, n);
    MPI_Irecv(cbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq);
    MPI_Cancel(&rq);
    MPI_Wait(&rq, &st);
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "cancel of a %zu B receive posted before its message did not succeed", n);
    token = 1;
    MPI_Send(&token, 1, MPI_INT, peer, 98, MPI_COMM_WORLD);
    MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
    int untouched = 1, got = -1;
    for (size_t i = 0; i < n; i++)
      untouched &= cbuf[i] == 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    CHECK(untouched && got == (int)n && same(rbuf, n, tag),
          "after the cancel: %d of %zu B, cancelled buffer %s", got, n,
          untouched ? "untouched" : "written");
  }
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  late_receiver(0, 8, 1, 0);        /* one cache line in the FIFO */
  late_receiver(0, 1000, 2, 1);     /* several lines, wildcard receive */
  late_receiver(1, 8, 3, 0);        /* MPI_Issend, tested while waiting */
  late_receiver(2, 64, 4, 0);       /* persistent MPI_Ssend_init */
  late_receiver(0, 200000, 5, 0);   /* longer than the FIFO: in chunks */
  late_receiver(3, 8, 6, 0);        /* standard send: no waiting */
  early_receiver(8, 7);             /* matched on arrival */
  early_receiver(65536, 8);         /* asked for: remote write */
  reversed(48);                     /* many unacknowledged at once */
  cancel_asked(65536, 9);           /* the receive had sent a send request */
  cancel_asked(8, 10);              /* a small one had not */
  tiers_check_summary();
  MPI_Finalize();
  return 0;
}
