/*
 * Placement with Scotch: on stencil graphs whose optimal cuts and
 * placements are known by hand, tiers_map_group cuts exactly the minimum,
 * every group fits its node, tiers_map_place gives distinct cores and
 * reaches the optimal intra-node cost; bad graphs give the documented codes.
 */
#define _GNU_SOURCE /* sched_setaffinity */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/map.h"

#include "check.h"


/* A 3-D grid of nx*ny*nz ranks (x fastest) with face weights wx, wy, wz. */
typedef struct grid {
  tiers_map_graph_t g;
  int64_t *xadj;
  int32_t *adj;
  double *w;
} grid_t;

static void grid_build(grid_t *gr, int nx, int ny, int nz, double wx, double wy, double wz)
{
  int n = nx * ny * nz;
  gr->xadj = calloc((size_t)n + 1, sizeof *gr->xadj);
  gr->adj = malloc((size_t)n * 6 * sizeof *gr->adj);
  gr->w = malloc((size_t)n * 6 * sizeof *gr->w);
  int64_t k = 0;
  for (int z = 0; z < nz; z++)
    for (int y = 0; y < ny; y++)
      for (int x = 0; x < nx; x++) {
        int v = x + nx * (y + ny * z);
        int d[6][3] = {{-1, 0, 0}, {1, 0, 0}, {0, -1, 0}, {0, 1, 0}, {0, 0, -1}, {0, 0, 1}};
        double wd[6] = {wx, wx, wy, wy, wz, wz};
        for (int i = 0; i < 6; i++) {
          int a = x + d[i][0], b = y + d[i][1], c = z + d[i][2];
          if (a < 0 || b < 0 || c < 0 || a >= nx || b >= ny || c >= nz)
            continue;
          gr->adj[k] = a + nx * (b + ny * c);
          gr->w[k] = wd[i];
          k++;
        }
        gr->xadj[v + 1] = k;
      }
  gr->g = (tiers_map_graph_t){n, gr->xadj, gr->adj, gr->w};
}

static void grid_free(grid_t *gr)
{
  free(gr->xadj);
  free(gr->adj);
  free(gr->w);
}

/* Bytes on edges whose ends are on different nodes (each edge once). */
static double cut(const tiers_map_graph_t *g, const int *node_of)
{
  double c = 0;
  for (int v = 0; v < g->n; v++)
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++)
      if (node_of[g->adjncy[e]] != node_of[v])
        c += g->adjwgt[e];
  return c / 2;
}

static void test_stencil_2x2x2(void)
{
  grid_t gr;
  grid_build(&gr, 2, 2, 2, 1, 1, 1);
  int comps = 0;
  CHECK(tiers_map_check(&gr.g, &comps, NULL) == TIERS_OK);
  CHECK(comps == 1);
  int cap[2] = {4, 4}, node_of[8], slot_of[8];
  CHECK(tiers_map_group(&gr.g, 2, cap, 1, node_of) == TIERS_OK);
  int count[2] = {0, 0};
  for (int v = 0; v < 8; v++)
    count[node_of[v]]++;
  CHECK(count[0] == 4 && count[1] == 4);
  CHECK(cut(&gr.g, node_of) == 4); /* a cube cut in two halves: 4 edges, the minimum */

  /* Node: 2 packages x 2 cores.  Each group is a 4-cycle: the best places
   * two of its edges inside packages (cost 1) and two across (cost 10). */
  int arity[2] = {2, 2};
  double cost[2] = {10, 1};
  tiers_map_node_t node = {2, arity, cost};
  CHECK(tiers_map_place(&gr.g, node_of, 2, &node, 1, slot_of) == TIERS_OK);
  double intra = 0;
  for (int v = 0; v < 8; v++) {
    CHECK(slot_of[v] >= 0 && slot_of[v] < 4);
    for (int u = 0; u < v; u++)
      CHECK(node_of[u] != node_of[v] || slot_of[u] != slot_of[v]);
    for (int64_t e = gr.xadj[v]; e < gr.xadj[v + 1]; e++) {
      int u = gr.adj[e];
      if (node_of[u] == node_of[v])
        intra += (slot_of[u] / 2 == slot_of[v] / 2) ? 1 : 10;
    }
  }
  CHECK(intra / 2 == 2 * (2 * 1 + 2 * 10));
  grid_free(&gr);
}

