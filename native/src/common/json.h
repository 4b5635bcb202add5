/*
 * Internal: a streaming JSON writer for the native tools' result documents.
 * It tracks nesting so that callers never place commas themselves.
 * Not thread-safe: one writer per thread.
 */
#ifndef TIERS_COMMON_JSON_H
#define TIERS_COMMON_JSON_H

#include <stdint.h>
#include <stdio.h>

#define TIERS_JSON_MAX_DEPTH 64

typedef struct tiers_json {
  FILE *out;
  int depth;
  int count[TIERS_JSON_MAX_DEPTH]; /* values written at each level */
  int after_key;                   /* a key was written, its value comes next */
} tiers_json_t;

void tiers_json_init(tiers_json_t *j, FILE *out);
void tiers_json_object_begin(tiers_json_t *j);
void tiers_json_object_end(tiers_json_t *j);
void tiers_json_array_begin(tiers_json_t *j);
void tiers_json_array_end(tiers_json_t *j);
void tiers_json_key(tiers_json_t *j, const char *key);
void tiers_json_string(tiers_json_t *j, const char *s);
void tiers_json_int(tiers_json_t *j, int64_t v);
/* Non-finite numbers are written as null: JSON has no NaN or Infinity. */
void tiers_json_double(tiers_json_t *j, double v);
void tiers_json_bool(tiers_json_t *j, int v);
void tiers_json_null(tiers_json_t *j);

/* key + value in one call, for the common flat fields */
void tiers_json_kv_string(tiers_json_t *j, const char *key, const char *s);
void tiers_json_kv_int(tiers_json_t *j, const char *key, int64_t v);
void tiers_json_kv_double(tiers_json_t *j, const char *key, double v);
void tiers_json_kv_bool(tiers_json_t *j, const char *key, int v);

/* An array of numbers under a key. */
void tiers_json_kv_double_array(tiers_json_t *j, const char *key, const double *v, size_t n);
void tiers_json_kv_int_array(tiers_json_t *j, const char *key, const int64_t *v, size_t n);

/* Ends the document with a newline and flushes; returns 0, or -1 on a write error. */
int tiers_json_finish(tiers_json_t *j);

#endif
