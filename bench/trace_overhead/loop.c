/* bench/trace_overhead: a tight loop of small messages, timed round by round.
 *
 *   loop ITERS ROUNDS OUT
 *
 * Each iteration makes 3 MPI calls on MPI_COMM_SELF (Irecv from itself,
 * Send of 8 bytes to itself, Wait), so no other process's timing enters.
 * Rounds alternate "traced" and "paused" (tiers_trace_pause, when the
 * tracer is loaded), so the traced and untraced loops run in the same
 * process, interleaved.  Writes OUT.<rank>: one line per round
 * "traced|paused|stopped ns_per_call" (stopped: the tracer stopped during
 * the round, so it was not all traced). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#pragma weak tiers_trace_pause
#pragma weak tiers_trace_resume
#pragma weak tiers_trace_active
void tiers_trace_pause(void);
void tiers_trace_resume(void);
int tiers_trace_active(void);

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int iters = argc > 1 ? atoi(argv[1]) : 20000;
  int rounds = argc > 2 ? atoi(argv[2]) : 20;
  const char *out = argc > 3 ? argv[3] : "loop.out";
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", out, rank);
  FILE *f = fopen(path, "w");
  int traced = tiers_trace_active && tiers_trace_active();
  double x = 1.0, y;
  for (int r = 0; r < 2 * rounds + 2; r++) {  /* the first pair warms up */
    int paused = r % 2 == 1;
    if (tiers_trace_pause)
      paused ? tiers_trace_pause() : tiers_trace_resume();
    double t0 = now();
    for (int i = 0; i < iters; i++) {
      MPI_Request rq;
      MPI_Irecv(&y, 1, MPI_DOUBLE, 0, 1, MPI_COMM_SELF, &rq);
      MPI_Send(&x, 1, MPI_DOUBLE, 0, 1, MPI_COMM_SELF);
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
    }
    double t1 = now();
    /* a round in which the tracer stopped (sync: the buffer filled, there
     * being no world collective here) was not all traced: say so */
    const char *kind = traced && !paused ? (tiers_trace_active() ? "traced" : "stopped") : "paused";
    if (r >= 2 && f)
      fprintf(f, "%s %.3f\n", kind, (t1 - t0) * 1e9 / (3.0 * iters));
  }
  if (tiers_trace_resume)
    tiers_trace_resume();
  if (f)
    fclose(f);
  MPI_Finalize();
  return 0;
}
