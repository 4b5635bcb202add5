/* A traced test program: Alltoallw, neighbourhood collectives and matched
 * probes, at any number of ranks n >= 2.  ITERS rounds of:
 *  - line: a 1-D non-periodic cartesian communicator (rank r's neighbours
 *    r-1 and r+1, MPI_PROC_NULL at the ends); MPI_Neighbor_alltoall of 3
 *    ints per neighbour and MPI_Neighbor_allgather of 2 doubles;
 *  - ring: MPI_Graph_create, neighbours r-1 and r+1 modulo n (one at n=2);
 *    MPI_Neighbor_allgatherv of r+1 ints from rank r;
 *  - dist: MPI_Dist_graph_create_adjacent, destinations r+1 and r+2,
 *    sources r-1 and r-2 (modulo n); MPI_Neighbor_alltoallv of 1 int to
 *    the first destination and 2 to the second, MPI_Ineighbor_alltoallw of
 *    3 ints to the first and 1 double to the second;
 *  - MPI_Alltoallw and MPI_Ialltoallw on MPI_COMM_WORLD: rank r sends rank
 *    i i+1 elements of MPI_INT (i even) or MPI_DOUBLE (i odd);
 *  - MPI_Iscan and MPI_Iexscan of 2 ints;
 *  - rank 0 sends rank 1 5 ints (tag 7), which rank 1 takes with
 *    MPI_Mprobe + MPI_Mrecv; rank 1 sends rank 0 6 doubles (tag 8), which
 *    rank 0 takes with MPI_Improbe (until found) + MPI_Imrecv + MPI_Wait.
 * Every result is checked; the program exits 1 on a wrong value.
 * tests/test_trace_nbr.py checks the trace against these figures. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 2

static int bad;
#define CHECK(c)                                                                          \
  do {                                                                                    \
    if (!(c)) {                                                                           \
      fprintf(stderr, "trace_nbr: check failed at line %d: %s\n", __LINE__, #c);          \
      bad = 1;                                                                            \
    }                                                                                     \
  } while (0)

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int r, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  MPI_Comm line, ring, dist;
  int dims[1] = { n }, periods[1] = { 0 };
  MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &line);
  int *index = malloc(sizeof(int) * n), *edges = malloc(sizeof(int) * 2 * n), ne = 0;
  for (int i = 0; i < n; i++) {
    edges[ne++] = (i + n - 1) % n;
    if (n > 2)
      edges[ne++] = (i + 1) % n;
    index[i] = ne;
  }
  MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &ring);
  int dst[2] = { (r + 1) % n, (r + 2) % n }, src[2] = { (r + n - 1) % n, (r + 2 * n - 2) % n };
  MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, MPI_UNWEIGHTED, 2, dst, MPI_UNWEIGHTED,
                                 MPI_INFO_NULL, 0, &dist);

  for (int it = 0; it < ITERS; it++) {
    /* line: blocks 0 (left) and 1 (right) */
    int a2a_in[6], a2a_out[6];
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) {
        a2a_in[3 * j + k] = r * 100 + j * 10 + k + it;
        a2a_out[3 * j + k] = -1;
      }
    MPI_Neighbor_alltoall(a2a_in, 3, MPI_INT, a2a_out, 3, MPI_INT, line);
    for (int k = 0; k < 3; k++) {
      CHECK(a2a_out[k] == (r > 0 ? (r - 1) * 100 + 10 + k + it : -1));
      CHECK(a2a_out[3 + k] == (r < n - 1 ? (r + 1) * 100 + k + it : -1));
    }
    double ag_in[2] = { r + 0.5, it }, ag_out[4] = { -1, -1, -1, -1 };
    MPI_Neighbor_allgather(ag_in, 2, MPI_DOUBLE, ag_out, 2, MPI_DOUBLE, line);
    CHECK(ag_out[0] == (r > 0 ? r - 0.5 : -1));
    CHECK(ag_out[2] == (r < n - 1 ? r + 1.5 : -1));

    /* ring: r+1 ints from rank r */
    int nn = n > 2 ? 2 : 1, nb[2], counts[2], displs[2], total = 0;
    MPI_Graph_neighbors(ring, r, 2, nb);
    for (int j = 0; j < nn; j++) {
      counts[j] = nb[j] + 1;
      displs[j] = total;
      total += counts[j];
    }
    int *agv_in = malloc(sizeof(int) * (r + 1)), *agv_out = malloc(sizeof(int) * total);
    for (int k = 0; k <= r; k++)
      agv_in[k] = r * 1000 + k + it;
    MPI_Neighbor_allgatherv(agv_in, r + 1, MPI_INT, agv_out, counts, displs, MPI_INT, ring);
    for (int j = 0; j < nn; j++)
      for (int k = 0; k < counts[j]; k++)
        CHECK(agv_out[displs[j] + k] == nb[j] * 1000 + k + it);
    free(agv_in);
    free(agv_out);

    /* dist: v then w */
    int v_in[3] = { r + it, r * 2 + it, r * 3 + it }, v_out[3] = { -1, -1, -1 };
    int sc[2] = { 1, 2 }, sd[2] = { 0, 1 }, rc[2] = { 1, 2 }, rd[2] = { 0, 1 };
    MPI_Neighbor_alltoallv(v_in, sc, sd, MPI_INT, v_out, rc, rd, MPI_INT, dist);
    CHECK(v_out[0] == src[0] + it);
    CHECK(v_out[1] == src[1] * 2 + it && v_out[2] == src[1] * 3 + it);
    char w_in[20], w_out[20];
    int wi[3] = { r, r + 1, r + 2 + it };
    double wd = r + 0.25 + it;
    memcpy(w_in, wi, 12);
    memcpy(w_in + 12, &wd, 8);
    int wc[2] = { 3, 1 };
    MPI_Aint wdisp[2] = { 0, 12 };
    MPI_Datatype wt[2] = { MPI_INT, MPI_DOUBLE };
    MPI_Request req;
    MPI_Ineighbor_alltoallw(w_in, wc, wdisp, wt, w_out, wc, wdisp, wt, dist, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    int wi_out[3];
    double wd_out;
    memcpy(wi_out, w_out, 12);
    memcpy(&wd_out, w_out + 12, 8);
    CHECK(wi_out[0] == src[0] && wi_out[2] == src[0] + 2 + it);
    CHECK(wd_out == src[1] + 0.25 + it);

    /* Alltoallw on the world: i+1 elements to rank i, MPI_INT or MPI_DOUBLE */
    int *scnt = malloc(sizeof(int) * n), *sdsp = malloc(sizeof(int) * n);
    int *rcnt = malloc(sizeof(int) * n), *rdsp = malloc(sizeof(int) * n);
    MPI_Datatype *st = malloc(sizeof(MPI_Datatype) * n), *rt = malloc(sizeof(MPI_Datatype) * n);
    size_t soff = 0, roff = 0;
    MPI_Datatype mine = r % 2 ? MPI_DOUBLE : MPI_INT;
    int msz = r % 2 ? 8 : 4;
    for (int i = 0; i < n; i++) {
      scnt[i] = i + 1;
      st[i] = i % 2 ? MPI_DOUBLE : MPI_INT;
      sdsp[i] = (int)soff;
      soff += (size_t)(i + 1) * (i % 2 ? 8 : 4);
      rcnt[i] = r + 1;
      rt[i] = mine;
      rdsp[i] = (int)roff;
      roff += (size_t)(r + 1) * msz;
    }
    char *sbuf = malloc(soff), *rbuf = malloc(roff);
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
    for (int round = 0; round < 2; round++) {
      memset(rbuf, 0xff, roff);
      if (round == 0) {
        MPI_Alltoallw(sbuf, scnt, sdsp, st, rbuf, rcnt, rdsp, rt, MPI_COMM_WORLD);
      } else {
        MPI_Ialltoallw(sbuf, scnt, sdsp, st, rbuf, rcnt, rdsp, rt, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
      }
      for (int j = 0; j < n; j++)
        for (int k = 0; k <= r; k++) {
          if (r % 2) {
            double v;
            memcpy(&v, rbuf + rdsp[j] + 8 * k, 8);
            CHECK(v == j * 10 + k + it);
          } else {
            int v;
            memcpy(&v, rbuf + rdsp[j] + 4 * k, 4);
            CHECK(v == j * 10 + k + it);
          }
        }
    }
    free(scnt); free(sdsp); free(rcnt); free(rdsp); free(st); free(rt); free(sbuf); free(rbuf);

    /* Iscan, Iexscan */
    int sc_in[2] = { r + 1, 1 }, sc_out[2], ex_out[2] = { -7, -7 };
    MPI_Request two[2];
    MPI_Iscan(sc_in, sc_out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &two[0]);
    MPI_Iexscan(sc_in, ex_out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &two[1]);
    MPI_Waitall(2, two, MPI_STATUSES_IGNORE);
    CHECK(sc_out[0] == (r + 1) * (r + 2) / 2 && sc_out[1] == r + 1);
    if (r > 0)
      CHECK(ex_out[0] == r * (r + 1) / 2 && ex_out[1] == r);

    /* matched probes */
    if (r == 0) {
      int five[5] = { 1, 2, 3, 4, 5 + it };
      MPI_Send(five, 5, MPI_INT, 1, 7, MPI_COMM_WORLD);
      MPI_Message m;
      MPI_Status s;
      int flag = 0;
      while (!flag)
        MPI_Improbe(1, 8, MPI_COMM_WORLD, &flag, &m, &s);
      double six[6];
      MPI_Imrecv(six, 6, MPI_DOUBLE, &m, &req);
      MPI_Wait(&req, &s);
      CHECK(six[5] == 6.5 + it && s.MPI_SOURCE == 1);
    } else if (r == 1) {
      MPI_Message m;
      MPI_Status s;
      MPI_Mprobe(0, 7, MPI_COMM_WORLD, &m, &s);
      int got = 0;
      MPI_Get_count(&s, MPI_INT, &got);
      CHECK(got == 5);
      int five[5];
      MPI_Mrecv(five, 5, MPI_INT, &m, MPI_STATUS_IGNORE);
      CHECK(five[4] == 5 + it);
      double six[6] = { 1, 2, 3, 4, 5, 6.5 + it };
      MPI_Send(six, 6, MPI_DOUBLE, 0, 8, MPI_COMM_WORLD);
    }
  }
  MPI_Comm_free(&line);
  MPI_Comm_free(&ring);
  MPI_Comm_free(&dist);
  free(index);
  free(edges);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
