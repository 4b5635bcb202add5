/*
 * The thread team of one MPI process and the hybrid collectives of
 * tiers/hybrid.h (part 3): hybrid barrier, hybrid reductions, phase
 * timers.  Only the master thread (OpenMP thread 0) calls MPI, so
 * MPI_THREAD_FUNNELED is enough.
 *
 * Shared state written by the master and read by the other threads
 * (shared_rc, the reduction's result pointer) follows one rule: the master
 * writes it only after a team barrier that every thread passes after its
 * last read of the previous value, so no thread reads a stale or a future
 * value.
 */
#define _GNU_SOURCE
#include <sched.h>

#include <mpi.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "common/clock.h"
#include "team_internal.h"

int tiers_team_in_region(tiers_team_t team, int *in_region)
{
  if (!omp_in_parallel()) {
    *in_region = 0;
    return TIERS_OK;
  }
  if (omp_get_num_threads() != team->nthreads)
    TIERS_ERROR(TIERS_ERR_STATE, "a team collective was called in a parallel region of %d "
                "threads; the team has %d", omp_get_num_threads(), team->nthreads);
  *in_region = 1;
  return TIERS_OK;
}

int tiers_team_sync(tiers_team_t team)
{
  return tiers_barrier_wait(team->barrier);
}

/* ---------------------------------------------------------------------- */
/* Creation: topology, cpuset, pin order. */

/* Fills team->pus with the pin order restricted to the process's cpuset;
 * returns a tiers code (message recorded) on failure. */
static int plan_pinning(struct tiers_team *team)
{
  TIERS_CALL(tiers_topo_load(&team->topo, NULL));
  hwloc_topology_t hw = tiers_topo_hwloc(team->topo);
  int npus = tiers_topo_num_pus(team->topo);
  int *order = malloc((size_t)npus * sizeof *order);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!order || !set) {
    free(order);
    hwloc_bitmap_free(set);
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory planning the pinning of %d PUs", npus);
  }
  /* The cpuset is checked under every policy: more threads than PUs is
   * never what a hybrid run means.  Without pinning the order is compact,
   * only to count the PUs. */
  int rc = tiers_topo_pin_order(team->topo,
                                team->pin == TIERS_PIN_NONE ? TIERS_PIN_COMPACT : team->pin,
                                npus, order);
  if (rc == TIERS_OK && hwloc_get_cpubind(hw, set, HWLOC_CPUBIND_PROCESS) != 0)
    hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(hw));
  int usable = 0;
  for (int i = 0; rc == TIERS_OK && i < npus; i++) {
    hwloc_obj_t pu = tiers_topo_pu(team->topo, order[i]);
    if (pu && hwloc_bitmap_isset(set, pu->os_index))
      order[usable++] = order[i];
  }
  char text[256] = "";
  hwloc_bitmap_list_snprintf(text, sizeof text, set);
  hwloc_bitmap_free(set);
  if (rc != TIERS_OK) {
    free(order);
    return rc;
  }
  if (team->nthreads > usable) {
    free(order);
    TIERS_ERROR(TIERS_ERR_ARG, "%d threads exceed the %d PU%s of this process's cpuset (%s)",
                team->nthreads, usable, usable == 1 ? "" : "s", text);
  }
  /* Processes that share one cpuset (the launcher did not bind them) take
   * successive blocks of it, wrapping around when they outnumber its PUs,
   * instead of all starting on its first PU. */
  int first = team->share_count > 1 ? (team->share_index * team->nthreads) % usable : 0;
  for (int t = 0; t < team->nthreads; t++)
    team->pus[t] = team->pin == TIERS_PIN_NONE ? -1 : order[(first + t) % usable];
  free(order);
  return TIERS_OK;
}

/* Collective over @p comm: which of the processes of this node that have
 * the same cpuset as this one it is (*index) and how many there are
 * (*count).  Never fails: on any MPI error it answers 0 of 1. */
static void cpuset_sharers(MPI_Comm comm, int *index, int *count)
{
  *index = 0;
  *count = 1;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0)
    CPU_ZERO(&mask);
  /* FNV-1a over the mask: equal cpusets, equal colour */
  unsigned hash = 2166136261u;
  const unsigned char *bytes = (const unsigned char *)&mask;
  for (size_t i = 0; i < sizeof mask; i++)
    hash = (hash ^ bytes[i]) * 16777619u;
  MPI_Comm node = MPI_COMM_NULL, same = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return;
  if (MPI_Comm_split(node, (int)(hash & 0x3fffffff), 0, &same) == MPI_SUCCESS) {
    MPI_Comm_rank(same, index);
    MPI_Comm_size(same, count);
    MPI_Comm_free(&same);
  }
  MPI_Comm_free(&node);
}

