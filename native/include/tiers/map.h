/**
 * @file tiers/map.h
 * @brief Process placement (the AFC mapping paper's §2): group the ranks of a
 *        communication graph into one part per node so that few bytes cross
 *        nodes, then place each group on its node's cores so that heavy
 *        pairs share the closest layers.  Both steps use Scotch.
 *
 * The communication graph is given in compressed sparse rows (CSR): the
 * neighbours of rank v are adjncy[xadj[v] .. xadj[v+1]-1] and adjwgt holds
 * the bytes exchanged with each (both directions summed).  The graph must be
 * symmetric (v lists u with the same weight as u lists v) and have no
 * self-loops; tiers_map_check() says whether it is.  Memory used by every
 * function is linear in the number of ranks plus edges: no n x n matrix is
 * ever built.
 *
 * A node is described as a symmetric tree (the Scotch "tleaf" target): the
 * number of children at each level from the node's root down to the cores,
 * and the cost of a pair of cores whose closest common level is each level
 * (the cost of a byte: a latency-per-byte or 1/bandwidth; only ratios
 * matter).  The slots of a node are its cores in hwloc logical order, which
 * is the tree's leaf order.
 *
 * Every function is reentrant (Scotch runs in a private context with its
 * own random state, so a seed gives the same result every time) and none is
 * an MPI call.  Nothing is printed: libtiers defines Scotch's error-print
 * functions (it does not link libscotcherr), so a function that fails in
 * Scotch ends tiers_last_error() with " (Scotch: <Scotch's message>)", and
 * tiers_map_scotch_message() returns Scotch's last error or warning.  (A
 * program's own Scotch calls, outside libtiers, still print theirs on
 * stderr, as with libscotcherr.)
 */
#ifndef TIERS_MAP_H
#define TIERS_MAP_H

#include <stdint.h>

#include "tiers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A communication graph in CSR form (the arrays are borrowed, not copied). */
typedef struct tiers_map_graph {
  int n;                 /**< number of ranks (vertices) */
  const int64_t *xadj;   /**< n+1 offsets into adjncy/adjwgt; xadj[0] = 0 */
  const int32_t *adjncy; /**< neighbour ranks */
  const double *adjwgt;  /**< bytes per edge, finite and >= 0; NULL: every edge weighs 1 */
} tiers_map_graph_t;

/** The shape of one node: a symmetric tree of levels above the cores. */
typedef struct tiers_map_node {
  int levels;          /**< number of levels (0: a node of one core) */
  const int *arity;    /**< children per object at each level, root first (each >= 1) */
  const double *cost;  /**< cost of a pair of cores whose closest common object is at each
                            level (root first), decreasing, > 0 */
} tiers_map_node_t;

/**
 * @brief Checks a graph and counts its connected components.
 * @param g the graph
 * @param[out] components number of connected components (may be NULL)
 * @param[out] component per rank, the index of its component (components are
 *        numbered by their lowest rank); may be NULL
 * @return TIERS_OK; TIERS_ERR_INPUT for an index out of range, a self-loop,
 *         a negative or non-finite weight, or an asymmetric graph (the
 *         message names the first offending rank); TIERS_ERR_ARG for NULL
 *         arrays or n < 1.
 */
TIERS_API int tiers_map_check(const tiers_map_graph_t *g, int *components, int *component);

/**
 * @brief Step 3 of the AFC mapping paper: groups ranks into nodes, minimising the bytes
 *        that cross nodes (Scotch k-way mapping onto a weighted complete
 *        graph), with every group within its node's capacity.
 *
 * Ranks fill the first nodes whose capacities add up to at least n (the
 * nodes that a block placement would use), spread in proportion to the
 * capacities.  Groups that Scotch leaves over capacity are repaired by
 * moving the ranks that lose the fewest bytes to nodes with room.
 * @param g the graph (see tiers_map_check)
 * @param nodes number of nodes
 * @param capacity per node, the cores ranks may use (each >= 0)
 * @param seed seed of Scotch's random generator
 * @param[out] node_of per rank, its node (0..nodes-1)
 * @return TIERS_OK; TIERS_ERR_ARG when the capacities add up to fewer than n;
 *         TIERS_ERR_UNSUPPORTED when the graph is too large for Scotch's
 *         32-bit indices; TIERS_ERR_INPUT when Scotch rejects the graph;
 *         TIERS_ERR_NOMEM.
 */
TIERS_API int tiers_map_group(const tiers_map_graph_t *g, int nodes, const int *capacity,
                              uint64_t seed, int *node_of);

