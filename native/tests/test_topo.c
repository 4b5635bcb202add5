/*
 * The machine model: on synthetic topologies, the common depth and the layer
 * of every PU pair and the scatter order match what the synthetic structure
 * implies (computed here from the levels, not typed in); an XML export
 * loads back to the same graph; bad sources give the documented codes; and
 * binding on this machine reads back.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tiers/topo.h"

#include "check.h"


/* Like CHECK, naming the topology and the pair when it fails. */
#define CHECK_PAIR(cond, desc, a, b)                                                     \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: [%s] PUs %d,%d: check failed: %s\n", __FILE__, __LINE__,    \
              (desc), (a), (b), #cond);                                                  \
      failures++;                                                                        \
    }                                                                                    \
  } while (0)

/* One level of a synthetic description. */
enum kind { K_PACK, K_NUMA, K_CACHE, K_CORE, K_PU, K_GROUP };

struct level {
  enum kind kind;
  int arity;
  int cache_level; /* for K_CACHE */
};

#define MAX_LEVELS 8

struct structure {
  const char *desc; /* without the "synthetic:" prefix */
  int nlevels;
  struct level level[MAX_LEVELS];
};

/* The cases cover NUMA inside packages (as a group, and folded into an L3),
 * packages inside NUMA nodes, a NUMA node per package, SMT and no SMT, a
 * private L2 per core, and a single NUMA node for the whole machine. */
static const struct structure cases[] = {
    {"pack:2 numa:2 l3:1 core:4 pu:2", 5,
     {{K_PACK, 2, 0}, {K_NUMA, 2, 0}, {K_CACHE, 1, 3}, {K_CORE, 4, 0}, {K_PU, 2, 0}}},
    {"numa:2 pack:2 core:2 pu:2", 4, {{K_NUMA, 2, 0}, {K_PACK, 2, 0}, {K_CORE, 2, 0}, {K_PU, 2, 0}}},
    {"pack:2 numa:2 core:4 pu:1", 4, {{K_PACK, 2, 0}, {K_NUMA, 2, 0}, {K_CORE, 4, 0}, {K_PU, 1, 0}}},
    {"numa:2 pack:1 core:2 pu:1", 4, {{K_NUMA, 2, 0}, {K_PACK, 1, 0}, {K_CORE, 2, 0}, {K_PU, 1, 0}}},
    {"pack:2 l3:2 l2:2 core:1 pu:2", 5,
     {{K_PACK, 2, 0}, {K_CACHE, 2, 3}, {K_CACHE, 2, 2}, {K_CORE, 1, 0}, {K_PU, 2, 0}}},
    {"pack:2 core:2 pu:2", 3, {{K_PACK, 2, 0}, {K_CORE, 2, 0}, {K_PU, 2, 0}}},
    {"pack:1 l3:1 core:2 pu:2", 4, {{K_PACK, 1, 0}, {K_CACHE, 1, 3}, {K_CORE, 2, 0}, {K_PU, 2, 0}}},
};

static int num_pus(const struct structure *s)
{
  int n = 1;
  for (int i = 0; i < s->nlevels; i++)
    n *= s->level[i].arity;
  return n;
}

/* PUs under one object of level i. */
static int stride(const struct structure *s, int i)
{
  int n = 1;
  for (int j = i + 1; j < s->nlevels; j++)
    n *= s->level[j].arity;
  return n;
}

/* Levels 0..k-1 hold both PUs: the number of shared levels. */
static int shared_levels(const struct structure *s, int a, int b)
{
  int k = 0;
  while (k < s->nlevels && a / stride(s, k) == b / stride(s, k))
    k++;
  return k;
}

/*
 * hwloc 2 keeps every level of a synthetic description in the tree except
 * NUMA levels: a NUMA node becomes a memory child of an object with its
 * cpuset (its parent when it is an only child, its child when it has one)
 * and only otherwise gets a Group of its own in the tree.
 */
