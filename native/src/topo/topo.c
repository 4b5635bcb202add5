/* The machine model: loading, layer queries, pinning orders and binding. */
#include "tiers/topo.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

struct tiers_topo {
  hwloc_topology_t hw;
  char *source;
  int this_system;
  int num_pus;
};

static const char synthetic_prefix[] = "synthetic:";

/* The most objects a synthetic description may ask for.  hwloc builds every
 * object of a synthetic tree with a cpuset as wide as the machine, so time
 * and memory grow with the square of the PU count: "pack:1000 core:1000
 * pu:1000" never finishes.  The largest single machines have a few
 * thousand PUs (their XML files are not limited); 8192 objects leave room for
 * the synthetic trees that stand for them. */
#define SYNTHETIC_MAX_OBJECTS 8192.0

/* Return how many objects the levels of synthetic description desc ask for
 * (the sum over levels of the product of the arities down to it), skipping
 * attributes in (...) and {...}.  Words that are not "type:N" or "N" are
 * left for hwloc to refuse. */
static double synthetic_objects(const char *desc)
{
  double width = 1.0, total = 1.0;
  int depth = 0;
  const char *p = desc;
  while (*p) {
    if (*p == '(' || *p == '{') {
      depth++;
      p++;
      continue;
    }
    if ((*p == ')' || *p == '}') && depth > 0) {
      depth--;
      p++;
      continue;
    }
    if (depth > 0 || *p == ' ' || *p == '\t' || *p == '\n') {
      p++;
      continue;
    }
    /* a word: [type:]N, where N ends at a space, '(' or the end */
    const char *w = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '(' && *p != '{')
      p++;
    const char *colon = memchr(w, ':', (size_t)(p - w));
    const char *digits = colon ? colon + 1 : w;
    if (digits < p && *digits >= '0' && *digits <= '9') {
      double arity = strtod(digits, NULL);
      width *= arity > 1.0 ? arity : 1.0;
      total += width;
    }
  }
  return total;
}

/* Return whether the attributes text [tag, end) of an XML element names
 * attribute name (preceded by white space, followed by '='). */
static int xml_has_attribute(const char *tag, const char *end, const char *name)
{
  size_t n = strlen(name);
  for (const char *p = tag; p + n < end; p++) {
    if ((p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '\r') &&
        memcmp(p, name, n) == 0) {
      const char *q = p + n;
      while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
        q++;
      if (q < end && *q == '=')
        return 1;
    }
  }
  return 0;
}

/* Return whether the value of attribute name in the attributes text [tag,
 * end) is a bitmap as hwloc writes it: "0xf...f", or an optional "0xf...f,"
 * then comma-separated groups "0x" and 1 to 8 hex digits.  hwloc 2.9
 * asserts (aborting the program) on some other strings.  An absent
 * attribute passes. */
static int xml_bitmap_ok(const char *tag, const char *end, const char *name)
{
  size_t n = strlen(name);
  for (const char *p = tag; p + n < end; p++) {
    if (!((p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '\r') &&
          memcmp(p, name, n) == 0))
      continue;
    const char *q = p + n;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
      q++;
    if (q >= end || *q != '=')
      continue;
    q++;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
      q++;
    if (q >= end || (*q != '"' && *q != '\''))
      return 0;
    const char quote = *q++;
    const char *v = q;
    while (q < end && *q != quote)
      q++;
    if (q >= end)
      return 0;
    size_t len = (size_t)(q - v);
    if (len == 7 && memcmp(v, "0xf...f", 7) == 0)
      return 1;
    if (len > 8 && memcmp(v, "0xf...f,", 8) == 0)
      v += 8;
    for (;;) { /* 0x then 1 to 8 hex digits, then ',' or the end */
      if (q - v < 3 || v[0] != '0' || v[1] != 'x')
        return 0;
      int digits = 0;
      for (v += 2; v < q && strchr("0123456789abcdefABCDEF", *v); v++)
        digits++;
      if (digits < 1 || digits > 8)
        return 0;
      if (v == q)
        return 1;
      if (*v++ != ',')
        return 0;
    }
  }
  return 1;
}

