/*
 * The MPI-free helpers of the hybrid model (tiers/hybrid.h, part 2):
 * block splitting and the names of the timing phases.
 */
#include "tiers/hybrid.h"

int tiers_split_range(long n, int parts, int index, long *lo, long *hi)
{
  if (!lo || !hi)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_split_range: NULL output");
  if (n < 0 || parts < 1 || index < 0 || index >= parts)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_split_range: cannot take block %d of %d from %ld items",
                index, parts, n);
  long base = n / parts, extra = n % parts;
  /* The first `extra` blocks hold base + 1 items. */
  long start = (long)index * base + (index < extra ? index : extra);
  *lo = start;
  *hi = start + base + (index < extra ? 1 : 0);
  return TIERS_OK;
}

const char *tiers_phase_name(tiers_phase_t phase)
{
  switch (phase) {
  case TIERS_PHASE_COMPUTE: return "compute";
  case TIERS_PHASE_COMM: return "comm";
  case TIERS_PHASE_SYNC: return "sync";
  default: return "?";
  }
}
