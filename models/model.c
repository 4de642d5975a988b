/* GraphSAGE, GCN, GAT, GIN and SAGE-pool layers, written once against the backend interface
 * (docs/aggregators.md). */
#include "model_impl.h"

#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the public model description ---- */

ng_status ng__model_check(ng_model_t m) {
  if (!m)
    return ng__err(NG_ERR_INVALID_ARG, "model handle is NULL");
  if (m->magic != NG_MODEL_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "model handle is not a live model (destroyed?)");
  return NG_OK;
}

ng_status ng_model_create(ng_model_t *out, ng_model_kind kind, int64_t in_dim) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_model_create: out is NULL");
  *out = NULL;
  if ((unsigned)kind > NG_MODEL_SAGE_POOL)
    return ng__err(NG_ERR_INVALID_ARG, "ng_model_create: unknown model kind %d", (int)kind);
  if (in_dim <= 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_model_create: input dimension %lld must be positive (a dataset without "
                   "features cannot be trained)",
                   (long long)in_dim);
  struct ng_model *m = ng__calloc(1, sizeof *m, "a model");
  if (!m)
    return NG_ERR_NOMEM;
  m->magic = NG_MODEL_MAGIC;
  m->kind = kind;
  m->in_dim = in_dim;
  *out = m;
  return NG_OK;
}

void ng_model_destroy(ng_model_t m) {
  if (!m || m->magic != NG_MODEL_MAGIC)
    return;
  m->magic = 0;
  free(m);
}

ng_status ng_model_add_layer(ng_model_t m, const ng_layer_opts *opts) {
  NG_CHECK(ng__model_check(m));
  if (!opts || opts->size < sizeof(ng_layer_opts))
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_model_add_layer: options missing or from an older header (use "
                   "NG_LAYER_OPTS_INIT)");
  int l = m->n_layers;
  /* The layer limits of model_impl.h (checkpoint tensors, the identity block). */
  const int max_layers = m->kind == NG_MODEL_SAGE_POOL                        ? NG_POOL_MAX_LAYERS
                         : m->kind == NG_MODEL_GAT || m->kind == NG_MODEL_GIN ? NG_GAT_MAX_LAYERS
                                                                              : NG_MAX_LAYERS;
  if (l >= max_layers)
    return ng__err(NG_ERR_INVALID_ARG, "a model of this kind (%d) has at most %d layers",
                   (int)m->kind, max_layers);
  if (opts->out_dim <= 0)
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: out_dim %lld must be positive", l,
                   (long long)opts->out_dim);
  if (opts->fanout == 0 || opts->fanout < -1)
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: fanout %d must be positive or -1 (all)", l,
                   (int)opts->fanout);
  if (!(opts->dropout >= 0.0f && opts->dropout < 1.0f))
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: dropout %g must be in [0, 1)", l,
                   (double)opts->dropout);
  if (!(opts->weight_decay >= 0.0f))
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: weight decay %g must be >= 0", l,
                   (double)opts->weight_decay);
  if ((unsigned)opts->activation > NG_ACT_RELU)
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: unknown activation %d", l, (int)opts->activation);
  if (m->kind == NG_MODEL_GAT) {
    if (opts->heads < 1)
      return ng__err(NG_ERR_INVALID_ARG, "layer %d: %d attention heads; GAT needs at least 1", l,
                     (int)opts->heads);
    if (opts->combine != NG_HEADS_MEAN && opts->combine != NG_HEADS_CONCAT)
      return ng__err(NG_ERR_INVALID_ARG, "layer %d: unknown GAT head combine %d", l,
                     (int)opts->combine);
    if (opts->combine == NG_HEADS_CONCAT && opts->out_dim % opts->heads)
      return ng__err(NG_ERR_INVALID_ARG,
                     "layer %d: concatenated heads need out_dim (%lld) divisible by heads (%d)", l,
                     (long long)opts->out_dim, (int)opts->heads);
    if (!(opts->attn_dropout >= 0.0f && opts->attn_dropout < 1.0f))
      return ng__err(NG_ERR_INVALID_ARG, "layer %d: attention dropout %g must be in [0, 1)", l,
                     (double)opts->attn_dropout);
  }
  ng_layer *L = &m->layers[l];
  memset(L, 0, sizeof *L);
  L->o = *opts;
  L->o.size = sizeof(ng_layer_opts);
  /* The new kinds fix their aggregation: GIN sums, SAGE-pool takes the max of its pooled rows,
   * and GAT's is its attention (its SUM is never run on a layer's edges: the feature store
   * aggregates the identity block with ng__model_input_aggr). */
  const ng_aggregator own = m->kind == NG_MODEL_SAGE_POOL ? NG_AGGREGATOR_MAX : NG_AGGREGATOR_SUM;
  const bool fixed =
      m->kind == NG_MODEL_GAT || m->kind == NG_MODEL_GIN || m->kind == NG_MODEL_SAGE_POOL;
  ng_status st = ng__aggr_from_public(&L->ag, fixed ? &own : &opts->aggregator);
  if (st != NG_OK) {
    ng__err_prefix("layer %d", l);
    return st;
  }
  if (m->kind == NG_MODEL_SAGE || m->kind == NG_MODEL_SAGE_POOL) {
    if (opts->combine != NG_SAGE_SUM && opts->combine != NG_SAGE_CONCAT)
      return ng__err(NG_ERR_INVALID_ARG, "layer %d: unknown GraphSAGE combine %d", l,
                     (int)opts->combine);
    if (opts->combine == NG_SAGE_CONCAT && opts->out_dim % 2)
      return ng__err(NG_ERR_INVALID_ARG,
                     "layer %d: GraphSAGE CONCAT needs an even out_dim (got %lld)", l,
                     (long long)opts->out_dim);
  }
  L->in_dim = l ? m->layers[l - 1].out_dim : m->in_dim;
  L->out_dim = opts->out_dim;
  bool concat = (m->kind == NG_MODEL_SAGE || m->kind == NG_MODEL_SAGE_POOL) &&
                opts->combine == NG_SAGE_CONCAT;
  L->cols = concat ? L->out_dim / 2 : L->out_dim;
  /* SAGE-pool pools into in_dim columns (as PyG's pool aggregator); GIN's MLP is out_dim wide. */
  L->pre_dim = m->kind == NG_MODEL_SAGE_POOL ? L->in_dim : m->kind == NG_MODEL_GIN ? L->out_dim : 0;
  L->heads = 1;
  L->head_dim = L->cols;
  if (m->kind == NG_MODEL_GAT) {
    L->heads = opts->heads;
    L->head_dim = opts->combine == NG_HEADS_CONCAT ? L->out_dim / opts->heads : L->out_dim;
    if (__builtin_mul_overflow(L->head_dim, (int64_t)L->heads, &L->cols))
      return ng__err(NG_ERR_INVALID_ARG, "layer %d: %d heads of %lld columns are too many", l,
                     (int)opts->heads, (long long)L->head_dim);
  }
  /* The parameter layout, in float offsets; sizes that overflow are refused. Offsets are
   * written into L only once they are known to fit. */
  int64_t off = l ? m->layers[l - 1].off_end : 0, w, self = -1, neigh, bias = -1;
  int64_t w_pre = -1, b_pre = -1, pre_size = 0;
  bool overflow = __builtin_mul_overflow(L->in_dim, L->cols, &w);
  if (L->pre_dim > 0) {
    overflow |= __builtin_mul_overflow(L->in_dim, L->pre_dim, &pre_size);
    w_pre = off;
    overflow |= __builtin_add_overflow(off, pre_size, &off);
    b_pre = off;
    overflow |= __builtin_add_overflow(off, L->pre_dim, &off);
  }
  if (m->kind == NG_MODEL_GIN) /* W2 [pre_dim, out] after W1 */
    overflow |= __builtin_mul_overflow(L->pre_dim, L->cols, &w);
  if (m->kind == NG_MODEL_SAGE || m->kind == NG_MODEL_SAGE_POOL) {
    self = off;
    overflow |= __builtin_add_overflow(off, w, &off);
  }
  neigh = off;
  overflow |= __builtin_add_overflow(off, w, &off);
  int64_t att_src = -1, att_dst = -1;
  if (m->kind == NG_MODEL_GAT) {
    att_src = off;
    overflow |= __builtin_add_overflow(off, L->cols, &off);
    att_dst = off;
    overflow |= __builtin_add_overflow(off, L->cols, &off);
  }
  if (opts->bias) {
    bias = off;
    overflow |= __builtin_add_overflow(off, L->out_dim, &off);
  }
  if (overflow || off > (INT64_MAX / 4) / (int64_t)sizeof(float))
    return ng__err(NG_ERR_INVALID_ARG,
                   "layer %d: %lld x %lld weights make the model too large to address", l,
                   (long long)L->in_dim, (long long)L->out_dim);
  L->off_w_self = self;
  L->off_w = neigh;
  L->off_b = bias;
  L->off_att_src = att_src;
  L->off_att_dst = att_dst;
  L->off_w_pre = w_pre;
  L->off_b_pre = b_pre;
  L->off_end = off;
  m->n_params = off;
  m->n_layers = l + 1;
  return NG_OK;
}

