/* A traced test program: MPI_Comm_idup of MPI_COMM_WORLD and of a
 * sub-communicator (ranks of one parity), each completed by MPI_Wait, then
 * one MPI_Allreduce of 3 ints on each new communicator.
 * tests/test_trace_idup.py checks the archive's communicators. */
#include <mpi.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm half, dup_world, dup_half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Request rq;
  MPI_Comm_idup(MPI_COMM_WORLD, &dup_world, &rq);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
  MPI_Comm_idup(half, &dup_half, &rq);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
  int v[3] = { 1, 2, 3 }, w[3];
  MPI_Allreduce(v, w, 3, MPI_INT, MPI_SUM, dup_world);
  MPI_Allreduce(v, w, 3, MPI_INT, MPI_SUM, dup_half);
  MPI_Comm_free(&dup_half);
  MPI_Comm_free(&dup_world);
  MPI_Comm_free(&half);
  MPI_Finalize();
  return 0;
}
