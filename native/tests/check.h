/*
 * The check macro every C unit test uses: a failed check prints where and
 * what, counts, and lets the test go on; main returns TIERS_TEST_RESULT.
 * The count is atomic so that checks may run on several threads.
 */
#ifndef TIERS_TESTS_CHECK_H
#define TIERS_TESTS_CHECK_H

#include <stdio.h>

static _Atomic int failures;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
      failures++;                                                               \
    }                                                                           \
  } while (0)

/* What main returns: 0 when every check held. */
#define TIERS_TEST_RESULT (failures ? 1 : 0)

#endif
