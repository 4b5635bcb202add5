/*
 * Process placement with Scotch (seed 002 §2.3-2.4): grouping ranks into
 * nodes (k-way mapping onto a weighted complete graph) and placing each
 * group on its node's cores (static mapping onto the node's tleaf tree).
 *
 * Scotch's indices are 32-bit in the Debian build (SCOTCH_Num = int), and
 * its cost accumulators too, so edge weights (bytes, possibly > 2^31) are
 * scaled into small integers before they reach Scotch; the repairs after
 * Scotch (capacity and one-rank-per-core) work on the exact double weights.
 */
#define _GNU_SOURCE /* open_memstream, fmemopen; sched_getaffinity */

#include "tiers/map.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <scotch.h>

#include "scotch_error.h"

/* The sum of all integer edge weights given to Scotch stays below this. */
#define GROUP_WEIGHT_TOTAL (1 << 29)
/* For static mapping the sum times the largest distance must fit in 31 bits. */
#define PLACE_WEIGHT_TOTAL (1 << 20)
#define PLACE_COST_MAX 1000
/* Strategy for placing a group on its node: groups are small, and a speed
 * strategy places them as well as the quality one at a fraction of the
 * cost (thousands of groups on a large machine). */
#define PLACE_STRATEGY SCOTCH_STRATSPEED

static double edge_weight(const tiers_map_graph_t *g, int64_t e)
{
  return g->adjwgt ? g->adjwgt[e] : 1.0;
}

static int check_args(const tiers_map_graph_t *g)
{
  if (!g || g->n < 1 || !g->xadj || (!g->adjncy && g->xadj[g->n] > 0))
    TIERS_ERROR(TIERS_ERR_ARG, "map: the graph is NULL or has no ranks");
  if (g->xadj[0] != 0)
    TIERS_ERROR(TIERS_ERR_ARG, "map: xadj[0] must be 0");
  for (int v = 0; v < g->n; v++)
    if (g->xadj[v + 1] < g->xadj[v])
      TIERS_ERROR(TIERS_ERR_INPUT, "map: xadj decreases at rank %d", v);
  return TIERS_OK;
}

/* ------------------------------------------------------------------------ */
/* Checks */

int tiers_map_check(const tiers_map_graph_t *g, int *components, int *component)
{
  TIERS_CALL(check_args(g));
  const int n = g->n;
  const int64_t m = g->xadj[n];
  for (int v = 0; v < n; v++) {
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      int u = g->adjncy[e];
      double w = edge_weight(g, e);
      if (u < 0 || u >= n)
        TIERS_ERROR(TIERS_ERR_INPUT, "map: rank %d has neighbour %d, outside 0..%d", v, u, n - 1);
      if (u == v)
        TIERS_ERROR(TIERS_ERR_INPUT, "map: rank %d is listed as its own neighbour", v);
      if (!isfinite(w) || w < 0)
        TIERS_ERROR(TIERS_ERR_INPUT, "map: the edge %d-%d has weight %g (must be >= 0)", v, u, w);
    }
  }

  /* Symmetry in O(n + m): build the transpose (counting sort by target),
   * then compare each row with its transposed row through a marker array. */
  int64_t *txadj = calloc((size_t)n + 1, sizeof *txadj);
  int32_t *tadj = malloc((size_t)(m ? m : 1) * sizeof *tadj);
  double *twgt = malloc((size_t)(m ? m : 1) * sizeof *twgt);
  int64_t *mark = malloc((size_t)n * sizeof *mark);
  double *markw = malloc((size_t)n * sizeof *markw);
  int rc = TIERS_OK;
  if (!txadj || !tadj || !twgt || !mark || !markw) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory to check a "
                         "graph of %d ranks and %lld edges", n, (long long)m);
    goto out;
  }
  for (int64_t e = 0; e < m; e++)
    txadj[g->adjncy[e] + 1]++;
  for (int v = 0; v < n; v++)
    txadj[v + 1] += txadj[v];
  for (int v = 0; v < n; v++) {
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      int u = g->adjncy[e];
      int64_t pos = txadj[u]++;
      tadj[pos] = v;
      twgt[pos] = edge_weight(g, e);
    }
  }
  for (int v = n; v > 0; v--)
    txadj[v] = txadj[v - 1];
  txadj[0] = 0;
  for (int v = 0; v < n; v++)
    mark[v] = -1;
  for (int v = 0; v < n && rc == TIERS_OK; v++) {
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      int u = g->adjncy[e];
      if (mark[u] == v) {
        rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                             "map: rank %d lists neighbour %d twice", v, u);
        break;
      }
      mark[u] = v;
      markw[u] = edge_weight(g, e);
    }
    if (rc != TIERS_OK)
      break;
    if (txadj[v + 1] - txadj[v] != g->xadj[v + 1] - g->xadj[v]) {
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "map: the graph is not symmetric at rank %d (%lld neighbours, "
                           "listed by %lld)", v, (long long)(g->xadj[v + 1] - g->xadj[v]),
                           (long long)(txadj[v + 1] - txadj[v]));
      break;
    }
    for (int64_t e = txadj[v]; e < txadj[v + 1]; e++) {
      int u = tadj[e];
      double a = markw[u], b = twgt[e];
      if (mark[u] != v || fabs(a - b) > 1e-9 * fmax(fabs(a), fabs(b))) {
        rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                             "map: the graph is not symmetric: edge %d-%d differs from %d-%d",
                             u, v, v, u);
        break;
      }
    }
  }
  if (rc != TIERS_OK)
    goto out;

  /* Connected components by breadth-first search (the queue reuses tadj's
   * first n entries only when m >= n; use mark as the queue otherwise). */
  {
    int *comp = component ? component : malloc((size_t)n * sizeof *comp);
    int32_t *queue = malloc((size_t)n * sizeof *queue);
    if (!comp || !queue) {
      if (!component)
        free(comp);
      free(queue);
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    for (int v = 0; v < n; v++)
      comp[v] = -1;
    int count = 0;
    for (int s = 0; s < n; s++) {
      if (comp[s] >= 0)
        continue;
      int head = 0, tail = 0;
      queue[tail++] = s;
      comp[s] = count;
      while (head < tail) {
        int v = queue[head++];
        for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
          int u = g->adjncy[e];
          if (comp[u] < 0) {
            comp[u] = count;
            queue[tail++] = u;
          }
        }
      }
      count++;
    }
    if (components)
      *components = count;
    free(queue);
    if (!component)
      free(comp);
  }
out:
  free(txadj);
  free(tadj);
  free(twgt);
  free(mark);
  free(markw);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* A Scotch graph built from (part of) a tiers graph, with scaled weights. */

typedef struct sgraph {
  SCOTCH_Num n, m;
  SCOTCH_Num *verttab, *edgetab, *edlotab;
} sgraph_t;

static void sgraph_free(sgraph_t *s)
{
  free(s->verttab);
  free(s->edgetab);
  free(s->edlotab);
  memset(s, 0, sizeof *s);
}

/* Integer weight of a double weight w under scale f: at least 1 for w > 0. */
static SCOTCH_Num scaled(double w, double f)
{
  double x = nearbyint(w * f);
  return x < 1 ? 1 : (SCOTCH_Num)x;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Builds the Scotch arrays of the whole graph, dropping zero-weight edges.
 * Whole-number weights (bytes) whose total, divided by their greatest
 * common divisor, stays within total_max are given exactly so divided --
 * the integers scotch_gmap reads from a graph file of the same bytes,
 * hence its very mapping --; other weights are scaled to use the range. */
static int sgraph_whole(const tiers_map_graph_t *g, double total_max, sgraph_t *s)
{
  memset(s, 0, sizeof *s);
  const int64_t m = g->xadj[g->n];
  if (m > INT32_MAX - 1)
    TIERS_ERROR(TIERS_ERR_UNSUPPORTED, "map: %lld edges are more than Scotch's 32-bit "
                "indices can hold", (long long)m);
  double total = 0;
  uint64_t div = 0;
  int whole = 1;
  for (int64_t e = 0; e < m; e++) {
    double w = edge_weight(g, e);
    total += w;
    if (whole && w > 0) {
      if (w != floor(w) || w > 9007199254740992.0)
        whole = 0;
      else
        div = gcd64(div, (uint64_t)w);
    }
  }
  double f = total > 0 ? total_max / total : 1.0; /* uses the whole range */
  if (whole && div > 0 && total / (double)div <= total_max)
    f = 1.0 / (double)div;
  s->n = g->n;
  s->verttab = malloc(((size_t)g->n + 1) * sizeof *s->verttab);
  s->edgetab = malloc((size_t)(m ? m : 1) * sizeof *s->edgetab);
  s->edlotab = malloc((size_t)(m ? m : 1) * sizeof *s->edlotab);
  if (!s->verttab || !s->edgetab || !s->edlotab) {
    sgraph_free(s);
    TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory for a graph of %lld edges", (long long)m);
  }
  SCOTCH_Num k = 0;
  for (int v = 0; v < g->n; v++) {
    s->verttab[v] = k;
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      double w = edge_weight(g, e);
      if (w <= 0)
        continue;
      s->edgetab[k] = g->adjncy[e];
      s->edlotab[k] = scaled(w, f);
      k++;
    }
  }
  s->verttab[g->n] = k;
  s->m = k;
  return TIERS_OK;
}

/* Runs Scotch's static mapping of s onto arch with a fresh seeded context. */
/* Maps s onto arch in the context ctx, reseeded with seed first. */
static int scotch_map_in(SCOTCH_Context *ctx, const sgraph_t *s, const SCOTCH_Arch *arch,
                         SCOTCH_Strat *strat, uint64_t seed, SCOTCH_Num *parttab,
                         const char *what)
{
  SCOTCH_Graph graph, bound;
  int rc = TIERS_OK;
  SCOTCH_contextRandomSeed(ctx, (SCOTCH_Num)(seed & 0x7fffffff));
  SCOTCH_graphInit(&graph);
  SCOTCH_graphInit(&bound);
  if (SCOTCH_graphBuild(&graph, 0, s->n, s->verttab, s->verttab + 1, NULL, NULL, s->m,
                        s->edgetab, s->edlotab) != 0) {
    rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                         "map: Scotch rejected the graph (%s)", what);
  } else if (SCOTCH_contextBindGraph(ctx, &graph, &bound) != 0) {
    rc = tiers_map_scotch_fail(TIERS_ERR_NOMEM, __FILE__, __LINE__,
                         "map: Scotch cannot bind the graph to its context");
  } else if (SCOTCH_graphMap(&bound, arch, strat, parttab) != 0) {
    rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                         "map: Scotch failed to map the graph (%s)", what);
  }
  SCOTCH_graphExit(&bound);
  SCOTCH_graphExit(&graph);
  return rc;
}

/* A deterministic Scotch context with its own random generator, run by
 * the calling thread alone: left to itself, Scotch starts one thread per
 * core for every context, which costs more than mapping a graph of a few
 * hundred ranks (and much more on a busy machine), and the mapping is the
 * same (deterministic mode). */
static int context_open(SCOTCH_Context *ctx)
{
  if (SCOTCH_contextInit(ctx) != 0)
    return tiers_map_scotch_fail(TIERS_ERR_NOMEM, __FILE__, __LINE__,
                                 "map: Scotch cannot create a context");
  SCOTCH_contextRandomClone(ctx);
  SCOTCH_contextOptionSetNum(ctx, SCOTCH_OPTIONNUMDETERMINISTIC, 1);
  if (SCOTCH_contextThreadSpawn(ctx, 1, NULL) != 0) {
    SCOTCH_contextExit(ctx);
    return tiers_map_scotch_fail(TIERS_ERR_NOMEM, __FILE__, __LINE__,
                                 "map: Scotch cannot set up its context's thread");
  }
  return TIERS_OK;
}

