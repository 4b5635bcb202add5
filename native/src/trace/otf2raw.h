/* tiers-trace-post --from-otf2: raw rank files rebuilt from an OTF2 archive
 * (otf2raw.c). */
#ifndef TIERS_TRACE_OTF2RAW_H
#define TIERS_TRACE_OTF2RAW_H

/* Read DIR/traces.otf2 and write OUT/raw/rank-NNNNNN.tev, one per rank, in
 * memory bounded by the archive's definitions.  Return 0, or 1 after one
 * line `tiers-trace-post: error: ...` on stderr. */
int tiers_post_from_otf2(const char *dir, const char *out);

#endif
