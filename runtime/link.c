/* Link prediction: training on edge mini-batches with negatives (docs/link-prediction.md); the
 * evaluation and the scoring of given pairs are in runtime/link_eval.c.
 *
 * The link trainer drives a node trainer's parts (ng__trainer_parts) over a view of the dataset
 * whose graph is the split's message-passing graph (links/indptr.npy, indices.npy), so that no
 * held-out edge is aggregated over. One iteration: the batch's positive pairs and their
 * negatives; their endpoints, sorted and unique, are the targets of one sampled mini-batch
 * (the sampler of node training, one seed set for both ends); the input layer's package is made
 * by the cold-row path of the iteration (BATCH, ZCOPY or PARTIAL) and finished by the feature
 * store; the GNN's forward pass gives each target's embedding; the decoder scores the pairs; the
 * gradient of the mean BCE with logits flows back into the GNN through its backward pass.
 * Everything random derives from (seed, epoch, iteration, index), every reduction has a fixed
 * order, and every cold-row path gives the same input bits, so the losses do not depend on the
 * mode or the thread count. */
#include "checkpoint_impl.h"
#include "dataset_impl.h"
#include "link_trainer_impl.h"
#include "pipeline_impl.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Purposes of the training streams (ng_hash3(seed, purpose, ...)). */
enum { PURPOSE_EPOCH = 0x6c6b7431, PURPOSE_NEG = 0x6c6b7432, PURPOSE_MLP = 0x6c6b7433 };
/* The buffer slot (copy queue and mark, backend_impl.h) of every iteration's package. */
#define LINK_SLOT 0
/* Degree^0.75: word2vec's unigram smoothing, which the degree negatives follow. */
#define DEGREE_POWER 0.75

/* The gradient of the loss over the pairs' scores `s` (labels: the first n_pos are 1)
 * into dh [targets, dim] (zeroed here) and, for the MLP, t->mlp_g. Serial, in pair order: the
 * sums do not depend on the thread count. Returns the mean loss and the correct count. */
static void pair_backward(ng_link_trainer_t t, const float *h, const int32_t *u, const int32_t *v,
                          int64_t n, int64_t n_pos, int64_t n_targets, double *loss,
                          int64_t *correct) {
  const int64_t d = t->dim, H = t->lo.mlp_hidden;
  memset(t->dh, 0, (size_t)n_targets * (size_t)d * sizeof(float));
  if (t->mlp)
    memset(t->mlp_g, 0, (size_t)t->mlp_n * sizeof(float));
  float *hid = t->mlp ? t->mlp_g + t->mlp_n : NULL; /* scratch after the gradient */
  const ng_link_dec dec = ng__link_trainer_dec(t);  /* the MLP's forward, for its hidden units */
  double l = 0.0;
  int64_t ok = 0;
  for (int64_t i = 0; i < n; i++) {
    const int y = i < n_pos;
    const float x = t->scores[i];
    /* Positives and negatives weigh one half each, whatever K (GAE's pos_weight balance): with
     * one negative per positive this is the plain mean. */
    const double w = 0.5 / (double)(y ? n_pos : n - n_pos);
    l += w * ng__link_bce(x, y);
    ok += (x > 0) == (y == 1);
    const float g = (float)((1.0 / (1.0 + exp(-(double)x)) - y) * w);
    const float *a = h + (int64_t)u[i] * d, *b = h + (int64_t)v[i] * d;
    float *da = t->dh + (int64_t)u[i] * d, *db = t->dh + (int64_t)v[i] * d;
    if (!t->mlp) {
      for (int64_t c = 0; c < d; c++) {
        da[c] += g * b[c];
        db[c] += g * a[c];
      }
      continue;
    }
    const float *W1 = t->mlp, *w2 = W1 + d * H + H;
    float *gW1 = t->mlp_g, *gb1 = gW1 + d * H, *gw2 = gb1 + H, *gb2 = gw2 + H;
    (void)ng__link_mlp_score(&dec, a, b, hid);
    *gb2 += g;
    for (int64_t j = 0; j < H; j++) {
      gw2[j] += g * (hid[j] > 0 ? hid[j] : 0);
      hid[j] = hid[j] > 0 ? g * w2[j] : 0.0f; /* d loss / d z_j */
      gb1[j] += hid[j];
    }
    for (int64_t c = 0; c < d; c++) {
      const float p = a[c] * b[c];
      float dp = 0.0f;
      for (int64_t j = 0; j < H; j++) {
        gW1[c * H + j] += hid[j] * p;
        dp += hid[j] * W1[c * H + j];
      }
      da[c] += dp * b[c];
      db[c] += dp * a[c];
    }
  }
  *loss = l;
  *correct = ok;
}