const ng_aggr *ng__model_input_aggr(const struct ng_model *m) {
  static const ng_aggr plain_sum = {.reduce = NG_REDUCE_SUM};
  return ng__model_raw_input(m) ? &plain_sum : &m->layers[0].ag;
}

ng_status ng_model_shape(int32_t *layers, int64_t *params, ng_model_t m) {
  NG_CHECK(ng__model_check(m));
  if (layers)
    *layers = m->n_layers;
  if (params)
    *params = m->n_params;
  return NG_OK;
}

int ng__model_param_tensors(const struct ng_model *m, ng_param_tensor *out, int cap) {
  int n = 0;
  for (int l = 0; l < m->n_layers; l++) {
    const ng_layer *L = &m->layers[l];
    struct {
      const char *name;
      int64_t off;
      int ndim;
      int64_t r, c;
    } t[] = {
        {m->kind == NG_MODEL_GIN ? "mlp1.weight" : "w_pool", L->off_w_pre, 2, L->in_dim,
         L->pre_dim},
        {m->kind == NG_MODEL_GIN ? "mlp1.bias" : "b_pool", L->off_b_pre, 1, L->pre_dim, 0},
        {"w_self", L->off_w_self, 2, L->in_dim, L->cols},
        {m->kind == NG_MODEL_SAGE || m->kind == NG_MODEL_SAGE_POOL ? "w_neigh" : "weight", L->off_w,
         2, m->kind == NG_MODEL_GIN ? L->pre_dim : L->in_dim, L->cols},
        {"att_src", L->off_att_src, 2, L->heads, L->head_dim},
        {"att_dst", L->off_att_dst, 2, L->heads, L->head_dim},
        {"bias", L->off_b, 1, L->out_dim, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
      if (t[i].off < 0 || n >= cap)
        continue;
      snprintf(out[n].name, sizeof out[n].name, "layers.%d.%s", l, t[i].name);
      out[n].offset = t[i].off;
      out[n].ndim = t[i].ndim;
      out[n].shape[0] = t[i].r;
      out[n].shape[1] = t[i].c;
      n++;
    }
  }
  return n;
}

/* Glorot-uniform weights and zero biases from `seed`, into host memory params[n_params]. */
static void init_params(const struct ng_model *m, float *params, uint64_t seed) {
  memset(params, 0, (size_t)m->n_params * sizeof *params);
  ng_param_tensor t[NG_LAYER_TENSORS * NG_MAX_LAYERS];
  int n = ng__model_param_tensors(m, t, (int)NG_ARRAY_LEN(t));
  for (int i = 0; i < n; i++) {
    if (t[i].ndim != 2)
      continue; /* biases start at zero */
    /* Glorot & Bengio's uniform initialisation, as Kipf & Welling and PyG use. */
    double limit = sqrt(6.0 / (double)(t[i].shape[0] + t[i].shape[1]));
    ng_rng rng;
    ng_rng_seed(&rng, ng_hash3(seed, 0x696e6974 /* "init" */, (uint64_t)i));
    float *w = params + t[i].offset;
    int64_t count = t[i].shape[0] * t[i].shape[1];
    for (int64_t j = 0; j < count; j++)
      w[j] = (float)((2.0 * ng_rng_uniform(&rng) - 1.0) * limit);
  }
}

/* ---- execution on a backend ---- */

#define BE(ex) ((ex)->be->iface)

ng_status ng__exec_create(ng_model_exec *ex, const struct ng_model *m, ng_backend *be,
                          uint64_t seed) {
  memset(ex, 0, sizeof *ex);
  ex->model = m;
  ex->be = be;
  size_t bytes = (size_t)m->n_params * sizeof(float);
  float **bufs[4] = {&ex->params, &ex->grads, &ex->state1, &ex->state2};
  static const char *const names[4] = {"parameters", "gradients", "optimizer state 1",
                                       "optimizer state 2"};
  for (int i = 0; i < 4; i++) {
    ng_status st = BE(ex)->alloc(be, (void **)bufs[i], bytes);
    if (st != NG_OK) {
      ng__err_prefix("the model's %s (%lld floats)", names[i], (long long)m->n_params);
      ng__exec_destroy(ex);
      return st;
    }
    st = BE(ex)->fill(be, *bufs[i], m->n_params, 0.0f);
    if (st != NG_OK) {
      ng__exec_destroy(ex);
      return st;
    }
  }
  float *host = ng__malloc(bytes, "initial parameters");
  if (!host) {
    ng__exec_destroy(ex);
    return NG_ERR_NOMEM;
  }
  init_params(m, host, seed);
  ng_status st = BE(ex)->copy_h2d(be, ex->params, host, bytes);
  free(host);
  if (st != NG_OK)
    ng__exec_destroy(ex);
  return st;
}

void ng__exec_destroy(ng_model_exec *ex) {
  if (!ex || !ex->be)
    return;
  BE(ex)->free(ex->be, ex->params);
  BE(ex)->free(ex->be, ex->grads);
  BE(ex)->free(ex->be, ex->state1);
  BE(ex)->free(ex->be, ex->state2);
  BE(ex)->free(ex->be, ex->arena);
  memset(ex, 0, sizeof *ex);
}

/* A bump allocator over the exec's arena. Run once with base == NULL to size the arena, then
 * again to carve it: both runs take the same sequence of sizes. */
typedef struct {
  char *base;
  size_t used;
} carve;

static void *take(carve *c, size_t bytes) {
  size_t at = (c->used + 63) & ~(size_t)63;
  c->used = at + bytes;
  return c->base ? c->base + at : NULL;
}

static ng_status arena_reserve(ng_model_exec *ex, size_t bytes) {
  ng_status st = ng__bk_reserve(ex->be, &ex->arena, &ex->arena_cap, bytes);
  if (st != NG_OK)
    ng__err_prefix("the model's activations and gradients of a mini-batch");
  return st;
}

ng_status ng__exec_reserve(ng_model_exec *ex, size_t bytes, void **arena) {
  NG_CHECK(arena_reserve(ex, bytes));
  *arena = ex->arena;
  return NG_OK;
}

static bool layer_drops(const ng_layer *L, bool training) {
  return training && L->o.dropout > 0.0f;
}

static bool needs_argbest(const ng_layer *L) {
  return L->ag.reduce != NG_REDUCE_SUM;
}

/* Lays out the workspace of a mini-batch in `c`. The input layer's aggregation and self rows
 * come from the caller (agg0, self0), so layer 0 carves no input, mask or aggregation. */
static void carve_ws(ng_model_exec *ex, carve *c, const ng_minibatch *mb, const float *agg0,
                     const float *self0, bool training) {
  const struct ng_model *m = ex->model;
  for (int l = 0; l < m->n_layers; l++) {
    const ng_layer *L = &m->layers[l];
    const ng_block *b = &mb->blocks[ng__model_block(m, l)];
    ng_layer_ws *w = &ex->ws[l];
    size_t n_src = (size_t)b->n_src, n_dst = (size_t)b->n_dst;
    size_t in = (size_t)L->in_dim, out = (size_t)L->out_dim;
    w->z = w->alpha = w->d_z = w->attn_work = NULL;
    w->pre = w->hid = w->d_pre = w->d_hid = w->self_w = w->u_work = NULL;
    const size_t pre = (size_t)L->pre_dim;
    if (m->kind == NG_MODEL_SAGE_POOL) {
      /* Raw input rows of every source (layer 0: the identity block's self rows), pooled. */
      if (l == 0) {
        w->input = w->h_in = (float *)self0;
        w->mask = NULL;
      } else {
        w->input = ex->ws[l - 1].out;
        bool drop = layer_drops(L, training);
        w->h_in = drop ? take(c, n_src * in * sizeof(float)) : (float *)w->input;
        w->mask = drop ? take(c, n_src * in) : NULL;
      }
      w->pre = take(c, n_src * pre * sizeof(float));
      w->agg = take(c, n_dst * pre * sizeof(float));
      w->argbest = take(c, n_dst * pre * sizeof(int32_t));
      w->out = take(c, n_dst * out * sizeof(float));
      w->d_agg = training ? take(c, n_dst * pre * sizeof(float)) : NULL;
      w->d_pre = training ? take(c, n_src * pre * sizeof(float)) : NULL;
      w->d_in = training && l > 0 ? take(c, n_src * in * sizeof(float)) : NULL;
      continue;
    }
    if (m->kind == NG_MODEL_GIN) {
      if (l == 0) {
        w->input = w->h_in = (float *)self0;
        w->mask = NULL;
        w->agg = (float *)agg0;
      } else {
        w->input = ex->ws[l - 1].out;
        bool drop = layer_drops(L, training);
        w->h_in = drop ? take(c, n_src * in * sizeof(float)) : (float *)w->input;
        w->mask = drop ? take(c, n_src * in) : NULL;
        w->agg = take(c, n_dst * in * sizeof(float));
      }
      w->argbest = NULL;
      w->self_w = take(c, n_dst * sizeof(float));
      w->pre = take(c, n_dst * in * sizeof(float));
      w->hid = take(c, n_dst * pre * sizeof(float));
      w->out = take(c, n_dst * out * sizeof(float));
      w->d_hid = training ? take(c, n_dst * pre * sizeof(float)) : NULL;
      w->d_pre = training && l > 0 ? take(c, n_dst * in * sizeof(float)) : NULL;
      w->d_agg = NULL;
      w->d_in = training && l > 0 ? take(c, n_src * in * sizeof(float)) : NULL;
      continue;
    }
    if (m->kind == NG_MODEL_GAT) {
      /* The input rows of every source (layer 0: the feature store's self rows of the identity
       * block, after input dropout), their projection and the attention. */
      size_t kf = (size_t)L->cols, slots = (size_t)(b->nnz + b->n_dst) * (size_t)L->heads;
      if (l == 0) {
        w->input = w->h_in = (float *)self0;
        w->mask = NULL;
      } else {
        w->input = ex->ws[l - 1].out;
        bool drop = layer_drops(L, training);
        w->h_in = drop ? take(c, n_src * in * sizeof(float)) : (float *)w->input;
        w->mask = drop ? take(c, n_src * in) : NULL;
      }
      w->agg = NULL;
      w->argbest = NULL;
      w->z = take(c, n_src * kf * sizeof(float));
      w->alpha = take(c, slots * sizeof(float));
      w->out = take(c, n_dst * out * sizeof(float));
      w->d_agg = NULL;
      if (training) {
        ng_attn at = {.heads = L->heads, .head_dim = L->head_dim};
        w->d_z = take(c, n_src * kf * sizeof(float));
        w->attn_work =
            take(c, (size_t)ng_attn_bwd_work(&at, b->n_dst, b->n_src, b->nnz) * sizeof(float));
      }
      w->d_in = training && l > 0 ? take(c, n_src * in * sizeof(float)) : NULL;
      continue;
    }
    if (l == 0) {
      w->input = w->h_in = (float *)self0;
      w->mask = NULL;
      w->agg = (float *)agg0;
      w->argbest = NULL; /* no gradient flows into the features */
    } else {
      w->input = ex->ws[l - 1].out;
      bool drop = layer_drops(L, training);
      w->h_in = drop ? take(c, n_src * in * sizeof(float)) : (float *)w->input;
      w->mask = drop ? take(c, n_src * in) : NULL;
      w->agg = take(c, n_dst * in * sizeof(float));
      w->argbest = needs_argbest(L) ? take(c, n_dst * in * sizeof(int32_t)) : NULL;
      if (training && L->ag.user)
        w->u_work = take(c, (size_t)b->nnz * in * sizeof(float));
    }
    w->out = take(c, n_dst * out * sizeof(float));
    w->d_agg = training && l > 0 ? take(c, n_dst * in * sizeof(float)) : NULL;
    w->d_in = training && l > 0 ? take(c, n_src * in * sizeof(float)) : NULL;
  }
  for (int l = 0; l < m->n_layers; l++)
    ex->ws[l].d_out = l + 1 < m->n_layers ? ex->ws[l + 1].d_in : NULL;
  ex->logits = ex->ws[m->n_layers - 1].out;
}

static ng_status prepare_ws(ng_model_exec *ex, const ng_minibatch *mb, const float *agg0,
                            const float *self0, bool training) {
  carve c = {NULL, 0};
  carve_ws(ex, &c, mb, agg0, self0, training);
  NG_CHECK(arena_reserve(ex, c.used));
  c.base = ex->arena;
  c.used = 0;
  carve_ws(ex, &c, mb, agg0, self0, training);
  return NG_OK;
}

/* Device-memory bytes of a GEMM C[m, n] = A[m, k] B[k, n] (+ C when accumulating). */
static double gemm_bytes(int64_t m, int64_t n, int64_t k, bool accumulate) {
  return (double)sizeof(float) * (double)(m * k + k * n + (accumulate ? 2 : 1) * m * n);
}

/* x [rows, cols] += bias (NULL: none), then act, timed as "bias act fwd" of layer l. */
static ng_status bias_act(ng_model_exec *ex, int l, float *x, const float *bias, int64_t rows,
                          int64_t cols, ng_activation act) {
  NG_PROF_OP(ex->prof, "bias act fwd", l, (double)(rows * cols),
             2.0 * sizeof(float) * (double)(rows * cols),
             BE(ex)->bias_act_fwd(ex->be, x, bias, rows, cols, act));
  return NG_OK;
}

/* A timed GEMM of layer `l` (row-major, as the backend's gemm). */
static ng_status layer_gemm(ng_model_exec *ex, const char *name, int l, bool ta, bool tb, int64_t m,
                            int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float beta, float *c, int64_t ldc) {
  NG_PROF_OP(ex->prof, name, l, 2.0 * (double)m * (double)n * (double)k,
             gemm_bytes(m, n, k, beta != 0.0f),
             BE(ex)->gemm(ex->be, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc));
  return NG_OK;
}

/* A layer's forward product c [m, n] = a [m, k] b [k, n] (+ beta c), finished with the bias
 * (NULL: none) and the activation in the GEMM's epilogue when `fused` (the backend's
 * gemm_bias_act: one pass over c fewer), else a plain GEMM whose caller runs bias_act after.
 * Timed as "gemm fwd" either way. */
static ng_status dense_gemm(ng_model_exec *ex, int l, bool fused, int64_t m, int64_t n, int64_t k,
                            const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                            float *c, int64_t ldc, const float *bias, ng_activation act) {
  if (!fused)
    return layer_gemm(ex, "gemm fwd", l, false, false, m, n, k, a, lda, b, ldb, beta, c, ldc);
  NG_PROF_OP(ex->prof, "gemm fwd", l, 2.0 * (double)m * (double)n * (double)k,
             gemm_bytes(m, n, k, beta != 0.0f),
             BE(ex)->gemm_bias_act(ex->be, false, false, m, n, k, a, lda, b, ldb, beta, c, ldc,
                                   bias, act));
  return NG_OK;
}

/* Bytes an aggregation over `b` moves: a source row per edge, a row per output, the indices. */
static double aggr_bytes(const ng_block *b, int64_t dim, int64_t out_rows) {
  return (double)sizeof(float) * (double)(b->nnz + out_rows) * (double)dim +
         (double)sizeof(int32_t) * (double)(b->nnz + b->n_dst + 1);
}

/* The attention of GAT layer `l` (its dropout only in training). */
static ng_attn layer_attn(const ng_layer *L, int l, bool training, uint64_t seed) {
  return (ng_attn){
      .heads = L->heads,
      .head_dim = L->head_dim,
      .slope = 0.2f, /* Velickovic et al.'s LeakyReLU slope */
      .mean_heads = L->o.combine == NG_HEADS_MEAN,
      .drop_p = training ? L->o.attn_dropout : 0.0f,
      .drop_key = ng_mix64(ng_hash3(seed, (uint64_t)l, 0x6174746e /* "attn" */)),
  };
}

ng_attn ng__model_layer_attn(const struct ng_model *m, int l) {
  return layer_attn(&m->layers[l], l, false, 0);
}

/* A GAT layer: z = h_in W, out = attention(z) + bias, then the activation. */
static ng_status gat_forward(ng_model_exec *ex, int l, const ng_layer *L, const ng_block *b,
                             const float *h_in, float *z, float *alpha, const ng_attn *at,
                             float *out) {
  ng_backend *be = ex->be;
  const float *P = ex->params;
  int64_t in = L->in_dim, kf = L->cols, outd = L->out_dim, nd = b->n_dst, ns = b->n_src;
  NG_CHECK(layer_gemm(ex, "gemm fwd", l, false, false, ns, kf, in, h_in, in, P + L->off_w, kf, 0.0f,
                      z, kf));
  NG_PROF_OP(ex->prof, "attn fwd", l, 4.0 * (double)(b->nnz + nd) * (double)kf,
             aggr_bytes(b, kf, nd),
             BE(ex)->attn_fwd(be, at, b, z, P + L->off_att_src, P + L->off_att_dst, alpha, out));
  NG_CHECK(bias_act(ex, l, out, L->off_b >= 0 ? P + L->off_b : NULL, nd, outd, L->o.activation));
  return NG_OK;
}

/* GIN-0's weight of a node's own row: h + sum of the neighbours. */
#define GIN_SELF_WEIGHT 1.0f

/* SAGE-pool's combine: out [nd, out] = h_dst W_self + agg W_neigh (or the two side by side) +
 * b, then the activation. */
static ng_status pool_combine(ng_model_exec *ex, int l, const ng_layer *L, int64_t nd,
                              const float *h_dst, const float *agg, float *out) {
  const float *P = ex->params;
  int64_t in = L->in_dim, pd = L->pre_dim, outd = L->out_dim, c = L->cols;
  bool concat = L->o.combine == NG_SAGE_CONCAT;
  NG_CHECK(layer_gemm(ex, "gemm fwd", l, false, false, nd, c, in, h_dst, in, P + L->off_w_self, c,
                      0.0f, out, outd));
  NG_CHECK(layer_gemm(ex, "gemm fwd", l, false, false, nd, c, pd, agg, pd, P + L->off_w, c,
                      concat ? 0.0f : 1.0f, concat ? out + c : out, outd));
  NG_CHECK(bias_act(ex, l, out, L->off_b >= 0 ? P + L->off_b : NULL, nd, outd, L->o.activation));
  return NG_OK;
}

/* A SAGE-pool layer: pre = ReLU(h_in W_pool + b_pool) over every source, agg = max over each
 * destination's neighbours of pre, out = h_dst W_self + agg W_neigh (or side by side) + b. */
static ng_status pool_forward(ng_model_exec *ex, int l, const ng_layer *L, const ng_block *b,
                              const float *h_in, float *pre, float *agg, int32_t *argbest,
                              float *out) {
  ng_backend *be = ex->be;
  const float *P = ex->params;
  int64_t in = L->in_dim, pd = L->pre_dim, nd = b->n_dst, ns = b->n_src;
  NG_CHECK(layer_gemm(ex, "gemm fwd", l, false, false, ns, pd, in, h_in, in, P + L->off_w_pre, pd,
                      0.0f, pre, pd));
  NG_CHECK(bias_act(ex, l, pre, P + L->off_b_pre, ns, pd, NG_ACT_RELU));
  NG_PROF_OP(ex->prof, "aggr fwd", l, (double)b->nnz * (double)pd, aggr_bytes(b, pd, nd),
             BE(ex)->aggr_fwd(be, &L->ag, b, pre, pd, agg, argbest));
  return pool_combine(ex, l, L, nd, h_in, agg, out);
}

ng_status ng__exec_pool_combine(ng_model_exec *ex, int l, int64_t nd, const float *self,
                                const float *agg, float *out) {
  return pool_combine(ex, l, &ex->model->layers[l], nd, self, agg, out);
}

/* A GIN layer from its aggregation `agg` (computed here unless `precomputed`): pre = agg +
 * (1 + eps) h_dst, hid = ReLU(pre W1 + b1), out = hid W2 + b, then the activation. */
static ng_status gin_forward(ng_model_exec *ex, int l, const ng_layer *L, const ng_block *b,
                             const float *h_in, float *agg, bool precomputed, float *self_w,
                             float *pre, float *hid, float *out) {
  ng_backend *be = ex->be;
  const float *P = ex->params;
  int64_t in = L->in_dim, pd = L->pre_dim, outd = L->out_dim, nd = b->n_dst;
  if (!precomputed)
    NG_PROF_OP(ex->prof, "aggr fwd", l, (double)b->nnz * (double)in, aggr_bytes(b, in, nd),
               BE(ex)->aggr_fwd(be, &L->ag, b, h_in, in, agg, NULL));
  if (nd > 0) {
    NG_CHECK(BE(ex)->fill(be, self_w, nd, GIN_SELF_WEIGHT));
    NG_CHECK(BE(ex)->copy_d2d(be, pre, agg, (size_t)(nd * in) * sizeof(float)));
    NG_CHECK(BE(ex)->add_self_loop(be, pre, self_w, h_in, nd, in));
  }
  NG_CHECK(layer_gemm(ex, "gemm fwd", l, false, false, nd, pd, in, pre, in, P + L->off_w_pre, pd,
                      0.0f, hid, pd));
  NG_CHECK(bias_act(ex, l, hid, P + L->off_b_pre, nd, pd, NG_ACT_RELU));
  NG_CHECK(layer_gemm(ex, "gemm fwd", l, false, false, nd, outd, pd, hid, pd, P + L->off_w, outd,
                      0.0f, out, outd));
  NG_CHECK(bias_act(ex, l, out, L->off_b >= 0 ? P + L->off_b : NULL, nd, outd, L->o.activation));
  return NG_OK;
}

/* out [nd, out] = combine(h_in's first nd rows, agg) + bias, then the activation. */
static ng_status layer_dense(ng_model_exec *ex, int l, const ng_layer *L, int64_t nd,
                             const float *h_in, const float *agg, float *out) {
  const float *P = ex->params;
  int64_t in = L->in_dim, outd = L->out_dim;
  const float *bias = L->off_b >= 0 ? P + L->off_b : NULL;
  const ng_activation act = L->o.activation;
  const bool fused = BE(ex)->gemm_bias_act != NULL;
  if (ex->model->kind == NG_MODEL_GCN) {
    NG_CHECK(dense_gemm(ex, l, fused, nd, outd, in, agg, in, P + L->off_w, outd, 0.0f, out, outd,
                        bias, act));
  } else if (L->o.combine == NG_SAGE_SUM) { /* the self product, then the neighbours' added */
    NG_CHECK(layer_gemm(ex, "gemm fwd", l, false, false, nd, outd, in, h_in, in, P + L->off_w_self,
                        outd, 0.0f, out, outd));
    NG_CHECK(dense_gemm(ex, l, fused, nd, outd, in, agg, in, P + L->off_w, outd, 1.0f, out, outd,
                        bias, act));
  } else { /* CONCAT: the self half, then the neighbour half, side by side, each its bias half */
    int64_t c = L->cols;
    NG_CHECK(dense_gemm(ex, l, fused, nd, c, in, h_in, in, P + L->off_w_self, c, 0.0f, out, outd,
                        bias, act));
    NG_CHECK(dense_gemm(ex, l, fused, nd, c, in, agg, in, P + L->off_w, c, 0.0f, out + c, outd,
                        bias ? bias + c : NULL, act));
  }
  if (!fused)
    NG_CHECK(bias_act(ex, l, out, bias, nd, outd, act));
  return NG_OK;
}

/* out = combine(h_dst, agg) + bias, then the activation; `agg` is computed from h_in unless the
 * caller gives it (precomputed). Layer `l` names the timed ops. */
static ng_status layer_forward(ng_model_exec *ex, int l, const ng_layer *L, const ng_block *b,
                               const float *h_in, float *agg, int32_t *argbest, bool precomputed,
                               float *out) {
  int64_t in = L->in_dim, nd = b->n_dst;
  if (!precomputed)
    NG_PROF_OP(ex->prof, "aggr fwd", l, (double)b->nnz * (double)in, aggr_bytes(b, in, nd),
               BE(ex)->aggr_fwd(ex->be, &L->ag, b, h_in, in, agg, argbest));
  return layer_dense(ex, l, L, nd, h_in, agg, out);
}

static ng_status forward_layers(ng_model_exec *ex, const ng_minibatch *mb, int first, bool training,
                                uint64_t seed);

ng_status ng__exec_forward(ng_model_exec *ex, const ng_minibatch *mb, const float *agg0,
                           const float *self0, bool training, uint64_t seed) {
  const struct ng_model *m = ex->model;
  if (mb->n_layers != ng__model_block(m, m->n_layers))
    return ng__err(NG_ERR_INTERNAL, "mini-batch has %d blocks for a %d-layer model", mb->n_layers,
                   m->n_layers);
  NG_CHECK(prepare_ws(ex, mb, agg0, self0, training));
  return forward_layers(ex, mb, 0, training, seed);
}

ng_status ng__exec_prepare_upper(ng_model_exec *ex, const ng_minibatch *mb) {
  const struct ng_model *m = ex->model;
  if (mb->n_layers != ng__model_block(m, m->n_layers))
    return ng__err(NG_ERR_INTERNAL, "mini-batch has %d blocks for a %d-layer model", mb->n_layers,
                   m->n_layers);
  return prepare_ws(ex, mb, NULL, NULL, false);
}

ng_status ng__exec_forward_upper(ng_model_exec *ex, const ng_minibatch *mb) {
  return forward_layers(ex, mb, 1, false, 0);
}

/* Layers `first` .. of the forward pass over a prepared workspace. */
static ng_status forward_layers(ng_model_exec *ex, const ng_minibatch *mb, int first, bool training,
                                uint64_t seed) {
  const struct ng_model *m = ex->model;
  for (int l = first; l < m->n_layers; l++) {
    const ng_layer *L = &m->layers[l];
    const ng_block *b = &mb->blocks[ng__model_block(m, l)];
    ng_layer_ws *w = &ex->ws[l];
    if (w->mask) {
      int64_t n = (int64_t)b->n_src * L->in_dim;
      NG_PROF_OP(ex->prof, "dropout fwd", l, 0, 3.0 * sizeof(float) * (double)n,
                 BE(ex)->copy_d2d(ex->be, w->h_in, w->input, (size_t)n * sizeof(float)));
      NG_PROF_OP(ex->prof, "dropout fwd", l, (double)n, 2.25 * sizeof(float) * (double)n,
                 BE(ex)->dropout_fwd(ex->be, w->h_in, w->mask, n, L->o.dropout,
                                     ng_hash2(seed, (uint64_t)l)));
    }
    if (m->kind == NG_MODEL_SAGE_POOL) {
      NG_CHECK(pool_forward(ex, l, L, b, w->h_in, w->pre, w->agg, w->argbest, w->out));
      continue;
    }
    if (m->kind == NG_MODEL_GIN) {
      NG_CHECK(
          gin_forward(ex, l, L, b, w->h_in, w->agg, l == 0, w->self_w, w->pre, w->hid, w->out));
      continue;
    }
    if (m->kind == NG_MODEL_GAT) {
      const ng_attn at = layer_attn(L, l, training, seed);
      NG_CHECK(gat_forward(ex, l, L, b, w->h_in, w->z, w->alpha, &at, w->out));
      ex->attn_key[l] = at.drop_key;
      continue;
    }
    NG_CHECK(layer_forward(ex, l, L, b, w->h_in, w->agg, w->argbest, l == 0, w->out));
  }
  ex->training = training;
  return NG_OK;
}

uint64_t ng__exec_input_drop_key(uint64_t seed) {
  return ng_mix64(ng_hash2(seed, 0));
}

/* A user aggregator's backward (aggr_user_bwd), which the backend may lack (the CUDA backend
 * without NVRTC). */
static ng_status aggr_user_bwd(ng_model_exec *ex, const ng_layer *L, const ng_block *b,
                               ng_layer_ws *w, int64_t in) {
  if (!BE(ex)->aggr_user_bwd)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "aggregator \"%s\": the %s backend cannot run user aggregators' backward",
                   L->ag.user->name, BE(ex)->name);
  return BE(ex)->aggr_user_bwd(ex->be, &L->ag, b, w->h_in, w->d_agg, in, w->u_work, w->d_in);
}