/* Runs Scotch's static mapping of s onto arch with a fresh seeded context. */
static int scotch_map(const sgraph_t *s, const SCOTCH_Arch *arch, SCOTCH_Strat *strat,
                      uint64_t seed, SCOTCH_Num *parttab, const char *what)
{
  SCOTCH_Context ctx;
  TIERS_CALL(context_open(&ctx));
  int rc = scotch_map_in(&ctx, s, arch, strat, seed, parttab, what);
  SCOTCH_contextExit(&ctx);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Grouping */

/*
 * Moves ranks out of parts above their capacity into parts with room,
 * choosing each time the rank of an overfull part whose move loses the
 * fewest bytes kept inside parts.  part[] uses 0..k-1.
 */
static int repair_capacity(const tiers_map_graph_t *g, int k, const int *cap, int *part)
{
  const int n = g->n;
  int rc = TIERS_OK;
  int64_t *size = calloc((size_t)k, sizeof *size);
  int64_t *start = calloc((size_t)k + 1, sizeof *start);
  int32_t *members = malloc((size_t)n * sizeof *members);
  double *conn = calloc((size_t)k, sizeof *conn);
  int32_t *touched = malloc((size_t)k * sizeof *touched);
  if (!size || !start || !members || !conn || !touched) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  for (int v = 0; v < n; v++)
    size[part[v]]++;
  for (int p = 0; p < k; p++)
    start[p + 1] = start[p] + size[p];
  {
    int64_t *fill = calloc((size_t)k, sizeof *fill);
    if (!fill) {
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    for (int v = 0; v < n; v++)
      members[start[part[v]] + fill[part[v]]++] = v;
    free(fill);
  }
  int first_room = 0; /* parts before it are full */
  for (int p = 0; p < k; p++) {
    while (size[p] > cap[p]) {
      int best_v = -1, best_q = -1;
      double best_gain = -INFINITY;
      while (first_room < k && size[first_room] >= cap[first_room])
        first_room++;
      if (first_room >= k) {
        rc = tiers_error_set(TIERS_ERR_ARG, __FILE__, __LINE__, "map: no room left for rank "
                             "groups (the capacities add up to fewer ranks than the graph has)");
        goto out;
      }
      for (int64_t i = start[p]; i < start[p + 1]; i++) {
        int v = members[i];
        if (part[v] != p)
          continue;
        int nt = 0;
        for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
          int q = part[g->adjncy[e]];
          if (conn[q] == 0)
            touched[nt++] = q;
          conn[q] += edge_weight(g, e) + 1e-300; /* stays non-zero once touched */
        }
        double own = conn[p];
        int q_best = -1;
        double q_gain = -INFINITY;
        for (int t = 0; t < nt; t++) {
          int q = touched[t];
          if (q != p && size[q] < cap[q] && conn[q] - own > q_gain) {
            q_gain = conn[q] - own;
            q_best = q;
          }
        }
        if (q_best < 0) {
          q_best = first_room;
          q_gain = -own;
        }
        if (q_gain > best_gain) {
          best_gain = q_gain;
          best_v = v;
          best_q = q_best;
        }
        for (int t = 0; t < nt; t++)
          conn[touched[t]] = 0;
      }
      part[best_v] = best_q;
      size[p]--;
      size[best_q]++;
    }
  }
out:
  free(size);
  free(start);
  free(members);
  free(conn);
  free(touched);
  return rc;
}

#define LINK_NODES_MAX 2048
#define LINK_COST_MAX 1000

/*
 * Chooses the nodes to use when costs between them differ: the cheapest
 * pair, then repeatedly the node whose summed cost to the chosen ones is
 * the smallest, until their capacities hold n ranks.  Writes the chosen
 * node indices in increasing order to used[] and returns how many.
 */
static int choose_nodes(int nodes, const int *capacity, const double *cost, int n, int *used,
                        double *sum)
{
  char *in = calloc((size_t)nodes, 1);
  if (!in)
    return -1;
  int k = 0;
  int64_t room = 0;
  int bi = -1, bj = -1;
  double best = INFINITY;
  for (int i = 0; i < nodes; i++)
    for (int j = i + 1; j < nodes; j++)
      if (capacity[i] > 0 && capacity[j] > 0 && cost[(size_t)i * nodes + j] < best) {
        best = cost[(size_t)i * nodes + j];
        bi = i;
        bj = j;
      }
  if (bi < 0) { /* fewer than two nodes with room: take the one there is */
    for (int i = 0; i < nodes && room < n; i++)
      if (capacity[i] > 0) {
        in[i] = 1;
        room += capacity[i];
      }
  } else {
    int first[2] = {bi, bj};
    for (int i = 0; i < nodes; i++)
      sum[i] = 0;
    for (int t = 0; t < 2 && room < n; t++) {
      in[first[t]] = 1;
      room += capacity[first[t]];
      for (int i = 0; i < nodes; i++)
        sum[i] += cost[(size_t)i * nodes + first[t]];
    }
    while (room < n) {
      int pick = -1;
      for (int i = 0; i < nodes; i++)
        if (!in[i] && capacity[i] > 0 && (pick < 0 || sum[i] < sum[pick]))
          pick = i;
      if (pick < 0)
        break;
      in[pick] = 1;
      room += capacity[pick];
      for (int i = 0; i < nodes; i++)
        sum[i] += cost[(size_t)i * nodes + pick];
    }
  }
  for (int i = 0; i < nodes; i++)
    if (in[i])
      used[k++] = i;
  free(in);
  return k;
}

/*
 * The target of the k used nodes with measured costs is a Scotch
 * decomposition-defined architecture ("deco 0"): every node is a terminal
 * domain of a binary domain tree (root 1, children 2d and 2d+1) and the
 * distance of every pair of terminals is its measured cost.  The domain tree
 * matters because Scotch maps by recursive bipartition along it: nodes joined
 * by cheap links must share subtrees.  It is built here by recursive,
 * count-balanced bipartition with Scotch's graph partitioner on the complete
 * graph of the nodes weighted by affinity (cheapest pair = LINK_COST_MAX,
 * others in inverse proportion to their cost), so that each cut separates
 * the dearest pairs.  (SCOTCH_archBuild0 on a cost-weighted complete graph
 * does the opposite: its bipartitions keep the heaviest, i.e. dearest,
 * edges together.)
 */
typedef struct deco {
  int nodes, k;
  const int *used;
  const double *cost;
  double cheapest;
  SCOTCH_Num *domain; /* per used node, its terminal domain number */
} deco_t;

static double pair_cost(const deco_t *d, int a, int b)
{
  return 0.5 * (d->cost[(size_t)d->used[a] * d->nodes + d->used[b]] +
                d->cost[(size_t)d->used[b] * d->nodes + d->used[a]]);
}

/* Splits the used nodes set[0..s-1] (indices into used) in two halves of
 * sizes s/2 and s - s/2 that cut the least affinity. */
static int deco_split(const deco_t *d, int *set, int s, int *tmp, uint64_t seed)
{
  const int m = s * (s - 1);
  SCOTCH_Num *vert = malloc(((size_t)s + 1) * sizeof *vert);
  SCOTCH_Num *edge = malloc((size_t)m * sizeof *edge);
  SCOTCH_Num *edlo = malloc((size_t)m * sizeof *edlo);
  SCOTCH_Num *part = malloc((size_t)s * sizeof *part);
  int rc = TIERS_OK;
  if (!vert || !edge || !edlo || !part) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  SCOTCH_Num e = 0;
  for (int a = 0; a < s; a++) {
    vert[a] = e;
    for (int b = 0; b < s; b++) {
      if (a == b)
        continue;
      SCOTCH_Num w = (SCOTCH_Num)nearbyint(d->cheapest / pair_cost(d, set[a], set[b]) *
                                           LINK_COST_MAX);
      edge[e] = b;
      edlo[e] = w < 1 ? 1 : w;
      e++;
    }
  }
  vert[s] = e;
  {
    SCOTCH_Context ctx;
    SCOTCH_Graph graph, bound;
    SCOTCH_Strat strat;
    if (SCOTCH_contextInit(&ctx) != 0) {
      rc = tiers_map_scotch_fail(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no Scotch context");
      goto out;
    }
    SCOTCH_contextRandomClone(&ctx);
    SCOTCH_contextRandomSeed(&ctx, (SCOTCH_Num)(seed & 0x7fffffff));
    SCOTCH_contextOptionSetNum(&ctx, SCOTCH_OPTIONNUMDETERMINISTIC, 1);
    SCOTCH_graphInit(&graph);
    SCOTCH_graphInit(&bound);
    SCOTCH_stratInit(&strat);
    if (SCOTCH_graphBuild(&graph, 0, s, vert, vert + 1, NULL, NULL, e, edge, edlo) != 0 ||
        SCOTCH_contextBindGraph(&ctx, &graph, &bound) != 0 ||
        SCOTCH_stratGraphMapBuild(&strat, SCOTCH_STRATQUALITY | SCOTCH_STRATBALANCE, 2, 0.0)
            != 0 ||
        SCOTCH_graphPart(&bound, 2, &strat, part) != 0)
      rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "map: Scotch cannot split %d nodes by their link costs", s);
    SCOTCH_stratExit(&strat);
    SCOTCH_graphExit(&bound);
    SCOTCH_graphExit(&graph);
    SCOTCH_contextExit(&ctx);
    if (rc != TIERS_OK)
      goto out;
  }
  /* Exact halves: Scotch's part 0 first; move the surplus (the members
   * with the least affinity to their own part) if it is off by some. */
  {
    int half = s / 2, n0 = 0;
    for (int a = 0; a < s; a++)
      n0 += part[a] == 0;
    while (n0 != half) {
      int from = n0 > half ? 0 : 1, best = -1;
      double best_gain = -INFINITY;
      for (int a = 0; a < s; a++) {
        if (part[a] != from)
          continue;
        double gain = 0; /* affinity to the other side minus to its own */
        for (int b = 0; b < s; b++)
          if (b != a)
            gain += (part[b] == from ? -1.0 : 1.0) / pair_cost(d, set[a], set[b]);
        if (gain > best_gain) {
          best_gain = gain;
          best = a;
        }
      }
      part[best] = 1 - from;
      n0 += from == 0 ? -1 : 1;
    }
    int i0 = 0, i1 = half;
    for (int a = 0; a < s; a++)
      tmp[part[a] == 0 ? i0++ : i1++] = set[a];
    memcpy(set, tmp, (size_t)s * sizeof *set);
  }
out:
  free(vert);
  free(edge);
  free(edlo);
  free(part);
  return rc;
}

static int deco_tree(deco_t *d, int *set, int s, SCOTCH_Num num, int *tmp, uint64_t seed)
{
  if (s == 1) {
    d->domain[set[0]] = num;
    return TIERS_OK;
  }
  if (s == 2) {
    d->domain[set[0]] = 2 * num;
    d->domain[set[1]] = 2 * num + 1;
    return TIERS_OK;
  }
  TIERS_CALL(deco_split(d, set, s, tmp, seed));
  TIERS_CALL(deco_tree(d, set, s / 2, 2 * num, tmp, seed + 1));
  return deco_tree(d, set + s / 2, s - s / 2, 2 * num + 1, tmp, seed + 2);
}

/* Builds the deco target of the used nodes into arch (already initialised);
 * reorders used[] and cap[] so that index = Scotch's terminal number. */
static int arch_links(SCOTCH_Arch *arch, int nodes, int *used, int *cap, int k,
                      const double *cost, uint64_t seed)
{
  deco_t d = {nodes, k, used, cost, INFINITY, NULL};
  int *set = malloc((size_t)k * sizeof *set);
  int *tmp = malloc((size_t)k * sizeof *tmp);
  d.domain = malloc((size_t)k * sizeof *d.domain);
  char *text = NULL;
  size_t len = 0;
  FILE *out = NULL, *in = NULL;
  int rc = TIERS_OK;
  if (!set || !tmp || !d.domain) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto done;
  }
  double top = 0;
  for (int a = 0; a < k; a++)
    for (int b = a + 1; b < k; b++) {
      d.cheapest = fmin(d.cheapest, pair_cost(&d, a, b));
      top = fmax(top, pair_cost(&d, a, b));
    }
  for (int a = 0; a < k; a++)
    set[a] = a;
  rc = deco_tree(&d, set, k, 1, tmp, seed);
  if (rc != TIERS_OK)
    goto done;
  /* Number the used nodes in domain order: Scotch's mapping names a terminal
   * by its rank among the terminals in that order, whatever its label. */
  for (int a = 1; a < k; a++) {
    SCOTCH_Num dn = d.domain[a];
    int un = used[a], cn = cap[a], b = a - 1;
    for (; b >= 0 && d.domain[b] > dn; b--) {
      d.domain[b + 1] = d.domain[b];
      used[b + 1] = used[b];
      cap[b + 1] = cap[b];
    }
    d.domain[b + 1] = dn;
    used[b + 1] = un;
    cap[b + 1] = cn;
  }
  SCOTCH_Num dommax = d.domain[k - 1];
  out = open_memstream(&text, &len);
  if (!out) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto done;
  }
  /* terminals: label (= index into used), weight (capacity), domain number;
   * then the distances of terminal pairs, lower triangle row by row */
  fprintf(out, "deco\n0\n%d %ld\n", k, (long)dommax);
  for (int a = 0; a < k; a++)
    fprintf(out, "%d %d %ld\n", a, cap[a], (long)d.domain[a]);
  for (int a = 1; a < k; a++) {
    for (int b = 0; b < a; b++) {
      long c = (long)nearbyint(pair_cost(&d, a, b) / top * LINK_COST_MAX);
      fprintf(out, "%ld ", c < 1 ? 1 : c);
    }
    fputc('\n', out);
  }
  if (fclose(out) != 0) {
    out = NULL;
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto done;
  }
  out = NULL;
  in = fmemopen(text, len, "r");
  if (!in || SCOTCH_archLoad(arch, in) != 0)
    rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                         "map: Scotch cannot load the target of %d nodes and their costs", k);
done:
  if (in)
    fclose(in);
  if (out)
    fclose(out);
  free(text);
  free(set);
  free(tmp);
  free(d.domain);
  return rc;
}

/*
 * Refines which node each group sits on (the quadratic assignment that
 * Scotch's recursive bipartition only approximates, and on small targets
 * sometimes misses): swaps the nodes of two groups while that lowers
 * sum(bytes between groups x cost of their nodes), group sizes permitting.
 * part[] uses 0..k-1 (the index into used[]); at most 50 sweeps.
 */
static int refine_links(const tiers_map_graph_t *g, int k, const int *cap, const int *used,
                        int nodes, const double *cost, int *part)
{
  const int n = g->n;
  int rc = TIERS_OK;
  int64_t *qx = calloc((size_t)k + 1, sizeof *qx);
  int32_t *order = malloc((size_t)n * sizeof *order);
  double *acc = calloc((size_t)k, sizeof *acc);
  int32_t *touched = malloc((size_t)k * sizeof *touched);
  int *size = calloc((size_t)k, sizeof *size);
  int *loc = malloc((size_t)k * sizeof *loc); /* group p sits on used[loc[p]] */
  int32_t *qadj = NULL;
  double *qw = NULL;
  if (!qx || !order || !acc || !touched || !size || !loc) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  /* ranks by group, then the quotient graph in CSR (at most one entry per edge) */
  {
    int64_t *start = calloc((size_t)k + 1, sizeof *start);
    if (!start) {
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    for (int v = 0; v < n; v++)
      start[part[v] + 1]++;
    for (int p = 0; p < k; p++) {
      size[p] = (int)start[p + 1];
      start[p + 1] += start[p];
    }
    for (int v = 0; v < n; v++)
      order[start[part[v]]++] = v;
    for (int p = k; p > 0; p--)
      start[p] = start[p - 1];
    start[0] = 0;
    int64_t m = g->xadj[n];
    qadj = malloc((size_t)(m ? m : 1) * sizeof *qadj);
    qw = malloc((size_t)(m ? m : 1) * sizeof *qw);
    if (!qadj || !qw) {
      free(start);
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    int64_t e = 0;
    for (int p = 0; p < k; p++) {
      int nt = 0;
      for (int64_t i = start[p]; i < start[p + 1]; i++) {
        int v = order[i];
        for (int64_t a = g->xadj[v]; a < g->xadj[v + 1]; a++) {
          int q = part[g->adjncy[a]];
          if (q == p)
            continue;
          if (acc[q] == 0)
            touched[nt++] = q;
          acc[q] += edge_weight(g, a) + 1e-300;
        }
      }
      for (int t = 0; t < nt; t++) {
        qadj[e] = touched[t];
        qw[e] = acc[touched[t]];
        acc[touched[t]] = 0;
        e++;
      }
      qx[p + 1] = e;
    }
    free(start);
  }
  for (int p = 0; p < k; p++)
    loc[p] = p;
#define LCOST(a, b) ((a) == (b) ? 0.0 : cost[(size_t)used[a] * nodes + used[b]])
  for (int sweep = 0; sweep < 50; sweep++) {
    int improved = 0;
    for (int p = 0; p < k; p++) {
      for (int q = p + 1; q < k; q++) {
        int lp = loc[p], lq = loc[q];
        if (size[p] > cap[lq] || size[q] > cap[lp])
          continue;
        double delta = 0;
        for (int64_t a = qx[p]; a < qx[p + 1]; a++) {
          int r = qadj[a];
          if (r != q)
            delta += qw[a] * (LCOST(lq, loc[r]) - LCOST(lp, loc[r]));
        }
        for (int64_t a = qx[q]; a < qx[q + 1]; a++) {
          int r = qadj[a];
          if (r != p)
            delta += qw[a] * (LCOST(lp, loc[r]) - LCOST(lq, loc[r]));
        }
        if (delta < -1e-9 * fabs(delta) - 1e-300) {
          loc[p] = lq;
          loc[q] = lp;
          improved = 1;
        }
      }
    }
    if (!improved)
      break;
  }
#undef LCOST
  for (int v = 0; v < n; v++)
    part[v] = loc[part[v]];
out:
  free(qx);
  free(order);
  free(acc);
  free(touched);
  free(size);
  free(loc);
  free(qadj);
  free(qw);
  return rc;
}

int tiers_map_group(const tiers_map_graph_t *g, int nodes, const int *capacity, uint64_t seed,
                    int *node_of)
{
  return tiers_map_group_costs(g, nodes, capacity, NULL, seed, node_of);
}

static int group_costs(const tiers_map_graph_t *g, int nodes, const int *capacity,
                       const double *link_cost, uint64_t seed, SCOTCH_Num flags,
                       double balance, int *node_of);

/* Scotch's strategy of the grouping: its quality and balance flags, no
 * imbalance left (the capacities are exact) */
#define GROUP_FLAGS (SCOTCH_STRATQUALITY | SCOTCH_STRATBALANCE)

int tiers_map_group_costs(const tiers_map_graph_t *g, int nodes, const int *capacity,
                          const double *link_cost, uint64_t seed, int *node_of)
{
  tiers_map_scotch_enter();
  int rc = group_costs(g, nodes, capacity, link_cost, seed, GROUP_FLAGS, 0.0, node_of);
  tiers_map_scotch_leave();
  return rc;
}

/* The grouping with Scotch's strategy flags and the imbalance it may
 * leave (nodes over capacity are repaired after it). */
static int group_costs(const tiers_map_graph_t *g, int nodes, const int *capacity,
                       const double *link_cost, uint64_t seed, SCOTCH_Num flags,
                       double balance, int *node_of)
{
  TIERS_CALL(check_args(g));
  if (nodes < 1 || !capacity || !node_of)
    TIERS_ERROR(TIERS_ERR_ARG, "map: need at least one node, its capacity and an output array");
  if (link_cost && nodes > LINK_NODES_MAX)
    TIERS_ERROR(TIERS_ERR_ARG, "map: link costs for %d nodes (at most %d)", nodes,
                LINK_NODES_MAX);
  for (int i = 0; i < nodes; i++)
    if (capacity[i] < 0)
      TIERS_ERROR(TIERS_ERR_ARG, "map: node %d has a negative capacity", i);
  if (link_cost)
    for (int i = 0; i < nodes; i++)
      for (int j = 0; j < nodes; j++) {
        double c = link_cost[(size_t)i * nodes + j];
        if (i != j && !(c > 0 && isfinite(c)))
          TIERS_ERROR(TIERS_ERR_ARG, "map: the link cost of nodes %d-%d is %g (must be > 0)",
                      i, j, c);
      }
  const int n = g->n;
  int *used = malloc((size_t)nodes * sizeof *used);
  int *cap = malloc((size_t)nodes * sizeof *cap);
  double *sum = malloc((size_t)nodes * sizeof *sum);
  if (!used || !cap || !sum) {
    free(used);
    free(cap);
    free(sum);
    TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory");
  }
  int k = 0;
  int64_t room = 0;
  if (link_cost) {
    k = choose_nodes(nodes, capacity, link_cost, n, used, sum);
  } else { /* the first nodes with room for all ranks (capacity 0 skipped) */
    for (int i = 0; i < nodes && room < n; i++)
      if (capacity[i] > 0) {
        used[k++] = i;
        room += capacity[i];
      }
  }
  free(sum);
  if (k < 0) {
    free(used);
    free(cap);
    TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory");
  }
  room = 0;
  for (int i = 0; i < k; i++) {
    cap[i] = capacity[used[i]];
    room += cap[i];
  }
  if (room < n) {
    free(used);
    free(cap);
    TIERS_ERROR(TIERS_ERR_ARG, "map: %d ranks do not fit in %lld cores", n, (long long)room);
  }
  int rc = TIERS_OK;
  if (k == 1) {
    for (int v = 0; v < n; v++)
      node_of[v] = used[0];
    free(used);
    free(cap);
    return TIERS_OK;
  }

  sgraph_t s;
  SCOTCH_Arch arch;
  SCOTCH_Strat strat;
  SCOTCH_Num *parttab = NULL, *velotab = NULL;
  int arch_ok = 0, strat_ok = 0;
  rc = sgraph_whole(g, GROUP_WEIGHT_TOTAL / (link_cost ? LINK_COST_MAX : 1), &s);
  if (rc != TIERS_OK)
    goto out;
  parttab = malloc((size_t)n * sizeof *parttab);
  velotab = malloc((size_t)k * sizeof *velotab);
  if (!parttab || !velotab) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  for (int p = 0; p < k; p++)
    velotab[p] = cap[p];
  if (SCOTCH_archInit(&arch) != 0) {
    rc = tiers_map_scotch_fail(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no Scotch target");
    goto out;
  }
  arch_ok = 1;
  if (link_cost) {
    rc = arch_links(&arch, nodes, used, cap, k, link_cost, seed);
    if (rc != TIERS_OK)
      goto out;
  } else if (SCOTCH_archCmpltw(&arch, k, velotab) != 0) {
    rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                         "map: Scotch cannot build a target of %d nodes", k);
    goto out;
  }
  if (SCOTCH_stratInit(&strat) != 0 ||
      (strat_ok = 1, SCOTCH_stratGraphMapBuild(&strat, flags, k, balance) != 0)) {
    rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                         "map: Scotch cannot build a mapping strategy");
    goto out;
  }
  rc = scotch_map(&s, &arch, &strat, seed, parttab, "grouping ranks into nodes");
  if (rc != TIERS_OK)
    goto out;
  for (int v = 0; v < n; v++) {
    if (parttab[v] < 0 || parttab[v] >= k) {
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "map: Scotch returned node %d for rank %d", (int)parttab[v], v);
      goto out;
    }
    node_of[v] = (int)parttab[v];
  }
  rc = repair_capacity(g, k, cap, node_of);
  if (rc == TIERS_OK && link_cost)
    rc = refine_links(g, k, cap, used, nodes, link_cost, node_of);
  if (rc != TIERS_OK)
    goto out;
  for (int v = 0; v < n; v++)
    node_of[v] = used[node_of[v]];
out:
  if (strat_ok)
    SCOTCH_stratExit(&strat);
  if (arch_ok)
    SCOTCH_archExit(&arch);
  sgraph_free(&s);
  free(parttab);
  free(velotab);
  free(used);
  free(cap);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Placement inside nodes */

typedef struct tree {
  int levels, cores;
  int64_t *stride; /* stride[i]: cores under one object of level i+1 */
  double *cost;
} tree_t;

/* Cost of the pair of cores (a, b) in the node tree. */
static double tree_dist(const tree_t *t, int a, int b)
{
  if (a == b)
    return 0;
  for (int i = 0; i < t->levels; i++)
    if (a / t->stride[i] != b / t->stride[i])
      return t->cost[i];
  return 0;
}

/*
 * Gives each rank of a group a distinct core: the first rank Scotch put on a
 * core keeps it, the others go, one by one, to the free core closest (by the
 * tree's costs, weighed by bytes) to their neighbours already placed.
 */
static int repair_cores(const tiers_map_graph_t *g, const tree_t *t, const int32_t *grp, int s,
                        const int32_t *local, SCOTCH_Num *leaf, int *slot_of)
{
  int rc = TIERS_OK;
  char *taken = calloc((size_t)t->cores, 1);
  int32_t *pending = malloc((size_t)(s > 0 ? s : 1) * sizeof *pending);
  if (!taken || !pending) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  int np = 0;
  for (int i = 0; i < s; i++) {
    int c = (int)leaf[i];
    if (c >= 0 && c < t->cores && !taken[c]) {
      taken[c] = 1;
    } else {
      leaf[i] = -1;
      pending[np++] = i;
    }
  }
  for (int j = 0; j < np; j++) {
    int i = pending[j];
    int v = grp[i];
    int best = -1;
    double best_cost = INFINITY;
    for (int c = 0; c < t->cores; c++) {
      if (taken[c])
        continue;
      double cost = 0;
      for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
        int u = g->adjncy[e];
        int li = local[u];
        if (li >= 0 && li < s && grp[li] == u && leaf[li] >= 0)
          cost += edge_weight(g, e) * tree_dist(t, c, (int)leaf[li]);
      }
      if (cost < best_cost) {
        best_cost = cost;
        best = c;
      }
    }
    leaf[i] = best;
    taken[best] = 1;
  }
  for (int i = 0; i < s; i++)
    slot_of[grp[i]] = (int)leaf[i];
out:
  free(taken);
  free(pending);
  return rc;
}

