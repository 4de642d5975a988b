/* R-GCN and R-SAGE over heterogeneous mini-batches (models/rgcn_impl.h). */
#include "rgcn_impl.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BE(ex) ((ex)->be->iface)

void ng__rgcn_free(ng_rgcn *m) {
  if (!m)
    return;
  free(m->rel_src);
  free(m->rel_dst);
  free(m->count);
  free(m->in0);
  free(m->off_emb);
  free(m->need);
  free(m->in_dim);
  free(m->out_dim);
  free(m->off_self);
  free(m->off_b);
  free(m->off_w);
  free(m->off_root);
  free(m->off_rbias);
  free(m->grp_in);
  free(m->grp_out);
  free(m->grp_slots);
  free(m->grp_basis);
  free(m->grp_coef);
  free(m->grp_derived);
  free(m->head_dim);
  free(m->off_att);
  memset(m, 0, sizeof *m);
}

static int64_t take_params(int64_t *n, int64_t floats) {
  const int64_t at = *n;
  *n += floats;
  return at;
}

/* A weight of a layer waiting for its place among the derived weights (basis decomposition). */
typedef struct {
  int64_t *off;
  int64_t floats;
  bool taken;
} weight_slot;

/* A weight of `floats` floats: a parameter of its own, or with bases a derived weight whose
 * offset the layer's grouping fills in later (-1 until then). */
static int64_t take_weight(const ng_rgcn *m, weight_slot *slots, int32_t *n_slots, int64_t *off,
                           int64_t *n, int64_t floats) {
  if (m->bases == 0)
    return take_params(n, floats);
  slots[(*n_slots)++] = (weight_slot){off, floats, false};
  return -1;
}

