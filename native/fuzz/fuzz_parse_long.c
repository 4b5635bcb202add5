/* tiers_parse_long: a decimal count. */
#include <stdio.h>

#include "common/tool.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = fuzz_cstring(data, size);
  long value = -12345;
  int rc = tiers_parse_long(text, &value);
  FUZZ_CHECK(rc == 0 || rc == -1);
  if (rc == 0) {
    /* what was accepted is a plain decimal number: printing it back and
     * parsing that gives the same value */
    FUZZ_CHECK(value >= 0);
    char again[32];
    snprintf(again, sizeof again, "%ld", value);
    long twice = -1;
    FUZZ_CHECK(tiers_parse_long(again, &twice) == 0 && twice == value);
  } else {
    FUZZ_CHECK(value == -12345);
  }
  free(text);
  return 0;
}
