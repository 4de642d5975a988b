/* Link prediction: training on edge mini-batches with negatives (docs/link-prediction.md); the
 * evaluation and the scoring of given pairs are in runtime/link_eval.c.
 *
 * The link trainer drives a node trainer's parts (ng__trainer_parts) and its pipeline over a
 * view of the dataset whose graph is the split's message-passing graph (links/indptr.npy,
 * indices.npy), so that no held-out edge is aggregated over. One iteration, as the pipeline
 * runs it (sched/pipeline.c): on a producer (a worker thread), the batch's positive pairs and
 * their negatives, whose endpoints, sorted and unique, are the targets of one sampled mini-batch
 * (make_targets, the plan's ng_target_hook; the sampler of node training, one seed set for both
 * ends), and the input layer's package by the worker group's cold-row path (BATCH, ZCOPY or
 * PARTIAL); on the device thread, in iteration order, the feature store finishes the package,
 * the GNN's forward pass gives each target's embedding, and on the host the decoder scores the
 * pairs and forms the gradient of the mean BCE with logits (pair_loss, the train step's
 * ng_host_loss), which flows back into the GNN through its backward pass.
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
/* Degree^0.75: word2vec's unigram smoothing, which the degree negatives follow. */
#define DEGREE_POWER 0.75

static ng_status make_targets(void *ctx, int producer, const ng_epoch_plan *p, int64_t i,
                              const int64_t **targets, int32_t *n_targets, const void **payload,
                              size_t *payload_bytes);
static ng_status pair_loss(void *ctx, int64_t iter, const void *payload, const float *h, int64_t m,
                           int64_t dim, float *dh, double *loss, int64_t *correct);

/* The gradient of the loss over the pairs' scores t->scores (labels: the first n_pos are 1)
 * into dh [targets, dim] (zeroed here) and, for the MLP, t->mlp_g. Serial, in pair order: the
 * sums do not depend on the thread count. Returns the mean loss and the correct count. */
static void pair_backward(ng_link_trainer_t t, const float *h, float *dh, const int32_t *u,
                          const int32_t *v, int64_t n, int64_t n_pos, int64_t n_targets,
                          double *loss, int64_t *correct) {
  const int64_t d = t->dim, H = t->lo.mlp_hidden;
  memset(dh, 0, (size_t)n_targets * (size_t)d * sizeof(float));
  if (t->mlp)
    memset(t->mlp_g, 0, (size_t)t->mlp_n * sizeof(float));
  float *hid = t->mlp ? t->mlp_g + t->mlp_n : NULL; /* scratch after the gradient */
  const ng_link_dec dec = ng__link_trainer_dec(t);  /* the MLP's forward, for its hidden units */
  double l = 0.0;
  int64_t ok = 0;
  /* The self pairs, rows [n_pos - n_self, n_pos), train but are not counted as correct: the
   * training accuracy is over the mini-batches' positives and negatives, as the epoch divides. */
  const int64_t n_self = t->lo.self_pairs ? n_targets : 0;
  for (int64_t i = 0; i < n; i++) {
    const int y = i < n_pos;
    const float x = t->scores[i];
    /* Positives and negatives weigh one half each, whatever K (GAE's pos_weight balance): with
     * one negative per positive this is the plain mean. */
    const double w = 0.5 / (double)(y ? n_pos : n - n_pos);
    l += w * ng__link_bce(x, y);
    ok += (i < n_pos - n_self || i >= n_pos) && (x > 0) == (y == 1);
    const float g = (float)((1.0 / (1.0 + exp(-(double)x)) - y) * w);
    const float *a = h + (int64_t)u[i] * d, *b = h + (int64_t)v[i] * d;
    float *da = dh + (int64_t)u[i] * d, *db = dh + (int64_t)v[i] * d;
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
  /* The node trainer's pipeline runs the iterations (its workers, ready ring and controller,
   * with the run's worker options), with the targets and the loss of link prediction handed
   * down as hooks (ng_link_trainer_epoch). Its workers sample on the CPU: the device
   * sampler's feed reads its targets from the plan's order, not from the hook. */
  ng_train_opts inner = o;
  inner.sampler = NG_SAMPLER_CPU;
  inner.batch = 0;
  inner.progress = NULL;
  NG_CHECK_GOTO(st, ng__trainer_create_link(&t->tr, t->view, model, &inner), fail);
  NG_CHECK_GOTO(st, ng__trainer_parts(&t->p, t->tr), fail);
  NG_CHECK_GOTO(st, ng_trainer_embed_dim(&t->dim, t->tr, -1), fail);
  t->pl = ng__trainer_pipeline(t->tr, NULL);
  t->n_prod = ng__pipeline_producers(t->pl);
  t->prod = ng__calloc((size_t)t->n_prod, sizeof *t->prod, "the link producers' buffers");
  if (!t->prod) {
    st = NG_ERR_NOMEM;
    goto fail;
  }
  t->targets = (ng_target_hook){.make = make_targets, .ctx = t};
  t->loss = (ng_host_loss){.loss = pair_loss, .ctx = t, .dim = t->dim};
  t->p.step->host_loss = &t->loss;
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
  ng_trainer_destroy(t->tr);
  for (int i = 0; t->prod && i < t->n_prod; i++) {
    free(t->prod[i].pairs);
    free(t->prod[i].seeds);
    free(t->prod[i].payload);
  }
  free(t->prod);
  ng_dataset_close(t->view);
  for (int i = 0; i < NG_LINK_ARR_COUNT_; i++)
    ng__npy_close(&t->arr[i]);
  free(t->labels);
  free(t->deg_cdf);
  free(t->iter_ms);
  free(t->scores);
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

/* ---- one iteration: its targets on a producer, its loss on the device thread ---- */

/* The payload of an iteration (ng_target_hook), behind its package in the staging slot: the
 * pairs' target rows, which the loss on the device thread reads. `u` and `v` [n] follow it:
 * the positives, then (with self_pairs) every target with itself, then the negatives. */
typedef struct {
  int64_t n;     /* pair rows */
  int64_t n_pos; /* the first n_pos are positives */
  int64_t m;     /* targets */
  int64_t pad;   /* the rows start 32 bytes in */
} link_payload;

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

/* Draws negatives of positives [0, n_pos) into pairs [n_pos, n_pos (1 + K)): positive j's come
 * from the stream ng_hash3(iteration seed, PURPOSE_NEG, j), whoever draws it. */
static void draw_negatives(ng_link_trainer_t t, ng_link_pair *pairs, uint64_t seed, int64_t n_pos,
                           int threads) {
  const int32_t k = t->lo.neg_per_pos;
  const int64_t nodes = t->ds->info.nodes;
  const double total = t->deg_cdf ? t->deg_cdf[nodes - 1] : 0.0;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t j = 0; j < n_pos; j++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(seed, PURPOSE_NEG, (uint64_t)j));
    for (int32_t q = 0; q < k; q++) {
      int64_t u = pairs[j].u, v;
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
      pairs[n_pos + j * k + q] = (ng_link_pair){u, v};
    }
  }
}

