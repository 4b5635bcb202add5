/* A known traffic pattern for the statistics of libtiers-mbc-mpi
 * (tests/test_mbc_mpi.py): every rank sends one message of each size
 * given on the command line to the next rank (MPI_Send and MPI_Isend
 * alternately) and receives the previous rank's, every other one with
 * MPI_ANY_SOURCE; each message is checked byte by byte. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int next = (rank + 1) % size, prev = (rank + size - 1) % size, bad = 0;
  for (int i = 1; i < argc; i++) {
    size_t n = strtoul(argv[i], NULL, 10);
    unsigned char *s = malloc(n + 1), *r = malloc(n + 1);
    for (size_t k = 0; k < n; k++)
      s[k] = (unsigned char)(rank + i + k);
    MPI_Request rq = MPI_REQUEST_NULL;
    if (i % 2)
      MPI_Isend(s, (int)n, MPI_BYTE, next, i, MPI_COMM_WORLD, &rq);
    else if (rank % 2 == 0)
      MPI_Send(s, (int)n, MPI_BYTE, next, i, MPI_COMM_WORLD);
    MPI_Recv(r, (int)n, MPI_BYTE, i % 2 ? MPI_ANY_SOURCE : prev, i, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    if (!(i % 2) && rank % 2)
      MPI_Send(s, (int)n, MPI_BYTE, next, i, MPI_COMM_WORLD);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    for (size_t k = 0; k < n; k++)
      bad += r[k] != (unsigned char)(prev + i + k);
    free(s);
    free(r);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  printf("rank %d bad %d\n", rank, bad);
  MPI_Finalize();
  return bad != 0;
}