ng_status ng__rgcn_init(ng_rgcn *m, const ng_rgcn_spec *s) {
  memset(m, 0, sizeof *m);
  if (s->n_types < 1 || s->n_rels < 1 || s->n_layers < 1 || s->n_layers > NG_MAX_LAYERS ||
      s->target < 0 || s->target >= s->n_types || s->classes < 1 || s->hidden < 1 ||
      s->embed_dim < 0 || s->bases < 0 || s->bases > NG_RGCN_MAX_BASES ||
      (s->kind != NG_HETERO_MODEL_RGCN && s->kind != NG_HETERO_MODEL_RSAGE &&
       s->kind != NG_HETERO_MODEL_RGAT))
    return ng__err(NG_ERR_INVALID_ARG,
                   "relational model: %d types, %d relations, %d layers (1 to %d), target %d, "
                   "%d classes, hidden %lld, embedding %lld, %d bases (0 to %d): a shape out of "
                   "range",
                   (int)s->n_types, (int)s->n_rels, (int)s->n_layers, NG_MAX_LAYERS, (int)s->target,
                   (int)s->classes, (long long)s->hidden, (long long)s->embed_dim, (int)s->bases,
                   NG_RGCN_MAX_BASES);
  if (s->kind == NG_HETERO_MODEL_RGAT &&
      (s->heads < 1 || s->heads > NG_RGCN_MAX_HEADS || s->bases != 0 ||
       (s->n_layers > 1 && s->hidden % s->heads != 0)))
    return ng__err(NG_ERR_INVALID_ARG,
                   "R-GAT: %d heads (1 to %d) with hidden %lld and %d bases: the hidden layers "
                   "concatenate the heads, so hidden must be a multiple of heads; the basis "
                   "decomposition is R-GCN's and R-SAGE's",
                   (int)s->heads, NG_RGCN_MAX_HEADS, (long long)s->hidden, (int)s->bases);
  for (int32_t r = 0; r < s->n_rels; r++)
    if (s->rel_src[r] < 0 || s->rel_src[r] >= s->n_types || s->rel_dst[r] < 0 ||
        s->rel_dst[r] >= s->n_types)
      return ng__err(NG_ERR_INVALID_ARG, "relational model: relation %d names a type out of range",
                     (int)r);
  const int32_t T = s->n_types, R = s->n_rels, L = s->n_layers;
  m->magic = NG_RGCN_MAGIC;
  m->kind = s->kind;
  m->T = T;
  m->R = R;
  m->L = L;
  m->target = s->target;
  m->classes = s->classes;
  m->bases = s->bases;
  m->heads = s->kind == NG_HETERO_MODEL_RGAT ? s->heads : 1;
  const size_t t = (size_t)T, r = (size_t)R, l = (size_t)L;
  m->rel_src = ng__calloc(r, sizeof(int32_t), "the model's relations");
  m->rel_dst = ng__calloc(r, sizeof(int32_t), "the model's relations");
  m->count = ng__calloc(t, sizeof(int64_t), "the model's types");
  m->in0 = ng__calloc(t, sizeof(int64_t), "the model's types");
  m->off_emb = ng__calloc(t, sizeof(int64_t), "the model's types");
  m->need = ng__calloc((l + 1) * t, sizeof(bool), "the model's types");
  m->in_dim = ng__calloc(l * t, sizeof(int64_t), "the model's layers");
  m->out_dim = ng__calloc(l, sizeof(int64_t), "the model's layers");
  m->off_self = ng__calloc(l * t, sizeof(int64_t), "the model's layers");
  m->off_b = ng__calloc(l * t, sizeof(int64_t), "the model's layers");
  m->off_w = ng__calloc(l * r, sizeof(int64_t), "the model's layers");
  m->off_root = ng__calloc(l * r, sizeof(int64_t), "the model's layers");
  m->off_rbias = ng__calloc(l * r, sizeof(int64_t), "the model's layers");
  /* At most one group per weight of a layer: T self terms, R relation weights, R roots. */
  const size_t max_slots = t + 2 * r, max_groups = l * max_slots;
  m->grp_in = ng__calloc(max_groups, sizeof(int64_t), "the model's bases");
  m->grp_out = ng__calloc(max_groups, sizeof(int64_t), "the model's bases");
  m->grp_slots = ng__calloc(max_groups, sizeof(int32_t), "the model's bases");
  m->grp_basis = ng__calloc(max_groups, sizeof(int64_t), "the model's bases");
  m->grp_coef = ng__calloc(max_groups, sizeof(int64_t), "the model's bases");
  m->grp_derived = ng__calloc(max_groups, sizeof(int64_t), "the model's bases");
  m->head_dim = ng__calloc(l, sizeof(int64_t), "the model's layers");
  m->off_att = ng__calloc(l * r, sizeof(int64_t), "the model's layers");
  weight_slot *slots = ng__calloc(max_slots, sizeof *slots, "the model's bases");
  if (!slots || !m->head_dim || !m->off_att || !m->grp_in || !m->grp_out || !m->grp_slots ||
      !m->grp_basis || !m->grp_coef || !m->grp_derived || !m->rel_src || !m->rel_dst || !m->count ||
      !m->in0 || !m->off_emb || !m->need || !m->in_dim || !m->out_dim || !m->off_self ||
      !m->off_b || !m->off_w || !m->off_root || !m->off_rbias) {
    free(slots);
    ng__rgcn_free(m);
    return NG_ERR_NOMEM;
  }
  memcpy(m->rel_src, s->rel_src, r * sizeof(int32_t));
  memcpy(m->rel_dst, s->rel_dst, r * sizeof(int32_t));
  memcpy(m->count, s->count, t * sizeof(int64_t));
  /* Live types, from the top: the last layer computes the target only; a layer below computes
   * what the layer above reads: its live types (their self terms) and the sources of the
   * relations into them. */
  m->need[(size_t)L * t + (size_t)s->target] = true;
  for (int32_t k = L - 1; k >= 0; k--) {
    bool *below = m->need + (size_t)k * t;
    const bool *above = m->need + (size_t)(k + 1) * t;
    for (int32_t ty = 0; ty < T; ty++)
      below[ty] = above[ty];
    for (int32_t q = 0; q < R; q++)
      if (above[s->rel_dst[q]])
        below[s->rel_src[q]] = true;
  }
  const int64_t embed = s->embed_dim > 0 ? s->embed_dim : s->hidden;
  int64_t n = 0;
  for (int32_t ty = 0; ty < T; ty++) {
    m->in0[ty] = s->feat_dim[ty] > 0 ? s->feat_dim[ty] : embed;
    m->off_emb[ty] =
        m->need[ty] && s->feat_dim[ty] == 0 ? take_params(&n, s->count[ty] * m->in0[ty]) : -1;
  }
  m->n_embed = n;
  for (int32_t k = 0; k < L; k++) {
    const int64_t out = k == L - 1 ? s->classes : s->hidden;
    int32_t n_slots = 0;
    m->out_dim[k] = out;
    m->head_dim[k] = m->kind != NG_HETERO_MODEL_RGAT ? out : k == L - 1 ? out : out / m->heads;
    const int64_t zw = m->kind == NG_HETERO_MODEL_RGAT ? m->heads * m->head_dim[k] : out;
    for (int32_t ty = 0; ty < T; ty++)
      m->in_dim[k * T + ty] = k == 0 ? m->in0[ty] : s->hidden;
    for (int32_t ty = 0; ty < T; ty++) {
      const size_t i = (size_t)k * t + (size_t)ty;
      m->off_self[i] = m->off_b[i] = -1;
      if (!m->need[(size_t)(k + 1) * t + (size_t)ty])
        continue;
      bool has_rel = false;
      for (int32_t q = 0; q < R; q++)
        has_rel |= s->rel_dst[q] == ty;
      if (m->kind == NG_HETERO_MODEL_RGCN || !has_rel) {
        m->off_self[i] = take_weight(m, slots, &n_slots, &m->off_self[i], &n, m->in_dim[i] * out);
        m->off_b[i] = take_params(&n, out);
      }
    }
    for (int32_t q = 0; q < R; q++) {
      const size_t i = (size_t)k * r + (size_t)q;
      m->off_w[i] = m->off_root[i] = m->off_rbias[i] = m->off_att[i] = -1;
      if (!ng__rgcn_rel_used(m, k, q))
        continue;
      m->off_w[i] =
          take_weight(m, slots, &n_slots, &m->off_w[i], &n, m->in_dim[k * T + s->rel_src[q]] * zw);
      if (m->kind == NG_HETERO_MODEL_RGAT) { /* never with bases */
        m->off_root[i] = take_params(&n, m->in_dim[k * T + s->rel_dst[q]] * zw);
        m->off_att[i] = take_params(&n, 2 * zw);
        m->off_rbias[i] = take_params(&n, out);
      }
      if (m->kind == NG_HETERO_MODEL_RSAGE) {
        m->off_root[i] = take_weight(m, slots, &n_slots, &m->off_root[i], &n,
                                     m->in_dim[k * T + s->rel_dst[q]] * out);
        m->off_rbias[i] = take_params(&n, out);
      }
    }
    /* With bases, the layer's weights of one input width form a group: consecutive in the
     * derived weights (so that one gemm computes them all), their bases and coefficients in the
     * parameters. Groups in the order of their first weight. */
    for (int32_t j = 0; j < n_slots; j++) {
      if (slots[j].taken)
        continue;
      const int64_t in = slots[j].floats / out;
      const int32_t g = m->n_groups++;
      m->grp_in[g] = in;
      m->grp_out[g] = out;
      m->grp_derived[g] = m->n_derived;
      for (int32_t q = j; q < n_slots; q++)
        if (!slots[q].taken && slots[q].floats == slots[j].floats) {
          slots[q].taken = true;
          *slots[q].off = m->n_derived;
          m->n_derived += in * out;
          m->grp_slots[g]++;
        }
      m->grp_basis[g] = take_params(&n, (int64_t)m->bases * in * out);
      m->grp_coef[g] = take_params(&n, (int64_t)m->grp_slots[g] * m->bases);
    }
  }
  free(slots);
  m->n_params = n;
  return NG_OK;
}

/* Uniform in (-limit, limit) from the stream of tensor `which`. */
static void uniform_fill(float *w, int64_t n, double limit, uint64_t seed, uint64_t which) {
  ng_rng rng;
  ng_rng_seed(&rng, ng_hash3(seed, 0x72676e69 /* "rgni" */, which));
  for (int64_t j = 0; j < n; j++)
    w[j] = (float)((2.0 * ng_rng_uniform(&rng) - 1.0) * limit);
}

