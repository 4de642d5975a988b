/* ng_dataset_convert(): option checks and the pieces every input format shares (streaming line
 * reader, strict number parsing, edge lists into a CSR, split files). The formats themselves are
 * in convert_planetoid.c, convert_snap.c and convert_ogb.c. */
#include "convert_impl.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Text is read in chunks of READ_CHUNK bytes; a line longer than MAX_LINE is an error rather
 * than a reason to hold an arbitrary amount of memory. */
enum { READ_CHUNK = 1 << 20, MAX_LINE = 1 << 26, GZ_BUFFER = 1 << 18 };

/* ---------------------------------------------------------------------------------------- */
/* Line reader                                                                              */
/* ---------------------------------------------------------------------------------------- */

ng_status ng__lines_open(ng_lines *r, const char *path, ng_progress *progress, const char *phase) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->progress = progress;
  r->phase = phase;
  struct stat st;
  if (stat(path, &st) != 0)
    return ng__err_errno(errno == ENOENT ? NG_ERR_NOT_FOUND : NG_ERR_IO, errno, "%s", path);
  if (!S_ISREG(st.st_mode))
    return ng__err(NG_ERR_INVALID_ARG, "%s: is %s, not a regular file", path,
                   ng__file_kind(st.st_mode));
  r->file_bytes = (double)st.st_size;
  r->buf = ng__malloc(READ_CHUNK + 1, "a text read buffer");
  if (!r->buf)
    return NG_ERR_NOMEM;
  r->cap = READ_CHUNK;
  errno = 0;
  r->gz = gzopen(path, "rbe"); /* e: close on exec */
  if (!r->gz) {
    int e = errno ? errno : ENOMEM;
    ng__lines_close(r);
    return ng__err_errno(NG_ERR_IO, e, "%s: cannot open", path);
  }
  gzbuffer(r->gz, GZ_BUFFER);
  return NG_OK;
}

void ng__lines_close(ng_lines *r) {
  if (!r)
    return;
  if (r->gz)
    gzclose_r(r->gz);
  free(r->buf);
  memset(r, 0, sizeof *r);
}

/* Bytes of the file consumed so far (compressed bytes for gzip files). */
static double lines_done(const ng_lines *r) {
  z_off_t off = r->gz ? gzoffset(r->gz) : 0;
  return off > 0 ? (double)off : 0.0;
}

/* Starts again from the first line (second passes) under a new progress phase. */
static ng_status lines_rewind(ng_lines *r, const char *phase) {
  if (gzrewind(r->gz) != 0)
    return ng__err(NG_ERR_IO, "%s: cannot read the file a second time", r->path);
  r->len = r->pos = 0;
  r->line = 0;
  r->eof = false;
  r->phase = phase;
  return NG_OK;
}

static ng_status gz_failure(const ng_lines *r) {
  int err = Z_OK;
  const char *msg = gzerror(r->gz, &err);
  if (err == Z_ERRNO)
    return ng__err_errno(NG_ERR_IO, errno, "%s: read", r->path);
  if (err == Z_MEM_ERROR)
    return ng__err(NG_ERR_NOMEM, "%s: out of memory decompressing", r->path);
  return ng__err(NG_ERR_FORMAT,
                 "%s: corrupt or truncated gzip data after line %lld (%s); fetch the file again",
                 r->path, (long long)r->line, msg ? msg : "unknown zlib error");
}