/* The pipeline's ng_target_hook (sched/pipeline_impl.h), on a producer (a worker thread, or the
 * device thread inline): iteration i's positives (the next B of the epoch's order) and their
 * negatives; their endpoints, sorted and unique, are the targets of the iteration's one sampled
 * mini-batch; the payload gives each pair the target rows of its two ends. Everything depends on
 * (seed, epoch, i) only, and the producer's buffers are its own. */
static ng_status make_targets(void *ctx, int producer, const ng_epoch_plan *p, int64_t i,
                              const int64_t **targets, int32_t *n_targets, const void **payload,
                              size_t *payload_bytes) {
  ng_link_trainer_t t = ctx;
  ng_link_producer *w = &t->prod[producer];
  int64_t begin;
  int32_t nb;
  ng__plan_slice(p, i, &begin, &nb);
  const int64_t k = t->lo.neg_per_pos, n = (int64_t)nb * (1 + k);
  NG_CHECK(grow((void **)&w->pairs, &w->pairs_cap, (size_t)n * sizeof *w->pairs, "the pairs"));
  NG_CHECK(grow((void **)&w->seeds, &w->seeds_cap, 2 * (size_t)n * sizeof *w->seeds, "the seeds"));
  const ng_link_pair *pos = t->arr[NG_LINK_ARR_TRAIN_POS].data;
  /* The epoch's order of the positives: a permutation of 0 .. train-1 that depends on (seed,
   * epoch), read position by position (ng_perm_at), so that no epoch starts with a shuffle of
   * every training edge. */
  const uint64_t key = ng_hash3(t->opts.seed, PURPOSE_EPOCH, (uint64_t)p->epoch);
  for (int64_t j = 0; j < nb; j++)
    w->pairs[j] = pos[ng_perm_at((uint64_t)(begin + j), (uint64_t)t->info.train, key)];
  /* Inline, the producer is the device thread and may spread the draws over its OpenMP
   * threads; a worker thread has one core. */
  draw_negatives(t, w->pairs, ng__iter_seed(p->seed, p->epoch, i), nb,
                 ng__pipeline_inline(t->pl) ? t->p.threads : 1);
  for (int64_t j = 0; j < n; j++) {
    w->seeds[2 * j] = w->pairs[j].u;
    w->seeds[2 * j + 1] = w->pairs[j].v;
  }
  const int64_t m = ng__sort_unique_i64(w->seeds, 2 * n);
  if (m > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "a link mini-batch of %lld endpoints is too large",
                   (long long)m);
  /* Rows of the pairs: the positives, then (with self_pairs) every target with itself as a
   * positive too, then the negatives. */
  const int64_t n_self = t->lo.self_pairs ? m : 0, rows = n + n_self;
  const size_t bytes = sizeof(link_payload) + 2 * (size_t)rows * sizeof(int32_t);
  NG_CHECK(grow(&w->payload, &w->payload_cap, bytes, "the pairs' rows"));
  link_payload *hd = w->payload;
  *hd = (link_payload){.n = rows, .n_pos = nb + n_self, .m = m};
  int32_t *u = (int32_t *)(hd + 1), *v = u + rows;
  for (int64_t j = 0; j < n; j++) {
    const int64_t at = j < nb ? j : j + n_self;
    u[at] = row_of(w->seeds, m, w->pairs[j].u);
    v[at] = row_of(w->seeds, m, w->pairs[j].v);
  }
  for (int64_t j = 0; j < n_self; j++)
    u[nb + j] = v[nb + j] = (int32_t)j;
  *targets = w->seeds;
  *n_targets = (int32_t)m;
  *payload = w->payload;
  *payload_bytes = bytes;
  return NG_OK;
}

