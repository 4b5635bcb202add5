/* tiers_topo_load(FILE.xml): the XML input path of tiers-topo --input, so
 * hwloc's XML reader as tiers drives it.  The bytes go to an in-memory
 * file named by /proc/self/fd. */

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "tiers/topo.h"

static int fd = -1;

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
  if (size > 65536)
    return 0;
  if (fd < 0) {
    fd = memfd_create("tiers-fuzz-topo.xml", MFD_CLOEXEC);
    if (fd < 0)
      abort();
  }
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
    abort();
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

  tiers_topo_t topo = NULL;
  int rc = tiers_topo_load(&topo, path);
  if (rc == TIERS_OK) {
    int n = tiers_topo_num_pus(topo);
    FUZZ_CHECK(n > 0);
    for (int pu = 0; pu < n && pu < 64; pu++) {
      tiers_layer_t layer;
      int level = 0;
      FUZZ_CHECK(tiers_topo_layer(topo, 0, pu, &layer, &level) == TIERS_OK);
      FUZZ_CHECK(layer >= TIERS_LAYER_PU && layer < TIERS_LAYER_COUNT);
    }
  } else {
    FUZZ_CHECK(topo == NULL);
  }
  tiers_topo_destroy(&topo);
  return 0;
}
