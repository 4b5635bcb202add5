/* A traced test program: persistent neighbourhood collectives and
 * Alltoallw (MPI-4's MPI_*_init, or Open MPI 4.1's MPIX_*_init of
 * mpi-ext.h), at any number of ranks n >= 2.  Made once: on a 1-D
 * non-periodic cartesian communicator (neighbours r-1 and r+1,
 * MPI_PROC_NULL at the ends) a neighbour alltoall of 3 ints per neighbour;
 * on a distributed graph (destinations r+1 and r+2, sources r-1 and r-2
 * modulo n) a neighbour alltoallv of 1 int to the first destination and 2
 * to the second; on MPI_COMM_WORLD an alltoallw of i+1 elements of MPI_INT
 * (i even) or MPI_DOUBLE (i odd) to rank i.  Then ITERS rounds of
 * MPI_Startall + MPI_Waitall of the three, checked; the program exits 1 on
 * a wrong value.  tests/test_trace_nbr.py checks the trace. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if MPI_VERSION >= 4
#define PCOLL(name) MPI_##name
#elif defined(OPEN_MPI)
#include <mpi-ext.h>
#define PCOLL(name) MPIX_##name
#else
#error "no persistent collectives in this MPI"
#endif

#define ITERS 2

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int r, n, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm line, dist;
  int dims[1] = { n }, periods[1] = { 0 };
  MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &line);
  int dst[2] = { (r + 1) % n, (r + 2) % n }, src[2] = { (r + n - 1) % n, (r + 2 * n - 2) % n };
  MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, MPI_UNWEIGHTED, 2, dst, MPI_UNWEIGHTED,
                                 MPI_INFO_NULL, 0, &dist);
  int a_in[6], a_out[6], v_in[3], v_out[3];
  int sc[2] = { 1, 2 }, sd[2] = { 0, 1 };
  int *scnt = malloc(sizeof(int) * n), *sdsp = malloc(sizeof(int) * n);
  int *rcnt = malloc(sizeof(int) * n), *rdsp = malloc(sizeof(int) * n);
  MPI_Datatype *st = malloc(sizeof(MPI_Datatype) * n), *rt = malloc(sizeof(MPI_Datatype) * n);
  int soff = 0, roff = 0, msz = r % 2 ? 8 : 4;
  for (int i = 0; i < n; i++) {
    scnt[i] = i + 1;
    st[i] = i % 2 ? MPI_DOUBLE : MPI_INT;
    sdsp[i] = soff;
    soff += (i + 1) * (i % 2 ? 8 : 4);
    rcnt[i] = r + 1;
    rt[i] = r % 2 ? MPI_DOUBLE : MPI_INT;
    rdsp[i] = roff;
    roff += (r + 1) * msz;
  }
  char *sbuf = malloc(soff), *rbuf = malloc(roff);
  MPI_Request rq[3];
  PCOLL(Neighbor_alltoall_init)(a_in, 3, MPI_INT, a_out, 3, MPI_INT, line, MPI_INFO_NULL, &rq[0]);
  PCOLL(Neighbor_alltoallv_init)(v_in, sc, sd, MPI_INT, v_out, sc, sd, MPI_INT, dist,
                                 MPI_INFO_NULL, &rq[1]);
  PCOLL(Alltoallw_init)(sbuf, scnt, sdsp, st, rbuf, rcnt, rdsp, rt, MPI_COMM_WORLD, MPI_INFO_NULL,
                        &rq[2]);
  for (int it = 0; it < ITERS; it++) {
    for (int k = 0; k < 6; k++) {
      a_in[k] = r * 100 + k + it;
      a_out[k] = -1;
    }
    for (int k = 0; k < 3; k++)
      v_in[k] = r * 10 + k + it;
    for (int i = 0; i < n; i++)
      for (int k = 0; k <= i; k++) {
        if (i % 2) {
          double v = r * 10 + k + it;
          memcpy(sbuf + sdsp[i] + 8 * k, &v, 8);
        } else {
          int v = r * 10 + k + it;
          memcpy(sbuf + sdsp[i] + 4 * k, &v, 4);
        }
      }
    MPI_Startall(3, rq);
    MPI_Waitall(3, rq, MPI_STATUSES_IGNORE);
    for (int k = 0; k < 3; k++) {
      if (r > 0 && a_out[k] != (r - 1) * 100 + 3 + k + it)
        bad = 1;
      if (r < n - 1 && a_out[3 + k] != (r + 1) * 100 + k + it)
        bad = 1;
    }
    if (v_out[0] != src[0] * 10 + it || v_out[2] != src[1] * 10 + 2 + it)
      bad = 1;
    for (int j = 0; j < n; j++)
      for (int k = 0; k <= r; k++) {
        double v;
        if (r % 2) {
          memcpy(&v, rbuf + rdsp[j] + 8 * k, 8);
        } else {
          int iv;
          memcpy(&iv, rbuf + rdsp[j] + 4 * k, 4);
          v = iv;
        }
        if (v != j * 10 + k + it)
          bad = 1;
      }
  }
  for (int i = 0; i < 3; i++)
    MPI_Request_free(&rq[i]);
  if (bad)
    fprintf(stderr, "trace_pnbr: wrong result at rank %d\n", r);
  MPI_Comm_free(&line);
  MPI_Comm_free(&dist);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
