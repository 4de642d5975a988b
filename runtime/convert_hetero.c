/* OGB heterogeneous node-property folders (ogbn-mag as unpacked by the ogb package) into the
 * heterogeneous layout (docs/heterogeneous.md):
 *   raw/num-node-dict.csv.gz                      two lines: the type names, then their counts
 *   raw/relations/<src>___<rel>___<dst>/edge.csv.gz   "src,dst" per line, ids per type
 *   raw/node-feat/<type>/node-feat.csv.gz         D comma-separated floats per line (optional)
 *   raw/node-label/<type>/node-label.csv.gz       one label per line, on the target type only
 *   split/<scheme>/<type>/{train,valid,test}.csv.gz   ids of the target type
 * An edge "s,d" of (src, rel, dst) puts s into row d of the relation's CSR: d aggregates from s.
 * Rows are sorted and repeated entries dropped. With `undirected`, each relation between two
 * types gets its reverse, rev_<rel>, and a relation within one type is stored both ways. The
 * line reader and number parsers are the homogeneous converters' (runtime/convert.c). */
#include "convert_impl.h"
#include "hetero_impl.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const char COUNT_FILE[] = "raw/num-node-dict.csv.gz";

typedef struct {
  const char *src;
  ng_convert_opts opts;
  ng_progress progress;
  ng_hetero_writer hw;
  struct ng_hetero desc; /* what dataset.json will say */
  char detail[256];
} hconv;

/* A relation as read: an edge list grouped into rows of the destination type. */
typedef struct {
  int32_t src, dst;
  char relation[NG_HETERO_NAME_MAX + 1];
  int64_t *ptr; /* [dst count + 1] */
  int64_t *idx; /* [ptr[dst count]] */
} hrel;

static char *join3(const char *a, const char *b, const char *c) {
  size_t n = strlen(a) + strlen(b) + strlen(c) + 3;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s/%s", a, b, c);
  return p;
}

/* ---- node types ---- */

static ng_status read_types(hconv *c) {
  char *path = ng__path_join(c->src, COUNT_FILE);
  if (!path)
    return NG_ERR_NOMEM;
  ng_lines r;
  ng_status st = ng__lines_open(&r, path, &c->progress, "nodes");
  if (st != NG_OK) {
    free(path);
    return st;
  }
  char *names = NULL;
  char *line = NULL;
  NG_CHECK_GOTO(st, ng__lines_next(&r, &line), done);
  if (!line || !(names = strdup(line))) {
    st =
        ng__err(NG_ERR_FORMAT, "%s: empty; expected a line of type names, then their counts", path);
    goto done;
  }
  NG_CHECK_GOTO(st, ng__lines_next(&r, &line), done);
  if (!line) {
    st = ng__err(NG_ERR_FORMAT, "%s: one line; expected the type names, then their counts", path);
    goto done;
  }
  int32_t n = 1;
  for (const char *p = names; *p; p++)
    n += *p == ',';
  if (n > NG_HETERO_MAX_NODE_TYPES) {
    st = ng__err(NG_ERR_UNSUPPORTED, "%s: %d node types; at most %d are read", path, (int)n,
                 NG_HETERO_MAX_NODE_TYPES);
    goto done;
  }
  c->desc.ntypes = ng__calloc((size_t)n, sizeof *c->desc.ntypes, "node types");
  if (!c->desc.ntypes) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  c->desc.info.node_types = n;
  char *save = NULL, *tok = strtok_r(names, ",", &save);
  const char *p = line;
  for (int32_t t = 0; t < n; t++, tok = strtok_r(NULL, ",", &save)) {
    if (!tok || !ng__hetero_name_ok(tok)) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:1: type %d's name is empty or not 1 to %d letters, digits, '_' or '-'", path,
                   (int)t + 1, NG_HETERO_NAME_MAX);
      goto done;
    }
    for (int32_t q = 0; q < t; q++)
      if (strcmp(c->desc.ntypes[q].name, tok) == 0) {
        st = ng__err(NG_ERR_FORMAT, "%s:1: node type \"%s\" is named twice", path, tok);
        goto done;
      }
    ng__strlcpy(c->desc.ntypes[t].name, tok, sizeof c->desc.ntypes[t].name);
    p = ng__skip_blanks(p);
    int64_t count;
    if (!ng__parse_u63(&p, &count) || count >= ((int64_t)1 << 53) ||
        *ng__skip_blanks(p) != (t + 1 < n ? ',' : '\0')) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:2: expected %d comma-separated node counts, one per name of line 1; "
                   "trouble at column %zu",
                   path, (int)n, ng__column(line, p));
      goto done;
    }
    p = ng__skip_blanks(p) + 1;
    c->desc.ntypes[t].count = count;
    c->desc.info.nodes += count;
  }
