/*
 * A reference small-message latency, written from the published method of
 * the OSU micro-benchmarks' osu_latency: two ranks; for each size, a
 * barrier, then `skip` untimed and `iters` timed round trips of blocking
 * MPI_Send / MPI_Recv (rank 0 sends first, rank 1 answers); the one-way
 * latency is the timed loop's time / (2 iters).  Loop counts as osu_latency:
 * 10000 + 100 up to 8 KiB, 1000 + 10 above.
 *
 *   mpirun -n 2 ref_latency SIZE...      prints "SIZE LATENCY_US" per size
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2 || argc < 2) {
    if (rank == 0)
      fprintf(stderr, "ref_latency: error: run on 2 ranks with one or more sizes\n");
    MPI_Finalize();
    return 2;
  }
  long max = 0;
  for (int i = 1; i < argc; i++)
    if (atol(argv[i]) > max)
      max = atol(argv[i]);
  char *sbuf = malloc((size_t)max + 1), *rbuf = malloc((size_t)max + 1);
  if (!sbuf || !rbuf)
    MPI_Abort(MPI_COMM_WORLD, 1);
  memset(sbuf, 'a', (size_t)max + 1);
  memset(rbuf, 'b', (size_t)max + 1);
  for (int i = 1; i < argc; i++) {
    int size = atoi(argv[i]);
    long iters = size > 8192 ? 1000 : 10000, skip = size > 8192 ? 10 : 100;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = 0;
    for (long k = 0; k < iters + skip; k++) {
      if (k == skip)
        t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(sbuf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(rbuf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(rbuf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(sbuf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      }
    }
    double us = (MPI_Wtime() - t0) * 1e6 / (2.0 * (double)iters);
    if (rank == 0)
      printf("%d %.4f\n", size, us);
  }
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return 0;
}