/* Lists each node's ranks in rank order: members[start[i] ..
 * start[i+1]) are node i's ranks (start: prefix sums of the counts) and
 * local[v] is rank v's place among them.  Returns TIERS_ERR_NOMEM when
 * its scratch array cannot be had. */
static int group_members(int n, int nodes, const int *node_of, const int64_t *start,
                         int32_t *members, int32_t *local)
{
  int64_t *fill = calloc((size_t)nodes, sizeof *fill);
  if (!fill)
    return TIERS_ERR_NOMEM;
  for (int v = 0; v < n; v++) {
    int64_t pos = start[node_of[v]] + fill[node_of[v]]++;
    members[pos] = v;
    local[v] = (int32_t)(pos - start[node_of[v]]);
  }
  free(fill);
  return TIERS_OK;
}

/* Fills t's per-level strides (cores under one child) and costs from the
 * node's shape; t->cores already set. */
static void tree_levels(tree_t *t, const tiers_map_node_t *node)
{
  int64_t stride = t->cores;
  for (int i = 0; i < t->levels; i++) {
    stride /= node->arity[i];
    t->stride[i] = stride;
    t->cost[i] = node->cost[i];
  }
}

/* Each node's ranks as group_members lists them (start: nodes + 1
 * zeroed entries); TIERS_ERR_ARG when a node holds more ranks than its
 * cores, TIERS_ERR_NOMEM; both with the error set. */
static int node_groups(int n, int nodes, const int *node_of, int cores, int64_t *start,
                       int32_t *members, int32_t *local)
{
  for (int v = 0; v < n; v++)
    start[node_of[v] + 1]++;
  for (int i = 0; i < nodes; i++) {
    if (start[i + 1] > cores)
      TIERS_ERROR(TIERS_ERR_ARG, "map: node %d holds %lld ranks but has %d cores", i,
                  (long long)start[i + 1], cores);
    start[i + 1] += start[i];
  }
  if (group_members(n, nodes, node_of, start, members, local) != TIERS_OK)
    TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory");
  return TIERS_OK;
}

static int place_groups(const tiers_map_graph_t *g, const int *node_of, int nodes,
                        const tiers_map_node_t *node, uint64_t seed, int *slot_of);

int tiers_map_place(const tiers_map_graph_t *g, const int *node_of, int nodes,
                    const tiers_map_node_t *node, uint64_t seed, int *slot_of)
{
  tiers_map_scotch_enter();
  int rc = place_groups(g, node_of, nodes, node, seed, slot_of);
  tiers_map_scotch_leave();
  return rc;
}

static int place_groups(const tiers_map_graph_t *g, const int *node_of, int nodes,
                        const tiers_map_node_t *node, uint64_t seed, int *slot_of)
{
  TIERS_CALL(check_args(g));
  if (!node_of || nodes < 1 || !node || !slot_of || node->levels < 0 ||
      (node->levels > 0 && (!node->arity || !node->cost)))
    TIERS_ERROR(TIERS_ERR_ARG, "map: bad arguments to tiers_map_place");
  const int n = g->n;
  tree_t t = {node->levels, 1, NULL, NULL};
  for (int i = 0; i < node->levels; i++) {
    if (node->arity[i] < 1 || !(node->cost[i] > 0) || !isfinite(node->cost[i]))
      TIERS_ERROR(TIERS_ERR_ARG, "map: level %d of the node has arity %d and cost %g "
                  "(need >= 1 and > 0)", i, node->arity[i], node->cost[i]);
    if ((int64_t)t.cores * node->arity[i] > (1 << 24))
      TIERS_ERROR(TIERS_ERR_ARG, "map: a node of more than 2^24 cores");
    t.cores *= node->arity[i];
  }
  for (int v = 0; v < n; v++)
    if (node_of[v] < 0 || node_of[v] >= nodes)
      TIERS_ERROR(TIERS_ERR_ARG, "map: rank %d is on node %d, outside 0..%d", v, node_of[v],
                  nodes - 1);

  int rc = TIERS_OK;
  int64_t *start = calloc((size_t)nodes + 1, sizeof *start);
  int32_t *members = malloc((size_t)n * sizeof *members);
  int32_t *local = malloc((size_t)n * sizeof *local);
  SCOTCH_Num *leaf = malloc((size_t)n * sizeof *leaf);
  SCOTCH_Num *sizetab = malloc(((size_t)t.levels + 1) * sizeof *sizetab);
  SCOTCH_Num *linktab = malloc(((size_t)t.levels + 1) * sizeof *linktab);
  t.stride = malloc(((size_t)t.levels + 1) * sizeof *t.stride);
  t.cost = malloc(((size_t)t.levels + 1) * sizeof *t.cost);
  sgraph_t s = {0, 0, NULL, NULL, NULL};
  SCOTCH_Arch arch;
  SCOTCH_Strat strat;
  SCOTCH_Context ctx;
  int arch_ok = 0, strat_ok = 0, ctx_ok = 0;
  if (!start || !members || !local || !leaf || !sizetab || !linktab || !t.stride || !t.cost) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  /* Tree: strides and integer link costs.  Scotch's tleaf distance of two
   * leaves whose closest common level is i is linktab[i]. */
  {
    tree_levels(&t, node);
    double top = 0;
    for (int i = 0; i < t.levels; i++)
      top = fmax(top, node->cost[i]);
    SCOTCH_Num below = 0; /* integer distance of the level below */
    for (int i = t.levels - 1; i >= 0; i--) {
      SCOTCH_Num c = (SCOTCH_Num)nearbyint(node->cost[i] / top * PLACE_COST_MAX);
      if (c <= below)
        c = below + 1;
      sizetab[i] = node->arity[i];
      linktab[i] = c;
      below = c;
    }
  }
  rc = node_groups(n, nodes, node_of, t.cores, start, members, local);
  if (rc != TIERS_OK)
    goto out;
  if (t.levels > 0) {
    if (SCOTCH_archInit(&arch) != 0 ||
        (arch_ok = 1, SCOTCH_archTleaf(&arch, t.levels, sizetab, linktab) != 0)) {
      rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "map: Scotch cannot build the node tree (tleaf)");
      goto out;
    }
    if (SCOTCH_stratInit(&strat) != 0 ||
        (strat_ok = 1, SCOTCH_stratGraphMapBuild(&strat, PLACE_STRATEGY, t.cores, 0.0)
                           != 0)) {
      rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "map: Scotch cannot build a mapping strategy");
      goto out;
    }
  }
  /* Scratch for the group subgraphs: at most every edge once. */
  {
    int64_t maxgroup = 0;
    for (int i = 0; i < nodes; i++)
      if (start[i + 1] - start[i] > maxgroup)
        maxgroup = start[i + 1] - start[i];
    s.verttab = malloc(((size_t)maxgroup + 1) * sizeof *s.verttab);
    s.edgetab = malloc((size_t)(g->xadj[n] ? g->xadj[n] : 1) * sizeof *s.edgetab);
    s.edlotab = malloc((size_t)(g->xadj[n] ? g->xadj[n] : 1) * sizeof *s.edlotab);
    if (!s.verttab || !s.edgetab || !s.edlotab) {
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
  }
  for (int i = 0; i < nodes; i++) {
    const int32_t *grp = members + start[i];
    const int sz = (int)(start[i + 1] - start[i]);
    if (sz == 0)
      continue;
    /* Induced subgraph with weights scaled so that sum * max cost fits. */
    double total = 0;
    for (int j = 0; j < sz; j++) {
      int v = grp[j];
      for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++)
        if (node_of[g->adjncy[e]] == i)
          total += edge_weight(g, e);
    }
    SCOTCH_Num *lf = leaf + start[i];
    if (total <= 0 || t.levels == 0 || sz == 1) {
      for (int j = 0; j < sz; j++) /* nothing to gain: fill cores in order */
        lf[j] = -1;
    } else {
      double f = PLACE_WEIGHT_TOTAL / total;
      SCOTCH_Num k = 0;
      for (int j = 0; j < sz; j++) {
        int v = grp[j];
        s.verttab[j] = k;
        for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
          int u = g->adjncy[e];
          double w = edge_weight(g, e);
          if (node_of[u] != i || w <= 0)
            continue;
          s.edgetab[k] = local[u];
          s.edlotab[k] = scaled(w, f);
          k++;
        }
      }
      s.verttab[sz] = k;
      s.n = sz;
      s.m = k;
      if (!ctx_ok) {
        rc = context_open(&ctx);
        if (rc != TIERS_OK)
          goto out;
        ctx_ok = 1;
      }
      rc = scotch_map_in(&ctx, &s, &arch, &strat, seed + (uint64_t)i, lf,
                         "placing ranks on cores");
      if (rc != TIERS_OK)
        goto out;
    }
    rc = repair_cores(g, &t, grp, sz, local, lf, slot_of);
    if (rc != TIERS_OK)
      goto out;
  }
out:
  if (ctx_ok)
    SCOTCH_contextExit(&ctx);
  if (strat_ok)
    SCOTCH_stratExit(&strat);
  if (arch_ok)
    SCOTCH_archExit(&arch);
  free(s.verttab);
  free(s.edgetab);
  free(s.edlotab);
  free(start);
  free(members);
  free(local);
  free(leaf);
  free(sizetab);
  free(linktab);
  free(t.stride);
  free(t.cost);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* The whole machine in one mapping */

/* Distances of a tleaf target: level costs (root first, decreasing) as
 * integers of at most LEAF_COST_MAX; linktab[i] is the distance of a pair
 * joined at level i (Scotch's tleaf distance, not a sum over levels): the
 * 10^d processor graph of nodes x 2 packages x 8 cores is "tleaf 3 N 100
 * 2 10 8 1", as a scotch_gmap user writes it. */
#define LEAF_COST_MAX 1000

static int map_tree(const tiers_map_graph_t *g, int nodes, double node_cost,
                    const tiers_map_node_t *node, int strategy, double balance, uint64_t seed,
                    int *node_of, int *slot_of);

int tiers_map_tree(const tiers_map_graph_t *g, int nodes, double node_cost,
                   const tiers_map_node_t *node, int strategy, double balance, uint64_t seed,
                   int *node_of, int *slot_of)
{
  tiers_map_scotch_enter();
  int rc = map_tree(g, nodes, node_cost, node, strategy, balance, seed, node_of, slot_of);
  tiers_map_scotch_leave();
  return rc;
}

