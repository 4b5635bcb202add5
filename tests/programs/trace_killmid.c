/* A traced test program whose rank KILLER sends itself SIGKILL in the
 * middle of a ping-pong loop between ranks 0 and 1 (no collectives in the
 * loop; other ranks wait in a barrier that never completes).
 * Usage: trace_killmid ITERS KILL_AT KILLER
 *   ITERS    round trips planned
 *   KILL_AT  the round trip at which KILLER kills itself (before its send)
 *   KILLER   0 or 1 */
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int iters = argc > 1 ? atoi(argv[1]) : 1000;
  int kill_at = argc > 2 ? atoi(argv[2]) : iters / 2;
  int killer = argc > 3 ? atoi(argv[3]) : 0;
  char buf[8] = { 0 };
  for (int i = 0; i < iters && rank < 2; i++) {
    if (rank == killer && i == kill_at)
      kill(getpid(), SIGKILL);
    if (rank == 0) {
      MPI_Send(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