done:
  ng__lines_close(&r);
  free(names);
  free(path);
  return st;
}

static int32_t type_index(const hconv *c, const char *name) {
  for (int32_t t = 0; t < c->desc.info.node_types; t++)
    if (strcmp(c->desc.ntypes[t].name, name) == 0)
      return t;
  return -1;
}

/* ---- features and labels ---- */

static ng_status read_features(hconv *c, int32_t t, const char *path) {
  ng_hetero_ntype *nt = &c->desc.ntypes[t];
  ng_lines r;
  NG_CHECK(ng__lines_open(&r, path, &c->progress, "features"));
  ng_status st = NG_OK;
  float *out = NULL;
  int64_t dim = 0, row = 0;
  for (;;) {
    char *line;
    NG_CHECK_GOTO(st, ng__lines_next(&r, &line), done);
    if (!line)
      break;
    if (*ng__skip_blanks(line) == '\0')
      continue;
    if (!out) {
      dim = 1;
      for (const char *p = line; *p; p++)
        dim += *p == ',';
      int64_t shape[2] = {nt->count, dim};
      char file[160];
      ng__hetero_features_file(file, sizeof file, nt->name);
      ng_npy *npy;
      NG_CHECK_GOTO(st, ng__hetero_writer_array(&npy, &c->hw, file, NG_DTYPE_F32, 2, shape), done);
      out = npy->data;
    }
    if (row >= nt->count) {
      st = ng__err(NG_ERR_FORMAT, "%s:%lld: more feature lines than the %lld \"%s\" nodes of %s",
                   path, (long long)r.line, (long long)nt->count, nt->name, COUNT_FILE);
      goto done;
    }
    const char *p = line;
    for (int64_t j = 0; j < dim; j++) {
      p = ng__skip_blanks(p);
      const char *tok = p;
      float *v = &out[row * dim + j];
      if (!ng__parse_float(&p, v) || !isfinite(*v)) {
        st = ng__err(NG_ERR_FORMAT,
                     "%s:%lld: value %lld (column %zu): expected a finite float32 number", path,
                     (long long)r.line, (long long)j + 1, ng__column(line, tok));
        goto done;
      }
      p = ng__skip_blanks(p);
      const bool last = j + 1 == dim;
      if (last ? *p != '\0' : *p != ',') {
        st =
            ng__err(NG_ERR_FORMAT,
                    "%s:%lld: expected %lld comma-separated numbers (as on the first line); "
                    "trouble after value %lld, at column %zu",
                    path, (long long)r.line, (long long)dim, (long long)j + 1, ng__column(line, p));
        goto done;
      }
      p += !last;
    }
    row++;
  }
  if (row != nt->count) {
    st = ng__err(NG_ERR_FORMAT, "%s: %lld feature lines but %s says %lld \"%s\" nodes", path,
                 (long long)row, COUNT_FILE, (long long)nt->count, nt->name);
    goto done;
  }
  nt->feature_dim = dim;
done:
  ng__lines_close(&r);
  return st;
}