/* The weight gradients of GraphSAGE or GCN layer `l`, W = input^T d_out for each half, on the
 * backend's side queue when `side` (backend_impl.h, side_begin): they only write the layer's
 * gradients, which nothing reads before the optimizer step, and only read what the rest of the
 * backward leaves alone (the layer's inputs and d_out), so they overlap the input gradient's
 * chain below them. Above the input layer these products have few output tiles (W4's layer 1:
 * a 512 x 256 result over 5 k rows, 0.19 ms at 15 TFLOP/s, where the chain beside it takes
 * 0.4 ms). The side queue is closed on every return. */
static ng_status weight_grads(ng_model_exec *ex, int l, const ng_layer *L, bool side, int64_t nd,
                              const ng_layer_ws *w, const float *d_out, const float *d_neigh) {
  const struct ng_model *m = ex->model;
  float *G = ex->grads;
  const int64_t in = L->in_dim, outd = L->out_dim, c = L->cols;
  if (side)
    NG_CHECK(BE(ex)->side_begin(ex->be));
  ng_status st = layer_gemm(ex, "gemm bwd w", l, true, false, in, c, nd, w->agg, in, d_neigh, outd,
                            0.0f, G + L->off_w, c);
  if (st == NG_OK && m->kind == NG_MODEL_SAGE)
    st = layer_gemm(ex, "gemm bwd w", l, true, false, in, c, nd, w->h_in, in, d_out, outd, 0.0f,
                    G + L->off_w_self, c);
  const ng_status e = side ? BE(ex)->side_end(ex->be) : NG_OK;
  NG_CHECK(st);
  return e;
}