/**
 * @brief Step 3 with measured, non-uniform costs between nodes (step 5 of
 *        the AFC mapping paper's §5, "map the grouped subdomains onto the node graph"):
 *        groups ranks into nodes so that the bytes that cross nodes travel
 *        on the cheapest node pairs.
 *
 * Scotch maps the rank graph onto a decomposition-defined target ("deco")
 * whose terminals are the nodes, weighted by their capacities, with the
 * measured costs as distances; its domain tree is built by recursive,
 * count-balanced bipartition of the nodes (Scotch's partitioner on their
 * complete graph weighted by 1/cost), so each split separates the dearest
 * pairs.  Heavy rank pairs thus land on one node or on a cheap pair.  When
 * the capacities add up to more than n, the nodes used are chosen greedily:
 * the cheapest pair first, then the node with the smallest summed cost to
 * those chosen, until the ranks fit.  Groups that Scotch leaves over
 * capacity are repaired as in tiers_map_group (by bytes, not by cost);
 * then pairs of groups swap nodes while that lowers the sum over group
 * pairs of bytes x link cost (Scotch's recursive bipartition only
 * approximates this assignment and can miss it on small targets).
 * @param g the graph (see tiers_map_check)
 * @param nodes number of nodes (at most 2048: the target keeps a nodes x
 *        nodes distance matrix)
 * @param capacity per node, the cores ranks may use (each >= 0)
 * @param link_cost nodes x nodes, row-major, symmetric, > 0 and finite off
 *        the diagonal (the diagonal is ignored); only ratios matter.  NULL:
 *        every pair costs the same (exactly tiers_map_group).
 * @param seed seed of Scotch's random generator
 * @param[out] node_of per rank, its node (0..nodes-1)
 * @return as tiers_map_group; TIERS_ERR_ARG also for a bad cost matrix or
 *         more than 2048 nodes.
 */
TIERS_API int tiers_map_group_costs(const tiers_map_graph_t *g, int nodes, const int *capacity,
                                    const double *link_cost, uint64_t seed, int *node_of);

/**
 * @brief Step 4 of the AFC mapping paper: places each node's group on the node's cores
 *        (Scotch static mapping of the group's induced subgraph onto the
 *        node's tleaf tree), one rank per core.
 * @param g the graph
 * @param node_of per rank, its node (from tiers_map_group or any grouping)
 * @param nodes number of nodes
 * @param node the shape of every node; at most the product of the arities
 *        ranks may share a node
 * @param seed seed of Scotch's random generator
 * @param[out] slot_of per rank, its core within the node (0..cores-1),
 *        distinct within each node
 * @return TIERS_OK; TIERS_ERR_ARG for a bad node shape or a group larger
 *         than the node; TIERS_ERR_INPUT when Scotch fails; TIERS_ERR_NOMEM.
 */
TIERS_API int tiers_map_place(const tiers_map_graph_t *g, const int *node_of, int nodes,
                              const tiers_map_node_t *node, uint64_t seed, int *slot_of);

/**
 * @brief Steps 3 and 4 in one Scotch static mapping: the graph mapped onto
 *        the tleaf tree of the whole machine (``nodes`` nodes, then the
 *        node's levels), as Scotch's own ``gmap`` maps onto a tleaf target.
 *
 * Nodes Scotch leaves over their cores are repaired as in tiers_map_group;
 * ranks that share a core are moved to the free core of their node closest
 * to their neighbours, as in tiers_map_place.
 * @param g the graph
 * @param nodes number of nodes, each of the node's product of arities cores
 *        (nodes x cores >= n)
 * @param node_cost cost of a pair of cores on two nodes (above every level
 *        of @p node); only ratios to the node's costs matter
 * @param node the shape of every node
 * @param strategy Scotch's mapping strategy flags (SCOTCH_STRATQUALITY,
 *        SCOTCH_STRATBALANCE, SCOTCH_STRATRECURSIVE, ... ORed), or -1 for
 *        Scotch's default strategy (what gmap uses without -c)
 * @param balance load imbalance Scotch may leave (0..1; ignored with -1)
 * @param seed seed of Scotch's random generator
 * @param[out] node_of per rank, its node (0..nodes-1)
 * @param[out] slot_of per rank, its core within the node, distinct per node
 * @return TIERS_OK; TIERS_ERR_ARG for bad arguments or too few cores;
 *         TIERS_ERR_UNSUPPORTED for more cores than 32-bit indices hold;
 *         TIERS_ERR_INPUT when Scotch fails; TIERS_ERR_NOMEM.
 *         Not thread-safe with other Scotch users of the process.
 */