/* Labels: a class id ("3", or "3.0"), or "nan", empty or -1 for an unlabelled node. */
static ng_status read_labels(hconv *c, int32_t t, const char *path, int32_t **labels) {
  ng_hetero_ntype *nt = &c->desc.ntypes[t];
  ng_lines r;
  NG_CHECK(ng__lines_open(&r, path, &c->progress, "labels"));
  ng_status st = NG_OK;
  char file[160];
  ng__hetero_labels_file(file, sizeof file, nt->name);
  ng_npy *npy;
  int64_t row = 0, used = 0;
  int32_t top = -1;
  NG_CHECK_GOTO(st, ng__hetero_writer_array(&npy, &c->hw, file, NG_DTYPE_I32, 1, &nt->count), done);
  int32_t *out = npy->data;
  for (;;) {
    char *line;
    NG_CHECK_GOTO(st, ng__lines_next(&r, &line), done);
    if (!line)
      break;
    if (row >= nt->count) {
      st = ng__err(NG_ERR_FORMAT, "%s:%lld: more label lines than the %lld \"%s\" nodes", path,
                   (long long)r.line, (long long)nt->count, nt->name);
      goto done;
    }
    const char *p = ng__skip_blanks(line);
    int64_t y = -1;
    bool ok = true;
    if (*p == '\0' || strncasecmp(p, "nan", 3) == 0)
      p += *p ? 3 : 0;
    else if (p[0] == '-' && p[1] == '1' && !(p[2] >= '0' && p[2] <= '9'))
      p += 2;
    else if ((ok = ng__parse_u63(&p, &y)) && *p == '.')
      for (p++; *p == '0'; p++) {
      }
    if (!ok || *ng__skip_blanks(p) != '\0' || y >= NG_MAX_CLASSES) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:%lld: expected one class id (an integer from 0 to %d), or nan for no "
                   "label; the line stops parsing at column %zu",
                   path, (long long)r.line, NG_MAX_CLASSES - 1, ng__column(line, p));
      goto done;
    }
    out[row++] = (int32_t)y;
    used += y >= 0;
    top = (int32_t)y > top ? (int32_t)y : top;
  }
  if (row != nt->count) {
    st = ng__err(NG_ERR_FORMAT, "%s: %lld label lines but %s says %lld \"%s\" nodes", path,
                 (long long)row, COUNT_FILE, (long long)nt->count, nt->name);
    goto done;
  }
  if (used == 0) {
    st = ng__err(NG_ERR_FORMAT, "%s: no node has a label", path);
    goto done;
  }
  nt->classes = top + 1;
  *labels = out;
done:
  ng__lines_close(&r);
  return st;
}

/* ---- relations ---- */

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The folder names under `dir`, sorted (the order of the edge types in dataset.json). */
static ng_status list_dirs(char ***out, size_t *n, const char *dir) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return ng__err_errno(errno == ENOENT ? NG_ERR_NOT_FOUND : NG_ERR_IO, errno, "%s", dir);
  size_t cap = 0;
  ng_status st = NG_OK;
  struct dirent *de;
  while ((de = readdir(d)) != NULL && st == NG_OK) {
    if (de->d_name[0] == '.')
      continue;
    char *full = ng__path_join(dir, de->d_name);
    struct stat sb;
    bool is_dir = full && stat(full, &sb) == 0 && S_ISDIR(sb.st_mode);
    free(full);
    if (!is_dir)
      continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 8;
      char **bigger = realloc(*out, cap * sizeof **out);
      if (!bigger) {
        st = ng__err(NG_ERR_NOMEM, "out of memory listing %s", dir);
        break;
      }
      *out = bigger;
    }
    if (!((*out)[*n] = strdup(de->d_name)))
      st = ng__err(NG_ERR_NOMEM, "out of memory listing %s", dir);
    else
      (*n)++;
  }
  closedir(d);
  if (*n > 1)
    qsort(*out, *n, sizeof **out, cmp_str);
  return st;
}

