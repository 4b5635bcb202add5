/* The geometric candidate of a grid (tiers_map_geometric): the grid tiled
 * into node-sized boxes of the least cut bytes when such boxes tile it
 * exactly, recursive coordinate bisection over the nodes otherwise; inside
 * a node the same bisection splits the node's ranks over the node tree's
 * objects, one cut per level.  A sort per cut: O(n log n) per level of
 * the bisection (a 262,144-rank grid is tiled in milliseconds, a
 * 226,981-rank one bisected in about 0.2 s). */

#include "tiers/map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GEO_MAX_DIMS 3
#define GEO_MAX_LEVELS 64

typedef struct {
  uint64_t key;
  int32_t v;
} geo_item_t;

typedef struct {
  const int32_t *pos; /* dims coordinates per item */
  int dims;
  const int *ext;     /* extent of each axis (for the sort keys) */
  const double *pair; /* bytes of one neighbour pair across each axis */
  int *part;          /* out: part of each item */
  geo_item_t *items;  /* scratch, one per item */
} geo_rcb_t;

static int geo_item_cmp(const void *a, const void *b)
{
  const geo_item_t *x = a, *y = b;
  return (x->key > y->key) - (x->key < y->key);
}

/* Give the items idx[0..m-1] the parts first, first + 1, ... of sizes[0..k-1]
 * items each: each cut goes across the axis whose cut plane carries the
 * fewest bytes (cross-section x pair bytes); the ranks are ordered along
 * that axis, then the other axes in index order, ties in the given order. */
static void geo_rcb(const geo_rcb_t *r, int32_t *idx, int m, const int *sizes, int k, int first)
{
  if (k == 1 || m == 0) {
    for (int j = 0; j < m; j++)
      r->part[idx[j]] = first;
    return;
  }
  const int half = k / 2;
  int64_t left = 0;
  for (int i = 0; i < half; i++)
    left += sizes[i];
  if (left > m)
    left = m;
  int best = -1;
  double best_cost = 0;
  for (int a = 0; a < r->dims; a++) {
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (int j = 0; j < m; j++) {
      const int32_t c = r->pos[(int64_t)idx[j] * r->dims + a];
      lo = c < lo ? c : lo;
      hi = c > hi ? c : hi;
    }
    const int64_t extent = (int64_t)hi - lo + 1;
    if (extent < 2)
      continue;
    const double cost = (double)m / (double)extent * r->pair[a];
    if (best < 0 || cost < best_cost - 1e-12 * cost) {
      best = a;
      best_cost = cost;
    }
  }
  if (best >= 0) {
    /* the key: the cut axis first, then the others in index order, then the
     * place in the given order (the sort is stable by construction) */
    for (int j = 0; j < m; j++) {
      const int32_t *p = r->pos + (int64_t)idx[j] * r->dims;
      uint64_t key = (uint64_t)p[best];
      for (int a = 0; a < r->dims; a++)
        if (a != best)
          key = key * (uint64_t)r->ext[a] + (uint64_t)p[a];
      r->items[j].key = key * (uint64_t)m + (uint64_t)j;
      r->items[j].v = idx[j];
    }
    qsort(r->items, (size_t)m, sizeof *r->items, geo_item_cmp);
    for (int j = 0; j < m; j++)
      idx[j] = r->items[j].v;
  }
  geo_rcb(r, idx, (int)left, sizes, half, first);
  geo_rcb(r, idx + left, m - (int)left, sizes + half, k - half, first + half);
}

/* How many of count items each of k containers of cap items holds when
 * they are filled in order; the containers left empty are dropped.
 * Returns the number kept. */
static int geo_fill(int64_t count, int64_t cap, int k, int *sizes)
{
  int kept = 0;
  for (int i = 0; i < k && count > 0; i++) {
    const int64_t take = count < cap ? count : cap;
    sizes[kept++] = (int)take;
    count -= take;
  }
  return kept;
}

typedef struct {
  geo_rcb_t rcb;
  int levels;
  const int *arity;
  const int64_t *stride; /* per level, the slots under one object a level below */
  int *sizes;            /* scratch, the widest level's arity */
  int widest;            /* the most children of any level */
  int64_t *runs;         /* scratch, levels x (widest + 1) */
  int32_t *tmp;          /* scratch, one per item */
  int *out;              /* out: slot of each item */
} geo_inside_t;

/* Give the items idx[0..m-1] of one node the slots from base on, one
 * bisection per level of the tree.  The last level (one core per child)
 * is filled in order: any two cores of one parent are joined at that
 * parent, whichever they are. */
