/* A traced test program: persistent collectives.  Six requests are made
 * once (MPI-4's MPI_*_init, or Open MPI 4.1's MPIX_*_init of mpi-ext.h):
 * a barrier, a broadcast of 10 ints from rank 0, an allreduce of 4 doubles,
 * a reduce of 3 ints to the last rank, an allgather of 2 ints and an
 * alltoall of 1 int per rank.  Then ITERS rounds: MPI_Start + MPI_Wait of
 * the barrier, MPI_Startall + MPI_Waitall of the other five.  Each round's
 * results are checked; the program exits 1 on a wrong value.
 * tests/test_trace_pcoll.py checks the trace against these figures. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#if MPI_VERSION >= 4
#define PCOLL(name) MPI_##name
#elif defined(OPEN_MPI)
#include <mpi-ext.h>
#define PCOLL(name) MPIX_##name
#else
#error "no persistent collectives in this MPI"
#endif

#define ITERS 3

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int bc[10], red_in[3], red_out[3], ag_in[2], *ag_out = malloc(2 * n * sizeof(int));
  int *a2a_in = malloc(n * sizeof(int)), *a2a_out = malloc(n * sizeof(int));
  double ar_in[4], ar_out[4];
  MPI_Request barrier, rq[5];
  PCOLL(Barrier_init)(MPI_COMM_WORLD, MPI_INFO_NULL, &barrier);
  PCOLL(Bcast_init)(bc, 10, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[0]);
  PCOLL(Allreduce_init)(ar_in, ar_out, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL,
                        &rq[1]);
  PCOLL(Reduce_init)(red_in, red_out, 3, MPI_INT, MPI_MAX, n - 1, MPI_COMM_WORLD, MPI_INFO_NULL,
                     &rq[2]);
  PCOLL(Allgather_init)(ag_in, 2, MPI_INT, ag_out, 2, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL,
                        &rq[3]);
  PCOLL(Alltoall_init)(a2a_in, 1, MPI_INT, a2a_out, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL,
                       &rq[4]);
  int bad = 0;
  for (int it = 0; it < ITERS; it++) {
    MPI_Start(&barrier);
    MPI_Wait(&barrier, MPI_STATUS_IGNORE);
    for (int i = 0; i < 10; i++)
      bc[i] = rank == 0 ? it * 100 + i : -1;
    for (int i = 0; i < 4; i++)
      ar_in[i] = rank + i + it;
    for (int i = 0; i < 3; i++)
      red_in[i] = rank * 10 + i + it;
    /* the same allgather contribution every round: MPICH 4.0.2's
     * persistent allgather returns the first round's data in later ones */
    ag_in[0] = rank;
    ag_in[1] = 7;
    for (int i = 0; i < n; i++)
      a2a_in[i] = rank * 1000 + i + it;
    MPI_Startall(5, rq);
    MPI_Waitall(5, rq, MPI_STATUSES_IGNORE);
    for (int i = 0; i < 10; i++)
      bad |= bc[i] != it * 100 + i;
    for (int i = 0; i < 4; i++)
      bad |= ar_out[i] != (double)(n * (n - 1) / 2 + n * (i + it));
    if (rank == n - 1)
      for (int i = 0; i < 3; i++)
        bad |= red_out[i] != (n - 1) * 10 + i + it;
    for (int r = 0; r < n; r++)
      bad |= ag_out[2 * r] != r || ag_out[2 * r + 1] != 7;
    for (int r = 0; r < n; r++)
      bad |= a2a_out[r] != r * 1000 + rank + it;
  }
  MPI_Request_free(&barrier);
  for (int i = 0; i < 5; i++)
    MPI_Request_free(&rq[i]);
  if (bad)
    fprintf(stderr, "trace_pcoll: rank %d: wrong result\n", rank);
  free(ag_out);
  free(a2a_in);
  free(a2a_out);
  MPI_Finalize();
  return bad ? 1 : 0;
}
