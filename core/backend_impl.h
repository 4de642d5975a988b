/* The backend interface: a table of function pointers plus a context (as ggml's
 * ggml_backend_i). Models and the scheduler call these ops and never CUDA or oneDNN directly;
 * the CPU backend (cpu/backend_cpu.c) implements every op and is the reference, the CUDA backend
 * (gpu/) implements the same ops on device memory.
 *
 * Memory: every float/int pointer an op receives lives in the backend's memory (host memory for
 * the CPU backend, device memory for CUDA), except where a parameter says "host". All matrices
 * are row-major and contiguous unless a leading dimension is given.
 *
 * Determinism: every op gives bit-identical results for the same inputs whatever the number of
 * threads (fixed partitions, reductions in a fixed order, no floating-point atomics). The CPU and
 * CUDA backends agree within fp32 rounding, not bit for bit, except where an op defines its
 * arithmetic exactly (dropout, pair_dot). */
#ifndef NG_BACKEND_IMPL_H
#define NG_BACKEND_IMPL_H

#include "core_impl.h"
#include "csr_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- aggregators (the public descriptor is ng_aggregator in neargnn.h) ---- */

/// A message-flow block of one layer (as DGL's blocks): the destination nodes are the first
/// n_dst of the n_src source nodes; edges are grouped by destination (CSR over local ids) and,
/// for deterministic backward passes without atomics, also by source (the transpose).
typedef struct {
  int32_t n_dst;
  int32_t n_src;
  int64_t nnz;
  const int32_t *indptr;   ///< [n_dst + 1] edges of destination d: indptr[d] .. indptr[d+1]
  const int32_t *indices;  ///< [nnz] local source id of each edge
  const float *edge_w;     ///< [nnz] edge weights (GCN normalisation), NULL when unweighted
  const float *self_w;     ///< [n_dst] self-loop weights (GCN), NULL when the aggregator has none
  const int32_t *t_indptr; ///< [n_src + 1] edges of source s in the transpose
  const int32_t *t_dst;    ///< [nnz] destination of each transposed edge
  const int32_t *t_eid;    ///< [nnz] the edge's position in `indices` (to find its weight)
} ng_block;

/// The most layers (blocks) a model or a mini-batch has.
#define NG_MAX_LAYERS 8

/// One sampled mini-batch of L layers: L blocks (cpu/sampler_impl.h describes how they nest).
/// The sampler (cpu/) writes it and the models (models/) read it, so it lives below both.
typedef struct {
  int n_layers;
  ng_block blocks[NG_MAX_LAYERS];
  const int64_t *node_ids; ///< [blocks[0].n_src] global ids; prefix n_dst of a block = its dst
  int32_t n_targets;       ///< == blocks[n_layers - 1].n_dst
} ng_minibatch;

/// What a mini-batch's sampler draws (cpu/sampler.c, and a backend's device sampler, which must
/// give the same blocks): the graph, per-layer fanouts, and which extra arrays each block gets.
/// Block index 0 is the input layer.
typedef struct {
  const ng_csr *graph; ///< borrowed; row v = the neighbours v aggregates from
  int n_layers;        ///< 1 .. NG_MAX_LAYERS
  /// Per block index (0 = input layer); -1 = all neighbours; 0 (block 0 only) = none: an
  /// identity block whose sources are its destinations (ng__model_raw_input).
  int32_t fanout[NG_MAX_LAYERS];
  bool gcn_weights[NG_MAX_LAYERS]; ///< fill edge_w and self_w with GCN normalisation
  bool transpose[NG_MAX_LAYERS];   ///< fill t_indptr / t_dst / t_eid (for the block's backward)
} ng_sampler_cfg;

/// How the aggregator combines neighbour rows (the internal form of ng_aggregator).
typedef struct {
  ng_reduce reduce; ///< SUM, MAX or MIN over the neighbours (in neighbour order)
  bool weighted;    ///< multiply each neighbour row by block->edge_w[e]
  bool self_loop;   ///< add block->self_w[d] * src[d] (GCN's A + I)
  bool mean;        ///< divide by the number of neighbours (finalize of MEAN)
  /// Input dropout, honoured by aggr_partial only (the other ops refuse drop_p != 0): element
  /// (r, c) of a source row r = blk->indices[e] counts as 0 unless ng_dropout_keep(drop_key,
  /// r * dim + c, ng_dropout_threshold(drop_p)), and kept elements are x * (1.0f / (1.0f -
  /// drop_p)) in float, before any edge weight multiplies them. The mask thus follows the row id
  /// of the table the indices address: the layer-0 input of a tiered run addresses global node
  /// ids, so every fetch strategy drops the same elements (see ng_drop_row in core/rng.h).
  float drop_p;
  uint64_t drop_key;
  /// A user aggregator (borrowed from the model's layer options), NULL for the built-ins. When
  /// set, reduce is SUM, mean and self_loop are false, and every op runs the definition's
  /// functions (CPU) or their source compiled at run time (CUDA); partial states then hold
  /// state_size floats per feature (ng__aggr_state_size).
  const ng_aggregator_def *user;
} ng_aggr;

