/* Models written once against the backend interface: parameter layout, initialisation, and the
 * forward and backward passes of GraphSAGE, GCN, GAT, GIN and SAGE-pool layers over sampled
 * blocks. */
#ifndef NG_MODEL_IMPL_H
#define NG_MODEL_IMPL_H

#include "backend_impl.h"
#include "prof.h"

#define NG_MODEL_MAGIC 0x6e676d6du /* "ngmm" */

typedef struct {
  ng_layer_opts o;
  ng_aggr ag;
  int64_t in_dim, out_dim;
  int64_t cols;       ///< columns of each weight matrix (out_dim, or out_dim / 2 for CONCAT)
  int64_t off_w_self; ///< SAGE: offset (floats) of W_self [in, cols] in the parameter buffer
  int64_t off_w;      ///< SAGE: W_neigh [in, cols]; GCN: W [in, out]
  int64_t off_b;      ///< bias [out] (-1 when the layer has none)
  int32_t heads;      ///< GAT: attention heads (1 for the other kinds)
  int64_t head_dim;   ///< GAT: columns of a head (cols == heads * head_dim)
  int64_t off_att_src, off_att_dst; ///< GAT: attention vectors [heads, head_dim] (else -1)
  /// The dense layer before the aggregation (SAGE-pool: W_pool [in, pre_dim], b_pool) or the
  /// MLP's first layer (GIN: W1 [in, pre_dim], b1); -1 for the other kinds.
  int64_t off_w_pre, off_b_pre, pre_dim;
  int64_t off_end; ///< one past the layer's last parameter
} ng_layer;

struct ng_model {
  uint32_t magic;
  ng_model_kind kind;
  int64_t in_dim;
  int n_layers;
  ng_layer layers[NG_MAX_LAYERS];
  int64_t n_params;
};

ng_status ng__model_check(ng_model_t m);

/// True when the model's input layer needs the raw rows of all its sources, not an aggregation
/// of them (GAT: the attention weighs each neighbour with the layer's weights, so neighbours
/// cannot be reduced before the layer runs). Its mini-batches then carry one block more than it
/// has layers: block 0 is an identity block (no edges, sampled with fanout 0) whose
/// destinations are the sources of the first layer's block, so that the feature store's self
/// rows are exactly the first layer's input rows, fetched by any strategy; layer l reads block
/// l + 1.
static inline bool ng__model_raw_input(const struct ng_model *m) {
  return m->kind == NG_MODEL_GAT || m->kind == NG_MODEL_SAGE_POOL;
}
/// The block of layer `l` in a mini-batch of model `m` (see ng__model_raw_input).
static inline int ng__model_block(const struct ng_model *m, int l) {
  return l + (ng__model_raw_input(m) ? 1 : 0);
}

/// The most layers of a GAT or GIN model (4 tensors a layer) and of a SAGE-pool model (5): a
/// checkpoint's checksum list holds 3 * NG_MAX_LAYERS parameter tensors (runtime/trainer_ckpt.c),
/// and a raw-input model's mini-batches spend a block on the identity block.
#define NG_GAT_MAX_LAYERS (NG_MAX_LAYERS - 2)
#define NG_POOL_MAX_LAYERS (NG_MAX_LAYERS / 2)

/// The most parameter tensors a layer has (ng__model_param_tensors).
#define NG_LAYER_TENSORS 5

/// The aggregation the feature store computes for the input layer: the first layer's own, or
/// for a raw-input model a plain sum over its identity block (which has no edges).
const ng_aggr *ng__model_input_aggr(const struct ng_model *m);

/// The tensors of a model for checkpoints: name, offset and shape of each parameter tensor.
typedef struct {
  char name[64];
  int64_t offset;
  int ndim;
  int64_t shape[2];
} ng_param_tensor;
/// Lists the parameter tensors (at most NG_LAYER_TENSORS per layer) into `out` and returns their
/// count.
int ng__model_param_tensors(const struct ng_model *m, ng_param_tensor *out, int cap);

/// Per-layer workspace of one mini-batch, carved from an exec's device arena.
typedef struct {
  const float *input; ///< [n_src, in] the layer's input (features or previous layer's out)
  float *h_in;        ///< [n_src, in] input after dropout (== input when not dropping)
  uint8_t *mask;      ///< [n_src * in] dropout decisions, NULL when not dropping
  float *agg;         ///< [n_dst, in]
  int32_t *argbest;   ///< [n_dst, in] for MAX/MIN, else NULL
  float *out;         ///< [n_dst, out]
  float *d_out;       ///< [n_dst, out] gradient flowing in (the next layer's d_in)
  float *d_agg;       ///< [n_dst, in]
  float *d_in;        ///< [n_src, in] (NULL for layer 0: features need no gradient)
  /* GAT layers only (else NULL). */
  float *z;         ///< [n_src, heads * head_dim] = h_in W
  float *alpha;     ///< [(nnz + n_dst), heads] the attention coefficients (attn_fwd)
  float *d_z;       ///< [n_src, heads * head_dim]
  float *attn_work; ///< ng_attn_bwd_work floats
  /* SAGE-pool and GIN layers only (else NULL). */
  float *pre;    ///< SAGE-pool: [n_src, pre] ReLU(h_in W_pool + b); GIN: [n_dst, in] agg + self
  float *hid;    ///< GIN: [n_dst, pre] the MLP's hidden layer
  float *d_pre;  ///< SAGE-pool: [n_src, pre]; GIN: [n_dst, in]
  float *d_hid;  ///< GIN: [n_dst, pre]
  float *self_w; ///< GIN: [n_dst] the self row's weight 1 + eps
  float *u_work; ///< user aggregators in training, layers > 0: [nnz, in] (aggr_user_bwd)
} ng_layer_ws;