static void free_list(char **names, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

/* Reads one edge.csv.gz into `rel` (rows of the destination type), twice: row lengths, then
 * entries. With `both`, each edge is also stored reversed (a relation within one type). */
static ng_status read_edges(hconv *c, hrel *rel, const char *path, bool both) {
  const int64_t ns = c->desc.ntypes[rel->src].count, nd = c->desc.ntypes[rel->dst].count;
  ng_lines r;
  NG_CHECK(ng__lines_open(&r, path, &c->progress, rel->relation));
  ng_status st = NG_OK;
  rel->ptr = ng__calloc((size_t)nd + 1, sizeof *rel->ptr, "a relation's row starts");
  if (!rel->ptr) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  /* The second pass must read the very lines the first counted, or rows would overrun. */
  uint64_t digest[2] = {0, 0};
  int64_t total = 0, seen = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      total = ng__counts_to_offsets(rel->ptr, nd);
      rel->idx = ng__malloc((size_t)NG_MAX(total, 1) * sizeof *rel->idx, "a relation's entries");
      if (!rel->idx) {
        st = NG_ERR_NOMEM;
        goto done;
      }
      /* Read again from the start: a fresh reader over the same file. */
      ng__lines_close(&r);
      NG_CHECK_GOTO(st, ng__lines_open(&r, path, &c->progress, rel->relation), done);
    }
    for (;;) {
      int64_t s, d;
      bool got;
      NG_CHECK_GOTO(st, ng__lines_next_edge(&r, NG_SEP_COMMA, &s, &d, &got), done);
      if (!got)
        break;
      if (s >= ns || d >= nd) {
        const bool bad_src = s >= ns;
        st = ng__err(
            NG_ERR_FORMAT, "%s:%lld: %s id %lld is not a \"%s\" node (it has %lld)", path,
            (long long)r.line, bad_src ? "source" : "destination", (long long)(bad_src ? s : d),
            c->desc.ntypes[bad_src ? rel->src : rel->dst].name, (long long)(bad_src ? ns : nd));
        goto done;
      }
      digest[pass] = ng__edge_digest(digest[pass], s, d);
      seen += pass == 1 ? 1 + (both && s != d) : 0;
      if (seen > total) {
        st = ng__err(NG_ERR_IO, "%s: changed while it was read (more edges on the second pass)",
                     path);
        goto done;
      }
      /* Pass 0 counts into ptr[d]; pass 1 fills at the row cursor ptr[d] and advances it. */
      if (pass == 0) {
        rel->ptr[d]++;
        if (both && s != d)
          rel->ptr[s]++;
      } else {
        rel->idx[rel->ptr[d]++] = s;
        if (both && s != d)
          rel->idx[rel->ptr[s]++] = d;
      }
    }
  }
  if (digest[0] != digest[1] || seen != total) {
    st = ng__err(NG_ERR_IO, "%s: changed while it was read (the two passes differ)", path);
    goto done;
  }
  /* The cursors stopped at each row's end: shift them back into row starts. */
  for (int64_t v = nd; v > 0; v--)
    rel->ptr[v] = rel->ptr[v - 1];
  rel->ptr[0] = 0;
  /* Sorted rows without repeats, compacted in place. */
  int64_t w = 0;
  for (int64_t v = 0; v < nd; v++) {
    const int64_t lo = rel->ptr[v], hi = rel->ptr[v + 1];
    qsort(rel->idx + lo, (size_t)(hi - lo), sizeof *rel->idx, cmp_i64);
    rel->ptr[v] = w;
    for (int64_t e = lo; e < hi; e++)
      if (e == lo || rel->idx[e] != rel->idx[e - 1])
        rel->idx[w++] = rel->idx[e];
  }
  rel->ptr[nd] = w;
done:
  ng__lines_close(&r);
  return st;
}

/* The reverse of `rel` (rows of its source type), named rev_<relation>. */
static ng_status reverse(hrel *out, const hrel *rel, const hconv *c) {
  const int64_t ns = c->desc.ntypes[rel->src].count, nd = c->desc.ntypes[rel->dst].count;
  out->src = rel->dst;
  out->dst = rel->src;
  snprintf(out->relation, sizeof out->relation, "rev_%s", rel->relation);
  out->ptr = ng__calloc((size_t)ns + 1, sizeof *out->ptr, "a reverse relation's row starts");
  out->idx = ng__malloc((size_t)NG_MAX(rel->ptr[nd], 1) * sizeof *out->idx,
                        "a reverse relation's entries");
  if (!out->ptr || !out->idx)
    return NG_ERR_NOMEM;
  for (int64_t e = 0; e < rel->ptr[nd]; e++)
    out->ptr[rel->idx[e] + 1]++;
  for (int64_t v = 0; v < ns; v++)
    out->ptr[v + 1] += out->ptr[v];
  int64_t *cur = ng__malloc((size_t)NG_MAX(ns, 1) * sizeof *cur, "row cursors");
  if (!cur)
    return NG_ERR_NOMEM;
  memcpy(cur, out->ptr, (size_t)ns * sizeof *cur);
  /* Rows of `rel` in order: each reversed row comes out sorted. */
  for (int64_t v = 0; v < nd; v++)
    for (int64_t e = rel->ptr[v]; e < rel->ptr[v + 1]; e++)
      out->idx[cur[rel->idx[e]]++] = v;
  free(cur);
  return NG_OK;
}