/* Adam on the MLP decoder's parameters, with the GNN's hyper-parameters. */
static void mlp_step(ng_link_trainer_t t) {
  const ng_opt_hp *hp = &t->p.step->hp;
  const double k = (double)++t->mlp_steps;
  const double c1 = 1.0 - pow(hp->beta1, k), c2 = 1.0 - pow(hp->beta2, k);
  for (int64_t i = 0; i < t->mlp_n; i++) {
    const float g = t->mlp_g[i];
    if (hp->kind == NG_OPT_SGD) {
      t->mlp_m[i] = hp->momentum * t->mlp_m[i] + g;
      t->mlp[i] -= hp->lr * t->mlp_m[i];
      continue;
    }
    t->mlp_m[i] = hp->beta1 * t->mlp_m[i] + (1.0f - hp->beta1) * g;
    t->mlp_v[i] = hp->beta2 * t->mlp_v[i] + (1.0f - hp->beta2) * g * g;
    const double mh = t->mlp_m[i] / c1, vh = t->mlp_v[i] / c2;
    t->mlp[i] -= (float)(hp->lr * mh / (sqrt(vh) + hp->eps));
  }
}

/* ---- creation ---- */

static ng_status map_links(ng_link_trainer_t t, const char *dir) {
  char *ld = ng__path_join(dir, NG_LINK_DIR);
  if (!ld)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  for (int i = 0; i < NG_LINK_ARR_COUNT_ && st == NG_OK; i++) {
    char *p = ng__path_join(ld, NG_LINK_FILE[i]);
    if (!p) {
      st = NG_ERR_NOMEM;
      break;
    }
    if (!ng__file_exists(p))
      st = ng__err(NG_ERR_NOT_FOUND,
                   "%s: missing; split the dataset's edges first (neargnn split-edges --dataset "
                   "%s)",
                   p, dir);
    else
      st = ng__npy_map(&t->arr[i], p, false);
    free(p);
  }
  free(ld);
  NG_CHECK(st);
  const int64_t nodes = t->ds->info.nodes;
  const ng_npy_header *ip = &t->arr[NG_LINK_ARR_INDPTR].hdr, *ix = &t->arr[NG_LINK_ARR_INDICES].hdr;
  if (ip->dtype != NG_DTYPE_I64 || ip->ndim != 1 || ip->shape[0] != nodes + 1 || ix->ndim != 1 ||
      ix->dtype != (nodes < NG_INDEX32_MAX_NODES ? NG_DTYPE_I32 : NG_DTYPE_I64))
    return ng__err(NG_ERR_FORMAT,
                   "%s/links: indptr.npy or indices.npy does not fit the dataset's %lld nodes "
                   "(split again with neargnn split-edges)",
                   dir, (long long)nodes);
  int64_t k = -1;
  for (int i = NG_LINK_ARR_TRAIN_POS; i < NG_LINK_ARR_COUNT_; i++) {
    const ng_npy_header *h = &t->arr[i].hdr;
    const bool neg = i == NG_LINK_ARR_VAL_NEG || i == NG_LINK_ARR_TEST_NEG;
    if (h->dtype != NG_DTYPE_I64 || h->ndim != (neg ? 3 : 2) || h->shape[h->ndim - 1] != 2 ||
        (neg && h->shape[0] != t->arr[i - 1].hdr.shape[0]) || (neg && k >= 0 && h->shape[1] != k))
      return ng__err(NG_ERR_FORMAT, "%s/links/%s: int64 %s expected", dir, NG_LINK_FILE[i],
                     neg ? "[n, K, 2] (K pairs per positive)" : "[n, 2]");
    if (neg)
      k = h->shape[1];
    const int64_t *a = t->arr[i].data, cnt = ng__npy_count(h);
    for (int64_t e = 0; e < cnt; e++)
      if (a[e] < 0 || a[e] >= nodes)
        return ng__err(NG_ERR_FORMAT, "%s/links/%s: entry %lld is %lld, not a node id in [0, %lld)",
                       dir, NG_LINK_FILE[i], (long long)e, (long long)a[e], (long long)nodes);
  }
  t->info = (ng_link_split_info)NG_LINK_SPLIT_INFO_INIT;
  t->info.train = t->arr[NG_LINK_ARR_TRAIN_POS].hdr.shape[0];
  t->info.val = t->arr[NG_LINK_ARR_VAL_POS].hdr.shape[0];
  t->info.test = t->arr[NG_LINK_ARR_TEST_POS].hdr.shape[0];
  t->info.neg_per_pos = (int32_t)k;
  t->info.mp_edges = ix->shape[0];
  t->info.undirected = t->ds->info.undirected;
  /* Whether the negatives keep their positive's source (links.json says it too). */
  const ng_link_pair *vp = t->arr[NG_LINK_ARR_TEST_POS].data,
                     *vn = t->arr[NG_LINK_ARR_TEST_NEG].data;
  t->info.neg_source = 0;
  for (int64_t i = 0; i < t->info.test * k; i++)
    if (vn[i].u != vp[i / k].u) {
      t->info.neg_source = 1;
      break;
    }
  if (t->info.train == 0)
    return ng__err(NG_ERR_INVALID_ARG, "%s/links: no training edges", dir);
  return NG_OK;
}

