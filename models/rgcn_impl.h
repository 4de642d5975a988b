/* Relational models over heterogeneous mini-batches (docs/heterogeneous.md#models): R-GCN and
 * R-SAGE, per-relation weights, learned embeddings for the node types without features. Written
 * against the backend interface as models/model.c; forward and backward run on a backend whose
 * memory is host memory (the CPU backend) for now, because the blocks' transposes are built on
 * the host.
 *
 * A mini-batch of L hops has one node list per type and layer (the sampler's prefix rule,
 * cpu/sampler_hetero_impl.h). Layer l maps the layer-l rows h[l][t] of every type to the
 * layer-(l+1) rows of the types it computes:
 *
 *   out[l][t] = act( sum of the type's self terms  h[l][t][v] W + b
 *                  + sum over relations r = (s -> t) of  mean_{u in N_r(v)} h[l][s][u] W_r )
 *
 * R-GCN has one self term per type (W_0,t, b_t); R-SAGE one per relation into t (its root weight
 * and bias), and a type with no relation into it at that layer keeps a self term of its own. The
 * activation is ReLU, none on the last layer, whose only type is the target. A layer computes
 * only the types that a later layer reads ("live" types), and reads only the relations into
 * them, so no parameter goes unused. */
#ifndef NG_RGCN_IMPL_H
#define NG_RGCN_IMPL_H

#include "backend_impl.h"

#define NG_RGCN_MAGIC 0x6e677267u /* "ngrg" */
#define NG_RGCN_MAX_BASES 1024
#define NG_RGCN_MAX_HEADS 64

/// What a relational model is built from: the dataset's types and relations and the shape.
typedef struct {
  ng_hetero_model_kind kind;
  int32_t n_types, n_rels, n_layers;
  int32_t target;            ///< the type whose nodes are classified
  int32_t classes;           ///< the target type's classes
  const int64_t *count;      ///< [n_types] nodes of each type (rows of an embedding table)
  const int64_t *feat_dim;   ///< [n_types] feature columns (0: the type learns an embedding)
  const int32_t *rel_src;    ///< [n_rels]
  const int32_t *rel_dst;    ///< [n_rels]
  int64_t hidden, embed_dim; ///< embed_dim 0: hidden
  /// Basis decomposition (Schlichtkrull et al., section 2.2): 0, one free weight per term; B > 0,
  /// every weight of a layer (self terms, relation weights, R-SAGE's roots) with the same input
  /// width is a combination sum_b a_b V_b of B shared bases of that width.
  int32_t bases;
  int32_t heads; ///< R-GAT's attention heads (others ignore it)
} ng_rgcn_spec;

/// The parameter layout. Offsets are in floats into the one parameter buffer; -1 when absent.
typedef struct {
  uint32_t magic;
  ng_hetero_model_kind kind;
  int32_t T, R, L, target, classes;
  int32_t *rel_src, *rel_dst; ///< [R]
  int64_t *count;             ///< [T]
  int64_t *in0;               ///< [T] columns of each type's layer-0 rows (features or embedding)
  int64_t *off_emb;           ///< [T] embedding [count, in0] of a type without features, else -1
  /// [(L + 1) * T]: need[l * T + t] when layer l reads type t's rows (l = L: the target only).
  bool *need;
  int64_t *in_dim;  ///< [L * T] columns of h[l][t]
  int64_t *out_dim; ///< [L] columns of every output of layer l (hidden; classes on the last)
  /// Offsets of the weights [in, out] (into the parameters, or with bases into the derived
  /// weights, see below) and of the biases [out] (into the parameters).
  int64_t *off_self, *off_b;             ///< [L * T] self term of a type (W [in, out], b [out])
  int64_t *off_w, *off_root, *off_rbias; ///< [L * R] relation weight, R-SAGE's root and bias
  /* The basis decomposition (bases > 0). The weights above are then derived, not parameters:
   * they live in a buffer of their own [n_derived], group by group. A group is the weights of one
   * layer with one input width: n_slots weights of [in, out] stored one after the other at
   * off_derived, computed as coef [n_slots, bases] x basis [bases, in * out], both parameters. */
  int32_t bases;
  int32_t n_groups;
  int64_t *grp_in, *grp_out;     ///< [n_groups] the group's weights' shape
  int32_t *grp_slots;            ///< [n_groups]
  int64_t *grp_basis, *grp_coef; ///< [n_groups] offsets into the parameters
  int64_t *grp_derived;          ///< [n_groups] offset into the derived weights
  int64_t n_derived;
  /* R-GAT: relation r at layer l is a GAT layer whose weight off_w [in_src, heads * head_dim]
   * maps the source rows, off_root [in_dst, heads * head_dim] the destination rows (for their
   * scores only), off_att the attention vectors a_src then a_dst [heads * head_dim] each. */
  int32_t heads;
  int64_t *head_dim; ///< [L] out_dim / heads below the last layer (heads concatenated), classes on
                     ///< it (heads averaged)
  int64_t *off_att;  ///< [L * R]
  int64_t n_params;
  int64_t n_embed; ///< floats of the embeddings (they come first: [0, n_embed))
} ng_rgcn;