/* hwloc 2.9 crashes on some damaged XML files instead of refusing them: it
 * dereferences a NULL set when an object has a cpuset without a
 * complete_cpuset or the other way round (the same for nodesets), and
 * asserts on malformed bitmaps.  Files hwloc writes carry both sets of a
 * pair or neither, and well-formed bitmaps.  Write what is wrong with the
 * first object of file path that breaks these rules into why (size n) and
 * return 1; return 0 when none does or the file cannot be read (hwloc then
 * says why). */
static int xml_damaged(const char *path, char *why, size_t n)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (cap - len < 65536) {
      cap = cap ? 2 * cap : 1 << 20;
      char *grown = realloc(text, cap + 1);
      if (!grown) {
        fclose(f);
        free(text);
        return 0;
      }
      text = grown;
    }
    size_t got = fread(text + len, 1, cap - len, f);
    len += got;
    if (got == 0)
      break;
  }
  fclose(f);
  text[len] = '\0';
  static const char *const sets[] = {"cpuset", "complete_cpuset", "allowed_cpuset",
                                     "nodeset", "complete_nodeset", "allowed_nodeset"};
  const char *end = text + len;
  int damaged = 0;
  for (const char *p = text; !damaged && (p = strstr(p, "<object")) != NULL;) {
    const char *tag = p + 7;
    const char *close = tag;
    char quote = 0;
    while (close < end && (quote || *close != '>')) {
      if (quote && *close == quote)
        quote = 0;
      else if (!quote && (*close == '"' || *close == '\''))
        quote = *close;
      close++;
    }
    int has[6];
    for (int i = 0; i < 6; i++)
      has[i] = xml_has_attribute(tag, close, sets[i]);
    for (int pair = 0; !damaged && pair < 6; pair += 3)
      if (has[pair] != has[pair + 1]) {
        snprintf(why, n, "an object has a %s but no %s", sets[pair + !has[pair]],
                 sets[pair + has[pair]]);
        damaged = 1;
      }
    for (int i = 0; !damaged && i < 6; i++)
      if (!xml_bitmap_ok(tag, close, sets[i])) {
        snprintf(why, n, "an object's %s is not an hwloc bitmap", sets[i]);
        damaged = 1;
      }
    p = close;
  }
  free(text);
  return damaged;
}

