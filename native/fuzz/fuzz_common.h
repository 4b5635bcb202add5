/* Shared by the libFuzzer harnesses: the fuzzer's bytes as a C string. */
#ifndef TIERS_FUZZ_COMMON_H
#define TIERS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Return a NUL-terminated copy of data (bytes after an embedded NUL are
 * kept but a C parser stops at the first one, as it would on argv). */
static char *fuzz_cstring(const uint8_t *data, size_t size)
{
  char *s = malloc(size + 1);
  if (!s)
    abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* abort() with a message when an invariant of the parser's result fails:
 * libFuzzer reports it as a crash with the input that broke it. */
#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "fuzz: invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);  \
      abort();                                                                               \
    }                                                                                        \
  } while (0)

#endif
