/* OGB node-property folders (as unpacked by the ogb package, e.g. ogbn_arxiv/):
 *   raw/num-node-list.csv.gz   one line: the node count
 *   raw/edge.csv.gz            "src,dst" per line
 *   raw/node-feat.csv.gz       D comma-separated floats per line (optional)
 *   raw/node-label.csv.gz      one label per line; "nan" or empty = unlabelled (-1)
 *   split/<scheme>/{train,valid,test}.csv.gz   one node id per line
 * Heterogeneous datasets (ogbn-mag) are runtime/convert_hetero.c's; multi-label ones
 * (ogbn-proteins) are refused with a clear error. */
#include "convert_impl.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const char NODE_COUNT_FILE[] = "raw/num-node-list.csv.gz";

/* Deflate cannot compress better than about 1032:1 (a 258-byte match in a few bits), so a gzip
 * file of S bytes holds at most about 1032 S bytes of text. */
enum { DEFLATE_MAX_RATIO = 1032, GZIP_SLACK_BYTES = 1024 };

/* The node count read from the input bounds every allocation that follows (the indptr array,
 * the labels, the split membership), so it is checked against a file with one line per node
 * first (the labels; the features of a link-property folder), or, for a link-property folder
 * without features, against the edge list (`per_line` 2: an edge line names at most two nodes,
 * so a graph of L lines has at most 2 L nodes that are not isolated). A line is at least one
 * byte ("\n"; the last may lack it), so a file of T bytes of text has at most T + 1 lines; a gzip
 * file is bounded by its size times deflate's best ratio. This refuses a mistyped or hostile
 * count (3e8, 1e12) before anything is reserved, at the cost of one stat() and a two-byte
 * read. */
ng_status ng__ogb_check_node_count(int64_t nodes, const char *label_path, int per_line,
                                   const char *what) {
  struct stat sb;
  if (stat(label_path, &sb) != 0)
    return ng__err_errno(errno == ENOENT ? NG_ERR_NOT_FOUND : NG_ERR_IO, errno, "%s", label_path);
  unsigned char magic[2] = {0, 0};
  FILE *f = fopen(label_path, "rbe");
  if (!f)
    return ng__err_errno(NG_ERR_IO, errno, "%s: cannot open", label_path);
  bool gz = fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  fclose(f);
  double size = (double)sb.st_size;
  double text = gz ? size * DEFLATE_MAX_RATIO + GZIP_SLACK_BYTES : size;
  if ((double)nodes > (text + 1) * per_line)
    return ng__err(NG_ERR_FORMAT,
                   "%s says %lld nodes, but %s (%lld bytes%s) holds at most %.0f %s; fix the "
                   "node count or fetch the dataset again",
                   NODE_COUNT_FILE, (long long)nodes, label_path, (long long)sb.st_size,
                   gz ? ", gzip" : "", (text + 1) * per_line, what);
  return NG_OK;
}

ng_status ng__ogb_node_count(ng_conv *c, const char *path, int64_t *nodes) {
  ng_lines r;
  NG_CHECK(ng__lines_open(&r, path, &c->progress, "nodes"));
  ng_status st = NG_OK;
  *nodes = -1;
  for (;;) {
    char *line;
    NG_CHECK_GOTO(st, ng__lines_next(&r, &line), done);
    if (!line)
      break;
    const char *p = ng__skip_blanks(line);
    if (*p == '\0')
      continue;
    int64_t n;
    if (*nodes >= 0) {
      st = ng__err(NG_ERR_UNSUPPORTED,
                   "%s:%lld: a second node count; only single-graph (node-property) datasets "
                   "convert",
                   path, (long long)r.line);
      goto done;
    }
    if (!ng__parse_u63(&p, &n) || *ng__skip_blanks(p) != '\0' || n < 1 || n >= ((int64_t)1 << 62)) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:%lld: expected the node count (an integer >= 1); the line stops parsing at "
                   "column %zu",
                   path, (long long)r.line, ng__column(line, p));
      goto done;
    }
    *nodes = n;
  }
  if (*nodes < 0)
    st = ng__err(NG_ERR_FORMAT, "%s: empty; expected one line with the node count", path);
