/* The JSON writer (native/src/common/json.c): every string tiers writes
 * (host names, hwloc object names, file names, messages) must come out as
 * one well-formed JSON string in valid UTF-8, whatever its bytes. */
#include <stdio.h>

#include "common/json.h"
#include "fuzz_common.h"

/* Return the length of the valid UTF-8 sequence at p (0 if none). */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end)
{
  if (p[0] < 0x80)
    return 1;
  size_t n;
  unsigned min;
  unsigned cp;
  if ((p[0] & 0xE0) == 0xC0) { n = 2; cp = p[0] & 0x1F; min = 0x80; }
  else if ((p[0] & 0xF0) == 0xE0) { n = 3; cp = p[0] & 0x0F; min = 0x800; }
  else if ((p[0] & 0xF8) == 0xF0) { n = 4; cp = p[0] & 0x07; min = 0x10000; }
  else return 0;
  if ((size_t)(end - p) < n)
    return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

/* Check that [p, end) is exactly one JSON string literal in UTF-8. */
static void check_string(const unsigned char *p, const unsigned char *end)
{
  FUZZ_CHECK(end - p >= 2 && p[0] == '"' && end[-1] == '"');
  p++;
  end--;
  while (p < end) {
    if (*p == '\\') {
      FUZZ_CHECK(p + 1 < end);
      unsigned char c = p[1];
      if (c == 'u') {
        FUZZ_CHECK(end - p >= 6);
        for (int i = 2; i < 6; i++)
          FUZZ_CHECK(strchr("0123456789abcdefABCDEF", p[i]) && p[i]);
        p += 6;
      } else {
        FUZZ_CHECK(c && strchr("\"\\/bfnrt", c));
        p += 2;
      }
      continue;
    }
    FUZZ_CHECK(*p >= 0x20 && *p != '"');
    size_t n = utf8_seq(p, end);
    FUZZ_CHECK(n > 0);
    p += n;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = fuzz_cstring(data, size);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (!out)
    abort();
  tiers_json_t j;
  tiers_json_init(&j, out);
  tiers_json_object_begin(&j);
  tiers_json_kv_string(&j, text, text);
  tiers_json_object_end(&j);
  FUZZ_CHECK(tiers_json_finish(&j) == 0);
  fclose(out);

  /* {"KEY":"VALUE"}\n with KEY and VALUE the same literal */
  const unsigned char *b = (const unsigned char *)buf, *e = b + len;
  FUZZ_CHECK(len >= 8 && b[0] == '{' && e[-1] == '\n' && e[-2] == '}');
  size_t lit = (len - 4) / 2;
  FUZZ_CHECK(2 * lit + 4 == len && b[1 + lit] == ':');
  FUZZ_CHECK(memcmp(b + 1, b + 2 + lit, lit) == 0);
  check_string(b + 1, b + 1 + lit);
  free(buf);
  free(text);
  return 0;
}
