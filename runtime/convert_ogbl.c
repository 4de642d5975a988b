/* OGB link-property folders (ogbl-collab, ogbl-ddi, ogbl-ppa, ogbl-citation2, as the ogb package
 * unpacks them): the graph and the features as the node-property converter reads them, no
 * labels, and the link split from plain files (docs/convert.md, "OGB link-property folders"):
 *   split/<scheme>/{train,valid,test}/<key>.npy, one array per key of OGB's split dict:
 *     edge [n, 2] and edge_neg [m, 2]                          (collab, ddi, ppa)
 *     source_node [n], target_node [n], target_node_neg [n, K] (citation2)
 * OGB ships the split as torch pickles (train.pt, ...), which C cannot read: without the plain
 * files the graph converts alone and the command says to run split-edges. The split is written
 * with runtime/link_split.c's writers into the output's links/ folder (docs/dataset-format.md,
 * "Link splits"), inside the temporary output folder, so it appears with the dataset or not at
 * all. */
#include "convert_impl.h"
#include "link_impl.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char NODE_COUNT_FILE[] = "raw/num-node-list.csv.gz";
/* OGB's names of the three parts of a split, and the links format's. */
static const char *const PART[3] = {"train", "valid", "test"};

/* One part of the split as read: positives in OGB's orientation (source, target) and its
 * negatives, either K per positive (target_node_neg) or a pool of m pairs that belong to no
 * positive in particular (edge_neg). */
typedef struct {
  ng_link_pair *pos;
  int64_t n;
  ng_link_pair *neg; ///< [n, k] (grouped) or [m] (pool)
  int64_t k, m;      ///< k > 0: grouped; else a pool of m
} part;

static void part_free(part *p) {
  free(p->pos);
  free(p->neg);
  memset(p, 0, sizeof *p);
}

/* An array of a part, key.npy in `dir`: *found false when the file is not there. Integer arrays
 * only (torch's int64, or int32), whose every entry is a node id. */
static ng_status map_key(ng_npy *out, bool *found, const char *dir, const char *key,
                         int64_t nodes) {
  memset(out, 0, sizeof *out);
  char name[64];
  snprintf(name, sizeof name, "%s.npy", key);
  char *path = ng__path_join(dir, name);
  if (!path)
    return NG_ERR_NOMEM;
  *found = ng__file_exists(path);
  ng_status st = NG_OK;
  if (!*found)
    goto done;
  NG_CHECK_GOTO(st, ng__npy_map(out, path, false), done);
  const ng_npy_header *h = &out->hdr;
  if (h->dtype != NG_DTYPE_I64 && h->dtype != NG_DTYPE_I32) {
    st = ng__err(NG_ERR_FORMAT, "%s: dtype %s; node ids are int64 (or int32)", path,
                 ng__dtype_name(h->dtype));
    goto done;
  }
  const int64_t cnt = ng__npy_count(h), cols = h->ndim > 1 ? h->shape[1] : 1;
  for (int64_t i = 0; i < cnt; i++) {
    const int64_t v = h->dtype == NG_DTYPE_I64 ? ((const int64_t *)out->data)[i]
                                               : ((const int32_t *)out->data)[i];
    if (v < 0 || v >= nodes) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s: row %lld, column %lld: node id %lld is out of range: %s gives %lld "
                   "nodes (ids 0 to %lld)",
                   path, (long long)(i / cols), (long long)(i % cols), (long long)v,
                   NODE_COUNT_FILE, (long long)nodes, (long long)nodes - 1);
      goto done;
    }
  }
done:
  if (st != NG_OK)
    ng__npy_close(out);
  free(path);
  return st;
}

static int64_t id_at(const ng_npy *a, int64_t i) {
  return a->hdr.dtype == NG_DTYPE_I64 ? ((const int64_t *)a->data)[i]
                                      : ((const int32_t *)a->data)[i];
}

enum { SHAPE_TEXT = 96 };
/* "[5, 3]" into s[SHAPE_TEXT], for messages. */
static const char *shape_str(const ng_npy_header *h, char *s) {
  return ng__shape_text(s, SHAPE_TEXT, h->ndim, h->shape);
}

