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

static void put_string(FILE *out, const char *s)
{
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
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
