#include "common/json.h"

#include <inttypes.h>
#include <math.h>

void tiers_json_init(tiers_json_t *j, FILE *out)
{
  j->out = out;
  j->depth = 0;
  j->count[0] = 0;
  j->after_key = 0;
}

/* Separator before a value or key at the current level. */
static void sep(tiers_json_t *j)
{
  if (j->after_key) {
    j->after_key = 0;
    return;
  }
  if (j->count[j->depth]++ > 0)
    fputc(',', j->out);
}

static void open_level(tiers_json_t *j, int c)
{
  sep(j);
  fputc(c, j->out);
  if (j->depth + 1 < TIERS_JSON_MAX_DEPTH)
    j->depth++;
  j->count[j->depth] = 0;
}

static void close_level(tiers_json_t *j, int c)
{
  fputc(c, j->out);
  if (j->depth > 0)
    j->depth--;
}

void tiers_json_object_begin(tiers_json_t *j) { open_level(j, '{'); }
void tiers_json_object_end(tiers_json_t *j) { close_level(j, '}'); }
void tiers_json_array_begin(tiers_json_t *j) { open_level(j, '['); }
void tiers_json_array_end(tiers_json_t *j) { close_level(j, ']'); }

/* Return the length of the valid UTF-8 sequence that starts at p (2 to 4),
 * or 0 when the bytes there are not one (stray continuation bytes, overlong
 * forms, surrogates, code points past U+10FFFF, a sequence cut by the end). */
static int utf8_length(const unsigned char *p)
{
  int n;
  unsigned cp, min;
  if ((p[0] & 0xE0) == 0xC0) { n = 2; cp = p[0] & 0x1Fu; min = 0x80; }
  else if ((p[0] & 0xF0) == 0xE0) { n = 3; cp = p[0] & 0x0Fu; min = 0x800; }
  else if ((p[0] & 0xF8) == 0xF0) { n = 4; cp = p[0] & 0x07u; min = 0x10000; }
  else return 0;
  for (int i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) /* also stops at the terminating NUL */
      return 0;
    cp = (cp << 6) | (p[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

/* Write s as a JSON string.  JSON text is UTF-8: a byte that does not start
 * a valid UTF-8 sequence (a Latin-1 host name, a binary file name) is
 * written as U+FFFD, so that readers never fail to decode the document. */
static void put_string(FILE *out, const char *s)
{
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p >= 0x80) {
      int n = utf8_length(p);
      if (n == 0)
        fputs("\\ufffd", out);
      else
        fwrite(p, 1, (size_t)n, out);
      p += n > 0 ? n - 1 : 0;
      continue;
    }
    switch (*p) {
    case '"': fputs("\\\"", out); break;
    case '\\': fputs("\\\\", out); break;
    case '\n': fputs("\\n", out); break;
    case '\r': fputs("\\r", out); break;
    case '\t': fputs("\\t", out); break;
    default:
      if (*p < 0x20)
        fprintf(out, "\\u%04x", *p);
      else
        fputc(*p, out);
    }
  }
  fputc('"', out);
}

void tiers_json_key(tiers_json_t *j, const char *key)
{
  sep(j);
  put_string(j->out, key);
  fputc(':', j->out);
  j->after_key = 1;
}

void tiers_json_string(tiers_json_t *j, const char *s)
{
  sep(j);
  put_string(j->out, s);
}

void tiers_json_int(tiers_json_t *j, int64_t v)
{
  sep(j);
  fprintf(j->out, "%" PRId64, v);
}

void tiers_json_double(tiers_json_t *j, double v)
{
  sep(j);
  if (isfinite(v))
    fprintf(j->out, "%.17g", v);
  else
    fputs("null", j->out);
}

void tiers_json_bool(tiers_json_t *j, int v)
{
  sep(j);
  fputs(v ? "true" : "false", j->out);
}

void tiers_json_null(tiers_json_t *j)
{
  sep(j);
  fputs("null", j->out);
}

void tiers_json_kv_string(tiers_json_t *j, const char *key, const char *s)
{
  tiers_json_key(j, key);
  tiers_json_string(j, s);
}

void tiers_json_kv_int(tiers_json_t *j, const char *key, int64_t v)
{
  tiers_json_key(j, key);
  tiers_json_int(j, v);
}

void tiers_json_kv_double(tiers_json_t *j, const char *key, double v)
{
  tiers_json_key(j, key);
  tiers_json_double(j, v);
}

void tiers_json_kv_bool(tiers_json_t *j, const char *key, int v)
{
  tiers_json_key(j, key);
  tiers_json_bool(j, v);
}

void tiers_json_kv_double_array(tiers_json_t *j, const char *key, const double *v, size_t n)
{
  tiers_json_key(j, key);
  tiers_json_array_begin(j);
  for (size_t i = 0; i < n; i++)
    tiers_json_double(j, v[i]);
  tiers_json_array_end(j);
}

void tiers_json_kv_int_array(tiers_json_t *j, const char *key, const int64_t *v, size_t n)
{
  tiers_json_key(j, key);
  tiers_json_array_begin(j);
  for (size_t i = 0; i < n; i++)
    tiers_json_int(j, v[i]);
  tiers_json_array_end(j);
}

int tiers_json_finish(tiers_json_t *j)
{
  fputc('\n', j->out);
  if (fflush(j->out) != 0 || ferror(j->out))
    return -1;
  return 0;
}
