/* A traced test program whose MPI call sites are known by line:
 * tests/test_trace_sites.py looks for the lines marked SITE-x below.
 * Ranks 0 and 1 ping-pong ITERS times (others only join the barrier).
 *   trace_sites [ITERS] */
#include <mpi.h>
#include <stdlib.h>

static void exchange(int rank, int *buf)
{
  if (rank == 0) {
    MPI_Send(buf, 4, MPI_INT, 1, 7, MPI_COMM_WORLD); /* SITE-send0 */
    MPI_Recv(buf, 4, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* SITE-recv0 */
  } else if (rank == 1) {
    MPI_Recv(buf, 4, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* SITE-recv1 */
    MPI_Send(buf, 4, MPI_INT, 0, 7, MPI_COMM_WORLD); /* SITE-send1 */
  }
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, iters = argc > 1 ? atoi(argv[1]) : 100;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank); /* SITE-rank */
  int buf[4] = { 0 };
  for (int i = 0; i < iters; i++)
    exchange(rank, buf);
  MPI_Barrier(MPI_COMM_WORLD); /* SITE-barrier */
  MPI_Finalize();
  return 0;
}