/* Binds the calling team thread; returns a tiers code. */
static int bind_self(struct tiers_team *team, int thread)
{
  if (team->pin == TIERS_PIN_NONE || thread >= team->nthreads)
    return TIERS_OK;
  return tiers_topo_bind_thread(team->topo, team->pus[thread]);
}

/* Binds every thread of a fresh region; returns the first failure. */
static int bind_all(struct tiers_team *team)
{
  if (team->pin == TIERS_PIN_NONE)
    return TIERS_OK;
  int rc = TIERS_OK;
  char message[512] = "";
#pragma omp parallel num_threads(team->nthreads)
  {
    int t = omp_get_thread_num();
    int mine = omp_get_num_threads() == team->nthreads ? bind_self(team, t) : TIERS_ERR_STATE;
#pragma omp critical(tiers_team_bind)
    if (mine != TIERS_OK && rc == TIERS_OK) {
      rc = mine;
      strncpy(message, mine == TIERS_ERR_STATE ? "OpenMP gave fewer threads than asked"
                                               : tiers_last_error(),
              sizeof message - 1);
    }
  }
  if (rc != TIERS_OK)
    TIERS_ERROR(rc, "cannot bind the team's threads: %s", message);
  return TIERS_OK;
}

static int create_local(struct tiers_team *team)
{
  team->pus = malloc((size_t)team->nthreads * sizeof *team->pus);
  team->in_ptr = calloc((size_t)team->nthreads, sizeof *team->in_ptr);
  if (!team->pus || !team->in_ptr)
    TIERS_ERROR(TIERS_ERR_NOMEM, "out of memory creating a team of %d threads", team->nthreads);
  for (int t = 0; t < team->nthreads; t++)
    team->pus[t] = -1;
  TIERS_CALL(tiers_barrier_create(&team->barrier, team->nthreads));
  TIERS_CALL(plan_pinning(team));
  TIERS_CALL(bind_all(team));
  return TIERS_OK;
}

static void free_team(struct tiers_team *team)
{
  if (!team)
    return;
  tiers_barrier_destroy(&team->barrier);
  tiers_topo_destroy(&team->topo);
  free(team->pus);
  free(team->in_ptr);
  free(team);
}

int tiers_team_create(tiers_team_t *out, MPI_Comm comm, int nthreads, tiers_pin_policy_t pin)
{
  if (!out)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_create: NULL handle pointer");
  if (nthreads < 0)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_create: nthreads must be 0 or more (got %d)",
                nthreads);
  if (pin != TIERS_PIN_NONE && pin != TIERS_PIN_COMPACT && pin != TIERS_PIN_SCATTER)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_create: unknown pin policy %d", (int)pin);
  int initialized = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    TIERS_ERROR(TIERS_ERR_STATE, "tiers_team_create: MPI is not initialised");
  if (nthreads == 0)
    nthreads = omp_get_max_threads();
  MPI_Query_thread(&provided);
  if (nthreads > 1 && provided < MPI_THREAD_FUNNELED)
    TIERS_ERROR(TIERS_ERR_STATE, "a team of %d threads needs MPI_THREAD_FUNNELED; MPI was "
                "initialised with less (use MPI_Init_thread)", nthreads);

  struct tiers_team *team = calloc(1, sizeof *team);
  if (!team)
    TIERS_ERROR(TIERS_ERR_NOMEM, "tiers_team_create: out of memory");
  team->nthreads = nthreads;
  team->pin = pin;
  team->comm = MPI_COMM_NULL;
  cpuset_sharers(comm, &team->share_index, &team->share_count);
  omp_set_dynamic(0);
  int rc = create_local(team);

  /* Every process learns whether any failed, so that all return the same code. */
  int worst = rc;
  if (MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS) {
    free_team(team);
    TIERS_ERROR(TIERS_ERR_MPI, "tiers_team_create: MPI_Allreduce failed");
  }
  if (worst != TIERS_OK) {
    free_team(team);
    if (rc != TIERS_OK)
      return rc; /* our own message is recorded */
    TIERS_ERROR(worst, "another process could not create its team (%s)",
                tiers_strerror(worst));
  }
  if (MPI_Comm_dup(comm, &team->comm) != MPI_SUCCESS) {
    free_team(team);
    TIERS_ERROR(TIERS_ERR_MPI, "tiers_team_create: MPI_Comm_dup failed");
  }
  MPI_Comm_rank(team->comm, &team->rank);
  MPI_Comm_size(team->comm, &team->size);
  tiers_team_timers_reset(team);
  *out = team;
  return TIERS_OK;
}