/// Floats of partial state per feature: the user aggregator's state_size, 1 for the built-ins.
/// A state's val is [n_dst, dim, S] (feature c of row d at (d * dim + c) * S).
static inline int64_t ng__aggr_state_size(const ng_aggr *ag) {
  return ag && ag->user ? (int64_t)ag->user->state_size : 1;
}

/// A partial aggregation state over some of the neighbours of n_dst destinations: the reduced
/// values [n_dst, dim] ([n_dst, dim, S] for a user aggregator: ng__aggr_state_size) and how
/// many neighbours each row has seen. States of disjoint neighbour
/// sets merge; finalize turns a state into the aggregated rows. Rows with no neighbour hold 0 and
/// finalize to 0 (for MAX/MIN too); a merge ignores the values of a row whose count is 0.
typedef struct {
  float *val;     ///< [n_dst, dim]
  int32_t *count; ///< [n_dst]
  int32_t n_dst;
  int64_t dim;
} ng_pstate;

/// One attention layer's shape and randomness (GAT; ops attn_fwd / attn_bwd). The node features
/// z [n_src, heads * head_dim] are the layer's input times its weight; head k of row i is
/// z[i, k * head_dim .. (k + 1) * head_dim). Each destination d attends to itself (source d: the
/// "self slot") and then to its edges in edge order. Slot s of the attention coefficients
/// alpha [(nnz + n_dst), heads] is edge s for s < nnz and the self loop of destination
/// s - nnz after them.
typedef struct {
  int32_t heads;
  int64_t head_dim;
  float slope;     ///< LeakyReLU's negative slope of the scores (0.2 in GAT)
  bool mean_heads; ///< out is [n_dst, head_dim], the heads' mean; else [n_dst, heads * head_dim]
  /// Attention dropout: coefficient (slot s, head k) is kept iff ng_dropout_keep(drop_key,
  /// s * heads + k, ng_dropout_threshold(drop_p)) and kept ones are scaled by
  /// 1.0f / (1.0f - drop_p) in float; drop_p 0 keeps all.
  float drop_p;
  uint64_t drop_key;
} ng_attn;

/// A GEMM's shape (op gemm's trans_a, trans_b, m, n, k), for warm_start.
typedef struct {
  bool trans_a, trans_b;
  int64_t m, n, k;
} ng_gemm_shape;

/// The most shapes warm_start takes.
#define NG_WARM_SHAPES 48

/// The float workspace attn_bwd needs for a block of n_dst destinations, n_src sources and nnz
/// edges: d(score) per slot and head, then d(s_dst) per destination, d(s_src) per source.
static inline int64_t ng_attn_bwd_work(const ng_attn *a, int32_t n_dst, int32_t n_src,
                                       int64_t nnz) {
  return (nnz + 2 * (int64_t)n_dst + (int64_t)n_src) * a->heads;
}

/// Columns of an attention partial state (ops attn_state / attn_merge): per destination and head
/// k, at k * (head_dim + 2): the running max m of the scores, the sum s = sum exp(e - m) and the
/// weighted sum v [head_dim] = sum exp(e - m) z_j (online softmax). An empty state is
/// (-inf, 0, 0 ...). States merge associatively (m = max(m1, m2), each part rescaled by
/// exp(m_i - m)), so a destination's slots may be split between parts, e.g. its hot neighbours
/// on the GPU and its cold ones on the CPU (docs/aggregators.md).
static inline int64_t ng_attn_state_cols(const ng_attn *a) {
  return (int64_t)a->heads * (a->head_dim + 2);
}

/// The optimizer of a step, numbered as the public ng_optimizer, so that an
/// ng_train_opts.optimizer means the same thing here. Only the public value is ever stored (a
/// checkpoint's "optimizer").
typedef enum { NG_OPT_ADAM = NG_OPTIMIZER_ADAM, NG_OPT_SGD = NG_OPTIMIZER_SGD } ng_optimizer_kind;

/// Hyper-parameters of one optimizer step (weight decay is L2: grad += weight_decay * param).
typedef struct {
  ng_optimizer_kind kind;
  float lr;
  float weight_decay;
  float momentum;     ///< SGD
  float beta1, beta2; ///< Adam
  float eps;          ///< Adam
  int64_t step;       ///< 1-based step count (Adam bias correction)
} ng_opt_hp;