static int in_tree(const struct structure *s, int i)
{
  if (s->level[i].kind != K_NUMA)
    return 1;
  return s->level[i].arity > 1 && i + 1 < s->nlevels && s->level[i + 1].arity > 1;
}

static int expected_depth(const struct structure *s, int a, int b)
{
  int k = shared_levels(s, a, b), d = 0;
  for (int i = 0; i < k; i++)
    d += in_tree(s, i);
  return d;
}

/* The layer a level names, or -1 (PU, group, a NUMA node spanning the machine). */
static int level_layer(const struct structure *s, int i)
{
  switch (s->level[i].kind) {
  case K_CORE: return TIERS_LAYER_CORE;
  case K_CACHE: return TIERS_LAYER_CACHE;
  case K_PACK: return TIERS_LAYER_PACKAGE;
  case K_NUMA: return stride(s, i) == num_pus(s) ? -1 : TIERS_LAYER_NUMA;
  default: return -1;
  }
}

/*
 * The smallest object holding both PUs is the one of the deepest shared
 * level; the objects above it through arity-1 levels hold the same PUs.
 * Among such a group the closest layer wins; when none names a layer, the
 * next bigger group is tried, and the root is the machine.
 */
static tiers_layer_t expected_layer(const struct structure *s, int a, int b, int *cache_level)
{
  *cache_level = 0;
  if (a == b)
    return TIERS_LAYER_PU;
  int top = shared_levels(s, a, b) - 1;
  while (top >= 0) {
    int group = top;
    while (group > 0 && s->level[group].arity == 1)
      group--;
    int reaches_root = s->level[group].arity == 1; /* the machine has the same PUs */
    int best = TIERS_LAYER_MACHINE, best_cache = 0;
    for (int i = top; i >= group; i--) {
      int l = level_layer(s, i);
      if (l >= 0 && l < best) {
        best = l;
        best_cache = s->level[i].cache_level;
      }
    }
    if (best != TIERS_LAYER_MACHINE || reaches_root) {
      if (best == TIERS_LAYER_CACHE)
        *cache_level = best_cache;
      return (tiers_layer_t)best;
    }
    top = group - 1;
  }
  return TIERS_LAYER_MACHINE;
}

/* Scatter: thread t's digits in reversed mixed radix, the top level varying fastest. */
static int expected_scatter(const struct structure *s, int t)
{
  int pu = 0;
  for (int i = 0; i < s->nlevels; i++) {
    pu += (t % s->level[i].arity) * stride(s, i);
    t /= s->level[i].arity;
  }
  return pu;
}

static int load_structure(const struct structure *s, tiers_topo_t *topo)
{
  char source[128];
  snprintf(source, sizeof source, "synthetic:%s", s->desc);
  return tiers_topo_load(topo, source);
}

static void check_graph(const struct structure *s, tiers_topo_t topo)
{
  int n = num_pus(s);
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      int d = tiers_topo_common_depth(topo, a, b);
      CHECK_PAIR(d == expected_depth(s, a, b), s->desc, a, b);
      CHECK_PAIR(d == tiers_topo_common_depth(topo, b, a), s->desc, a, b);
      tiers_layer_t layer;
      int level = -1, want_level;
      tiers_layer_t want = expected_layer(s, a, b, &want_level);
      CHECK_PAIR(tiers_topo_layer(topo, a, b, &layer, &level) == TIERS_OK, s->desc, a, b);
      if (layer != want || level != want_level)
        fprintf(stderr, "  got %s/L%d, expected %s/L%d\n", tiers_layer_name(layer), level,
                tiers_layer_name(want), want_level);
      CHECK_PAIR(layer == want, s->desc, a, b);
      CHECK_PAIR(level == want_level, s->desc, a, b);
    }
}