/* Heavy x faces: a 4x2x2 grid on 2 nodes must not cut the x edges (4 of
 * weight 100) but the 8 light y (or z) edges between the halves: cut 8. */
static void test_weighted_cut(void)
{
  grid_t gr;
  grid_build(&gr, 4, 2, 2, 100, 1, 1);
  int cap[2] = {8, 8}, node_of[16];
  CHECK(tiers_map_group(&gr.g, 2, cap, 7, node_of) == TIERS_OK);
  CHECK(cut(&gr.g, node_of) == 8);
  grid_free(&gr);
}

/* Capacities: 10 ranks of a line on nodes of 4, 4, 4 use the first three
 * and never more than 4 per node; too little room is TIERS_ERR_ARG. */
static void test_capacity(void)
{
  grid_t gr;
  grid_build(&gr, 10, 1, 1, 1, 1, 1);
  int cap[3] = {4, 4, 4}, node_of[10], count[3] = {0, 0, 0};
  CHECK(tiers_map_group(&gr.g, 3, cap, 3, node_of) == TIERS_OK);
  for (int v = 0; v < 10; v++)
    count[node_of[v]]++;
  CHECK(count[0] <= 4 && count[1] <= 4 && count[2] <= 4);
  CHECK(cut(&gr.g, node_of) == 2);
  int small[2] = {4, 4};
  CHECK(tiers_map_group(&gr.g, 2, small, 3, node_of) == TIERS_ERR_ARG);
  grid_free(&gr);
}

/* Measured link costs: a 4x2x2 grid with heavy x rows (100), y edges of
 * 10 and z edges of 1 on 4 nodes of 4 cores.  Nodes 1-2 and 0-3 are cheap
 * (1), every other pair dear (20): each x row fills a node, and the rows
 * joined by the heavy y edges must sit on a cheap pair. */
static void test_link_costs(void)
{
  grid_t gr;
  grid_build(&gr, 4, 2, 2, 100, 10, 1);
  int cap[4] = {4, 4, 4, 4}, node_of[16];
  double cost[16];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      cost[i * 4 + j] = i == j ? 0 : 20;
  cost[1 * 4 + 2] = cost[2 * 4 + 1] = 1;
  cost[0 * 4 + 3] = cost[3 * 4 + 0] = 1;
  CHECK(tiers_map_group_costs(&gr.g, 4, cap, cost, 5, node_of) == TIERS_OK);
  int count[4] = {0, 0, 0, 0};
  for (int v = 0; v < 16; v++)
    count[node_of[v]]++;
  CHECK(count[0] == 4 && count[1] == 4 && count[2] == 4 && count[3] == 4);
  double dear = 0;
  for (int v = 0; v < 16; v++)
    for (int64_t e = gr.xadj[v]; e < gr.xadj[v + 1]; e++) {
      int a = node_of[v], b = node_of[gr.adj[e]];
      if (a != b && cost[a * 4 + b] > 1)
        dear += gr.w[e];
    }
  CHECK(cut(&gr.g, node_of) == 8 * 10 + 8 * 1); /* only y and z edges cross */
  CHECK(dear / 2 == 8);                         /* and only the light z ones on dear pairs */
  /* with more room than ranks, the cheap pair is used */
  int cap2[4] = {8, 8, 8, 8};
  CHECK(tiers_map_group_costs(&gr.g, 4, cap2, cost, 5, node_of) == TIERS_OK);
  for (int v = 0; v < 16; v++)
    CHECK(node_of[v] == 1 || node_of[v] == 2 || node_of[v] == 0 || node_of[v] == 3);
  int first = node_of[0];
  for (int v = 0; v < 16; v++)
    CHECK(node_of[v] == first || cost[first * 4 + node_of[v]] == 1);
  cost[1] = -1;
  CHECK(tiers_map_group_costs(&gr.g, 4, cap, cost, 5, node_of) == TIERS_ERR_ARG);
  grid_free(&gr);
}