void ng__rgcn_init_params(const ng_rgcn *m, float *params, uint64_t seed) {
  memset(params, 0, (size_t)m->n_params * sizeof *params);
  const int32_t T = m->T, R = m->R;
  uint64_t which = 0;
  /* Embeddings: variance 1 / columns per element, so a row's norm is about 1, as a row of
   * normalised features. */
  for (int32_t t = 0; t < T; t++)
    if (m->off_emb[t] >= 0)
      uniform_fill(params + m->off_emb[t], m->count[t] * m->in0[t], sqrt(3.0 / (double)m->in0[t]),
                   seed, which++);
  if (m->bases > 0) {
    /* Each basis as a weight of its shape (Glorot & Bengio). Every coefficient starts at
     * 1 / sqrt(bases), so that each derived weight starts with a basis's variance; they start
     * equal within a group and part as their gradients differ (random coefficients near 0
     * left some weights stuck in training). */
    for (int32_t g = 0; g < m->n_groups; g++) {
      const int64_t in = m->grp_in[g], out = m->grp_out[g];
      for (int32_t k = 0; k < m->bases; k++)
        uniform_fill(params + m->grp_basis[g] + (int64_t)k * in * out, in * out,
                     sqrt(6.0 / (double)(in + out)), seed, which++);
      for (int64_t j = 0; j < (int64_t)m->grp_slots[g] * m->bases; j++)
        params[m->grp_coef[g] + j] = (float)(1.0 / sqrt((double)m->bases));
    }
    return;
  }
  /* Glorot & Bengio's uniform initialisation of each weight, as model.c's; biases stay 0. */
  for (int32_t l = 0; l < m->L; l++) {
    const int64_t out = m->out_dim[l];
    for (int32_t t = 0; t < T; t++) {
      const int64_t in = m->in_dim[l * T + t], off = m->off_self[l * T + t];
      if (off >= 0)
        uniform_fill(params + off, in * out, sqrt(6.0 / (double)(in + out)), seed, which++);
    }
    /* R-GAT's weights map to heads x head_dim columns; its attention vectors are initialised
     * as a weight [head_dim, 1] each. */
    const int64_t zw = m->heads * m->head_dim[l];
    for (int32_t r = 0; r < R; r++) {
      const int64_t in_s = m->in_dim[l * T + m->rel_src[r]];
      const int64_t in_d = m->in_dim[l * T + m->rel_dst[r]];
      if (m->off_w[l * R + r] >= 0)
        uniform_fill(params + m->off_w[l * R + r], in_s * zw, sqrt(6.0 / (double)(in_s + zw)), seed,
                     which++);
      if (m->off_root[l * R + r] >= 0)
        uniform_fill(params + m->off_root[l * R + r], in_d * zw, sqrt(6.0 / (double)(in_d + zw)),
                     seed, which++);
      if (m->off_att[l * R + r] >= 0)
        uniform_fill(params + m->off_att[l * R + r], 2 * zw,
                     sqrt(6.0 / (double)(m->head_dim[l] + 1)), seed, which++);
    }
  }
}

/* ---- execution ---- */

ng_status ng__rgcn_exec_create(ng_rgcn_exec *ex, const ng_rgcn *m, ng_backend *be, uint64_t seed) {
  memset(ex, 0, sizeof *ex);
  if (!be->iface->host_memory)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "relational models run on the CPU backend only (backend %s): the blocks' "
                   "transposes are built in host memory",
                   be->iface->name);
  ex->m = m;
  ex->be = be;
  const size_t t = (size_t)m->T, lt = (size_t)m->L * t, lr = (size_t)m->L * (size_t)m->R;
  ex->h = ng__calloc(lt, sizeof *ex->h, "the model's workspace");
  ex->out = ng__calloc(lt, sizeof *ex->out, "the model's workspace");
  ex->d_out = ng__calloc(lt, sizeof *ex->d_out, "the model's workspace");
  ex->agg = ng__calloc(lr, sizeof *ex->agg, "the model's workspace");
  ex->views = ng__calloc(lr, sizeof *ex->views, "the model's workspace");
  ex->d_h0 = ng__calloc(t, sizeof *ex->d_h0, "the model's workspace");
  ex->mask = ng__calloc(lt, sizeof *ex->mask, "the model's workspace");
  ex->zs = ng__calloc(lr, sizeof *ex->zs, "the model's workspace");
  ex->zd = ng__calloc(lr, sizeof *ex->zd, "the model's workspace");
  ex->score = ng__calloc(lr, sizeof *ex->score, "the model's workspace");
  ex->alpha = ng__calloc(lr, sizeof *ex->alpha, "the model's workspace");
  if (!ex->zs || !ex->zd || !ex->score || !ex->alpha || !ex->mask || !ex->h || !ex->out ||
      !ex->d_out || !ex->agg || !ex->views || !ex->d_h0) {
    ng__rgcn_exec_destroy(ex);
    return NG_ERR_NOMEM;
  }
  const size_t bytes = (size_t)m->n_params * sizeof(float);
  float **bufs[4] = {&ex->params, &ex->grads, &ex->state1, &ex->state2};
  ng_status st = NG_OK;
  for (int i = 0; i < 4 && st == NG_OK; i++) {
    st = BE(ex)->alloc(be, (void **)bufs[i], bytes);
    if (st == NG_OK)
      st = BE(ex)->fill(be, *bufs[i], m->n_params, 0.0f);
  }
  float *host = st == NG_OK ? ng__malloc(bytes, "initial parameters") : NULL;
  if (st == NG_OK && !host)
    st = NG_ERR_NOMEM;
  if (st == NG_OK) {
    ng__rgcn_init_params(m, host, seed);
    st = BE(ex)->copy_h2d(be, ex->params, host, bytes);
  }
  ex->w = ex->params;
  ex->gw = ex->grads;
  if (st == NG_OK && m->n_derived > 0) {
    const size_t dbytes = (size_t)m->n_derived * sizeof(float);
    st = BE(ex)->alloc(be, (void **)&ex->derived, dbytes);
    if (st == NG_OK)
      st = BE(ex)->alloc(be, (void **)&ex->d_derived, dbytes);
    ex->w = ex->derived; /* filled by every forward pass (ng__rgcn_derive) */
    ex->gw = ex->d_derived;
  }
  free(host);
  if (st != NG_OK) {
    ng__err_prefix("the relational model's parameters (%lld floats)", (long long)m->n_params);
    ng__rgcn_exec_destroy(ex);
  }
  return st;
}

