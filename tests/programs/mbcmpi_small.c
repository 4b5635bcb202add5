/* Small messages under libtiers-mbc-mpi (tests/test_mbc_mpi.py): the cases
 * where the library's fast send and fast receive (native/src/mbcmpi/
 * mbc_fast.c) must step aside for the general path, each checked against
 * what MPI's rules say must arrive.  Ranks pair up (0-1, 2-3, ...; an odd
 * last rank only joins the collectives).  Prints "FAIL ..." per mismatch
 * and, on rank 0, "checks N failed F" over all ranks; exit 1 on a failure.
 * The sizes and tags of every message follow from (rank, tag), so each
 * receive knows what it must get. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define TIERS_CHECK_WITH_LINE
#include "tiers_check.h"

static int rank, size, peer, even;

static unsigned char pat(int src, int tag, size_t i)
{
  return (unsigned char)(src * 31 + tag * 7 + i * 13 + 1);
}

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

static void send(const void *b, int n, int tag)
{
  MPI_Send(b, n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
}

static int count_of(MPI_Status *st)
{
  int n = -1;
  MPI_Get_count(st, MPI_BYTE, &n);
  return n;
}

/* ping-pong at every size up to 70 B (one FIFO line holds 32) and around
 * the fast send's largest (4 KiB): data, source, tag and count */