typedef struct ng_backend ng_backend;
/// A backend's device sampler (sampler_create), opaque to its callers.
typedef struct ng_dev_sampler ng_dev_sampler;

/// The order of the bias gradient's column sums (bias_act_bwd), the same on every backend: rows
/// are cut into chunks of NG_BIAS_CHUNK_ROWS; each chunk's column sums are added in row order
/// from 0, and the chunk sums are added in chunk order from 0. A batch of at most one chunk thus
/// sums in plain row order; a larger one needs no chain longer than max(chunk, chunks) of
/// dependent additions, so that the device sums 150 k rows in parallel instead of one load
/// latency per row (7 ms a 3-hop step on the H100 before, 0.1 ms after).
#define NG_BIAS_CHUNK_ROWS 256

/// Timing events a backend keeps (event_record): the op profile (core/prof.h) uses two an op.
#define NG_BACKEND_EVENTS 512

/// Marks a backend keeps for copy_h2d_async's ordering (double buffering needs two).
#define NG_BACKEND_MARKS 4
/// Deferred xent results a backend holds unread (the runtime keeps two in flight).
#define NG_XENT_QUEUE 4

struct ng_backend_i {
  const char *name; ///< "cpu", "cuda"
  /// True when the backend's memory is ordinary host memory (the CPU backend): callers may then
  /// hand it host arrays directly instead of copying them.
  bool host_memory;

  /* -- lifetime and memory -- */
  void (*destroy)(ng_backend *be);
  ng_status (*alloc)(ng_backend *be, void **out, size_t bytes);
  void (*free)(ng_backend *be, void *ptr); ///< accepts NULL
  ng_status (*copy_h2d)(ng_backend *be, void *dst, const void *host_src, size_t bytes);
  ng_status (*copy_d2h)(ng_backend *be, void *host_dst, const void *src, size_t bytes);
  ng_status (*copy_d2d)(ng_backend *be, void *dst, const void *src, size_t bytes);
  /// Queues a host-to-device copy on the copy queue of buffer slot `slot` (0 <= slot <
  /// NG_BACKEND_MARKS; one queue per slot, so that two slots' transfers may overlap), and
  /// returns at once. The copy first waits for mark `slot` (see
  /// mark), so that it cannot overwrite a buffer that ops queued before that mark still read.
  /// Ops see the data once wait_copy(be, slot) has been queued before them: the copy can thus
  /// overlap every op queued in between. The source must stay unchanged until the backend has
  /// synchronized past an op queued after wait_copy (sync, copy_d2h, xent_result). The CPU
  /// backend copies at once.
  ng_status (*copy_h2d_async)(ng_backend *be, void *dst, const void *host_src, size_t bytes,
                              int slot);
  /// Makes the ops queued from now on wait for the last copy_h2d_async of `slot`.
  ng_status (*wait_copy)(ng_backend *be, int slot);
  /// Records mark `k` (0 <= k < NG_BACKEND_MARKS) after every op queued so far.
  ng_status (*mark)(ng_backend *be, int k);
  /// Optional: waits on the host until the ops queued before the last mark(be, k) have run (and
  /// the copies they waited for have landed), without waiting for the ops queued after it: the
  /// host may then reuse what those ops read, while the device goes on. Nothing to wait for when
  /// mark k was never recorded.
  ng_status (*wait_mark)(ng_backend *be, int k);
  /// Between copy_ops_begin(be, slot) and copy_ops_end(be, slot), ops are queued behind the
  /// last copy_h2d_async of `slot` on that slot's copy queue instead of the ops' queue, and
  /// wait_copy(be, slot) then waits for them too: work that only reads the copied data and host
  /// memory (a zero-copy gather of the next iteration) overlaps the ops of the current one. They
  /// must not be nested; GEMMs must not be queued there. The CPU backend runs them at once.
  ng_status (*copy_ops_begin)(ng_backend *be, int slot);
  ng_status (*copy_ops_end)(ng_backend *be, int slot);
  /// Optional, a side queue for independent work: between side_begin(be) and side_end(be), ops
  /// (GEMMs included) are queued on a second queue that first waits for every op queued before
  /// side_begin, so they overlap the ops queued on the main queue after side_end; the main
  /// queue's ops queued after side_join(be) wait for them. Ops of the main queue queued between
  /// side_end and side_join must neither write what the side's ops read nor touch what they
  /// write. side_begin must not be nested nor used between copy_ops_begin and copy_ops_end. A
  /// backend may run the side's ops on the main queue (CUDA with NG_CUDA_SIDE=0), with the same
  /// bits; the CPU backend, whose ops run at once, has none.
  ng_status (*side_begin)(ng_backend *be);
  ng_status (*side_end)(ng_backend *be);
  ng_status (*side_join)(ng_backend *be);
  ng_status (*fill)(ng_backend *be, float *x, int64_t n, float value);
  ng_status (*sync)(ng_backend *be); ///< waits for all queued work
  /// Bytes of backend memory still free (*free) and in all (*total); the CPU backend reports
  /// the host's available memory.
  ng_status (*mem_info)(ng_backend *be, size_t *free, size_t *total);
  /// Host memory the backend copies from and to fastest (page-locked on CUDA, plain on the CPU
  /// backend); released with host_free (which accepts NULL).
  ng_status (*host_alloc)(ng_backend *be, void **out, size_t bytes);
  void (*host_free)(ng_backend *be, void *ptr);
  /// Makes existing host memory readable by the backend's kernels (page-locks and maps it on
  /// CUDA; `read_only` for read-only mappings such as a memory-mapped dataset; nothing to do on
  /// the CPU backend). host_view then gives the pointer kernels use for it.
  ng_status (*host_register)(ng_backend *be, void *ptr, size_t bytes, bool read_only);
  void (*host_unregister)(ng_backend *be, void *ptr);
  /// The PCI id of the backend's device ("0000:17:00.0") into `buf`, or "" for the CPU: worker
  /// threads are placed near it.
  ng_status (*pci_bus_id)(ng_backend *be, char *buf, size_t cap);
  /// The pointer through which the backend's kernels read registered host memory `host`.
  ng_status (*host_view)(ng_backend *be, const void *host, const void **out);