/// Lays out the model of `spec` (copied). Free with ng__rgcn_free.
ng_status ng__rgcn_init(ng_rgcn *m, const ng_rgcn_spec *spec);
void ng__rgcn_free(ng_rgcn *m);
/// Whether relation r is read by layer l (its destination type is live there).
static inline bool ng__rgcn_rel_used(const ng_rgcn *m, int32_t l, int32_t r) {
  return m->need[(l + 1) * m->T + m->rel_dst[r]];
}
/// The initial parameters from `seed` into host memory params[n_params]: Glorot-uniform
/// weights, zero biases, embeddings uniform with variance 1 / columns.
void ng__rgcn_init_params(const ng_rgcn *m, float *params, uint64_t seed);

/// A sampled mini-batch as the model reads it (borrowed views of ng_hetero_minibatch's arrays).
typedef struct {
  const int32_t *n_nodes;         ///< [(L + 1) * T]
  const int64_t *const *node_ids; ///< [T] global ids of each type's layer-0 list
  const ng_block *blocks;         ///< [L * R], block (l, r) at l * R + r
} ng_rgcn_batch;

/// Parameters, gradients, Adam state and a growable workspace on one backend.
typedef struct {
  const ng_rgcn *m;
  ng_backend *be;
  float *params, *grads, *state1, *state2; ///< [n_params] each, backend memory
  /// The weights the layers read and their gradients: params and grads, or with bases the
  /// derived weights [n_derived] (computed from the bases by each forward pass) and theirs.
  float *w, *gw;
  float *derived, *d_derived; ///< [n_derived] each (NULL without bases)
  void *arena;
  size_t arena_cap;
  /* The last forward pass's workspace (pointers into the arena). */
  float **h;       ///< [L * T] layer inputs (h[l][t], [n(l, t), in_dim]); h[l + 1] = outputs
  float **out;     ///< [L * T] outputs (out[l][t] == h[l + 1][t] below the last layer)
  float **agg;     ///< [L * R] each relation's mean [n_dst, in_dim of its source]
  float **d_out;   ///< [L * T] gradients of the outputs
  float **d_h0;    ///< [T] gradients of the embedded types' layer-0 rows
  ng_block *views; ///< [L * R] the blocks with their transposes (n_src >= n_dst, see rgcn.c)
  float *colsum, *tmp_dagg, *tmp_dsrc;
  /* R-GAT, per relation and layer [L * R]: the transformed source and destination rows, the
   * scores before LeakyReLU and the attention coefficients [nnz, heads]; agg holds the
   * attention's output [n_dst, heads * head_dim]. Scratch of the backward pass. */
  float **zs, **zd, **score, **alpha;
  float *tmp_dzs, *tmp_dzd, *tmp_dg;
  int32_t *labels;
  int64_t *iota;  ///< 0, 1, 2 ... (scatter_rows' ids)
  int32_t *pos;   ///< an embedded type's rows as int32 (scatter_rows' positions)
  uint8_t **mask; ///< [L * T] dropout decisions on h[l][t] (NULL when not dropping)
  float *logits;  ///< [n_targets, classes] == out[L - 1][target]
  int32_t n_targets;
  float drop_p;    ///< the last forward pass's dropout (0: none)
  bool transposed; ///< the last forward pass built the transposes (a backward pass may follow)
} ng_rgcn_exec;

/// Allocates and initialises the parameters (from `seed`) on `be`, which must keep its memory on
/// the host (NG_ERR_UNSUPPORTED otherwise).
ng_status ng__rgcn_exec_create(ng_rgcn_exec *ex, const ng_rgcn *m, ng_backend *be, uint64_t seed);
void ng__rgcn_exec_destroy(ng_rgcn_exec *ex);
/// Recomputes the derived weights from the bases (a no-op without them). The forward pass does
/// it; callers that change the parameters and read ex->w before a forward pass call it.
ng_status ng__rgcn_derive(ng_rgcn_exec *ex);
/// Forward pass over `b`: gathers each needed type's layer-0 rows (features[t] [count, dim] in
/// backend-readable memory, or the type's embedding), then the layers; logits end in
/// ex->logits. Keeps what the backward pass needs. With `drop_p` > 0 (training), every layer's
/// input rows h[l][t] go through dropout (op dropout_fwd) keyed by (seed, l, t). `backward`: a
/// backward pass follows (the blocks' transposes are built for it; evaluation skips them).
ng_status ng__rgcn_forward(ng_rgcn_exec *ex, const ng_rgcn_batch *b, const float *const *features,
                           float drop_p, uint64_t seed, bool backward);
/// Cross-entropy of the last forward pass against `labels` [n_targets] (host) and, with
/// `backward`, the gradients of the mean loss into ex->grads (overwritten). *loss and *correct
/// as op xent (either may be NULL).
ng_status ng__rgcn_loss_backward(ng_rgcn_exec *ex, const ng_rgcn_batch *b, const int32_t *labels,
                                 bool backward, double *loss, int64_t *correct);
/// One Adam step: weight decay on every parameter but the embeddings.
ng_status ng__rgcn_step(ng_rgcn_exec *ex, const ng_opt_hp *hp);

#endif /* NG_RGCN_IMPL_H */