ng_status ng__lines_next(ng_lines *r, char **line) {
  *line = NULL;
  for (;;) {
    char *start = r->buf + r->pos;
    size_t avail = r->len - r->pos;
    char *nl = avail ? memchr(start, '\n', avail) : NULL;
    if (nl || (r->eof && avail > 0)) {
      /* At the end of the file the last line may lack its '\n'; the buffer has one spare byte
       * past `cap` for its terminator. */
      char *end = nl ? nl : start + avail;
      r->pos += (size_t)(end - start) + (nl ? 1 : 0);
      if (end > start && end[-1] == '\r')
        end--;
      *end = '\0';
      r->line++;
      *line = start;
      return NG_OK;
    }
    if (r->eof) /* each file's phase ends with a report of its last byte */
      return ng__progress(r->progress, r->phase, r->file_bytes, r->file_bytes, true);
    if (r->pos > 0) {
      memmove(r->buf, start, avail);
      r->len = avail;
      r->pos = 0;
    }
    if (r->len == r->cap) {
      if (r->cap >= MAX_LINE)
        return ng__err(NG_ERR_FORMAT, "%s:%lld: line longer than %d MiB; is this a text file?",
                       r->path, (long long)r->line + 1, MAX_LINE >> 20);
      char *bigger = realloc(r->buf, 2 * r->cap + 1);
      if (!bigger)
        return ng__err(NG_ERR_NOMEM, "%s:%lld: out of memory holding a %zu-byte line", r->path,
                       (long long)r->line + 1, r->cap);
      r->buf = bigger;
      r->cap *= 2;
    }
    int n = gzread(r->gz, r->buf + r->len, (unsigned)(r->cap - r->len));
    if (n < 0)
      return gz_failure(r);
    if (n == 0) {
      int err = Z_OK;
      gzerror(r->gz, &err);
      if (err != Z_OK)
        return gz_failure(r);
      r->eof = true;
    }
    r->len += (size_t)n;
    NG_CHECK(ng__progress(r->progress, r->phase, lines_done(r), r->file_bytes, false));
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Parsing                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool ng__parse_u63(const char **pp, int64_t *out) {
  const char *p = *pp;
  if (!is_digit(*p))
    return false;
  uint64_t v = 0;
  do {
    uint64_t d = (uint64_t)(*p - '0');
    if (v > ((uint64_t)INT64_MAX - d) / 10)
      return false;
    v = v * 10 + d;
    p++;
  } while (is_digit(*p));
  *out = (int64_t)v;
  *pp = p;
  return true;
}

/* The "C" locale for strtof_l: the decimal separator must be '.', whatever the caller's
 * process set with setlocale(). Created once. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void) {
  c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

bool ng__parse_float(const char **pp, float *out) {
  /* Powers of ten that float holds exactly: with an integer mantissa below 2^24 (also exact),
   * one correctly rounded multiply or divide gives the correctly rounded result (Clinger's fast
   * path). Everything else goes to strtof_l once the syntax has been checked here. */
  static const float POW10[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
  enum { FAST_POW_MAX = 10, MAX_TOKEN = 128 };
  const char *p = *pp, *start = p;
  bool neg = false;
  if (*p == '+' || *p == '-')
    neg = *p++ == '-';
  uint64_t mant = 0;
  int64_t exp10 = 0;
  bool digits = false, exact = true;
  for (; is_digit(*p); p++) {
    digits = true;
    if (mant < (uint64_t)1e17)
      mant = mant * 10 + (uint64_t)(*p - '0');
    else {
      exp10++;
      exact = false;
    }
  }
  if (*p == '.') {
    for (p++; is_digit(*p); p++) {
      digits = true;
      if (mant < (uint64_t)1e17) {
        mant = mant * 10 + (uint64_t)(*p - '0');
        exp10--;
      } else {
        exact = false;
      }
    }
  }
  if (!digits)
    return false;
  if (*p == 'e' || *p == 'E') {
    const char *q = p + 1;
    bool eneg = false;
    if (*q == '+' || *q == '-')
      eneg = *q++ == '-';
    if (!is_digit(*q))
      return false;
    int64_t e = 0;
    for (; is_digit(*q); q++)
      if (e < 100000)
        e = e * 10 + (*q - '0');
    exp10 += eneg ? -e : e;
    p = q;
  }
  if (exact && mant <= ((uint64_t)1 << 24) && exp10 >= -FAST_POW_MAX && exp10 <= FAST_POW_MAX) {
    float f = (float)mant;
    f = exp10 < 0 ? f / POW10[-exp10] : f * POW10[exp10];
    *out = neg ? -f : f;
    *pp = p;
    return true;
  }
  size_t len = (size_t)(p - start);
  if (len >= MAX_TOKEN)
    return false;
  char tok[MAX_TOKEN];
  memcpy(tok, start, len);
  tok[len] = '\0';
  pthread_once(&c_locale_once, c_locale_init);
  *out = c_locale ? strtof_l(tok, NULL, c_locale) : strtof(tok, NULL);
  *pp = p;
  return true;
}

/* Parses one edge line: *is_edge is false for blank lines and (NG_SEP_BLANKS) '#' comments; a
 * malformed line is NG_ERR_FORMAT naming the file, the line number and the text. */
static ng_status parse_edge(const ng_lines *r, const char *line, ng_sep sep, int64_t *src,
                            int64_t *dst, bool *is_edge) {
  *is_edge = false;
  const char *p = ng__skip_blanks(line);
  if (*p == '\0' || (sep == NG_SEP_BLANKS && *p == '#'))
    return NG_OK;
  bool ok = ng__parse_u63(&p, src);
  if (ok && sep == NG_SEP_COMMA) {
    p = ng__skip_blanks(p);
    ok = *p == ',';
    p = ng__skip_blanks(p + (ok ? 1 : 0));
  } else if (ok) {
    ok = *p == ' ' || *p == '\t';
    p = ng__skip_blanks(p);
  }
  ok = ok && ng__parse_u63(&p, dst);
  if (ok)
    p = ng__skip_blanks(p);
  if (!ok || *p != '\0')
    return ng__err(NG_ERR_FORMAT,
                   "%s:%lld: expected two node ids (integers from 0 to 2^63-1) separated by %s; "
                   "the line stops parsing at column %zu",
                   r->path, (long long)r->line, sep == NG_SEP_COMMA ? "a comma" : "blanks",
                   ng__column(line, p));
  *is_edge = true;
  return NG_OK;
}

ng_status ng__lines_next_edge(ng_lines *r, ng_sep sep, int64_t *src, int64_t *dst, bool *got) {
  for (;;) {
    char *line;
    NG_CHECK(ng__lines_next(r, &line));
    if (!line) {
      *got = false;
      return NG_OK;
    }
    NG_CHECK(parse_edge(r, line, sep, src, dst, got));
    if (*got)
      return NG_OK;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Edge lists into the output CSR                                                           */
/* ---------------------------------------------------------------------------------------- */

static ng_status out_of_range(const ng_lines *r, int64_t id, int64_t nodes,
                              const char *nodes_from) {
  return ng__err(NG_ERR_FORMAT,
                 "%s:%lld: node id %lld is out of range: %s gives %lld nodes (ids 0 to %lld)",
                 r->path, (long long)r->line, (long long)id, nodes_from, (long long)nodes,
                 (long long)nodes - 1);
}

int64_t ng__counts_to_offsets(int64_t *ptr, int64_t nodes) {
  int64_t run = 0;
  for (int64_t v = 0; v < nodes; v++) {
    int64_t n = ptr[v];
    ptr[v] = run;
    run += n;
  }
  ptr[nodes] = run;
  return run;
}

ng_status ng__conv_fill_edges(ng_conv *c, ng_lines *r, ng_sep sep, int64_t *ptr, int64_t nodes,
                              bool undirected, uint64_t digest, ng_id_map map, void *map_ctx) {
  ng_status st;
  int64_t entries = ptr[nodes];
  bool wide = nodes >= NG_INDEX32_MAX_NODES;
  ng_npy *idx_npy;
  NG_CHECK(ng__writer_array(&idx_npy, &c->w, NG_ARR_INDICES, wide ? NG_DTYPE_I64 : NG_DTYPE_I32, 1,
                            &entries));
  int32_t *idx32 = wide ? NULL : idx_npy->data;
  int64_t *idx64 = wide ? idx_npy->data : NULL;
  /* ptr[v] is row v's write cursor; it ends at the start of row v + 1. */
  NG_CHECK(lines_rewind(r, "edges (pass 2 of 2)"));
  uint64_t digest2 = 0;
  int64_t written = 0;
  for (;;) {
    int64_t u, v;
    bool got;
    NG_CHECK(ng__lines_next_edge(r, sep, &u, &v, &got));
    if (!got)
      break;
    if (u == v)
      continue;
    digest2 = ng__edge_digest(digest2, u, v);
    if (map) {
      u = map(map_ctx, u);
      v = map(map_ctx, v);
    }
    /* A row that receives more entries than pass 1 counted would run past its end: the file
     * changed since pass 1, which the check after the loop reports. */
    if (u < 0 || v < 0 || u >= nodes || v >= nodes || ptr[v] >= entries ||
        (undirected && ptr[u] >= entries)) {
      written = -1;
      break;
    }
    int64_t pos = ptr[v]++;
    if (wide)
      idx64[pos] = u;
    else
      idx32[pos] = (int32_t)u;
    if (undirected) {
      pos = ptr[u]++;
      if (wide)
        idx64[pos] = v;
      else
        idx32[pos] = (int32_t)v;
    }
    written += undirected ? 2 : 1;
  }
  if (written != entries || digest2 != digest)
    return ng__err(NG_ERR_IO, "%s: the file changed while it was being read; convert it again",
                   r->path);
  memmove(ptr + 1, ptr, (size_t)nodes * sizeof *ptr);
  ptr[0] = 0;
  NG_CHECK(ng__progress(&c->progress, "edges (sort)", 0, 1, true));
  ng_csr view = {.nodes = nodes, .nnz = entries, .indptr = ptr, .idx32 = idx32, .idx64 = idx64};
  int64_t dups = 0;
  NG_CHECK(ng__csr_sort_dedup(&view, true, &dups, NULL));
  if (view.nnz < entries)
    NG_CHECK(ng__writer_shrink(&c->w, NG_ARR_INDICES, view.nnz));
  st = ng__progress(&c->progress, "edges (sort)", 1, 1, true);
  c->removed_dups += dups;
  c->meta.info.nodes = nodes;
  c->meta.info.edges = view.nnz;
  c->meta.info.index_bytes = wide ? 8 : 4;
  c->meta.info.undirected = undirected;
  return st;
}

ng_status ng__conv_edges(ng_conv *c, const char *path, ng_sep sep, int64_t nodes,
                         const char *nodes_from, bool undirected) {
  ng_lines r;
  NG_CHECK(ng__lines_open(&r, path, &c->progress, "edges (pass 1 of 2)"));
  ng_status st = NG_OK;
  ng_npy *ptr_npy;
  int64_t shape = nodes + 1;
  NG_CHECK_GOTO(st, ng__writer_array(&ptr_npy, &c->w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, &shape),
                done);
  int64_t *ptr = ptr_npy->data;
  /* Pass 1: row lengths into ptr[0, nodes). */
  uint64_t digest = 0;
  for (;;) {
    int64_t u, v;
    bool got;
    NG_CHECK_GOTO(st, ng__lines_next_edge(&r, sep, &u, &v, &got), done);
    if (!got)
      break;
    if (u >= nodes || v >= nodes) {
      st = out_of_range(&r, u >= nodes ? u : v, nodes, nodes_from);
      goto done;
    }
    if (u == v) {
      c->removed_loops++;
      continue;
    }
    ptr[v]++;
    if (undirected)
      ptr[u]++;
    digest = ng__edge_digest(digest, u, v);
  }
  ng__counts_to_offsets(ptr, nodes);
  st = ng__conv_fill_edges(c, &r, sep, ptr, nodes, undirected, digest, NULL, NULL);
done:
  ng__lines_close(&r);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Split files                                                                              */
/* ---------------------------------------------------------------------------------------- */

ng_status ng__conv_push_id(int64_t **ids, int64_t *count, int64_t *cap, int64_t v,
                           const char *path) {
  if (*count == *cap) {
    *cap = *cap ? 2 * *cap : 4096;
    int64_t *bigger = realloc(*ids, (size_t)*cap * sizeof **ids);
    if (!bigger)
      return ng__err(NG_ERR_NOMEM, "%s: out of memory holding %lld ids", path, (long long)*cap);
    *ids = bigger;
  }
  (*ids)[(*count)++] = v;
  return NG_OK;
}

static const char *const SPLIT_NAME[3] = {"train", "val", "test"};

ng_status ng__conv_split(ng_conv *c, ng_array_id id, const char *path, int64_t nodes,
                         uint8_t *member, const int32_t *labels) {
  int which = (int)id - NG_ARR_TRAIN;
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
    if (*p == '\0' || *p == '#')
      continue;
    int64_t v;
    bool ok = ng__parse_u63(&p, &v);
    if (!ok || *ng__skip_blanks(p) != '\0') {
      st = ng__err(NG_ERR_FORMAT,
                   "%s:%lld: expected one node id per line; the line stops parsing at column %zu",
                   path, (long long)r.line, ng__column(line, p));
      goto done;
    }
    if (v >= nodes) {
      st = ng__err(NG_ERR_FORMAT, "%s:%lld: node id %lld is out of range: the graph has %lld nodes",
                   path, (long long)r.line, (long long)v, (long long)nodes);
      goto done;
    }
    if (member[v]) {
      st = ng__err(NG_ERR_FORMAT, "%s:%lld: node %lld is already in the %s split%s", path,
                   (long long)r.line, (long long)v, SPLIT_NAME[member[v] - 1],
                   member[v] - 1 == which ? " (listed twice)" : "; splits must be disjoint");
      goto done;
    }
    if (labels && labels[v] < 0) {
      st =
          ng__err(NG_ERR_FORMAT, "%s:%lld: node %lld has no label, so it cannot be in the %s split",
                  path, (long long)r.line, (long long)v, SPLIT_NAME[which]);
      goto done;
    }
    member[v] = (uint8_t)(which + 1);
    NG_CHECK_GOTO(st, ng__conv_push_id(&ids, &count, &cap, v, path), done);
  }
  if (count > 0) {
    ng_npy *npy;
    NG_CHECK_GOTO(st, ng__writer_array(&npy, &c->w, id, NG_DTYPE_I64, 1, &count), done);
    memcpy(npy->data, ids, (size_t)count * sizeof *ids);
  }
  int64_t *dst = which == 0   ? &c->meta.info.train
                 : which == 1 ? &c->meta.info.val
                              : &c->meta.info.test;
  *dst = count;
done:
  free(ids);
  ng__lines_close(&r);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Class counts                                                                             */
/* ---------------------------------------------------------------------------------------- */

ng_status ng__conv_classes(ng_conv *c, const int32_t *labels, int64_t n, const char *path,
                           bool line_numbers) {
  uint8_t *used = ng__calloc(NG_MAX_CLASSES, 1, "the label histogram");
  if (!used)
    return NG_ERR_NOMEM;
  int64_t max = -1, max_row = -1, distinct = 0;
  for (int64_t v = 0; v < n; v++) {
    int32_t y = labels[v];
    if (y < 0)
      continue;
    distinct += !used[y];
    used[y] = 1;
    if (y > max) {
      max = y;
      max_row = v;
    }
  }
  free(used);
  if (max < 0)
    return ng__err(NG_ERR_FORMAT, "%s: no node has a label", path);
  int64_t classes = max + 1;
  if (classes > NG_SPARSE_CLASS_FACTOR * distinct + NG_SPARSE_CLASS_SLACK) {
    char where[64];
    snprintf(where, sizeof where, line_numbers ? ":%lld:" : ": node %lld:",
             (long long)(max_row + (line_numbers ? 1 : 0)));
    return ng__err(NG_ERR_FORMAT,
                   "%s%s label %lld makes %lld classes, but only %lld distinct labels are used, "
                   "so %lld classes would be empty; renumber the labels densely from 0 (numpy: "
                   "numpy.unique(y, return_inverse=True))",
                   path, where, (long long)max, (long long)classes, (long long)distinct,
                   (long long)(classes - distinct));
  }
  c->meta.info.classes = (int32_t)classes;
  return NG_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The public entry point                                                                   */
/* ---------------------------------------------------------------------------------------- */

static const char *const FORMAT_NAME[] = {
    [NG_FORMAT_PLANETOID] = "planetoid", [NG_FORMAT_SNAP] = "snap", [NG_FORMAT_OGB] = "ogb"};

/* Caps that catch nonsense options before they turn into huge allocations. */
enum { MAX_FEATURE_DIM = 1 << 20 };

static bool frac_ok(double f) {
  return isfinite(f) && f >= 0.0 && f <= 1.0;
}

static ng_status check_opts(ng_convert_opts *o, const ng_convert_opts *in) {
  const ng_convert_opts def = NG_CONVERT_OPTS_INIT;
  *o = def;
  if (!in)
    return NG_OK;
  if (in->size < sizeof(size_t))
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_convert_opts.size is %zu: initialise the options with NG_CONVERT_OPTS_INIT",
                   in->size);
  /* A caller built against an older, shorter struct gets the defaults for the newer fields;
   * fields of a newer, longer struct that this library does not know are ignored. */
  memcpy(o, in, NG_MIN(in->size, sizeof *o));
  o->size = sizeof *o;
  if ((unsigned)o->format > NG_FORMAT_OGB)
    return ng__err(NG_ERR_INVALID_ARG, "unknown input format %d: use planetoid, snap or ogb",
                   (int)o->format);
  bool snap = o->format == NG_FORMAT_SNAP;
  if (o->features != NG_FEATURES_NONE && o->features != NG_FEATURES_RANDOM)
    return ng__err(NG_ERR_INVALID_ARG, "unknown feature fill %d: use none or random",
                   (int)o->features);
  if (o->features == NG_FEATURES_RANDOM && !snap)
    return ng__err(NG_ERR_INVALID_ARG,
                   "random features are for SNAP edge lists; the %s format has its own features",
                   FORMAT_NAME[o->format]);
  if (o->features == NG_FEATURES_RANDOM && (o->feature_dim < 1 || o->feature_dim > MAX_FEATURE_DIM))
    return ng__err(NG_ERR_INVALID_ARG, "random features need a dimension from 1 to %d, got %lld",
                   MAX_FEATURE_DIM, (long long)o->feature_dim);
  if (o->features == NG_FEATURES_NONE && o->feature_dim != 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "a feature dimension (%lld) was given without random features; ask for "
                   "random features or leave the dimension at 0",
                   (long long)o->feature_dim);
  if (o->classes < 0)
    return ng__err(NG_ERR_INVALID_ARG, "classes must be >= 0, got %d", (int)o->classes);
  if (o->classes > NG_MAX_CLASSES)
    return ng__err(NG_ERR_INVALID_ARG, "classes is %d; at most %d classes are supported",
                   (int)o->classes, NG_MAX_CLASSES);
  if (o->classes > 0 && !snap)
    return ng__err(NG_ERR_INVALID_ARG,
                   "classes are for SNAP edge lists; the %s format takes them from its labels",
                   FORMAT_NAME[o->format]);
  if (snap && o->classes > 0) {
    if (!frac_ok(o->train_frac) || !frac_ok(o->val_frac) || !frac_ok(o->test_frac) ||
        o->train_frac + o->val_frac + o->test_frac > 1.0 + 1e-9)
      return ng__err(NG_ERR_INVALID_ARG,
                     "split fractions %g/%g/%g: each must be in [0, 1] and their sum at most 1",
                     o->train_frac, o->val_frac, o->test_frac);
  }
  if (o->split && o->format != NG_FORMAT_OGB)
    return ng__err(NG_ERR_INVALID_ARG, "a split scheme (%s) is only for OGB folders", o->split);
  if (o->split && (!*o->split || strchr(o->split, '/') || strcmp(o->split, "..") == 0 ||
                   strcmp(o->split, ".") == 0))
    return ng__err(NG_ERR_INVALID_ARG, "split scheme '%s': give a folder name under split/",
                   o->split);
  return NG_OK;
}

/* The default dataset name: the source's base name, for a SNAP file without its extensions. */
static void default_name(char *out, size_t cap, const char *src, bool is_file) {
  size_t n = strlen(src);
  while (n > 1 && src[n - 1] == '/')
    n--;
  size_t b = n;
  while (b > 0 && src[b - 1] != '/')
    b--;
  char base[256];
  size_t len = NG_MIN(n - b, sizeof base - 1);
  memcpy(base, src + b, len);
  base[len] = '\0';
  if (is_file) {
    static const char *const EXT[] = {".gz", ".txt", ".tsv", ".csv", ".edges", ".el"};
    for (size_t i = 0; i < NG_ARRAY_LEN(EXT); i++) {
      size_t e = strlen(EXT[i]);
      len = strlen(base);
      if (len > e && strcmp(base + len - e, EXT[i]) == 0)
        base[len - e] = '\0';
    }
  }
  ng__strlcpy(out, base[0] ? base : "converted", cap);
}

/* dataset.json "source": format, input path and options, in a line a person can read. */
static void describe_source(ng_conv *c) {
  const ng_convert_opts *o = &c->opts;
  char *s = c->meta.source;
  size_t cap = sizeof c->meta.source;
  int n = snprintf(s, cap, "ng_dataset_convert format=%s input=%s", FORMAT_NAME[o->format], c->src);
  if (o->format != NG_FORMAT_PLANETOID && n >= 0 && (size_t)n < cap)
    n += snprintf(s + n, cap - (size_t)n, " undirected=%d", o->undirected ? 1 : 0);
  if (o->format == NG_FORMAT_SNAP && n >= 0 && (size_t)n < cap) {
    n += snprintf(s + n, cap - (size_t)n, " features=%s",
                  o->features == NG_FEATURES_RANDOM ? "random" : "none");
    if (o->features == NG_FEATURES_RANDOM && n >= 0 && (size_t)n < cap)
      n += snprintf(s + n, cap - (size_t)n, " dim=%lld", (long long)o->feature_dim);
    if (n >= 0 && (size_t)n < cap)
      n += snprintf(s + n, cap - (size_t)n, " classes=%d", (int)o->classes);
    if (o->classes > 0 && n >= 0 && (size_t)n < cap)
      n += snprintf(s + n, cap - (size_t)n, " train=%g val=%g test=%g", o->train_frac, o->val_frac,
                    o->test_frac);
    if (n >= 0 && (size_t)n < cap)
      n += snprintf(s + n, cap - (size_t)n, " seed=%llu", (unsigned long long)o->seed);
  }
  if (n >= 0 && (size_t)n < cap && c->detail[0])
    n += snprintf(s + n, cap - (size_t)n, " %s", c->detail);
  if (n >= 0 && (size_t)n < cap)
    snprintf(s + n, cap - (size_t)n, "; removed %lld duplicate entries and %lld self loops",
             (long long)c->removed_dups, (long long)c->removed_loops);
}

ng_status ng_dataset_convert(const char *dst_dir, const char *src, const ng_convert_opts *opts) {
  ng_conv c;
  memset(&c, 0, sizeof c);
  NG_CHECK(check_opts(&c.opts, opts));
  if (!src || !*src)
    return ng__err(NG_ERR_INVALID_ARG, "no input given to convert");
  struct stat st_src;
  if (stat(src, &st_src) != 0)
    return ng__err_errno(errno == ENOENT ? NG_ERR_NOT_FOUND : NG_ERR_IO, errno, "%s", src);
  bool want_file = c.opts.format == NG_FORMAT_SNAP;
  if (want_file && !S_ISREG(st_src.st_mode))
    return ng__err(NG_ERR_INVALID_ARG, "%s: is %s; the snap format reads an edge-list file", src,
                   ng__file_kind(st_src.st_mode));
  if (!want_file && !S_ISDIR(st_src.st_mode))
    return ng__err(NG_ERR_INVALID_ARG, "%s: is %s; the %s format reads a folder", src,
                   ng__file_kind(st_src.st_mode), FORMAT_NAME[c.opts.format]);
  c.src = src;
  ng__progress_init(&c.progress, c.opts.progress, c.opts.progress_ctx);
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  c.meta.info = info;
  if (c.opts.name && *c.opts.name)
    ng__strlcpy(c.meta.info.name, c.opts.name, sizeof c.meta.info.name);
  else
    default_name(c.meta.info.name, sizeof c.meta.info.name, src, want_file);
  NG_CHECK(ng__writer_begin(&c.w, dst_dir));
  ng_status st;
  switch (c.opts.format) {
  case NG_FORMAT_PLANETOID:
    st = ng__convert_planetoid(&c);
    break;
  case NG_FORMAT_SNAP:
    st = ng__convert_snap(&c);
    break;
  default:
    st = ng__convert_ogb(&c);
    break;
  }
  if (st == NG_OK)
    st = ng__progress(&c.progress, "done", 1, 1, true);
  if (st != NG_OK) {
    ng__writer_abort(&c.w);
    return st;
  }
  describe_source(&c);
  return ng__writer_commit(&c.w, &c.meta);
}
