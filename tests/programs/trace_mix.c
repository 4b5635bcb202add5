/* A traced test program: what it sends is known exactly (tests/test_trace.py
 * computes the same numbers).  Runs on any even number of ranks >= 2.
 *   1. blocking pairs (2k, 2k+1): 5 exchanges of 1024 doubles each way
 *   2. non-blocking ring: 3 x (Irecv from left, Isend 256 ints to right, Waitall)
 *   3. wildcard receives: rank 0 takes 10*r ints with tag r from each rank r > 0
 *   4. collectives on MPI_COMM_WORLD: Barrier, Bcast, Allreduce, Gather, Alltoall
 *   5. sub-communicators: split by rank parity, Allreduce and one Send/Recv inside */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  double big[1024];
  for (int i = 0; i < 1024; i++)
    big[i] = i;
  int peer = rank ^ 1;
  for (int k = 0; k < 5; k++) {
    if (rank % 2 == 0) {
      MPI_Send(big, 1024, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(big, 1024, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(big, 1024, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(big, 1024, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD);
    }
  }

  int out[256], in[256];
  for (int i = 0; i < 256; i++)
    out[i] = rank;
  for (int k = 0; k < 3; k++) {
    MPI_Request rq[2];
    MPI_Irecv(in, 256, MPI_INT, (rank + size - 1) % size, 2, MPI_COMM_WORLD, &rq[0]);
    MPI_Isend(out, 256, MPI_INT, (rank + 1) % size, 2, MPI_COMM_WORLD, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  }

  int wild[1024];
  if (rank == 0) {
    for (int k = 1; k < size; k++) {
      MPI_Status st;
      MPI_Recv(wild, 1024, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      int n;
      MPI_Get_count(&st, MPI_INT, &n);
      if (n != 10 * st.MPI_SOURCE || st.MPI_TAG != st.MPI_SOURCE) {
        fprintf(stderr, "trace_mix: wrong wildcard message\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  } else {
    MPI_Send(wild, 10 * rank, MPI_INT, 0, rank, MPI_COMM_WORLD);
  }

  double d[100] = { 0 };
  int v[10] = { 0 }, w[10];
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Bcast(d, 100, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Allreduce(v, w, 10, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int *g = malloc(sizeof(int) * (size_t)size * 2);
  int *a = malloc(sizeof(int) * (size_t)size * 2);
  MPI_Gather(&rank, 1, MPI_INT, g, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int i = 0; i < 2 * size; i++)
    a[i] = rank;
  MPI_Alltoall(a, 2, MPI_INT, g, 2, MPI_INT, MPI_COMM_WORLD);

  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &sub);
  int srank, ssize;
  MPI_Comm_rank(sub, &srank);
  MPI_Comm_size(sub, &ssize);
  double s5[5] = { 1, 2, 3, 4, 5 }, r5[5];
  MPI_Allreduce(s5, r5, 5, MPI_DOUBLE, MPI_SUM, sub);
  if (ssize >= 2) {
    if (srank == 0)
      MPI_Send(s5, 2, MPI_DOUBLE, 1, 5, sub);
    else if (srank == 1)
      MPI_Recv(r5, 2, MPI_DOUBLE, 0, 5, sub, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&sub);
  free(g);
  free(a);
  MPI_Finalize();
  return 0;
}