static ng_status write_relation(hconv *c, const hrel *rel, int32_t index) {
  const int64_t nd = c->desc.ntypes[rel->dst].count, edges = rel->ptr[nd];
  const char *src = c->desc.ntypes[rel->src].name, *dst = c->desc.ntypes[rel->dst].name;
  char file[160];
  ng_npy *ptr, *idx;
  int64_t shape[1] = {nd + 1};
  ng__hetero_csr_file(file, sizeof file, src, rel->relation, dst, false);
  NG_CHECK(ng__hetero_writer_array(&ptr, &c->hw, file, NG_DTYPE_I64, 1, shape));
  memcpy(ptr->data, rel->ptr, (size_t)(nd + 1) * sizeof *rel->ptr);
  shape[0] = edges;
  ng__hetero_csr_file(file, sizeof file, src, rel->relation, dst, true);
  const bool wide = c->desc.info.index_bytes == 8;
  NG_CHECK(
      ng__hetero_writer_array(&idx, &c->hw, file, wide ? NG_DTYPE_I64 : NG_DTYPE_I32, 1, shape));
  for (int64_t e = 0; e < edges; e++)
    if (wide)
      ((int64_t *)idx->data)[e] = rel->idx[e];
    else
      ((int32_t *)idx->data)[e] = (int32_t)rel->idx[e];
  ng_hetero_etype *et = &c->desc.etypes[index];
  ng__strlcpy(et->relation, rel->relation, sizeof et->relation);
  et->src = rel->src;
  et->dst = rel->dst;
  et->csr.nnz = edges;
  c->desc.info.edges += edges;
  return NG_OK;
}

/* Every relation folder, in name order, written as it is read (and its reverse after it). */
static ng_status convert_relations(hconv *c, const char *rel_dir) {
  char **names = NULL;
  size_t n = 0;
  NG_CHECK(list_dirs(&names, &n, rel_dir));
  ng_status st = NG_OK;
  const size_t max = c->opts.undirected ? 2 * n : n;
  if (n == 0 || max > NG_HETERO_MAX_EDGE_TYPES) {
    st = ng__err(n ? NG_ERR_UNSUPPORTED : NG_ERR_FORMAT,
                 "%s: %zu relation folders; between 1 and %d relations are read", rel_dir, max,
                 NG_HETERO_MAX_EDGE_TYPES);
    goto done;
  }
  c->desc.etypes = ng__calloc(max, sizeof *c->desc.etypes, "edge types");
  if (!c->desc.etypes) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (size_t i = 0; i < n && st == NG_OK; i++) {
    /* <src>___<rel>___<dst>: names hold no "___". */
    char parts[3][NG_HETERO_NAME_MAX + 2];
    const char *p = names[i];
    int k = 0;
    for (; k < 3 && p; k++) {
      const char *sep = k < 2 ? strstr(p, "___") : NULL;
      size_t len = sep ? (size_t)(sep - p) : strlen(p);
      if (len > NG_HETERO_NAME_MAX)
        len = NG_HETERO_NAME_MAX + 1; /* too long: refused by the name check */
      memcpy(parts[k], p, len);
      parts[k][len] = '\0';
      p = sep ? sep + 3 : (k < 2 ? NULL : p);
    }
    hrel rel = {0}, rev = {0};
    if (k != 3 || !ng__hetero_name_ok(parts[1])) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s/%s: a relation folder is named <src>___<relation>___<dst>, with names of "
                   "1 to %d letters, digits, '_' or '-'",
                   rel_dir, names[i], NG_HETERO_NAME_MAX);
      break;
    }
    rel.src = type_index(c, parts[0]);
    rel.dst = type_index(c, parts[2]);
    if (rel.src < 0 || rel.dst < 0) {
      st = ng__err(NG_ERR_FORMAT, "%s/%s: \"%s\" is not a node type of %s", rel_dir, names[i],
                   rel.src < 0 ? parts[0] : parts[2], COUNT_FILE);
      break;
    }
    ng__strlcpy(rel.relation, parts[1], sizeof rel.relation);
    char *edge_path = join3(rel_dir, names[i], "edge.csv.gz");
    st = edge_path ? read_edges(c, &rel, edge_path, c->opts.undirected && rel.src == rel.dst)
                   : NG_ERR_NOMEM;
    free(edge_path);
    if (st == NG_OK)
      st = write_relation(c, &rel, c->desc.info.edge_types++);
    if (st == NG_OK && c->opts.undirected && rel.src != rel.dst) {
      if (strlen(rel.relation) + 4 > NG_HETERO_NAME_MAX)
        st = ng__err(NG_ERR_UNSUPPORTED, "relation \"%s\": rev_%s is longer than %d bytes",
                     rel.relation, rel.relation, NG_HETERO_NAME_MAX);
      if (st == NG_OK)
        st = reverse(&rev, &rel, c);
      if (st == NG_OK)
        st = write_relation(c, &rev, c->desc.info.edge_types++);
    }
    free(rel.ptr);
    free(rel.idx);
    free(rev.ptr);
    free(rev.idx);
  }
