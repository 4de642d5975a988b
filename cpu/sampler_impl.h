/* Node-wise uniform neighbour sampling into message-flow blocks (cpu/sampler.c).
 *
 * A mini-batch of L layers is L blocks. blocks[0] is the input layer (its sources are the nodes
 * whose features are read), blocks[L-1] the output layer (its destinations are the targets).
 * Every layer's node list is a prefix of the next-lower one: the destinations of a block are the
 * first n_dst of its sources, and the sources of blocks[l+1] are the destinations of blocks[l].
 * So one array, node_ids, gives the global id of every local node of every layer.
 *
 * Determinism: the mini-batch depends only on (graph, configuration, targets, seed): any thread
 * can build any iteration and gets the same bytes. Within a row, neighbours are kept in the
 * order they have in the graph's row. */
#ifndef NG_SAMPLER_IMPL_H
#define NG_SAMPLER_IMPL_H

#include "backend_impl.h"
#include "rng.h"
#include "csr_impl.h"

/* ng_sampler_cfg lives in core/backend_impl.h: a backend's device sampler reads it too. */

/// Per-worker reusable memory: buffers grow to the largest mini-batch seen and are reused, so
/// the steady state allocates nothing. One arena per thread; a mini-batch's arrays stay valid
/// until the next ng__sample() on the same arena.
typedef struct ng_sample_arena ng_sample_arena;

ng_status ng__sample_arena_create(ng_sample_arena **out);
void ng__sample_arena_destroy(ng_sample_arena *arena);
/// Bytes the arena holds (for telemetry and the no-allocation test).
size_t ng__sample_arena_bytes(const ng_sample_arena *arena);

/// Samples the blocks of `n_targets` (>= 1) target nodes (distinct global ids) with `seed`.
/// The neighbours of node v in block l come from the stream ng_hash3(seed, l, v). A block's
/// edge_w/self_w are NULL unless cfg->gcn_weights[l], its t_* arrays NULL unless
/// cfg->transpose[l].
/// On failure *out is zeroed (n_layers == 0) and the arena stays usable.
ng_status ng__sample(ng_minibatch *out, ng_sample_arena *arena, const ng_sampler_cfg *cfg,
                     const int64_t *targets, int32_t n_targets, uint64_t seed);

/// The GCN weights of block `b` (its indptr and indices set) into edge_w [nnz] and self_w [n_dst],
/// which become b->edge_w and b->self_w: from deg1[i], the full-graph degree of local source i
/// plus one, edge (d, s) weighs 1 / sqrt(deg1[d] deg1[s]) and d's self loop 1 / deg1[d], computed
/// in double and rounded once. The sampler's, and serving's receptive fields' (serve/field.c,
/// with a snapshot's degrees), so that both give the same bits.
void ng__gcn_weights(ng_block *b, const double *deg1, float *edge_w, float *self_w);

/// Floyd's algorithm: m distinct positions of [0, n) (0 < m <= n) drawn from `r`, sorted, into
/// pos[0, m). The row draw of the sampler (for m up to its small-draw limit) and of serving's
/// sampled receptive fields.
void ng__floyd_sorted(int64_t *pos, int64_t m, int64_t n, ng_rng *r);

/// A deterministic shuffle of `ids` (n values) into `out` for epoch `epoch`: depends only on
/// (ids, seed, epoch). Mini-batch i of the epoch is out[i * batch .. (i + 1) * batch). `out` may
/// be `ids` (in place).
void ng__epoch_shuffle(int64_t *out, const int64_t *ids, int64_t n, uint64_t seed, int64_t epoch);

/// The seed of iteration `iter` of epoch `epoch` for a run seeded with `seed`.
static inline uint64_t ng__iter_seed(uint64_t seed, int64_t epoch, int64_t iter) {
  return ng_hash3(seed, (uint64_t)epoch, (uint64_t)iter);
}

#endif /* NG_SAMPLER_IMPL_H */
