/*
 * The round trip of a cache line between two pinned PUs (common/pulink.h):
 * on the machine itself, a positive time bounded by the deadline, the
 * caller's binding untouched, and bad pairs refused.  Where the PUs sit is
 * the host's business, so no value beyond those bounds is asserted.
 */
#include <stdlib.h>

#include "common/pulink.h"
#include "tiers/error.h"
#include "tiers/topo.h"

#include "check.h"

int main(void)
{
  tiers_topo_t topo;
  CHECK(tiers_topo_load(&topo, NULL) == TIERS_OK);
  const int n = tiers_topo_num_pus(topo);
  tiers_pulink_t l;
  CHECK(tiers_pulink_measure(topo, 0, 0, 1, &l) == TIERS_ERR_ARG);
  CHECK(tiers_pulink_measure(topo, 0, n, 1, &l) == TIERS_ERR_ARG);
  CHECK(tiers_pulink_measure(topo, -1, 0, 1, &l) == TIERS_ERR_ARG);
  CHECK(tiers_pulink_measure(topo, 0, 1, 1, NULL) == TIERS_ERR_ARG);
  if (n >= 2) {
    /* the caller's binding stays what it was */
    CHECK(tiers_topo_bind_thread(topo, n - 1) == TIERS_OK);
    int *before = calloc((size_t)n, sizeof *before), *after = calloc((size_t)n, sizeof *after);
    int nb = n, na = n;
    CHECK(before && after);
    CHECK(tiers_topo_get_thread_binding(topo, before, &nb) == TIERS_OK);
    for (int quick = 1; quick >= 0; quick--) {
      CHECK(tiers_pulink_measure(topo, 0, 1, quick, &l) == TIERS_OK);
      CHECK(l.pu_a == 0 && l.pu_b == 1);
      /* above a nanosecond (a line goes from one core to another and
       * back), below the deadline of 20 or 50 ms */
      CHECK(l.rtt_ns > 1.0 && l.rtt_ns < (quick ? 2e7 : 5e7));
    }
    CHECK(tiers_topo_get_thread_binding(topo, after, &na) == TIERS_OK);
    CHECK(na == nb && nb == 1 && after[0] == before[0] && before[0] == n - 1);
    free(before);
    free(after);
  }
  tiers_topo_destroy(&topo);
  return TIERS_TEST_RESULT;
}