  /* -- timing and arithmetic mode (optional: NULL where the backend has none) -- */
  /// Records timing event `k` (0 <= k < NG_BACKEND_EVENTS) after every op queued so far on the
  /// ops' queue. The CPU backend, whose ops finish before they return, reads its clock.
  ng_status (*event_record)(ng_backend *be, int k);
  /// Milliseconds from event `a` to event `b`, waiting for `b` to complete.
  ng_status (*event_elapsed)(ng_backend *be, int a, int b, double *ms);
  /// Sets the arithmetic of the GEMMs queued from now on. NULL, or NG_ERR_UNSUPPORTED for a
  /// precision the backend cannot run: fp32 only.
  ng_status (*set_precision)(ng_backend *be, ng_precision p);
  /// Runs GEMMs of `shapes` (at most NG_WARM_SHAPES; shrunk to fit) once on `scratch`
  /// (`bytes` of backend memory the caller owns and leaves alone until warm_wait), on a thread
  /// of its own, so that the one-time cost of a GEMM library's first calls (set-up, loading
  /// the kernels a shape picks: about 0.2 s on an H100) overlaps the caller's set-up instead of
  /// falling in the first training iteration. warm_wait joins that thread; no gemm may be
  /// queued in between (the other ops may), and destroy joins it too. Best effort: a failure
  /// leaves the cost to the first iteration and is not reported.
  void (*warm_start)(ng_backend *be, const ng_gemm_shape *shapes, int n, float *scratch,
                     size_t bytes);
  void (*warm_wait)(ng_backend *be);

  /* -- sampling on the device (optional: NULL where the backend has none) -- */
  /// A device sampler of graph `g` (borrowed; the CUDA backend copies its topology to device
  /// memory) with `lanes` >= 1 lanes: what sampler_run draws from. Each lane has its own queue
  /// and working memory, so that several threads can sample at once, one a lane. Destroyed with
  /// sampler_destroy (accepts NULL).
  ng_status (*sampler_create)(ng_backend *be, const ng_csr *g, int lanes, ng_dev_sampler **out);
  void (*sampler_destroy)(ng_backend *be, ng_dev_sampler *s);
  /// Samples the blocks of `n` distinct targets (host array) with `seed` exactly as ng__sample
  /// (cpu/sampler.c) does for `cfg` (whose graph must be the sampler's): the same blocks bit for
  /// bit. They are copied into host memory *host of *host_cap bytes, which the op grows (with
  /// host_free and host_alloc) as needed; `out`'s arrays point into it until the next call with
  /// that buffer. It runs on lane `lane`'s queue and memory, beside the ops: one thread at a time
  /// may use a lane, and that thread need not be the ops' thread.
  ng_status (*sampler_run)(ng_backend *be, ng_dev_sampler *s, int lane, const ng_sampler_cfg *cfg,
                           const int64_t *targets, int32_t n, uint64_t seed, ng_minibatch *out,
                           void **host, size_t *host_cap);

  /* -- gathers -- */
  /// dst[i, :] = table[ids[i], :] for i < n (table is [*, dim] with row stride dim; on the CUDA
  /// backend it may be device or registered host memory).
  ng_status (*gather_rows)(ng_backend *be, float *dst, const float *table, const int64_t *ids,
                           int64_t n, int64_t dim);