static ng_status backward_layers(ng_model_exec *ex, const ng_minibatch *mb, float *d_logits);

ng_status ng__exec_backward(ng_model_exec *ex, const ng_minibatch *mb, float *d_logits) {
  const ng_status st = backward_layers(ex, mb, d_logits);
  /* Whatever went to the side queue is joined before the optimizer reads the gradients, even
   * after a failure (the next iteration's forward must not overtake it); with nothing queued
   * there the join does nothing. */
  const ng_status j = BE(ex)->side_join ? BE(ex)->side_join(ex->be) : NG_OK;
  NG_CHECK(st);
  return j;
}

static ng_status backward_layers(ng_model_exec *ex, const ng_minibatch *mb, float *d_logits) {
  const struct ng_model *m = ex->model;
  ng_backend *be = ex->be;
  const float *P = ex->params;
  float *G = ex->grads;
  float *d_out = d_logits;
  /* The side queue, unless the ops are being timed (their events are on the main queue). */
  const bool side_ok = BE(ex)->side_begin && !(ex->prof && ex->prof->active);
  for (int l = m->n_layers - 1; l >= 0; l--) {
    const ng_layer *L = &m->layers[l];
    const ng_block *b = &mb->blocks[ng__model_block(m, l)];
    ng_layer_ws *w = &ex->ws[l];
    int64_t in = L->in_dim, outd = L->out_dim, nd = b->n_dst, ns = b->n_src, c = L->cols;
    const double cells = (double)(nd * outd), relu = L->o.activation == NG_ACT_RELU;
    NG_PROF_OP(ex->prof, "bias act bwd", l, cells, (1.0 + 2.0 * relu) * sizeof(float) * cells,
               BE(ex)->bias_act_bwd(be, d_out, w->out, L->off_b >= 0 ? G + L->off_b : NULL, nd,
                                    outd, L->o.activation));
    if (m->kind == NG_MODEL_SAGE_POOL) {
      int64_t pd = L->pre_dim;
      bool concat = L->o.combine == NG_SAGE_CONCAT;
      const float *d_neigh = concat ? d_out + c : d_out;
      NG_CHECK(layer_gemm(ex, "gemm bwd w", l, true, false, pd, c, nd, w->agg, pd, d_neigh, outd,
                          0.0f, G + L->off_w, c));
      NG_CHECK(layer_gemm(ex, "gemm bwd w", l, true, false, in, c, nd, w->h_in, in, d_out, outd,
                          0.0f, G + L->off_w_self, c));
      NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, nd, pd, c, d_neigh, outd, P + L->off_w,
                          c, 0.0f, w->d_agg, pd));
      NG_PROF_OP(ex->prof, "aggr bwd", l, (double)b->nnz * (double)pd, aggr_bytes(b, pd, ns),
                 BE(ex)->aggr_bwd(be, &L->ag, b, w->d_agg, w->argbest, pd, w->d_pre));
      NG_PROF_OP(ex->prof, "bias act bwd", l, (double)(ns * pd),
                 3.0 * sizeof(float) * (double)(ns * pd),
                 BE(ex)->bias_act_bwd(be, w->d_pre, w->pre, G + L->off_b_pre, ns, pd, NG_ACT_RELU));
      NG_CHECK(layer_gemm(ex, "gemm bwd w", l, true, false, in, pd, ns, w->h_in, in, w->d_pre, pd,
                          0.0f, G + L->off_w_pre, pd));
      if (l == 0)
        break;
      NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, ns, in, pd, w->d_pre, pd,
                          P + L->off_w_pre, pd, 0.0f, w->d_in, in));
      NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, nd, in, c, d_out, outd,
                          P + L->off_w_self, c, 1.0f, w->d_in, in));
      if (w->mask)
        NG_PROF_OP(ex->prof, "dropout bwd", l, (double)(ns * in),
                   2.25 * sizeof(float) * (double)(ns * in),
                   BE(ex)->dropout_bwd(be, w->d_in, w->mask, ns * in, L->o.dropout));
      d_out = w->d_in;
      continue;
    }
    if (m->kind == NG_MODEL_GIN) {
      int64_t pd = L->pre_dim;
      NG_CHECK(layer_gemm(ex, "gemm bwd w", l, true, false, pd, outd, nd, w->hid, pd, d_out, outd,
                          0.0f, G + L->off_w, outd));
      NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, nd, pd, outd, d_out, outd, P + L->off_w,
                          outd, 0.0f, w->d_hid, pd));
      NG_PROF_OP(ex->prof, "bias act bwd", l, (double)(nd * pd),
                 3.0 * sizeof(float) * (double)(nd * pd),
                 BE(ex)->bias_act_bwd(be, w->d_hid, w->hid, G + L->off_b_pre, nd, pd, NG_ACT_RELU));
      NG_CHECK(layer_gemm(ex, "gemm bwd w", l, true, false, in, pd, nd, w->pre, in, w->d_hid, pd,
                          0.0f, G + L->off_w_pre, pd));
      if (l == 0)
        break;
      NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, nd, in, pd, w->d_hid, pd,
                          P + L->off_w_pre, pd, 0.0f, w->d_pre, in));
      NG_PROF_OP(ex->prof, "aggr bwd", l, (double)b->nnz * (double)in, aggr_bytes(b, in, ns),
                 BE(ex)->aggr_bwd(be, &L->ag, b, w->d_pre, NULL, in, w->d_in));
      if (nd > 0) /* the self row's share: d_in[d] += (1 + eps) d_pre[d] */
        NG_CHECK(BE(ex)->add_self_loop(be, w->d_in, w->self_w, w->d_pre, nd, in));
      if (w->mask)
        NG_PROF_OP(ex->prof, "dropout bwd", l, (double)(ns * in),
                   2.25 * sizeof(float) * (double)(ns * in),
                   BE(ex)->dropout_bwd(be, w->d_in, w->mask, ns * in, L->o.dropout));
      d_out = w->d_in;
      continue;
    }
    if (m->kind == NG_MODEL_GAT) {
      if (!w->d_z)
        return ng__err(NG_ERR_STATE, "GAT backward without a training forward pass");
      ng_attn at = layer_attn(L, l, ex->training, 0);
      at.drop_key = ex->attn_key[l];
      NG_PROF_OP(ex->prof, "attn bwd", l, 8.0 * (double)(b->nnz + nd) * (double)c,
                 2.0 * aggr_bytes(b, c, ns),
                 BE(ex)->attn_bwd(be, &at, b, w->z, P + L->off_att_src, P + L->off_att_dst,
                                  w->alpha, d_out, w->attn_work, w->d_z, G + L->off_att_src,
                                  G + L->off_att_dst));
      NG_CHECK(layer_gemm(ex, "gemm bwd w", l, true, false, in, c, ns, w->h_in, in, w->d_z, c, 0.0f,
                          G + L->off_w, c));
      if (l == 0)
        break;
      NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, ns, in, c, w->d_z, c, P + L->off_w, c,
                          0.0f, w->d_in, in));
      if (w->mask)
        NG_PROF_OP(ex->prof, "dropout bwd", l, (double)(ns * in),
                   2.25 * sizeof(float) * (double)(ns * in),
                   BE(ex)->dropout_bwd(be, w->d_in, w->mask, ns * in, L->o.dropout));
      d_out = w->d_in;
      continue;
    }
    /* Weight gradients: W += input^T d_out for each half; above the input layer on the side
     * queue (weight_grads), beside the input gradient's chain. */
    bool concat = m->kind == NG_MODEL_SAGE && L->o.combine == NG_SAGE_CONCAT;
    const float *d_neigh = concat ? d_out + c : d_out;
    NG_CHECK(weight_grads(ex, l, L, l > 0 && side_ok, nd, w, d_out, d_neigh));
    if (l == 0)
      break; /* the features need no gradient */
    /* Input gradient: through the aggregation, plus the self path for GraphSAGE. */
    NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, nd, in, c, d_neigh, outd, P + L->off_w, c,
                        0.0f, w->d_agg, in));
    if (L->ag.user)
      NG_PROF_OP(ex->prof, "aggr bwd", l, (double)b->nnz * (double)in, 2.0 * aggr_bytes(b, in, ns),
                 aggr_user_bwd(ex, L, b, w, in));
    else
      NG_PROF_OP(ex->prof, "aggr bwd", l, (double)b->nnz * (double)in, aggr_bytes(b, in, ns),
                 BE(ex)->aggr_bwd(be, &L->ag, b, w->d_agg, w->argbest, in, w->d_in));
    if (m->kind == NG_MODEL_SAGE)
      NG_CHECK(layer_gemm(ex, "gemm bwd x", l, false, true, nd, in, c, d_out, outd,
                          P + L->off_w_self, c, 1.0f, w->d_in, in));
    if (w->mask)
      NG_PROF_OP(ex->prof, "dropout bwd", l, (double)(ns * in),
                 2.25 * sizeof(float) * (double)(ns * in),
                 BE(ex)->dropout_bwd(be, w->d_in, w->mask, ns * in, L->o.dropout));
    d_out = w->d_in;
  }
  return NG_OK;
}