static int map_tree(const tiers_map_graph_t *g, int nodes, double node_cost,
                    const tiers_map_node_t *node, int strategy, double balance, uint64_t seed,
                    int *node_of, int *slot_of)
{
  TIERS_CALL(check_args(g));
  if (nodes < 1 || !node || !node_of || !slot_of || node->levels < 0 ||
      (node->levels > 0 && (!node->arity || !node->cost)) || !(node_cost > 0) ||
      !isfinite(node_cost) || !(balance >= 0) || balance > 1)
    TIERS_ERROR(TIERS_ERR_ARG, "map: bad arguments to tiers_map_tree");
  const int n = g->n;
  const int levels = node->levels + 1;
  tree_t t = {node->levels, 1, NULL, NULL};
  for (int i = 0; i < node->levels; i++) {
    if (node->arity[i] < 1 || !(node->cost[i] > 0) || !isfinite(node->cost[i]) ||
        node->cost[i] >= node_cost)
      TIERS_ERROR(TIERS_ERR_ARG, "map: level %d of the node has arity %d and cost %g "
                  "(need >= 1, > 0 and below the cost between nodes)", i, node->arity[i],
                  node->cost[i]);
    if ((int64_t)t.cores * node->arity[i] > (1 << 24))
      TIERS_ERROR(TIERS_ERR_ARG, "map: a node of more than 2^24 cores");
    t.cores *= node->arity[i];
  }
  if ((int64_t)nodes * t.cores > INT32_MAX / 2)
    TIERS_ERROR(TIERS_ERR_UNSUPPORTED, "map: %d nodes of %d cores are more cores than "
                "Scotch's 32-bit indices can hold", nodes, t.cores);
  if ((int64_t)nodes * t.cores < n)
    TIERS_ERROR(TIERS_ERR_ARG, "map: %d ranks do not fit in %d nodes of %d cores", n, nodes,
                t.cores);

  int rc = TIERS_OK;
  sgraph_t s = {0, 0, NULL, NULL, NULL};
  SCOTCH_Arch arch;
  SCOTCH_Strat strat;
  int arch_ok = 0, strat_ok = 0;
  SCOTCH_Num *sizetab = malloc((size_t)levels * sizeof *sizetab);
  SCOTCH_Num *linktab = malloc((size_t)levels * sizeof *linktab);
  SCOTCH_Num *leaf = malloc((size_t)n * sizeof *leaf);
  int *cap = malloc((size_t)nodes * sizeof *cap);
  int64_t *start = calloc((size_t)nodes + 1, sizeof *start);
  int32_t *members = malloc((size_t)n * sizeof *members);
  int32_t *local = malloc((size_t)n * sizeof *local);
  t.stride = malloc(((size_t)t.levels + 1) * sizeof *t.stride);
  t.cost = malloc(((size_t)t.levels + 1) * sizeof *t.cost);
  if (!sizetab || !linktab || !leaf || !cap || !start || !members || !local || !t.stride ||
      !t.cost) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  {
    tree_levels(&t, node);
    /* integer distances: the cheapest level costs at least 1, the dearest
     * (between nodes) at most LEAF_COST_MAX, strictly increasing upwards */
    double low = node->levels > 0 ? node->cost[node->levels - 1] : node_cost;
    double f = fmin(1.0 / low, LEAF_COST_MAX / node_cost);
    SCOTCH_Num below = 0;
    for (int i = levels - 1; i >= 0; i--) {
      double c = i == 0 ? node_cost : node->cost[i - 1];
      SCOTCH_Num d = (SCOTCH_Num)nearbyint(c * f);
      if (d <= below)
        d = below + 1;
      sizetab[i] = i == 0 ? nodes : node->arity[i - 1];
      linktab[i] = d;
      below = d;
    }
    /* Scotch sums bytes x distance in 32 bits: the weights' total times the
     * largest distance stays below 2^30 */
    rc = sgraph_whole(g, (double)(1 << 30) / (double)below, &s);
    if (rc != TIERS_OK)
      goto out;
  }
  if (SCOTCH_archInit(&arch) != 0 ||
      (arch_ok = 1, SCOTCH_archTleaf(&arch, levels, sizetab, linktab) != 0)) {
    rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                         "map: Scotch cannot build the machine tree (tleaf)");
    goto out;
  }
  if (SCOTCH_stratInit(&strat) != 0) {
    rc = tiers_map_scotch_fail(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no Scotch strategy");
    goto out;
  }
  strat_ok = 1;
  if (strategy >= 0 &&
      SCOTCH_stratGraphMapBuild(&strat, (SCOTCH_Num)strategy,
                                (SCOTCH_Num)((int64_t)nodes * t.cores), balance) != 0) {
    rc = tiers_map_scotch_fail(TIERS_ERR_INPUT, __FILE__, __LINE__,
                         "map: Scotch cannot build a mapping strategy");
    goto out;
  }
  rc = scotch_map(&s, &arch, &strat, seed, leaf, "mapping ranks onto the machine");
  if (rc != TIERS_OK)
    goto out;
  for (int v = 0; v < n; v++) {
    if (leaf[v] < 0 || leaf[v] >= (SCOTCH_Num)nodes * t.cores) {
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "map: Scotch returned core %d for rank %d", (int)leaf[v], v);
      goto out;
    }
    node_of[v] = (int)(leaf[v] / t.cores);
  }
  /* nodes over capacity (Scotch's balance is not exact): ranks move out */
  for (int i = 0; i < nodes; i++)
    cap[i] = t.cores;
  rc = repair_capacity(g, nodes, cap, node_of);
  if (rc != TIERS_OK)
    goto out;
  /* one rank per core: each keeps the core Scotch gave it when that core
   * is on its node and not taken, the others get the closest free one */
  for (int v = 0; v < n; v++)
    start[node_of[v] + 1]++;
  for (int i = 0; i < nodes; i++)
    start[i + 1] += start[i];
  if (group_members(n, nodes, node_of, start, members, local) != TIERS_OK) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  {
    /* leaf[] reused per node: the core within the node, or -1 */
    SCOTCH_Num *lf = malloc((size_t)(n > 0 ? n : 1) * sizeof *lf);
    if (!lf) {
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    for (int64_t j = 0; j < n; j++) {
      int v = members[j];
      lf[j] = leaf[v] / t.cores == node_of[v] ? leaf[v] % t.cores : -1;
    }
    for (int i = 0; i < nodes && rc == TIERS_OK; i++) {
      const int sz = (int)(start[i + 1] - start[i]);
      if (sz > 0)
        rc = repair_cores(g, &t, members + start[i], sz, local, lf + start[i], slot_of);
    }
    free(lf);
  }
out:
  if (strat_ok)
    SCOTCH_stratExit(&strat);
  if (arch_ok)
    SCOTCH_archExit(&arch);
  sgraph_free(&s);
  free(sizetab);
  free(linktab);
  free(leaf);
  free(cap);
  free(start);
  free(members);
  free(local);
  free(t.stride);
  free(t.cost);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Refinement: node-level swaps */

typedef struct rstate {
  const tiers_map_graph_t *g;
  const double *out;  /* per CSR entry, bytes v sends to adjncy[e] */
  int *node;
  double *sent;       /* per node, bytes it sends to other nodes */
  double cut;         /* bytes crossing nodes, both directions */
  int *touched;       /* nodes whose sent changed in the current trial */
  double *before;     /* their values before it */
  char *mark;
  int nt;
} rstate_t;

static double sent_of(const rstate_t *st, int64_t e)
{
  return st->out ? st->out[e] : 0.5 * edge_weight(st->g, e);
}

/* The bytes adjncy[e] sends back to v. */
static double recv_of(const rstate_t *st, int64_t e)
{
  return edge_weight(st->g, e) - sent_of(st, e);
}

static void touch(rstate_t *st, int x)
{
  if (!st->mark[x]) {
    st->mark[x] = 1;
    st->before[st->nt] = st->sent[x];
    st->touched[st->nt++] = x;
  }
}

static void move_rank(rstate_t *st, int r, int to)
{
  const int from = st->node[r];
  if (from == to)
    return;
  touch(st, from);
  touch(st, to);
  for (int64_t e = st->g->xadj[r]; e < st->g->xadj[r + 1]; e++) {
    const int t = st->g->adjncy[e];
    const int nt = st->node[t];
    const double so = sent_of(st, e), si = recv_of(st, e);
    touch(st, nt);
    if (nt != from) {
      st->sent[from] -= so;
      st->sent[nt] -= si;
      st->cut -= so + si;
    }
    if (nt != to) {
      st->sent[to] += so;
      st->sent[nt] += si;
      st->cut += so + si;
    }
  }
  st->node[r] = to;
}

static void clear_touched(rstate_t *st)
{
  for (int i = 0; i < st->nt; i++)
    st->mark[st->touched[i]] = 0;
  st->nt = 0;
}

static int lower(double a, double b)
{
  return a < b - 1e-12 * fmax(fabs(a), fabs(b));
}

/* Kernighan-Lin between two nodes.  Ranks of node a that talk to node b
 * and ranks of b that talk to a trade places, the pair of the highest
 * gain in cut bytes first (a negative gain too), each rank once; then the
 * sequence is cut back to its best prefix and the rest undone.  Only the
 * two nodes' sent bytes and the pair's cut change, so the prefix is judged
 * on (cut, the larger of the two nodes' sent bytes) -- mode 0 -- or on
 * (that larger sent volume, cut) -- mode 1 --, among the prefixes whose
 * two nodes send at most limit_sent and whose cut is at most limit_cut. */
typedef struct klctx {
  rstate_t *st;
  int *slot_of;
  int32_t *members, *pos;
  const int64_t *start;
  double *ca, *cb; /* per rank of the two lists: bytes with node a, with node b */
  double *wmark;   /* per rank, scratch: bytes with the rank being tried */
  char *locked;
  int32_t *R, *S, *sr, *ss;
  int64_t work, budget;
} klctx_t;

#define KL_SIDE_MAX 256

static int kl_pair(klctx_t *k, int a, int b, int mode, double limit_sent, double limit_cut)
{
  rstate_t *st = k->st;
  const tiers_map_graph_t *g = st->g;
  int nr = 0, ns = 0;
  for (int side = 0; side < 2; side++) {
    const int here = side ? b : a, there = side ? a : b;
    int32_t *list = side ? k->S : k->R;
    int *cnt = side ? &ns : &nr;
    for (int64_t i = k->start[here]; i < k->start[here + 1] && *cnt < KL_SIDE_MAX; i++) {
      const int r = k->members[i];
      double wa = 0, wb = 0;
      for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++) {
        const int t = st->node[g->adjncy[e]];
        if (t == a)
          wa += edge_weight(g, e);
        else if (t == b)
          wb += edge_weight(g, e);
      }
      k->work += g->xadj[r + 1] - g->xadj[r];
      if ((side ? wa : wb) > 0 || (there == a ? wa : wb) > 0) {
        list[(*cnt)++] = r;
        k->ca[r] = wa;
        k->cb[r] = wb;
        k->locked[r] = 0;
      }
    }
  }
  if (nr == 0 || ns == 0)
    return 0;
  double best_a = mode == 0 ? st->cut : fmax(st->sent[a], st->sent[b]);
  double best_b = mode == 0 ? fmax(st->sent[a], st->sent[b]) : st->cut;
  int best_p = 0, steps = 0;
  const int most = nr < ns ? nr : ns;
  for (int p = 1; p <= most && k->work < k->budget; p++) {
    int br = -1, bs = -1;
    double bg = -INFINITY;
    for (int i = 0; i < nr; i++) {
      const int r = k->R[i];
      if (k->locked[r])
        continue;
      for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++)
        k->wmark[g->adjncy[e]] = edge_weight(g, e);
      const double dr = k->cb[r] - k->ca[r];
      for (int j = 0; j < ns; j++) {
        const int s = k->S[j];
        if (k->locked[s])
          continue;
        const double gain = dr + (k->ca[s] - k->cb[s]) - 2 * k->wmark[s];
        if (gain > bg) {
          bg = gain;
          br = r;
          bs = s;
        }
      }
      for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++)
        k->wmark[g->adjncy[e]] = 0;
      k->work += (g->xadj[r + 1] - g->xadj[r]) * 2 + ns;
    }
    if (br < 0)
      break;
    move_rank(st, br, b);
    move_rank(st, bs, a);
    clear_touched(st);
    k->locked[br] = k->locked[bs] = 1;
    for (int64_t e = g->xadj[br]; e < g->xadj[br + 1]; e++) {
      const int u = g->adjncy[e];
      k->ca[u] -= edge_weight(g, e);
      k->cb[u] += edge_weight(g, e);
    }
    for (int64_t e = g->xadj[bs]; e < g->xadj[bs + 1]; e++) {
      const int u = g->adjncy[e];
      k->cb[u] -= edge_weight(g, e);
      k->ca[u] += edge_weight(g, e);
    }
    k->sr[steps] = br;
    k->ss[steps] = bs;
    steps++;
    const double top2 = fmax(st->sent[a], st->sent[b]);
    const double ka = mode == 0 ? st->cut : top2, kb = mode == 0 ? top2 : st->cut;
    const int ok = !lower(limit_sent, top2) && !lower(limit_cut, st->cut);
    if (ok && (lower(ka, best_a) || (!lower(best_a, ka) && lower(kb, best_b)))) {
      best_a = ka;
      best_b = kb;
      best_p = steps;
    }
  }
  for (int p = steps - 1; p >= best_p; p--) {
    move_rank(st, k->ss[p], b);
    move_rank(st, k->sr[p], a);
    clear_touched(st);
  }
  for (int p = 0; p < best_p; p++) {
    const int r = k->sr[p], s = k->ss[p];
    const int32_t pr = k->pos[r], ps = k->pos[s];
    k->members[pr] = s;
    k->members[ps] = r;
    k->pos[r] = ps;
    k->pos[s] = pr;
    const int tmp = k->slot_of[r];
    k->slot_of[r] = k->slot_of[s];
    k->slot_of[s] = tmp;
  }
  return best_p;
}

/* The nodes that node a's ranks talk to, above a itself when above_only,
 * into list (stamp[] marks them with a fresh value).  Returns the count. */
static int node_neighbours(const rstate_t *st, const int64_t *start, const int32_t *members,
                           int a, int above_only, int *stamp, int *stamp_val, int *list)
{
  const tiers_map_graph_t *g = st->g;
  const int val = ++*stamp_val;
  int c = 0;
  for (int64_t i = start[a]; i < start[a + 1]; i++) {
    const int r = members[i];
    for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++) {
      const int t = st->node[g->adjncy[e]];
      if (t != a && (!above_only || t > a) && stamp[t] != val) {
        stamp[t] = val;
        list[c++] = t;
      }
    }
  }
  return c;
}

/* What swapping rank r (on node w) with rank s (on node b) would change,
 * from the two ranks' edges alone, without moving them: *dw the bytes node
 * w sends to other nodes, *dcut the inter-node bytes (both directions),
 * and *scale the sum of the bytes involved (for rounding bounds). */
static void swap_delta(const rstate_t *st, int r, int s, int w, int b, double *dw, double *dcut,
                       double *scale)
{
  const tiers_map_graph_t *g = st->g;
  double d = 0, c = 0, sc = 0;
  for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++) {
    const int t = g->adjncy[e];
    const double so = sent_of(st, e), si = recv_of(st, e), wt = edge_weight(g, e);
    sc += wt;
    if (t == s) {
      d -= so; /* r sent to s from w; afterwards s sends to r from w */
      continue;
    }
    const int nt = st->node[t];
    if (nt != w)
      d -= so; /* r no longer sends from w */
    else
      d += si; /* t, still on w, now sends to r on b */
    c += wt * ((nt != b) - (nt != w));
  }
  for (int64_t e = g->xadj[s]; e < g->xadj[s + 1]; e++) {
    const int t = g->adjncy[e];
    const double so = sent_of(st, e), si = recv_of(st, e), wt = edge_weight(g, e);
    sc += wt;
    if (t == r) {
      d += so;
      continue;
    }
    const int nt = st->node[t];
    if (nt != w)
      d += so; /* s now sends from w */
    else
      d -= si; /* t on w no longer sends across to s */
    c += wt * ((nt != w) - (nt != b));
  }
  *dw = d;
  *dcut = c;
  *scale = sc;
}

/* One refinement of node_of/slot_of in place (arguments checked by the
 * caller): phases 1-4, the busiest node first. */