static void test_bad_graphs(void)
{
  int64_t xadj[3] = {0, 1, 1};
  int32_t adj[1] = {1};
  double w[2] = {1, 1};
  tiers_map_graph_t asym = {2, xadj, adj, w};
  CHECK(tiers_map_check(&asym, NULL, NULL) == TIERS_ERR_INPUT);
  int64_t xadj2[3] = {0, 1, 2};
  int32_t adj2[2] = {1, 0};
  double neg[2] = {-1, -1};
  tiers_map_graph_t negative = {2, xadj2, adj2, neg};
  CHECK(tiers_map_check(&negative, NULL, NULL) == TIERS_ERR_INPUT);
  int32_t self[2] = {0, 1};
  tiers_map_graph_t loop = {2, xadj2, self, w};
  CHECK(tiers_map_check(&loop, NULL, NULL) == TIERS_ERR_INPUT);
  /* two separate pairs: 2 components */
  int64_t xadj4[5] = {0, 1, 2, 3, 4};
  int32_t adj4[4] = {1, 0, 3, 2};
  double w4[4] = {1, 1, 1, 1};
  tiers_map_graph_t two = {4, xadj4, adj4, w4};
  int comps = 0, comp[4];
  CHECK(tiers_map_check(&two, &comps, comp) == TIERS_OK);
  CHECK(comps == 2 && comp[0] == comp[1] && comp[2] == comp[3] && comp[0] != comp[2]);
  CHECK(tiers_map_check(NULL, NULL, NULL) == TIERS_ERR_ARG);
}

/* The geometric placement: a uniform 4x4x4 grid on 4 nodes of 2 packages
 * x 8 cores is tiled into 2x2x4 boxes (the three 16-rank boxes of two
 * sides 2 cut 32 pair-bytes, the first in order wins), every node one box;
 * each package takes half the box across its longest side (z: the cut
 * plane of 4 ranks against 8).  A 3x3x3 grid on nodes of 16 slots has no
 * tiling: bisection fills the first node, the second takes the rest. */
static void test_geometric(void)
{
  enum { N = 64 };
  int parts[3] = {4, 4, 4}, cap[4] = {16, 16, 16, 16}, arity[2] = {2, 8};
  double pair[3] = {8, 8, 8};
  int32_t coords[N * 3];
  for (int v = 0; v < N; v++) {
    coords[v * 3] = v % 4;
    coords[v * 3 + 1] = v / 4 % 4;
    coords[v * 3 + 2] = v / 16;
  }
  tiers_map_node_t node = {2, arity, NULL};
  int node_of[N], slot_of[N], shape[3] = {-1, -1, -1};
  CHECK(tiers_map_geometric(N, 3, parts, pair, coords, 4, cap, &node, node_of, slot_of,
                            shape) == TIERS_OK);
  CHECK(shape[0] == 2 && shape[1] == 2 && shape[2] == 4);
  int seen[4][16];
  memset(seen, 0, sizeof seen);
  for (int v = 0; v < N; v++) {
    const int x = coords[v * 3], y = coords[v * 3 + 1], z = coords[v * 3 + 2];
    CHECK(node_of[v] == x / 2 + 2 * (y / 2)); /* one box per node, x boxes first */
    CHECK(slot_of[v] >= 0 && slot_of[v] < 16);
    if (slot_of[v] >= 0 && slot_of[v] < 16 && node_of[v] >= 0 && node_of[v] < 4)
      seen[node_of[v]][slot_of[v]]++;
    CHECK(slot_of[v] / 8 == z / 2); /* the package: a half of the box along z */
  }
  for (int i = 0; i < 4; i++)
    for (int s = 0; s < 16; s++)
      CHECK(seen[i][s] == 1);
  /* no box of 16 tiles 3x3x3: bisected, node 0 full, node 1 the other 11 */
  int p3[3] = {3, 3, 3}, count[2] = {0, 0};
  for (int v = 0; v < 27; v++) {
    coords[v * 3] = v % 3;
    coords[v * 3 + 1] = v / 3 % 3;
    coords[v * 3 + 2] = v / 9;
  }
  CHECK(tiers_map_geometric(27, 3, p3, pair, coords, 2, cap, &node, node_of, slot_of,
                            shape) == TIERS_OK);
  CHECK(shape[0] == 0 && shape[1] == 0 && shape[2] == 0);
  for (int v = 0; v < 27; v++)
    if (node_of[v] == 0 || node_of[v] == 1)
      count[node_of[v]]++;
  CHECK(count[0] == 16 && count[1] == 11);
  /* bad input: a coordinate outside the grid, too few slots, a wrong size */
  coords[5] = 3;
  CHECK(tiers_map_geometric(27, 3, p3, pair, coords, 2, cap, &node, node_of, slot_of,
                            shape) == TIERS_ERR_ARG);
  coords[5] = 1;
  CHECK(tiers_map_geometric(27, 3, p3, pair, coords, 1, cap, &node, node_of, slot_of,
                            shape) == TIERS_ERR_ARG);
  CHECK(tiers_map_geometric(26, 3, p3, pair, coords, 2, cap, &node, node_of, slot_of,
                            shape) == TIERS_ERR_ARG);
}

