/*
 * tiers-topo: prints the machine model as one JSON object on stdout, for
 * `tiers topo` and for the machine block of every result document.
 *
 *   tiers-topo [--input SRC] [--summary] [--no-matrix]
 *
 * SRC is "this" (default), an hwloc XML file or "synthetic:DESC".  The full
 * output holds the counts, the hwloc tree, the PU list and the processor
 * graph of seed 002 section 2.2 (depth of the common ancestor of every PU
 * pair, and the layer joining it); --summary prints only the counts and a
 * one-line description; --no-matrix leaves out the n x n matrices but keeps
 * the per-layer pair counts.  The layout is documented in
 * docs/schemas/topo.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "common/json.h"
#include "common/tool.h"
#include "tiers/topo.h"

/* Nesting the JSON writer allows, minus the levels above the tree. */
#define MAX_TREE_LEVELS ((TIERS_JSON_MAX_DEPTH - 4) / 2)

static void usage_fail(const char *what, const char *arg)
{
  tiers_tool_fail("%s %s (usage: tiers-topo [--input SRC] [--summary] [--no-matrix])", what, arg);
}

/* "32 MiB", "1.5 GiB", "48 KiB": powers of 1024, one decimal when not whole. */
static void format_bytes(char *buf, size_t len, uint64_t bytes)
{
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = (double)bytes;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    u++;
  }
  if (v == (double)(uint64_t)v)
    snprintf(buf, len, "%llu %s", (unsigned long long)v, units[u]);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

static const char *cache_kind(hwloc_obj_cache_type_t type)
{
  switch (type) {
  case HWLOC_OBJ_CACHE_DATA: return "data";
  case HWLOC_OBJ_CACHE_INSTRUCTION: return "instruction";
  default: return "unified";
  }
}

static void short_type(char *buf, size_t len, hwloc_obj_t o)
{
  if (hwloc_obj_type_snprintf(buf, len, o, 0) <= 0)
    snprintf(buf, len, "%s", hwloc_obj_type_string(o->type));
}

/* Counts, caches per level and memory: the keys shared by --summary and the full output. */
static void write_counts(tiers_json_t *j, tiers_topo_t topo)
{
  hwloc_topology_t hw = tiers_topo_hwloc(topo);
  int packages = tiers_topo_count(topo, HWLOC_OBJ_PACKAGE);
  int numa = tiers_topo_count(topo, HWLOC_OBJ_NUMANODE);
  int cores = tiers_topo_count(topo, HWLOC_OBJ_CORE);
  int pus = tiers_topo_num_pus(topo);
  uint64_t memory = hwloc_get_root_obj(hw)->total_memory;

  tiers_json_kv_string(j, "source", tiers_topo_source(topo));
  tiers_json_kv_bool(j, "this_system", tiers_topo_is_this_system(topo));
  tiers_json_kv_int(j, "packages", packages);
  tiers_json_kv_int(j, "numa_nodes", numa);
  tiers_json_kv_int(j, "cores", cores);
  tiers_json_kv_int(j, "pus", pus);
  tiers_json_kv_int(j, "levels", hwloc_topology_get_depth(hw));
  tiers_json_kv_int(j, "memory_bytes", (int64_t)memory);
  tiers_json_kv_int(j, "llc_total_bytes", (int64_t)tiers_topo_llc_total(topo));

  /* Caches from the level nearest the root down; the summary names the first data one. */
  char summary_cache[96] = "";
  tiers_json_key(j, "caches");
  tiers_json_array_begin(j);
  for (int d = 0; d < hwloc_topology_get_depth(hw); d++) {
    hwloc_obj_type_t type = hwloc_get_depth_type(hw, d);
    if (!hwloc_obj_type_is_cache(type))
      continue;
    int n = hwloc_get_nbobjs_by_depth(hw, d);
    hwloc_obj_t first = hwloc_get_obj_by_depth(hw, d, 0);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
      total += hwloc_get_obj_by_depth(hw, d, (unsigned)i)->attr->cache.size;
    char name[32], size[32];
    short_type(name, sizeof name, first);
    tiers_json_object_begin(j);
    tiers_json_kv_string(j, "name", name);
    tiers_json_kv_int(j, "level", first->attr->cache.depth);
    tiers_json_kv_string(j, "kind", cache_kind(first->attr->cache.type));
    tiers_json_kv_int(j, "count", n);
    tiers_json_kv_int(j, "size_bytes", (int64_t)first->attr->cache.size);
    tiers_json_kv_int(j, "total_bytes", (int64_t)total);
    tiers_json_kv_int(j, "linesize_bytes", first->attr->cache.linesize);
    tiers_json_object_end(j);
    if (!summary_cache[0] && hwloc_obj_type_is_dcache(type) && first->attr->cache.size > 0) {
      format_bytes(size, sizeof size, first->attr->cache.size);
      if (n > 1)
        snprintf(summary_cache, sizeof summary_cache, ", %dx %s %s", n, name, size);
      else
        snprintf(summary_cache, sizeof summary_cache, ", %s %s", name, size);
    }
  }
  tiers_json_array_end(j);

  char summary[256];
  snprintf(summary, sizeof summary, "%d package%s, %d NUMA node%s, %d core%s, %d PU%s%s", packages,
           packages == 1 ? "" : "s", numa, numa == 1 ? "" : "s", cores, cores == 1 ? "" : "s", pus,
           pus == 1 ? "" : "s", summary_cache);
  tiers_json_kv_string(j, "summary", summary);
}

