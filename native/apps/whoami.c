/*
 * tiers-whoami: every rank reports where it runs -- host, pid, the PUs it is
 * bound to (OS indices), the PUs each of its OpenMP threads is bound to, and
 * the environment variables asked for -- and rank 0 prints one JSON document
 * with all ranks.  It is how tests check what the launching module and
 * generated placements really did.
 *
 *   tiers-whoami [--env NAME]... [--fail-rank R [--exit-code C | --signal S]]
 *                [--sleep S]
 *
 * --fail-rank R makes rank R exit with code C (default 3) right after
 * MPI_Init, as a crashing rank would, or, with --signal S, kill itself with
 * signal S (e.g. 11 for a segmentation fault); --sleep S makes every rank
 * sleep S seconds before reporting (to test time limits).
 *
 * Output (one line on rank 0's stdout):
 *   {"schema":"tiers.whoami/1","mpi":"<MPI library version>","ranks":[
 *     {"rank":0,"size":2,"pid":..,"host":"..","netns":"net:[4026531833]",
 *      "cpuset":"0-1","threads":2,"thread_cpusets":["0","1"],
 *      "env":{"NAME":"value"|null}},
 *     ...]}
 * "netns" names the network namespace the rank runs in (the link
 * /proc/self/ns/net; "" where there is none), which tells the nodes of a
 * tiers vcluster apart; "netns_name" is that namespace's name under
 * /run/netns (``ip netns``: "tiers-n0" on a vcluster node, "" for none).  "threads" is omp_get_max_threads() (what
 * OMP_NUM_THREADS asked for);
 * "thread_cpusets" holds, per thread of one parallel region, the PUs that
 * thread is bound to.
 */
#include <mpi.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hwloc.h>

#include "common/json.h"
#include "common/tool.h"

#define MAX_ENV 64
#define CPUSET_CHARS 512

/* The PUs (OS indices, list syntax "0-3,8") the calling thread or process is bound to. */
static void bound_pus(hwloc_topology_t hw, int flags, char *out, size_t size)
{
  out[0] = '\0';
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (set && hwloc_get_cpubind(hw, set, flags) == 0)
    hwloc_bitmap_list_snprintf(out, size, set);
  hwloc_bitmap_free(set);
}

/* The name under /run/netns (ip netns) of the calling process's network
 * namespace, or "" when it has none there. */
static void netns_name(char *out, size_t size)
{
  out[0] = '\0';
  struct stat self;
  if (stat("/proc/self/ns/net", &self) != 0)
    return;
  DIR *dir = opendir("/run/netns");
  if (!dir)
    return;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    char path[512];
    struct stat st;
    if (e->d_name[0] == '.')
      continue;
    if ((size_t)snprintf(path, sizeof path, "/run/netns/%s", e->d_name) >= sizeof path)
      continue;
    if (stat(path, &st) == 0 && st.st_ino == self.st_ino && st.st_dev == self.st_dev) {
      snprintf(out, size, "%s", e->d_name);
      break;
    }
  }
  closedir(dir);
}