int tiers_topo_load(tiers_topo_t *topo, const char *source)
{
  if (!topo)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_topo_load: topo is NULL");
  *topo = NULL;
  if (!source || !*source)
    source = "this";

  struct tiers_topo *t = calloc(1, sizeof *t);
  if (!t)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory loading a topology");
  t->source = strdup(source);
  if (!t->source || hwloc_topology_init(&t->hw) != 0) {
    free(t->source);
    free(t);
    TIERS_ERROR(TIERS_ERR_NOMEM, "cannot initialise hwloc");
  }

  /*
   * hwloc parses a synthetic string or an XML file when it is set, and
   * checks the result again in hwloc_topology_load(); both failures are the
   * input's fault.  hwloc stays quiet about the reason unless the user asks
   * with HWLOC_XML_VERBOSE or HWLOC_SYNTHETIC_VERBOSE.
   */
  enum { FROM_THIS, FROM_SYNTHETIC, FROM_XML } kind = FROM_THIS;
  int rc = TIERS_OK;
  if (strncmp(source, synthetic_prefix, sizeof synthetic_prefix - 1) == 0) {
    kind = FROM_SYNTHETIC;
    const char *desc = source + sizeof synthetic_prefix - 1;
    if (synthetic_objects(desc) > SYNTHETIC_MAX_OBJECTS)
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "the synthetic topology \"%s\" has more than %.0f objects", desc,
                           SYNTHETIC_MAX_OBJECTS);
    else if (hwloc_topology_set_synthetic(t->hw, desc) != 0)
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "hwloc rejects the synthetic topology \"%s\"", desc);
  } else if (strcmp(source, "this") != 0) {
    kind = FROM_XML;
    struct stat st;
    int is_dir = stat(source, &st) == 0 && S_ISDIR(st.st_mode);
    FILE *f = is_dir ? NULL : fopen(source, "r");
    int err = is_dir ? EISDIR : errno;
    if (!f)
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__, "cannot read topology file %s: %s%s",
                           source, strerror(err),
                           err == ENOENT ? " (give 'this', an hwloc XML file or 'synthetic:DESC')"
                                         : "");
    else {
      fclose(f);
      char why[96];
      if (xml_damaged(source, why, sizeof why))
        rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                             "%s is not a valid hwloc XML topology (%s)", source, why);
      else if (hwloc_topology_set_xml(t->hw, source) != 0)
        rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                             "%s is not a valid hwloc XML topology", source);
    }
  }
  if (rc == TIERS_OK && hwloc_topology_load(t->hw) != 0) {
    int err = errno;
    if (kind == FROM_XML)
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "%s is not a valid hwloc XML topology (hwloc cannot build a tree from it)",
                           source);
    else if (kind == FROM_SYNTHETIC)
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__,
                           "hwloc cannot build the synthetic topology \"%s\"",
                           source + sizeof synthetic_prefix - 1);
    else
      rc = tiers_error_set(TIERS_ERR_HWLOC, __FILE__, __LINE__,
                           "hwloc cannot read the topology of this machine: %s", strerror(err));
  }
  if (rc == TIERS_OK) {
    t->num_pus = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU);
    if (t->num_pus <= 0)
      rc = tiers_error_set(TIERS_ERR_INPUT, __FILE__, __LINE__, "the topology from %s has no PU",
                           source);
  }
  if (rc != TIERS_OK) {
    hwloc_topology_destroy(t->hw);
    free(t->source);
    free(t);
    return rc;
  }
  t->this_system = hwloc_topology_is_thissystem(t->hw);
  *topo = t;
  return TIERS_OK;
}

int tiers_topo_destroy(tiers_topo_t *topo)
{
  if (!topo || !*topo)
    return TIERS_OK;
  hwloc_topology_destroy((*topo)->hw);
  free((*topo)->source);
  free(*topo);
  *topo = NULL;
  return TIERS_OK;
}

hwloc_topology_t tiers_topo_hwloc(tiers_topo_t topo) { return topo ? topo->hw : NULL; }

int tiers_topo_is_this_system(tiers_topo_t topo) { return topo ? topo->this_system : 0; }

const char *tiers_topo_source(tiers_topo_t topo) { return topo ? topo->source : ""; }

int tiers_topo_num_pus(tiers_topo_t topo) { return topo ? topo->num_pus : 0; }

int tiers_topo_count(tiers_topo_t topo, hwloc_obj_type_t type)
{
  if (!topo)
    return 0;
  int depth = hwloc_get_type_depth(topo->hw, type);
  if (depth == HWLOC_TYPE_DEPTH_UNKNOWN)
    return 0;
  if (depth != HWLOC_TYPE_DEPTH_MULTIPLE)
    return hwloc_get_nbobjs_by_depth(topo->hw, depth);
  /* Groups may sit at several depths: count them at each. */
  int n = 0;
  for (int d = 0; d < hwloc_topology_get_depth(topo->hw); d++)
    if (hwloc_get_depth_type(topo->hw, d) == type)
      n += hwloc_get_nbobjs_by_depth(topo->hw, d);
  return n;
}

hwloc_obj_t tiers_topo_pu(tiers_topo_t topo, int pu)
{
  if (!topo || pu < 0 || pu >= topo->num_pus)
    return NULL;
  return hwloc_get_obj_by_type(topo->hw, HWLOC_OBJ_PU, (unsigned)pu);
}

int tiers_topo_common_depth(tiers_topo_t topo, int pu_a, int pu_b)
{
  hwloc_obj_t a = tiers_topo_pu(topo, pu_a), b = tiers_topo_pu(topo, pu_b);
  if (!a || !b)
    return -1;
  return hwloc_get_common_ancestor_obj(topo->hw, a, b)->depth;
}

