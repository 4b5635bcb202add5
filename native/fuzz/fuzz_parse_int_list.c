/* tiers_parse_int_list: "1,2,8-16" into a list of positive ints. */
#include <stdio.h>

#include "common/tool.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = fuzz_cstring(data, size);
  int *values = NULL;
  int n = tiers_parse_int_list(text, &values);
  FUZZ_CHECK(n == -1 || n > 0);
  if (n > 0) {
    FUZZ_CHECK(values != NULL);
    for (int i = 0; i < n; i++)
      FUZZ_CHECK(values[i] > 0);
    free(values);
  } else {
    FUZZ_CHECK(values == NULL);
  }
  free(text);
  return 0;
}