/* The train step's ng_host_loss (sched/train_step_impl.h), on the device thread in iteration
 * order: the decoder scores the iteration's pairs from its targets' embeddings h, the loss's
 * gradient goes into dh, and the MLP decoder steps (its weights are read by the next
 * iteration's scores only, which come after this on the same thread). */
static ng_status pair_loss(void *ctx, int64_t iter, const void *payload, const float *h, int64_t m,
                           int64_t dim, float *dh, double *loss, int64_t *correct) {
  ng_link_trainer_t t = ctx;
  const link_payload *hd = payload;
  if (!hd || hd->m != m || dim != t->dim)
    return ng__err(NG_ERR_INTERNAL,
                   "link training: iteration %lld's pairs name %lld targets, its mini-batch has "
                   "%lld",
                   (long long)iter, hd ? (long long)hd->m : -1LL, (long long)m);
  const int32_t *u = (const int32_t *)(hd + 1), *v = u + hd->n;
  NG_CHECK(grow((void **)&t->scores, &t->scores_cap, (size_t)hd->n * sizeof(float), "the scores"));
  NG_CHECK(ng__link_score_rows(t, t->scores, h, u, v, hd->n));
  pair_backward(t, h, dh, u, v, hd->n, hd->n_pos, m, loss, correct);
  if (!isfinite(*loss))
    return ng__err(NG_ERR_NONFINITE,
                   "the link training loss is %g at epoch %lld iteration %lld; lower the learning "
                   "rate",
                   *loss, (long long)t->epochs, (long long)iter);
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
  NG_CHECK(grow((void **)&t->iter_ms, &t->iter_ms_cap, (size_t)iters * sizeof *t->iter_ms,
                "the iteration times"));
  /* The iterations run in the node trainer's pipeline (sched/pipeline.c): producers make each
   * one's targets and package ahead (make_targets, sampling, the cold-row path of the worker's
   * group), the device thread consumes them in order and forms each loss on the host
   * (pair_loss). The workers stop at the epoch's end, as the evaluation between epochs wants
   * the cores. The plan has no order: make_targets reads the epoch's permutation. */
  const ng_epoch_plan plan = {.order = NULL,
                              .n_train = n_train,
                              .batch = batch,
                              .epoch = t->epochs,
                              .first = 0,
                              .iters = iters,
                              .seed = t->opts.seed,
                              .targets = &t->targets};
  ng_progress prog;
  ng__progress_init(&prog, t->opts.progress, t->opts.progress_ctx);
  ng_epoch_tally ty = {
      .iter_ms = t->iter_ms, .last_done = ng__now(), .done = 0, .iters = iters, .prog = &prog};
  int workers[2] = {0, 0};
  double share = 0.0;
  const ng_status st = ng__pipeline_epoch(t->pl, &plan, NULL, t->p.step, &ty,
                                          t->p.ex->model->layers[0].o.dropout, workers, &share);
  ng__trainer_params_changed(t->tr);
  if (st != NG_OK) {
    if (st != NG_ERR_INTERRUPTED)
      ng__err_prefix("link training, epoch %lld", (long long)t->epochs);
    return st;
  }
  const int64_t epoch = t->epochs++;
  const double secs = ng__now() - t0;
  /* Pairs trained: every positive of the epoch's mini-batches and its K negatives. */
  const int64_t seen = NG_MIN(iters * batch, n_train) * (1 + k);
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  s.epoch = epoch;
  s.iterations = iters;
  s.loss = ty.loss_sum / (double)iters;
  s.train_acc = seen ? (double)ty.correct / (double)seen : 0.0;
  s.seconds = secs;
  s.it_per_s = secs > 0 ? (double)iters / secs : 0.0;
  s.sampled_edges = ty.edges;
  s.fetch = ty.fetch;
  s.workers[0] = workers[0];
  s.workers[1] = workers[1];
  s.device_share = share;
  ng__epoch_times(&s, ty.iter_ms, ty.n_iter_ms);
  *out = s;
  return NG_OK;
}
/* ---- checkpoints and the scoring of given pairs ---- */

ng_status ng_link_trainer_save(ng_link_trainer_t t, const char *path) {
  NG_CHECK(ng__link_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_link_trainer_save: no path");
  const struct ng_model *m = t->p.ex->model;
  /* The GNN exactly as a node checkpoint holds it: its parameters and the optimizer's states. */
  float *host = NULL;
  ng_status st = ng__trainer_copy_out(&host, t->tr);
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