static int refine_one(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                      int *node_of, int *slot_of, int64_t budget, int *swaps)
{
  const int n = g->n;
  int rc = TIERS_OK;
  rstate_t st = {g, sent_bytes, node_of, NULL, 0, NULL, NULL, NULL, 0};
  st.sent = calloc((size_t)nodes, sizeof *st.sent);
  st.touched = malloc((size_t)nodes * sizeof *st.touched);
  st.before = malloc((size_t)nodes * sizeof *st.before);
  st.mark = calloc((size_t)nodes, 1);
  int64_t *start = calloc((size_t)nodes + 1, sizeof *start);
  int32_t *members = malloc((size_t)n * sizeof *members);
  int32_t *pos = malloc((size_t)n * sizeof *pos);
  int32_t *cand = malloc((size_t)n * sizeof *cand);
  char *seen = calloc((size_t)n, 1);
  klctx_t k = {&st, slot_of, members, pos, start, NULL, NULL, NULL, NULL,
               NULL, NULL, NULL, NULL, 0, budget};
  k.ca = malloc((size_t)n * sizeof *k.ca);
  k.cb = malloc((size_t)n * sizeof *k.cb);
  k.wmark = calloc((size_t)n, sizeof *k.wmark);
  k.locked = calloc((size_t)n, 1);
  k.R = malloc(KL_SIDE_MAX * sizeof *k.R);
  k.S = malloc(KL_SIDE_MAX * sizeof *k.S);
  k.sr = malloc(KL_SIDE_MAX * sizeof *k.sr);
  k.ss = malloc(KL_SIDE_MAX * sizeof *k.ss);
  int *stamp = calloc((size_t)nodes, sizeof *stamp);
  int *nb = malloc((size_t)nodes * sizeof *nb);
  int stamp_val = 0;
  if (!k.ca || !k.cb || !k.wmark || !k.locked || !k.R || !k.S || !k.sr || !k.ss || !stamp ||
      !nb || !st.sent || !st.touched || !st.before || !st.mark || !start || !members || !pos ||
      !cand || !seen) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  for (int v = 0; v < n; v++)
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++)
      if (node_of[g->adjncy[e]] != node_of[v]) {
        st.sent[node_of[v]] += sent_of(&st, e);
        st.cut += sent_of(&st, e);
      }
  /* members of each node: swaps keep the counts, so the slices stay */
  for (int v = 0; v < n; v++)
    start[node_of[v] + 1]++;
  for (int i = 0; i < nodes; i++)
    start[i + 1] += start[i];
  {
    int64_t *fill = calloc((size_t)nodes, sizeof *fill);
    if (!fill) {
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    for (int v = 0; v < n; v++) {
      pos[v] = (int32_t)(start[node_of[v]] + fill[node_of[v]]++);
      members[pos[v]] = v;
    }
    free(fill);
  }
  int done = 0;
  int64_t work = 0;
  /* Phase 1 works on the busiest node, phase 2 on every node in turn:
   * a swap is taken when no node it changes ends above both its old volume
   * and the busiest node's, the inter-node bytes do not grow, and either
   * the node worked on sends less (phase 1) or the inter-node bytes drop
   * (phase 2).  The best such swap of the node is applied, and again. */
  for (int phase = 1; phase <= 2; phase++) {
    int idle = 0; /* phase 2: nodes in a row without a swap */
    int w = 0;
    while (work < budget) {
      double top = 0;
      int busiest = 0;
      for (int i = 0; i < nodes; i++)
        if (st.sent[i] > top) {
          top = st.sent[i];
          busiest = i;
        }
      if (phase == 1)
        w = busiest;
      if (st.sent[w] <= 0 && phase == 1)
        break;
      /* candidates: ranks of other nodes adjacent to node w */
      int nc = 0;
      for (int64_t i = start[w]; i < start[w + 1]; i++) {
        const int u = members[i];
        for (int64_t e = g->xadj[u]; e < g->xadj[u + 1]; e++) {
          const int t = g->adjncy[e];
          if (node_of[t] != w && !seen[t]) {
            seen[t] = 1;
            cand[nc++] = t;
          }
        }
      }
      for (int j = 0; j < nc; j++)
        seen[cand[j]] = 0;
      int best_r = -1, best_s = -1;
      double best_a = 0, best_b = 0;
      for (int64_t i = start[w]; i < start[w + 1] && work < budget; i++) {
        const int r = members[i];
        int boundary = 0;
        for (int64_t e = g->xadj[r]; e < g->xadj[r + 1] && !boundary; e++)
          boundary = node_of[g->adjncy[e]] != w;
        if (!boundary)
          continue;
        for (int j = 0; j < nc && work < budget; j++) {
          const int s = cand[j];
          const int b = node_of[s];
          /* only pairs where r talks to b (or s to w directly): others
           * cannot lower w's volume by much and are many */
          int talks = 0;
          for (int64_t e = g->xadj[r]; e < g->xadj[r + 1] && !talks; e++)
            talks = node_of[g->adjncy[e]] == b;
          if (!talks)
            continue;
          work += (g->xadj[r + 1] - g->xadj[r]) + (g->xadj[s + 1] - g->xadj[s]) + 2;
          const double cut0 = st.cut, w0 = st.sent[w];
          /* a swap that cannot gain (or that adds inter-node bytes) is not
           * made and undone: the exact test below would refuse it; the
           * margin covers the rounding of the two ways of summing */
          {
            double dw, dcut, scale;
            swap_delta(&st, r, s, w, b, &dw, &dcut, &scale);
            const double margin = 1e-9 * (scale + fabs(w0) + fabs(cut0));
            if ((phase == 1 ? dw : dcut) > margin || dcut > margin)
              continue;
          }
          move_rank(&st, r, b);
          move_rank(&st, s, w);
          int ok = !lower(cut0, st.cut); /* cut' <= cut */
          for (int q = 0; q < st.nt && ok; q++) {
            const int x = st.touched[q];
            if (lower(st.before[q], st.sent[x]) && !lower(st.sent[x], top))
              ok = 0; /* x grew to the busiest node's volume or more */
          }
          double ka = phase == 1 ? st.sent[w] : st.cut, kb = phase == 1 ? st.cut : st.sent[w];
          int gains = phase == 1 ? lower(st.sent[w], w0) : lower(st.cut, cut0);
          /* undo */
          move_rank(&st, s, b);
          move_rank(&st, r, w);
          for (int q = 0; q < st.nt; q++)
            st.sent[st.touched[q]] = st.before[q]; /* exact values back */
          st.cut = cut0;
          clear_touched(&st);
          if (ok && gains &&
              (best_r < 0 || lower(ka, best_a) || (!lower(best_a, ka) && lower(kb, best_b)))) {
            best_r = r;
            best_s = s;
            best_a = ka;
            best_b = kb;
          }
        }
      }
      if (best_r < 0) {
        if (phase == 1)
          break;
        w = (w + 1) % nodes;
        if (++idle >= nodes)
          break;
        continue;
      }
      idle = 0;
      const int b = node_of[best_s];
      move_rank(&st, best_r, b);
      move_rank(&st, best_s, w);
      clear_touched(&st);
      const int32_t pr = pos[best_r], ps = pos[best_s];
      members[pr] = best_s;
      members[ps] = best_r;
      pos[best_r] = ps;
      pos[best_s] = pr;
      const int tmp = slot_of[best_r];
      slot_of[best_r] = slot_of[best_s];
      slot_of[best_s] = tmp;
      done++;
    }
  }
  /* Phases 3 and 4: Kernighan-Lin between pairs of nodes, which can pass
   * through worse swaps to reach a better state: the busiest node with
   * each node it talks to, for its sent bytes (the inter-node bytes not
   * growing), then every pair of nodes that talk, for the inter-node bytes
   * (no node above the busiest node's volume).  Their own budget. */
  k.work = 0;
  {
    const double limit3 = st.cut;
    while (k.work < k.budget) {
      int w = 0;
      for (int i = 1; i < nodes; i++)
        if (st.sent[i] > st.sent[w])
          w = i;
      if (st.sent[w] <= 0)
        break;
      const int c = node_neighbours(&st, start, members, w, 0, stamp, &stamp_val, nb);
      k.work += nodes + (start[w + 1] - start[w]);
      int kept = 0;
      for (int j = 0; j < c && !kept && k.work < k.budget; j++)
        kept = kl_pair(&k, w, nb[j], 1, INFINITY, limit3);
      if (!kept)
        break;
      done += kept;
    }
    for (int pass = 0; pass < 4 && k.work < k.budget; pass++) {
      int improved = 0;
      /* the busiest node's volume as the pass starts: no node goes above
       * it, so the busiest node's volume never grows */
      double top = 0;
      for (int i = 0; i < nodes; i++)
        top = fmax(top, st.sent[i]);
      for (int a = 0; a < nodes && k.work < k.budget; a++) {
        const int c = node_neighbours(&st, start, members, a, 1, stamp, &stamp_val, nb);
        k.work += start[a + 1] - start[a];
        for (int j = 0; j < c && k.work < k.budget; j++) {
          const int kept = kl_pair(&k, a, nb[j], 0, top, INFINITY);
          done += kept;
          improved |= kept > 0;
        }
      }
      if (!improved)
        break;
    }
  }
  if (swaps)
    *swaps = done;
out:
  free(k.ca);
  free(k.cb);
  free(k.wmark);
  free(k.locked);
  free(k.R);
  free(k.S);
  free(k.sr);
  free(k.ss);
  free(stamp);
  free(nb);
  free(st.sent);
  free(st.touched);
  free(st.before);
  free(st.mark);
  free(start);
  free(members);
  free(pos);
  free(cand);
  free(seen);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Refinement: chains of moves (cyclic exchanges)
 *
 * A pair swap moves two ranks at once between two nodes; a chain moves one
 * rank at a time: a rank leaves node h for node o (h one rank short, o one
 * over its slots), then a rank of o moves on, to h (a swap) or to a third
 * node, which is then the one over, and so on until a move reaches h and
 * every node holds its slots again: a cyclic exchange among 2, 3 or more
 * nodes, which no sequence of improving pair swaps need find.  Moves are
 * Fiduccia-Mattheyses style: each rank once a pass, the best move first
 * even when it makes things worse, the pass cut back to its best balanced
 * state (every node at its slot count).  With out[r][t] / in[r][t] the
 * bytes rank r sends to / receives from the ranks of node t and S_r all r
 * sends, a move of r from node x to node y changes only x's and y's sent
 * bytes:
 *   sent[x] += in[r][x] - (S_r - out[r][x]),  sent[y] += (S_r - out[r][y]) - in[r][y],
 *   cut     += (out[r][x] + in[r][x]) - (out[r][y] + in[r][y]),
 * so every move is judged exactly in O(1) from the two tables, which a
 * move updates along the moved rank's edges. */

/* Moves one chain may make before it must close (a move to the short node). */
#define CHAIN_OPEN_MAX 8
/* A pass stops this many moves after its best state. */
#define CHAIN_STALL (2 * CHAIN_OPEN_MAX)
/* Passes of each kind, at most. */
#define CHAIN_PASSES 8
/* The tables hold ranks x nodes entries each: the chains run only up to
 * this many (e.g. 2,048 ranks on 128 nodes). */
#define CHAIN_CELLS_MAX (1 << 18)

typedef struct chain {
  const tiers_map_graph_t *g;
  const double *out_e; /* per CSR entry, bytes v sends to adjncy[e] (NULL: half) */
  int n, nodes;
  int *node, *slot_of;
  double *sent, cut;
  double *outw, *inw;  /* n x nodes */
  double *tot;         /* per rank, all it sends */
  int *ext;            /* per rank, its neighbours on other nodes */
  int32_t *mem;        /* per node its ranks: mem[moff[i] .. moff[i] + cnt[i]) */
  int64_t *moff;
  int *cnt;
  int32_t *mpos;       /* a rank's index in its node's list */
  char *locked, *used;
  int32_t *seq_r, *seq_from, *oldslot;
  double *wrs, *wsr;   /* per rank, scratch: bytes with the rank being tried */
  int top3[3];
  int64_t work, budget;
} chain_t;

static double chain_sent_e(const chain_t *c, int64_t e)
{
  return c->out_e ? c->out_e[e] : 0.5 * edge_weight(c->g, e);
}

/* The three nodes that send most (-1 where there are fewer nodes). */
static void chain_top3(chain_t *c)
{
  c->top3[0] = c->top3[1] = c->top3[2] = -1;
  for (int i = 0; i < c->nodes; i++) {
    const double s = c->sent[i];
    int k = 3;
    while (k > 0 && (c->top3[k - 1] < 0 || c->sent[c->top3[k - 1]] < s))
      k--;
    if (k < 3) {
      for (int j = 2; j > k; j--)
        c->top3[j] = c->top3[j - 1];
      c->top3[k] = i;
    }
  }
  c->work += c->nodes;
}

/* The most any node other than x and y sends. */
static double chain_top_other(const chain_t *c, int x, int y)
{
  for (int k = 0; k < 3; k++)
    if (c->top3[k] >= 0 && c->top3[k] != x && c->top3[k] != y)
      return c->sent[c->top3[k]];
  return 0;
}

static void chain_move(chain_t *c, int r, int y)
{
  const tiers_map_graph_t *g = c->g;
  const int x = c->node[r], nodes = c->nodes;
  double *o = c->outw + (size_t)r * nodes, *in = c->inw + (size_t)r * nodes;
  c->sent[x] += in[x] - (c->tot[r] - o[x]);
  c->sent[y] += (c->tot[r] - o[y]) - in[y];
  c->cut += (o[x] + in[x]) - (o[y] + in[y]);
  int ext = 0;
  for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++) {
    const int u = g->adjncy[e];
    const double so = chain_sent_e(c, e), si = edge_weight(g, e) - so;
    double *ou = c->outw + (size_t)u * nodes, *iu = c->inw + (size_t)u * nodes;
    ou[x] -= si;
    ou[y] += si;
    iu[x] -= so;
    iu[y] += so;
    if (c->node[u] == x)
      c->ext[u]++;
    else if (c->node[u] == y)
      c->ext[u]--;
    ext += c->node[u] != y;
  }
  c->ext[r] = ext;
  c->work += g->xadj[r + 1] - g->xadj[r];
  /* node lists */
  const int32_t p = c->mpos[r];
  const int32_t last = c->mem[c->moff[x] + c->cnt[x] - 1];
  c->mem[c->moff[x] + p] = last;
  c->mpos[last] = p;
  c->cnt[x]--;
  c->mem[c->moff[y] + c->cnt[y]] = r;
  c->mpos[r] = c->cnt[y]++;
  c->node[r] = y;
  chain_top3(c);
}

/* Whether (a1, a2, a3) is below (b1, b2, b3), the first measure first. */
static int key3_lower(double a1, double a2, double a3, double b1, double b2, double b3)
{
  if (lower(a1, b1) || lower(b1, a1))
    return lower(a1, b1);
  if (lower(a2, b2) || lower(b2, a2))
    return lower(a2, b2);
  return lower(a3, b3);
}

/* One pass.  mode 0: the inter-node bytes first, then the busiest node's
 * sent bytes, among balanced states whose busiest node sends at most
 * limit_top; mode 1: the busiest node first, then the inter-node bytes,
 * among balanced states with at most limit_cut inter-node bytes.  Moves
 * are chosen by the same measures (mode 1 then by how much the two nodes'
 * squared volumes drop, so that a node tied with the busiest one counts),
 * those that break the limit last.  Returns the moves kept. */
static int chain_pass(chain_t *c, int mode, double limit_top, double limit_cut)
{
  const int n = c->n, nodes = c->nodes;
  double top = c->sent[c->top3[0]];
  double best1 = mode == 0 ? c->cut : top, best2 = mode == 0 ? top : c->cut;
  int best_p = 0, steps = 0, hole = -1, over = -1, open = 0;
  memset(c->locked, 0, (size_t)n);
  while (c->work < c->budget && steps < n && steps - best_p < CHAIN_STALL) {
    int br = -1, bt = -1, bad_b = 1;
    double b1 = INFINITY, b2 = INFINITY, b3 = INFINITY;
    /* the ranks that may move: any rank that talks to another node when
     * every node holds its slots, else those of the node over them */
    const int64_t lo = over < 0 ? 0 : c->moff[over];
    const int64_t hi = over < 0 ? n : c->moff[over] + c->cnt[over];
    c->work += hi - lo;
    for (int64_t i = lo; i < hi; i++) {
      const int r = over < 0 ? (int)i : c->mem[i];
      if (c->locked[r] || (over < 0 && c->ext[r] == 0))
        continue;
      const int x = c->node[r];
      const double *o = c->outw + (size_t)r * nodes, *in = c->inw + (size_t)r * nodes;
      const double s_r = c->tot[r];
      c->work += nodes;
      for (int y = 0; y < nodes; y++) {
        if (y == x || (y != hole && o[y] + in[y] <= 0))
          continue;
        if (over >= 0 && open >= CHAIN_OPEN_MAX && y != hole)
          continue;
        const double sx = c->sent[x] + in[x] - (s_r - o[x]);
        const double sy = c->sent[y] + (s_r - o[y]) - in[y];
        const double cut = c->cut + (o[x] + in[x]) - (o[y] + in[y]);
        const double t = fmax(fmax(sx, sy), chain_top_other(c, x, y));
        const double sq = sx * sx + sy * sy - c->sent[x] * c->sent[x] -
                          c->sent[y] * c->sent[y];
        const double k1 = mode == 0 ? cut : t, k2 = mode == 0 ? t : sq;
        const double k3 = mode == 0 ? 0 : cut;
        const int bad = mode == 0 ? lower(limit_top, t) : lower(limit_cut, cut);
        if (br < 0 || bad < bad_b || (bad == bad_b && key3_lower(k1, k2, k3, b1, b2, b3))) {
          br = r;
          bt = y;
          b1 = k1;
          b2 = k2;
          b3 = k3;
          bad_b = bad;
        }
      }
    }
    if (br < 0)
      break;
    const int from = c->node[br];
    c->seq_r[steps] = br;
    c->seq_from[steps] = from;
    steps++;
    chain_move(c, br, bt);
    c->locked[br] = 1;
    if (over < 0) {
      hole = from;
      over = bt;
      open = 1;
    } else if (bt == hole) {
      hole = over = -1;
      open = 0;
    } else {
      over = bt;
      open++;
    }
    if (over < 0) {
      top = c->sent[c->top3[0]];
      const double k1 = mode == 0 ? c->cut : top, k2 = mode == 0 ? top : c->cut;
      const int ok = mode == 0 ? !lower(limit_top, top) : !lower(limit_cut, c->cut);
      if (ok && key3_lower(k1, k2, 0, best1, best2, 0)) {
        best1 = k1;
        best2 = k2;
        best_p = steps;
      }
    }
  }
  for (int p = steps - 1; p >= best_p; p--)
    chain_move(c, c->seq_r[p], c->seq_from[p]);
  /* slots: the ranks that arrived at a node take the slots its leavers
   * freed (the counts match: every node holds its slots again; each rank
   * moved at most once in the pass) */
  for (int p = 0; p < best_p; p++) {
    c->oldslot[p] = c->slot_of[c->seq_r[p]];
    c->used[p] = 0;
  }
  for (int p = 0; p < best_p; p++) {
    const int y = c->node[c->seq_r[p]];
    for (int q = 0; q < best_p; q++)
      if (!c->used[q] && c->seq_from[q] == y) {
        c->used[q] = 1;
        c->slot_of[c->seq_r[p]] = c->oldslot[q];
        break;
      }
  }
  c->work += (int64_t)best_p * best_p;
  return best_p;
}

