/* Recognising a 2-D or 3-D grid of face exchanges in any numbering
 * (tiers_map_grid): the same tests, in the same order, as the Python
 * recogniser python/tiers/map/graph.py:recover_grid, without the
 * interpreter's per-call costs (a 64-rank grid: microseconds). */

#include "tiers/map.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GRID_MAX_DIMS 3
#define GRID_MAX_CORNERS (1 << GRID_MAX_DIMS)

static double grid_weight(const tiers_map_graph_t *g, int64_t e)
{
  return g->adjwgt ? g->adjwgt[e] : 1.0;
}

/* Hop distance of every rank from start, in dist (-1: not reached); queue
 * holds n entries. */
static void grid_bfs(const tiers_map_graph_t *g, int start, int32_t *dist, int32_t *queue)
{
  for (int v = 0; v < g->n; v++)
    dist[v] = -1;
  int head = 0, tail = 0;
  dist[start] = 0;
  queue[tail++] = start;
  while (head < tail) {
    int v = queue[head++];
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      int u = g->adjncy[e];
      if (dist[u] < 0) {
        dist[u] = dist[v] + 1;
        queue[tail++] = u;
      }
    }
  }
}

/* Try the corners ends[0..dims-1] as the far ends of the axes from the
 * first corner (axis_dist[a]: distances from ends[a], for every axis but
 * the last); fill coords/sizes/pair and return 1 when the graph is that
 * grid, 0 when not, -1 when it cannot be a grid at all (uneven bytes along
 * an axis). */
static int grid_try(const tiers_map_graph_t *g, int dims, const int *ends, const int32_t *d0,
                    int32_t *const *axis_dist, int32_t *coords, int *sizes, double *pair,
                    unsigned char *seen)
{
  const int n = g->n;
  int64_t prod = 1;
  for (int a = 0; a < dims; a++) {
    sizes[a] = d0[ends[a]] + 1;
    prod *= sizes[a];
  }
  if (prod != n)
    return 0;
  for (int a = 0; a < dims; a++) {
    if (a == dims - 1) {
      /* a grid point's distance from the first corner is the sum of its
       * coordinates (every edge is tested below) */
      for (int v = 0; v < n; v++) {
        int32_t last = d0[v];
        for (int b = 0; b < a; b++)
          last -= coords[(int64_t)v * dims + b];
        if (last < 0 || last > sizes[a] - 1)
          return 0;
        coords[(int64_t)v * dims + a] = last;
      }
      break;
    }
    const int32_t *de = axis_dist[a];
    for (int v = 0; v < n; v++) {
      int32_t twice = d0[v] - de[v] + (sizes[a] - 1);
      if ((twice & 1) || twice < 0 || twice > 2 * (sizes[a] - 1))
        return 0;
      coords[(int64_t)v * dims + a] = twice / 2;
    }
  }
  memset(seen, 0, (size_t)n);
  for (int v = 0; v < n; v++) {
    int64_t lin = 0;
    for (int a = dims - 1; a >= 0; a--)
      lin = lin * sizes[a] + coords[(int64_t)v * dims + a];
    if (seen[lin])
      return 0;
    seen[lin] = 1;
  }
  int64_t edges = 0, expect = 0;
  for (int a = 0; a < dims; a++)
    expect += (int64_t)(sizes[a] - 1) * (n / sizes[a]);
  int have[GRID_MAX_DIMS] = {0};
  double w0[GRID_MAX_DIMS] = {0};
  int uneven = 0;
  for (int v = 0; v < n; v++) {
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      int u = g->adjncy[e];
      if (u <= v)
        continue;
      int axis = -1, step = 0;
      for (int a = 0; a < dims; a++) {
        int d = abs(coords[(int64_t)v * dims + a] - coords[(int64_t)u * dims + a]);
        step += d;
        if (d)
          axis = a;
      }
      if (step != 1)
        return 0;
      edges++;
      double w = grid_weight(g, e);
      if (!have[axis]) {
        have[axis] = 1;
        w0[axis] = w;
      } else if (w != w0[axis]) {
        uneven = 1;
      }
    }
  }
  if (edges != expect)
    return 0;
  if (uneven)
    return -1;
  for (int a = 0; a < dims; a++)
    pair[a] = have[a] ? w0[a] : 0.0;
  return 1;
}

