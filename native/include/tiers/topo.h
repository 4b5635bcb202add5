/**
 * @file tiers/topo.h
 * @brief The machine model: an hwloc topology with the queries the other
 *        parts of tiers need (layers joining two PUs, the processor graph of
 *        common-ancestor depths), binding and first-touch allocation.
 *
 * Lifecycle: tiers_topo_load() -> queries -> tiers_topo_destroy().
 * A loaded topology is read-only: all queries are thread-safe.  Binding
 * only makes sense on a topology of this machine (tiers_topo_is_this_system).
 * None of these functions is an MPI call.
 */
#ifndef TIERS_TOPO_H
#define TIERS_TOPO_H

#include <stddef.h>

#include <hwloc.h>

#include "tiers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque handle to a loaded machine model. */
typedef struct tiers_topo *tiers_topo_t;

/**
 * Layers that can join two PUs, from closest to farthest.  The layer of a
 * pair is decided by the smallest object containing both: a core, a data or
 * unified cache, a NUMA node, a package, or only the machine.  When two of
 * these hold exactly the same PUs (an L2 per core, a NUMA node per package)
 * the closer layer wins.  A NUMA node that spans the whole machine (the only
 * node of a UMA machine) is not a layer.  So packages inside NUMA nodes give
 * "package" for a pair in one package and "numa" for one in two packages of
 * the same node; NUMA nodes inside packages give the reverse.
 */
typedef enum tiers_layer {
  TIERS_LAYER_PU = 0,      /**< the same PU */
  TIERS_LAYER_CORE = 1,    /**< hardware threads of one core */
  TIERS_LAYER_CACHE = 2,   /**< cores sharing a cache (the level is reported apart) */
  TIERS_LAYER_NUMA = 3,    /**< the same NUMA node, no shared cache or core */
  TIERS_LAYER_PACKAGE = 4, /**< the same package (socket), no smaller object in common */
  TIERS_LAYER_MACHINE = 5, /**< only the machine in common */
  TIERS_LAYER_COUNT = 6
} tiers_layer_t;

/** How a list of threads is spread over the PUs. */
typedef enum tiers_pin_policy {
  TIERS_PIN_NONE = 0,    /**< no binding: the OS places threads */
  TIERS_PIN_COMPACT = 1, /**< fill one core, cache, package after another (PUs in hwloc logical order) */
  TIERS_PIN_SCATTER = 2  /**< round-robin over the widest level first: packages, then NUMA nodes, caches, cores */
} tiers_pin_policy_t;

/**
 * @brief Loads a machine model.
 * @param[out] topo the new handle
 * @param source NULL or "this" for this machine; "synthetic:DESC" for an
 *        hwloc synthetic description (e.g. "synthetic:pack:2 numa:2 core:4 pu:1");
 *        anything else is read as the path of an hwloc XML file.
 * @return TIERS_OK; TIERS_ERR_INPUT for an unreadable or malformed XML file
 *         or a synthetic string hwloc rejects; TIERS_ERR_HWLOC otherwise.
 */
TIERS_API int tiers_topo_load(tiers_topo_t *topo, const char *source);

/** @brief Releases a topology; accepts NULL and sets *topo to NULL. */
TIERS_API int tiers_topo_destroy(tiers_topo_t *topo);

/** @return the underlying hwloc topology (owned by @p topo; do not destroy). */
TIERS_API hwloc_topology_t tiers_topo_hwloc(tiers_topo_t topo);

/** @return 1 when the topology describes the machine the caller runs on. */
TIERS_API int tiers_topo_is_this_system(tiers_topo_t topo);

/** @return the source string given to tiers_topo_load ("this" for the machine). */
TIERS_API const char *tiers_topo_source(tiers_topo_t topo);

/** @return the number of PUs (hardware threads) in the topology. */
TIERS_API int tiers_topo_num_pus(tiers_topo_t topo);

/** @return the number of objects of @p type (0 when the type is absent). */
TIERS_API int tiers_topo_count(tiers_topo_t topo, hwloc_obj_type_t type);