/* One object of the tree with its memory children and normal children. */
static void write_obj(tiers_json_t *j, hwloc_obj_t o)
{
  char name[64];
  short_type(name, sizeof name, o);
  tiers_json_object_begin(j);
  tiers_json_kv_string(j, "type", name);
  tiers_json_kv_int(j, "logical", o->logical_index);
  tiers_json_key(j, "os");
  if (o->os_index == HWLOC_UNKNOWN_INDEX)
    tiers_json_null(j);
  else
    tiers_json_int(j, o->os_index);
  if (o->depth >= 0)
    tiers_json_kv_int(j, "depth", o->depth);
  if (o->cpuset)
    tiers_json_kv_int(j, "pus", hwloc_bitmap_weight(o->cpuset));
  if (hwloc_obj_type_is_cache(o->type)) {
    tiers_json_kv_int(j, "cache_level", o->attr->cache.depth);
    tiers_json_kv_string(j, "cache_kind", cache_kind(o->attr->cache.type));
    tiers_json_kv_int(j, "cache_size_bytes", (int64_t)o->attr->cache.size);
    tiers_json_kv_int(j, "cache_linesize_bytes", o->attr->cache.linesize);
  }
  if (o->type == HWLOC_OBJ_NUMANODE)
    tiers_json_kv_int(j, "memory_bytes", (int64_t)o->attr->numanode.local_memory);
  if (!o->parent)
    tiers_json_kv_int(j, "total_memory_bytes", (int64_t)o->total_memory);
  if (o->memory_arity > 0) {
    tiers_json_key(j, "memory");
    tiers_json_array_begin(j);
    for (hwloc_obj_t c = o->memory_first_child; c; c = c->next_sibling)
      write_obj(j, c);
    tiers_json_array_end(j);
  }
  if (o->arity > 0) {
    tiers_json_key(j, "children");
    tiers_json_array_begin(j);
    for (unsigned i = 0; i < o->arity; i++)
      write_obj(j, o->children[i]);
    tiers_json_array_end(j);
  }
  tiers_json_object_end(j);
}

/* Per (layer, cache level): unordered PU pairs and the depths they join at. */
struct layer_stat {
  int64_t pairs;
  int depth_min, depth_max;
};

#define MAX_CACHE_LEVEL 8