void ng__rgcn_exec_destroy(ng_rgcn_exec *ex) {
  if (!ex)
    return;
  if (ex->be) {
    BE(ex)->free(ex->be, ex->params);
    BE(ex)->free(ex->be, ex->grads);
    BE(ex)->free(ex->be, ex->state1);
    BE(ex)->free(ex->be, ex->state2);
    BE(ex)->free(ex->be, ex->arena);
    BE(ex)->free(ex->be, ex->derived);
    BE(ex)->free(ex->be, ex->d_derived);
  }
  free(ex->h);
  free(ex->out);
  free(ex->d_out);
  free(ex->agg);
  free(ex->views);
  free(ex->d_h0);
  free(ex->mask);
  free(ex->zs);
  free(ex->zd);
  free(ex->score);
  free(ex->alpha);
  memset(ex, 0, sizeof *ex);
}

/* A bump allocator over the arena: run once with base NULL to size it, then to carve it. */
typedef struct {
  char *base;
  size_t used;
} carve;

static void *take(carve *c, size_t bytes) {
  const size_t at = (c->used + 63) & ~(size_t)63;
  c->used = at + bytes;
  return c->base ? c->base + at : NULL;
}

#define NODES(b, l, t) ((int64_t)(b)->n_nodes[(size_t)(l) * (size_t)T + (size_t)(t)])

/* The backend ops require a block's destinations to be the first of its sources (n_src >=
 * n_dst); a relation between two types has no such relation, so its view counts max(n_src,
 * n_dst) sources. The forward pass reads only the rows the indices name (all < n_src), and the
 * backward pass writes the view's rows into a scratch of that size, of which the real n_src
 * rows are kept. */
static int32_t view_src(const ng_block *b) {
  return NG_MAX(b->n_src, b->n_dst);
}

/* Lays out a mini-batch's workspace in the arena at `base` (NULL: only sizes it). */
static size_t layout(ng_rgcn_exec *ex, const ng_rgcn_batch *b, char *base) {
  const ng_rgcn *m = ex->m;
  const int32_t T = m->T, R = m->R, L = m->L;
  carve c = {base, 0};
  int64_t max_dagg = 0, max_dsrc = 0, max_rows = 0, max_out = 0, max_zs = 0, max_zd = 0;
  const bool gat = m->kind == NG_HETERO_MODEL_RGAT;
  for (int32_t t = 0; t < T; t++)
    ex->h[t] = m->need[t] ? take(&c, (size_t)(NODES(b, 0, t) * m->in0[t]) * sizeof(float)) : NULL;
  for (int32_t l = 0; l < L; l++) {
    max_out = NG_MAX(max_out, m->out_dim[l]);
    for (int32_t t = 0; t < T; t++) {
      const size_t i = (size_t)l * (size_t)T + (size_t)t;
      ex->out[i] = ex->d_out[i] = NULL;
      if (!m->need[(size_t)(l + 1) * (size_t)T + (size_t)t])
        continue;
      const size_t bytes = (size_t)(NODES(b, l + 1, t) * m->out_dim[l]) * sizeof(float);
      ex->out[i] = take(&c, bytes);
      ex->d_out[i] = take(&c, bytes);
      if (l + 1 < L)
        ex->h[i + (size_t)T] = ex->out[i];
    }
    for (int32_t r = 0; r < R; r++) {
      const size_t i = (size_t)l * (size_t)R + (size_t)r;
      ex->agg[i] = NULL;
      if (!ng__rgcn_rel_used(m, l, r))
        continue;
      const ng_block *blk = &b->blocks[i];
      const int64_t din = m->in_dim[l * T + m->rel_src[r]];
      ex->zs[i] = ex->zd[i] = ex->score[i] = ex->alpha[i] = NULL;
      if (gat) {
        const int64_t zw = m->heads * m->head_dim[l], ns = NODES(b, l, m->rel_src[r]);
        ex->agg[i] = take(&c, (size_t)((int64_t)blk->n_dst * zw) * sizeof(float));
        ex->zs[i] = take(&c, (size_t)(ns * zw) * sizeof(float));
        ex->zd[i] = take(&c, (size_t)((int64_t)blk->n_dst * zw) * sizeof(float));
        ex->score[i] = take(&c, (size_t)(blk->nnz * m->heads) * sizeof(float));
        ex->alpha[i] = take(&c, (size_t)(blk->nnz * m->heads) * sizeof(float));
        max_zs = NG_MAX(max_zs, ns * zw);
        max_zd = NG_MAX(max_zd, (int64_t)blk->n_dst * zw);
      } else
        ex->agg[i] = take(&c, (size_t)((int64_t)blk->n_dst * din) * sizeof(float));
      ng_block *v = &ex->views[i];
      *v = *blk;
      v->edge_w = v->self_w = NULL;
      v->n_src = view_src(blk);
      v->t_indptr = take(&c, ((size_t)v->n_src + 1) * sizeof(int32_t));
      v->t_dst = take(&c, (size_t)blk->nnz * sizeof(int32_t));
      v->t_eid = take(&c, (size_t)blk->nnz * sizeof(int32_t));
      max_dagg = NG_MAX(max_dagg, (int64_t)blk->n_dst * din);
      max_dsrc = NG_MAX(max_dsrc, (int64_t)v->n_src * din);
    }
  }
  for (int32_t t = 0; t < T; t++) {
    ex->d_h0[t] = NULL;
    if (m->off_emb[t] < 0)
      continue;
    ex->d_h0[t] = take(&c, (size_t)(NODES(b, 0, t) * m->in0[t]) * sizeof(float));
    max_rows = NG_MAX(max_rows, NODES(b, 0, t));
  }
  for (int32_t l = 0; l < L; l++)
    for (int32_t t = 0; t < T; t++) {
      const size_t i = (size_t)l * (size_t)T + (size_t)t;
      ex->mask[i] = NULL;
      if (ex->drop_p > 0.0f && m->need[i])
        ex->mask[i] = take(&c, (size_t)(NODES(b, l, t) * m->in_dim[i]));
    }
  ex->colsum = take(&c, (size_t)max_out * sizeof(float));
  ex->tmp_dagg = take(&c, (size_t)max_dagg * sizeof(float));
  ex->tmp_dsrc = take(&c, (size_t)max_dsrc * sizeof(float));
  ex->tmp_dzs = take(&c, (size_t)max_zs * sizeof(float));
  ex->tmp_dzd = take(&c, (size_t)max_zd * sizeof(float));
  ex->tmp_dg = take(&c, (size_t)max_zd * sizeof(float));
  ex->labels = take(&c, (size_t)NODES(b, L, m->target) * sizeof(int32_t));
  ex->iota = take(&c, (size_t)max_rows * sizeof(int64_t));
  ex->pos = take(&c, (size_t)max_rows * sizeof(int32_t));
  return c.used;
}