int tiers_team_destroy(tiers_team_t *team)
{
  if (!team || !*team)
    return TIERS_OK;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if ((*team)->comm != MPI_COMM_NULL && !finalized)
    MPI_Comm_free(&(*team)->comm);
  free_team(*team);
  *team = NULL;
  return TIERS_OK;
}

int tiers_team_nthreads(tiers_team_t team) { return team ? team->nthreads : -1; }
int tiers_team_rank(tiers_team_t team) { return team ? team->rank : -1; }
int tiers_team_size(tiers_team_t team) { return team ? team->size : -1; }
MPI_Comm tiers_team_comm(tiers_team_t team) { return team ? team->comm : MPI_COMM_NULL; }

int tiers_team_thread_pu(tiers_team_t team, int thread)
{
  if (!team || thread < 0 || thread >= team->nthreads)
    return -1;
  return team->pus[thread];
}

int tiers_team_split(tiers_team_t team, long n, int thread, long *lo, long *hi)
{
  if (!team)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_split: NULL team");
  return tiers_split_range(n, team->nthreads, thread, lo, hi);
}

int tiers_team_parallel(tiers_team_t team, int (*fn)(tiers_team_t, int, void *), void *arg)
{
  if (!team || !fn)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_parallel: NULL team or function");
  int n = team->nthreads;
  int *rcs = calloc((size_t)n, sizeof *rcs);
  if (!rcs)
    TIERS_ERROR(TIERS_ERR_NOMEM, "tiers_team_parallel: out of memory");
  int got = n;
  char message[512] = "";
#pragma omp parallel num_threads(n)
  {
    int t = omp_get_thread_num();
    if (omp_get_num_threads() != n) {
#pragma omp single
      got = omp_get_num_threads();
    } else {
      int rc = bind_self(team, t);
      if (rc == TIERS_OK)
        rc = fn(team, t, arg);
      rcs[t] = rc;
      if (rc != TIERS_OK) {
#pragma omp critical(tiers_team_parallel)
        if (!message[0])
          strncpy(message, tiers_last_error(), sizeof message - 1);
      }
    }
  }
  int rc = TIERS_OK;
  for (int t = 0; t < n && rc == TIERS_OK; t++)
    rc = rcs[t];
  free(rcs);
  if (got != n)
    TIERS_ERROR(TIERS_ERR_STATE, "OpenMP gave %d threads to a team of %d", got, n);
  if (rc != TIERS_OK)
    return tiers_error_set(rc, __FILE__, __LINE__, "%s", message);
  return TIERS_OK;
}

/* ---------------------------------------------------------------------- */
/* Timers: kept by the master thread only. */

int tiers_team_timers_reset(tiers_team_t team)
{
  if (!team)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_timers_reset: NULL team");
  if (omp_get_thread_num() != 0)
    return TIERS_OK;
  for (int p = 0; p < TIERS_PHASE_COUNT; p++)
    team->seconds[p] = 0.0;
  team->phase = TIERS_PHASE_COMPUTE;
  team->since = tiers_now();
  return TIERS_OK;
}

tiers_phase_t tiers_team_phase(tiers_team_t team, tiers_phase_t phase)
{
  if (!team || omp_get_thread_num() != 0 || (int)phase < 0 || phase >= TIERS_PHASE_COUNT)
    return TIERS_PHASE_COUNT;
  double now = tiers_now();
  tiers_phase_t previous = team->phase;
  team->seconds[previous] += now - team->since;
  team->since = now;
  team->phase = phase;
  return previous;
}

int tiers_team_times(tiers_team_t team, double seconds[TIERS_PHASE_COUNT])
{
  if (!team || !seconds)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_times: NULL argument");
  for (int p = 0; p < TIERS_PHASE_COUNT; p++)
    seconds[p] = team->seconds[p];
  seconds[team->phase] += tiers_now() - team->since;
  return TIERS_OK;
}

/* Back to @p previous unless the switch in was refused (another thread). */
void tiers_team_phase_restore(tiers_team_t team, tiers_phase_t previous)
{
  if (previous != TIERS_PHASE_COUNT)
    tiers_team_phase(team, previous);
}

/* ---------------------------------------------------------------------- */
/* Hybrid barrier. */