int tiers_map_grid(const tiers_map_graph_t *g, const double *sent_bytes, int *dims,
                   int *sizes, double *pair, int32_t *coords)
{
  if (!g || g->n < 1 || !g->xadj || (!g->adjncy && g->xadj[g->n] > 0) || !dims || !sizes ||
      !pair || !coords)
    TIERS_ERROR(TIERS_ERR_ARG, "map: tiers_map_grid needs a graph and output arrays");
  *dims = 0;
  const int n = g->n;
  if (n < 4)
    return TIERS_OK;
  /* the cheap tests first: degrees (a sparse matrix's graph fails here) */
  int64_t dmin = INT64_MAX, dmax = 0;
  for (int v = 0; v < n; v++) {
    int64_t d = g->xadj[v + 1] - g->xadj[v];
    if (d < dmin)
      dmin = d;
    if (d > dmax)
      dmax = d;
  }
  const int k = (int)dmin;
  if ((k != 2 && k != 3) || dmax > 2 * k)
    return TIERS_OK;
  int corners[GRID_MAX_CORNERS], nc = 0;
  for (int v = 0; v < n; v++) {
    if (g->xadj[v + 1] - g->xadj[v] == k) {
      if (nc == (1 << k))
        return TIERS_OK;
      corners[nc++] = v;
    }
  }
  if (nc != (1 << k))
    return TIERS_OK;
  /* both directions alike */
  const int64_t m = g->xadj[n];
  if (sent_bytes && m > 0) {
    double wmax = 0, dev = 0;
    for (int64_t e = 0; e < m; e++) {
      double w = grid_weight(g, e);
      if (fabs(w) > wmax)
        wmax = fabs(w);
      double d = fabs(sent_bytes[e] * 2 - w);
      if (d > dev)
        dev = d;
    }
    if (dev > 1e-9 * wmax)
      return TIERS_OK;
  }
  int32_t *buf = malloc((size_t)n * (GRID_MAX_CORNERS + 1) * sizeof *buf);
  unsigned char *seen = malloc((size_t)n);
  if (!buf || !seen) {
    free(buf);
    free(seen);
    return tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__,
                           "map: no memory to recognise a grid of %d ranks", n);
  }
  int32_t *queue = buf;
  int32_t *d0 = buf + n;
  int32_t *from[GRID_MAX_CORNERS] = {0}; /* per corner index, its search, made once */
  int next = 2;
  grid_bfs(g, corners[0], d0, queue);
  int connected = 1;
  for (int v = 0; v < n; v++)
    if (d0[v] < 0)
      connected = 0;
  /* combinations of k corners out of corners[1..nc-1], in lexicographic
   * order (as Python's itertools.combinations) */
  int idx[GRID_MAX_DIMS];
  for (int a = 0; a < k; a++)
    idx[a] = a + 1;
  while (connected) {
    int ends[GRID_MAX_DIMS];
    int32_t *axis_dist[GRID_MAX_DIMS] = {0};
    int64_t prod = 1;
    for (int a = 0; a < k; a++) {
      ends[a] = corners[idx[a]];
      prod *= d0[ends[a]] + 1;
    }
    if (prod == n) {
      for (int a = 0; a < k - 1; a++) {
        if (!from[idx[a]]) {
          from[idx[a]] = buf + (int64_t)n * next++;
          grid_bfs(g, ends[a], from[idx[a]], queue);
        }
        axis_dist[a] = from[idx[a]];
      }
      int r = grid_try(g, k, ends, d0, axis_dist, coords, sizes, pair, seen);
      if (r != 0) {
        if (r > 0)
          *dims = k;
        break;
      }
    }
    /* next combination */
    int a = k - 1;
    while (a >= 0 && idx[a] == nc - k + a)
      a--;
    if (a < 0)
      break;
    idx[a]++;
    for (int b = a + 1; b < k; b++)
      idx[b] = idx[b - 1] + 1;
  }
  free(buf);
  free(seen);
  return TIERS_OK;
}