static void write_graph(tiers_json_t *j, tiers_topo_t topo, int matrices)
{
  int n = tiers_topo_num_pus(topo);
  size_t nn = (size_t)n * (size_t)n;
  unsigned char *layer = malloc(nn), *level = malloc(nn);
  short *depth = malloc(nn * sizeof *depth);
  if (!layer || !level || !depth)
    tiers_tool_fail("out of memory for the %d x %d processor graph", n, n);

  struct layer_stat stat[TIERS_LAYER_COUNT][MAX_CACHE_LEVEL + 1];
  memset(stat, 0, sizeof stat);
  for (int a = 0; a < n; a++)
    for (int b = a; b < n; b++) {
      tiers_layer_t l;
      int cl;
      if (tiers_topo_layer(topo, a, b, &l, &cl) != TIERS_OK)
        tiers_tool_fail_last("classifying PU pairs");
      if (cl < 0 || cl > MAX_CACHE_LEVEL)
        cl = MAX_CACHE_LEVEL;
      int d = tiers_topo_common_depth(topo, a, b);
      layer[(size_t)a * n + b] = layer[(size_t)b * n + a] = (unsigned char)l;
      level[(size_t)a * n + b] = level[(size_t)b * n + a] = (unsigned char)cl;
      depth[(size_t)a * n + b] = depth[(size_t)b * n + a] = (short)d;
      if (a == b)
        continue;
      struct layer_stat *s = &stat[l][cl];
      if (s->pairs == 0 || d < s->depth_min)
        s->depth_min = d;
      if (s->pairs == 0 || d > s->depth_max)
        s->depth_max = d;
      s->pairs++;
    }

  tiers_json_key(j, "pu_os_index");
  tiers_json_array_begin(j);
  for (int p = 0; p < n; p++)
    tiers_json_int(j, tiers_topo_pu(topo, p)->os_index);
  tiers_json_array_end(j);

  tiers_json_key(j, "layer_pairs");
  tiers_json_object_begin(j);
  for (int l = TIERS_LAYER_CORE; l < TIERS_LAYER_COUNT; l++) {
    int64_t sum = 0;
    for (int c = 0; c <= MAX_CACHE_LEVEL; c++)
      sum += stat[l][c].pairs;
    tiers_json_kv_int(j, tiers_layer_name((tiers_layer_t)l), sum);
  }
  tiers_json_object_end(j);

  tiers_json_key(j, "layers");
  tiers_json_array_begin(j);
  for (int l = TIERS_LAYER_CORE; l < TIERS_LAYER_COUNT; l++)
    for (int c = 0; c <= MAX_CACHE_LEVEL; c++) {
      const struct layer_stat *s = &stat[l][c];
      if (s->pairs == 0)
        continue;
      tiers_json_object_begin(j);
      tiers_json_kv_string(j, "layer", tiers_layer_name((tiers_layer_t)l));
      tiers_json_kv_int(j, "cache_level", c);
      tiers_json_kv_int(j, "pairs", s->pairs);
      tiers_json_kv_int(j, "depth_min", s->depth_min);
      tiers_json_kv_int(j, "depth_max", s->depth_max);
      tiers_json_object_end(j);
    }
  tiers_json_array_end(j);

  if (matrices) {
    tiers_json_key(j, "depth_matrix");
    tiers_json_array_begin(j);
    for (int a = 0; a < n; a++) {
      tiers_json_array_begin(j);
      for (int b = 0; b < n; b++)
        tiers_json_int(j, depth[(size_t)a * n + b]);
      tiers_json_array_end(j);
    }
    tiers_json_array_end(j);

    tiers_json_key(j, "layer_matrix");
    tiers_json_array_begin(j);
    for (int a = 0; a < n; a++) {
      tiers_json_array_begin(j);
      for (int b = 0; b < n; b++)
        tiers_json_string(j, tiers_layer_name((tiers_layer_t)layer[(size_t)a * n + b]));
      tiers_json_array_end(j);
    }
    tiers_json_array_end(j);

    tiers_json_key(j, "cache_level_matrix");
    tiers_json_array_begin(j);
    for (int a = 0; a < n; a++) {
      tiers_json_array_begin(j);
      for (int b = 0; b < n; b++)
        tiers_json_int(j, level[(size_t)a * n + b]);
      tiers_json_array_end(j);
    }
    tiers_json_array_end(j);
  }
  free(layer);
  free(level);
  free(depth);
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  const char *source = "this";
  int summary_only = 0, matrices = 1;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--input") == 0) {
      if (i + 1 >= argc)
        usage_fail("option needs a value:", arg);
      source = argv[++i];
    } else if (strncmp(arg, "--input=", 8) == 0) {
      source = arg + 8;
    } else if (strcmp(arg, "--summary") == 0) {
      summary_only = 1;
    } else if (strcmp(arg, "--no-matrix") == 0) {
      matrices = 0;
    } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      printf("usage: tiers-topo [--input SRC] [--summary] [--no-matrix]\n"
             "Prints the machine model as JSON.  SRC: 'this' (default), an hwloc XML file,\n"
             "or 'synthetic:DESC' (e.g. 'synthetic:pack:2 numa:2 core:4 pu:2').\n");
      return 0;
    } else {
      usage_fail(arg[0] == '-' ? "unknown option" : "unexpected argument", arg);
    }
  }
  if (!*source)
    tiers_tool_fail("--input is empty (give 'this', an XML file or 'synthetic:DESC')");

  tiers_topo_t topo = NULL;
  if (tiers_topo_load(&topo, source) != TIERS_OK)
    tiers_tool_fail("%s", tiers_last_error());
  hwloc_topology_t hw = tiers_topo_hwloc(topo);
  if (!summary_only && hwloc_topology_get_depth(hw) > MAX_TREE_LEVELS)
    tiers_tool_fail("the topology has %d levels; tiers-topo prints trees of at most %d",
                    hwloc_topology_get_depth(hw), MAX_TREE_LEVELS);

  tiers_json_t j;
  tiers_json_init(&j, stdout);
  tiers_json_object_begin(&j);
  write_counts(&j, topo);
  if (!summary_only) {
    tiers_json_key(&j, "tree");
    write_obj(&j, hwloc_get_root_obj(hw));
    write_graph(&j, topo, matrices);
  }
  tiers_tool_json_native(&j);
  tiers_json_object_end(&j);
  int rc = tiers_json_finish(&j);
  tiers_topo_destroy(&topo);
  if (rc != 0)
    tiers_tool_fail("cannot write the result to stdout");
  return 0;
}
