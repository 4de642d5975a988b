/* NUMA placement of a data-parallel run's cold rows (runtime/placement.c, docs/distributed.md,
 * "NUMA placement"): on a host with several NUMA nodes, where the feature table's rows sit and
 * where each rank's workers run, and the host-DRAM floor that placement sets.
 *
 * The rule is a pure function of the host's nodes (free memory, DRAM read rate), the ranks'
 * nodes (their GPU's), the table's bytes and the cold bytes the ranks read per step, so that a
 * test can give it hand-written topologies; ng__numa_read reads the nodes from sysfs. The rule
 * is reported (ng_cold_fetch_stats, `placement` in train --json); nothing binds memory to it
 * yet (docs/distributed.md says so). */
#ifndef NG_PLACEMENT_IMPL_H
#define NG_PLACEMENT_IMPL_H

#include "core_impl.h"

/// The most NUMA nodes and ranks the rule takes.
#define NG_PLACE_MAX_NODES 64
#define NG_PLACE_MAX_RANKS 1024

/// One NUMA node of the host.
typedef struct {
  int id;            ///< the node's number (nodeN in sysfs)
  double free_bytes; ///< memory a table could take there (free + page cache)
  double dram_gbs;   ///< its measured DRAM read rate (GB/s); 0: unknown
} ng_numa_node;

/// What the rule is given.
typedef struct {
  int n_nodes;
  const ng_numa_node *nodes; ///< [n_nodes] (borrowed)
  int n_ranks;
  /// [n_ranks] each rank's GPU's node, as an index into `nodes`; -1: unknown (the rule spreads
  /// such ranks over the nodes in turn).
  const int *rank_node;
  double table_bytes;         ///< the host feature table's bytes (fp32 or bf16)
  double cold_bytes_per_step; ///< cold bytes the host's ranks read from DRAM per step, all ranks
  double targets_per_step;    ///< the global batch
  /// Bytes per second (GB/s) that can cross between nodes (the socket link); 0: not a limit.
  double link_gbs;
} ng_place_in;

/// Where a table sits.
typedef enum {
  NG_PLACE_ONE_NODE = 0,         ///< one NUMA node (or none known): the table where it is
  NG_PLACE_REPLICA_PER_NODE = 1, ///< a whole replica on each node that runs a rank
  NG_PLACE_PARTITIONED = 2,      ///< the rows split over the nodes, by their read rates
} ng_place_kind;

/// The rule's answer.
typedef struct {
  ng_place_kind kind;
  int n_nodes, n_ranks;
  /// Whether the table fits the nodes' memory at all (partitioned over every node); false: the
  /// rows stay where the OS pages them in, and the floor below is optimistic.
  bool fits;
  int rank_node[NG_PLACE_MAX_RANKS];      ///< the node (index) whose cores run each rank's workers
  double table_bytes[NG_PLACE_MAX_NODES]; ///< the table's bytes on each node
  double read_bytes[NG_PLACE_MAX_NODES];  ///< cold bytes per step read from each node's DRAM
  double cross_bytes;                     ///< cold bytes per step read from another node
  /// The predicted floor: the slowest node's read time (or the link's) per step, in seconds
  /// per GB/s-unit when a read rate is unknown; and the targets/s it allows (0: a read rate
  /// unknown, or no cold byte).
  double step_s;
  double floor_targets_per_s;
  /// The share of the nodes' summed read rate the placement reaches (1: every node reads its
  /// part at its full rate, nothing crosses).
  double bw_share;
} ng_placement;

/// Applies the rule to `in` (docs/distributed.md, "NUMA placement"): one node, or a replica on
/// every node that runs a rank when each of them has the table's bytes free, else the rows
/// partitioned over the nodes in proportion to their read rates (as far as their memory
/// allows), every rank's workers on its GPU's node. NG_ERR_INVALID_ARG: no node, or more nodes
/// or ranks than NG_PLACE_MAX_*, or a rank on a node that is not one of them.
ng_status ng__place(ng_placement *out, const ng_place_in *in);

/// The name of a placement kind ("one_node", "replica_per_node", "partitioned").
const char *ng__place_kind_name(ng_place_kind k);

/// The host's NUMA nodes from `root` (NULL: /sys/devices/system/node): each nodeN folder's
/// meminfo (MemFree + FilePages), read rates unknown (0). A host without the folder has one
/// node holding all of /proc/meminfo's. *n = the nodes found (at most `cap`).
ng_status ng__numa_read(ng_numa_node *out, int cap, int *n, const char *root);

/// The NUMA node (its number) of PCI device `bus_id` (sysfs numa_node under `root`, NULL:
/// /sys/bus/pci/devices), or -1 when unknown.
int ng__numa_of_pci(const char *bus_id, const char *root);

#endif /* NG_PLACEMENT_IMPL_H */