static void check_structure(const struct structure *s)
{
  tiers_topo_t topo = NULL;
  int rc = load_structure(s, &topo);
  CHECK(rc == TIERS_OK);
  if (rc != TIERS_OK) {
    fprintf(stderr, "  cannot load %s: %s\n", s->desc, tiers_last_error());
    return;
  }
  int n = num_pus(s);
  CHECK(tiers_topo_num_pus(topo) == n);
  CHECK(!tiers_topo_is_this_system(topo));
  CHECK(strncmp(tiers_topo_source(topo), "synthetic:", 10) == 0);

  /* Counts: the product of the arities down to each level. */
  int objects = 1, packages = 1, cores = 1, numa = 1;
  for (int i = 0; i < s->nlevels; i++) {
    objects *= s->level[i].arity;
    if (s->level[i].kind == K_PACK)
      packages = objects;
    if (s->level[i].kind == K_CORE)
      cores = objects;
    if (s->level[i].kind == K_NUMA)
      numa = objects;
  }
  CHECK(tiers_topo_count(topo, HWLOC_OBJ_PACKAGE) == packages);
  CHECK(tiers_topo_count(topo, HWLOC_OBJ_CORE) == cores);
  CHECK(tiers_topo_count(topo, HWLOC_OBJ_NUMANODE) == numa);
  CHECK(tiers_topo_count(topo, HWLOC_OBJ_PU) == n);
  CHECK(tiers_topo_count(topo, HWLOC_OBJ_OS_DEVICE) == 0);

  check_graph(s, topo);

  /* Out of range. */
  tiers_layer_t layer;
  CHECK(tiers_topo_common_depth(topo, 0, n) == -1);
  CHECK(tiers_topo_common_depth(topo, -1, 0) == -1);
  CHECK(tiers_topo_layer(topo, 0, n, &layer, NULL) == TIERS_ERR_ARG);
  CHECK(tiers_topo_pu(topo, n) == NULL);

  /* Pinning orders. */
  int *order = malloc(sizeof *order * (size_t)n);
  int *seen = calloc((size_t)n, sizeof *seen);
  CHECK(tiers_topo_pin_order(topo, TIERS_PIN_COMPACT, n, order) == TIERS_OK);
  for (int t = 0; t < n; t++)
    CHECK(order[t] == t);
  CHECK(tiers_topo_pin_order(topo, TIERS_PIN_SCATTER, n, order) == TIERS_OK);
  for (int t = 0; t < n; t++) {
    CHECK_PAIR(order[t] == expected_scatter(s, t), s->desc, t, order[t]);
    if (order[t] >= 0 && order[t] < n)
      seen[order[t]]++;
  }
  for (int p = 0; p < n; p++)
    CHECK(seen[p] == 1);
  /* The first threads land on different packages, then on different cores. */
  for (int t = 0; t < n; t++)
    for (int u = 0; u < t; u++) {
      hwloc_obj_t pt = tiers_topo_pu(topo, order[t]), pu = tiers_topo_pu(topo, order[u]);
      hwloc_obj_t kt = hwloc_get_ancestor_obj_by_type(tiers_topo_hwloc(topo), HWLOC_OBJ_PACKAGE, pt);
      hwloc_obj_t ku = hwloc_get_ancestor_obj_by_type(tiers_topo_hwloc(topo), HWLOC_OBJ_PACKAGE, pu);
      hwloc_obj_t ct = hwloc_get_ancestor_obj_by_type(tiers_topo_hwloc(topo), HWLOC_OBJ_CORE, pt);
      hwloc_obj_t cu = hwloc_get_ancestor_obj_by_type(tiers_topo_hwloc(topo), HWLOC_OBJ_CORE, pu);
      if (t < packages)
        CHECK_PAIR(kt != ku, s->desc, u, t);
      if (t < cores)
        CHECK_PAIR(ct != cu, s->desc, u, t);
    }
  /* A shorter list is the start of the full one. */
  int partial[3];
  if (n >= 3) {
    CHECK(tiers_topo_pin_order(topo, TIERS_PIN_SCATTER, 3, partial) == TIERS_OK);
    CHECK(memcmp(partial, order, sizeof partial) == 0);
  }
  CHECK(tiers_topo_pin_order(topo, TIERS_PIN_COMPACT, n + 1, order) == TIERS_ERR_ARG);
  CHECK(tiers_topo_pin_order(topo, TIERS_PIN_NONE, n, order) == TIERS_OK);
  for (int t = 0; t < n; t++)
    CHECK(order[t] == -1);
  free(order);
  free(seen);

  /* Binding is for this machine only. */
  CHECK(tiers_topo_bind_thread(topo, 0) == TIERS_ERR_UNSUPPORTED);
  int zero = 0;
  CHECK(tiers_topo_bind_process(topo, &zero, 1) == TIERS_ERR_UNSUPPORTED);

  tiers_topo_destroy(&topo);
  CHECK(topo == NULL);
}