/// Everything needed to run a model on one backend: parameters, gradients, optimizer state and
/// a growable workspace arena (grows to the largest mini-batch, never shrinks: the steady state
/// allocates nothing).
typedef struct {
  const struct ng_model *model;
  ng_backend *be;
  float *params, *grads, *state1, *state2; ///< [n_params] each, backend memory
  void *arena;
  size_t arena_cap;
  ng_layer_ws ws[NG_MAX_LAYERS];
  float *logits; ///< [n_targets, classes] == ws[L-1].out
  ng_prof *prof; ///< times the ops of the passes and the step (borrowed; NULL: not timed)
  /* What the backward pass needs of the last forward pass. */
  bool training;
  uint64_t attn_key[NG_MAX_LAYERS]; ///< GAT: each layer's attention-dropout key
} ng_model_exec;

ng_status ng__exec_create(ng_model_exec *ex, const struct ng_model *m, ng_backend *be,
                          uint64_t seed);
void ng__exec_destroy(ng_model_exec *ex);
/// Grows ex's arena (the activations and gradients of a mini-batch, backend memory) to at
/// least `bytes` now and gives it in *arena: the trainer lends it to backend op warm_start
/// before the first step, which would have grown it anyway.
ng_status ng__exec_reserve(ng_model_exec *ex, size_t bytes, void **arena);

/// Forward pass over a mini-batch whose blocks live in backend memory. The input layer's work
/// up to its aggregation is the caller's (the tiered feature store, sched/feature_store_impl.h):
/// `agg0` [n_dst of block 0, in_dim] is its finalized aggregation and `self0` [n_dst, in_dim] the
/// destinations' own input rows, both after the input layer's dropout in training (keyed by
/// ng__exec_input_drop_key). With `training`, dropout of the other layers applies with masks
/// derived from `seed`, and the workspace keeps what backward needs. Logits end in ex->logits.
/// agg0 and self0 must stay valid until the backward pass.
ng_status ng__exec_forward(ng_model_exec *ex, const ng_minibatch *mb, const float *agg0,
                           const float *self0, bool training, uint64_t seed);
/// The key of the input layer's dropout (ng_aggr.drop_key) for iteration seed `seed`.
uint64_t ng__exec_input_drop_key(uint64_t seed);
/// Backward pass from d loss / d logits [n_targets, classes] (in backend memory; consumed) into
/// ex->grads, overwriting them.
ng_status ng__exec_backward(ng_model_exec *ex, const ng_minibatch *mb, float *d_logits);
/// One optimizer step on every layer with its own weight decay.
ng_status ng__exec_step(ng_model_exec *ex, const ng_opt_hp *hp);

/// The GEMMs a training step of model `m` makes, approximately, for backend op warm_start:
/// each layer's forward product and its two gradient products, with `rows[l]` destinations of
/// layer l (sources for the layers whose products read every source row: GAT, SAGE-pool).
/// Returns how many shapes it wrote (at most `cap`).
int ng__model_gemm_shapes(const struct ng_model *m, const int64_t *rows, ng_gemm_shape *out,
                          int cap);

/// Inference in two steps, for a caller that computes the input layer itself (the serving
/// engine's GAT input layer, aggregated in online-softmax parts): ng__exec_prepare_upper lays
/// out the workspace of `mb` (no training; ex->ws[0].out [n_dst of layer 0's block, out_dim]
/// then receives layer 0's output from the caller, and for GAT ex->ws[0].z [n_src, cols] may
/// serve as its scratch), and ng__exec_forward_upper runs layers 1 .. from ws[0].out, as
/// ng__exec_forward does without training.
ng_status ng__exec_prepare_upper(ng_model_exec *ex, const ng_minibatch *mb);
ng_status ng__exec_forward_upper(ng_model_exec *ex, const ng_minibatch *mb);
/// SAGE-pool layer `l`'s combine after its aggregation: out [nd, out_dim] = self [nd, in_dim]
/// W_self + agg [nd, pre_dim] W_neigh (or side by side) + bias, then the activation.
ng_status ng__exec_pool_combine(ng_model_exec *ex, int l, int64_t nd, const float *self,
                                const float *agg, float *out);
/// The attention of GAT layer `l` in inference (no dropout): what attn_fwd runs there.
ng_attn ng__model_layer_attn(const struct ng_model *m, int l);

/// Destinations per product in evaluation (ng__exec_layer_eval): its GEMMs all have this many
/// rows (the last tile padded with zeros), so that a row's result does not depend on the chunk.
#define NG_EVAL_TILE_ROWS 1024

/// Forward of a single layer `l` without dropout over `blk` (evaluation): out [n_dst, out_dim],
/// each row bit for bit the same whatever the block's other destinations (NG_EVAL_TILE_ROWS).
/// Uses ex's arena for temporaries.
ng_status ng__exec_layer_eval(ng_model_exec *ex, int l, const ng_block *blk, const float *input,
                              float *out);
/// ng__exec_layer_eval with the destinations' own rows apart: the aggregation reads the rows of
/// `input` that the block's indices name (any rows of a table: n_src need only bound them; not
/// for aggregators with a self loop, which read input[d]), and the node's own rows (GraphSAGE's
/// self term) are self [n_dst, in_dim].
ng_status ng__exec_layer_eval_self(ng_model_exec *ex, int l, const ng_block *blk,
                                   const float *input, const float *self, float *out);

#endif /* NG_MODEL_IMPL_H */