ng_status ng__exec_step(ng_model_exec *ex, const ng_opt_hp *hp) {
  const struct ng_model *m = ex->model;
  for (int l = 0; l < m->n_layers; l++) {
    const ng_layer *L = &m->layers[l];
    int64_t begin = l ? m->layers[l - 1].off_end : 0, n = L->off_end - begin;
    ng_opt_hp h = *hp;
    h.weight_decay = L->o.weight_decay;
    /* Adam reads parameters, gradients and both moments and writes three of them back. */
    NG_PROF_OP(ex->prof, "optimizer", l, 10.0 * (double)n, 7.0 * sizeof(float) * (double)n,
               BE(ex)->opt_step(ex->be, &h, ex->params + begin, ex->grads + begin,
                                ex->state1 + begin, ex->state2 + begin, n));
  }
  return NG_OK;
}

/* Evaluation's dense part in tiles of NG_EVAL_TILE_ROWS destinations, the last one padded with
 * zero rows: every product has the same shape, so a row's bits do not depend on how many rows
 * a call has (oneDNN and cuBLAS pick their blocking, and thus the order of the inner sums, by
 * shape). Layer-wise inference of a chunk and the forward pass of one node alone then agree bit
 * for bit. */
static void eval_carve(carve *c, const ng_layer *L, int64_t nd, float **agg, int32_t **argbest,
                       float **pad_self, float **pad_agg, float **pad_out) {
  const size_t cells = (size_t)nd * (size_t)L->in_dim;
  const size_t tile_in = (size_t)NG_EVAL_TILE_ROWS * (size_t)L->in_dim;
  *agg = take(c, cells * sizeof(float));
  *argbest = needs_argbest(L) ? take(c, cells * sizeof(int32_t)) : NULL;
  *pad_self = take(c, tile_in * sizeof(float));
  *pad_agg = take(c, tile_in * sizeof(float));
  *pad_out = take(c, (size_t)NG_EVAL_TILE_ROWS * (size_t)L->out_dim * sizeof(float));
}

