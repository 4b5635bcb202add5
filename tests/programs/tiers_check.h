/* The checks of the test programs of tests/programs/ (mbcmpi_*.c): count
 * every check and every failure, say what failed, and print the sums over
 * the ranks in the one line the Python tests parse:
 *
 *   checks N failed F            (rank 0, from tiers_check_summary())
 *
 * CHECK(cond, fmt, ...) counts one check; when cond is false it prints
 * "FAIL rank R: <fmt ...>" and a newline on stdout, R being the `rank`
 * (in MPI_COMM_WORLD) that the including file declares.  Define
 * TIERS_CHECK_WITH_LINE before the include to end the line with
 * " (line L)", L the line of the CHECK.  tiers_tally(ok) counts a check
 * silently (for programs that report failures their own way).
 */
#ifndef TIERS_CHECK_H
#define TIERS_CHECK_H

#include <mpi.h>
#include <stdio.h>

static long tiers_checks, tiers_failed;

/* count one check; return ok */
static inline int tiers_tally(int ok)
{
  tiers_checks++;
  if (!ok)
    tiers_failed++;
  return ok;
}

#ifdef TIERS_CHECK_WITH_LINE
#define TIERS_CHECK_END_() printf(" (line %d)\n", __LINE__)
#else
#define TIERS_CHECK_END_() printf("\n")
#endif

#define CHECK(cond, ...)                \
  do {                                  \
    if (!tiers_tally(!!(cond))) {       \
      printf("FAIL rank %d: ", rank);   \
      printf(__VA_ARGS__);              \
      TIERS_CHECK_END_();               \
      fflush(stdout);                   \
    }                                   \
  } while (0)

/* Collective over MPI_COMM_WORLD: rank 0 prints "checks N failed F", the
 * sums over all ranks.  Returns F on rank 0 and 0 on the others. */
static inline long tiers_check_summary(void)
{
  long mine[2] = {tiers_checks, tiers_failed}, sum[2] = {0, 0};
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Reduce(mine, sum, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (me == 0)
    printf("checks %ld failed %ld\n", sum[0], sum[1]);
  return me == 0 ? sum[1] : 0;
}

#endif