  /* -- aggregation over a block (GAR: each destination reduced in neighbour order) -- */
  /// Forward: dst[d] = finalize(reduce over e of w_e * src[indices[e]]) (+ self loop);
  /// `argbest` [n_dst, dim] receives, for MAX/MIN, the local source id that won each element
  /// (the first in edge order on ties; -1 when none); NULL for SUM, and may be NULL for MAX/MIN
  /// when no backward follows. src is [n_src, dim], dst [n_dst, dim].
  ng_status (*aggr_fwd)(ng_backend *be, const ng_aggr *ag, const ng_block *blk, const float *src,
                        int64_t dim, float *dst, int32_t *argbest);
  /// Backward: grad_src [n_src, dim] = d loss / d src given grad_dst [n_dst, dim]; overwrites
  /// grad_src. Each source row sums its contributions in transposed-edge order (no atomics).
  /// MAX/MIN route each element to argbest, once per destination even if it lists the source
  /// twice.
  ng_status (*aggr_bwd)(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                        const float *grad_dst, const int32_t *argbest, int64_t dim,
                        float *grad_src);
  /// Backward of aggr_fwd for a user aggregator (ag->user; aggr_bwd refuses those): src is
  /// the forward's input [n_src, dim] and `work` [nnz, dim] floats. A first pass per destination
  /// recomputes each state in edge order and writes work[e, c] = grad_dst[d, c] * g_e, g_e =
  /// user->grad(state, degree, x, w_e, y) (linear: finalize(accumulate(init, 1, w_e)) -
  /// finalize(init), degree); then each source row sums its edges' work in transposed-edge
  /// order into grad_src [n_src, dim] (overwritten). Optional: NULL where the backend has none.
  ng_status (*aggr_user_bwd)(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                             const float *src, const float *grad_dst, int64_t dim, float *work,
                             float *grad_src);
  /// Partial forward over the edges of `blk` into a fresh state (no finalize, no self loop),
  /// with the aggregator's input dropout. Here the indices may address any row of `src` (a
  /// table, e.g. the hot cache or zero-copy host features addressed by global node id); n_src
  /// is then at least the table's row count and need not relate to n_dst.
  ng_status (*aggr_partial)(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                            const float *src, ng_pstate *state);
  /// acc = merge(acc, other): SUM adds, MAX/MIN take the elementwise best (acc on ties); a row
  /// empty in one state takes the other's values; counts add.
  ng_status (*pstate_merge)(ng_backend *be, const ng_aggr *ag, ng_pstate *acc,
                            const ng_pstate *other);
  /// dst [n_dst, dim] = finalize(state) (mean divides by count; empty rows give 0).
  ng_status (*pstate_finalize)(ng_backend *be, const ng_aggr *ag, const ng_pstate *state,
                               float *dst);

  /// dst[pos[i], :] = table[ids[i], :] for i < n, with input dropout keyed like aggr_partial's
  /// (element (ids[i], c) of the table; drop_p 0 copies). The table may be registered host
  /// memory on the CUDA backend. `pos` must not repeat a row; NULL means pos[i] = i.
  ng_status (*scatter_rows)(ng_backend *be, float *dst, const int32_t *pos, const float *table,
                            const int64_t *ids, int64_t n, int64_t dim, float drop_p,
                            uint64_t drop_key);
  /* -- bf16 tables (optional: NULL where the backend has none; NG_PRECISION_BF16 needs both) --
   * The same ops as aggr_partial and scatter_rows over a table of bf16 values (core/bf16.h,
   * uint16 bits): each element is converted to fp32 (exactly) where it is read, and everything
   * after that is the fp32 op's arithmetic in its order, so the result is bit for bit the fp32
   * op's on the converted table. */
  ng_status (*aggr_partial_bf16)(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                 const uint16_t *src, ng_pstate *state);
  ng_status (*scatter_rows_bf16)(ng_backend *be, float *dst, const int32_t *pos,
                                 const uint16_t *table, const int64_t *ids, int64_t n, int64_t dim,
                                 float drop_p, uint64_t drop_key);
  /// dst[d, :] = dst[d, :] + self_w[d] * rows[d, :] for d < n (GCN's self loop, added after a
  /// merged state is finalized: the order of aggr_fwd).
  ng_status (*add_self_loop)(ng_backend *be, float *dst, const float *self_w, const float *rows,
                             int64_t n, int64_t dim);