/* The view: the message-passing graph, the dataset's features, and labels the fetch path
 * carries along (the dataset's, or zeros); no node splits. */
static ng_status make_view(ng_link_trainer_t t) {
  const ng_dataset_info *in = &t->ds->info;
  ng_dataset_arrays a = NG_DATASET_ARRAYS_INIT;
  a.name = in->name;
  a.nodes = in->nodes;
  a.indptr = t->arr[NG_LINK_ARR_INDPTR].data;
  a.indptr_type = NG_INT64;
  a.indices = t->arr[NG_LINK_ARR_INDICES].data;
  a.index_type = t->arr[NG_LINK_ARR_INDICES].hdr.dtype == NG_DTYPE_I32 ? NG_INT32 : NG_INT64;
  a.undirected = in->undirected;
  a.features = t->ds->features;
  a.feature_dim = in->feature_dim;
  if (t->ds->labels) {
    a.labels = t->ds->labels;
    a.classes = in->classes;
  } else {
    t->labels = ng__calloc((size_t)in->nodes, sizeof *t->labels, "the view's labels");
    if (!t->labels)
      return NG_ERR_NOMEM;
    a.labels = t->labels;
    a.classes = 1;
  }
  a.label_type = NG_INT32;
  return ng_dataset_from_arrays(&t->view, &a);
}

static ng_status make_degree_cdf(ng_link_trainer_t t) {
  const ng_csr *g = &t->view->csr;
  t->deg_cdf = ng__malloc((size_t)g->nodes * sizeof *t->deg_cdf, "the degree distribution");
  if (!t->deg_cdf)
    return NG_ERR_NOMEM;
  double acc = 0.0;
  for (int64_t v = 0; v < g->nodes; v++) {
    acc += pow((double)(g->indptr[v + 1] - g->indptr[v]), DEGREE_POWER);
    t->deg_cdf[v] = acc;
  }
  if (!(acc > 0.0))
    return ng__err(NG_ERR_INVALID_ARG, "degree negatives: the message-passing graph has no edges");
  return NG_OK;
}

static ng_status check_link_opts(const ng_link_opts *lo) {
  if ((unsigned)lo->decoder > NG_LINK_DECODER_MLP || (unsigned)lo->neg > NG_LINK_NEG_DEGREE ||
      lo->neg_per_pos < 1 || lo->neg_per_pos > 1024 || lo->mlp_hidden < 1 ||
      lo->mlp_hidden > 65536 || (unsigned)lo->self_pairs > 1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "link options out of range (decoder dot or mlp, negatives uniform or degree, "
                   "neg_per_pos in [1, 1024], mlp_hidden in [1, 65536], self_pairs 0 or 1)");
  return NG_OK;
}