static void chain_close(chain_t *c)
{
  free(c->sent);
  free(c->outw);
  free(c->inw);
  free(c->tot);
  free(c->ext);
  free(c->mem);
  free(c->moff);
  free(c->cnt);
  free(c->mpos);
  free(c->locked);
  free(c->used);
  free(c->seq_r);
  free(c->seq_from);
  free(c->oldslot);
  free(c->wrs);
  free(c->wsr);
  memset(c, 0, sizeof *c);
}

/* The tables, the node lists, the sent bytes and the cut of the placement
 * in c->node (every node at its slot count).  Work: ranks x nodes + edges. */
static void chain_load(chain_t *c)
{
  const tiers_map_graph_t *g = c->g;
  const int n = c->n, nodes = c->nodes;
  memset(c->sent, 0, (size_t)nodes * sizeof *c->sent);
  memset(c->outw, 0, (size_t)n * nodes * sizeof *c->outw);
  memset(c->inw, 0, (size_t)n * nodes * sizeof *c->inw);
  memset(c->tot, 0, (size_t)n * sizeof *c->tot);
  memset(c->ext, 0, (size_t)n * sizeof *c->ext);
  memset(c->cnt, 0, (size_t)nodes * sizeof *c->cnt);
  c->cut = 0;
  for (int v = 0; v < n; v++) {
    const int x = c->node[v];
    c->cnt[x]++;
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      const int t = c->node[g->adjncy[e]];
      const double so = chain_sent_e(c, e);
      c->outw[(size_t)v * nodes + t] += so;
      c->inw[(size_t)v * nodes + t] += edge_weight(g, e) - so;
      c->tot[v] += so;
      if (t != x) {
        c->sent[x] += so;
        c->cut += so;
        c->ext[v]++;
      }
    }
  }
  /* each node's list has room for one rank over its slots */
  for (int i = 0; i < nodes; i++)
    c->moff[i + 1] = c->moff[i] + c->cnt[i] + 1;
  memset(c->cnt, 0, (size_t)nodes * sizeof *c->cnt);
  for (int v = 0; v < n; v++) {
    const int x = c->node[v];
    c->mem[c->moff[x] + c->cnt[x]] = v;
    c->mpos[v] = c->cnt[x]++;
  }
  c->work += (int64_t)n * nodes + g->xadj[n];
  chain_top3(c);
}

/* Allocates the chains' tables for node_of/slot_of (changed in place by
 * the passes) and loads them.  Returns TIERS_OK or TIERS_ERR_NOMEM. */
static int chain_open(chain_t *c, const tiers_map_graph_t *g, const double *sent_bytes,
                      int nodes, int *node_of, int *slot_of, int64_t budget)
{
  const int n = g->n;
  memset(c, 0, sizeof *c);
  c->g = g;
  c->out_e = sent_bytes;
  c->n = n;
  c->nodes = nodes;
  c->node = node_of;
  c->slot_of = slot_of;
  c->budget = budget;
  c->sent = calloc((size_t)nodes, sizeof *c->sent);
  c->outw = calloc((size_t)n * nodes, sizeof *c->outw);
  c->inw = calloc((size_t)n * nodes, sizeof *c->inw);
  c->tot = calloc((size_t)n, sizeof *c->tot);
  c->ext = calloc((size_t)n, sizeof *c->ext);
  c->mem = malloc(((size_t)n + (size_t)nodes) * sizeof *c->mem);
  c->moff = calloc((size_t)nodes + 1, sizeof *c->moff);
  c->cnt = calloc((size_t)nodes, sizeof *c->cnt);
  c->mpos = malloc((size_t)n * sizeof *c->mpos);
  c->locked = malloc((size_t)n);
  c->used = malloc((size_t)n);
  c->seq_r = malloc((size_t)n * sizeof *c->seq_r);
  c->seq_from = malloc((size_t)n * sizeof *c->seq_from);
  c->oldslot = malloc((size_t)n * sizeof *c->oldslot);
  c->wrs = calloc((size_t)n, sizeof *c->wrs);
  c->wsr = calloc((size_t)n, sizeof *c->wsr);
  if (!c->sent || !c->outw || !c->inw || !c->tot || !c->ext || !c->mem || !c->moff ||
      !c->cnt || !c->mpos || !c->locked || !c->used || !c->seq_r || !c->seq_from ||
      !c->oldslot || !c->wrs || !c->wsr) {
    chain_close(c);
    return tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
  }
  chain_load(c);
  return TIERS_OK;
}

/* Chain passes from the loaded state, never above limit_cut inter-node
 * bytes nor limit_top from the busiest node: passes for the inter-node
 * bytes first until one keeps nothing, then passes for the busiest node
 * (the inter-node bytes not above what the first reached), within the
 * budget.  Returns the moves kept. */
static int chain_run(chain_t *c, double limit_cut, double limit_top)
{
  int moves = 0;
  for (int pass = 0; pass < CHAIN_PASSES && c->work < c->budget; pass++) {
    const int got = chain_pass(c, 0, limit_top, INFINITY);
    moves += got;
    if (!got)
      break;
  }
  const double cut_reached = fmin(limit_cut, c->cut);
  for (int pass = 0; pass < CHAIN_PASSES && c->work < c->budget; pass++) {
    const int got = chain_pass(c, 1, INFINITY, cut_reached);
    moves += got;
    if (!got)
      break;
  }
  return moves;
}

/* Chain passes on node_of/slot_of in place (chain_run), within budget
 * (entries of the tables read and edges visited).  Leaves the placement
 * as it is where ranks x nodes is above CHAIN_CELLS_MAX.  *moves: moves
 * kept. */
static int chain_refine(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                        int *node_of, int *slot_of, int64_t budget, double limit_cut,
                        double limit_top, int *moves)
{
  *moves = 0;
  if ((int64_t)g->n * nodes > CHAIN_CELLS_MAX || nodes < 2)
    return TIERS_OK;
  chain_t c;
  TIERS_CALL(chain_open(&c, g, sent_bytes, nodes, node_of, slot_of, budget));
  *moves = chain_run(&c, limit_cut, limit_top);
  chain_close(&c);
  return TIERS_OK;
}

/* ------------------------------------------------------------------------ */
/* Balancing: the busiest node, within a budget of inter-node bytes
 *
 * Swaps and chains that never raise the inter-node bytes stop where the
 * busiest node can only send less if more bytes cross nodes for a while.
 * The balancing phase is an iterated local search that passes through
 * such states: a round kicks the placement with a swap of a rank of the
 * busiest node x and a rank of another node y that lowers the busiest
 * node's volume (the inter-node bytes may rise), then repairs it -- greedy
 * swaps (the busiest node's volume with the inter-node bytes not growing,
 * then the inter-node bytes node by node with the busiest node not
 * growing), then chain passes (the inter-node bytes first, the busiest node
 * not above the kick's; then the busiest node).  Each round repairs the
 * BAL_TRY kicks that leave the busiest node least loaded (then the fewest
 * inter-node bytes) and goes on from the best repaired state, which may
 * lie up to BAL_SLACK above the budget; the result is the best state seen
 * within the budget (busiest node first, then inter-node bytes).
 *
 * A swap is judged exactly in O(1) from the chains' tables (only x's and
 * y's sent bytes and the cut change); with b_rs / b_sr the bytes r sends
 * s / s sends r:
 *   sent[x] += in[r][x] - (S_r - out[r][x]) + S_s - out[s][x] - in[s][x] + b_rs + b_sr,
 *   sent[y] += S_r - out[r][y] - in[r][y] + in[s][y] - (S_s - out[s][y]) + b_rs + b_sr,
 *   cut     += out[r][x] + in[r][x] - out[r][y] - in[r][y]
 *            + out[s][y] + in[s][y] - out[s][x] - in[s][x] + 2 (b_rs + b_sr). */

/* Kicks repaired per round. */
#define BAL_TRY 6
/* Rounds at most, and rounds in a row that find no better state. */
#define BAL_ROUNDS 24
#define BAL_IDLE 4
/* How far above the budget (relative) a round may go on from. */
#define BAL_SLACK 0.02
/* Sweeps of the greedy repair at most. */
#define BAL_SWEEPS 16

typedef struct balswap {
  int r, s;
  double top, cut;
} balswap_t;

/* Keeps the BAL_TRY best swaps by (top, cut) in list, sorted. */
static void bal_keep(balswap_t *list, int *count, int r, int s, double top, double cut)
{
  int k = *count;
  if (k == BAL_TRY && !key3_lower(top, cut, 0, list[k - 1].top, list[k - 1].cut, 0))
    return;
  if (k < BAL_TRY)
    k++;
  int i = k - 1;
  while (i > 0 && key3_lower(top, cut, 0, list[i - 1].top, list[i - 1].cut, 0)) {
    list[i] = list[i - 1];
    i--;
  }
  list[i] = (balswap_t){r, s, top, cut};
  *count = k;
}

/* r's bytes with each rank into c->wrs (r sends) / c->wsr (r receives). */
static void bal_mark(chain_t *c, int r)
{
  const tiers_map_graph_t *g = c->g;
  for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++) {
    const int u = g->adjncy[e];
    const double so = chain_sent_e(c, e);
    c->wrs[u] += so;
    c->wsr[u] += edge_weight(g, e) - so;
  }
}

static void bal_unmark(chain_t *c, int r)
{
  const tiers_map_graph_t *g = c->g;
  for (int64_t e = g->xadj[r]; e < g->xadj[r + 1]; e++)
    c->wrs[g->adjncy[e]] = c->wsr[g->adjncy[e]] = 0;
  c->work += 2 * (g->xadj[r + 1] - g->xadj[r]);
}

/* After a swap of r (marked) and s: the two nodes' sent bytes, the
 * busiest node's and the cut. */
static void bal_swap(const chain_t *c, int r, int s, double *sx, double *sy, double *top,
                     double *cut)
{
  const int nodes = c->nodes, x = c->node[r], y = c->node[s];
  const double *ro = c->outw + (size_t)r * nodes, *ri = c->inw + (size_t)r * nodes;
  const double *so = c->outw + (size_t)s * nodes, *si = c->inw + (size_t)s * nodes;
  const double w = c->wrs[s] + c->wsr[s];
  *sx = c->sent[x] + ri[x] - (c->tot[r] - ro[x]) + c->tot[s] - so[x] - si[x] + w;
  *sy = c->sent[y] + c->tot[r] - ro[y] - ri[y] + si[y] - (c->tot[s] - so[y]) + w;
  *top = fmax(fmax(*sx, *sy), chain_top_other(c, x, y));
  *cut = c->cut + ro[x] + ri[x] - ro[y] - ri[y] + so[y] + si[y] - so[x] - si[x] + 2 * w;
}

static void bal_apply(chain_t *c, int r, int s)
{
  const int x = c->node[r], y = c->node[s];
  chain_move(c, r, y);
  chain_move(c, s, x);
  const int tmp = c->slot_of[r];
  c->slot_of[r] = c->slot_of[s];
  c->slot_of[s] = tmp;
}

/* The kicks: the BAL_TRY swaps of a rank of the busiest node with a rank
 * that talks to it or sits on a node the first talks to, which lower the
 * busiest node's volume most (then the cut), their cut at most limit.
 * Returns how many. */
static int bal_kicks(chain_t *c, double limit, balswap_t *list)
{
  const int nodes = c->nodes;
  const int x = c->top3[0];
  const double top = c->sent[x];
  int count = 0;
  for (int64_t i = c->moff[x]; i < c->moff[x] + c->cnt[x]; i++) {
    const int r = c->mem[i];
    if (c->ext[r] == 0)
      continue;
    bal_mark(c, r);
    const double *ro = c->outw + (size_t)r * nodes, *ri = c->inw + (size_t)r * nodes;
    for (int s = 0; s < c->n; s++) {
      const int y = c->node[s];
      if (y == x)
        continue;
      const double *so = c->outw + (size_t)s * nodes, *si = c->inw + (size_t)s * nodes;
      if (so[x] + si[x] <= 0 && ro[y] + ri[y] <= 0)
        continue;
      double sx, sy, t, cut;
      bal_swap(c, r, s, &sx, &sy, &t, &cut);
      if (lower(t, top) && !lower(limit, cut))
        bal_keep(list, &count, r, s, t, cut);
    }
    bal_unmark(c, r);
    c->work += c->n;
  }
  return count;
}

/* The best improving swap of a rank of node w with a rank of a node it
 * talks to that talks to w: mode 1 by the busiest node's volume, then the
 * cut (the cut not growing); mode 2 by the cut, then the busiest node
 * (the busiest node not growing).  Returns whether there is one. */
static int bal_best(chain_t *c, int w, int mode, int *br, int *bs)
{
  const int nodes = c->nodes;
  const double top0 = c->sent[c->top3[0]], cut0 = c->cut;
  double b1 = mode == 1 ? top0 : cut0, b2 = mode == 1 ? cut0 : top0;
  int found = 0;
  for (int64_t i = c->moff[w]; i < c->moff[w] + c->cnt[w]; i++) {
    const int r = c->mem[i];
    if (c->ext[r] == 0)
      continue;
    bal_mark(c, r);
    const double *ro = c->outw + (size_t)r * nodes, *ri = c->inw + (size_t)r * nodes;
    for (int y = 0; y < nodes; y++) {
      if (y == w || ro[y] + ri[y] <= 0)
        continue;
      for (int64_t j = c->moff[y]; j < c->moff[y] + c->cnt[y]; j++) {
        const int s = c->mem[j];
        const double *so = c->outw + (size_t)s * nodes, *si = c->inw + (size_t)s * nodes;
        if (so[w] + si[w] <= 0)
          continue;
        double sx, sy, top, cut;
        bal_swap(c, r, s, &sx, &sy, &top, &cut);
        if (mode == 1 ? lower(cut0, cut) : lower(top0, top))
          continue;
        const double k1 = mode == 1 ? top : cut, k2 = mode == 1 ? cut : top;
        if (key3_lower(k1, k2, 0, b1, b2, 0)) {
          b1 = k1;
          b2 = k2;
          *br = r;
          *bs = s;
          found = 1;
        }
      }
      c->work += c->cnt[y];
    }
    bal_unmark(c, r);
  }
  return found;
}

/* The repair after a kick: greedy swaps (the busiest node, then the cut
 * on every node in turn) until a sweep finds none, then chain passes
 * within roam inter-node bytes. */
static void bal_repair(chain_t *c, double roam)
{
  for (int sweep = 0; sweep < BAL_SWEEPS && c->work < c->budget; sweep++) {
    int got = 0, r = -1, s = -1;
    while (c->work < c->budget && bal_best(c, c->top3[0], 1, &r, &s)) {
      bal_apply(c, r, s);
      got++;
    }
    for (int w = 0; w < c->nodes && c->work < c->budget; w++)
      while (c->work < c->budget && bal_best(c, w, 2, &r, &s)) {
        bal_apply(c, r, s);
        got++;
      }
    if (!got)
      break;
  }
  chain_run(c, roam, c->sent[c->top3[0]]);
}

/* Copies a placement (node and slot of each of n ranks). */
static void copy_placement(int *to_node, int *to_slot, const int *node, const int *slot, int n)
{
  memcpy(to_node, node, (size_t)n * sizeof *to_node);
  memcpy(to_slot, slot, (size_t)n * sizeof *to_slot);
}

/* Loads state (node, slot) into c, kicks it with list[k] and repairs it. */
static void bal_try(chain_t *c, const int *node, const int *slot, const balswap_t *kick,
                    double roam)
{
  copy_placement(c->node, c->slot_of, node, slot, c->n);
  chain_load(c);
  bal_apply(c, kick->r, kick->s);
  bal_repair(c, roam);
}

/* The balancing phase on the loaded state c (its node_of/slot_of changed
 * in place), within limit_cut inter-node bytes: the result is the start
 * or a state with at most limit_cut inter-node bytes whose busiest node
 * sends less (or as much, with fewer inter-node bytes).  Scratch: 4 rows
 * of n ints.  Returns the number of the round that found the result (0:
 * the start is kept). */