  /* -- attention (GAT) over a block: each destination's softmax in slot order, no atomics -- */
  /// For each destination d and head k: the scores e_s = LeakyReLU(z[src(s), k] . att_src[k] +
  /// z[d, k] . att_dst[k]) of d's slots (self first, then its edges in order); alpha_s =
  /// exp(e_s - max) / sum exp(e - max), summed in slot order; alpha [(nnz + n_dst), heads]
  /// receives them (before dropout); out[d, k] = sum over slots, in order, of
  /// dropout(alpha_s) z[src(s), k] (or the mean over heads, see ng_attn). att_src and att_dst
  /// are [heads, head_dim]. blk->edge_w and self_w are ignored.
  ng_status (*attn_fwd)(ng_backend *be, const ng_attn *at, const ng_block *blk, const float *z,
                        const float *att_src, const float *att_dst, float *alpha, float *out);
  /// Backward of attn_fwd from grad_out (the shape of its out): grad_z [n_src, heads *
  /// head_dim] (overwritten; each source row sums its terms in a fixed order: its self slot,
  /// then its transposed edges in order, so the block needs its transpose), and grad_att_src,
  /// grad_att_dst [heads, head_dim] (overwritten; summed over rows in row order). `work` holds
  /// ng_attn_bwd_work floats.
  ng_status (*attn_bwd)(ng_backend *be, const ng_attn *at, const ng_block *blk, const float *z,
                        const float *att_src, const float *att_dst, const float *alpha,
                        const float *grad_out, float *work, float *grad_z, float *grad_att_src,
                        float *grad_att_dst);

  /// Attention partial states (inference: no dropout) into state [n_dst, ng_attn_state_cols]:
  /// for destination d, its self slot first when `self` (source row z_dst[d]), then its edges in
  /// order (source rows z_src[indices[e]]: any rows of a table, n_src need only bound them), with
  /// the scores of attn_fwd (z_dst[d] . att_dst against z_j . att_src); m is the slots' max, s
  /// and v sum in slot order. A destination with no slot gets the empty state.
  ng_status (*attn_state)(ng_backend *be, const ng_attn *at, const ng_block *blk,
                          const float *z_src, const float *z_dst, const float *att_src,
                          const float *att_dst, bool self, float *state);
  /// For n_dst rows: acc = merge(acc, other) when `other` is not NULL; then, when `out` is not
  /// NULL, out [n_dst, heads * head_dim, or head_dim with mean_heads] = v / s of each head (0
  /// for an empty state), the heads averaged as attn_fwd does.
  ng_status (*attn_merge)(ng_backend *be, const ng_attn *at, int32_t n_dst, float *acc,
                          const float *other, float *out);

  /* -- dense ops -- */
  /// C[M,N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when trans_* is true.
  ng_status (*gemm)(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc);
  /// Optional (NULL: gemm then bias_act_fwd): C[M,N] = act(op(A) op(B) + beta * C + bias), row-
  /// major, bias [N] or NULL; act NONE or RELU. The bias and the activation run in the GEMM's
  /// epilogue, saving bias_act_fwd's pass over C. The values are those of the two calls except
  /// where the backend's GEMM kernel differs, and except that the epilogue's ReLU may turn a NaN
  /// into 0 where bias_act_fwd keeps it.
  ng_status (*gemm_bias_act)(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                             int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                             float beta, float *c, int64_t ldc, const float *bias,
                             ng_activation act);
  /// y += x elementwise (n values).
  ng_status (*add)(ng_backend *be, float *y, const float *x, int64_t n);
  /// x[r, :] += bias, then x = act(x), in place ([rows, cols]; bias may be NULL).
  ng_status (*bias_act_fwd)(ng_backend *be, float *x, const float *bias, int64_t rows, int64_t cols,
                            ng_activation act);
  /// grad = grad * act'(y) in place (y: the forward output); grad_bias (may be NULL) [cols] =
  /// column sums of the result in the chunked row order of NG_BIAS_CHUNK_ROWS.
  ng_status (*bias_act_bwd)(ng_backend *be, float *grad, const float *y, float *grad_bias,
                            int64_t rows, int64_t cols, ng_activation act);
  /// Inverted dropout: element i is kept with probability 1 - p, decided by a hash of
  /// (seed, i) only, and scaled by 1 / (1 - p); mask [n] records the decisions. p == 0 copies.
  /// Exactly (so that backends agree bit for bit): kept iff ng_dropout_keep(ng_mix64(seed), i,
  /// ng_dropout_threshold(p)) (core/rng.h), kept values x * (1.0f / (1.0f - p)) in float,
  /// dropped ones 0.
  ng_status (*dropout_fwd)(ng_backend *be, float *x, uint8_t *mask, int64_t n, float p,
                           uint64_t seed);
  ng_status (*dropout_bwd)(ng_backend *be, float *grad, const uint8_t *mask, int64_t n, float p);
  /// Mean log-softmax cross-entropy over n rows of logits [n, classes] with labels [n];
  /// grad (may be NULL) [n, classes] = d(mean loss)/d logits. Host outputs: *loss (mean) and
  /// *correct (rows whose arg-max equals the label; ties go to the lowest class). With both
  /// NULL the op does not wait: its result joins a queue (at most NG_XENT_QUEUE, else
  /// NG_ERR_STATE) that xent_result reads in order, so that a device can run ahead of the host.
  /// A label out of range is then reported by xent_result.
  ///
  /// The step guard: a result that is bad (non-finite loss, or a label out of range) and not
  /// yet read makes every opt_step queued after its xent do nothing, until xent_result (or the
  /// op itself, with host outputs) has read it. A host can thus queue an iteration's step
  /// before it has seen the loss, and a diverging loss never reaches the parameters.
  ng_status (*xent)(ng_backend *be, const float *logits, const int32_t *labels, int64_t n,
                    int64_t classes, float *grad, double *loss, int64_t *correct);
  /// Waits for the oldest queued xent and returns its mean loss and correct count
  /// (NG_ERR_STATE when none is queued).
  ng_status (*xent_result)(ng_backend *be, double *loss, int64_t *correct);
  /// One optimizer step on n parameters; state1/state2 are momentum/Adam moments (n each).
  /// Does nothing while the step guard (see xent) holds.
  ng_status (*opt_step)(ng_backend *be, const ng_opt_hp *hp, float *param, const float *grad,
                        float *state1, float *state2, int64_t n);