ng_status ng_link_trainer_create(ng_link_trainer_t *out, ng_dataset_t ds, ng_model_t model,
                                 const ng_train_opts *opts, const ng_link_opts *lopts) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_link_trainer_create: out is NULL");
  *out = NULL;
  NG_CHECK(ng__dataset_check(ds));
  if (!ds->dir)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_trainer_create: the dataset has no folder; link training reads its "
                   "split from <dataset>/links (ng_dataset_split_edges)");
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  if (lopts) {
    if (lopts->size < sizeof(size_t) || lopts->size > sizeof lo)
      return ng__err(NG_ERR_INVALID_ARG, "ng_link_opts.size %zu is not %zu", lopts->size,
                     sizeof lo);
    memcpy(&lo, lopts, lopts->size);
  }
  NG_CHECK(check_link_opts(&lo));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  if (opts) {
    if (opts->size < sizeof(size_t) || opts->size > sizeof o)
      return ng__err(NG_ERR_INVALID_ARG, "ng_train_opts.size %zu is not %zu", opts->size, sizeof o);
    memcpy(&o, opts, opts->size);
  }
  if (o.comm)
    return ng__err(NG_ERR_UNSUPPORTED, "link training runs in one process (no comm)");
  if (o.batch < 0 || o.batch > INT32_MAX / 4)
    return ng__err(NG_ERR_INVALID_ARG, "link training: batch %lld out of range",
                   (long long)o.batch);
  struct ng_link_trainer *t = ng__calloc(1, sizeof *t, "a link trainer");
  if (!t)
    return NG_ERR_NOMEM;
  t->magic = NG_LINK_MAGIC;
  t->ds = ds;
  t->lo = lo;
  ng_status st = NG_OK;
  NG_CHECK_GOTO(st, map_links(t, ds->dir), fail);
  NG_CHECK_GOTO(st, make_view(t), fail);
  if (lo.neg == NG_LINK_NEG_DEGREE)
    NG_CHECK_GOTO(st, make_degree_cdf(t), fail);
  /* The host work of an iteration runs on this thread (the parts are driven directly). */
  ng_train_opts inner = o;
  inner.workers = -1;
  /* The hybrid modes' pipeline wants two groups of workers; it is never started (the trainer's
   * epochs do not run), so two idle ones satisfy it. AUTO is HYBRID on a GPU. */
  if (o.mode == NG_MODE_AUTO || o.mode == NG_MODE_HYBRID || o.mode == NG_MODE_HYBRID_STATIC) {
    inner.workers = 2;
    inner.partial_workers = 1;
    inner.cpuset = NULL;
  }
  inner.batch = 0;
  inner.progress = NULL;
  inner.telemetry = NULL;
  NG_CHECK_GOTO(st, ng__trainer_create_link(&t->tr, t->view, model, &inner), fail);
  NG_CHECK_GOTO(st, ng__trainer_parts(&t->p, t->tr), fail);
  NG_CHECK_GOTO(st, ng_trainer_embed_dim(&t->dim, t->tr, -1), fail);
  t->opts = o;
  t->opts.device = NULL;
  t->opts.cpuset = NULL;
  t->opts.temp_dir = NULL;
  if (lo.decoder == NG_LINK_DECODER_MLP) {
    const int64_t d = t->dim, H = lo.mlp_hidden;
    t->mlp_n = d * H + H + H + 1;
    t->mlp = ng__calloc((size_t)t->mlp_n, sizeof(float), "the MLP decoder");
    t->mlp_g = ng__calloc((size_t)(t->mlp_n + H), sizeof(float), "the MLP decoder's gradient");
    t->mlp_m = ng__calloc((size_t)t->mlp_n, sizeof(float), "the MLP decoder's state");
    t->mlp_v = ng__calloc((size_t)t->mlp_n, sizeof(float), "the MLP decoder's state");
    if (!t->mlp || !t->mlp_g || !t->mlp_m || !t->mlp_v) {
      st = NG_ERR_NOMEM;
      goto fail;
    }
    /* Glorot-uniform weights from the run's seed, zero biases. */
    ng_rng r;
    ng_rng_seed(&r, ng_hash2(o.seed, PURPOSE_MLP));
    const double a1 = sqrt(6.0 / (double)(d + H)), a2 = sqrt(6.0 / (double)(H + 1));
    for (int64_t i = 0; i < d * H; i++)
      t->mlp[i] = (float)((2.0 * ng_rng_uniform(&r) - 1.0) * a1);
    for (int64_t j = 0; j < H; j++)
      t->mlp[d * H + H + j] = (float)((2.0 * ng_rng_uniform(&r) - 1.0) * a2);
  }
  *out = t;
  return NG_OK;
fail:
  ng_link_trainer_destroy(t);
  return st;
}