done:
  ng__lines_close(&r);
  return st;
}

/* Features: the first line fixes D; every line must have D values and there must be one line
 * per node. Values go straight into the output's mapped array. */
ng_status ng__ogb_features(ng_conv *c, const char *path, int64_t nodes) {
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
      int64_t shape[2] = {nodes, dim};
      ng_npy *npy;
      NG_CHECK_GOTO(st, ng__writer_array(&npy, &c->w, NG_ARR_FEATURES, NG_DTYPE_F32, 2, shape),
                    done);
      out = npy->data;
    }
    if (row >= nodes) {
      st = ng__err(NG_ERR_FORMAT, "%s:%lld: more feature lines than the %lld nodes of %s", path,
                   (long long)r.line, (long long)nodes, NODE_COUNT_FILE);
      goto done;
    }
    const char *p = line;
    float *dst = out + row * dim;
    for (int64_t j = 0; j < dim; j++) {
      p = ng__skip_blanks(p);
      const char *tok = p;
      if (!ng__parse_float(&p, &dst[j])) {
        st = ng__err(NG_ERR_FORMAT, "%s:%lld: value %lld (column %zu): expected a finite number",
                     path, (long long)r.line, (long long)j + 1, ng__column(line, tok));
        goto done;
      }
      if (!isfinite(dst[j])) {
        st = ng__err(NG_ERR_FORMAT, "%s:%lld: value %lld (column %zu) does not fit float32", path,
                     (long long)r.line, (long long)j + 1, ng__column(line, tok));
        goto done;
      }
      p = ng__skip_blanks(p);
      bool last = j + 1 == dim;
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
  if (row != nodes) {
    st = ng__err(NG_ERR_FORMAT, "%s: %lld feature lines but %s says %lld nodes", path,
                 (long long)row, NODE_COUNT_FILE, (long long)nodes);
    goto done;
  }
  c->meta.info.feature_dim = dim;
done:
  ng__lines_close(&r);
  return st;
}

/* Labels: an integer class id ("3", or "3.0" as pandas writes integers beside NaNs), or "nan",
 * empty or -1 for an unlabelled node. */
static ng_status read_labels(ng_conv *c, const char *path, int64_t nodes, int32_t **labels) {
  ng_lines r;
  NG_CHECK(ng__lines_open(&r, path, &c->progress, "labels"));
  ng_status st = NG_OK;
  ng_npy *npy;
  int64_t row = 0;
  NG_CHECK_GOTO(st, ng__writer_array(&npy, &c->w, NG_ARR_LABELS, NG_DTYPE_I32, 1, &nodes), done);
  int32_t *out = npy->data;
  for (;;) {
    char *line;
    NG_CHECK_GOTO(st, ng__lines_next(&r, &line), done);
    if (!line)
      break;
    if (row >= nodes) {
      st = ng__err(NG_ERR_FORMAT, "%s:%lld: more label lines than the %lld nodes of %s", path,
                   (long long)r.line, (long long)nodes, NODE_COUNT_FILE);
      goto done;
    }
    const char *p = ng__skip_blanks(line);
    int64_t y = -1;
    bool ok = true;
    if (*p == '\0' || strncasecmp(p, "nan", 3) == 0) {
      p += *p ? 3 : 0;
    } else if (p[0] == '-' && p[1] == '1' && !(p[2] >= '0' && p[2] <= '9')) {
      p += 2;
    } else if ((ok = ng__parse_u63(&p, &y)) && *p == '.') {
      for (p++; *p == '0'; p++) {
      }
    }
    if (ok && *ng__skip_blanks(p) == ',') {
      st = ng__err(NG_ERR_UNSUPPORTED,
                   "%s:%lld: several labels on one line; multi-label datasets (such as "
                   "ogbn-proteins) are not supported",
                   path, (long long)r.line);
      goto done;
    }
    if (ok && *ng__skip_blanks(p) == '\0' && y >= NG_MAX_CLASSES) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:%lld: label %lld; at most %d classes are supported (labels 0 to %d)", path,
                   (long long)r.line, (long long)y, NG_MAX_CLASSES, NG_MAX_CLASSES - 1);
      goto done;
    }
    if (!ok || *ng__skip_blanks(p) != '\0') {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:%lld: expected a class id (an integer from 0), or nan for no label; the "
                   "line stops parsing at column %zu",
                   path, (long long)r.line, ng__column(line, p));
      goto done;
    }
    out[row++] = (int32_t)y;
  }
  if (row != nodes) {
    st = ng__err(NG_ERR_FORMAT, "%s: %lld label lines but %s says %lld nodes", path, (long long)row,
                 NODE_COUNT_FILE, (long long)nodes);
    goto done;
  }
  NG_CHECK_GOTO(st, ng__conv_classes(c, out, nodes, path, true), done);
  *labels = out;
