/* A traced test program for MPI-4's MPI_Isendrecv, MPI_Isendrecv_replace
 * and MPI_Comm_idup_with_info (MPICH 4), at any number of ranks n >= 2.
 * ITERS rounds of a ring shift: MPI_Isendrecv of 3 ints to rank r+1 from
 * rank r-1 (tag 5) and MPI_Isendrecv_replace of 2 doubles the same way
 * (tag 6), each completed by MPI_Wait; then MPI_Comm_idup_with_info of
 * MPI_COMM_WORLD, completed by MPI_Wait, and a barrier on the copy.  The
 * results are checked; the program exits 1 on a wrong value.
 * tests/test_trace_mpi4.py checks the trace. */
#include <mpi.h>
#include <stdio.h>

#define ITERS 2

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int r, n, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
#if MPI_VERSION >= 4
  int to = (r + 1) % n, from = (r + n - 1) % n;
  for (int it = 0; it < ITERS; it++) {
    int out[3] = { r, r + it, 7 }, in[3] = { -1, -1, -1 };
    double d[2] = { r + 0.5, it };
    MPI_Request req;
    MPI_Isendrecv(out, 3, MPI_INT, to, 5, in, 3, MPI_INT, from, 5, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    if (in[0] != from || in[1] != from + it)
      bad = 1;
    MPI_Isendrecv_replace(d, 2, MPI_DOUBLE, to, 6, from, 6, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    if (d[0] != from + 0.5 || d[1] != it)
      bad = 1;
  }
  MPI_Comm copy;
  MPI_Request req;
  MPI_Comm_idup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL, &copy, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  MPI_Barrier(copy);
  MPI_Comm_free(&copy);
#else
  bad = 1;
  if (r == 0)
    fprintf(stderr, "trace_isendrecv: needs an MPI-4 mpi.h\n");
#endif
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