/* Writes this rank's record as one JSON object into a fresh buffer; returns its length. */
static size_t write_record(int rank, int size, const char **env_names, int n_env, char **text)
{
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  char netns[64] = "";
  ssize_t netns_len = readlink("/proc/self/ns/net", netns, sizeof netns - 1);
  netns[netns_len > 0 ? netns_len : 0] = '\0';
  char ns_name[256];
  netns_name(ns_name, sizeof ns_name);

  int n_threads = omp_get_max_threads();
  char *thread_sets = calloc((size_t)n_threads, CPUSET_CHARS);
  char process_set[CPUSET_CHARS] = "";
  hwloc_topology_t hw;
  int have_hw = hwloc_topology_init(&hw) == 0 && hwloc_topology_load(hw) == 0;
  if (have_hw) {
    bound_pus(hw, HWLOC_CPUBIND_PROCESS, process_set, sizeof process_set);
    if (thread_sets) {
#pragma omp parallel num_threads(n_threads)
      {
        int t = omp_get_thread_num();
        if (t < n_threads)
          bound_pus(hw, HWLOC_CPUBIND_THREAD, thread_sets + (size_t)t * CPUSET_CHARS,
                    CPUSET_CHARS);
      }
    }
    hwloc_topology_destroy(hw);
  }

  size_t len = 0;
  *text = NULL;
  FILE *mem = open_memstream(text, &len);
  if (!mem)
    tiers_tool_fail("cannot allocate the report of rank %d", rank);
  tiers_json_t j;
  tiers_json_init(&j, mem);
  tiers_json_object_begin(&j);
  tiers_json_kv_int(&j, "rank", rank);
  tiers_json_kv_int(&j, "size", size);
  tiers_json_kv_int(&j, "pid", (int64_t)getpid());
  tiers_json_kv_string(&j, "host", host);
  tiers_json_kv_string(&j, "netns", netns);
  tiers_json_kv_string(&j, "netns_name", ns_name);
  tiers_json_kv_string(&j, "cpuset", process_set);
  tiers_json_kv_int(&j, "threads", n_threads);
  tiers_json_key(&j, "thread_cpusets");
  tiers_json_array_begin(&j);
  for (int t = 0; t < n_threads && thread_sets; t++)
    tiers_json_string(&j, thread_sets + (size_t)t * CPUSET_CHARS);
  tiers_json_array_end(&j);
  tiers_json_key(&j, "env");
  tiers_json_object_begin(&j);
  for (int e = 0; e < n_env; e++) {
    const char *value = getenv(env_names[e]);
    if (value)
      tiers_json_kv_string(&j, env_names[e], value);
    else {
      tiers_json_key(&j, env_names[e]);
      tiers_json_null(&j);
    }
  }
  tiers_json_object_end(&j);
  tiers_json_object_end(&j);
  if (fclose(mem) != 0 || !*text)
    tiers_tool_fail("cannot write the report of rank %d", rank);
  free(thread_sets);
  return len;
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  tiers_tool_help(argc, argv,
                  "usage: mpirun -n P tiers-whoami [--env NAME]... [--fail-rank R] "
                  "[--exit-code C]\n"
                  "           [--signal S] [--sleep S]\n"
                  "Prints each rank's host, binding and the environment variables NAME\n"
                  "as one tiers.whoami/1 document; --fail-rank makes rank R exit with C\n"
                  "(or die of signal S) to test launchers.\n");
  const char *env_names[MAX_ENV];
  int n_env = 0;
  long fail_rank = -1, exit_code = 3, fail_signal = 0, sleep_s = 0;
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
    } else if (strcmp(a, "--signal") == 0 && v && tiers_parse_long(v, &fail_signal) == 0 &&
               fail_signal > 0 && fail_signal < 65) {
      i++;
    } else if (strcmp(a, "--sleep") == 0 && v && tiers_parse_long(v, &sleep_s) == 0) {
      i++;
    } else {
      tiers_tool_fail("bad option %s (use --env NAME (at most %d), --fail-rank R, "
                      "--exit-code C, --signal S, --sleep S)", a, MAX_ENV);
    }
  }

  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == fail_rank) {
    if (fail_signal) {
      fprintf(stderr, "tiers-whoami: rank %d failing on purpose with signal %ld\n", rank,
              fail_signal);
      fflush(stderr);
      signal((int)fail_signal, SIG_DFL);
      raise((int)fail_signal);
    }
    fprintf(stderr, "tiers-whoami: rank %d failing on purpose with exit code %ld\n", rank,
            exit_code);
    exit((int)exit_code);
  }
  if (sleep_s > 0)
    sleep((unsigned)sleep_s);

  char *record = NULL;
  int len = (int)write_record(rank, size, env_names, n_env, &record);

  int *lens = rank == 0 ? malloc((size_t)size * sizeof *lens) : NULL;
  int *offsets = rank == 0 ? malloc((size_t)size * sizeof *offsets) : NULL;
  MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  char *all = NULL;
  if (rank == 0) {
    size_t total = 0;
    for (int r = 0; r < size; r++) {
      offsets[r] = (int)total;
      total += (size_t)lens[r];
    }
    all = malloc(total + 1);
    if (!all || !lens || !offsets)
      tiers_tool_fail("cannot allocate the reports of %d ranks", size);
  }
  MPI_Gatherv(record, len, MPI_CHAR, all, lens, offsets, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    char library[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int library_len = 0;
    MPI_Get_library_version(library, &library_len);
    char *newline = strchr(library, '\n');
    if (newline)
      *newline = '\0';
    tiers_json_t j;
    tiers_json_init(&j, stdout);
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "schema", "tiers.whoami/1");
    tiers_json_kv_string(&j, "mpi", library);
    tiers_json_key(&j, "ranks");
    tiers_json_array_begin(&j);
    /* The records are complete JSON objects already: copy them in, with
     * their commas, between the writer's brackets. */
    for (int r = 0; r < size; r++)
      fprintf(stdout, "%s%.*s", r ? "," : "", lens[r], all + offsets[r]);
    tiers_json_array_end(&j);
    tiers_json_object_end(&j);
    if (tiers_json_finish(&j) != 0)
      tiers_tool_fail("cannot write the report to stdout");
  }
  free(all);
  free(lens);
  free(offsets);
  free(record);
  MPI_Finalize();
  return 0;
}