/* One whole search of g (no candidates of the caller's) on 4 nodes of 2
 * x 8 cores, with a second start. */
static int search4(const tiers_map_graph_t *g, int *place, tiers_map_cost_t *costs,
                   int *chosen, int *second)
{
  const int arity[2] = {2, 8};
  const double tcost[2] = {10, 1};
  const tiers_map_node_t shape = {2, arity, tcost};
  const double lat[4] = {2e-6, 4e-7, 2e-7, 1e-7}, bw[4] = {1e9, 5e9, 1e10, 2e10};
  int swaps = 0;
  return tiers_map_search(g, NULL, 4, &shape, 100, 4, lat, bw, 0.15, 0, 1, 1, 30000, 1,
                          place, costs, chosen, &swaps, second);
}

/* The second start's Scotch call runs on a thread of its own where the
 * process may use two CPUs: a ring of 64 ranks with a hub (rank 0 talks to
 * every rank), whose Scotch mapping has the hub's node sending far more
 * than any other, is searched so and again held to one CPU (the call then
 * made afterwards on this thread): the same rows, costs and choice. */
static void test_search_second_thread(void)
{
  enum { R = 64 };
  static double wm[R][R];
  memset(wm, 0, sizeof wm);
  for (int v = 0; v < R; v++) {
    wm[v][(v + 1) % R] = wm[(v + 1) % R][v] = 10;
    if (v > 0 && wm[0][v] == 0)
      wm[0][v] = wm[v][0] = 1;
  }
  static int64_t xadj[R + 1];
  static int32_t adj[R * R];
  static double w[R * R];
  int64_t k = 0;
  for (int v = 0; v < R; v++) {
    for (int u = 0; u < R; u++)
      if (wm[v][u] > 0) {
        adj[k] = u;
        w[k++] = wm[v][u];
      }
    xadj[v + 1] = k;
  }
  const tiers_map_graph_t g = {R, xadj, adj, w};
  CHECK(tiers_map_check(&g, NULL, NULL) == TIERS_OK);
  static int place[3][2][R], one[3][2][R];
  tiers_map_cost_t costs[3], costs1[3];
  int chosen = -1, chosen1 = -2, second = -1, second1 = -2;
  CHECK(search4(&g, &place[0][0][0], costs, &chosen, &second) == TIERS_OK);
  CHECK(chosen >= 0 && chosen <= 2);
  for (int v = 0; v < R; v++)
    CHECK(place[chosen][0][v] >= 0 && place[chosen][0][v] < 4);
  cpu_set_t all, first;
  if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2)
    return;
  CPU_ZERO(&first);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &first);
      break;
    }
  CHECK(sched_setaffinity(0, sizeof first, &first) == 0);
  CHECK(search4(&g, &one[0][0][0], costs1, &chosen1, &second1) == TIERS_OK);
  CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
  CHECK(chosen1 == chosen && second1 == second);
  CHECK(memcmp(place, one, sizeof place) == 0);
  for (int c = 0; c < 3; c++)
    CHECK(costs1[c].sent_max == costs[c].sent_max && costs1[c].inter == costs[c].inter);
}

int main(void)
{
  test_stencil_2x2x2();
  test_weighted_cut();
  test_capacity();
  test_link_costs();
  test_bad_graphs();
  test_geometric();
  test_search_second_thread();
  if (failures)
    fprintf(stderr, "test_map: %d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
