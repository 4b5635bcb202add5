/*
 * A small MPI program with a known traffic, for tests/test_mbc_run.py.
 * Every rank r, in a ring: one empty message, three of 10 ints (40 B)
 * (one received with MPI_ANY_SOURCE), two of 1000 doubles (8000 B, sent
 * with MPI_Isend and received with MPI_Irecv), one barrier.  Rank 0
 * prints the sum of what it received; the program exits with argv[1]
 * (default 0).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int ints[10], got[10];
  static double dbl[1000], dgot[2][1000];
  double sum = 0;
  for (int i = 0; i < 10; i++) ints[i] = rank * 100 + i;
  for (int i = 0; i < 1000; i++) dbl[i] = rank + i * 0.5;
  MPI_Request rq[4];

  /* post the big receives first, then the small ones go through */
  MPI_Irecv(dgot[0], 1000, MPI_DOUBLE, left, 7, MPI_COMM_WORLD, &rq[0]);
  MPI_Irecv(dgot[1], 1000, MPI_DOUBLE, left, 8, MPI_COMM_WORLD, &rq[1]);
  if (rank % 2 == 0) {
    MPI_Send(NULL, 0, MPI_INT, right, 1, MPI_COMM_WORLD);
    MPI_Recv(NULL, 0, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(NULL, 0, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(NULL, 0, MPI_INT, right, 1, MPI_COMM_WORLD);
  }
  for (int k = 0; k < 3; k++) {
    MPI_Isend(ints, 10, MPI_INT, right, 2 + k, MPI_COMM_WORLD, &rq[2]);
    MPI_Status st;
    MPI_Recv(got, 10, MPI_INT, k == 0 ? MPI_ANY_SOURCE : left, 2 + k, MPI_COMM_WORLD, &st);
    MPI_Wait(&rq[2], MPI_STATUS_IGNORE);
    for (int i = 0; i < 10; i++) sum += got[i];
  }
  MPI_Isend(dbl, 1000, MPI_DOUBLE, right, 7, MPI_COMM_WORLD, &rq[2]);
  MPI_Isend(dbl, 1000, MPI_DOUBLE, right, 8, MPI_COMM_WORLD, &rq[3]);
  for (int k = 0; k < 4; k++) MPI_Wait(&rq[k], MPI_STATUS_IGNORE);
  for (int i = 0; i < 1000; i++) sum += dgot[0][i] + dgot[1][i];
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("rank 0 received sum %.1f\n", sum);
  MPI_Finalize();
  return argc > 1 ? atoi(argv[1]) : 0;
}