/* An XML export of a synthetic topology loads back to the same processor graph. */
static void check_xml_roundtrip(const struct structure *s)
{
  tiers_topo_t topo = NULL, back = NULL;
  if (load_structure(s, &topo) != TIERS_OK) {
    CHECK(0);
    return;
  }
  char path[] = "/tmp/tiers-test-topo-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) {
    tiers_topo_destroy(&topo);
    return;
  }
  close(fd);
  CHECK(hwloc_topology_export_xml(tiers_topo_hwloc(topo), path, 0) == 0);
  CHECK(tiers_topo_load(&back, path) == TIERS_OK);
  if (back) {
    CHECK(strcmp(tiers_topo_source(back), path) == 0);
    CHECK(!tiers_topo_is_this_system(back));
    check_graph(s, back);
    CHECK(tiers_topo_llc_total(back) == tiers_topo_llc_total(topo));
  }
  tiers_topo_destroy(&back);
  tiers_topo_destroy(&topo);
  unlink(path);
}

static void check_caches(void)
{
  tiers_topo_t topo = NULL;
  CHECK(tiers_topo_load(&topo, "synthetic:pack:2 l3:2(size=8388608) l2:2(size=1048576) core:1 pu:1") ==
        TIERS_OK);
  CHECK(tiers_topo_llc_total(topo) == 4 * 8388608ull);
  tiers_topo_destroy(&topo);
  CHECK(tiers_topo_load(&topo, "synthetic:pack:2 core:2 pu:1") == TIERS_OK);
  CHECK(tiers_topo_llc_total(topo) == 0);
  tiers_topo_destroy(&topo);
  CHECK(tiers_topo_destroy(&topo) == TIERS_OK); /* NULL is fine */
}

static void check_bad_sources(void)
{
  static const char *bad_synthetic[] = {"synthetic:pack:2 bogus:3", "synthetic:",
                                        "synthetic:pack:0 pu:2", "synthetic:pack:2 pu:x"};
  for (size_t i = 0; i < sizeof bad_synthetic / sizeof *bad_synthetic; i++) {
    tiers_topo_t topo = (tiers_topo_t)&failures; /* must be reset to NULL */
    CHECK(tiers_topo_load(&topo, bad_synthetic[i]) == TIERS_ERR_INPUT);
    CHECK(topo == NULL);
    CHECK(strstr(tiers_last_error(), "synthetic") != NULL);
  }
  tiers_topo_t topo = NULL;
  CHECK(tiers_topo_load(&topo, "/nonexistent/topology.xml") == TIERS_ERR_INPUT);
  CHECK(strstr(tiers_last_error(), "/nonexistent/topology.xml") != NULL);
  CHECK(topo == NULL);
  CHECK(tiers_topo_load(&topo, "/tmp") == TIERS_ERR_INPUT);
  CHECK(topo == NULL);

  char path[] = "/tmp/tiers-test-topo-bad-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) {
    static const char text[] = "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<object ";
    CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    CHECK(tiers_topo_load(&topo, path) == TIERS_ERR_INPUT);
    CHECK(strstr(tiers_last_error(), "not a valid hwloc XML") != NULL);
    CHECK(topo == NULL);
    unlink(path);
  }
  CHECK(tiers_topo_load(NULL, "this") == TIERS_ERR_ARG);
}