/* The transpose of a view by a counting sort over sources; scanning edges in order keeps each
 * source's edges in edge order, the order aggr_bwd sums them in. Host memory (exec_create). */
static void fill_transpose(ng_block *v) {
  int32_t *tp = (int32_t *)v->t_indptr, *td = (int32_t *)v->t_dst, *te = (int32_t *)v->t_eid;
  memset(tp, 0, ((size_t)v->n_src + 1) * sizeof *tp);
  for (int64_t e = 0; e < v->nnz; e++)
    tp[v->indices[e] + 1]++;
  for (int32_t s = 0; s < v->n_src; s++)
    tp[s + 1] += tp[s];
  for (int32_t d = 0; d < v->n_dst; d++)
    for (int32_t e = v->indptr[d]; e < v->indptr[d + 1]; e++) {
      const int32_t p = tp[v->indices[e]]++;
      td[p] = d;
      te[p] = e;
    }
  for (int32_t s = v->n_src; s > 0; s--)
    tp[s] = tp[s - 1];
  tp[0] = 0;
}

static const ng_aggr MEAN = {.reduce = NG_REDUCE_SUM, .mean = true};

/* The dropout key of layer l's input rows of type t. */
static uint64_t drop_key(uint64_t seed, int32_t l, int32_t t) {
  return ng_hash3(seed, 0x64726f70 /* "drop" */, ((uint64_t)l << 32) + (uint64_t)t);
}

/* ---- R-GAT: one GAT layer per relation (Velickovic et al. on a bipartite block) ----
 * For relation r = (s -> t) at layer l, with H heads of D columns: z_s = h_s W_r, z_d = h_t[:nd]
 * W_r,dst; for destination v, head k and edge e to source u, score e = a_src . z_s[u, k] +
 * a_dst . z_d[v, k], alpha = softmax over v's edges of LeakyReLU(score) (slope 0.2), and the
 * output g[v, k] = sum_e alpha_e z_s[u, k] (0 for a row without edges). Below the last layer the
 * heads are concatenated (H D = hidden), on it averaged (D = classes). The loops are plain host
 * loops in row, head and edge order, so their bits do not depend on the thread count. */
#define GAT_SLOPE 0.2f

static float dotf(const float *a, const float *b, int64_t n) {
  float s = 0.0f;
  for (int64_t c = 0; c < n; c++)
    s += a[c] * b[c];
  return s;
}

static ng_status gat_fwd(ng_rgcn_exec *ex, const ng_block *blk, int32_t l, size_t j,
                         const float *hs, int64_t ns, int64_t din_s, const float *ht, int64_t din_t,
                         float *o, float beta) {
  const ng_rgcn *m = ex->m;
  const int64_t H = m->heads, D = m->head_dim[l], zw = H * D, dout = m->out_dim[l];
  const int64_t nd = blk->n_dst;
  float *zs = ex->zs[j], *zd = ex->zd[j], *g = ex->agg[j], *sc = ex->score[j], *al = ex->alpha[j];
  if (ns > 0)
    NG_CHECK(BE(ex)->gemm(ex->be, false, false, ns, zw, din_s, 1.0f, hs, din_s, ex->w + m->off_w[j],
                          zw, 0.0f, zs, zw));
  NG_CHECK(BE(ex)->gemm(ex->be, false, false, nd, zw, din_t, 1.0f, ht, din_t,
                        ex->w + m->off_root[j], zw, 0.0f, zd, zw));
  const float *as = ex->params + m->off_att[j], *ad = as + zw;
  for (int64_t v = 0; v < nd; v++) {
    const int32_t e0 = blk->indptr[v], e1 = blk->indptr[v + 1];
    for (int64_t k = 0; k < H; k++) {
      const float sd = dotf(zd + v * zw + k * D, ad + k * D, D);
      float mx = -INFINITY, sum = 0.0f;
      for (int32_t e = e0; e < e1; e++) {
        const float x = dotf(zs + (int64_t)blk->indices[e] * zw + k * D, as + k * D, D) + sd;
        sc[e * H + k] = x;
        al[e * H + k] = x > 0.0f ? x : GAT_SLOPE * x;
        mx = fmaxf(mx, al[e * H + k]);
      }
      for (int32_t e = e0; e < e1; e++) {
        al[e * H + k] = expf(al[e * H + k] - mx);
        sum += al[e * H + k];
      }
      float *gv = g + v * zw + k * D;
      memset(gv, 0, (size_t)D * sizeof *gv);
      for (int32_t e = e0; e < e1; e++) {
        al[e * H + k] /= sum;
        const float *z = zs + (int64_t)blk->indices[e] * zw + k * D;
        for (int64_t c = 0; c < D; c++)
          gv[c] += al[e * H + k] * z[c];
      }
    }
    float *ov = o + v * dout;
    const bool mean = l == m->L - 1;
    for (int64_t c = 0; c < dout; c++) {
      float x = 0.0f;
      if (mean) {
        for (int64_t k = 0; k < H; k++)
          x += g[v * zw + k * D + c];
        x /= (float)H;
      } else
        x = g[v * zw + c];
      ov[c] = beta != 0.0f ? ov[c] + x : x;
    }
  }
  return NG_OK;
}