ng_status ng__exec_layer_eval(ng_model_exec *ex, int l, const ng_block *blk, const float *input,
                              float *out) {
  return ng__exec_layer_eval_self(ex, l, blk, input, input, out);
}

ng_status ng__exec_layer_eval_self(ng_model_exec *ex, int l, const ng_block *blk,
                                   const float *input, const float *self, float *out) {
  const ng_layer *L = &ex->model->layers[l];
  const int64_t in = L->in_dim, outd = L->out_dim, nd = blk->n_dst, T = NG_EVAL_TILE_ROWS;
  carve c = {NULL, 0};
  if (ex->model->kind == NG_MODEL_SAGE_POOL || ex->model->kind == NG_MODEL_GIN) {
    const bool pool = ex->model->kind == NG_MODEL_SAGE_POOL;
    const size_t d = (size_t)blk->n_dst, s = (size_t)blk->n_src, k = (size_t)L->in_dim;
    const size_t pd = (size_t)L->pre_dim;
    const size_t sizes[] = {
        (pool ? s : d) * (pool ? pd : k) * sizeof(float),    /* pre */
        d * (pool ? pd : k) * sizeof(float),                 /* agg */
        pool ? d * pd * sizeof(int32_t) : d * sizeof(float), /* argbest / self_w */
        pool ? 0 : d * pd * sizeof(float),                   /* hid */
    };
    for (size_t i = 0; i < 4; i++)
      take(&c, sizes[i]);
    NG_CHECK(arena_reserve(ex, c.used));
    c.base = ex->arena;
    c.used = 0;
    void *p[4];
    for (size_t i = 0; i < 4; i++)
      p[i] = take(&c, sizes[i]);
    if (pool)
      return pool_forward(ex, l, L, blk, input, p[0], p[1], p[2], out);
    return gin_forward(ex, l, L, blk, input, p[1], false, p[2], p[0], p[3], out);
  }
  if (ex->model->kind == NG_MODEL_GAT) {
    size_t zb = (size_t)blk->n_src * (size_t)L->cols * sizeof(float);
    size_t ab = (size_t)(blk->nnz + blk->n_dst) * (size_t)L->heads * sizeof(float);
    take(&c, zb);
    take(&c, ab);
    NG_CHECK(arena_reserve(ex, c.used));
    c.base = ex->arena;
    c.used = 0;
    float *z = take(&c, zb), *alpha = take(&c, ab);
    const ng_attn at = layer_attn(L, l, false, 0);
    return gat_forward(ex, l, L, blk, input, z, alpha, &at, out);
  }
  float *agg, *pad_self, *pad_agg, *pad_out;
  int32_t *argbest;
  eval_carve(&c, L, nd, &agg, &argbest, &pad_self, &pad_agg, &pad_out);
  NG_CHECK(arena_reserve(ex, c.used));
  c.base = ex->arena;
  c.used = 0;
  eval_carve(&c, L, nd, &agg, &argbest, &pad_self, &pad_agg, &pad_out);
  NG_PROF_OP(ex->prof, "aggr fwd", l, (double)blk->nnz * (double)in, aggr_bytes(blk, in, nd),
             BE(ex)->aggr_fwd(ex->be, &L->ag, blk, input, in, agg, argbest));
  for (int64_t r0 = 0; r0 < nd; r0 += T) {
    const int64_t len = NG_MIN(T, nd - r0);
    if (len == T) {
      NG_CHECK(layer_dense(ex, l, L, T, self + r0 * in, agg + r0 * in, out + r0 * outd));
      continue;
    }
    const size_t rows_in = (size_t)len * (size_t)in * sizeof(float);
    NG_CHECK(BE(ex)->fill(ex->be, pad_self, T * in, 0.0f));
    NG_CHECK(BE(ex)->fill(ex->be, pad_agg, T * in, 0.0f));
    NG_CHECK(BE(ex)->copy_d2d(ex->be, pad_self, self + r0 * in, rows_in));
    NG_CHECK(BE(ex)->copy_d2d(ex->be, pad_agg, agg + r0 * in, rows_in));
    NG_CHECK(layer_dense(ex, l, L, T, pad_self, pad_agg, pad_out));
    NG_CHECK(BE(ex)->copy_d2d(ex->be, out + r0 * outd, pad_out,
                              (size_t)len * (size_t)outd * sizeof(float)));
  }
  return NG_OK;
}