TIERS_API int tiers_map_tree(const tiers_map_graph_t *g, int nodes, double node_cost,
                             const tiers_map_node_t *node, int strategy, double balance,
                             uint64_t seed, int *node_of, int *slot_of);

/**
 * @brief Refines a placement by swapping ranks between nodes (a
 *        Kernighan-Lin / Fiduccia-Mattheyses family pass).
 *
 * Phase 1 lowers the bytes the busiest node sends to other nodes, phase 2
 * the bytes crossing nodes.  A swap of two ranks on different nodes is
 * taken only when the inter-node bytes do not grow and no node it changes
 * ends above both its own old volume and the busiest node's volume, so
 * the result is never worse on either measure; the best such swap around
 * the node worked on is applied, and again, until none helps or the
 * budget is spent.  Phases 3 and 4 are Kernighan-Lin passes between two
 * nodes (worse swaps allowed inside a pass, the pass cut back to its best
 * prefix): the busiest node with each node it talks to, for the larger of
 * the two nodes' sent bytes (inter-node bytes not growing), then every two
 * nodes that talk, for the inter-node bytes (no node above the busiest
 * node's volume).  Swapped ranks trade their slots, so every node keeps
 * its rank count and every rank a distinct slot.  Then, where ranks x
 * nodes is at most 2^18, chains of moves (a rank moves to another node,
 * one of that node's ranks moves on, ... until a move fills the node the
 * chain began at: cyclic exchanges among 2 or more nodes), each rank once
 * a pass, the best move first even when worse, each pass cut back to its
 * best state where every node holds its slots: passes for the inter-node
 * bytes (the busiest node not above the start's), then for the busiest
 * node (the inter-node bytes not above what the first passes reached);
 * kept when no worse than the start on either measure and below the
 * swaps' result on the inter-node bytes (or equal there and below on the
 * busiest node).  Then the balancing phase (tiers_map_refine_within),
 * which lowers the busiest node's volume without raising the inter-node
 * bytes above what the swaps and chains reached.  Deterministic.
 * @param g the graph
 * @param sent_bytes per CSR entry e of rank v, the bytes v sends to
 *        adjncy[e] (the rest of adjwgt[e] goes the other way); NULL: half
 *        each way
 * @param nodes number of nodes
 * @param[in,out] node_of per rank, its node
 * @param[in,out] slot_of per rank, its slot in the node
 * @param budget work limit, in edges visited (swaps tried x their degrees),
 *        for phases 1-2, again for phases 3-4, again for the chains and
 *        again for the balancing (there: table entries read and edges
 *        visited)
 * @param[out] swaps swaps and moves applied, plus the balancing's rounds
 *        when its result is kept (may be NULL)
 * @return TIERS_OK; TIERS_ERR_ARG for bad arguments; TIERS_ERR_NOMEM.
 *         Thread-safe (no shared state).
 */
TIERS_API int tiers_map_refine(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                               int *node_of, int *slot_of, int64_t budget, int *swaps);

/**
 * @brief tiers_map_refine with a cap on the balancing phase's budget of
 *        inter-node bytes.
 *
 * tiers_map_refine ends, where ranks x nodes is at most 2^18, with a
 * balancing phase: an iterated local search for the busiest node that may
 * pass through states with more inter-node bytes.  Each round kicks the
 * placement with a swap of a rank of the busiest node and a rank of
 * another node that lowers the busiest node's volume (a few such swaps,
 * those that lower it most), repairs each kicked state (greedy swaps for
 * the busiest node and for the inter-node bytes, then chain passes) and
 * goes on from the best repaired one, which may lie up to 2 % above the
 * budget.  The budget is the inter-node bytes the swaps and chains reached
 * (or @p limit_cut when lower), and the phase's result -- the best state
 * seen within it -- is kept only when its busiest node sends less than
 * theirs (or as much, with fewer inter-node bytes): it trades nothing, so
 * the result is never worse than the start on either measure.  Work:
 * @p budget again (table entries read and edges visited).  Deterministic.
 * @param limit_cut a cap on the balancing's budget of inter-node bytes
 *        (both directions): INFINITY for none (tiers_map_refine), e.g. the
 *        fewest of the candidates a mapping compares; a value below what
 *        the swaps and chains reach turns the balancing off
 * @return as tiers_map_refine.  Thread-safe (no shared state).
 */
TIERS_API int tiers_map_refine_within(const tiers_map_graph_t *g, const double *sent_bytes,
                                      int nodes, int *node_of, int *slot_of, int64_t budget,
                                      double limit_cut, int *swaps);