/* The backward of gat_fwd from d (the layer's output gradient [nd, dout]): the weights' and
 * attention vectors' gradients accumulate, and dh_s, dh_t (either may be NULL) get the input
 * rows' terms added. */
static ng_status gat_bwd(ng_rgcn_exec *ex, const ng_block *blk, int32_t l, size_t j, const float *d,
                         const float *hs, int64_t ns, int64_t din_s, float *dh_s, const float *ht,
                         int64_t din_t, float *dh_t) {
  const ng_rgcn *m = ex->m;
  const int64_t H = m->heads, D = m->head_dim[l], zw = H * D, dout = m->out_dim[l];
  const int64_t nd = blk->n_dst;
  const float *zs = ex->zs[j], *zd = ex->zd[j], *sc = ex->score[j], *al = ex->alpha[j];
  float *dg = ex->tmp_dg, *dzs = ex->tmp_dzs, *dzd = ex->tmp_dzd;
  const bool mean = l == m->L - 1;
  for (int64_t v = 0; v < nd; v++)
    for (int64_t k = 0; k < H; k++)
      for (int64_t c = 0; c < D; c++)
        dg[v * zw + k * D + c] = mean ? d[v * dout + c] / (float)H : d[v * dout + k * D + c];
  memset(dzs, 0, (size_t)(ns * zw) * sizeof *dzs);
  memset(dzd, 0, (size_t)(nd * zw) * sizeof *dzd);
  const float *as = ex->params + m->off_att[j], *ad = as + zw;
  float *gas = ex->grads + m->off_att[j], *gad = gas + zw;
  for (int64_t v = 0; v < nd; v++) {
    const int32_t e0 = blk->indptr[v], e1 = blk->indptr[v + 1];
    for (int64_t k = 0; k < H; k++) {
      const float *dgv = dg + v * zw + k * D;
      float s = 0.0f;
      for (int32_t e = e0; e < e1; e++)
        s += al[e * H + k] * dotf(dgv, zs + (int64_t)blk->indices[e] * zw + k * D, D);
      for (int32_t e = e0; e < e1; e++) {
        const float *z = zs + (int64_t)blk->indices[e] * zw + k * D;
        float *dz = dzs + (int64_t)blk->indices[e] * zw + k * D;
        const float a = al[e * H + k], da = dotf(dgv, z, D);
        const float dpre = a * (da - s) * (sc[e * H + k] > 0.0f ? 1.0f : GAT_SLOPE);
        for (int64_t c = 0; c < D; c++) {
          gas[k * D + c] += dpre * z[c];
          gad[k * D + c] += dpre * zd[v * zw + k * D + c];
          dz[c] += a * dgv[c] + dpre * as[k * D + c];
          dzd[v * zw + k * D + c] += dpre * ad[k * D + c];
        }
      }
    }
  }
  ng_backend *be = ex->be;
  if (ns > 0)
    NG_CHECK(BE(ex)->gemm(be, true, false, din_s, zw, ns, 1.0f, hs, din_s, dzs, zw, 1.0f,
                          ex->gw + m->off_w[j], zw));
  NG_CHECK(BE(ex)->gemm(be, true, false, din_t, zw, nd, 1.0f, ht, din_t, dzd, zw, 1.0f,
                        ex->gw + m->off_root[j], zw));
  if (dh_s && ns > 0)
    NG_CHECK(BE(ex)->gemm(be, false, true, ns, din_s, zw, 1.0f, dzs, zw, ex->w + m->off_w[j], zw,
                          1.0f, dh_s, din_s));
  if (dh_t)
    NG_CHECK(BE(ex)->gemm(be, false, true, nd, din_t, zw, 1.0f, dzd, zw, ex->w + m->off_root[j], zw,
                          1.0f, dh_t, din_t));
  return NG_OK;
}

ng_status ng__rgcn_derive(ng_rgcn_exec *ex) {
  const ng_rgcn *m = ex->m;
  for (int32_t g = 0; g < m->n_groups; g++) {
    const int64_t S = m->grp_slots[g], B = m->bases, k = m->grp_in[g] * m->grp_out[g];
    NG_CHECK(BE(ex)->gemm(ex->be, false, false, S, k, B, 1.0f, ex->params + m->grp_coef[g], B,
                          ex->params + m->grp_basis[g], k, 0.0f, ex->derived + m->grp_derived[g],
                          k));
  }
  return NG_OK;
}

