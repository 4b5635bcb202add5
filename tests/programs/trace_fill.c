/* A traced test program that makes a large trace: ping-pong of 8-byte
 * messages between ranks 0 and 1 (other ranks only join the barriers),
 * with a barrier every 100 round trips.  Each message carries a running
 * value that both ranks add up, so a run that went right prints
 *
 *   trace_fill: ITERS round trips, sum SUM
 *
 * on rank 0 (SUM = ITERS (ITERS + 1)); exit status 0.
 * Usage: trace_fill ITERS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long iters = argc > 1 ? atol(argv[1]) : 1000;
  long v = 0, sum = 0;
  for (long i = 1; i <= iters && size >= 2; i++) {
    if (rank == 0) {
      v = i;
      MPI_Send(&v, 1, MPI_LONG, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(&v, 1, MPI_LONG, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      sum += v;
    } else if (rank == 1) {
      MPI_Recv(&v, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      v *= 2;
      MPI_Send(&v, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD);
    }
    if (i % 100 == 0)
      MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0)
    printf("trace_fill: %ld round trips, sum %ld\n", iters, sum);
  MPI_Finalize();
  return 0;
}