  /* -- link prediction -- */
  /// The dot decoder's scores of n node pairs: out[i] = the dot product of rows u[i] and v[i] of
  /// h [*, dim], summed as runtime/link_score.c's ng__link_score sums it, so that the scores are
  /// its bits on every backend: acc = +0, then for c = 0 .. dim - 1 in order acc = acc +
  /// (a[c] * b[c]), each product and each sum rounded to float separately (no fused
  /// multiply-add). u and v are rows of h (0 <= u[i], v[i] < h's rows; h may have up to
  /// INT32_MAX rows and its offsets are 64-bit). Link evaluation scores its pairs with it on a
  /// device backend (runtime/link_eval.c). dim >= 1; nothing to do for n == 0.
  ng_status (*pair_dot)(ng_backend *be, float *out, const float *h, const int32_t *u,
                        const int32_t *v, int64_t n, int64_t dim);

  /* -- data-parallel training (optional: NULL where the backend has none; the CPU backend's
   *    memory is host memory, which the communicator reduces itself). docs/distributed.md -- */
  /// Writes the NG_DIST_ID_BYTES id that rank 0 creates and every rank passes to dist_init;
  /// with `id` NULL, only checks that the device communicator's library can be used here.
  ng_status (*dist_id)(ng_backend *be, void *id);
  /// Joins the device communicator named by `id` as `rank` of `ranks` (collective: every rank
  /// calls it at once; it waits for the others).
  ng_status (*dist_init)(ng_backend *be, const void *id, int rank, int ranks);
  /// Queues x[0 .. n) = the sum over ranks of (scale_r * x_r) on the ops' queue (the device
  /// all-reduce; every rank queues the same calls in the same order). The sum's order is fixed
  /// for a fixed rank count, so results are bit-identical run after run.
  ng_status (*allreduce)(ng_backend *be, float *x, int64_t n, float scale);
  /// Milliseconds of device time of the all-reduces queued since the last call and how many
  /// they were (waits for them).
  ng_status (*allreduce_time)(ng_backend *be, double *ms, int64_t *count);

  /* -- the partitioned hot tier (optional: NULL where the backend has none). The hot rows
   *    [0, R x H) are striped over R parts: row g lives in part g % R, at row g / R of it
   *    (docs/distributed.md, "The feature cache across GPUs") -- */
  /// dst[i, :] = row ids[i] of the striped table whose R = n_parts parts are parts[0 .. R)
  /// (fp32 rows, or bf16 rows converted exactly when `bf16`), with input dropout keyed by the
  /// global id, as scatter_rows keys it (element (ids[i], c)). A part may be a peer device's
  /// memory (ipc_open). n > 0.
  ng_status (*gather_parts)(ng_backend *be, float *dst, const void *const *parts, int n_parts,
                            bool bf16, const int64_t *ids, int64_t n, int64_t dim, float drop_p,
                            uint64_t drop_key);
  /// Writes the NG_IPC_HANDLE_BYTES handle by which another process of the host opens the
  /// allocation `ptr` (from alloc) with ipc_open.
  ng_status (*ipc_export)(ng_backend *be, const void *ptr, void *handle);
  /// Opens a handle another process exported: *ptr is its allocation as this backend's
  /// kernels address it (over NVLink or PCIe peer-to-peer). `peer_pci` is the exporting
  /// device's PCI id: when that device is visible here, peer access is checked
  /// (NG_ERR_UNSUPPORTED when the two devices cannot access each other) and enabled.
  ng_status (*ipc_open)(ng_backend *be, const void *handle, const char *peer_pci, void **ptr);
  /// Closes what ipc_open opened (accepts NULL).
  void (*ipc_close)(ng_backend *be, void *ptr);
};