ng_status ng__rgcn_forward(ng_rgcn_exec *ex, const ng_rgcn_batch *b, const float *const *features,
                           float drop_p, uint64_t seed, bool backward) {
  const ng_rgcn *m = ex->m;
  const int32_t T = m->T, R = m->R, L = m->L;
  ng_backend *be = ex->be;
  if (!(drop_p >= 0.0f && drop_p < 1.0f))
    return ng__err(NG_ERR_INVALID_ARG, "relational model: dropout %g; use 0 <= p < 1",
                   (double)drop_p);
  ex->drop_p = drop_p;
  NG_CHECK(ng__rgcn_derive(ex));
  NG_CHECK(ng__bk_reserve(be, &ex->arena, &ex->arena_cap, layout(ex, b, NULL)));
  layout(ex, b, ex->arena);
  /* The transposes serve the backward pass only (aggr_bwd); evaluation goes without them. */
  ex->transposed = backward;
  for (int32_t i = 0; i < L * R && backward; i++)
    if (ng__rgcn_rel_used(m, i / R, i % R))
      fill_transpose(&ex->views[i]);
  const float *params = ex->params;
  for (int32_t t = 0; t < T; t++) {
    if (!m->need[t] || NODES(b, 0, t) == 0)
      continue;
    const float *table = m->off_emb[t] >= 0 ? params + m->off_emb[t] : features[t];
    if (!table)
      return ng__err(NG_ERR_INVALID_ARG, "relational model: node type %d has no feature table",
                     (int)t);
    NG_CHECK(BE(ex)->gather_rows(be, ex->h[t], table, b->node_ids[t], NODES(b, 0, t), m->in0[t]));
  }
  for (int32_t l = 0; l < L; l++) {
    const int64_t dout = m->out_dim[l];
    /* Dropout in place on the layer's input rows: below the last layer they are ReLU outputs,
     * and a kept element keeps its sign, so the ReLU's backward reads the same pattern from
     * them; a dropped one has no gradient either way. */
    for (int32_t t = 0; t < T && drop_p > 0.0f; t++) {
      const size_t i = (size_t)l * (size_t)T + (size_t)t;
      if (ex->mask[i] && NODES(b, l, t) > 0)
        NG_CHECK(BE(ex)->dropout_fwd(be, ex->h[i], ex->mask[i], NODES(b, l, t) * m->in_dim[i],
                                     drop_p, drop_key(seed, l, t)));
    }
    for (int32_t t = 0; t < T; t++) {
      const size_t i = (size_t)l * (size_t)T + (size_t)t;
      const int64_t nd = NODES(b, l + 1, t), din = m->in_dim[i];
      float *o = ex->out[i];
      if (!m->need[(size_t)(l + 1) * (size_t)T + (size_t)t] || nd == 0)
        continue;
      float beta = 0.0f; /* the first term writes, the others add */
      if (m->off_self[i] >= 0) {
        NG_CHECK(BE(ex)->gemm(be, false, false, nd, dout, din, 1.0f, ex->h[i], din,
                              ex->w + m->off_self[i], dout, beta, o, dout));
        beta = 1.0f;
      }
      for (int32_t r = 0; r < R; r++) {
        const size_t j = (size_t)l * (size_t)R + (size_t)r;
        if (m->rel_dst[r] != t)
          continue;
        const int32_t s = m->rel_src[r];
        const int64_t din_s = m->in_dim[l * T + s];
        if (m->kind == NG_HETERO_MODEL_RGAT) {
          NG_CHECK(gat_fwd(ex, &b->blocks[j], l, j, ex->h[(size_t)l * (size_t)T + s],
                           NODES(b, l, s), din_s, ex->h[i], din, o, beta));
          beta = 1.0f;
          continue;
        }
        NG_CHECK(BE(ex)->aggr_fwd(be, &MEAN, &ex->views[j], ex->h[(size_t)l * (size_t)T + s], din_s,
                                  ex->agg[j], NULL));
        NG_CHECK(BE(ex)->gemm(be, false, false, nd, dout, din_s, 1.0f, ex->agg[j], din_s,
                              ex->w + m->off_w[j], dout, beta, o, dout));
        beta = 1.0f;
        if (m->off_root[j] >= 0)
          NG_CHECK(BE(ex)->gemm(be, false, false, nd, dout, din, 1.0f, ex->h[i], din,
                                ex->w + m->off_root[j], dout, 1.0f, o, dout));
      }
      if (m->off_b[i] >= 0)
        NG_CHECK(BE(ex)->bias_act_fwd(be, o, params + m->off_b[i], nd, dout, NG_ACT_NONE));
      for (int32_t r = 0; r < R; r++) {
        const size_t j = (size_t)l * (size_t)R + (size_t)r;
        if (m->rel_dst[r] == t && m->off_rbias[j] >= 0)
          NG_CHECK(BE(ex)->bias_act_fwd(be, o, params + m->off_rbias[j], nd, dout, NG_ACT_NONE));
      }
      if (l + 1 < L)
        NG_CHECK(BE(ex)->bias_act_fwd(be, o, NULL, nd, dout, NG_ACT_RELU));
    }
  }
  ex->n_targets = (int32_t)NODES(b, L, m->target);
  ex->logits = ex->out[(size_t)(L - 1) * (size_t)T + (size_t)m->target];
  return NG_OK;
}

/* The gradient buffer of h[l][t]: the output gradient of the layer below, an embedded type's
 * layer-0 gradient, or NULL (features need none). */
static float *grad_of_input(ng_rgcn_exec *ex, int32_t l, int32_t t) {
  return l > 0 ? ex->d_out[(size_t)(l - 1) * (size_t)ex->m->T + (size_t)t] : ex->d_h0[t];
}

