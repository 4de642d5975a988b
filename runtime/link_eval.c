/* Link prediction's evaluation: the metrics (AUC, AP, MRR, Hits@K) of scored pairs, the held-out
 * splits' evaluation from layer-wise embeddings, and the scoring of given pairs
 * (docs/link-prediction.md, "Evaluation"). */
#include "dataset_impl.h"
#include "link_trainer_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

ng_status ng__link_check(ng_link_trainer_t t) {
  if (!t)
    return ng__err(NG_ERR_INVALID_ARG, "link trainer handle is NULL");
  if (t->magic != NG_LINK_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "link trainer handle is not a live trainer (destroyed?)");
  return NG_OK;
}

/* ---- metrics ---- */

/* Positives per block of the per-positive sums (loss, MRR, Hits): blocks are summed in order, so
 * the metrics' bits do not depend on the thread count. */
#define METRIC_BLOCK 1024
/* Positives per block of evaluation's scoring: with their negatives, a block's pair rows are a
 * few hundred KiB per thread. */
#define SCORE_BLOCK 256

static int float_desc(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x > y ? -1 : x < y;
}

/* The first index in p[0, m) (descending) whose value is <= s; m when none is. */
static int64_t first_not_above(const float *p, int64_t m, float s) {
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (p[mid] > s)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* ng_link_metrics_compute on up to `threads` OpenMP threads (0: OpenMP's default); the figures
 * do not depend on it. */
static ng_status metrics(ng_link_metrics *out, const float *pos, const float *neg, int64_t n,
                         int32_t k, int threads) {
  if (threads < 1)
    threads = omp_get_max_threads();
  if (!out || out->size != sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_metrics_compute: out is NULL or out->size is not %zu", sizeof *out);
  if (!pos || !neg || n < 1 || k < 1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_metrics_compute: needs pos[n], neg[n * k] with n >= 1, k >= 1");
  const int64_t n_blocks = (n + METRIC_BLOCK - 1) / METRIC_BLOCK;
  /* Per block: loss, reciprocal ranks, Hits@10, @50, @100, and whether a score is not finite. */
  double *blk = ng__malloc((size_t)n_blocks * 6 * sizeof *blk, "the metrics' partial sums");
  float *p = ng__malloc((size_t)n * sizeof *p, "the positive scores, sorted");
  int64_t *bin = NULL, *eq = NULL;
  ng_status st = NG_OK;
  if (!blk || !p) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  /* MRR and Hits@K need each positive's own negatives only; the loss every score once. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (n_blocks > 1)
  for (int64_t b = 0; b < n_blocks; b++) {
    const int at[3] = {10, 50, 100};
    double loss = 0.0, rr = 0.0, hits[3] = {0, 0, 0}, bad = 0.0;
    const int64_t end = NG_MIN(n, (b + 1) * METRIC_BLOCK);
    for (int64_t i = b * METRIC_BLOCK; i < end; i++) {
      const float x = pos[i];
      int64_t above = 0, tied = 0;
      bad += !isfinite(x);
      for (int64_t j = 0; j < k; j++) {
        const float s = neg[i * k + j];
        bad += !isfinite(s);
        above += s > x;
        tied += s == x;
        loss += ng__link_bce(s, 0);
      }
      loss += ng__link_bce(x, 1);
      const double rank = 1.0 + (double)above + 0.5 * (double)tied;
      rr += 1.0 / rank;
      for (int h = 0; h < 3; h++)
        hits[h] += rank <= at[h];
      p[i] = x == 0.0f ? 0.0f : x; /* -0 is +0: one threshold */
    }
    double *o = blk + b * 6;
    o[0] = loss;
    o[1] = rr;
    o[2] = hits[0];
    o[3] = hits[1];
    o[4] = hits[2];
    o[5] = bad;
  }
  double loss = 0.0, mrr = 0.0, hits[3] = {0, 0, 0};
  for (int64_t b = 0; b < n_blocks; b++) {
    const double *o = blk + b * 6;
    if (o[5] > 0) {
      /* The first score that is not finite, found again in order for the message. */
      for (int64_t i = b * METRIC_BLOCK; i < NG_MIN(n, (b + 1) * METRIC_BLOCK); i++) {
        if (!isfinite(pos[i])) {
          st = ng__err(NG_ERR_INVALID_ARG, "link metrics: positive score %lld is %g", (long long)i,
                       pos[i]);
          goto done;
        }
        for (int32_t j = 0; j < k; j++)
          if (!isfinite(neg[i * k + j])) {
            st = ng__err(NG_ERR_INVALID_ARG, "link metrics: negative score [%lld, %d] is %g",
                         (long long)i, (int)j, neg[i * k + j]);
            goto done;
          }
      }
    }
    loss += o[0];
    mrr += o[1];
    for (int h = 0; h < 3; h++)
      hits[h] += o[2 + h];
  }
  /* AUC and AP over the pooled scores, highest first, a run of tied scores being one threshold.
   * They need, for each distinct positive score p_j (descending), the negatives above it and the
   * negatives equal to it, not the order of the negatives among themselves: the positives are
   * sorted (n, not n (1 + k), scores) and each negative is binned by a binary search. The sums
   * below are those of a walk over all scores sorted, in the same order (runs of negatives only
   * add zeros to them), so the figures are the bits of a full sort's. */
  qsort(p, (size_t)n, sizeof *p, float_desc);
  /* bin[j]: negatives above p[j] and below p[j - 1] (bin[m]: below every positive); eq[j]:
   * negatives equal to p[j]; gp[j]: positives equal to p[j]. Integer counts: the same whatever
   * the threads' interleaving. */
  bin = ng__calloc((size_t)n + 1, sizeof *bin, "the negatives' bins");
  eq = ng__calloc((size_t)n * 2, sizeof *eq, "the ties of the positive scores");
  if (!bin || !eq) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  int64_t *gp = eq + n;
  int64_t m = 0; /* distinct positive scores */
  for (int64_t i = 0; i < n; i++) {
    if (i == 0 || p[i] != p[m - 1])
      p[m++] = p[i];
    gp[m - 1]++;
  }
  const int64_t total_neg = n * (int64_t)k;
#pragma omp parallel for schedule(static) num_threads(threads) if (total_neg > 65536)
  for (int64_t i = 0; i < total_neg; i++) {
    const float s = neg[i];
    const int64_t j = first_not_above(p, m, s);
    if (j < m && p[j] == s) {
#pragma omp atomic
      eq[j]++;
    } else {
#pragma omp atomic
      bin[j]++;
    }
  }
  const double n_pos = (double)n, n_neg = (double)total_neg;
  double auc = 0.0, ap = 0.0, tp = 0.0, fp = 0.0;
  for (int64_t j = 0; j < m; j++) {
    fp += (double)bin[j]; /* the runs of negatives above this one */
    const double g_p = (double)gp[j], g_n = (double)eq[j];
    /* Positives of this run beat every negative below it and half of the run's. */
    auc += g_p * ((n_neg - fp - g_n) + 0.5 * g_n);
    tp += g_p;
    fp += g_n;
    ap += (g_p / n_pos) * (tp / (tp + fp));
  }
  out->auc = auc / (n_pos * n_neg);
  out->ap = ap;
  out->mrr = mrr / n_pos;
  out->hits10 = hits[0] / n_pos;
  out->hits50 = hits[1] / n_pos;
  out->hits100 = hits[2] / n_pos;
  out->loss = loss / (n_pos + n_neg);
  out->positives = n;
  out->negatives = total_neg;
done:
  free(eq);
  free(bin);
  free(p);
  free(blk);
  return st;
}

ng_status ng_link_metrics_compute(ng_link_metrics *out, const float *pos, const float *neg,
                                  int64_t n, int32_t k) {
  return metrics(out, pos, neg, n, k, 0);
}

/* ---- evaluation ---- */

/* The pairs of positives [i0, i1) into u, v (positives first, then their negatives in order),
 * their ends as rows of the device's table: rows of h (row[x]) when `loc` is NULL, else the
 * chunk's rows loc[row[x]]. */
static void block_rows(int32_t *u, int32_t *v, const int32_t *row, const int32_t *loc,
                       const ng_link_pair *pos, const ng_link_pair *neg, int64_t i0, int64_t i1,
                       int64_t k, int threads) {
  const int64_t nb = i1 - i0, total = nb * (1 + k);
#pragma omp parallel for schedule(static) num_threads(threads) if (total > 65536)
  for (int64_t i = 0; i < total; i++) {
    const ng_link_pair *q = i < nb ? &pos[i0 + i] : &neg[i0 * k + (i - nb)];
    u[i] = loc ? loc[row[q->u]] : row[q->u];
    v[i] = loc ? loc[row[q->v]] : row[q->v];
  }
}

/* The host's scoring (the CPU backend, and the MLP decoder on any backend) into s: s[i]
 * positive i, s[n + i k + j] its negatives, from the embeddings h of the evaluated rows `row`
 * (global id -> row of h). */
static ng_status score_on_host(const ng_link_dec *dec, float *s, const float *h, const int32_t *row,
                               const ng_link_pair *pos, const ng_link_pair *neg, int64_t n,
                               int64_t k, int threads) {
  ng_status st = NG_OK;
  /* By blocks of positives on every thread. Each block makes its pairs' rows and scores them with
   * the one scoring function of training and serving (ng__link_score, one thread each): a pair's
   * bits do not depend on the block, and no pair-sized array of rows is made. */
  const int64_t n_blocks = (n + SCORE_BLOCK - 1) / SCORE_BLOCK;
#pragma omp parallel num_threads(threads)
  {
    int32_t *u = malloc((size_t)SCORE_BLOCK * (size_t)(1 + k) * 2 * sizeof *u);
    int32_t *v = u ? u + SCORE_BLOCK * (1 + k) : NULL;
    if (!u) {
#pragma omp critical
      st = ng__err(NG_ERR_NOMEM, "link evaluation: out of memory for a block's pair rows");
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < n_blocks; b++) {
      if (!u)
        continue;
      const int64_t i0 = b * SCORE_BLOCK, nb = NG_MIN(n, i0 + SCORE_BLOCK) - i0;
      block_rows(u, v, row, NULL, pos, neg, i0, i0 + nb, k, 1);
      int32_t *nu = u + nb, *nv = v + nb;
      ng_status bs = ng__link_score(dec, s + i0, h, u, v, nb, 1);
      if (bs == NG_OK)
        bs = ng__link_score(dec, s + n + i0 * k, h, nu, nv, nb * k, 1);
      if (bs != NG_OK) {
#pragma omp critical
        st = bs;
      }
    }
    free(u);
  }
  return st;
}

/* ---- scoring on the device ---- */

/* Pairs per launch of the device's scoring (a block of positives with their negatives): 3 MiB
 * of pair rows and scores, and about as many threads as an H200 holds at once. */
#define DEV_BLOCK_PAIRS (1 << 18)

/* Whether evaluation scores its pairs with the backend's pair_dot: the dot decoder on a device
 * backend. The MLP decoder is scored on the host (its weights are host memory and it is not the
 * ogbl protocol's decoder); so is every decoder on the CPU backend, whose scoring already runs
 * where the embeddings are. For tests, NG_LINK_EVAL_DEVICE=1 takes the device path on a
 * host-memory backend too (its blocks and chunks run without a GPU) and NG_LINK_EVAL_DEVICE=0 the
 * host's on a device: the bits are the same either way. */
static bool eval_on_device(ng_link_trainer_t t) {
  const ng_backend *be = t->p.be;
  if (t->lo.decoder != NG_LINK_DECODER_DOT || !be || !be->iface->pair_dot)
    return false;
  const char *env = getenv("NG_LINK_EVAL_DEVICE");
  if (env && strcmp(env, "0") == 0)
    return false;
  return !be->iface->host_memory || (env && strcmp(env, "1") == 0);
}

/* Adds the rows of the ends of positive i and its negatives to the chunk (loc[r]: r's row in
 * the chunk, -1 when absent; list[0 .. *used): the chunk's rows of h, in order). False, with the
 * chunk as it was, when they would pass `cap` rows. */
static bool chunk_add(int32_t *loc, int32_t *list, int64_t *used, int64_t cap, const int32_t *row,
                      const ng_link_pair *pos, const ng_link_pair *neg, int64_t i, int64_t k) {
  const int64_t before = *used;
  for (int64_t j = -1; j < k; j++) {
    const ng_link_pair *q = j < 0 ? &pos[i] : &neg[i * k + j];
    const int32_t ends[2] = {row[q->u], row[q->v]};
    for (int e = 0; e < 2; e++) {
      if (loc[ends[e]] >= 0)
        continue;
      if (*used == cap) {
        for (int64_t x = before; x < *used; x++)
          loc[list[x]] = -1;
        *used = before;
        return false;
      }
      loc[ends[e]] = (int32_t)*used;
      list[(*used)++] = ends[e];
    }
  }
  return true;
}

/* The dot decoder's scores on the device (pair_dot, whose bits are ng__link_score's): the
 * embeddings h [m, dim] (host) go to device memory, then, block by block of positives (at most
 * DEV_BLOCK_PAIRS pairs with their negatives), the pairs' rows go up, pair_dot scores them and
 * the scores come back into s.
 *
 * How much goes up at once: the device's free memory (mem_info) less an eighth of it (other
 * queues' work, the allocator's rounding), or NG_LINK_EVAL_DEVICE_BYTES when set (tests), less
 * the block's buffers, is the budget. When the m rows fit in it, they go up once and every block
 * addresses them. Otherwise each block is also a chunk of at most budget / (dim * 4) distinct
 * rows: positives join the block in order while their ends' rows fit, the block's rows are
 * gathered on the host and go up, and its pairs address them. A score does not depend on where
 * its rows lie, so the bits are the same either way. */
static ng_status score_on_device(ng_link_trainer_t t, float *s, const float *h, int64_t m,
                                 const int32_t *row, const ng_link_pair *pos,
                                 const ng_link_pair *neg, int64_t n, int64_t k) {
  ng_backend *be = t->p.be;
  const struct ng_backend_i *bi = be->iface;
  const int64_t dim = t->dim, per = 1 + k;
  const int threads = NG_MAX(t->p.threads, 1);
  const int64_t bpos = NG_MAX((int64_t)1, DEV_BLOCK_PAIRS / per), cap_pairs = bpos * per;
  const size_t row_bytes = (size_t)dim * sizeof(float);
  const size_t buf_bytes = (size_t)cap_pairs * (2 * sizeof(int32_t) + sizeof(float));
  size_t free_b = 0, avail = 0;
  const char *env = getenv("NG_LINK_EVAL_DEVICE_BYTES");
  if (env && *env) {
    char *end = NULL;
    const unsigned long long b = strtoull(env, &end, 10);
    if (*end)
      return ng__err(NG_ERR_INVALID_ARG,
                     "NG_LINK_EVAL_DEVICE_BYTES=%s: not a byte count; unset it or give bytes", env);
    free_b = avail = (size_t)b;
  } else {
    NG_CHECK(bi->mem_info(be, &free_b, NULL));
    avail = free_b - free_b / 8;
  }
  const size_t budget = avail > buf_bytes ? avail - buf_bytes : 0;
  const bool whole = (size_t)m <= budget / row_bytes;
  /* Rows of a chunk: what the budget holds, and no more than a block's pairs can name. */
  const int64_t cap_rows = whole ? m : NG_MIN((int64_t)(budget / row_bytes), 2 * cap_pairs);
  if (!whole && cap_rows < 2 * per) /* a chunk holds at least one positive's rows */
    return ng__err(NG_ERR_NOMEM,
                   "link evaluation: %zu MiB of device memory free, too little for the rows of "
                   "one positive and its %lld negatives (%zu KiB) with the scoring's buffers; "
                   "free device memory (a smaller hot tier) or evaluate on the CPU",
                   free_b >> 20, (long long)k, (size_t)(2 * per) * row_bytes >> 10);
  float *d_h = NULL, *d_s = NULL, *hs = NULL;
  int32_t *d_u = NULL, *d_v = NULL, *hu = NULL, *loc = NULL, *list = NULL;
  ng_status st = NG_OK;
  NG_CHECK_GOTO(st, bi->alloc(be, (void **)&d_h, (size_t)cap_rows * row_bytes), done);
  NG_CHECK_GOTO(st, bi->alloc(be, (void **)&d_u, (size_t)cap_pairs * sizeof *d_u), done);
  NG_CHECK_GOTO(st, bi->alloc(be, (void **)&d_v, (size_t)cap_pairs * sizeof *d_v), done);
  NG_CHECK_GOTO(st, bi->alloc(be, (void **)&d_s, (size_t)cap_pairs * sizeof *d_s), done);
  NG_CHECK_GOTO(st, bi->host_alloc(be, (void **)&hu, (size_t)cap_pairs * 2 * sizeof *hu), done);
  int32_t *hv = hu + cap_pairs;
  if (whole) {
    NG_CHECK_GOTO(st, bi->copy_h2d(be, d_h, h, (size_t)m * row_bytes), done);
  } else {
    loc = ng__malloc((size_t)m * sizeof *loc, "the evaluated rows' places in a chunk");
    list = ng__malloc((size_t)cap_rows * sizeof *list, "a chunk's rows");
    if (!loc || !list) {
      st = NG_ERR_NOMEM;
      goto done;
    }
    memset(loc, 0xff, (size_t)m * sizeof *loc);
    NG_CHECK_GOTO(st, bi->host_alloc(be, (void **)&hs, (size_t)cap_rows * row_bytes), done);
  }
  for (int64_t i0 = 0; i0 < n;) {
    int64_t i1 = NG_MIN(n, i0 + bpos), used = 0;
    if (!whole) {
      /* cap_rows >= 2 (1 + k) rows: the first positive always fits. */
      i1 = i0;
      while (i1 < n && i1 - i0 < bpos &&
             chunk_add(loc, list, &used, cap_rows, row, pos, neg, i1, k))
        i1++;
#pragma omp parallel for schedule(static) num_threads(threads) if (used * dim > 65536)
      for (int64_t x = 0; x < used; x++)
        memcpy(hs + x * dim, h + (int64_t)list[x] * dim, row_bytes);
      NG_CHECK_GOTO(st, bi->copy_h2d(be, d_h, hs, (size_t)used * row_bytes), done);
    }
    const int64_t nb = i1 - i0, np = nb * per;
    block_rows(hu, hv, row, loc, pos, neg, i0, i1, k, threads);
    NG_CHECK_GOTO(st, bi->copy_h2d(be, d_u, hu, (size_t)np * sizeof *hu), done);
    NG_CHECK_GOTO(st, bi->copy_h2d(be, d_v, hv, (size_t)np * sizeof *hv), done);
    NG_CHECK_GOTO(st, bi->pair_dot(be, d_s, d_h, d_u, d_v, np, dim), done);
    NG_CHECK_GOTO(st, bi->copy_d2h(be, s + i0, d_s, (size_t)nb * sizeof *s), done);
    if (k > 0)
      NG_CHECK_GOTO(st, bi->copy_d2h(be, s + n + i0 * k, d_s + nb, (size_t)(nb * k) * sizeof *s),
                    done);
    for (int64_t x = 0; x < used; x++)
      loc[list[x]] = -1;
    i0 = i1;
  }
done:
  free(list);
  free(loc);
  bi->host_free(be, hs);
  bi->host_free(be, hu);
  bi->free(be, d_s);
  bi->free(be, d_v);
  bi->free(be, d_u);
  bi->free(be, d_h);
  return st;
}

ng_status ng_link_trainer_evaluate(ng_link_metrics *out, ng_link_trainer_t t, ng_split split) {
  NG_CHECK(ng__link_check(t));
  if (!out || out->size != sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_trainer_evaluate: out is NULL or out->size is not %zu", sizeof *out);
  if (split != NG_SPLIT_VAL && split != NG_SPLIT_TEST)
    return ng__err(NG_ERR_INVALID_ARG,
                   "link evaluation: split val or test (the training edges have no fixed "
                   "negatives)");
  const int pa = split == NG_SPLIT_VAL ? NG_LINK_ARR_VAL_POS : NG_LINK_ARR_TEST_POS;
  const int64_t n = t->arr[pa].hdr.shape[0], k = t->info.neg_per_pos;
  if (n == 0)
    return ng__err(NG_ERR_INVALID_ARG, "link evaluation: the %s split holds no edges",
                   split == NG_SPLIT_VAL ? "val" : "test");
  const ng_link_pair *pos = t->arr[pa].data, *neg = t->arr[pa + 1].data;
  const int threads = NG_MAX(t->p.threads, 1);
  /* The nodes needed, in id order, each once (a map over the nodes, not a sort of the pairs'
   * ends: linear in both), and their embeddings by layer-wise inference. Memory: this map
   * (4 B a node), the ids (8 B a needed node), the embeddings (dim floats a needed node) and
   * the scores (4 B a pair); docs/link-prediction.md, "Memory". */
  const int64_t total = n * (1 + k), nodes = t->ds->info.nodes;
  int32_t *row = ng__malloc((size_t)nodes * sizeof *row, "the evaluated nodes' rows");
  float *s = ng__malloc((size_t)total * sizeof *s, "the scores");
  int64_t *ids = NULL;
  float *h = NULL;
  ng_status st = NG_OK;
  if (!row || !s) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  memset(row, 0xff, (size_t)nodes * sizeof *row); /* -1: not needed */
  /* Every writer stores the same 0; relaxed atomic stores make that a defined program. */
#pragma omp parallel for schedule(static) num_threads(threads) if (total > 65536)
  for (int64_t i = 0; i < total; i++) {
    const ng_link_pair *q = i < n ? &pos[i] : &neg[i - n];
    __atomic_store_n(&row[q->u], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&row[q->v], 0, __ATOMIC_RELAXED);
  }
  int64_t m = 0;
  for (int64_t x = 0; x < nodes; x++)
    m += row[x] == 0;
  ids = ng__malloc((size_t)m * sizeof *ids, "the evaluated nodes");
  h = ng__malloc((size_t)m * (size_t)t->dim * sizeof *h, "the evaluated embeddings");
  if (!ids || !h) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  m = 0;
  for (int64_t x = 0; x < nodes; x++)
    if (row[x] == 0) {
      ids[m] = x;
      row[x] = (int32_t)m++;
    }
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  io.progress = t->opts.progress;
  io.progress_ctx = t->opts.progress_ctx;
  /* The ids are sorted and distinct: inference writes h in place (runtime/infer.c). */
  NG_CHECK_GOTO(st, ng_trainer_embed(h, t->tr, ids, m, &io), done);
  free(ids);
  ids = NULL;
  /* Scores: s[i] positive i, s[n + i k + j] its negatives. */
  const ng_link_dec dec = ng__link_trainer_dec(t);
  if (eval_on_device(t))
    st = score_on_device(t, s, h, m, row, pos, neg, n, k);
  else
    st = score_on_host(&dec, s, h, row, pos, neg, n, k, threads);
  if (st != NG_OK)
    goto done;
  free(h);
  h = NULL;
  ng_link_metrics r = NG_LINK_METRICS_INIT;
  NG_CHECK_GOTO(st, metrics(&r, s, s + n, n, (int32_t)k, threads), done);
  *out = r;
done:
  free(h);
  free(ids);
  free(s);
  free(row);
  return st;
}

/* ---- the scoring of given pairs ---- */

ng_status ng_link_trainer_score(float *scores, ng_link_trainer_t t, const int64_t *src,
                                const int64_t *dst, int64_t n) {
  NG_CHECK(ng__link_check(t));
  if (n < 1 || !scores || !src || !dst)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_trainer_score: needs scores[n], src[n] and dst[n] with n >= 1");
  const int64_t nodes = t->ds->info.nodes;
  for (int64_t i = 0; i < n; i++)
    if (src[i] < 0 || src[i] >= nodes || dst[i] < 0 || dst[i] >= nodes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_link_trainer_score: pair %lld is (%lld, %lld); node ids are 0 .. %lld",
                     (long long)i, (long long)src[i], (long long)dst[i], (long long)nodes - 1);
  /* The sources' embeddings, then the destinations' (ng_trainer_embed takes repeats), by
   * full-neighbour layer-wise inference over the message-passing graph, as evaluation does. */
  int64_t *ids = ng__malloc(2 * (size_t)n * sizeof *ids, "the pairs' ends");
  int32_t *u = ng__malloc(2 * (size_t)n * sizeof *u, "the pair rows");
  float *h = ng__malloc(2 * (size_t)n * (size_t)t->dim * sizeof *h, "the pairs' embeddings");
  ng_status st = NG_OK;
  if (!ids || !u || !h || 2 * n > INT32_MAX) {
    st = !ids || !u || !h ? NG_ERR_NOMEM
                          : ng__err(NG_ERR_INVALID_ARG, "ng_link_trainer_score: too many pairs");
    goto done;
  }
  memcpy(ids, src, (size_t)n * sizeof *ids);
  memcpy(ids + n, dst, (size_t)n * sizeof *ids);
  for (int64_t i = 0; i < 2 * n; i++)
    u[i] = (int32_t)i;
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  io.progress = t->opts.progress;
  io.progress_ctx = t->opts.progress_ctx;
  NG_CHECK_GOTO(st, ng_trainer_embed(h, t->tr, ids, 2 * n, &io), done);
  st = ng__link_score_rows(t, scores, h, u, u + n, n);
done:
  free(h);
  free(u);
  free(ids);
  return st;
}