/// Bytes of an inter-process memory handle (ipc_export): cudaIpcMemHandle_t.
#define NG_IPC_HANDLE_BYTES 64
/// The most parts of a partitioned hot tier (the GPUs of one host).
#define NG_MAX_PARTS 16

/// Bytes of a device communicator's id (dist_id): NCCL's ncclUniqueId.
#define NG_DIST_ID_BYTES 128

/* Arguments are validated once, in front of every backend (core/backend_check.c): `iface` is the
 * checked front, whose ops check their arguments as the contract above says (NG_ERR_INVALID_ARG
 * or NG_ERR_UNSUPPORTED with a message naming the op and the argument) and then call the
 * backend's own op in `impl`. An op of `impl` may therefore assume checked arguments: counts
 * >= 0, the pointers it needs not NULL, known enums, blocks and states of consistent shapes; and
 * it is not called at all for work that is empty (the checks say where), so that every backend
 * returns the same for it. The block arrays' contents (indptr's endpoints) are checked only when
 * the backend's memory is host memory, where the front can read them; a device backend checks
 * what it must on the device (xent's labels) or not at all. Ops the front does not check (they
 * take no argument it could validate) are impl's own pointers, and an optional op impl lacks
 * stays NULL in the front, so that callers can still test for it. */
struct ng_backend {
  const struct ng_backend_i *iface; ///< the checked front: &front
  void *ctx;
  const struct ng_backend_i *impl; ///< the backend's own ops, which assume checked arguments
  struct ng_backend_i front;       ///< impl's table with the checking ops in its slots
};

/// Makes `be` run `impl` on `ctx` behind the checked front (every backend's create calls it).
/// `impl` is borrowed and must outlive the backend (a static table); `ctx` is the backend's.
void ng__backend_init(ng_backend *be, const struct ng_backend_i *impl, void *ctx);

/// Destroys any backend; accepts NULL.
void ng__backend_destroy(ng_backend *be);

/// NG_ERR_INVALID_ARG naming `op` and `what` when `p` is NULL and `needed` (backend creation
/// uses it too).
ng_status ng__bk_check_ptr(const char *op, const char *what, const void *p, bool needed);

/// Makes *buf (backend memory of *cap bytes) hold at least `bytes`: a buffer that must grow is
/// freed and reallocated (contents lost) with half again its size or `bytes`, whichever is
/// more, so that buffers sized for the largest mini-batch stop growing.
ng_status ng__bk_reserve(ng_backend *be, void **buf, size_t *cap, size_t bytes);

/// Checks a sampler configuration (graph arrays, layer count, fanouts) with the messages every
/// sampler gives: the CPU sampler's and the checked front of a device sampler's.
ng_status ng__sampler_cfg_check(const ng_sampler_cfg *cfg);

/// The most arrays a mini-batch has: its node ids and seven per block (ng__minibatch_arrays).
#define NG_MB_ARRAYS (1 + 7 * NG_MAX_LAYERS)

/// The arrays of `mb` in a fixed order (node ids, then each block's indptr, indices, edge_w and
/// self_w when set, t_indptr, t_dst and t_eid when set) with their sizes in bytes: how a sampler
/// copies a mini-batch into one buffer. Returns how many (at most NG_MB_ARRAYS).
int ng__minibatch_arrays(const ng_minibatch *mb, const void **src, size_t *bytes);
/// `mb` with its arrays at dst[0 ..] instead, in ng__minibatch_arrays's order.
void ng__minibatch_rebase(ng_minibatch *out, const ng_minibatch *mb, void *const *dst);
/// Bytes of one buffer holding `n` arrays of these sizes, each at a 64-byte boundary.
size_t ng__minibatch_packed_bytes(const size_t *bytes, int n);

/// Checks a user aggregator's definition: the checks ng_aggregator_define documents (a few
/// dozen calls of its functions on generated values).
ng_status ng__aggregator_def_check(const ng_aggregator_def *def);

/// The gradient coefficient d y / d x of one neighbour of a linear user aggregator:
/// finalize(accumulate(init, 1, w), degree) - finalize(init, degree).
float ng__agg_linear_coef(const ng_aggregator_def *def, float w, float degree);

/// Translates a public aggregator descriptor into the backend's form (validating it).
ng_status ng__aggr_from_public(ng_aggr *out, const ng_aggregator *desc);

#ifdef __cplusplus
}
#endif

#endif /* NG_BACKEND_IMPL_H */
