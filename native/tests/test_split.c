/*
 * tiers_split_range, the block split of steps 1 and 2 of the COMPaS model:
 * for every n up to 300 and every number of parts up to 40, the blocks are
 * contiguous, in order, cover [0, n) exactly once, differ in size by at
 * most one item with the larger blocks first, and agree with the closed
 * form of the header (the first n % parts blocks hold n / parts + 1
 * items).  Bad arguments give TIERS_ERR_ARG and leave the outputs alone.
 */
#include <limits.h>

#include "tiers/error.h"
#include "tiers/hybrid.h"

#include "check.h"

static void check_split(long n, int parts)
{
  long expect_lo = 0;
  long base = n / parts, extra = n % parts;
  for (int i = 0; i < parts; i++) {
    long lo = -1, hi = -1;
    CHECK(tiers_split_range(n, parts, i, &lo, &hi) == TIERS_OK);
    CHECK(lo == expect_lo);                          /* contiguous, in order */
    CHECK(hi >= lo);
    CHECK(hi - lo == base + (i < extra ? 1 : 0));    /* sizes: larger first */
    expect_lo = hi;
  }
  CHECK(expect_lo == n);                             /* covers [0, n) */
}

int main(void)
{
  for (long n = 0; n <= 300; n++)
    for (int parts = 1; parts <= 40; parts++)
      check_split(n, parts);
  /* large counts do not overflow the start of the last block */
  check_split(LONG_MAX / 2, 7);
  long lo = 0;
  long hi = 0;
  CHECK(tiers_split_range(LONG_MAX - 1, 3, 2, &lo, &hi) == TIERS_OK && hi == LONG_MAX - 1);

  long a = 11, b = 22;
  CHECK(tiers_split_range(-1, 2, 0, &a, &b) == TIERS_ERR_ARG);
  CHECK(tiers_split_range(10, 0, 0, &a, &b) == TIERS_ERR_ARG);
  CHECK(tiers_split_range(10, 3, 3, &a, &b) == TIERS_ERR_ARG);
  CHECK(tiers_split_range(10, 3, -1, &a, &b) == TIERS_ERR_ARG);
  CHECK(tiers_split_range(10, 3, 0, NULL, &b) == TIERS_ERR_ARG);
  CHECK(tiers_split_range(10, 3, 0, &a, NULL) == TIERS_ERR_ARG);
  CHECK(a == 11 && b == 22);
  return TIERS_TEST_RESULT;
}