static int balance(chain_t *c, double limit_cut, int *scratch)
{
  const int n = c->n;
  int *best_node = scratch, *best_slot = scratch + n;
  int *cur_node = scratch + 2 * (size_t)n, *cur_slot = scratch + 3 * (size_t)n;
  double best_top = c->sent[c->top3[0]], best_cut = c->cut;
  if (lower(limit_cut, best_cut))
    return 0;
  copy_placement(best_node, best_slot, c->node, c->slot_of, n);
  copy_placement(cur_node, cur_slot, c->node, c->slot_of, n);
  const double roam = limit_cut * (1 + BAL_SLACK);
  int kept = 0, idle = 0;
  balswap_t list[BAL_TRY];
  for (int round = 0; round < BAL_ROUNDS && idle < BAL_IDLE && c->work < c->budget; round++) {
    /* kicks may go a little further than the rounds' states */
    const int count = bal_kicks(c, roam * (1 + 2 * BAL_SLACK), list);
    double go_top = INFINITY, go_cut = INFINITY;
    int go_over = 1, go = -1;
    idle++;
    for (int k = 0; k < count && c->work < c->budget; k++) {
      bal_try(c, cur_node, cur_slot, &list[k], roam);
      const double top = c->sent[c->top3[0]], cut = c->cut;
      const int over = lower(limit_cut, cut);
      if (!over && key3_lower(top, cut, 0, best_top, best_cut, 0)) {
        best_top = top;
        best_cut = cut;
        copy_placement(best_node, best_slot, c->node, c->slot_of, n);
        kept = round + 1;
        idle = 0;
      }
      /* the round goes on from its best try within roam: within the
       * budget first, then the busiest node, then the cut */
      if (!lower(roam, cut) &&
          (go < 0 || over < go_over ||
           (over == go_over && key3_lower(top, cut, 0, go_top, go_cut, 0)))) {
        go = k;
        go_top = top;
        go_cut = cut;
        go_over = over;
      }
    }
    if (go < 0)
      break;
    /* redo the chosen try (cheaper than keeping a copy of every try) */
    bal_try(c, cur_node, cur_slot, &list[go], roam);
    copy_placement(cur_node, cur_slot, c->node, c->slot_of, n);
  }
  copy_placement(c->node, c->slot_of, best_node, best_slot, n);
  chain_load(c);
  return kept;
}

/* The inter-node bytes (both directions) and the bytes the busiest node
 * sends to other nodes; per_node: scratch of nodes entries. */
static void node_bytes(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                       const int *node_of, double *per_node, double *cut, double *top)
{
  const rstate_t st = {g, sent_bytes, NULL, NULL, 0, NULL, NULL, NULL, 0};
  memset(per_node, 0, (size_t)nodes * sizeof *per_node);
  *cut = 0;
  for (int v = 0; v < g->n; v++)
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++)
      if (node_of[g->adjncy[e]] != node_of[v]) {
        per_node[node_of[v]] += sent_of(&st, e);
        *cut += sent_of(&st, e);
      }
  *top = 0;
  for (int i = 0; i < nodes; i++)
    *top = fmax(*top, per_node[i]);
}

int tiers_map_refine(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                     int *node_of, int *slot_of, int64_t budget, int *swaps)
{
  return tiers_map_refine_within(g, sent_bytes, nodes, node_of, slot_of, budget, INFINITY,
                                 swaps);
}

int tiers_map_refine_within(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                            int *node_of, int *slot_of, int64_t budget, double limit_cut,
                            int *swaps)
{
  TIERS_CALL(check_args(g));
  if (nodes < 1 || !node_of || !slot_of || budget < 0 || isnan(limit_cut))
    TIERS_ERROR(TIERS_ERR_ARG, "map: bad arguments to tiers_map_refine");
  const int n = g->n;
  for (int v = 0; v < n; v++)
    if (node_of[v] < 0 || node_of[v] >= nodes)
      TIERS_ERROR(TIERS_ERR_ARG, "map: rank %d is on node %d, outside 0..%d", v, node_of[v],
                  nodes - 1);
  double cut0, top0, cut1, top1;
  double *scratch = malloc((size_t)nodes * sizeof *scratch);
  if (!scratch)
    TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory to refine %d ranks", n);
  node_bytes(g, sent_bytes, nodes, node_of, scratch, &cut0, &top0);
  int done = 0;
  int rc = refine_one(g, sent_bytes, nodes, node_of, slot_of, budget, &done);
  /* Then chains of moves from that result, for the inter-node bytes first
   * (the busiest node not above the start's), then for the busiest node
   * (the inter-node bytes not above what the first passes reached); kept
   * when the exact sums say it is no worse than the start on either
   * measure and lower than the swaps' result on the inter-node bytes, or
   * equal there and lower on the busiest node.  Then the balancing phase
   * on what was kept, within the inter-node bytes it has (or limit_cut
   * when lower); kept when the exact sums say its busiest node sends less
   * than the kept state's (or as much, with fewer inter-node bytes) and
   * its inter-node bytes are within that budget. */
  int *alt = NULL;
  if (rc == TIERS_OK && (int64_t)n * nodes <= CHAIN_CELLS_MAX && nodes > 1) {
    node_bytes(g, sent_bytes, nodes, node_of, scratch, &cut1, &top1);
    alt = malloc((size_t)6 * (size_t)n * sizeof *alt);
    if (!alt) {
      free(scratch);
      TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory to refine %d ranks", n);
    }
    copy_placement(alt, alt + n, node_of, slot_of, n);
    int moves = 0;
    rc = chain_refine(g, sent_bytes, nodes, alt, alt + n, budget, cut0, top0, &moves);
    if (rc == TIERS_OK && moves > 0) {
      double cut2, top2;
      node_bytes(g, sent_bytes, nodes, alt, scratch, &cut2, &top2);
      if (!lower(cut0, cut2) && !lower(top0, top2) &&
          (lower(cut2, cut1) || (!lower(cut1, cut2) && lower(top2, top1)))) {
        copy_placement(node_of, slot_of, alt, alt + n, n);
        done += moves;
        cut1 = cut2;
        top1 = top2;
      }
    }
    /* the balancing's budget: what the swaps and chains reached (and the
     * caller's limit), so that it trades nothing: its result is below
     * theirs on the busiest node and not above on the inter-node bytes */
    const double limit = fmin(limit_cut, cut1);
    /* a swap changes two nodes' volumes: where three or more nodes send
     * the most (a box tiling of a grid), no kick lowers the busiest */
    int at_top = 0;
    if (rc == TIERS_OK) {
      node_bytes(g, sent_bytes, nodes, node_of, scratch, &cut1, &top1);
      for (int i = 0; i < nodes; i++)
        at_top += !lower(scratch[i], top1);
    }
    if (rc == TIERS_OK && at_top < 3 && !lower(limit, cut1)) {
      copy_placement(alt, alt + n, node_of, slot_of, n);
      chain_t c;
      rc = chain_open(&c, g, sent_bytes, nodes, alt, alt + n, budget);
      int rounds = 0;
      if (rc == TIERS_OK) {
        rounds = balance(&c, limit, alt + 2 * (size_t)n);
        chain_close(&c);
      }
      if (rc == TIERS_OK && rounds > 0) {
        double cut3, top3;
        node_bytes(g, sent_bytes, nodes, alt, scratch, &cut3, &top3);
        if (!lower(limit, cut3) &&
            (lower(top3, top1) || (!lower(top1, top3) && lower(cut3, cut1)))) {
          copy_placement(node_of, slot_of, alt, alt + n, n);
          done += rounds;
        }
      }
    }
  }
  if (rc == TIERS_OK && swaps)
    *swaps = done;
  free(alt);
  free(scratch);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* What a placement costs */

int tiers_map_eval(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                   const tiers_map_node_t *node, const double *lat, const double *bw,
                   const int *node_of, const int *slot_of, tiers_map_cost_t *out)
{
  TIERS_CALL(check_args(g));
  if (nodes < 1 || !node || node->levels < 0 || (node->levels > 0 && !node->arity) || !lat ||
      !bw || !node_of || !slot_of || !out)
    TIERS_ERROR(TIERS_ERR_ARG, "map: bad arguments to tiers_map_eval");
  const int n = g->n, levels = node->levels;
  for (int i = 0; i < levels + 2; i++)
    if (!(bw[i] > 0) || !isfinite(bw[i]) || !(lat[i] >= 0) || !isfinite(lat[i]))
      TIERS_ERROR(TIERS_ERR_ARG, "map: layer %d has latency %g and bandwidth %g", i, lat[i],
                  bw[i]);
  for (int v = 0; v < n; v++)
    if (node_of[v] < 0 || node_of[v] >= nodes)
      TIERS_ERROR(TIERS_ERR_ARG, "map: rank %d is on node %d, outside 0..%d", v, node_of[v],
                  nodes - 1);
  int64_t stride[64];
  if (levels > 64)
    TIERS_ERROR(TIERS_ERR_ARG, "map: a node tree of %d levels (at most 64)", levels);
  {
    int64_t cores = 1;
    for (int i = 0; i < levels; i++)
      cores *= node->arity[i] > 0 ? node->arity[i] : 1;
    for (int i = 0; i < levels; i++) {
      cores /= node->arity[i] > 0 ? node->arity[i] : 1;
      stride[i] = cores;
    }
  }
  double *sent = calloc((size_t)nodes, sizeof *sent);
  double *recv = calloc((size_t)nodes, sizeof *recv);
  double *link = calloc((size_t)nodes, sizeof *link);
  if (!sent || !recv || !link) {
    free(sent);
    free(recv);
    free(link);
    TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory to evaluate a placement on %d nodes", nodes);
  }
  memset(out, 0, sizeof *out);
  out->rank = 0;
  for (int v = 0; v < n; v++) {
    const int nv = node_of[v];
    const int64_t sv = slot_of[v];
    double t = 0;
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++) {
      const int u = g->adjncy[e];
      const double b = sent_bytes ? sent_bytes[e] : 0.5 * edge_weight(g, e);
      const int nu = node_of[u];
      if (nu != nv) {
        out->inter += edge_weight(g, e) * 0.5; /* each direction of the pair once */
        if (b > 0) {
          sent[nv] += b;
          recv[nu] += b;
          link[nv] += b / bw[0];
          t += lat[0] + b / bw[0];
        }
        continue;
      }
      if (b <= 0)
        continue;
      int code = levels + 1; /* one core shared */
      const int64_t su = slot_of[u];
      for (int i = 0; i < levels; i++)
        if (sv / stride[i] != su / stride[i]) {
          code = 1 + i;
          break;
        }
      t += lat[code] + b / bw[code];
    }
    if (t > out->rank_s) {
      out->rank_s = t;
      out->rank = v;
    }
  }
  for (int i = 0; i < nodes; i++) {
    if (sent[i] > out->sent_max) {
      out->sent_max = sent[i];
      out->sent_node = i;
    }
    if (recv[i] > out->recv_max) {
      out->recv_max = recv[i];
      out->recv_node = i;
    }
    if (link[i] > out->link_s) {
      out->link_s = link[i];
      out->link_node = i;
    }
  }
  free(sent);
  free(recv);
  free(link);
  return TIERS_OK;
}

/* ------------------------------------------------------------------------ */
/* The whole search in one call */

/* Whether cost a ranks before b: a predicted time below b's beyond the
 * tie band, else (times tied) fewer bytes from the busiest node, then
 * fewer inter-node bytes.  fastest: the lowest time of the set. */
static int ranks_before(const tiers_map_cost_t *a, const tiers_map_cost_t *b, double fastest,
                        double tie)
{
  const double ta = fmax(a->rank_s, a->link_s), tb = fmax(b->rank_s, b->link_s);
  const double band = fastest * (1 + tie);
  const int a_in = ta <= band || !lower(fastest, ta), b_in = tb <= band || !lower(fastest, tb);
  if (a_in != b_in)
    return a_in;
  if (!a_in)
    return lower(ta, tb);
  if (lower(a->sent_max, b->sent_max) || lower(b->sent_max, a->sent_max))
    return lower(a->sent_max, b->sent_max);
  return lower(a->inter, b->inter);
}

static double cost_time(const tiers_map_cost_t *c)
{
  return fmax(c->rank_s, c->link_s);
}

/* The most and the second most bytes one node sends to other nodes
 * (``sent``: scratch for ``nodes`` doubles). */
static void top_two_sent(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                         const int *node_of, double *sent, double *top, double *next)
{
  memset(sent, 0, (size_t)nodes * sizeof *sent);
  for (int v = 0; v < g->n; v++)
    for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++)
      if (node_of[g->adjncy[e]] != node_of[v])
        sent[node_of[v]] += sent_bytes ? sent_bytes[e] : 0.5 * edge_weight(g, e);
  *top = *next = 0;
  for (int i = 0; i < nodes; i++) {
    if (sent[i] > *top) {
      *next = *top;
      *top = sent[i];
    } else if (sent[i] > *next) {
      *next = sent[i];
    }
  }
}

/* A second start is tried when the chosen placement's busiest node sends
 * more than this many times what the next one sends (docs/map.md). */
#define SECOND_GAP 1.25

/* ------------------------------------------------------------------------ */
/* A quick placement inside nodes (the extra starts' ranks on their cores) */

/* Bytes between rank v and the ranks whose mark is m (both directions). */
static double conn_to(const tiers_map_graph_t *g, const int *mark, int v, int m)
{
  double c = 0;
  for (int64_t e = g->xadj[v]; e < g->xadj[v + 1]; e++)
    if (mark[g->adjncy[e]] == m)
      c += edge_weight(g, e);
  return c;
}

static double weight_between(const tiers_map_graph_t *g, int a, int b)
{
  double w = 0;
  for (int64_t e = g->xadj[a]; e < g->xadj[a + 1]; e++)
    if (g->adjncy[e] == b)
      w += edge_weight(g, e);
  return w;
}

/* Passes of swaps at most per split. */
#define QUICK_PASSES 8

/*
 * Places ranks set[0..m) of one node on the cores below a tree object of
 * level lv whose first core is base: split into groups of at most
 * stride[lv] ranks, one per child -- each grown from the free rank with
 * the most bytes to the other free ranks by adding the free rank with the
 * most bytes to the group --, improved by swaps of two ranks of different
 * groups while one lowers the bytes between groups, then each group placed
 * below its child.  mark: per rank, 0 outside the set (scratch, left 0).
 */
static void quick_place(const tiers_map_graph_t *g, const tree_t *t, int lv, int *set, int m,
                        int base, int *mark, int *slot_of)
{
  const int cap = lv < t->levels ? (int)t->stride[lv] : 1;
  if (cap == 1 || m <= 1) { /* the children are cores: all pairs cost the same */
    for (int j = 0; j < m; j++)
      slot_of[set[j]] = base + j;
    return;
  }
  const int k = (m + cap - 1) / cap;
  if (k > 1) {
    /* greedy growth: group q gets marks q + 2, free ranks mark 1 */
    for (int j = 0; j < m; j++)
      mark[set[j]] = 1;
    int placed = 0;
    for (int q = 0; q < k; q++) {
      const int size = m - placed < cap ? m - placed : cap;
      for (int c = 0; c < size; c++) {
        int pick = -1;
        double best = -1;
        for (int j = placed; j < m; j++) {
          const double w = c == 0 ? conn_to(g, mark, set[j], 1) : conn_to(g, mark, set[j], q + 2);
          if (w > best) {
            best = w;
            pick = j;
          }
        }
        const int v = set[pick];
        set[pick] = set[placed];
        set[placed++] = v;
        mark[v] = q + 2;
      }
    }
    /* swaps between groups (group of position j: j / cap) */
    for (int pass = 0; pass < QUICK_PASSES; pass++) {
      int moved = 0;
      for (int a = 0; a < m; a++)
        for (int b = (a / cap + 1) * cap; b < m; b++) {
          const int va = set[a], vb = set[b], ga = mark[va], gb = mark[vb];
          /* bytes the swap cuts against those it stops cutting */
          const double cuts = conn_to(g, mark, va, ga) + conn_to(g, mark, vb, gb) +
                              2 * weight_between(g, va, vb);
          const double joins = conn_to(g, mark, va, gb) + conn_to(g, mark, vb, ga);
          if (lower(cuts, joins)) {
            mark[va] = gb;
            mark[vb] = ga;
            set[a] = vb;
            set[b] = va;
            moved = 1;
          }
        }
      if (!moved)
        break;
    }
    for (int j = 0; j < m; j++)
      mark[set[j]] = 0;
  }
  for (int q = 0; q < k; q++) {
    const int lo = q * cap, sz = m - lo < cap ? m - lo : cap;
    quick_place(g, t, lv + 1, set + lo, sz, base + q * cap, mark, slot_of);
  }
}

