/* tiers_parse_double: a positive real number (durations, factors). */
#include <math.h>
#include <stdio.h>

#include "common/tool.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = fuzz_cstring(data, size);
  double value = -1.0;
  int rc = tiers_parse_double(text, &value);
  FUZZ_CHECK(rc == 0 || rc == -1);
  if (rc == 0)
    FUZZ_CHECK(value > 0 && !isnan(value));
  else
    FUZZ_CHECK(value == -1.0);
  free(text);
  return 0;
}
