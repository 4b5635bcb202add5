/*
 * tiers-bind: binds the calling rank to the PUs a placement gives it, then
 * runs the program.
 *
 *   mpiexec -f hosts -bind-to none tiers-bind --pus 3,1,0,2 -- ./app args
 *
 * --pus holds one entry per rank, in rank order; an entry is one OS PU
 * index or several joined by '+' ("0+1").  The rank is read from the
 * launcher's environment: OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK
 * (MPICH Hydra), PMIX_RANK, SLURM_PROCID (srun), in that order.
 *
 * Launchers apply one binding list to every host, indexed by the rank's
 * local number (Hydra's -bind-to user:, Slurm's --cpu-bind=map_cpu:).
 * When a placement puts different local orders on different hosts, no
 * such list expresses it; tiers map then asks the launcher not to bind and
 * starts every rank through this tool.  It binds the whole process before
 * exec, so the program and every thread it starts inherit the binding.
 *
 * Exit status: the program's (exec replaces this process); 2 with one line
 * "tiers-bind: error: ..." when the list, the rank or the binding is wrong.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/tool.h"

static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                        "SLURM_PROCID"};

static void usage(void) {
  fprintf(stderr, "usage: tiers-bind --pus LIST -- PROGRAM [ARGS...]\n"
                  "  LIST: per rank, in rank order, an OS PU index or indices joined by '+'\n"
                  "        (e.g. 3,1,0+1,2); the rank comes from the launcher's environment\n");
}

/* Returns this process's rank from the launcher's environment; fails when
 * none of the variables is set or one holds no rank. */
static long launcher_rank(void) {
  for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0]; i++) {
    const char *v = getenv(rank_vars[i]);
    if (v == NULL)
      continue;
    long rank;
    if (tiers_parse_long(v, &rank) != 0)
      tiers_tool_fail("%s=%s is not a rank", rank_vars[i], v);
    return rank;
  }
  tiers_tool_fail("no rank in the environment (none of OMPI_COMM_WORLD_RANK, PMI_RANK, "
                  "PMIX_RANK, SLURM_PROCID is set): start tiers-bind through the launcher");
}

/* Fills @p set with entry @p rank of @p list ("3,1,0+1,2"); every entry is
 * checked, so that all ranks agree on whether the list is valid.  Fails on
 * bad text or when the list has no entry for the rank. */
static void entry_of(const char *list, long rank, cpu_set_t *set) {
  CPU_ZERO(set);
  long index = 0;
  const char *p = list;
  for (;;) {
    const char *end = p + strcspn(p, ",");
    if (end == p)
      tiers_tool_fail("--pus '%s': empty entry %ld", list, index);
    for (const char *q = p; q < end;) {
      const char *stop = q + strcspn(q, "+,");
      char word[32];
      size_t len = (size_t)(stop - q);
      long pu;
      if (len == 0 || len >= sizeof word)
        tiers_tool_fail("--pus '%s': bad PU in entry %ld", list, index);
      memcpy(word, q, len);
      word[len] = '\0';
      if (tiers_parse_long(word, &pu) != 0 || pu >= CPU_SETSIZE)
        tiers_tool_fail("--pus '%s': '%s' is not a PU index", list, word);
      if (index == rank)
        CPU_SET((int)pu, set);
      q = *stop == '+' ? stop + 1 : stop;
    }
    if (*end == '\0')
      break;
    p = end + 1;
    index++;
  }
  if (rank >= index + 1)
    tiers_tool_fail("--pus has %ld entries: none for rank %ld", index + 1, rank);
}

int main(int argc, char **argv) {
  tiers_tool_init(argv[0]);
  const char *list = NULL;
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--pus") == 0 && i + 1 < argc) {
      list = argv[++i];
    } else if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage();
      return 0;
    } else {
      tiers_tool_fail("unknown option '%s' (usage: tiers-bind --pus LIST -- PROGRAM ...)",
                      argv[i]);
    }
  }
  if (list == NULL)
    tiers_tool_fail("--pus LIST is required (one PU entry per rank)");
  if (i >= argc)
    tiers_tool_fail("no program to run after --");
  cpu_set_t set;
  long rank = launcher_rank();
  entry_of(list, rank, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    tiers_tool_fail("rank %ld: cannot bind to entry %ld of --pus: %s", rank, rank,
                    strerror(errno));
  execvp(argv[i], argv + i);
  tiers_tool_fail("cannot run %s: %s", argv[i], strerror(errno));
}
