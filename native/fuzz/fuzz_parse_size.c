/* tiers_parse_size: "64", "4K", "1.5MiB", "2GB" ... into bytes. */
#include <stdio.h>

#include "common/tool.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = fuzz_cstring(data, size);
  uint64_t bytes = 12345;
  int rc = tiers_parse_size(text, &bytes);
  FUZZ_CHECK(rc == 0 || rc == -1);
  if (rc != 0)
    FUZZ_CHECK(bytes == 12345); /* a refused text leaves the output alone */
  free(text);
  return 0;
}