static void geo_inside(const geo_inside_t *s, int32_t *idx, int m, int level, int64_t base)
{
  if (level >= s->levels || m <= 1 || s->stride[level] == 1) {
    for (int j = 0; j < m; j++)
      s->out[idx[j]] = (int)(base + j);
    return;
  }
  const int64_t stride = s->stride[level];
  const int k = geo_fill(m, stride, s->arity[level], s->sizes);
  /* the bisection sorts a copy: the parts keep the items in the given order */
  memcpy(s->tmp, idx, (size_t)m * sizeof *idx);
  geo_rcb(&s->rcb, s->tmp, m, s->sizes, k, 0);
  /* the items of each part, in the given order, one run per part (at:
   * this level's slice of the scratch, kept while the parts are split) */
  int64_t *at = s->runs + (size_t)level * (size_t)(s->widest + 1);
  for (int c = 0; c <= k; c++)
    at[c] = 0;
  for (int j = 0; j < m; j++)
    at[s->rcb.part[idx[j]] + 1]++;
  for (int c = 0; c < k; c++)
    at[c + 1] += at[c];
  for (int j = 0; j < m; j++)
    s->tmp[at[s->rcb.part[idx[j]]]++] = idx[j];
  memcpy(idx, s->tmp, (size_t)m * sizeof *idx);
  for (int c = k; c > 0; c--)
    at[c] = at[c - 1];
  at[0] = 0;
  for (int c = 0; c < k; c++)
    geo_inside(s, idx + at[c], (int)(at[c + 1] - at[c]), level + 1, base + c * stride);
}

/* The box shape of size subdomains that tiles the grid exactly with the
 * fewest bytes crossing boxes, then the fewest bytes the busiest box sends,
 * then the smallest box surface (the first in lexicographic order of the
 * shapes among equals); 0 when no box of that size tiles it. */
static int geo_box(int dims, const int *parts, const double *pair, int64_t size, int *shape)
{
  int64_t total = 1;
  for (int a = 0; a < dims; a++)
    total *= parts[a];
  int found = 0;
  double best[3] = {0, 0, 0};
  int cur[GEO_MAX_DIMS];
  for (int a = 0; a < dims; a++)
    cur[a] = 1;
  for (;;) {
    int64_t vol = 1;
    int divides = 1;
    for (int a = 0; a < dims; a++) {
      vol *= cur[a];
      divides &= parts[a] % cur[a] == 0;
    }
    if (divides && vol == size) {
      double key[3] = {0, 0, 0};
      for (int a = 0; a < dims; a++) {
        const int64_t boxes = parts[a] / cur[a];
        key[0] += (double)((boxes - 1) * total / parts[a]) * pair[a];
        const int64_t sides = boxes - 1 < 2 ? boxes - 1 : 2;
        key[1] += (double)(sides * size / cur[a]) * pair[a] / 2;
        key[2] += (double)(2 * size / cur[a]) * pair[a];
      }
      int less = !found;
      for (int i = 0; i < 3 && !less; i++) {
        if (key[i] < best[i])
          less = 1;
        else if (key[i] > best[i])
          break;
      }
      if (less) {
        found = 1;
        memcpy(best, key, sizeof best);
        memcpy(shape, cur, (size_t)dims * sizeof *shape);
      }
    }
    /* the next shape, the last axis fastest (itertools.product's order) */
    int a = dims - 1;
    while (a >= 0) {
      do
        cur[a]++;
      while (cur[a] <= parts[a] && parts[a] % cur[a] != 0);
      if (cur[a] <= parts[a])
        break;
      cur[a] = 1;
      a--;
    }
    if (a < 0)
      break;
  }
  return found;
}

