/*
 * How two PUs share the machine right now: the round trip of a cache line
 * between threads pinned to them.
 *
 * On a virtual machine the host may place two virtual CPUs on the two
 * hyperthreads of one core, on two cores that share a cache, or on
 * different dies, and move them while a program runs; the topology the
 * guest sees says none of it.  Every figure between the two PUs (a
 * barrier, a lock, a message through shared memory) changes with the
 * placement.  The round trip tells the placements apart by the distance
 * the line travels (on a 2-vCPU AMD EPYC guest: about 100 ns or about
 * 450 ns, switching every few seconds).
 *
 * For the native tools only (tiers_tool): it starts and joins two threads.
 */
#ifndef TIERS_COMMON_PULINK_H
#define TIERS_COMMON_PULINK_H

#include "tiers/topo.h"

/** One measurement of a pair of PUs. */
typedef struct tiers_pulink {
  int pu_a, pu_b;  /**< logical PU indices */
  double rtt_ns;   /**< cache-line round trip: the median over blocks of round trips */
  int timed_out;   /**< 1 when the deadline (20 ms, 50 ms without quick) ended the
                        blocks: B's PU was taken by other work; rtt_ns is then from
                        what was done */
} tiers_pulink_t;

/**
 * @brief Measures the pair (a, b) once: well under 1 ms on a quiet machine
 *        (a deadline of 20 ms, or 50 ms without @p quick, bounds it on a
 *        busy one).
 * @param topo the machine (threads are pinned with tiers_topo_bind_thread)
 * @param a, b logical PU indices, different
 * @param quick fewer blocks (5 instead of 9, each of 200 round trips)
 * @param[out] out the measurement
 * @return TIERS_OK; TIERS_ERR_ARG for a == b or a PU that does not exist;
 *         TIERS_ERR_SYS when a thread cannot start or be pinned.  The
 *         calling thread's binding is not changed.
 */
int tiers_pulink_measure(tiers_topo_t topo, int a, int b, int quick, tiers_pulink_t *out);

#endif
