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

typedef struct {
  float s;
  int8_t pos;
} scored;

static int scored_desc(const void *a, const void *b) {
  const float x = ((const scored *)a)->s, y = ((const scored *)b)->s;
  return x > y ? -1 : x < y;
}

ng_status ng_link_metrics_compute(ng_link_metrics *out, const float *pos, const float *neg,
                                  int64_t n, int32_t k) {
  if (!out || out->size != sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_metrics_compute: out is NULL or out->size is not %zu", sizeof *out);
  if (!pos || !neg || n < 1 || k < 1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_link_metrics_compute: needs pos[n], neg[n * k] with n >= 1, k >= 1");
  const int64_t total = n + n * (int64_t)k;
  scored *all = ng__malloc((size_t)total * sizeof *all, "the scores to rank");
  if (!all)
    return NG_ERR_NOMEM;
  double loss = 0.0, mrr = 0.0;
  int64_t hits[3] = {0, 0, 0};
  const int at[3] = {10, 50, 100};
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(pos[i])) {
      free(all);
      return ng__err(NG_ERR_INVALID_ARG, "link metrics: positive score %lld is %g", (long long)i,
                     pos[i]);
    }
    int64_t above = 0, tied = 0;
    for (int32_t j = 0; j < k; j++) {
      const float s = neg[i * k + j];
      if (!isfinite(s)) {
        free(all);
        return ng__err(NG_ERR_INVALID_ARG, "link metrics: negative score [%lld, %d] is %g",
                       (long long)i, (int)j, s);
      }
      above += s > pos[i];
      tied += s == pos[i];
      all[n + i * k + j] = (scored){s, 0};
      loss += ng__link_bce(s, 0);
    }
    all[i] = (scored){pos[i], 1};
    loss += ng__link_bce(pos[i], 1);
    const double rank = 1.0 + (double)above + 0.5 * (double)tied;
    mrr += 1.0 / rank;
    for (int h = 0; h < 3; h++)
      hits[h] += rank <= at[h];
  }
  /* AUC and AP over the pooled scores, highest first; a run of tied scores is one threshold. */
  qsort(all, (size_t)total, sizeof *all, scored_desc);
  const double n_pos = (double)n, n_neg = (double)(n * (int64_t)k);
  double auc = 0.0, ap = 0.0, tp = 0.0, fp = 0.0;
  for (int64_t a = 0; a < total;) {
    int64_t b = a;
    double gp = 0.0, gn = 0.0;
    while (b < total && all[b].s == all[a].s) {
      gp += all[b].pos;
      gn += !all[b].pos;
      b++;
    }
    /* Positives of this run beat every negative below it and half of the run's. */
    auc += gp * ((n_neg - fp - gn) + 0.5 * gn);
    tp += gp;
    fp += gn;
    ap += (gp / n_pos) * (tp / (tp + fp));
    a = b;
  }
  free(all);
  out->auc = auc / (n_pos * n_neg);
  out->ap = ap;
  out->mrr = mrr / n_pos;
  out->hits10 = (double)hits[0] / n_pos;
  out->hits50 = (double)hits[1] / n_pos;
  out->hits100 = (double)hits[2] / n_pos;
  out->loss = loss / (double)total;
  out->positives = n;
  out->negatives = n * (int64_t)k;
  return NG_OK;
}

/* ---- evaluation ---- */

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
  /* The nodes needed, in id order, each once (a map over the nodes, not a sort of the pairs'
   * ends: linear in both), and their embeddings by layer-wise inference. */
  const int64_t total = n * (1 + k), nodes = t->ds->info.nodes;
  int32_t *row = ng__malloc((size_t)nodes * sizeof *row, "the evaluated nodes' rows");
  int32_t *u = ng__malloc((size_t)total * sizeof *u, "the pair rows");
  int32_t *v = ng__malloc((size_t)total * sizeof *v, "the pair rows");
  float *s = ng__malloc((size_t)total * sizeof *s, "the scores");
  int64_t *ids = NULL;
  float *h = NULL;
  ng_status st = NG_OK;
  if (!row || !u || !v || !s) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  memset(row, 0xff, (size_t)nodes * sizeof *row); /* -1: not needed */
  for (int64_t i = 0; i < n; i++)
    row[pos[i].u] = row[pos[i].v] = 0;
  for (int64_t i = 0; i < n * k; i++)
    row[neg[i].u] = row[neg[i].v] = 0;
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
  NG_CHECK_GOTO(st, ng_trainer_embed(h, t->tr, ids, m, &io), done);
  /* Row i: positive i; rows n + i k + j: its negatives. */
#pragma omp parallel for schedule(static) num_threads(t->p.threads)
  for (int64_t i = 0; i < n; i++) {
    u[i] = row[pos[i].u];
    v[i] = row[pos[i].v];
    for (int64_t j = 0; j < k; j++) {
      u[n + i * k + j] = row[neg[i * k + j].u];
      v[n + i * k + j] = row[neg[i * k + j].v];
    }
  }
  NG_CHECK_GOTO(st, ng__link_score_rows(t, s, h, u, v, total), done);
  ng_link_metrics r = NG_LINK_METRICS_INIT;
  NG_CHECK_GOTO(st, ng_link_metrics_compute(&r, s, s + n, n, (int32_t)k), done);
  *out = r;
done:
  free(h);
  free(ids);
  free(s);
  free(v);
  free(u);
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
