/* A traced test program: ping-pong between ranks 0 and 1 (others idle but
 * in the collectives).  Usage: trace_pingpong ITERS BYTES EVERY [END]
 *   ITERS   round trips (rank 0: Send then Recv; rank 1: Recv then Send)
 *   BYTES   message size
 *   EVERY   an MPI_Barrier on MPI_COMM_WORLD after every EVERY round trips
 *   END     how to end: "finalize" (default), "exit3" (exit(3) without
 *           MPI_Finalize), "abort5" (MPI_Abort with 5), "kill9" (rank 0
 *           sends itself SIGKILL), "segv" (rank 1 dereferences NULL) */
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int iters = argc > 1 ? atoi(argv[1]) : 100;
  int bytes = argc > 2 ? atoi(argv[2]) : 8;
  int every = argc > 3 ? atoi(argv[3]) : 10;
  const char *end = argc > 4 ? argv[4] : "finalize";
  char *buf = calloc((size_t)bytes + 1, 1);
  for (int i = 0; i < iters; i++) {
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
  free(buf);
  if (strcmp(end, "exit3") == 0)
    exit(3);
  if (strcmp(end, "abort5") == 0 && rank == 0)
    MPI_Abort(MPI_COMM_WORLD, 5);
  if (strcmp(end, "kill9") == 0 && rank == 0)
    kill(getpid(), SIGKILL);
  if (strcmp(end, "segv") == 0 && rank == 1) {
    volatile int *p = NULL;
    *p = 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
