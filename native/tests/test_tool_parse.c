/*
 * The number parsers of the native tools never truncate or wrap: every
 * value is either read exactly or refused (the tools then print one line
 * and exit 2).
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/tool.h"

#include "check.h"

static int list(const char *text, int **values)
{
  *values = NULL;
  return tiers_parse_int_list(text, values);
}

static void test_int_list(void)
{
  int *v;
  CHECK(list("1,2,4", &v) == 3 && v[0] == 1 && v[1] == 2 && v[2] == 4);
  free(v);
  CHECK(list("1-4,8", &v) == 5 && v[0] == 1 && v[3] == 4 && v[4] == 8);
  free(v);
  CHECK(list("2147483647", &v) == 1 && v[0] == INT_MAX);
  free(v);
  /* 2^32 + 1 and 2^32 + 2 used to become 1 and 2 */
  CHECK(list("4294967297", &v) == -1);
  CHECK(list("4294967298", &v) == -1);
  CHECK(list("2147483648", &v) == -1);
  CHECK(list("1,99999999999999999999999", &v) == -1);
  CHECK(list("1-4294967297", &v) == -1);
  CHECK(list("0", &v) == -1);
  CHECK(list("-1", &v) == -1);
  CHECK(list("1,,2", &v) == -1);
  CHECK(list("1,", &v) == -1);
  CHECK(list(",1", &v) == -1);
  CHECK(list("", &v) == -1);
  CHECK(list("4-2", &v) == -1);
  CHECK(list("1-", &v) == -1);
  CHECK(list("1x", &v) == -1);
  CHECK(list(" 1", &v) == -1);
  CHECK(list("+1", &v) == -1);
  CHECK(list("1-2000000", &v) == -1); /* more than TIERS_LIST_MAX numbers */
  CHECK(list("1-1000000,1-1000000", &v) == -1);
}

static void test_long(void)
{
  long v = -7;
  CHECK(tiers_parse_long("0", &v) == 0 && v == 0);
  CHECK(tiers_parse_long("9223372036854775807", &v) == 0 && v == LONG_MAX);
  CHECK(tiers_parse_long("9223372036854775808", &v) == -1);
  CHECK(tiers_parse_long("99999999999999999999", &v) == -1);
  CHECK(tiers_parse_long("-1", &v) == -1);
  CHECK(tiers_parse_long("1.5", &v) == -1);
  CHECK(tiers_parse_long("", &v) == -1);
  CHECK(tiers_parse_long(NULL, &v) == -1);
  CHECK(tiers_parse_long("12 ", &v) == -1);
}

static void test_double(void)
{
  double v = 0;
  CHECK(tiers_parse_double("0.25", &v) == 0 && v == 0.25);
  CHECK(tiers_parse_double("1e3", &v) == 0 && v == 1000.0);
  CHECK(tiers_parse_double("0", &v) == -1);
  CHECK(tiers_parse_double("-1", &v) == -1);
  CHECK(tiers_parse_double("nan", &v) == -1);
  CHECK(tiers_parse_double("inf", &v) == -1);
  CHECK(tiers_parse_double("infinity", &v) == -1);
  CHECK(tiers_parse_double("1e999", &v) == -1);
  CHECK(tiers_parse_double("1x", &v) == -1);
}

static void test_size(void)
{
  uint64_t b = 0;
  CHECK(tiers_parse_size("4096", &b) == 0 && b == 4096);
  CHECK(tiers_parse_size("64K", &b) == 0 && b == 65536);
  CHECK(tiers_parse_size("1.5M", &b) == 0 && b == 3u << 19);
  CHECK(tiers_parse_size("2GiB", &b) == 0 && b == 2ull << 30);
  CHECK(tiers_parse_size("512mb", &b) == 0 && b == 512ull << 20);
  CHECK(tiers_parse_size("99999999999", &b) == 0 && b == 99999999999ull);
  CHECK(tiers_parse_size("8192T", &b) == 0 && b == TIERS_SIZE_MAX);
  CHECK(tiers_parse_size("8193T", &b) == -1);
  CHECK(tiers_parse_size("99999999999999999999T", &b) == -1);
  CHECK(tiers_parse_size("1e3", &b) == -1);
  CHECK(tiers_parse_size("0x10", &b) == -1);
  CHECK(tiers_parse_size("inf", &b) == -1);
  CHECK(tiers_parse_size("-1", &b) == -1);
  CHECK(tiers_parse_size("4Q", &b) == -1);
  CHECK(tiers_parse_size("", &b) == -1);
}

int main(void)
{
  test_int_list();
  test_long();
  test_double();
  test_size();
  return TIERS_TEST_RESULT;
}
