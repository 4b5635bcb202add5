/*
 * A reference streaming bandwidth, written from the published method of the
 * OSU micro-benchmarks' osu_bw: two ranks; for each size, a barrier, then
 * `skip` untimed and `iters` timed windows; in a window rank 0 posts 64
 * MPI_Isend and waits for them, rank 1 posts 64 MPI_Irecv and waits, then
 * answers with a 4-byte acknowledgement that rank 0 receives.  Bandwidth =
 * size x 64 x iters / the timed loop's time, in MB/s (10^6 bytes).  Loop
 * counts as osu_bw: 100 + 10 windows up to 8 KiB, 20 + 2 above.
 *
 *   mpirun -n 2 ref_bw SIZE...      prints "SIZE MB/s" per size
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2 || argc < 2) {
    if (rank == 0)
      fprintf(stderr, "ref_bw: error: run on 2 ranks with one or more sizes\n");
    MPI_Finalize();
    return 2;
  }
  long max = 0;
  for (int i = 1; i < argc; i++)
    if (atol(argv[i]) > max)
      max = atol(argv[i]);
  char *sbuf = malloc((size_t)max + 4), *rbuf = malloc((size_t)max + 4);
  if (!sbuf || !rbuf)
    MPI_Abort(MPI_COMM_WORLD, 1);
  memset(sbuf, 'a', (size_t)max + 4);
  memset(rbuf, 'b', (size_t)max + 4);
  MPI_Request req[WINDOW];
  char ack[4] = {0};
  for (int i = 1; i < argc; i++) {
    int size = atoi(argv[i]);
    long iters = size > 8192 ? 20 : 100, skip = size > 8192 ? 2 : 10;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = 0;
    for (long k = 0; k < iters + skip; k++) {
      if (k == skip)
        t0 = MPI_Wtime();
      if (rank == 0) {
        for (int w = 0; w < WINDOW; w++)
          MPI_Isend(sbuf, size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        for (int w = 0; w < WINDOW; w++)
          MPI_Irecv(rbuf, size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
      }
    }
    double dt = MPI_Wtime() - t0;
    if (rank == 0)
      printf("%d %.2f\n", size, (double)size * WINDOW * (double)iters / dt / 1e6);
  }
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return 0;
}