/** What a placement costs for one exchange of the graph (tiers_map_eval). */
typedef struct tiers_map_cost {
  double inter;    /**< bytes between ranks on different nodes, both directions */
  double sent_max; /**< the most bytes one node sends to other nodes */
  int sent_node;   /**< that node (the lowest index on a tie) */
  double recv_max; /**< the most bytes one node receives from other nodes */
  int recv_node;   /**< that node */
  double rank_s;   /**< the largest serial send time of one rank (seconds) */
  int rank;        /**< that rank */
  double link_s;   /**< the largest time one node's link needs for what it sends */
  int link_node;   /**< that node */
} tiers_map_cost_t;

/**
 * @brief Measures a placement: the inter-node bytes, the bytes the busiest
 *        node sends and receives, and the time model of docs/map.md (a
 *        rank sends its messages one after another at the latency and
 *        bandwidth of the layer joining the two cores, or of the node link;
 *        a node's link carries all it sends to other nodes).
 *
 * Linear in ranks plus edges, no allocation but three per-node arrays:
 * cheap enough to rank every candidate of a mapping in native code.
 * @param g the graph
 * @param sent_bytes per CSR entry, bytes v sends to adjncy[e]; NULL: half each way
 * @param nodes number of nodes
 * @param node the shape of every node (arities; costs are not read)
 * @param lat latency per layer, levels + 2 entries: [0] between nodes,
 *        [1 + i] a pair joined at tree level i, [levels + 1] one core shared
 * @param bw bandwidth per layer, the same entries (> 0)
 * @param node_of per rank, its node
 * @param slot_of per rank, its slot in the node (leaf order of the tree)
 * @param[out] out the costs
 * @return TIERS_OK; TIERS_ERR_ARG for bad arguments; TIERS_ERR_NOMEM.
 *         Thread-safe (no shared state).
 */
TIERS_API int tiers_map_eval(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                             const tiers_map_node_t *node, const double *lat, const double *bw,
                             const int *node_of, const int *slot_of, tiers_map_cost_t *out);

/**
 * @brief The whole mapping search in one call: Scotch's mapping of the
 *        graph onto the machine's tleaf tree (``afc``, as tiers_map_tree
 *        with Scotch's default strategy), the same grouping with ranks in
 *        rank order (``afc-nb``), the caller's candidates, each measured
 *        with tiers_map_eval; the best chosen; the winner refined with
 *        tiers_map_refine_within (the balancing capped at the fewest
 *        inter-node bytes of any candidate) and the result kept when it
 *        ranks first.
 *
 * The order: the lowest predicted time, where times within @p time_tie
 * (relative) of the fastest are a tie, broken by the bytes the busiest
 * node sends, then by the inter-node bytes, then by position (afc first).
 * The graph and Scotch's target are built once.
 * @param g, sent_bytes, nodes, node, lat, bw as tiers_map_eval
 * @param node_cost as tiers_map_tree (node->cost is read too)
 * @param tree_nodes the nodes Scotch maps onto (the first ones; at most
 *        @p nodes)
 * @param time_tie the tie band of predicted times (e.g. 0.15)
 * @param ncand the caller's candidates
 * @param use_scotch 0: no Scotch mapping (rows 0 and 1 are left out and
 *        their costs zero)
 * @param seed Scotch's seed
 * @param budget the refinement's work limit (tiers_map_refine)
 * @param extra_starts 1: two more starts, each Scotch's grouping of the
 *        ranks onto the first @p tree_nodes nodes (a complete graph of
 *        node-sized parts) with its recursive-bipartitioning strategy,
 *        nodes over capacity repaired, each node's ranks placed on its
 *        cores by a quick recursive split of the node tree.  The second
 *        (30 % imbalance allowed), when Scotch's mapping (row 0) has a
 *        node sending more than 1.25 times what any other node sends: the
 *        refinement's start if it ranks before the winner (and the
 *        winner's own refinement is made when its result does not rank
 *        first).  The third (50 %): written in the refined row instead of
 *        the result when it is no worse on either byte measure
 *        (inter-node bytes, the busiest node's sent bytes), better on one,
 *        and ranks before the result.  Where the process may run on two
 *        or more CPUs (its affinity), both are made on a thread of their
 *        own from the start, beside Scotch's mapping, the second dropped
 *        when not needed (the thread is joined before the call returns);
 *        the result is the same as on one CPU.  Graphs of more than
 *        4,096 ranks get none.  0: none
 * @param[in,out] place (ncand + 3) placements of 2 rows of n ints (node
 *        per rank, then slot per rank): row pair 0 afc, 1 afc-nb (out),
 *        2 .. ncand + 1 the caller's candidates (in), ncand + 2 the refined
 *        winner (out)
 * @param[out] costs ncand + 3 entries, in the order of @p place (zero
 *        for a placement not made)
 * @param[out] chosen the index of the placement to write
 * @param[out] swaps swaps the refinement made (may be NULL)
 * @param[out] second 1 when the refined row is the second start's, 2 when
 *        it holds the third start's, else 0 (may be NULL)
 * @return as tiers_map_tree and tiers_map_eval.  Not thread-safe with
 *         other Scotch users of the process.
 */
