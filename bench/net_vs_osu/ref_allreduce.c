/*
 * A reference MPI_Allreduce time, written from the published method of the
 * OSU micro-benchmarks' osu_allreduce: for a message of B bytes (floats,
 * MPI_SUM), a barrier, then `skip` + `iters` calls, each timed on its own
 * with MPI_Wtime and followed by an untimed MPI_Barrier, the times of the
 * last `iters` summed; each rank's latency is its sum / iters, and the
 * minimum, mean and maximum over the ranks are reported (in us).
 *
 *   mpirun -n P ref_allreduce [BYTES [ITERS]]   prints "P MIN_US AVG_US MAX_US"
 *
 * BYTES defaults to 8 (two floats), ITERS to 1000.
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
  long bytes = argc > 1 ? atol(argv[1]) : 8;
  long iters = argc > 2 ? atol(argv[2]) : 1000, skip = iters / 10;
  if (bytes < 4 || bytes % 4 != 0 || iters < 1) {
    if (rank == 0)
      fprintf(stderr, "ref_allreduce: error: BYTES must be a positive multiple of 4 and "
                      "ITERS positive\n");
    MPI_Finalize();
    return 2;
  }
  int count = (int)(bytes / 4);
  float *in = malloc((size_t)bytes), *out = malloc((size_t)bytes);
  if (!in || !out) {
    fprintf(stderr, "ref_allreduce: error: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int i = 0; i < count; i++)
    in[i] = 1.0f;
  double timer = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long k = 0; k < skip + iters; k++) {
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (k >= skip)
      timer += t;
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (out[0] != (float)n) {
    fprintf(stderr, "ref_allreduce: error: rank %d got %g, not %d\n", rank, out[0], n);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double mine = timer * 1e6 / (double)iters, lo, hi, sum;
  MPI_Reduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%d %.4f %.4f %.4f\n", n, lo, sum / n, hi);
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