/* Every node's ranks on its cores by quick_place (node_of within 0..nodes). */
static int place_quick(const tiers_map_graph_t *g, const int *node_of, int nodes,
                       const tiers_map_node_t *node, int *slot_of)
{
  const int n = g->n;
  tree_t t = {node->levels, 1, NULL, NULL};
  for (int i = 0; i < node->levels; i++)
    t.cores *= node->arity[i];
  int64_t *start = calloc((size_t)nodes + 1, sizeof *start);
  int32_t *members = malloc((size_t)n * sizeof *members);
  int32_t *local = malloc((size_t)n * sizeof *local);
  int *set = malloc((size_t)n * sizeof *set);
  int *mark = calloc((size_t)n, sizeof *mark);
  t.stride = malloc(((size_t)t.levels + 1) * sizeof *t.stride);
  t.cost = malloc(((size_t)t.levels + 1) * sizeof *t.cost);
  int rc = TIERS_OK;
  if (!start || !members || !local || !set || !mark || !t.stride || !t.cost) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  tree_levels(&t, node);
  rc = node_groups(n, nodes, node_of, t.cores, start, members, local);
  if (rc != TIERS_OK)
    goto out;
  for (int i = 0; i < nodes; i++) {
    const int sz = (int)(start[i + 1] - start[i]);
    for (int j = 0; j < sz; j++)
      set[j] = members[start[i] + j];
    quick_place(g, &t, 0, set, sz, 0, mark, slot_of);
  }
out:
  free(start);
  free(members);
  free(local);
  free(set);
  free(mark);
  free(t.stride);
  free(t.cost);
  return rc;
}

/* The extra starts (tiers_map_search's extra_starts): Scotch's grouping of
 * the ranks onto the nodes (a complete graph of equal parts) with its
 * recursive-bipartitioning strategy, each part allowed some imbalance
 * (nodes over capacity are repaired after it), each node's ranks placed on
 * its cores by place_quick.  The second start allows 30 % and is refined
 * when Scotch's mapping has one node far above the others; the third
 * allows 50 % and replaces the search's result only when it is no worse on
 * either byte measure, better on one, and ranks first by the time model
 * (docs/map.md).  Which imbalance finds which basin was measured on the
 * row blocks of bench/map_vs_scotch's matrices. */
#define EXTRA_FLAGS SCOTCH_STRATRECURSIVE
/* Ranks at most for the extra starts (the quick in-node split is
 * quadratic in a node's ranks) */
#define EXTRA_STARTS_MAX 4096
#define SECOND_BALANCE 0.3
#define THIRD_BALANCE 0.5

static int start_group(const tiers_map_graph_t *g, int nodes, int cores, uint64_t seed,
                       double balance, int *node_of)
{
  int *cap = malloc((size_t)nodes * sizeof *cap);
  if (!cap)
    TIERS_ERROR(TIERS_ERR_NOMEM, "map: no memory");
  for (int i = 0; i < nodes; i++)
    cap[i] = cores;
  tiers_map_scotch_enter();
  int rc = group_costs(g, nodes, cap, NULL, seed, EXTRA_FLAGS, balance, node_of);
  tiers_map_scotch_leave();
  free(cap);
  return rc;
}

/* The second start's placement: its grouping, the ranks placed per node. */
static int second_start(const tiers_map_graph_t *g, const tiers_map_node_t *node, int nodes,
                        int cores, uint64_t seed, int *node_of, int *slot_of)
{
  int rc = start_group(g, nodes, cores, seed, SECOND_BALANCE, node_of);
  if (rc == TIERS_OK)
    rc = place_quick(g, node_of, nodes, node, slot_of);
  return rc;
}

/* The second and third starts, made on a thread of their own while the
 * first start is mapped, measured, compared and refined: whether the
 * second is needed is known only after the first mapping, whether the
 * third is kept only after the refinement.  The results are the same as
 * made afterwards on the calling thread (each call has its own deterministic Scotch context).  Valgrind's
 * helgrind finds the calls of two threads writing to two of libscotch's
 * static variables, the dummy links its gain tables and job pools end
 * their lists with: only the dummies' addresses are ever read, and
 * Scotch's own threads (a context of several) write them so too. */
typedef struct starts_job {
  const tiers_map_graph_t *g;
  const tiers_map_node_t *node;
  int tree_nodes, cores;
  uint64_t seed;
  int *node_of, *slot_of; /* the second start */
  int *group_of;          /* the third start's nodes */
  int rc, group_rc;
  pthread_mutex_t lock;
  pthread_cond_t tree_ready;
  int tree_done;
  pthread_t thread;
  int running;
} starts_job_t;

static void *starts_run(void *arg)
{
  starts_job_t *j = arg;
  /* below the calling thread: on a CPU it shares with it, it gives way */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
  int rc = second_start(j->g, j->node, j->tree_nodes, j->cores, j->seed, j->node_of,
                        j->slot_of);
  pthread_mutex_lock(&j->lock);
  j->rc = rc;
  j->tree_done = 1;
  pthread_cond_signal(&j->tree_ready);
  pthread_mutex_unlock(&j->lock);
  j->group_rc = start_group(j->g, j->tree_nodes, j->cores, j->seed, THIRD_BALANCE, j->group_of);
  return NULL;
}

/* Whether this process may run on more than one CPU (its affinity): a
 * second thread on one CPU only takes turns with the first. */
static int several_cpus(void)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 1;
}

static void starts_free(starts_job_t *j)
{
  free(j->node_of);
  free(j->slot_of);
  free(j->group_of);
  j->node_of = j->slot_of = j->group_of = NULL;
}

/* Starts the second and third starts' Scotch calls on their own thread
 * when the process has a second CPU; j->running says whether it did (the
 * calls are then made afterwards, when needed, on the calling thread). */
static void starts_spawn(starts_job_t *j)
{
  j->running = 0;
  if (!several_cpus())
    return;
  /* Scotch's process-wide random state is set up on its first use: made
   * here, on this thread, before two threads open contexts at once */
  SCOTCH_Context ctx;
  if (context_open(&ctx) != TIERS_OK)
    return;
  SCOTCH_contextExit(&ctx);
  const size_t n = (size_t)j->g->n;
  j->node_of = malloc(n * sizeof *j->node_of);
  j->slot_of = malloc(n * sizeof *j->slot_of);
  j->group_of = malloc(n * sizeof *j->group_of);
  if (!j->node_of || !j->slot_of || !j->group_of) {
    starts_free(j);
    return;
  }
  if (pthread_mutex_init(&j->lock, NULL) != 0) {
    starts_free(j);
    return;
  }
  if (pthread_cond_init(&j->tree_ready, NULL) != 0) {
    pthread_mutex_destroy(&j->lock);
    starts_free(j);
    return;
  }
  j->tree_done = 0;
  if (pthread_create(&j->thread, NULL, starts_run, j) != 0) {
    pthread_cond_destroy(&j->tree_ready);
    pthread_mutex_destroy(&j->lock);
    starts_free(j);
    return;
  }
  j->running = 1;
}

/* The second start's placement, from its thread (waiting for it). */
static int starts_second(starts_job_t *j, int *node_of, int *slot_of)
{
  pthread_mutex_lock(&j->lock);
  while (!j->tree_done)
    pthread_cond_wait(&j->tree_ready, &j->lock);
  const int rc = j->rc;
  pthread_mutex_unlock(&j->lock);
  if (rc == TIERS_OK)
    copy_placement(node_of, slot_of, j->node_of, j->slot_of, j->g->n);
  return rc;
}

/* Waits for the thread's end (when one runs). */
static void starts_join(starts_job_t *j)
{
  if (!j->running)
    return;
  pthread_join(j->thread, NULL);
  pthread_cond_destroy(&j->tree_ready);
  pthread_mutex_destroy(&j->lock);
  j->running = 0;
}

/* Whether cost a is no worse than b on either byte measure (inter-node
 * bytes, the busiest node's sent bytes) and better on one. */
static int bytes_dominate(const tiers_map_cost_t *a, const tiers_map_cost_t *b)
{
  return !lower(b->inter, a->inter) && !lower(b->sent_max, a->sent_max) &&
         (lower(a->inter, b->inter) || lower(a->sent_max, b->sent_max));
}

int tiers_map_search(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                     const tiers_map_node_t *node, double node_cost, int tree_nodes,
                     const double *lat, const double *bw, double time_tie, int ncand,
                     int use_scotch,
                     uint64_t seed, int64_t budget, int extra_starts, int *place,
                     tiers_map_cost_t *costs, int *chosen, int *swaps, int *second)
{
  TIERS_CALL(check_args(g));
  if (nodes < 1 || !node || !lat || !bw || !(time_tie >= 0) || ncand < 0 ||
      (!use_scotch && ncand < 1) || !place || !costs || !chosen || budget < 0 ||
      (use_scotch && (tree_nodes < 1 || tree_nodes > nodes)))
    TIERS_ERROR(TIERS_ERR_ARG, "map: bad arguments to tiers_map_search");
  const int n = g->n;
  const int total = ncand + 3; /* afc, afc-nb, the candidates, refined */
#define NODE_ROW(c) (place + (size_t)2 * (size_t)(c) * (size_t)n)
#define SLOT_ROW(c) (place + ((size_t)2 * (size_t)(c) + 1) * (size_t)n)
  for (int c = 2; c < ncand + 2; c++)
    for (int v = 0; v < n; v++)
      if (NODE_ROW(c)[v] < 0 || NODE_ROW(c)[v] >= nodes)
        TIERS_ERROR(TIERS_ERR_ARG, "map: candidate %d puts rank %d on node %d, outside 0..%d",
                    c - 2, v, NODE_ROW(c)[v], nodes - 1);
  int64_t *fill = calloc((size_t)nodes, sizeof *fill);
  char *have = calloc((size_t)total, 1);
  starts_job_t job = {0};
  int rc = TIERS_OK;
  if (!fill || !have) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
    goto out;
  }
  memset(costs, 0, (size_t)total * sizeof *costs);
  if (second)
    *second = 0;
  const int second_applies = use_scotch && extra_starts && nodes > 2 && g->xadj[n] > 0 &&
                             n <= EXTRA_STARTS_MAX;
  if (second_applies) {
    int cores = 1;
    for (int i = 0; i < node->levels; i++)
      cores *= node->arity[i];
    job = (starts_job_t){.g = g, .node = node, .tree_nodes = tree_nodes, .cores = cores,
                         .seed = seed};
    starts_spawn(&job);
  }
  if (use_scotch) {
    rc = tiers_map_tree(g, tree_nodes, node_cost, node, -1, 0.05, seed, NODE_ROW(0),
                        SLOT_ROW(0));
    if (rc != TIERS_OK)
      goto out;
    /* afc-nb: the same nodes, ranks in rank order inside each */
    for (int v = 0; v < n; v++) {
      NODE_ROW(1)[v] = NODE_ROW(0)[v];
      SLOT_ROW(1)[v] = (int)fill[NODE_ROW(0)[v]]++;
    }
    have[0] = have[1] = 1;
  }
  for (int c = 2; c < ncand + 2; c++)
    have[c] = 1;
  double fastest = INFINITY;
  for (int c = 0; c < total - 1; c++) {
    if (!have[c])
      continue;
    rc = tiers_map_eval(g, sent_bytes, nodes, node, lat, bw, NODE_ROW(c), SLOT_ROW(c),
                        &costs[c]);
    if (rc != TIERS_OK)
      goto out;
    fastest = fmin(fastest, cost_time(&costs[c]));
  }
  int best = -1;
  for (int c = 0; c < total - 1; c++)
    if (have[c] && (best < 0 || ranks_before(&costs[c], &costs[best], fastest, time_tie)))
      best = c;
  /* the refinement of the winner: the busiest node's sent bytes first,
   * then the inter-node bytes, never worse on either; kept when it ranks
   * first among all */
  const int r = total - 1;
  /* the balancing's budget: the fewest inter-node bytes of any candidate,
   * so that what it trades for a less loaded busiest node never ends above
   * a candidate's inter-node bytes */
  double fewest = INFINITY;
  for (int c = 0; c < r; c++)
    if (have[c])
      fewest = fmin(fewest, costs[c].inter);
  /* the second start: when Scotch's mapping (row 0) has one node sending
   * far more than any other -- a node's boundary that swaps and chains do
   * not move: Scotch's basin --, the second start (above second_start),
   * built in the refined row; the refinement starts from it instead of
   * the winner when it ranks before the winner */
  int from_second = 0;
  if (second_applies) {
    double top, next;
    double *sent = malloc((size_t)nodes * sizeof *sent);
    if (!sent) {
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    top_two_sent(g, sent_bytes, nodes, NODE_ROW(0), sent, &top, &next);
    free(sent);
    if (top > SECOND_GAP * next) {
      if (job.running)
        rc = starts_second(&job, NODE_ROW(r), SLOT_ROW(r));
      else
        rc = second_start(g, node, tree_nodes, job.cores, seed, NODE_ROW(r), SLOT_ROW(r));
      if (rc == TIERS_OK)
        rc = tiers_map_eval(g, sent_bytes, nodes, node, lat, bw, NODE_ROW(r), SLOT_ROW(r),
                            &costs[r]);
      /* a second start that Scotch cannot make leaves the search as it was */
      from_second = rc == TIERS_OK &&
                    ranks_before(&costs[r], &costs[best],
                                 fmin(fastest, cost_time(&costs[r])), time_tie);
      rc = TIERS_OK;
    }
  }
  /* the refinement of the start; a second start's result that does not
   * rank first gives way to the winner's own refinement */
  int evaluated = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (!from_second)
      copy_placement(NODE_ROW(r), SLOT_ROW(r), NODE_ROW(best), SLOT_ROW(best), n);
    int done = 0;
    if (nodes > 1 && g->xadj[n] > 0)
      rc = tiers_map_refine_within(g, sent_bytes, nodes, NODE_ROW(r), SLOT_ROW(r), budget,
                                   fewest, &done);
    if (rc != TIERS_OK)
      goto out;
    if (swaps)
      *swaps = done;
    int keep = 0;
    evaluated = done > 0 || from_second;
    if (evaluated) {
      rc = tiers_map_eval(g, sent_bytes, nodes, node, lat, bw, NODE_ROW(r), SLOT_ROW(r),
                          &costs[r]);
      if (rc != TIERS_OK)
        goto out;
      const double f2 = fmin(fastest, cost_time(&costs[r]));
      keep = 1;
      for (int c = 0; c < r && keep; c++)
        if (have[c] && ranks_before(&costs[c], &costs[r], f2, time_tie))
          keep = 0;
      if (keep)
        best = r;
    }
    if (keep || !from_second)
      break;
    from_second = 0;
  }
  /* the third start (above start_group): kept in the refined row when it
   * is no worse than the result on either byte measure, better on one,
   * and ranks before it; one that cannot be made leaves the search as it
   * was */
  int from_third = 0;
  if (second_applies) {
    starts_join(&job);
    int *grp = job.group_of, *slot3 = malloc((size_t)n * sizeof *slot3);
    int grc = TIERS_ERR_NOMEM;
    if (!grp && (grp = malloc((size_t)n * sizeof *grp)) != NULL)
      grc = start_group(g, tree_nodes, job.cores, seed, THIRD_BALANCE, grp);
    else if (grp)
      grc = job.group_rc;
    tiers_map_cost_t c3;
    if (grc == TIERS_OK && slot3) {
      /* the bytes first (any slots: ranks in rank order on each node) */
      memset(fill, 0, (size_t)nodes * sizeof *fill);
      for (int v = 0; v < n; v++)
        slot3[v] = (int)fill[grp[v]]++;
      if (tiers_map_eval(g, sent_bytes, nodes, node, lat, bw, grp, slot3, &c3) == TIERS_OK &&
          bytes_dominate(&c3, &costs[best]) &&
          place_quick(g, grp, nodes, node, slot3) == TIERS_OK &&
          tiers_map_eval(g, sent_bytes, nodes, node, lat, bw, grp, slot3, &c3) == TIERS_OK) {
        const double f3 = fmin(fmin(fastest, cost_time(&costs[best])), cost_time(&c3));
        if (ranks_before(&c3, &costs[best], f3, time_tie)) {
          copy_placement(NODE_ROW(r), SLOT_ROW(r), grp, slot3, n);
          costs[r] = c3;
          best = r;
          from_third = evaluated = 1;
        }
      }
    }
    if (grp != job.group_of)
      free(grp);
    free(slot3);
  }
  if (!evaluated) /* the row holds the winner unchanged: not a placement made */
    memset(&costs[r], 0, sizeof costs[r]);
  if (second)
    *second = from_third ? 2 : from_second && best == r;
  *chosen = best;
#undef NODE_ROW
#undef SLOT_ROW
out:
  /* the starts' thread, after an error before its join */
  starts_join(&job);
  starts_free(&job);
  free(fill);
  free(have);
  return rc;
}