void ng_link_trainer_destroy(ng_link_trainer_t t) {
  if (!t || t->magic != NG_LINK_MAGIC)
    return;
  t->magic = 0;
  if (t->tr) {
    ng_backend *be = t->p.be;
    if (be) {
      be->iface->free(be, t->pkg_dev);
      be->iface->free(be, t->dlog_dev);
    }
    ng_trainer_destroy(t->tr);
  }
  ng__fetch_scratch_free(&t->scratch);
  ng_dataset_close(t->view);
  for (int i = 0; i < NG_LINK_ARR_COUNT_; i++)
    ng__npy_close(&t->arr[i]);
  free(t->labels);
  free(t->deg_cdf);
  free(t->order);
  free(t->pairs);
  free(t->seeds);
  free(t->pos_u);
  free(t->pos_v);
  free(t->h);
  free(t->dh);
  free(t->scores);
  free(t->pkg_host);
  free(t->mlp);
  free(t->mlp_g);
  free(t->mlp_m);
  free(t->mlp_v);
  free(t);
}

ng_status ng_link_info(ng_link_split_info *out, ng_link_trainer_t t) {
  NG_CHECK(ng__link_check(t));
  if (!out || out->size != sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_link_info: out is NULL or out->size is not %zu",
                   sizeof *out);
  *out = t->info;
  return NG_OK;
}