done:
  ng__lines_close(&r);
  return st;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The split scheme: the one asked for, or the only folder under split/. *scheme is NULL when
 * the dataset has no split/ folder. */
ng_status ng__ogb_choose_split(ng_conv *c, const char *split_dir, char **scheme) {
  *scheme = NULL;
  DIR *d = opendir(split_dir);
  if (!d) {
    if (errno == ENOENT && !c->opts.split)
      return NG_OK;
    return ng__err_errno(errno == ENOENT ? NG_ERR_NOT_FOUND : NG_ERR_IO, errno,
                         "%s (looking for split scheme '%s')", split_dir,
                         c->opts.split ? c->opts.split : "");
  }
  char **names = NULL;
  size_t count = 0, cap = 0;
  ng_status st = NG_OK;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    char *full = ng__path_join(split_dir, de->d_name);
    struct stat sb;
    bool is_dir = full && stat(full, &sb) == 0 && S_ISDIR(sb.st_mode);
    free(full);
    if (!is_dir)
      continue;
    if (count == cap) {
      cap = cap ? 2 * cap : 8;
      char **bigger = realloc(names, cap * sizeof *names);
      if (!bigger) {
        st = ng__err(NG_ERR_NOMEM, "out of memory listing %s", split_dir);
        goto done;
      }
      names = bigger;
    }
    if (!(names[count] = strdup(de->d_name))) {
      st = ng__err(NG_ERR_NOMEM, "out of memory listing %s", split_dir);
      goto done;
    }
    count++;
  }
  if (count > 0)
    qsort(names, count, sizeof *names, cmp_str);
  char list[256] = "";
  for (size_t i = 0, n = 0; i < count && n < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", names[i]);
  const char *pick = NULL;
  if (c->opts.split) {
    for (size_t i = 0; i < count && !pick; i++)
      if (strcmp(names[i], c->opts.split) == 0)
        pick = names[i];
    if (!pick)
      st = ng__err(NG_ERR_NOT_FOUND, "%s: no split scheme '%s'; available: %s", split_dir,
                   c->opts.split, count ? list : "none");
  } else if (count == 1) {
    pick = names[0];
  } else if (count > 1) {
    st = ng__err(NG_ERR_INVALID_ARG,
                 "%s holds several split schemes (%s): choose one with --split NAME "
                 "(ng_convert_opts.split)",
                 split_dir, list);
  }
  if (pick && !(*scheme = strdup(pick)))
    st = ng__err(NG_ERR_NOMEM, "out of memory");
done:
  for (size_t i = 0; i < count; i++)
    free(names[i]);
  free(names);
  closedir(d);
  return st;
}

