/* tiers_topo_load("synthetic:DESC"): what tiers-topo --input gives hwloc's
 * synthetic-description parser, and the layer queries on what it built. */
#include <stdio.h>

#include "fuzz_common.h"
#include "tiers/topo.h"

/* hwloc loads its plugins (the libxml2 XML reader among them) with the
 * first topology and unloads them with the last one; what a plugin keeps in
 * its globals then looks leaked.  One topology kept for the whole run keeps
 * the plugins loaded, as in a tool that loads one topology and exits. */
static hwloc_topology_t keep_plugins;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  if (hwloc_topology_init(&keep_plugins) != 0)
    abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > 4096)
    return 0;
  char *source = malloc(size + sizeof "synthetic:");
  if (!source)
    abort();
  memcpy(source, "synthetic:", sizeof "synthetic:" - 1);
  memcpy(source + sizeof "synthetic:" - 1, data, size);
  source[size + sizeof "synthetic:" - 1] = '\0';

  tiers_topo_t topo = NULL;
  int rc = tiers_topo_load(&topo, source);
  if (rc == TIERS_OK) {
    int n = tiers_topo_num_pus(topo);
    FUZZ_CHECK(n > 0);
    tiers_layer_t layer;
    int level = 0;
    FUZZ_CHECK(tiers_topo_layer(topo, 0, n - 1, &layer, &level) == TIERS_OK);
    FUZZ_CHECK(layer >= TIERS_LAYER_PU && layer < TIERS_LAYER_COUNT);
    FUZZ_CHECK(tiers_topo_layer(topo, 0, 0, &layer, &level) == TIERS_OK &&
               layer == TIERS_LAYER_PU);
  } else {
    FUZZ_CHECK(topo == NULL);
  }
  tiers_topo_destroy(&topo);
  FUZZ_CHECK(topo == NULL);
  free(source);
  return 0;
}
