/*
 * Internal: the team structure shared by team.c and halo.c of
 * libtiers-hybrid.  Not installed.
 */
#ifndef TIERS_HYBRID_TEAM_INTERNAL_H
#define TIERS_HYBRID_TEAM_INTERNAL_H

#include <mpi.h>

#include "tiers/hybrid.h"
#include "tiers/topo.h"

struct tiers_team {
  MPI_Comm comm;          /* duplicate of the creator's communicator */
  int rank, size;
  int nthreads;
  tiers_pin_policy_t pin;
  tiers_topo_t topo;      /* this machine; NULL without pinning */
  int *pus;               /* per thread: logical PU, or -1 */
  int share_index;        /* among the processes of this node with the same
                             cpuset (a launcher that did not bind): which */
  int share_count;        /* one this is, and how many there are */
  tiers_barrier_t barrier;
  /* Written by the master between two team barriers (see team.c). */
  int shared_rc;
  void *result;           /* the master's reduction output */
  const void **in_ptr;    /* per thread: its reduction input */
  /* Phase timers of the master thread. */
  double seconds[TIERS_PHASE_COUNT];
  tiers_phase_t phase;
  double since;
};

/* 1 in *in_region when called inside a parallel region of the team's size,
 * 0 outside any parallel region; TIERS_ERR_STATE for a region of another size. */
int tiers_team_in_region(tiers_team_t team, int *in_region);

/* The team spin barrier (thread level only). */
int tiers_team_sync(tiers_team_t team);

/* Switches back to @p previous after a tiers_team_phase() switch. */
void tiers_team_phase_restore(tiers_team_t team, tiers_phase_t previous);

#endif