int tiers_team_barrier(tiers_team_t team)
{
  if (!team)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_barrier: NULL team");
  int in_region;
  TIERS_CALL(tiers_team_in_region(team, &in_region));
  tiers_phase_t previous = tiers_team_phase(team, TIERS_PHASE_SYNC);
  int rc;
  if (!in_region) {
    rc = MPI_Barrier(team->comm) == MPI_SUCCESS ? TIERS_OK : TIERS_ERR_MPI;
  } else {
    tiers_team_sync(team);
    if (omp_get_thread_num() == 0)
      team->shared_rc = MPI_Barrier(team->comm) == MPI_SUCCESS ? TIERS_OK : TIERS_ERR_MPI;
    tiers_team_sync(team);
    rc = team->shared_rc;
  }
  tiers_team_phase_restore(team, previous);
  if (rc != TIERS_OK)
    TIERS_ERROR(rc, "tiers_team_barrier: MPI_Barrier failed");
  return TIERS_OK;
}

/* ---------------------------------------------------------------------- */
/* Hybrid reductions. */

#define REDUCE_LOOP(T, in_ptr, out, count, nthreads, op)                        \
  do {                                                                          \
    for (int i_ = 0; i_ < (count); i_++) {                                      \
      T acc_ = ((const T *)(in_ptr)[0])[i_];                                    \
      for (int t_ = 1; t_ < (nthreads); t_++) {                                 \
        T v_ = ((const T *)(in_ptr)[t_])[i_];                                   \
        if ((op) == TIERS_OP_SUM)                                               \
          acc_ += v_;                                                           \
        else if ((op) == TIERS_OP_MAX)                                          \
          acc_ = v_ > acc_ ? v_ : acc_;                                         \
        else                                                                    \
          acc_ = v_ < acc_ ? v_ : acc_;                                         \
      }                                                                         \
      ((T *)(out))[i_] = acc_;                                                  \
    }                                                                           \
  } while (0)

static MPI_Op mpi_op(tiers_op_t op)
{
  return op == TIERS_OP_SUM ? MPI_SUM : op == TIERS_OP_MAX ? MPI_MAX : MPI_MIN;
}

static int allreduce(tiers_team_t team, const void *in, void *out, int count, int is_double,
                     tiers_op_t op)
{
  if (!team || count < 0 || (count > 0 && (!in || !out)))
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_allreduce: invalid arguments");
  if (op != TIERS_OP_SUM && op != TIERS_OP_MAX && op != TIERS_OP_MIN)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_team_allreduce: unknown operator %d", (int)op);
  int in_region;
  TIERS_CALL(tiers_team_in_region(team, &in_region));
  MPI_Datatype type = is_double ? MPI_DOUBLE : MPI_INT64_T;
  size_t bytes = (size_t)count * 8;
  int rc;
  if (!in_region) {
    tiers_phase_t previous = tiers_team_phase(team, TIERS_PHASE_COMM);
    if (in != out && count > 0)
      memcpy(out, in, bytes);
    rc = MPI_Allreduce(MPI_IN_PLACE, out, count, type, mpi_op(op), team->comm) == MPI_SUCCESS
             ? TIERS_OK : TIERS_ERR_MPI;
    tiers_team_phase_restore(team, previous);
  } else {
    int t = omp_get_thread_num();
    tiers_phase_t previous = tiers_team_phase(team, TIERS_PHASE_SYNC);
    team->in_ptr[t] = in;
    if (t == 0)
      team->result = out;
    tiers_team_sync(team); /* A: every contribution is published */
    if (t == 0) {
      /* Combined in thread order: the result does not depend on timing.
       * out may alias in_ptr[0]; each element is read before it is written. */
      tiers_team_phase(team, TIERS_PHASE_COMM);
      if (is_double)
        REDUCE_LOOP(double, team->in_ptr, out, count, team->nthreads, op);
      else
        REDUCE_LOOP(int64_t, team->in_ptr, out, count, team->nthreads, op);
      team->shared_rc = MPI_Allreduce(MPI_IN_PLACE, out, count, type, mpi_op(op),
                                      team->comm) == MPI_SUCCESS ? TIERS_OK : TIERS_ERR_MPI;
      tiers_team_phase(team, TIERS_PHASE_SYNC);
    }
    tiers_team_sync(team); /* B: the result is in the master's out */
    rc = team->shared_rc;
    if (t != 0 && rc == TIERS_OK && count > 0)
      memcpy(out, team->result, bytes);
    tiers_team_sync(team); /* C: every copy is done before the master moves on */
    tiers_team_phase_restore(team, previous);
  }
  if (rc != TIERS_OK)
    TIERS_ERROR(rc, "tiers_team_allreduce: MPI_Allreduce failed");
  return TIERS_OK;
}

int tiers_team_allreduce_double(tiers_team_t team, const double *in, double *out, int count,
                                tiers_op_t op)
{
  return allreduce(team, in, out, count, 1, op);
}

int tiers_team_allreduce_int64(tiers_team_t team, const int64_t *in, int64_t *out, int count,
                               tiers_op_t op)
{
  return allreduce(team, in, out, count, 0, op);
}