int ng__model_gemm_shapes(const struct ng_model *m, const int64_t *rows, ng_gemm_shape *out,
                          int cap) {
  int n = 0;
  for (int l = 0; l < m->n_layers; l++) {
    const ng_layer *L = &m->layers[l];
    const int64_t r = rows[l], in = L->in_dim, c = L->cols;
    const ng_gemm_shape s[3] = {
        {false, false, r, c, in}, /* forward: [r, in] x [in, c] */
        {true, false, in, c, r},  /* weight gradient: [r, in]^T x [r, c] */
        {false, true, r, in, c},  /* input gradient: [r, c] x [in, c]^T */
    };
    for (int i = 0; i < 3 && n < cap; i++)
      out[n++] = s[i];
  }
  return n;
}

ng_status ng_model_kind_get(ng_model_kind *kind, int64_t *in_dim, ng_model_t m) {
  NG_CHECK(ng__model_check(m));
  if (kind)
    *kind = m->kind;
  if (in_dim)
    *in_dim = m->in_dim;
  return NG_OK;
}

ng_status ng_model_layer_get(ng_layer_opts *out, ng_model_t m, int32_t layer) {
  NG_CHECK(ng__model_check(m));
  if (!out || out->size < sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_model_layer_get: out missing or from an older header (NG_LAYER_OPTS_INIT)");
  if (layer < 0 || layer >= m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG, "ng_model_layer_get: layer %d of a model of %d layers",
                   (int)layer, m->n_layers);
  *out = m->layers[layer].o;
  return NG_OK;
}