/* Number of PUs in an object, or INT_MAX for an object without a cpuset. */
static int pu_weight(hwloc_const_cpuset_t set)
{
  int w = set ? hwloc_bitmap_weight(set) : -1;
  return w < 0 ? INT_MAX : w;
}

/*
 * The smallest NUMA node whose cpuset holds @p set, as a PU count; INT_MAX
 * when none does.  NUMA nodes are memory children in hwloc 2, so they are
 * not on the parent chain of a PU and must be searched apart.  A NUMA node
 * spanning the whole machine separates nothing and does not count: with a
 * single node (or with memory-only nodes that cover every PU, as HBM in
 * flat mode) the memory is the machine's.
 */
static int smallest_numa_holding(hwloc_topology_t hw, hwloc_const_cpuset_t set)
{
  hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(hw);
  int best = INT_MAX;
  int n = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; i++) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (!numa->cpuset || hwloc_bitmap_isequal(numa->cpuset, all) ||
        !hwloc_bitmap_isincluded(set, numa->cpuset))
      continue;
    int w = pu_weight(numa->cpuset);
    if (w < best)
      best = w;
  }
  return best;
}

/*
 * The layer of a pair is the smallest object holding both PUs among the
 * cores, data (or unified) caches, NUMA nodes and packages; when two of
 * them hold the same PUs (an L2 per core, a NUMA node per package) the
 * closer layer in tiers_layer_t order wins.  The walk starts at the common
 * ancestor, so the first core, cache and package met on the way up are the
 * smallest of their kind.
 */
int tiers_topo_layer(tiers_topo_t topo, int pu_a, int pu_b, tiers_layer_t *layer, int *cache_level)
{
  hwloc_obj_t a = tiers_topo_pu(topo, pu_a), b = tiers_topo_pu(topo, pu_b);
  if (!a || !b || !layer)
    TIERS_ERROR(TIERS_ERR_ARG, "PU index out of range (%d, %d of %d)", pu_a, pu_b,
                tiers_topo_num_pus(topo));
  if (cache_level)
    *cache_level = 0;
  if (a == b) {
    *layer = TIERS_LAYER_PU;
    return TIERS_OK;
  }
  hwloc_obj_t anc = hwloc_get_common_ancestor_obj(topo->hw, a, b);
  int size[TIERS_LAYER_COUNT];
  for (int l = 0; l < TIERS_LAYER_COUNT; l++)
    size[l] = INT_MAX;
  int level = 0;
  for (hwloc_obj_t o = anc; o; o = o->parent) {
    if (o->type == HWLOC_OBJ_CORE && size[TIERS_LAYER_CORE] == INT_MAX)
      size[TIERS_LAYER_CORE] = pu_weight(o->cpuset);
    else if (hwloc_obj_type_is_dcache(o->type) && size[TIERS_LAYER_CACHE] == INT_MAX) {
      size[TIERS_LAYER_CACHE] = pu_weight(o->cpuset);
      level = (int)o->attr->cache.depth;
    } else if (o->type == HWLOC_OBJ_PACKAGE && size[TIERS_LAYER_PACKAGE] == INT_MAX)
      size[TIERS_LAYER_PACKAGE] = pu_weight(o->cpuset);
    if (!o->parent)
      size[TIERS_LAYER_MACHINE] = pu_weight(o->cpuset);
  }
  size[TIERS_LAYER_NUMA] = smallest_numa_holding(topo->hw, anc->cpuset);
  tiers_layer_t best = TIERS_LAYER_MACHINE;
  for (int l = TIERS_LAYER_MACHINE - 1; l > TIERS_LAYER_PU; l--)
    if (size[l] <= size[best])
      best = (tiers_layer_t)l;
  *layer = best;
  if (cache_level && best == TIERS_LAYER_CACHE)
    *cache_level = level;
  return TIERS_OK;
}

const char *tiers_layer_name(tiers_layer_t layer)
{
  static const char *names[TIERS_LAYER_COUNT] = {"pu", "core", "cache", "numa", "package", "machine"};
  return (layer >= 0 && layer < TIERS_LAYER_COUNT) ? names[layer] : "unknown";
}