ng_status ng__rgcn_loss_backward(ng_rgcn_exec *ex, const ng_rgcn_batch *b, const int32_t *labels,
                                 bool backward, double *loss, int64_t *correct) {
  const ng_rgcn *m = ex->m;
  const int32_t T = m->T, R = m->R, L = m->L;
  ng_backend *be = ex->be;
  const int64_t n = ex->n_targets;
  double lo = 0.0;
  int64_t co = 0;
  NG_CHECK(BE(ex)->copy_h2d(be, ex->labels, labels, (size_t)n * sizeof(int32_t)));
  float *d_logits = ex->d_out[(size_t)(L - 1) * (size_t)T + (size_t)m->target];
  NG_CHECK(BE(ex)->xent(be, ex->logits, ex->labels, n, m->classes, backward ? d_logits : NULL, &lo,
                        &co));
  if (loss)
    *loss = lo;
  if (correct)
    *correct = co;
  if (!backward)
    return NG_OK;
  if (!ex->transposed)
    return ng__err(NG_ERR_INVALID_ARG, "relational model: a backward pass after a forward pass "
                                       "made without one (its blocks have no transposes)");
  NG_CHECK(BE(ex)->fill(be, ex->grads, m->n_params, 0.0f));
  if (m->n_derived > 0)
    NG_CHECK(BE(ex)->fill(be, ex->d_derived, m->n_derived, 0.0f));
  for (int32_t l = 0; l + 1 < L; l++)
    for (int32_t t = 0; t < T; t++)
      if (m->need[(size_t)(l + 1) * (size_t)T + (size_t)t])
        NG_CHECK(BE(ex)->fill(be, ex->d_out[(size_t)l * (size_t)T + (size_t)t],
                              NODES(b, l + 1, t) * m->out_dim[l], 0.0f));
  for (int32_t t = 0; t < T; t++)
    if (ex->d_h0[t])
      NG_CHECK(BE(ex)->fill(be, ex->d_h0[t], NODES(b, 0, t) * m->in0[t], 0.0f));
  const float *params = ex->params;
  float *grads = ex->grads;
  for (int32_t l = L - 1; l >= 0; l--) {
    const int64_t dout = m->out_dim[l];
    for (int32_t t = 0; t < T; t++) {
      const size_t i = (size_t)l * (size_t)T + (size_t)t;
      const int64_t nd = NODES(b, l + 1, t), din = m->in_dim[i];
      float *d = ex->d_out[i];
      if (!m->need[(size_t)(l + 1) * (size_t)T + (size_t)t] || nd == 0)
        continue;
      NG_CHECK(BE(ex)->bias_act_bwd(be, d, ex->out[i], ex->colsum, nd, dout,
                                    l + 1 < L ? NG_ACT_RELU : NG_ACT_NONE));
      float *dh_t = grad_of_input(ex, l, t);
      if (m->off_b[i] >= 0)
        NG_CHECK(BE(ex)->add(be, grads + m->off_b[i], ex->colsum, dout));
      if (m->off_self[i] >= 0) {
        NG_CHECK(BE(ex)->gemm(be, true, false, din, dout, nd, 1.0f, ex->h[i], din, d, dout, 1.0f,
                              ex->gw + m->off_self[i], dout));
        if (dh_t)
          NG_CHECK(BE(ex)->gemm(be, false, true, nd, din, dout, 1.0f, d, dout,
                                ex->w + m->off_self[i], dout, 1.0f, dh_t, din));
      }
      for (int32_t r = 0; r < R; r++) {
        const size_t j = (size_t)l * (size_t)R + (size_t)r;
        if (m->rel_dst[r] != t)
          continue;
        const int32_t s = m->rel_src[r];
        const int64_t din_s = m->in_dim[l * T + s];
        if (m->off_rbias[j] >= 0)
          NG_CHECK(BE(ex)->add(be, grads + m->off_rbias[j], ex->colsum, dout));
        if (m->kind == NG_HETERO_MODEL_RGAT) {
          NG_CHECK(gat_bwd(ex, &b->blocks[j], l, j, d, ex->h[(size_t)l * (size_t)T + s],
                           NODES(b, l, s), din_s, grad_of_input(ex, l, s), ex->h[i], din, dh_t));
          continue;
        }
        NG_CHECK(BE(ex)->gemm(be, true, false, din_s, dout, nd, 1.0f, ex->agg[j], din_s, d, dout,
                              1.0f, ex->gw + m->off_w[j], dout));
        if (m->off_root[j] >= 0) {
          NG_CHECK(BE(ex)->gemm(be, true, false, din, dout, nd, 1.0f, ex->h[i], din, d, dout, 1.0f,
                                ex->gw + m->off_root[j], dout));
          if (dh_t)
            NG_CHECK(BE(ex)->gemm(be, false, true, nd, din, dout, 1.0f, d, dout,
                                  ex->w + m->off_root[j], dout, 1.0f, dh_t, din));
        }
        float *dh_s = grad_of_input(ex, l, s);
        const int64_t ns = NODES(b, l, s);
        if (!dh_s || ns == 0)
          continue;
        NG_CHECK(BE(ex)->gemm(be, false, true, nd, din_s, dout, 1.0f, d, dout, ex->w + m->off_w[j],
                              dout, 0.0f, ex->tmp_dagg, din_s));
        NG_CHECK(
            BE(ex)->aggr_bwd(be, &MEAN, &ex->views[j], ex->tmp_dagg, NULL, din_s, ex->tmp_dsrc));
        NG_CHECK(BE(ex)->add(be, dh_s, ex->tmp_dsrc, ns * din_s));
      }
    }
    /* Layer l's input gradients are complete: through its dropout to the layer below. */
    for (int32_t t = 0; t < T && ex->drop_p > 0.0f; t++) {
      const size_t i = (size_t)l * (size_t)T + (size_t)t;
      float *dh = grad_of_input(ex, l, t);
      if (ex->mask[i] && dh && NODES(b, l, t) > 0)
        NG_CHECK(
            BE(ex)->dropout_bwd(be, dh, ex->mask[i], NODES(b, l, t) * m->in_dim[i], ex->drop_p));
    }
  }
  /* The embedded types' rows are distinct within a mini-batch, so their gradients land in the
   * zeroed table by a plain scatter. */
  for (int32_t t = 0; t < T; t++) {
    const int64_t rows = NODES(b, 0, t);
    if (m->off_emb[t] < 0 || rows == 0)
      continue;
    for (int64_t k = 0; k < rows; k++) {
      ex->iota[k] = k;
      ex->pos[k] = (int32_t)b->node_ids[t][k];
    }
    NG_CHECK(BE(ex)->scatter_rows(be, grads + m->off_emb[t], ex->pos, ex->d_h0[t], ex->iota, rows,
                                  m->in0[t], 0.0f, 0));
  }
  /* Through the basis decomposition W = coef x basis of each group:
   * d basis = coef^T x dW, d coef = dW x basis^T. */
  for (int32_t g = 0; g < m->n_groups; g++) {
    const int64_t S = m->grp_slots[g], B = m->bases, k = m->grp_in[g] * m->grp_out[g];
    const float *dw = ex->d_derived + m->grp_derived[g];
    NG_CHECK(BE(ex)->gemm(be, true, false, B, k, S, 1.0f, params + m->grp_coef[g], B, dw, k, 0.0f,
                          grads + m->grp_basis[g], k));
    NG_CHECK(BE(ex)->gemm(be, false, true, S, B, k, 1.0f, dw, k, params + m->grp_basis[g], k, 0.0f,
                          grads + m->grp_coef[g], B));
  }
  return NG_OK;
}

ng_status ng__rgcn_step(ng_rgcn_exec *ex, const ng_opt_hp *hp) {
  const ng_rgcn *m = ex->m;
  ng_opt_hp no_decay = *hp;
  no_decay.weight_decay = 0.0f;
  /* Weight decay would shrink every embedding row at every step, seen in the mini-batch or
   * not; the embeddings are the first n_embed floats. */
  if (m->n_embed > 0)
    NG_CHECK(BE(ex)->opt_step(ex->be, &no_decay, ex->params, ex->grads, ex->state1, ex->state2,
                              m->n_embed));
  const int64_t rest = m->n_params - m->n_embed;
  if (rest > 0)
    NG_CHECK(BE(ex)->opt_step(ex->be, hp, ex->params + m->n_embed, ex->grads + m->n_embed,
                              ex->state1 + m->n_embed, ex->state2 + m->n_embed, rest));
  return NG_OK;
}
