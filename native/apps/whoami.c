/*
 * tiers-whoami: every rank reports where it runs -- host, pid, the PUs it is
 * bound to (OS indices), and the environment variables asked for -- and
 * rank 0 prints one JSON document with all ranks.  It is how tests check
 * what the launching module and generated placements really did.
 *
 *   tiers-whoami [--env NAME]... [--fail-rank R [--exit-code C]] [--sleep S]
 *
 * --fail-rank R makes rank R exit with code C (default 3) right after
 * MPI_Init, as a crashing rank would; --sleep S makes every rank sleep S
 * seconds before reporting (to test time limits).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "common/json.h"
#include "common/tool.h"

#define RECORD_BYTES 2048
#define MAX_ENV 16

/* Appends printf output to a fixed buffer, truncating safely. */
static void append(char *buf, size_t *len, const char *fmt, const char *value)
{
  if (*len >= RECORD_BYTES - 1)
    return;
  int n = snprintf(buf + *len, RECORD_BYTES - *len, fmt, value);
  if (n > 0)
    *len += (size_t)n < RECORD_BYTES - *len ? (size_t)n : RECORD_BYTES - 1 - *len;
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  const char *env_names[MAX_ENV];
  int n_env = 0;
  long fail_rank = -1, exit_code = 3, sleep_s = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--env") == 0 && v && n_env < MAX_ENV) {
      env_names[n_env++] = v;
      i++;
    } else if (strcmp(a, "--fail-rank") == 0 && v && tiers_parse_long(v, &fail_rank) == 0) {
      i++;
    } else if (strcmp(a, "--exit-code") == 0 && v && tiers_parse_long(v, &exit_code) == 0) {
      i++;
    } else if (strcmp(a, "--sleep") == 0 && v && tiers_parse_long(v, &sleep_s) == 0) {
      i++;
    } else {
      tiers_tool_fail("bad option %s (use --env NAME, --fail-rank R, --exit-code C, --sleep S)", a);
    }
  }

  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == fail_rank) {
    fprintf(stderr, "tiers-whoami: rank %d failing on purpose with exit code %ld\n", rank, exit_code);
    exit((int)exit_code);
  }
  if (sleep_s > 0)
    sleep((unsigned)sleep_s);

  char host[256] = "";
  gethostname(host, sizeof host - 1);

  /* Binding of this process, as OS PU indices. */
  char binding[512] = "";
  hwloc_topology_t hw;
  if (hwloc_topology_init(&hw) == 0 && hwloc_topology_load(hw) == 0) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set && hwloc_get_cpubind(hw, set, HWLOC_CPUBIND_PROCESS) == 0)
      hwloc_bitmap_list_snprintf(binding, sizeof binding, set);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(hw);
  }

  char record[RECORD_BYTES];
  size_t len = 0;
  char num[64];
  snprintf(num, sizeof num, "%d", rank);
  append(record, &len, "{\"rank\":%s", num);
  snprintf(num, sizeof num, "%d", size);
  append(record, &len, ",\"size\":%s", num);
  snprintf(num, sizeof num, "%ld", (long)getpid());
  append(record, &len, ",\"pid\":%s", num);
  append(record, &len, ",\"host\":\"%s\"", host);
  append(record, &len, ",\"cpuset\":\"%s\"", binding);
  append(record, &len, "%s", ",\"env\":{");
  for (int e = 0; e < n_env; e++) {
    const char *value = getenv(env_names[e]);
    append(record, &len, e ? ",\"%s\":" : "\"%s\":", env_names[e]);
    if (value) {
      /* Values with quotes or backslashes are reported as null rather than escaped. */
      if (strpbrk(value, "\"\\"))
        append(record, &len, "%s", "null");
      else
        append(record, &len, "\"%s\"", value);
    } else {
      append(record, &len, "%s", "null");
    }
  }
  append(record, &len, "%s", "}}");
  record[RECORD_BYTES - 1] = '\0';

  char *all = rank == 0 ? malloc((size_t)size * RECORD_BYTES) : NULL;
  MPI_Gather(record, RECORD_BYTES, MPI_CHAR, all, RECORD_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("{\"schema\":\"tiers.whoami/1\",\"ranks\":[");
    for (int r = 0; r < size; r++)
      printf("%s%s", r ? "," : "", all + (size_t)r * RECORD_BYTES);
    printf("]}\n");
    free(all);
  }
  MPI_Finalize();
  return 0;
}