/* Rows of an [r, 2] array as pairs. */
static ng_status pairs_of(ng_link_pair **out, const ng_npy *a, const char *what) {
  const int64_t r = a->hdr.shape[0];
  *out = ng__malloc((size_t)NG_MAX(r, 1) * sizeof **out, what);
  if (!*out)
    return NG_ERR_NOMEM;
  for (int64_t i = 0; i < r; i++)
    (*out)[i] = (ng_link_pair){id_at(a, 2 * i), id_at(a, 2 * i + 1)};
  return NG_OK;
}

/* Reads the part in folder `dir` (`with_neg`: valid and test, which carry negatives). */
static ng_status read_part(part *p, const char *dir, bool with_neg, int64_t nodes) {
  enum { EDGE, EDGE_NEG, SRC, DST, DST_NEG, KEYS };
  static const char *const KEY[KEYS] = {"edge", "edge_neg", "source_node", "target_node",
                                        "target_node_neg"};
  ng_npy a[KEYS];
  bool has[KEYS];
  char s0[SHAPE_TEXT], s1[SHAPE_TEXT];
  memset(a, 0, sizeof a);
  memset(p, 0, sizeof *p);
  ng_status st = NG_OK;
  for (int i = 0; i < KEYS; i++)
    NG_CHECK_GOTO(st, map_key(&a[i], &has[i], dir, KEY[i], nodes), done);
  if (has[EDGE]) {
    const ng_npy_header *h = &a[EDGE].hdr;
    if (h->ndim != 2 || h->shape[1] != 2) {
      st = ng__err(NG_ERR_FORMAT, "%s/edge.npy: shape %s; expected [n, 2], one edge per row", dir,
                   shape_str(h, s0));
      goto done;
    }
    p->n = h->shape[0];
    NG_CHECK_GOTO(st, pairs_of(&p->pos, &a[EDGE], "the split's positive edges"), done);
  } else if (has[SRC] && has[DST]) {
    const ng_npy_header *hs = &a[SRC].hdr, *ht = &a[DST].hdr;
    if (hs->ndim != 1 || ht->ndim != 1 || hs->shape[0] != ht->shape[0]) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s: source_node.npy has shape %s and target_node.npy %s; expected two "
                   "arrays [n] of the same n",
                   dir, shape_str(hs, s0), shape_str(ht, s1));
      goto done;
    }
    p->n = hs->shape[0];
    p->pos = ng__malloc((size_t)NG_MAX(p->n, 1) * sizeof *p->pos, "the split's positive edges");
    if (!p->pos) {
      st = NG_ERR_NOMEM;
      goto done;
    }
    for (int64_t i = 0; i < p->n; i++)
      p->pos[i] = (ng_link_pair){id_at(&a[SRC], i), id_at(&a[DST], i)};
  } else {
    st = ng__err(NG_ERR_NOT_FOUND,
                 "%s: neither edge.npy nor source_node.npy and target_node.npy; a part of a "
                 "plain-file split holds the arrays of OGB's split dict (docs/convert.md)",
                 dir);
    goto done;
  }
  if (!with_neg)
    goto done;
  if (has[DST_NEG]) {
    const ng_npy_header *h = &a[DST_NEG].hdr;
    if (!has[SRC] || has[EDGE]) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s: target_node_neg.npy corrupts the targets of source_node.npy and "
                   "target_node.npy, which the folder %s",
                   dir, has[EDGE] ? "mixes with edge.npy" : "lacks");
      goto done;
    }
    if (h->ndim != 2 || h->shape[0] != p->n || h->shape[1] < 1) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s/target_node_neg.npy: shape %s; expected [%lld, K], K >= 1 negative "
                   "targets for each of the %lld positives",
                   dir, shape_str(h, s0), (long long)p->n, (long long)p->n);
      goto done;
    }
    p->k = h->shape[1];
    p->neg = ng__malloc((size_t)NG_MAX(p->n * p->k, 1) * sizeof *p->neg, "the negatives");
    if (!p->neg) {
      st = NG_ERR_NOMEM;
      goto done;
    }
    for (int64_t i = 0; i < p->n * p->k; i++)
      p->neg[i] = (ng_link_pair){p->pos[i / p->k].u, id_at(&a[DST_NEG], i)};
  } else if (has[EDGE_NEG]) {
    const ng_npy_header *h = &a[EDGE_NEG].hdr;
    if (h->ndim != 2 || h->shape[1] != 2 || (h->shape[0] == 0 && p->n > 0)) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s/edge_neg.npy: shape %s; expected [m, 2], m >= 1 negative pairs for the "
                   "%lld positives",
                   dir, shape_str(h, s0), (long long)p->n);
      goto done;
    }
    p->m = h->shape[0];
    NG_CHECK_GOTO(st, pairs_of(&p->neg, &a[EDGE_NEG], "the negatives"), done);
  } else {
    st = ng__err(NG_ERR_NOT_FOUND,
                 "%s: no negatives: edge_neg.npy [m, 2] or target_node_neg.npy [n, K] is "
                 "needed beside the positives",
                 dir);
  }