int tiers_map_geometric(int n, int dims, const int *parts, const double *pair,
                        const int32_t *coords, int nodes, const int *capacity,
                        const tiers_map_node_t *node, int *node_of, int *slot_of, int *shape)
{
  if (n < 1 || dims < 1 || dims > GEO_MAX_DIMS || !parts || !pair || !coords || nodes < 1 ||
      !capacity || !node || node->levels < 0 || node->levels > GEO_MAX_LEVELS ||
      (node->levels > 0 && !node->arity) || !node_of || !slot_of || !shape)
    TIERS_ERROR(TIERS_ERR_ARG, "map: bad arguments to tiers_map_geometric");
  int64_t prod = 1;
  for (int a = 0; a < dims; a++) {
    if (parts[a] < 1)
      TIERS_ERROR(TIERS_ERR_ARG, "map: a grid of %d subdomains along axis %d", parts[a], a);
    if (prod <= n) /* past n it is wrong already; no overflow */
      prod *= parts[a];
  }
  if (prod != n)
    TIERS_ERROR(TIERS_ERR_ARG, "map: a grid of %lld subdomains for %d ranks", (long long)prod, n);
  for (int v = 0; v < n; v++)
    for (int a = 0; a < dims; a++)
      if (coords[(int64_t)v * dims + a] < 0 || coords[(int64_t)v * dims + a] >= parts[a])
        TIERS_ERROR(TIERS_ERR_ARG, "map: rank %d's coordinate %d is outside 0..%d", v, a,
                    parts[a] - 1);
  int64_t room = 0;
  for (int i = 0; i < nodes; i++) {
    if (capacity[i] < 0)
      TIERS_ERROR(TIERS_ERR_ARG, "map: node %d has %d slots", i, capacity[i]);
    room += capacity[i];
  }
  if (room < n)
    TIERS_ERROR(TIERS_ERR_ARG, "map: %d ranks on %lld slots", n, (long long)room);
  int64_t stride[GEO_MAX_LEVELS];
  int widest = 1;
  {
    int64_t slots = 1;
    for (int i = 0; i < node->levels; i++) {
      if (node->arity[i] < 1)
        TIERS_ERROR(TIERS_ERR_ARG, "map: level %d has %d children", i, node->arity[i]);
      slots *= node->arity[i];
      widest = node->arity[i] > widest ? node->arity[i] : widest;
    }
    for (int i = 0; i < node->levels; i++) {
      slots /= node->arity[i];
      stride[i] = slots;
    }
  }
  int kmax = nodes > widest ? nodes : widest;
  int32_t *idx = malloc((size_t)n * sizeof *idx);
  int32_t *tmp = malloc((size_t)n * sizeof *tmp);
  int *part = malloc((size_t)n * sizeof *part);
  geo_item_t *items = malloc((size_t)n * sizeof *items);
  int *sizes = malloc((size_t)kmax * sizeof *sizes);
  int *used = malloc((size_t)nodes * sizeof *used);
  int64_t *runs = malloc(((size_t)node->levels * (size_t)(widest + 1) + 1) * sizeof *runs);
  int64_t *first = calloc((size_t)nodes + 1, sizeof *first);
  int rc = TIERS_OK;
  if (!idx || !tmp || !part || !items || !sizes || !used || !runs || !first) {
    rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__,
                         "map: no memory for the geometric placement of %d ranks", n);
    goto out;
  }
  for (int a = 0; a < dims; a++)
    shape[a] = 0;
  const int size = capacity[0];
  int tiled = 0;
  {
    int equal = 1;
    for (int i = 1; i < nodes; i++)
      equal &= capacity[i] == size;
    if (equal && size > 0 && n % size == 0 && n / size <= nodes)
      tiled = geo_box(dims, parts, pair, size, shape);
  }
  geo_inside_t in = {.rcb = {.dims = dims, .pair = pair, .part = part, .items = items},
                     .levels = node->levels,
                     .arity = node->arity,
                     .stride = stride,
                     .sizes = sizes,
                     .widest = widest,
                     .runs = runs,
                     .tmp = tmp,
                     .out = slot_of};
  if (tiled) {
    int boxes[GEO_MAX_DIMS];
    for (int a = 0; a < dims; a++)
      boxes[a] = parts[a] / shape[a];
    for (int v = 0; v < n; v++) {
      int64_t lin = 0;
      for (int a = dims - 1; a >= 0; a--)
        lin = lin * boxes[a] + coords[(int64_t)v * dims + a] / shape[a];
      node_of[v] = (int)lin;
    }
    /* every node holds the same box: split one box (positions first axis
     * fastest) and apply it to all */
    int32_t *box = malloc((size_t)size * dims * sizeof *box);
    int *of_pos = malloc((size_t)size * sizeof *of_pos);
    if (!box || !of_pos) {
      free(box);
      free(of_pos);
      rc = tiers_error_set(TIERS_ERR_NOMEM, __FILE__, __LINE__, "map: no memory");
      goto out;
    }
    for (int i = 0; i < size; i++) {
      int rest = i;
      for (int a = 0; a < dims; a++) {
        box[(int64_t)i * dims + a] = rest % shape[a];
        rest /= shape[a];
      }
      idx[i] = i;
    }
    in.rcb.pos = box;
    in.rcb.ext = shape;
    in.out = of_pos;
    geo_inside(&in, idx, size, 0, 0);
    for (int v = 0; v < n; v++) {
      int64_t at = 0;
      for (int a = dims - 1; a >= 0; a--)
        at = at * shape[a] + coords[(int64_t)v * dims + a] % shape[a];
      slot_of[v] = of_pos[at];
    }
    free(box);
    free(of_pos);
  } else {
    int k = 0;
    int64_t left = n;
    for (int i = 0; i < nodes && left > 0; i++) {
      const int64_t take = left < capacity[i] ? left : capacity[i];
      if (take > 0) {
        used[k] = i;
        sizes[k++] = (int)take;
      }
      left -= take;
    }
    in.rcb.pos = coords;
    in.rcb.ext = parts;
    for (int v = 0; v < n; v++)
      idx[v] = v;
    geo_rcb(&in.rcb, idx, n, sizes, k, 0);
    for (int v = 0; v < n; v++)
      node_of[v] = used[part[v]];
    /* each node's ranks in rank order, then the bisection inside it */
    for (int v = 0; v < n; v++)
      first[node_of[v] + 1]++;
    for (int i = 0; i < nodes; i++)
      first[i + 1] += first[i];
    for (int v = 0; v < n; v++)
      idx[first[node_of[v]]++] = v; /* first[i] ends at node i's end */
    for (int i = nodes; i > 0; i--)
      first[i] = first[i - 1];
    first[0] = 0;
    for (int i = 0; i < nodes; i++)
      if (first[i + 1] > first[i])
        geo_inside(&in, idx + first[i], (int)(first[i + 1] - first[i]), 0, 0);
  }
out:
  free(idx);
  free(tmp);
  free(part);
  free(items);
  free(sizes);
  free(used);
  free(runs);
  free(first);
  return rc;
}