ng_status ng__convert_ogb(ng_conv *c) {
  static const char *const SPLIT_FILE[3] = {"train.csv.gz", "valid.csv.gz", "test.csv.gz"};
  char *raw = NULL, *count_path = NULL, *edge_path = NULL, *feat_path = NULL, *label_path = NULL;
  char *split_dir = NULL, *scheme = NULL, *scheme_dir = NULL, *split_path = NULL;
  uint8_t *member = NULL;
  ng_status st = NG_OK;
  raw = ng__path_join(c->src, "raw");
  count_path = ng__path_join(c->src, NODE_COUNT_FILE);
  edge_path = ng__path_join(c->src, "raw/edge.csv.gz");
  feat_path = ng__path_join(c->src, "raw/node-feat.csv.gz");
  label_path = ng__path_join(c->src, "raw/node-label.csv.gz");
  split_dir = ng__path_join(c->src, "split");
  if (!raw || !count_path || !edge_path || !feat_path || !label_path || !split_dir) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  struct stat sb;
  if (stat(raw, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    st = ng__err(NG_ERR_NOT_FOUND,
                 "%s: no raw/ folder; an OGB node-property folder (such as ogbn_arxiv/) has raw/ "
                 "and split/",
                 c->src);
    goto done;
  }
  if (!ng__file_exists(edge_path)) {
    st = ng__err(NG_ERR_NOT_FOUND,
                 "%s: not found; heterogeneous OGB datasets (raw/relations/, such as ogbn-mag) "
                 "convert with ng_hetero_convert_ogb (neargnn convert --format ogb picks it)",
                 edge_path);
    goto done;
  }
  if (!ng__file_exists(label_path)) {
    /* No node labels: a link-property folder (ogbl-*), runtime/convert_ogbl.c. */
    st = ng__convert_ogbl(c);
    goto done;
  }
  int64_t nodes;
  NG_CHECK_GOTO(st, ng__ogb_node_count(c, count_path, &nodes), done);
  NG_CHECK_GOTO(st, ng__ogb_check_node_count(nodes, label_path, 1, "label lines, one per node"),
                done);
  NG_CHECK_GOTO(
      st,
      ng__conv_edges(c, edge_path, NG_SEP_COMMA, nodes, NODE_COUNT_FILE, c->opts.undirected != 0),
      done);
  if (ng__file_exists(feat_path))
    NG_CHECK_GOTO(st, ng__ogb_features(c, feat_path, nodes), done);
  int32_t *labels = NULL;
  NG_CHECK_GOTO(st, read_labels(c, label_path, nodes, &labels), done);
  NG_CHECK_GOTO(st, ng__ogb_choose_split(c, split_dir, &scheme), done);
  if (scheme) {
    scheme_dir = ng__path_join(split_dir, scheme);
    member = ng__calloc((size_t)nodes, 1, "split membership");
    if (!scheme_dir || !member) {
      st = NG_ERR_NOMEM;
      goto done;
    }
    for (int s = 0; s < 3; s++) {
      free(split_path);
      if (!(split_path = ng__path_join(scheme_dir, SPLIT_FILE[s]))) {
        st = NG_ERR_NOMEM;
        goto done;
      }
      if (!ng__file_exists(split_path)) {
        st = ng__err(NG_ERR_NOT_FOUND, "%s: not found; a split scheme has %s, %s and %s",
                     split_path, SPLIT_FILE[0], SPLIT_FILE[1], SPLIT_FILE[2]);
        goto done;
      }
      NG_CHECK_GOTO(st, ng__conv_split(c, NG_ARR_TRAIN + s, split_path, nodes, member, labels),
                    done);
    }
    snprintf(c->detail, sizeof c->detail, "split=%s", scheme);
  }
done:
  free(member);
  free(split_path);
  free(scheme_dir);
  free(scheme);
  free(split_dir);
  free(label_path);
  free(feat_path);
  free(edge_path);
  free(count_path);
  free(raw);
  return st;
}
