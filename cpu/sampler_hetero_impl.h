/* Per-relation neighbour sampling of heterogeneous graphs into per-relation blocks
 * (cpu/sampler_hetero.c; docs/heterogeneous.md#sampling).
 *
 * A mini-batch of L hops keeps one node list per node type. Layer L holds the targets (of the
 * target type); block l (l = L-1 down to 0) samples, for every relation r = (s, rel, d), up to
 * fanouts[l][r] neighbours of each type-d node of layer l + 1 from r's CSR, and the sampled
 * type-s nodes join layer l's type-s list. Every layer's list of a type is a prefix of the
 * next-lower layer's list of that type, so one array per type gives the global ids of all
 * layers.
 *
 * Determinism: node v's neighbours over relation r in block l come from the stream
 * ng_hash3(ng_hash2(seed, l), r, v) (core/rng.h), so they do not depend on the batch, its order
 * or the thread; a later GPU sampler draws the same positions from the same streams. */
#ifndef NG_SAMPLER_HETERO_IMPL_H
#define NG_SAMPLER_HETERO_IMPL_H

#include "backend_impl.h"
#include "csr_impl.h"

/// What the sampler reads: the relations' CSRs (rows: destination-type ids; entries:
/// source-type ids) and the fanouts per hop and relation. Borrowed.
typedef struct {
  int32_t n_types;          ///< node types
  int32_t n_rels;           ///< relations
  int32_t n_layers;         ///< hops (1 to NG_MAX_LAYERS)
  int32_t target_type;      ///< the type of the targets
  const ng_csr *const *csr; ///< [n_rels]
  const int32_t *rel_src;   ///< [n_rels] source type of each relation
  const int32_t *rel_dst;   ///< [n_rels] destination type of each relation
  /// [n_layers * n_rels]: fanouts[l * n_rels + r] is relation r's fanout in block l (block 0 is
  /// the input layer, as in the homogeneous sampler); -1 takes every neighbour, 0 none.
  const int32_t *fanouts;
} ng_hetero_sampler_cfg;

/// A sampled heterogeneous mini-batch; free with ng__hetero_minibatch_free().
typedef struct {
  int32_t n_layers, n_types, n_rels;
  /// [(n_layers + 1) * n_types]: n_nodes[l * n_types + t] nodes of type t in layer l (layer
  /// n_layers: the targets; layer 0: every node whose features the input layer reads).
  int32_t *n_nodes;
  /// [n_types]: the global ids of type t's layer-0 list (every higher layer's is a prefix).
  int64_t **node_ids;
  /// [n_layers * n_rels]: block (l, r) at l * n_rels + r. Its destinations are the first n_dst
  /// nodes of type dst in layer l + 1, its `indices` local ids into type src's list (n_src =
  /// type src's count in layer l). Only when src == dst are the destinations also the first
  /// n_dst sources. Weights and transposes are NULL.
  ng_block *blocks;
} ng_hetero_minibatch;

/// Samples the blocks of `n_targets` (>= 1) distinct target ids of cfg->target_type with
/// `seed`. On failure *out is zeroed.
ng_status ng__hetero_sample(ng_hetero_minibatch *out, const ng_hetero_sampler_cfg *cfg,
                            const int64_t *targets, int32_t n_targets, uint64_t seed);
/// Frees what ng__hetero_sample() allocated; accepts a zeroed mini-batch.
void ng__hetero_minibatch_free(ng_hetero_minibatch *mb);

#endif /* NG_SAMPLER_HETERO_IMPL_H */