TIERS_API int tiers_map_search(const tiers_map_graph_t *g, const double *sent_bytes, int nodes,
                               const tiers_map_node_t *node, double node_cost,
                               int tree_nodes, const double *lat, const double *bw,
                               double time_tie,
                               int ncand, int use_scotch, uint64_t seed, int64_t budget,
                               int extra_starts, int *place, tiers_map_cost_t *costs,
                               int *chosen, int *swaps, int *second);

/**
 * @brief Recognises a 2-D or 3-D grid of face exchanges in any numbering:
 *        every rank a grid point, the edges exactly the face neighbours,
 *        the same bytes across each axis and (with @p sent_bytes) half of
 *        each pair's bytes each way.  Cost: O(n + m) per corner tried, a
 *        breadth-first search from at most 2^dims corners.
 * @param g the graph (symmetric, see tiers_map_check)
 * @param sent_bytes per CSR entry, the bytes rank v sends (NULL: half each way)
 * @param[out] dims 2 or 3 when @p g is such a grid, 0 when not
 * @param[out] sizes 3 entries: ranks along each axis (first @p dims used)
 * @param[out] pair 3 entries: bytes of one neighbour pair across each axis
 * @param[out] coords n x 3 entries: rank v's coordinates at
 *        coords[v * dims + a] (meaningful only when @p dims is not 0)
 * @return TIERS_OK (a graph that is not a grid is not an error);
 *         TIERS_ERR_ARG for NULL arguments; TIERS_ERR_NOMEM.  Thread-safe.
 */
TIERS_API int tiers_map_grid(const tiers_map_graph_t *g, const double *sent_bytes, int *dims,
                             int *sizes, double *pair, int32_t *coords);

/**
 * @brief The geometric placement of a grid: the grid tiled into boxes of
 *        one node's slots with the fewest bytes crossing boxes (then the
 *        least busy box, then the smallest surface) when such boxes tile
 *        it exactly and every node has that many slots; recursive
 *        coordinate bisection over the nodes (filled in order) otherwise.
 *        Inside a node the same bisection splits its ranks over the node
 *        tree's objects, one cut per level; each cut goes across the axis
 *        whose cut plane carries the fewest bytes.  Cost: O(n log n) per
 *        level of the bisection.
 * @param n ranks, the product of @p parts
 * @param dims 1 to 3
 * @param parts subdomains along each axis
 * @param pair bytes of one neighbour pair across each axis
 * @param coords n x dims: rank v's coordinates at coords[v * dims + a]
 * @param nodes, capacity the nodes and the slots of each (>= n in all)
 * @param node the node's tree (only the arity is used)
 * @param[out] node_of, slot_of per rank, its node and its slot there
 * @param[out] shape dims entries: the box shape when the grid was tiled,
 *        zeros when it was bisected
 * @return TIERS_OK; TIERS_ERR_ARG for bad arguments; TIERS_ERR_NOMEM.
 *         Thread-safe.
 */
TIERS_API int tiers_map_geometric(int n, int dims, const int *parts, const double *pair,
                                  const int32_t *coords, int nodes, const int *capacity,
                                  const tiers_map_node_t *node, int *node_of, int *slot_of,
                                  int *shape);

/**
 * @brief The last message Scotch gave on this thread during the last
 *        mapping call (tiers_map_group, _group_costs, _place, _tree or
 *        _search), which clears both messages when it starts.
 * @param warning 0: the last error (tiers_last_error() already ends with
 *        it when the call failed); non-zero: the last warning (a warning
 *        does not make the call fail, and is never printed)
 * @return a pointer to thread-local storage, "" when there was none; valid
 *         until the next mapping call on the same thread.  Thread-safe.
 */
TIERS_API const char *tiers_map_scotch_message(int warning);

#ifdef __cplusplus
}
#endif
#endif