/** @return the PU with logical index @p pu, or NULL when out of range. */
TIERS_API hwloc_obj_t tiers_topo_pu(tiers_topo_t topo, int pu);

/**
 * @brief Depth of the common ancestor of two PUs (root = 0), as in the
 *        processor graph of the AFC mapping paper's §2.2 where the pair weighs 10^d.
 * @return the depth, or -1 when an index is out of range.
 */
TIERS_API int tiers_topo_common_depth(tiers_topo_t topo, int pu_a, int pu_b);

/**
 * @brief The layer that joins two PUs.
 * @param[out] cache_level when the layer is TIERS_LAYER_CACHE, the level of
 *        the smallest shared cache (1, 2, 3...); 0 otherwise.  May be NULL.
 * @return TIERS_OK, or TIERS_ERR_ARG for an index out of range.
 */
TIERS_API int tiers_topo_layer(tiers_topo_t topo, int pu_a, int pu_b, tiers_layer_t *layer,
                               int *cache_level);

/** @return a short name for a layer: "pu", "core", "cache", "numa", "package", "machine". */
TIERS_API const char *tiers_layer_name(tiers_layer_t layer);

/**
 * @brief Fills @p pus with the logical PU indices that threads 0..n-1 are
 *        placed on under @p policy.
 * @param n number of threads; must be at most the number of PUs unless
 *        policy is TIERS_PIN_NONE (then every entry is -1).
 * @return TIERS_OK; TIERS_ERR_ARG when n exceeds the PUs for a pinning policy.
 */
TIERS_API int tiers_topo_pin_order(tiers_topo_t topo, tiers_pin_policy_t policy, int n, int *pus);

/** @return "none", "compact" or "scatter". */
TIERS_API const char *tiers_pin_policy_name(tiers_pin_policy_t policy);

/** @brief Parses "none", "compact" or "scatter"; TIERS_ERR_ARG otherwise. */
TIERS_API int tiers_pin_policy_parse(const char *name, tiers_pin_policy_t *policy);

/**
 * @brief Binds the calling thread to one PU (by logical index).
 * @return TIERS_OK; TIERS_ERR_UNSUPPORTED when the topology is not this
 *         machine's; TIERS_ERR_SYS when the OS refuses.  Thread-safe.
 */
TIERS_API int tiers_topo_bind_thread(tiers_topo_t topo, int pu);

/**
 * @brief Binds the whole calling process to a set of PUs (logical indices).
 * @return as tiers_topo_bind_thread.
 */
TIERS_API int tiers_topo_bind_process(tiers_topo_t topo, const int *pus, int n);

/**
 * @brief The logical indices of the PUs the calling thread is bound to.
 * @param[out] pus array of at least tiers_topo_num_pus() entries
 * @param[out] n how many were written
 */
TIERS_API int tiers_topo_get_thread_binding(tiers_topo_t topo, int *pus, int *n);

/**
 * @brief Allocates page-aligned memory without touching it, so that each
 *        page lands on the NUMA node of the first thread that writes it
 *        (first-touch).  Free with tiers_topo_free().
 * @param[out] ptr the memory
 * @return TIERS_OK; TIERS_ERR_NOMEM when the system cannot provide @p bytes.
 */
TIERS_API int tiers_topo_alloc_first_touch(size_t bytes, void **ptr);

/** @brief Frees memory from tiers_topo_alloc_first_touch; accepts NULL. */
TIERS_API void tiers_topo_free(void *ptr, size_t bytes);

/**
 * @brief Bytes of physical memory the caller may still allocate (MemAvailable,
 *        or the cgroup limit when lower); 0 when unknown.
 */
TIERS_API size_t tiers_topo_available_memory(void);

/** @return the sum of the sizes of the last-level caches, in bytes (0 when none is known). */
TIERS_API size_t tiers_topo_llc_total(tiers_topo_t topo);

#ifdef __cplusplus
}
#endif
#endif