done:
  for (int i = 0; i < KEYS; i++)
    ng__npy_close(&a[i]);
  if (st != NG_OK)
    part_free(p);
  return st;
}

/* The negatives of a held-out part as [n, k] pairs: its own K per positive, or its pool dealt
 * out in order, slot (i, j) taking pool[(i k + j) mod m], so that every negative of the pool is
 * used (once, or more often where n k > m). */
static ng_status grouped_negatives(ng_link_pair **out, const part *p, int64_t k) {
  *out = ng__malloc((size_t)NG_MAX(p->n * k, 1) * sizeof **out, "the held-out negatives");
  if (!*out)
    return NG_ERR_NOMEM;
  for (int64_t i = 0; i < p->n * k; i++)
    (*out)[i] = p->k > 0 ? p->neg[i] : p->neg[i % p->m];
  return NG_OK;
}

static ng_link_pair canonical(ng_link_pair q, bool undirected) {
  return undirected ? (ng_link_pair){NG_MIN(q.u, q.v), NG_MAX(q.u, q.v)} : q;
}

/* The links/ folder from the plain-file split in `scheme_dir`, written into the output's
 * temporary folder. */
static ng_status write_links(ng_conv *c, const char *scheme_dir, const char *scheme,
                             int64_t nodes) {
  const bool undirected = c->opts.undirected != 0;
  part p[3];
  memset(p, 0, sizeof p);
  ng_link_pair *held = NULL, *entry = NULL, *neg[2] = {NULL, NULL};
  int64_t *indptr = NULL;
  void *indices = NULL;
  char *dir = NULL, *links = NULL;
  ng_status st = NG_OK;
  for (int s = 0; s < 3; s++) {
    free(dir);
    if (!(dir = ng__path_join(scheme_dir, PART[s]))) {
      st = NG_ERR_NOMEM;
      goto done;
    }
    NG_CHECK_GOTO(st, read_part(&p[s], dir, s > 0, nodes), done);
  }
  /* One K for both held-out parts (the links format's val_neg and test_neg share it): a given
   * K per positive, or the least that deals out every pair of each pool. */
  int64_t k = 0;
  for (int s = 1; s < 3; s++) {
    if (p[s].k > 0 && k > 0 && p[s].k != k && p[s].n > 0) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s: valid has %lld negatives per positive and test %lld; the links format "
                   "holds one K for both",
                   scheme_dir, (long long)p[1].k, (long long)p[2].k);
      goto done;
    }
    if (p[s].k > 0 && p[s].n > 0)
      k = p[s].k;
  }
  if (k == 0)
    for (int s = 1; s < 3; s++)
      if (p[s].n > 0)
        k = NG_MAX(k, (p[s].m + p[s].n - 1) / p[s].n);
  if (k == 0)
    k = 1;
  for (int s = 1; s < 3; s++)
    NG_CHECK_GOTO(st, grouped_negatives(&neg[s - 1], &p[s], k), done);
  /* The held-out pairs, sorted: training positives among them are dropped (training on a
   * held-out edge leaks it), and their entries leave the message-passing graph. An edge
   * source -> target is the entry (row target, neighbour source) of the graph. */
  const int64_t n_held = p[1].n + p[2].n;
  held = ng__malloc((size_t)NG_MAX(n_held, 1) * sizeof *held, "the held-out edges");
  entry = ng__malloc((size_t)NG_MAX(n_held, 1) * sizeof *entry, "the held-out entries");
  if (!held || !entry) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int64_t i = 0; i < n_held; i++) {
    const ng_link_pair q = i < p[1].n ? p[1].pos[i] : p[2].pos[i - p[1].n];
    held[i] = canonical(q, undirected);
    entry[i] = undirected ? held[i] : (ng_link_pair){q.v, q.u};
  }
  qsort(held, (size_t)n_held, sizeof *held, ng__link_pair_cmp);
  qsort(entry, (size_t)n_held, sizeof *entry, ng__link_pair_cmp);
  /* Training positives: canonical, sorted and unique as split-edges writes them, without self
   * loops (the graph has none) and without held-out pairs. */
  part *tr = &p[0];
  int64_t n_train = 0, dropped_held = 0;
  for (int64_t i = 0; i < tr->n; i++)
    tr->pos[i] = canonical(tr->pos[i], undirected);
  qsort(tr->pos, (size_t)tr->n, sizeof *tr->pos, ng__link_pair_cmp);
  for (int64_t i = 0; i < tr->n; i++) {
    const ng_link_pair q = tr->pos[i];
    /* tr->pos[i - 1] is still the sorted input: the kept pairs trail behind at n_train. */
    if (q.u == q.v || (i > 0 && ng__link_pair_cmp(&tr->pos[i - 1], &q) == 0))
      continue;
    if (ng__link_pair_find(held, n_held, q.u, q.v)) {
      dropped_held++;
      continue;
    }
    tr->pos[n_train++] = q;
  }
  if (n_train == 0) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s/train: no training edges (after removing self loops and "
                 "held-out pairs)",
                 scheme_dir);
    goto done;
  }
  ng_npy *ip = &c->w.arrays[NG_ARR_INDPTR], *ix = &c->w.arrays[NG_ARR_INDICES];
  const bool wide = ix->hdr.dtype == NG_DTYPE_I64;
  const ng_csr g = {.nodes = nodes,
                    .nnz = ix->hdr.shape[0],
                    .indptr = ip->data,
                    .idx32 = wide ? NULL : ix->data,
                    .idx64 = wide ? ix->data : NULL};
  NG_CHECK_GOTO(
      st,
      ng__link_mp_graph(&indptr, &indices, &g, entry, n_held, undirected, omp_get_max_threads()),
      done);
  if (!(links = ng__path_join(c->w.tmp_dir, NG_LINK_DIR))) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  if (mkdir(links, 0777) != 0) {
    st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot create", links);
    goto done;
  }
  ng_link_split_info info = NG_LINK_SPLIT_INFO_INIT;
  info.train = n_train;
  info.val = p[1].n;
  info.test = p[2].n;
  info.neg_per_pos = (int32_t)k;
  info.undirected = undirected;
  info.mp_edges = indptr[nodes];
  /* neg_source 0 when every negative keeps its positive's source (OGB's corruption). */
  info.neg_source = 0;
  for (int s = 0; s < 2; s++)
    for (int64_t i = 0; i < p[s + 1].n * k; i++)
      if (neg[s][i].u != p[s + 1].pos[i / k].u)
        info.neg_source = 1;
  const int64_t all = n_train + n_held;
  const ng_link_split_arrays arr = {.nodes = nodes,
                                    .indptr = indptr,
                                    .indices = indices,
                                    .wide = wide,
                                    .train = tr->pos,
                                    .val = p[1].pos,
                                    .test = p[2].pos,
                                    .n_train = n_train,
                                    .n_val = p[1].n,
                                    .n_test = p[2].n,
                                    .val_neg = neg[0],
                                    .test_neg = neg[1],
                                    .k = k};
  NG_CHECK_GOTO(st,
                ng__link_write_split(links, &arr, &info, (double)p[1].n / (double)all,
                                     (double)p[2].n / (double)all),
                done);
  snprintf(c->detail, sizeof c->detail,
           "task=link split=%s links: train %lld (dropped %lld repeats and self loops and %lld "
           "held-out pairs), val %lld, test %lld, %lld negatives per positive (%s)",
           scheme, (long long)n_train, (long long)(tr->n - n_train - dropped_held),
           (long long)dropped_held, (long long)p[1].n, (long long)p[2].n, (long long)k,
           p[1].k > 0 || p[2].k > 0 ? "given" : "dealt from edge_neg");
