#include "common/tool.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "tiers/error.h"

static const char *tool_name = "tiers";

void tiers_tool_init(const char *argv0)
{
  const char *base = strrchr(argv0, '/');
  tool_name = base ? base + 1 : argv0;
}

void tiers_tool_fail(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "%s: error: ", tool_name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(TIERS_TOOL_EXIT_USAGE);
}

void tiers_tool_fail_last(const char *what)
{
  tiers_tool_fail("%s: %s", what, tiers_last_error());
}

int tiers_parse_long(const char *text, long *value)
{
  if (!text || !*text || !isdigit((unsigned char)text[0]))
    return -1;
  errno = 0;
  char *end;
  long v = strtol(text, &end, 10);
  if (errno || *end || v < 0) /* ERANGE: more digits than a long holds */
    return -1;
  *value = v;
  return 0;
}

int tiers_parse_double(const char *text, double *value)
{
  if (!text || !*text)
    return -1;
  errno = 0;
  char *end;
  double v = strtod(text, &end);
  /* !(v <= DBL_MAX) refuses inf and nan, which strtod reads without error */
  if (errno || *end || !(v > 0) || !(v <= DBL_MAX))
    return -1;
  *value = v;
  return 0;
}

int tiers_parse_size(const char *text, uint64_t *bytes)
{
  if (!text || !isdigit((unsigned char)text[0]))
    return -1;
  errno = 0;
  char *end;
  double v = strtod(text, &end);
  if (errno || !(v >= 0) || !(v <= DBL_MAX))
    return -1;
  /* strtod also reads hexadecimal and exponents: accept decimal digits and a point only */
  for (const char *c = text; c < end; c++)
    if (!isdigit((unsigned char)*c) && *c != '.')
      return -1;
  uint64_t mult = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K': mult = 1ull << 10; end++; break;
  case 'M': mult = 1ull << 20; end++; break;
  case 'G': mult = 1ull << 30; end++; break;
  case 'T': mult = 1ull << 40; end++; break;
  default: break;
  }
  if (mult > 1 && *end == 'i')
    end++;
  if (toupper((unsigned char)*end) == 'B')
    end++;
  if (*end)
    return -1;
  double b = v * (double)mult;
  if (!(b <= (double)TIERS_SIZE_MAX)) /* keeps products with small counts in 64 bits */
    return -1;
  *bytes = (uint64_t)b;
  return 0;
}

/* Reads one list number at *p: decimal digits only, 1..INT_MAX. */
static int list_number(const char **p, long *value)
{
  const char *s = *p;
  if (!isdigit((unsigned char)*s))
    return -1;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (errno || v < 1 || v > INT_MAX)
    return -1;
  *value = v;
  *p = end;
  return 0;
}

int tiers_parse_int_list(const char *text, int **values)
{
  if (!text || !*text)
    return -1;
  int cap = 16, n = 0;
  int *out = malloc(sizeof *out * (size_t)cap);
  if (!out)
    return -1;
  const char *p = text;
  while (*p) {
    long lo, hi;
    if (list_number(&p, &lo) != 0)
      goto bad;
    hi = lo;
    if (*p == '-') {
      p++;
      if (list_number(&p, &hi) != 0 || hi < lo)
        goto bad;
    }
    if (hi - lo >= TIERS_LIST_MAX || n + (hi - lo) >= TIERS_LIST_MAX)
      goto bad;
    for (long v = lo; v <= hi; v++) {
      if (n == cap) {
        cap *= 2;
        int *grown = realloc(out, sizeof *out * (size_t)cap);
        if (!grown)
          goto bad;
        out = grown;
      }
      out[n++] = (int)v;
    }
    if (*p == ',') {
      p++;
      if (!*p) /* a trailing comma is an empty item */
        goto bad;
    } else if (*p) {
      goto bad;
    }
  }
  if (n == 0)
    goto bad;
  *values = out;
  return n;
bad:
  free(out);
  return -1;
}

void tiers_tool_json_native(tiers_json_t *j)
{
  char hw[32];
  unsigned v = hwloc_get_api_version();
  snprintf(hw, sizeof hw, "%u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
  tiers_json_key(j, "native");
  tiers_json_object_begin(j);
  tiers_json_kv_string(j, "tool", tool_name);
  tiers_json_kv_string(j, "tiers_version", TIERS_VERSION);
#ifdef __VERSION__
  tiers_json_kv_string(j, "compiler", "gcc " __VERSION__);
#endif
  tiers_json_kv_string(j, "hwloc_version", hw);
  tiers_json_object_end(j);
}

void tiers_tool_help(int argc, char **argv, const char *usage)
{
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      exit(0);
    }
  }
}