const char *tiers_pin_policy_name(tiers_pin_policy_t policy)
{
  switch (policy) {
  case TIERS_PIN_COMPACT: return "compact";
  case TIERS_PIN_SCATTER: return "scatter";
  default: return "none";
  }
}

int tiers_pin_policy_parse(const char *name, tiers_pin_policy_t *policy)
{
  if (name && policy) {
    for (int p = TIERS_PIN_NONE; p <= TIERS_PIN_SCATTER; p++)
      if (strcmp(name, tiers_pin_policy_name((tiers_pin_policy_t)p)) == 0) {
        *policy = (tiers_pin_policy_t)p;
        return TIERS_OK;
      }
  }
  TIERS_ERROR(TIERS_ERR_ARG, "unknown pinning policy \"%s\" (none, compact, scatter)",
              name ? name : "(null)");
}

/*
 * Scatter: a PU's path is the rank among its siblings at every level below
 * the root.  Sorting PUs by their paths read from the leaf upwards puts
 * consecutive threads on different packages first, then different NUMA
 * nodes, caches and cores.
 */
struct scatter_key {
  int pu;
  int depth;
  unsigned path[64];
};

static int compare_scatter(const void *pa, const void *pb)
{
  const struct scatter_key *a = pa, *b = pb;
  int da = a->depth, db = b->depth;
  int n = da < db ? da : db;
  for (int i = 0; i < n; i++) {
    unsigned x = a->path[da - 1 - i], y = b->path[db - 1 - i];
    if (x != y)
      return x < y ? -1 : 1;
  }
  return a->pu - b->pu;
}

int tiers_topo_pin_order(tiers_topo_t topo, tiers_pin_policy_t policy, int n, int *pus)
{
  if (!topo || !pus || n < 0)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_topo_pin_order: invalid arguments");
  if (policy == TIERS_PIN_NONE) {
    for (int i = 0; i < n; i++)
      pus[i] = -1;
    return TIERS_OK;
  }
  if (n > topo->num_pus)
    TIERS_ERROR(TIERS_ERR_ARG, "%d threads cannot be pinned to %d PUs", n, topo->num_pus);
  if (policy == TIERS_PIN_COMPACT) {
    for (int i = 0; i < n; i++)
      pus[i] = i;
    return TIERS_OK;
  }
  struct scatter_key *keys = calloc((size_t)topo->num_pus, sizeof *keys);
  if (!keys)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory ordering PUs");
  for (int p = 0; p < topo->num_pus; p++) {
    hwloc_obj_t o = tiers_topo_pu(topo, p);
    int d = 0;
    unsigned rev[64];
    for (; o && o->parent && d < 64; o = o->parent)
      rev[d++] = o->sibling_rank;
    keys[p].pu = p;
    keys[p].depth = d;
    for (int i = 0; i < d; i++)
      keys[p].path[i] = rev[d - 1 - i]; /* path[0] is the child of the root */
  }
  qsort(keys, (size_t)topo->num_pus, sizeof *keys, compare_scatter);
  for (int i = 0; i < n; i++)
    pus[i] = keys[i].pu;
  free(keys);
  return TIERS_OK;
}

int tiers_topo_bind_thread(tiers_topo_t topo, int pu)
{
  if (!topo || !topo->this_system)
    TIERS_ERROR(TIERS_ERR_UNSUPPORTED, "cannot bind to a topology that is not this machine's");
  hwloc_obj_t o = tiers_topo_pu(topo, pu);
  if (!o)
    TIERS_ERROR(TIERS_ERR_ARG, "PU %d does not exist (this machine has %d)", pu, topo->num_pus);
  if (hwloc_set_cpubind(topo->hw, o->cpuset, HWLOC_CPUBIND_THREAD) != 0)
    TIERS_ERROR(TIERS_ERR_SYS, "cannot bind thread to PU %d: %s", pu, strerror(errno));
  return TIERS_OK;
}

