/*
 * osu_style: a tiny independent ping-pong and streaming-bandwidth program,
 * written the way osu_latency and osu_bw measure (blocking MPI_Send /
 * MPI_Recv round trips timed with MPI_Wtime; windows of 64 MPI_Isend /
 * MPI_Irecv closed by MPI_Waitall and a 4-byte acknowledgement).  It shares
 * no code with tiers-probe-net and is the anchor of bench/net_vs_hpcc next to
 * hpcc.  Run on 2 ranks:  osu_style SIZE...   Prints one line per size:
 *   SIZE  one-way-latency-us  streaming-MB/s
 * Built with -DTEST_LOOP, the ping-pong receives with MPI_Irecv and a loop
 * of MPI_Test, as tiers-probe-net must (its waits have deadlines): the
 * difference between the two builds is the price of a bounded wait.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void recv_from(char *buf, int n, int peer)
{
#ifdef TEST_LOOP
  MPI_Request q;
  int done = 0;
  MPI_Irecv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &q);
  while (!done)
    MPI_Test(&q, &done, MPI_STATUS_IGNORE);
#else
  MPI_Recv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
#endif
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  enum { WINDOW = 64 };
  long max = 1;
  for (int i = 1; i < argc; i++)
    if (atol(argv[i]) > max)
      max = atol(argv[i]);
  char *s = malloc((size_t)max), *r = malloc((size_t)max), ack[4] = {0};
  for (long i = 0; i < max; i++)
    s[i] = r[i] = (char)i;
  MPI_Request req[WINDOW];
  for (int a = 1; a < argc; a++) {
    int n = atoi(argv[a]);
    int large = n > 8192;
    int iters = large ? 1000 : 10000, skip = large ? 10 : 100;
    double t0 = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + skip; i++) {
      if (i == skip)
        t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(s, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        recv_from(r, n, 1);
      } else if (rank == 1) {
        recv_from(r, n, 0);
        MPI_Send(s, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      }
    }
    double lat = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
    int bw_iters = large ? 20 : 100, bw_skip = large ? 2 : 10;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < bw_iters + bw_skip; i++) {
      if (i == bw_skip)
        t0 = MPI_Wtime();
      if (rank == 0) {
        for (int w = 0; w < WINDOW; w++)
          MPI_Isend(s, n, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        MPI_Recv(ack, 4, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        for (int w = 0; w < WINDOW; w++)
          MPI_Irecv(r, n, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        MPI_Send(ack, 4, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
      }
    }
    double bw = (double)n * WINDOW * bw_iters / (MPI_Wtime() - t0) / 1e6;
    if (rank == 0)
      printf("%d %.4f %.2f\n", n, lat, bw);
  }
  free(s);
  free(r);
  MPI_Finalize();
  return 0;
}