static void test_sizes(void)
{
  enum { CAP = 4200 };
  static unsigned char s[CAP], r[CAP];
  for (int k = 0; k <= 73; k++) {
    int n = k <= 70 ? k : k == 71 ? 1024 : k == 72 ? 4096 : 4097, tag = 100 + k;
    fill(s, (size_t)n, rank, tag);
    memset(r, 0xee, sizeof r);
    MPI_Status st;
    if (even) {
      send(s, n, tag);
      MPI_Recv(r, CAP, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
    } else {
      MPI_Recv(r, CAP, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
      send(s, n, tag);
    }
    CHECK(same(r, (size_t)n, peer, tag) && r[n] == 0xee, "data of %d bytes", n);
    CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == tag && count_of(&st) == n,
          "status of %d bytes: source %d tag %d count %d", n, st.MPI_SOURCE, st.MPI_TAG,
          count_of(&st));
  }
}

/* a small send behind a queued large one to the same rank does not
 * overtake it (non-overtaking order, same tag) */
static void test_behind_large(void)
{
  enum { BIG = 200000 };
  unsigned char *big = malloc(BIG), *rb = malloc(BIG), s[16], r[16];
  if (even) {
    MPI_Request q;
    fill(big, BIG, rank, 5);
    MPI_Isend(big, BIG, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &q);
    for (int k = 0; k < 3; k++) {
      fill(s, sizeof s, rank, 6 + k);
      send(s, (int)sizeof s, 5);
    }
    MPI_Wait(&q, MPI_STATUS_IGNORE);
  } else {
    MPI_Status st;
    MPI_Recv(rb, BIG, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st);
    CHECK(count_of(&st) == BIG && same(rb, BIG, peer, 5), "large message first");
    for (int k = 0; k < 3; k++) {
      MPI_Recv(r, sizeof r, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st);
      CHECK(count_of(&st) == 16 && same(r, 16, peer, 6 + k), "small message %d in order", k);
    }
  }
  free(big);
  free(rb);
}

/* a receive posted earlier takes the first message, not a later blocking
 * receive that matches it too */
static void test_posted_first(void)
{
  unsigned char s[8], a[8], b[8];
  if (even) {
    MPI_Barrier(MPI_COMM_WORLD);
    fill(s, 8, rank, 20);
    send(s, 8, 9);
    fill(s, 8, rank, 21);
    send(s, 8, 9);
  } else {
    MPI_Request q;
    MPI_Status st;
    MPI_Irecv(a, 8, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &q);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Recv(b, 8, MPI_BYTE, peer, 9, MPI_COMM_WORLD, &st);
    CHECK(same(b, 8, peer, 21), "the blocking receive got the second message");
    MPI_Wait(&q, &st);
    CHECK(same(a, 8, peer, 20) && st.MPI_TAG == 9, "the posted receive got the first");
  }
}

/* a message of another tag at the head of the FIFO: buffered, then found
 * by the later receive; ANY_TAG takes the buffered one before the one that
 * arrives in the FIFO meanwhile */
static void test_other_tag_first(void)
{
  unsigned char s[24], r[24], go = 1;
  if (even) {
    for (int t = 1; t <= 3; t++) {
      if (t == 3)
        MPI_Recv(&go, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      fill(s, 24, rank, t);
      send(s, 24, t);
    }
  } else {
    MPI_Status st;
    MPI_Recv(r, 24, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &st);
    CHECK(same(r, 24, peer, 2) && st.MPI_TAG == 2, "tag 2 past tag 1");
    send(&go, 1, 4);
    usleep(50000); /* no MPI call: tag 3 lands in the FIFO, tag 1 stays buffered */
    MPI_Recv(r, 24, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    CHECK(same(r, 24, peer, 1) && st.MPI_TAG == 1, "ANY_TAG: tag 1, buffered, first");
    MPI_Recv(r, 24, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    CHECK(same(r, 24, peer, 3) && st.MPI_TAG == 3, "ANY_TAG: then tag 3");
  }
}

/* a message longer than the receive buffer: MPI_ERR_TRUNCATE, the buffer
 * holds its first bytes and nothing past them */
static void test_truncate(void)
{
  unsigned char s[40], r[24];
  if (even) {
    fill(s, 40, rank, 30);
    send(s, 40, 30);
  } else {
    MPI_Status st;
    memset(r, 0xee, sizeof r);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Recv(r, 16, MPI_BYTE, peer, 30, MPI_COMM_WORLD, &st);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "truncation reported (class %d)", cls);
    CHECK(same(r, 16, peer, 30) && r[16] == 0xee, "truncated data");
  }
}

/* receives posted after their messages arrived, non-blocking sends that
 * complete at once, and requests still in flight, completed together:
 * each status belongs to its own request */
static void test_window(void)
{
  enum { W = 64 };
  unsigned char s[W][48], r[W][48];
  MPI_Request q[W + 1];
  MPI_Status st[W + 1];
  int n = 0;
  if (even) {
    for (int k = 0; k < W; k++) {
      fill(s[k], (size_t)(k % 49), rank, 40 + k);
      MPI_Isend(s[k], k % 49, MPI_BYTE, peer, 40 + k, MPI_COMM_WORLD, &q[n++]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Waitall(n, q, st);
    CHECK(q[0] == MPI_REQUEST_NULL && q[W - 1] == MPI_REQUEST_NULL, "sends freed");
  } else {
    MPI_Barrier(MPI_COMM_WORLD); /* the first half has arrived (or is on its way) */
    for (int k = W - 1; k >= 0; k--) /* reverse order: tags pick their messages */
      MPI_Irecv(r[k], 48, MPI_BYTE, peer, 40 + k, MPI_COMM_WORLD, &q[n++]);
    int flag = 0, idx = -1;
    MPI_Testany(n, q, &idx, &flag, &st[W]);
    if (flag && idx != MPI_UNDEFINED)
      CHECK(st[W].MPI_TAG == 40 + (W - 1 - idx) && count_of(&st[W]) == (W - 1 - idx) % 49,
            "Testany status");
    MPI_Waitall(n, q, st);
    for (int j = 0; j < W; j++) {
      int k = W - 1 - j;
      if (j == idx)
        continue; /* completed by the Testany */
      CHECK(st[j].MPI_SOURCE == peer && st[j].MPI_TAG == 40 + k && count_of(&st[j]) == k % 49,
            "window status %d: tag %d count %d", j, st[j].MPI_TAG, count_of(&st[j]));
    }
    for (int k = 0; k < W; k++)
      CHECK(same(r[k], (size_t)(k % 49), peer, 40 + k), "window data %d", k);
  }
  /* two messages back to back after a blocking receive: the second is
   * often in the FIFO already when its receive starts (it then completes
   * as it starts); a cancel either fails (the receive completes with the
   * message) or succeeds, and then the message is still there */
  unsigned char one[4] = {1, 2, 3, 4}, two[4] = {5, 6, 7, 8}, got[4] = {0};
  if (even) {
    MPI_Recv(got, 4, MPI_BYTE, peer, 49, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    send(one, 4, 50);
    send(two, 4, 51);
  } else {
    MPI_Request rq;
    MPI_Status s1;
    int cancelled = 1;
    send(got, 4, 49);
    MPI_Recv(got, 4, MPI_BYTE, peer, 50, MPI_COMM_WORLD, &s1);
    CHECK(memcmp(got, one, 4) == 0 && count_of(&s1) == 4, "first of two");
    memset(got, 0, 4);
    MPI_Irecv(got, 4, MPI_BYTE, peer, 51, MPI_COMM_WORLD, &rq);
    MPI_Cancel(&rq);
    MPI_Wait(&rq, &s1);
    MPI_Test_cancelled(&s1, &cancelled);
    if (cancelled) {
      CHECK(got[0] == 0, "a cancelled receive leaves its buffer alone");
      MPI_Recv(got, 4, MPI_BYTE, peer, 51, MPI_COMM_WORLD, &s1);
    }
    CHECK(memcmp(got, two, 4) == 0 && count_of(&s1) == 4 && s1.MPI_TAG == 51,
          "second of two (cancelled first: %d)", cancelled);
  }
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  even = rank % 2 == 0;
  peer = even ? rank + 1 : rank - 1;
  if (peer < size) {
    test_sizes();
    test_behind_large();
    test_posted_first();
    test_other_tag_first();
    test_truncate();
    test_window();
  } else { /* an odd last rank: the barriers of the tests */
    for (int k = 0; k < 2; k++)
      MPI_Barrier(MPI_COMM_WORLD);
  }
  tiers_check_summary();
  MPI_Finalize();
  return tiers_failed ? 1 : 0;
}