done:
  free_list(names, n);
  return st;
}

/* ---- splits ---- */

static ng_status read_split(hconv *c, int which, const char *path, uint8_t *member,
                            const int32_t *labels) {
  static const char *const FILE_NAME[3] = {"train_idx.npy", "val_idx.npy", "test_idx.npy"};
  const ng_hetero_ntype *nt = &c->desc.ntypes[c->desc.info.target];
  ng_lines r;
  NG_CHECK(ng__lines_open(&r, path, &c->progress, "splits"));
  ng_status st = NG_OK;
  int64_t *ids = NULL, count = 0, cap = 0;
  for (;;) {
    char *line;
    NG_CHECK_GOTO(st, ng__lines_next(&r, &line), done);
    if (!line)
      break;
    const char *p = ng__skip_blanks(line);
    if (*p == '\0')
      continue;
    int64_t v;
    if (!ng__parse_u63(&p, &v) || *ng__skip_blanks(p) != '\0') {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:%lld: expected one node id per line; the line stops parsing at column %zu",
                   path, (long long)r.line, ng__column(line, p));
      goto done;
    }
    if (v >= nt->count || member[v] || labels[v] < 0) {
      st = ng__err(NG_ERR_FORMAT, "%s:%lld: node %lld %s", path, (long long)r.line, (long long)v,
                   v >= nt->count ? "is not a node of the target type"
                   : member[v]    ? "is listed twice or in two splits"
                                  : "has no label");
      goto done;
    }
    member[v] = (uint8_t)(which + 1);
    NG_CHECK_GOTO(st, ng__conv_push_id(&ids, &count, &cap, v, path), done);
  }
  if (count > 0) {
    ng_npy *npy;
    NG_CHECK_GOTO(
        st, ng__hetero_writer_array(&npy, &c->hw, FILE_NAME[which], NG_DTYPE_I64, 1, &count), done);
    memcpy(npy->data, ids, (size_t)count * sizeof *ids);
  }
  int64_t *dst[3] = {&c->desc.info.train, &c->desc.info.val, &c->desc.info.test};
  *dst[which] = count;
done:
  free(ids);
  ng__lines_close(&r);
  return st;
}

static ng_status convert_splits(hconv *c, const int32_t *labels) {
  static const char *const SPLIT_FILE[3] = {"train.csv.gz", "valid.csv.gz", "test.csv.gz"};
  char *split_dir = ng__path_join(c->src, "split");
  if (!split_dir)
    return NG_ERR_NOMEM;
  char **names = NULL;
  size_t n = 0;
  ng_status st = NG_OK;
  struct stat sb;
  if (stat(split_dir, &sb) != 0 && !c->opts.split) {
    free(split_dir);
    return NG_OK; /* no splits */
  }
  NG_CHECK_GOTO(st, list_dirs(&names, &n, split_dir), done);
  const char *pick = NULL;
  for (size_t i = 0; i < n && c->opts.split && !pick; i++)
    if (strcmp(names[i], c->opts.split) == 0)
      pick = names[i];
  if (!c->opts.split && n == 1)
    pick = names[0];
  if (!pick) {
    if (c->opts.split)
      st = ng__err(NG_ERR_NOT_FOUND, "%s: no split scheme '%s'", split_dir, c->opts.split);
    else
      st = ng__err(NG_ERR_INVALID_ARG,
                   "%s holds %zu split schemes: choose one with --split NAME "
                   "(ng_convert_opts.split)",
                   split_dir, n);
    goto done;
  }
  const ng_hetero_ntype *nt = &c->desc.ntypes[c->desc.info.target];
  uint8_t *member = ng__calloc((size_t)NG_MAX(nt->count, 1), 1, "split membership");
  if (!member) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int s = 0; s < 3 && st == NG_OK; s++) {
    char *dir = join3(split_dir, pick, nt->name);
    char *path = dir ? ng__path_join(dir, SPLIT_FILE[s]) : NULL;
    st = path ? read_split(c, s, path, member, labels) : NG_ERR_NOMEM;
    free(path);
    free(dir);
  }
  free(member);
  snprintf(c->detail, sizeof c->detail, ", split %s", pick);