static void check_this_machine(void)
{
  tiers_topo_t topo = NULL;
  CHECK(tiers_topo_load(&topo, NULL) == TIERS_OK);
  if (!topo)
    return;
  CHECK(strcmp(tiers_topo_source(topo), "this") == 0);
  CHECK(tiers_topo_is_this_system(topo));
  int n = tiers_topo_num_pus(topo);
  CHECK(n >= 1);
  CHECK((long)n <= sysconf(_SC_NPROCESSORS_CONF));
  int *pus = malloc(sizeof *pus * (size_t)n), got = 0;

  CHECK(tiers_topo_bind_thread(topo, 0) == TIERS_OK);
  CHECK(tiers_topo_get_thread_binding(topo, pus, &got) == TIERS_OK);
  CHECK(got == 1 && pus[0] == 0);
  CHECK(tiers_topo_bind_thread(topo, n - 1) == TIERS_OK);
  CHECK(tiers_topo_get_thread_binding(topo, pus, &got) == TIERS_OK);
  CHECK(got == 1 && pus[0] == n - 1);
  CHECK(tiers_topo_bind_thread(topo, n) == TIERS_ERR_ARG);

  /* The whole process on every PU: the thread binding reads back as all of them. */
  for (int p = 0; p < n; p++)
    pus[p] = p;
  CHECK(tiers_topo_bind_process(topo, pus, n) == TIERS_OK);
  CHECK(tiers_topo_get_thread_binding(topo, pus, &got) == TIERS_OK);
  CHECK(got == n);
  CHECK(tiers_topo_bind_process(topo, pus, 0) == TIERS_ERR_ARG);
  free(pus);

  /* First touch: untouched memory that the caller can then write. */
  void *mem = NULL;
  size_t bytes = 1 << 20;
  CHECK(tiers_topo_alloc_first_touch(bytes, &mem) == TIERS_OK);
  CHECK(mem != NULL && ((unsigned long)mem % (unsigned long)sysconf(_SC_PAGESIZE)) == 0);
  if (mem) {
    memset(mem, 7, bytes);
    CHECK(((unsigned char *)mem)[bytes - 1] == 7);
  }
  tiers_topo_free(mem, bytes);
  CHECK(tiers_topo_alloc_first_touch(0, &mem) == TIERS_ERR_ARG);
  CHECK(tiers_topo_available_memory() > 0);
  tiers_topo_destroy(&topo);
}

static void check_names(void)
{
  tiers_pin_policy_t p;
  CHECK(tiers_pin_policy_parse("scatter", &p) == TIERS_OK && p == TIERS_PIN_SCATTER);
  CHECK(tiers_pin_policy_parse("compact", &p) == TIERS_OK && p == TIERS_PIN_COMPACT);
  CHECK(tiers_pin_policy_parse("none", &p) == TIERS_OK && p == TIERS_PIN_NONE);
  CHECK(tiers_pin_policy_parse("spread", &p) == TIERS_ERR_ARG);
  CHECK(strcmp(tiers_pin_policy_name(TIERS_PIN_SCATTER), "scatter") == 0);
  CHECK(strcmp(tiers_layer_name(TIERS_LAYER_NUMA), "numa") == 0);
  CHECK(strcmp(tiers_layer_name(TIERS_LAYER_COUNT), "unknown") == 0);
}

int main(void)
{
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    check_structure(&cases[i]);
    check_xml_roundtrip(&cases[i]);
  }
  check_caches();
  check_bad_sources();
  check_this_machine();
  check_names();
  if (failures)
    fprintf(stderr, "%d checks failed\n", failures);
  return failures ? 1 : 0;
}