int tiers_topo_bind_process(tiers_topo_t topo, const int *pus, int n)
{
  if (!topo || !topo->this_system)
    TIERS_ERROR(TIERS_ERR_UNSUPPORTED, "cannot bind to a topology that is not this machine's");
  if (!pus || n <= 0)
    TIERS_ERROR(TIERS_ERR_ARG, "no PU to bind to");
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    hwloc_obj_t o = tiers_topo_pu(topo, pus[i]);
    if (!o) {
      hwloc_bitmap_free(set);
      TIERS_ERROR(TIERS_ERR_ARG, "PU %d does not exist (this machine has %d)", pus[i], topo->num_pus);
    }
    hwloc_bitmap_or(set, set, o->cpuset);
  }
  int rc = hwloc_set_cpubind(topo->hw, set, HWLOC_CPUBIND_PROCESS);
  int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0)
    TIERS_ERROR(TIERS_ERR_SYS, "cannot bind process: %s", strerror(err));
  return TIERS_OK;
}

int tiers_topo_get_thread_binding(tiers_topo_t topo, int *pus, int *n)
{
  if (!topo || !pus || !n)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_topo_get_thread_binding: invalid arguments");
  if (!topo->this_system)
    TIERS_ERROR(TIERS_ERR_UNSUPPORTED, "the topology is not this machine's");
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory");
  if (hwloc_get_cpubind(topo->hw, set, HWLOC_CPUBIND_THREAD) != 0) {
    int err = errno;
    hwloc_bitmap_free(set);
    TIERS_ERROR(TIERS_ERR_SYS, "cannot read the thread binding: %s", strerror(err));
  }
  *n = 0;
  for (int p = 0; p < topo->num_pus; p++)
    if (hwloc_bitmap_isincluded(tiers_topo_pu(topo, p)->cpuset, set))
      pus[(*n)++] = p;
  hwloc_bitmap_free(set);
  return TIERS_OK;
}

int tiers_topo_alloc_first_touch(size_t bytes, void **ptr)
{
  if (!ptr || bytes == 0)
    TIERS_ERROR(TIERS_ERR_ARG, "nothing to allocate");
  *ptr = NULL;
  /* Anonymous mappings are not backed until written: the first writer's node gets each page. */
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED)
    TIERS_ERROR(TIERS_ERR_NOMEM, "cannot allocate %zu bytes: %s", bytes, strerror(errno));
  *ptr = p;
  return TIERS_OK;
}

void tiers_topo_free(void *ptr, size_t bytes)
{
  if (ptr)
    munmap(ptr, bytes);
}

static size_t read_size_file(const char *path, const char *key)
{
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  char line[256];
  size_t value = 0;
  while (fgets(line, sizeof line, f)) {
    if (!key) {
      value = strncmp(line, "max", 3) == 0 ? 0 : (size_t)strtoull(line, NULL, 10);
      break;
    }
    size_t k = strlen(key);
    if (strncmp(line, key, k) == 0 && line[k] == ':') {
      value = (size_t)strtoull(line + k + 1, NULL, 10) * 1024; /* meminfo counts kB */
      break;
    }
  }
  fclose(f);
  return value;
}

size_t tiers_topo_available_memory(void)
{
  size_t avail = read_size_file("/proc/meminfo", "MemAvailable");
  size_t max = read_size_file("/sys/fs/cgroup/memory.max", NULL);
  size_t cur = read_size_file("/sys/fs/cgroup/memory.current", NULL);
  if (max > 0) {
    size_t room = max > cur ? max - cur : 0;
    if (avail == 0 || room < avail)
      avail = room;
  }
  return avail;
}

size_t tiers_topo_llc_total(tiers_topo_t topo)
{
  if (!topo)
    return 0;
  /* The last-level caches are the data or unified caches closest to the root. */
  for (int depth = 0; depth < hwloc_topology_get_depth(topo->hw); depth++) {
    hwloc_obj_type_t type = hwloc_get_depth_type(topo->hw, depth);
    if (hwloc_obj_type_is_dcache(type)) {
      size_t sum = 0;
      int n = hwloc_get_nbobjs_by_depth(topo->hw, depth);
      for (int i = 0; i < n; i++)
        sum += hwloc_get_obj_by_depth(topo->hw, depth, (unsigned)i)->attr->cache.size;
      return sum;
    }
  }
  return 0;
}
