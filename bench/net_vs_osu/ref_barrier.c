/*
 * A reference MPI_Barrier time, written from the published method of the
 * OSU micro-benchmarks' osu_barrier: `skip` + `iters` barriers, each one
 * timed on its own with MPI_Wtime, the times of the last `iters` summed;
 * each rank's time per barrier is that sum / iters, and the minimum, mean
 * and maximum over the ranks are reported (in us).
 *
 *   mpirun -n P ref_barrier [ITERS]     prints "P MIN_US AVG_US MAX_US"
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long iters = argc > 1 ? atol(argv[1]) : 1000, skip = iters / 10;
  if (iters < 1) {
    if (rank == 0)
      fprintf(stderr, "ref_barrier: error: ITERS must be positive\n");
    MPI_Finalize();
    return 2;
  }
  double timer = 0;
  for (long k = 0; k < skip + iters; k++) {
    double t0 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (k >= skip)
      timer += t;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double mine = timer * 1e6 / (double)iters, lo, hi, sum;
  MPI_Reduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%d %.4f %.4f %.4f\n", n, lo, sum / n, hi);
  MPI_Finalize();
  return 0;
}