done:
  free_list(names, n);
  free(split_dir);
  return st;
}

/* ---- the conversion ---- */

ng_status ng_hetero_convert_ogb(const char *dst_dir, const char *src, const ng_convert_opts *opts) {
  if (!src || !*src)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_convert_ogb: no source folder given");
  hconv c;
  memset(&c, 0, sizeof c);
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  if (opts) {
    if (opts->size < sizeof opts->size)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_hetero_convert_ogb: opts->size is %zu; initialise the options with "
                     "NG_CONVERT_OPTS_INIT",
                     opts->size);
    memcpy(&o, opts, NG_MIN(opts->size, sizeof o));
  }
  c.src = src;
  c.opts = o;
  ng__progress_init(&c.progress, o.progress, o.progress_ctx);
  c.desc.info.target = -1;
  ng_status st = NG_OK;
  int32_t *labels = NULL;
  char *rel_dir = ng__path_join(src, "raw/relations");
  char *feat_dir = ng__path_join(src, "raw/node-feat");
  char *label_dir = ng__path_join(src, "raw/node-label");
  if (!rel_dir || !feat_dir || !label_dir) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  struct stat sb;
  if (stat(rel_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    st = ng__err(NG_ERR_NOT_FOUND,
                 "%s: not a folder; a heterogeneous OGB folder (such as ogbn_mag/) has "
                 "raw/relations/<src>___<relation>___<dst>/ (a homogeneous one converts with "
                 "ng_dataset_convert)",
                 rel_dir);
    goto done;
  }
  NG_CHECK_GOTO(st, read_types(&c), done);
  c.desc.info.index_bytes = 4;
  for (int32_t t = 0; t < c.desc.info.node_types; t++)
    if (c.desc.ntypes[t].count >= NG_INDEX32_MAX_NODES)
      c.desc.info.index_bytes = 8;
  NG_CHECK_GOTO(st, ng__hetero_writer_begin(&c.hw, dst_dir), done);
  for (int32_t t = 0; t < c.desc.info.node_types; t++) {
    char *feat = join3(feat_dir, c.desc.ntypes[t].name, "node-feat.csv.gz");
    char *lab = join3(label_dir, c.desc.ntypes[t].name, "node-label.csv.gz");
    if (!feat || !lab)
      st = NG_ERR_NOMEM;
    if (st == NG_OK && ng__file_exists(feat))
      st = read_features(&c, t, feat);
    if (st == NG_OK && ng__file_exists(lab)) {
      if (c.desc.info.target >= 0)
        st = ng__err(NG_ERR_UNSUPPORTED,
                     "%s: labels on a second type (\"%s\" has them too); one target type is "
                     "supported",
                     lab, c.desc.ntypes[c.desc.info.target].name);
      else if ((st = read_labels(&c, t, lab, &labels)) == NG_OK)
        c.desc.info.target = t;
    }
    free(feat);
    free(lab);
    if (st != NG_OK)
      goto done;
  }
  NG_CHECK_GOTO(st, convert_relations(&c, rel_dir), done);
  if (c.desc.info.target >= 0)
    NG_CHECK_GOTO(st, convert_splits(&c, labels), done);
  ng__strlcpy(c.desc.info.name, o.name ? o.name : "ogb-hetero", sizeof c.desc.info.name);
  if (!o.name) {
    const char *slash = strrchr(src, '/');
    const char *base = slash && slash[1] ? slash + 1 : src;
    if (*base)
      ng__strlcpy(c.desc.info.name, base, sizeof c.desc.info.name);
  }
  char source[1024];
  snprintf(source, sizeof source, "converted from heterogeneous OGB folder %.600s%s%s", src,
           c.detail, o.undirected ? ", with reverse relations" : "");
  st = ng__hetero_writer_commit(&c.hw, &c.desc, source);
done:
  ng__hetero_writer_abort(&c.hw);
  free(c.desc.ntypes);
  free(c.desc.etypes);
  free(rel_dir);
  free(feat_dir);
  free(label_dir);
  return st;
}
