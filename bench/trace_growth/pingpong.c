/* bench/trace_growth: ping-pong between ranks 0 and 1 with a fixed message
 * size and a barrier every EVERY round trips (the collective at which the
 * sync policy may swap out), so the trace grows with the run.
 *
 *   pingpong ITERS BYTES EVERY OUT
 *
 * At the end each rank appends "rank seconds vmhwm_kib" to OUT (its own
 * peak resident set, VmHWM of /proc/self/status, read before MPI_Finalize). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long vmhwm_kib(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0)
      v = atol(line + 6);
  if (f)
    fclose(f);
  return v;
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  long iters = argc > 1 ? atol(argv[1]) : 100000;
  int bytes = argc > 2 ? atoi(argv[2]) : 64;
  long every = argc > 3 ? atol(argv[3]) : 100;
  const char *out = argc > 4 ? argv[4] : "pingpong.out";
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char *buf = calloc(1, (size_t)bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long i = 0; i < iters; i++) {
    if (rank == 0) {
      MPI_Send(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
    if (every > 0 && (i + 1) % every == 0)
      MPI_Barrier(MPI_COMM_WORLD);
  }
  double t = MPI_Wtime() - t0;
  FILE *f = fopen(out, "a");
  if (f) {
    fprintf(f, "%d %.6f %ld\n", rank, t, vmhwm_kib());
    fclose(f);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
