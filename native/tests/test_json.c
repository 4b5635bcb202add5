/* The JSON writer places commas and escapes strings correctly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

#include "check.h"


static char *render(void (*build)(tiers_json_t *))
{
  char *text = NULL;
  size_t size = 0;
  FILE *mem = open_memstream(&text, &size);
  tiers_json_t j;
  tiers_json_init(&j, mem);
  build(&j);
  tiers_json_finish(&j);
  fclose(mem);
  return text;
}

static void nested(tiers_json_t *j)
{
  tiers_json_object_begin(j);
  tiers_json_kv_string(j, "name", "a\"b\\c\n\x01");
  tiers_json_kv_int(j, "n", -42);
  tiers_json_key(j, "list");
  tiers_json_array_begin(j);
  tiers_json_double(j, 0.5);
  tiers_json_double(j, NAN);
  tiers_json_object_begin(j);
  tiers_json_object_end(j);
  tiers_json_array_begin(j);
  tiers_json_array_end(j);
  tiers_json_bool(j, 1);
  tiers_json_array_end(j);
  double v[3] = {1, 2.25, INFINITY};
  tiers_json_kv_double_array(j, "v", v, 3);
  tiers_json_object_end(j);
}

int main(void)
{
  char *text = render(nested);
  const char *expect =
      "{\"name\":\"a\\\"b\\\\c\\n\\u0001\",\"n\":-42,\"list\":[0.5,null,{},[],true],"
      "\"v\":[1,2.25,null]}\n";
  if (strcmp(text, expect) != 0)
    fprintf(stderr, "got:    %sexpect: %s", text, expect);
  CHECK(strcmp(text, expect) == 0);
  free(text);
  return failures ? 1 : 0;
}
