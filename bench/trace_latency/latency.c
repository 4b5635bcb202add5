/* bench/trace_latency: one-way latency by the OSU micro-benchmarks' method
 * (osu_latency): ranks 0 and 1 exchange SIZE-byte messages with blocking
 * MPI_Send/MPI_Recv; SKIP warm-up round trips, then ITERS timed ones;
 * latency = time / (2 ITERS).  Prints "latency_ns SIZE VALUE" on rank 0.
 *
 *   latency [ITERS] [SKIP] [SIZE] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  long iters = argc > 1 ? atol(argv[1]) : 100000;
  long skip = argc > 2 ? atol(argv[2]) : 10000;
  int size = argc > 3 ? atoi(argv[3]) : 8;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char *buf = calloc((size_t)size + 1, 1);
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
  }
  double t = MPI_Wtime() - t0;
  if (rank == 0)
    printf("latency_ns %d %.1f\n", size, t * 1e9 / (2.0 * (double)iters));
  free(buf);
  MPI_Finalize();
  return 0;
}