ng_status ng_link_trainer_set_epoch_iters(ng_link_trainer_t t, int64_t iters) {
  NG_CHECK(ng__link_check(t));
  if (iters < 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_trainer_set_epoch_iters: iters is %lld; it must be 0 (every training "
                   "edge) or more",
                   (long long)iters);
  t->epoch_iters = iters;
  return NG_OK;
}

/* ---- one iteration ---- */

static int i64_cmp(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int32_t row_of(const int64_t *seeds, int64_t n, int64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (seeds[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return (int32_t)lo;
}

static ng_status grow(void **p, size_t *cap, size_t bytes, const char *what) {
  return ng__host_reserve(p, cap, NG_MAX(bytes, (size_t)64), what);
}

/* The cold-row path of iteration `iter` (docs/link-prediction.md): the mode's, and for the
 * hybrid modes PARTIAL and TRANSFER in turn, as two worker groups would share the packages. */
static ng_fetch strategy(ng_link_trainer_t t, int64_t iter) {
  return ng__mode_fetch(t->p.mode, iter % 2 == 0,
                        ng__transfer_resolve(t->opts.transfer, t->ds->info.feature_dim));
}

/* Draws negatives of positives [0, n_pos) into pairs [n_pos, n_pos (1 + K)): positive j's come
 * from the stream ng_hash3(iteration seed, PURPOSE_NEG, j). */
static void draw_negatives(ng_link_trainer_t t, uint64_t seed, int64_t n_pos) {
  const int32_t k = t->lo.neg_per_pos;
  const int64_t nodes = t->ds->info.nodes;
  const double total = t->deg_cdf ? t->deg_cdf[nodes - 1] : 0.0;
#pragma omp parallel for schedule(static) num_threads(t->p.threads)
  for (int64_t j = 0; j < n_pos; j++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(seed, PURPOSE_NEG, (uint64_t)j));
    for (int32_t q = 0; q < k; q++) {
      int64_t u = t->pairs[j].u, v;
      if (!t->deg_cdf) {
        u = (int64_t)ng_rng_below(&r, (uint64_t)nodes);
        v = (int64_t)ng_rng_below(&r, (uint64_t)nodes);
      } else {
        const double x = ng_rng_uniform(&r) * total;
        int64_t lo = 0, hi = nodes - 1; /* the first node whose cumulative weight exceeds x */
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          if (t->deg_cdf[mid] <= x)
            lo = mid + 1;
          else
            hi = mid;
        }
        v = lo;
      }
      t->pairs[n_pos + j * k + q] = (ng_link_pair){u, v};
    }
  }
}

/* One training iteration over pairs[0, n) (the first n_pos positive). */
static ng_status link_iter(ng_link_trainer_t t, int64_t iter, uint64_t seed, int64_t n,
                           int64_t n_pos, double *loss, int64_t *correct, int64_t *edges,
                           ng_fetch_stats *fstats) {
  ng_backend *be = t->p.be;
  /* The targets: every endpoint once, sorted. */
  NG_CHECK(grow((void **)&t->seeds, &t->seeds_cap, 2 * (size_t)n * sizeof *t->seeds, "the seeds"));
  for (int64_t i = 0; i < n; i++) {
    t->seeds[2 * i] = t->pairs[i].u;
    t->seeds[2 * i + 1] = t->pairs[i].v;
  }
  qsort(t->seeds, 2 * (size_t)n, sizeof *t->seeds, i64_cmp);
  int64_t m = 0;
  for (int64_t i = 0; i < 2 * n; i++)
    if (m == 0 || t->seeds[m - 1] != t->seeds[i])
      t->seeds[m++] = t->seeds[i];
  if (m > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "a link mini-batch of %lld endpoints is too large",
                   (long long)m);
  /* Rows of the pairs: the positives, then (with self_pairs) every target with itself as a
   * positive too, then the negatives. */
  const int64_t n_self = t->lo.self_pairs ? m : 0;
  for (int64_t i = 0; i < n; i++) {
    const int64_t at = i < n_pos ? i : i + n_self;
    t->pos_u[at] = row_of(t->seeds, m, t->pairs[i].u);
    t->pos_v[at] = row_of(t->seeds, m, t->pairs[i].v);
  }
  for (int64_t i = 0; i < n_self; i++)
    t->pos_u[n_pos + i] = t->pos_v[n_pos + i] = (int32_t)i;
  n += n_self;
  n_pos += n_self;
  ng_minibatch mb;
  NG_CHECK(ng__sample(&mb, t->p.arena, t->p.sampler, t->seeds, (int32_t)m, seed));
  for (int l = 0; l < mb.n_layers; l++)
    *edges += mb.blocks[l].nnz;
  /* The input layer's package by the iteration's cold-row path. */
  ng_fetch_cfg cfg = *t->p.fetch;
  cfg.mode = strategy(t, iter);
  cfg.device_share = 0.0;
  cfg.threads = t->p.threads;
  const ng_layer *L0 = &t->p.ex->model->layers[0];
  ng_fetch_plan plan;
  NG_CHECK(ng__fetch_plan(&plan, &cfg, &mb, L0->o.dropout, &t->scratch));
  NG_CHECK(grow(&t->pkg_host, &t->pkg_host_cap, plan.bytes, "a link package"));
  ng_fetch_pkg pkg, view;
  NG_CHECK(ng__fetch_fill(&pkg, &plan, &cfg, &mb, ng__exec_input_drop_key(seed), &t->scratch,
                          t->pkg_host));
  /* Buffer slot LINK_SLOT, ordered as the pipeline orders its slots (sched/pipeline.c, upload
   * and device_iteration): the package's copy into pkg_dev and the reads of host memory the
   * prefetch queues behind it (a ZCOPY package's cold rows, a PARTIAL package's cold self rows,
   * into the store's slot buffer) run on the slot's copy queue, not the ops' queue. They wait
   * for mark LINK_SLOT, recorded here after every op queued so far (the previous iteration's
   * backward pass still reads its blocks in pkg_dev and its input rows in the slot buffer), and
   * the ops wait for them at wait_copy. Without the two the device read packages half-copied and
   * rows not yet gathered, and overwrote what the previous backward pass read (GPU only: the
   * CPU backend's copies and ops run at once). */
  NG_CHECK(be->iface->mark(be, LINK_SLOT));
  if (be->iface->host_memory) {
    view = pkg;
  } else {
    NG_CHECK(ng__bk_reserve(be, &t->pkg_dev, &t->pkg_dev_cap, NG_MAX(pkg.bytes, (size_t)64)));
    NG_CHECK(be->iface->copy_h2d_async(be, t->pkg_dev, pkg.base, pkg.bytes, LINK_SLOT));
    pkg.stats.h2d_bytes = (int64_t)pkg.bytes;
    ng__fetch_rebase(&view, &pkg, t->pkg_dev);
  }
  ng__fetch_stats_add(fstats, &pkg.stats);
  NG_CHECK(ng__train_step_prefetch(t->p.step, seed, &view, LINK_SLOT));
  /* The package and its host rows have landed before the first op that reads them; pkg_host
   * may change again once the embeddings' copy below has synchronized past these ops. */
  NG_CHECK(be->iface->wait_copy(be, LINK_SLOT));
  const float *agg0 = NULL, *self0 = NULL;
  NG_CHECK(ng__store_input(t->p.store, ng__model_input_aggr(t->p.ex->model), &view, L0->o.dropout,
                           ng__exec_input_drop_key(seed), LINK_SLOT, &agg0, &self0));
  NG_CHECK(ng__exec_forward(t->p.ex, &view.mb, agg0, self0, true, seed));
  /* The embeddings come to the host, where the decoder and its gradient run. */
  const size_t hb = (size_t)m * (size_t)t->dim * sizeof(float);
  NG_CHECK(grow((void **)&t->h, &t->h_cap, hb, "the batch's embeddings"));
  NG_CHECK(grow((void **)&t->dh, &t->dh_cap, hb, "the embeddings' gradient"));
  NG_CHECK(grow((void **)&t->scores, &t->scores_cap, (size_t)n * sizeof(float), "the scores"));
  NG_CHECK(be->iface->copy_d2h(be, t->h, t->p.ex->logits, hb));
  NG_CHECK(ng__link_score_rows(t, t->scores, t->h, t->pos_u, t->pos_v, n));
  pair_backward(t, t->h, t->pos_u, t->pos_v, n, n_pos, m, loss, correct);
  if (!isfinite(*loss))
    return ng__err(NG_ERR_NONFINITE,
                   "the link training loss is %g at epoch %lld iteration %lld; lower the learning "
                   "rate",
                   *loss, (long long)t->epochs, (long long)iter);
  NG_CHECK(ng__bk_reserve(be, &t->dlog_dev, &t->dlog_dev_cap, NG_MAX(hb, (size_t)64)));
  NG_CHECK(be->iface->copy_h2d(be, t->dlog_dev, t->dh, hb));
  NG_CHECK(ng__exec_backward(t->p.ex, &view.mb, t->dlog_dev));
  ng_opt_hp hp = t->p.step->hp;
  hp.step = ++t->p.step->steps;
  NG_CHECK(ng__exec_step(t->p.ex, &hp));
  if (t->mlp)
    mlp_step(t);
  return NG_OK;
}

ng_status ng_link_trainer_epoch(ng_epoch_stats *out, ng_link_trainer_t t) {
  NG_CHECK(ng__link_check(t));
  if (!out || out->size != sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_link_trainer_epoch: out is NULL or out->size is not %zu",
                   sizeof *out);
  const double t0 = ng__now();
  const int64_t n_train = t->info.train, k = t->lo.neg_per_pos;
  const int64_t batch = t->opts.batch > 0 ? NG_MIN(t->opts.batch, n_train) : n_train;
  int64_t iters = (n_train + batch - 1) / batch;
  if (t->epoch_iters > 0 && t->epoch_iters < iters)
    iters = t->epoch_iters;
  if (!t->order) {
    t->order = ng__malloc((size_t)n_train * sizeof *t->order, "the edge order");
    /* Pair rows: the pairs and at most one self pair per endpoint. */
    const size_t pairs = (size_t)batch * (size_t)(1 + k), rows = 3 * pairs;
    t->pairs = ng__malloc(pairs * sizeof *t->pairs, "the pairs");
    t->pos_u = ng__malloc(rows * sizeof *t->pos_u, "the pair rows");
    t->pos_v = ng__malloc(rows * sizeof *t->pos_v, "the pair rows");
    if (!t->order || !t->pairs || !t->pos_u || !t->pos_v)
      return NG_ERR_NOMEM;
    for (int64_t i = 0; i < n_train; i++)
      t->order[i] = i;
  }
  /* The epoch's order of positives: a shuffle of 0 .. train-1 that depends on (seed, epoch). */
  for (int64_t i = 0; i < n_train; i++)
    t->order[i] = i;
  ng__epoch_shuffle(t->order, t->order, n_train, ng_hash2(t->opts.seed, PURPOSE_EPOCH), t->epochs);
  const ng_link_pair *pos = t->arr[NG_LINK_ARR_TRAIN_POS].data;
  double loss_sum = 0.0;
  int64_t correct = 0, edges = 0, seen = 0;
  ng_fetch_stats fs = {0};
  ng_status st = NG_OK;
  for (int64_t it = 0; it < iters && st == NG_OK; it++) {
    const int64_t b0 = it * batch, nb = NG_MIN(batch, n_train - b0);
    for (int64_t j = 0; j < nb; j++)
      t->pairs[j] = pos[t->order[b0 + j]];
    const uint64_t seed = ng__iter_seed(t->opts.seed, t->epochs, it);
    draw_negatives(t, seed, nb);
    double l = 0.0;
    int64_t c = 0;
    st = link_iter(t, it, seed, nb * (1 + k), nb, &l, &c, &edges, &fs);
    loss_sum += l;
    correct += c;
    seen += nb * (1 + k);
    if (st == NG_OK && t->opts.progress &&
        t->opts.progress(t->opts.progress_ctx, "train", (double)(it + 1), (double)iters) != 0)
      st = ng__err(NG_ERR_INTERRUPTED, "link training stopped by the progress callback");
  }
  ng__trainer_params_changed(t->tr);
  NG_CHECK(st);
  const int64_t epoch = t->epochs++;
  const double secs = ng__now() - t0;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  s.epoch = epoch;
  s.iterations = iters;
  s.loss = loss_sum / (double)iters;
  s.train_acc = seen ? (double)correct / (double)seen : 0.0;
  s.seconds = secs;
  s.it_per_s = secs > 0 ? (double)iters / secs : 0.0;
  s.sampled_edges = edges;
  s.fetch = fs;
  *out = s;
  return NG_OK;
}

/* ---- checkpoints and the scoring of given pairs ---- */

ng_status ng_link_trainer_save(ng_link_trainer_t t, const char *path) {
  NG_CHECK(ng__link_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_link_trainer_save: no path");
  const ng_model_exec *ex = t->p.ex;
  const struct ng_model *m = ex->model;
  const size_t bytes = (size_t)m->n_params * sizeof(float);
  float *host = ng__malloc(3 * bytes, "a checkpoint");
  if (!host)
    return NG_ERR_NOMEM;
  ng_backend *be = t->p.be;
  /* The GNN exactly as a node checkpoint holds it: its parameters and the optimizer's states. */
  ng_status st = be->iface->copy_d2h(be, host, ex->params, bytes);
  if (st == NG_OK)
    st = be->iface->copy_d2h(be, host + m->n_params, ex->state1, bytes);
  if (st == NG_OK)
    st = be->iface->copy_d2h(be, host + 2 * m->n_params, ex->state2, bytes);
  const ng_ckpt_run run = {
      .epochs_done = t->epochs,
      .step = t->p.step->steps,
      .iteration = 0,
      .batch = t->opts.batch,
      .base_epochs = t->epochs,
      .base_step = t->p.step->steps,
      .optimizer = t->opts.optimizer,
      .seed = t->opts.seed,
  };
  const ng_link_dec dec = ng__link_trainer_dec(t);
  /* The view's description: the dataset's name, nodes and features, and its classes (1 when
   * the dataset has no labels); a link model's last layer is the embedding, not the classes. */
  if (st == NG_OK)
    st = ng__ckpt_write_link(path, m, host, t->opts.normalize, &t->view->info, &run, &dec);
  free(host);
  return st;
}

ng_status ng_link_trainer_load_weights(ng_link_trainer_t t, const char *path) {
  NG_CHECK(ng__link_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_link_trainer_load_weights: no path");
  const ng_model_exec *ex = t->p.ex;
  const struct ng_model *m = ex->model;
  ng_ckpt c;
  NG_CHECK(ng__ckpt_read(&c, path));
  float *host = NULL;
  ng_status st = NG_OK;
  if (!c.link.present)
    st = ng__err(NG_ERR_FORMAT,
                 "%s: a node-classification checkpoint; a link trainer loads the checkpoints of "
                 "ng_link_trainer_save (train --task link --checkpoint)",
                 path);
  else if (c.link.decoder != t->lo.decoder ||
           (t->lo.decoder == NG_LINK_DECODER_MLP && c.link.hidden != t->lo.mlp_hidden))
    st = ng__err(NG_ERR_FORMAT,
                 "%s: the checkpoint's decoder is %s (%lld hidden units), this trainer's %s (%d); "
                 "use the checkpoint's --decoder",
                 path, ng_link_decoder_name(c.link.decoder), (long long)c.link.hidden,
                 ng_link_decoder_name(t->lo.decoder), (int)t->lo.mlp_hidden);
  if (st == NG_OK)
    st = ng__ckpt_verify(&c, path, m, t->opts.normalize, &t->view->info, true);
  if (st == NG_OK && !(host = ng__malloc((size_t)m->n_params * sizeof(float), "a checkpoint")))
    st = NG_ERR_NOMEM;
  if (st == NG_OK)
    st = ng__ckpt_tensors(host, &c, path, m, false);
  if (st == NG_OK && t->mlp)
    st = ng__ckpt_link_mlp(t->mlp, &c, t->dim);
  if (st == NG_OK)
    st = t->p.be->iface->copy_h2d(t->p.be, ex->params, host, (size_t)m->n_params * sizeof(float));
  ng__trainer_params_changed(t->tr); /* even a failed load may have replaced some */
  free(host);
  ng__ckpt_close(&c);
  return st;
}
