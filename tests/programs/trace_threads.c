/* A traced MPI_THREAD_MULTIPLE test program: T OpenMP threads per rank call
 * MPI at the same time.  What it sends is known exactly (tests/test_trace.py
 * computes the same numbers).  Runs on any even number of ranks >= 2.
 *
 *   trace_threads T K
 *
 * Thread t of rank r (t = 0..T-1) talks only with thread t of the pair
 * partner r^1, always with tag t, so every thread's messages can be told
 * apart in the trace:
 *   1. K blocking exchanges of (t+1)*100 ints each way (the even rank sends first)
 *   2. one Irecv + Isend of (t+1)*10 ints each way, Waitall
 * then, on the main thread only: Barrier and Allreduce (1 int) on the world.
 * Exits with 77 when the MPI library does not provide MPI_THREAD_MULTIPLE. */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0)
      fprintf(stderr, "trace_threads: MPI_THREAD_MULTIPLE is not provided\n");
    MPI_Finalize();
    return 77;
  }
  int nthreads = argc > 1 ? atoi(argv[1]) : 4;
  int rounds = argc > 2 ? atoi(argv[2]) : 20;
  int peer = rank ^ 1;
  int failed = 0;

#pragma omp parallel num_threads(nthreads) reduction(+ : failed)
  {
    int t = omp_get_thread_num();
    int n = (t + 1) * 100;
    int *out = malloc(sizeof(int) * (size_t)n);
    int *in = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
      out[i] = rank * 1000 + t;
    for (int k = 0; k < rounds; k++) {
      if (rank % 2 == 0) {
        MPI_Send(out, n, MPI_INT, peer, t, MPI_COMM_WORLD);
        MPI_Recv(in, n, MPI_INT, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(in, n, MPI_INT, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(out, n, MPI_INT, peer, t, MPI_COMM_WORLD);
      }
      if (in[n - 1] != peer * 1000 + t)
        failed++;
    }
    MPI_Request rq[2];
    MPI_Irecv(in, n / 10, MPI_INT, peer, t, MPI_COMM_WORLD, &rq[0]);
    MPI_Isend(out, n / 10, MPI_INT, peer, t, MPI_COMM_WORLD, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    free(out);
    free(in);
  }

  MPI_Barrier(MPI_COMM_WORLD);
  int all = 0;
  MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (all != 0 && rank == 0)
    fprintf(stderr, "trace_threads: %d messages arrived at the wrong thread\n", all);
  MPI_Finalize();
  return all != 0;
}
