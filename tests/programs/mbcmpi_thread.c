/* Asks for MPI_THREAD_MULTIPLE, which libtiers-mbc-mpi refuses
 * (tests/test_mbc_mpi.py); prints the level MPI provided. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
  int provided = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  printf("provided %d\n", provided);
  MPI_Finalize();
  return 0;
}