done:
  free(links);
  free(dir);
  free(indices);
  free(indptr);
  free(neg[0]);
  free(neg[1]);
  free(entry);
  free(held);
  for (int s = 0; s < 3; s++)
    part_free(&p[s]);
  return st;
}

ng_status ng__convert_ogbl(ng_conv *c) {
  char *count_path = NULL, *edge_path = NULL, *feat_path = NULL, *kg_path = NULL;
  char *split_dir = NULL, *scheme = NULL, *scheme_dir = NULL, *train_dir = NULL;
  ng_status st = NG_OK;
  count_path = ng__path_join(c->src, NODE_COUNT_FILE);
  edge_path = ng__path_join(c->src, "raw/edge.csv.gz");
  feat_path = ng__path_join(c->src, "raw/node-feat.csv.gz");
  kg_path = ng__path_join(c->src, "raw/edge_reltype.csv.gz");
  split_dir = ng__path_join(c->src, "split");
  if (!count_path || !edge_path || !feat_path || !kg_path || !split_dir) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  if (ng__file_exists(kg_path)) {
    st = ng__err(NG_ERR_UNSUPPORTED,
                 "%s: edge relation types; knowledge graphs (ogbl-wikikg2, ogbl-biokg) are not "
                 "supported",
                 kg_path);
    goto done;
  }
  const bool has_feat = ng__file_exists(feat_path);
  int64_t nodes;
  NG_CHECK_GOTO(st, ng__ogb_node_count(c, count_path, &nodes), done);
  NG_CHECK_GOTO(st,
                has_feat
                    ? ng__ogb_check_node_count(nodes, feat_path, 1, "feature lines, one per node")
                    : ng__ogb_check_node_count(nodes, edge_path, 2,
                                               "nodes with edges (two per edge line); "
                                               "a graph of mostly isolated nodes is refused"),
                done);
  NG_CHECK_GOTO(
      st,
      ng__conv_edges(c, edge_path, NG_SEP_COMMA, nodes, NODE_COUNT_FILE, c->opts.undirected != 0),
      done);
  if (has_feat)
    NG_CHECK_GOTO(st, ng__ogb_features(c, feat_path, nodes), done);
  NG_CHECK_GOTO(st, ng__ogb_choose_split(c, split_dir, &scheme), done);
  snprintf(c->detail, sizeof c->detail, "task=link split=%s links=none", scheme ? scheme : "none");
  if (!scheme)
    goto done;
  scheme_dir = ng__path_join(split_dir, scheme);
  train_dir = scheme_dir ? ng__path_join(scheme_dir, PART[0]) : NULL;
  if (!train_dir) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  struct stat sb;
  /* A scheme holding only OGB's torch pickles has no train/ folder: the graph converts alone. */
  if (stat(train_dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    NG_CHECK_GOTO(st, write_links(c, scheme_dir, scheme, nodes), done);
    NG_CHECK_GOTO(st, ng__progress(&c->progress, "links", 1, 1, true), done);
  }
done:
  free(train_dir);
  free(scheme_dir);
  free(scheme);
  free(split_dir);
  free(kg_path);
  free(feat_path);
  free(edge_path);
  free(count_path);
  return st;
}
