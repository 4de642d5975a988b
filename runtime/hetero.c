/* Opening a heterogeneous dataset folder (docs/heterogeneous.md): dataset.json's node and edge
 * types and the memory-mapped arrays of each, validated against each other before anything
 * else trusts them, with the homogeneous checks (runtime/dataset.c) applied per type and per
 * relation. A homogeneous folder opens as one node type and one relation. */
#include "hetero_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const SPLIT_NAME[3] = {"train", "val", "test"};
static const char *const SPLIT_FILE[3] = {"train_idx.npy", "val_idx.npy", "test_idx.npy"};
/* Feature rows checked for NaN/Inf on open without check_features: a fixed sample, so that the
 * cost does not grow with the table (the homogeneous loader samples as many). */
enum { FEATURE_SAMPLE_ROWS = 4098 };
/* Classes beyond twice the labels in use that a dataset may declare (as the homogeneous rule). */
enum { CLASS_SLACK = 8 };
#define JSON_MAX_COUNT ((int64_t)1 << 53)

/* ---- names ---- */

bool ng__hetero_name_ok(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > NG_HETERO_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  }
  return true;
}

void ng__hetero_features_file(char *buf, size_t cap, const char *type) {
  snprintf(buf, cap, "%s.features.npy", type);
}

void ng__hetero_labels_file(char *buf, size_t cap, const char *type) {
  snprintf(buf, cap, "%s.labels.npy", type);
}

void ng__hetero_csr_file(char *buf, size_t cap, const char *src, const char *rel, const char *dst,
                         bool indices) {
  snprintf(buf, cap, "%s.%s.%s.%s.npy", src, rel, dst, indices ? "indices" : "indptr");
}

/* ---- dataset.json ----
 * cJSON keeps numbers as doubles, which cannot tell 2708 from 2.708e3 nor 2^53 + 1 from 2^53.
 * The number tokens of the text, in order, are the number items of the parsed tree in a
 * depth-first walk (both follow the document), which pairs every item with its text. */

typedef struct {
  const cJSON **item;
  char (*text)[41];
  int64_t n;
} num_map;

static int64_t scan_number_tokens(char (*out)[41], const char *t, size_t len) {
  int64_t n = 0;
  for (size_t i = 0; i < len;) {
    const char c = t[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < len && t[j] != '"')
        j += t[j] == '\\' ? 2 : 1;
      i = j + 1;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < len && (strchr("+-.eE", t[j]) || (t[j] >= '0' && t[j] <= '9')))
        j++;
      if (out) {
        const size_t k = NG_MIN(j - i, sizeof out[0] - 1);
        memcpy(out[n], t + i, k);
        out[n][k] = '\0';
      }
      n++;
      i = j;
    } else {
      i++;
    }
  }
  return n;
}

static void walk_numbers(num_map *m, int64_t *at, const cJSON *item) {
  for (const cJSON *c = item; c; c = c->next) {
    if (cJSON_IsNumber(c) && *at < m->n)
      m->item[(*at)++] = c;
    if (c->child)
      walk_numbers(m, at, c->child);
  }
}

static ng_status map_numbers(num_map *m, const cJSON *root, const char *text, size_t len,
                             const char *path) {
  memset(m, 0, sizeof *m);
  m->n = scan_number_tokens(NULL, text, len);
  m->item = ng__calloc((size_t)m->n + 1, sizeof *m->item, "dataset.json's numbers");
  m->text = ng__calloc((size_t)m->n + 1, sizeof *m->text, "dataset.json's numbers");
  if (!m->item || !m->text)
    return NG_ERR_NOMEM;
  scan_number_tokens(m->text, text, len);
  int64_t at = 0;
  walk_numbers(m, &at, root);
  if (at != m->n)
    return ng__err(NG_ERR_INTERNAL, "%s: %lld number tokens but %lld numbers parsed", path,
                   (long long)m->n, (long long)at);
  return NG_OK;
}

static void free_numbers(num_map *m) {
  free(m->item);
  free(m->text);
}

/* The context of messages: the file and the object a key is in ("node_types[1]"). */
typedef struct {
  const char *path;
  const num_map *nums;
} jctx;

/* A non-negative integer key, written in plain digits and at most 2^53. Absent: `*out` keeps
 * `dflt` when `dflt >= 0`, else the key is required. */
static ng_status jcount(int64_t *out, const cJSON *obj, const char *where, const char *key,
                        int64_t dflt, const jctx *c) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!item) {
    if (dflt >= 0) {
      *out = dflt;
      return NG_OK;
    }
    return ng__err(NG_ERR_FORMAT,
                   "%s: %s key \"%s\" is missing; add it (see docs/heterogeneous.md)", c->path,
                   where, key);
  }
  if (!cJSON_IsNumber(item))
    return ng__err(NG_ERR_FORMAT, "%s: %s \"%s\" is %s; it must be a non-negative integer", c->path,
                   where, key, ng__json_type_name(item));
  const char *text = NULL;
  for (int64_t i = 0; i < c->nums->n && !text; i++)
    if (c->nums->item[i] == item)
      text = c->nums->text[i];
  if (!text)
    return ng__err(NG_ERR_INTERNAL, "%s: %s \"%s\": number text not found", c->path, where, key);
  if (text[0] == '-')
    return ng__err(NG_ERR_FORMAT, "%s: %s \"%s\" is %s; counts must be non-negative", c->path,
                   where, key, text);
  int64_t v = 0;
  for (const char *p = text; *p; p++) {
    if (*p < '0' || *p > '9')
      return ng__err(NG_ERR_FORMAT,
                     "%s: %s \"%s\" is %s; it must be an integer written in plain digits (no "
                     "fraction, no exponent)",
                     c->path, where, key, text);
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p - '0', &v) ||
        v > JSON_MAX_COUNT)
      return ng__err(NG_ERR_FORMAT, "%s: %s \"%s\" is %s; it must be an integer of at most 2^53",
                     c->path, where, key, text);
  }
  *out = v;
  return NG_OK;
}

static ng_status jstring(const char **out, const cJSON *obj, const char *where, const char *key,
                         bool required, const jctx *c) {
  *out = NULL;
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!item) {
    if (!required)
      return NG_OK;
    return ng__err(NG_ERR_FORMAT,
                   "%s: %s key \"%s\" is missing; add it (see docs/heterogeneous.md)", c->path,
                   where, key);
  }
  if (!cJSON_IsString(item) || !item->valuestring)
    return ng__err(NG_ERR_FORMAT, "%s: %s \"%s\" is %s; it must be a string", c->path, where, key,
                   ng__json_type_name(item));
  *out = item->valuestring;
  return NG_OK;
}

static ng_status jname(const char **out, const cJSON *obj, const char *where, const char *key,
                       const jctx *c) {
  NG_CHECK(jstring(out, obj, where, key, true, c));
  if (!ng__hetero_name_ok(*out))
    return ng__err(NG_ERR_FORMAT,
                   "%s: %s \"%s\" is \"%.40s\"; names are 1 to %d letters, digits, '_' or '-' "
                   "(they are part of file names)",
                   c->path, where, key, *out, NG_HETERO_NAME_MAX);
  return NG_OK;
}

static int32_t find_type(const struct ng_hetero *ds, int32_t n, const char *name) {
  for (int32_t t = 0; t < n; t++)
    if (strcmp(ds->ntypes[t].name, name) == 0)
      return t;
  return -1;
}

/* "paper, author, ..." for messages that list the node types. */
static void type_list(char *buf, size_t cap, const struct ng_hetero *ds, int32_t n) {
  size_t at = 0;
  buf[0] = '\0';
  for (int32_t t = 0; t < n && at < cap; t++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%s", t ? ", " : "", ds->ntypes[t].name);
}

static ng_status parse_node_types(struct ng_hetero *ds, const cJSON *root, const jctx *c) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "node_types");
  if (!cJSON_IsArray(arr))
    return ng__err(NG_ERR_FORMAT, "%s: \"node_types\" is %s; it must be a list of objects", c->path,
                   ng__json_type_name(arr));
  int n = cJSON_GetArraySize(arr);
  if (n < 1 || n > NG_HETERO_MAX_NODE_TYPES)
    return ng__err(NG_ERR_FORMAT, "%s: \"node_types\" lists %d types; between 1 and %d are read",
                   c->path, n, NG_HETERO_MAX_NODE_TYPES);
  ds->ntypes = ng__calloc((size_t)n, sizeof *ds->ntypes, "node types");
  if (!ds->ntypes)
    return NG_ERR_NOMEM;
  ds->info.node_types = n;
  int32_t t = 0;
  for (const cJSON *e = arr->child; e; e = e->next, t++) {
    char where[48];
    snprintf(where, sizeof where, "node_types[%d]", (int)t);
    if (!cJSON_IsObject(e))
      return ng__err(NG_ERR_FORMAT, "%s: %s is %s; it must be an object {\"name\", \"count\", ...}",
                     c->path, where, ng__json_type_name(e));
    ng_hetero_ntype *nt = &ds->ntypes[t];
    const char *name = NULL;
    NG_CHECK(jname(&name, e, where, "name", c));
    if (find_type(ds, t, name) >= 0)
      return ng__err(NG_ERR_FORMAT,
                     "%s: node type \"%s\" is named twice (node_types[%d] and %s); each type "
                     "appears once",
                     c->path, name, (int)find_type(ds, t, name), where);
    ng__strlcpy(nt->name, name, sizeof nt->name);
    snprintf(where, sizeof where, "node type \"%s\":", name);
    NG_CHECK(jcount(&nt->count, e, where, "count", -1, c));
    NG_CHECK(jcount(&nt->feature_dim, e, where, "feature_dim", -1, c));
    int64_t classes = 0;
    NG_CHECK(jcount(&classes, e, where, "classes", 0, c));
    if (classes > NG_MAX_CLASSES)
      return ng__err(NG_ERR_FORMAT,
                     "%s: %s \"classes\" is %lld; at most %d are accepted (the output layer grows "
                     "with it): renumber the labels 0 to classes - 1",
                     c->path, where, (long long)classes, NG_MAX_CLASSES);
    nt->classes = (int32_t)classes;
    if (classes > 0) {
      if (ds->info.target >= 0)
        return ng__err(NG_ERR_FORMAT,
                       "%s: node types \"%s\" and \"%s\" both have \"classes\"; labels are on one "
                       "type, the target: set the other's to 0",
                       c->path, ds->ntypes[ds->info.target].name, name);
      ds->info.target = t;
      ds->info.classes = nt->classes;
    }
    if (ds->info.index_bytes == 4 && nt->count >= NG_INDEX32_MAX_NODES)
      return ng__err(NG_ERR_FORMAT,
                     "%s: \"index_dtype\" is \"int32\" but node type \"%s\" has %lld nodes, whose "
                     "ids need 2^31 and more; store the indices as int64 and set \"index_dtype\": "
                     "\"int64\"",
                     c->path, name, (long long)nt->count);
    ds->info.nodes += nt->count; /* each at most 2^53, at most 64 of them: no overflow */
  }
  return NG_OK;
}

static ng_status parse_edge_types(struct ng_hetero *ds, const cJSON *root, const jctx *c) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "edge_types");
  if (!arr)
    return ng__err(NG_ERR_FORMAT,
                   "%s: key \"edge_types\" is missing; add the list of {\"src\", \"relation\", "
                   "\"dst\", \"edges\"} (see docs/heterogeneous.md)",
                   c->path);
  if (!cJSON_IsArray(arr))
    return ng__err(NG_ERR_FORMAT, "%s: \"edge_types\" is %s; it must be a list of objects", c->path,
                   ng__json_type_name(arr));
  int n = cJSON_GetArraySize(arr);
  if (n < 1 || n > NG_HETERO_MAX_EDGE_TYPES)
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"edge_types\" lists %d relations; between 1 and %d are read", c->path, n,
                   NG_HETERO_MAX_EDGE_TYPES);
  ds->etypes = ng__calloc((size_t)n, sizeof *ds->etypes, "edge types");
  if (!ds->etypes)
    return NG_ERR_NOMEM;
  ds->info.edge_types = n;
  int32_t r = 0;
  for (const cJSON *e = arr->child; e; e = e->next, r++) {
    char where[48];
    snprintf(where, sizeof where, "edge_types[%d]", (int)r);
    if (!cJSON_IsObject(e))
      return ng__err(NG_ERR_FORMAT,
                     "%s: %s is %s; it must be an object {\"src\", \"relation\", \"dst\", "
                     "\"edges\"}",
                     c->path, where, ng__json_type_name(e));
    ng_hetero_etype *et = &ds->etypes[r];
    const char *src = NULL, *rel = NULL, *dst = NULL;
    NG_CHECK(jstring(&src, e, where, "src", true, c));
    NG_CHECK(jname(&rel, e, where, "relation", c));
    NG_CHECK(jstring(&dst, e, where, "dst", true, c));
    const char *ends[2] = {src, dst};
    int32_t *ids[2] = {&et->src, &et->dst};
    for (int k = 0; k < 2; k++) {
      *ids[k] = find_type(ds, ds->info.node_types, ends[k]);
      if (*ids[k] < 0) {
        char types[512];
        type_list(types, sizeof types, ds, ds->info.node_types);
        return ng__err(NG_ERR_FORMAT,
                       "%s: %s \"%s\" is \"%.40s\", which is not a node type; the types are %s",
                       c->path, where, k ? "dst" : "src", ends[k], types);
      }
    }
    ng__strlcpy(et->relation, rel, sizeof et->relation);
    for (int32_t q = 0; q < r; q++)
      if (ds->etypes[q].src == et->src && ds->etypes[q].dst == et->dst &&
          strcmp(ds->etypes[q].relation, rel) == 0)
        return ng__err(NG_ERR_FORMAT,
                       "%s: edge type (%s, %s, %s) is listed twice (edge_types[%d] and %s); each "
                       "appears once",
                       c->path, src, rel, dst, (int)q, where);
    snprintf(where, sizeof where, "edge type (%s, %s, %s):", src, rel, dst);
    NG_CHECK(jcount(&et->csr.nnz, e, where, "edges", -1, c));
    et->csr.nodes = ds->ntypes[et->dst].count;
    ds->info.edges += et->csr.nnz;
  }
  return NG_OK;
}

static ng_status parse_splits(struct ng_hetero *ds, const cJSON *root, const jctx *c) {
  const cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
  if (!splits)
    return ng__err(NG_ERR_FORMAT,
                   "%s: key \"splits\" is missing; add {\"train\": N, \"val\": N, \"test\": N} "
                   "(zeros when there are none)",
                   c->path);
  if (!cJSON_IsObject(splits))
    return ng__err(NG_ERR_FORMAT, "%s: \"splits\" is %s; it must be an object", c->path,
                   ng__json_type_name(splits));
  int64_t *count[3] = {&ds->info.train, &ds->info.val, &ds->info.test};
  int64_t total = 0;
  for (int s = 0; s < 3; s++) {
    NG_CHECK(jcount(count[s], splits, "splits:", SPLIT_NAME[s], -1, c));
    if (*count[s] > 0 && ds->info.target < 0)
      return ng__err(NG_ERR_FORMAT,
                     "%s: \"splits.%s\" is %lld but no node type has \"classes\": split nodes "
                     "need labels; give the target type \"classes\" and labels, or set the split "
                     "to 0",
                     c->path, SPLIT_NAME[s], (long long)*count[s]);
    total += *count[s];
  }
  if (total > 0 && total > ds->ntypes[ds->info.target].count)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the splits hold %lld nodes together but the target type \"%s\" has %lld; "
                   "splits must be disjoint sets of its nodes",
                   c->path, (long long)total, ds->ntypes[ds->info.target].name,
                   (long long)ds->ntypes[ds->info.target].count);
  return NG_OK;
}

static ng_status parse_json(struct ng_hetero *ds, const cJSON *root, const jctx *c) {
  const char *format = NULL;
  NG_CHECK(jstring(&format, root, "", "format", true, c));
  if (strcmp(format, NG_DATASET_FORMAT) != 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"format\" is \"%.64s\", not \"" NG_DATASET_FORMAT
                   "\"; this folder is not a neargnn dataset",
                   c->path, format);
  int64_t version = 0;
  NG_CHECK(jcount(&version, root, "", "version", -1, c));
  if (version > NG_DATASET_VERSION)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "%s: dataset format version %lld is newer than this neargnn reads (%d); "
                   "upgrade neargnn",
                   c->path, (long long)version, NG_DATASET_VERSION);
  if (version < 1)
    return ng__err(NG_ERR_FORMAT, "%s: \"version\" is %lld; versions start at 1", c->path,
                   (long long)version);
  const char *name = NULL;
  NG_CHECK(jstring(&name, root, "", "name", false, c));
  if (!name) {
    const char *slash = strrchr(ds->dir, '/');
    name = slash && slash[1] ? slash + 1 : ds->dir;
  }
  ng__strlcpy(ds->info.name, name, sizeof ds->info.name);
  const char *index_dtype = NULL;
  NG_CHECK(jstring(&index_dtype, root, "", "index_dtype", true, c));
  if (strcmp(index_dtype, "int32") == 0)
    ds->info.index_bytes = 4;
  else if (strcmp(index_dtype, "int64") == 0)
    ds->info.index_bytes = 8;
  else
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"index_dtype\" is \"%.32s\"; it must be \"int32\" or \"int64\"", c->path,
                   index_dtype);
  const char *feature_dtype = NULL;
  NG_CHECK(jstring(&feature_dtype, root, "", "feature_dtype", false, c));
  if (feature_dtype && strcmp(feature_dtype, "float32") != 0)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "%s: \"feature_dtype\" is \"%.32s\"; only float32 features are supported",
                   c->path, feature_dtype);
  const char *source = NULL;
  NG_CHECK(jstring(&source, root, "", "source", false, c));
  NG_CHECK(parse_node_types(ds, root, c));
  NG_CHECK(parse_edge_types(ds, root, c));
  NG_CHECK(parse_splits(ds, root, c));
  return ng__json_parse_id(ds->id, &ds->has_id, root, c->path);
}

/* ---- arrays ---- */

/* Maps `file` when `present` (dtype and shape as dataset.json implies), and refuses it when
 * not: `why` is the dataset.json fact that says it is absent. */
static ng_status map_array(ng_npy *out, const char *dir, const char *file, bool present,
                           ng_dtype dtype, int ndim, int64_t d0, int64_t d1, const char *why,
                           bool populate) {
  char *path = ng__path_join(dir, file);
  if (!path)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (errno != ENOENT)
      st = ng__err_errno(NG_ERR_IO, errno, "%s", path);
    else if (present)
      st = ng__err(NG_ERR_NOT_FOUND,
                   "%s: missing, but dataset.json implies a %s array of shape [%lld%s]; restore "
                   "the file or re-create the dataset",
                   path, ng__dtype_name(dtype), (long long)d0, ndim == 2 ? ", ..." : "");
    goto cleanup;
  }
  if (!present) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s: present but dataset.json says %s; remove the file or update dataset.json",
                 path, why);
    goto cleanup;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = ng__err(NG_ERR_FORMAT, "%s: is %s, not a regular file; replace it with the .npy array",
                 path, ng__file_kind(sb.st_mode));
    goto cleanup;
  }
  NG_CHECK_GOTO(st, ng__npy_map(out, path, populate), cleanup);
  const ng_npy_header *h = &out->hdr;
  if (h->dtype != dtype) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s: dtype %s, but it must be %s; re-save it (numpy: a.astype(numpy.%s))", path,
                 ng__dtype_name(h->dtype), ng__dtype_name(dtype), ng__dtype_name(dtype));
    goto cleanup;
  }
  if (h->ndim != ndim || h->shape[0] != d0 || (ndim == 2 && h->shape[1] != d1)) {
    char got[96];
    ng__shape_text(got, sizeof got, h->ndim, h->shape);
    char want[64];
    if (ndim == 2)
      snprintf(want, sizeof want, "[%lld, %lld]", (long long)d0, (long long)d1);
    else
      snprintf(want, sizeof want, "[%lld]", (long long)d0);
    st = ng__err(NG_ERR_FORMAT,
                 "%s: shape %s, but dataset.json implies %s; the array and dataset.json disagree, "
                 "re-create one of them",
                 path, got, want);
  }
cleanup:
  if (st != NG_OK)
    ng__npy_close(out);
  free(path);
  return st;
}

static ng_status map_arrays(struct ng_hetero *ds, bool populate) {
  char file[160];
  for (int32_t t = 0; t < ds->info.node_types; t++) {
    ng_hetero_ntype *nt = &ds->ntypes[t];
    ng__hetero_features_file(file, sizeof file, nt->name);
    NG_CHECK(map_array(&nt->features_npy, ds->dir, file, nt->feature_dim > 0, NG_DTYPE_F32, 2,
                       nt->count, nt->feature_dim, "its type's \"feature_dim\" is 0", populate));
    nt->features = nt->features_npy.data;
    ng__hetero_labels_file(file, sizeof file, nt->name);
    NG_CHECK(map_array(&nt->labels_npy, ds->dir, file, nt->classes > 0, NG_DTYPE_I32, 1, nt->count,
                       0, "its type has no \"classes\" (labels are on the target type only)",
                       populate));
    nt->labels = nt->labels_npy.data;
  }
  for (int32_t r = 0; r < ds->info.edge_types; r++) {
    ng_hetero_etype *et = &ds->etypes[r];
    const char *src = ds->ntypes[et->src].name, *dst = ds->ntypes[et->dst].name;
    ng__hetero_csr_file(file, sizeof file, src, et->relation, dst, false);
    NG_CHECK(map_array(&et->indptr_npy, ds->dir, file, true, NG_DTYPE_I64, 1, et->csr.nodes + 1, 0,
                       "", populate));
    ng__hetero_csr_file(file, sizeof file, src, et->relation, dst, true);
    NG_CHECK(map_array(&et->indices_npy, ds->dir, file, true,
                       ds->info.index_bytes == 8 ? NG_DTYPE_I64 : NG_DTYPE_I32, 1, et->csr.nnz, 0,
                       "", populate));
    et->csr.indptr = et->indptr_npy.data;
    if (ds->info.index_bytes == 8)
      et->csr.idx64 = et->indices_npy.data;
    else
      et->csr.idx32 = et->indices_npy.data;
  }
  int64_t count[3] = {ds->info.train, ds->info.val, ds->info.test};
  for (int s = 0; s < 3; s++) {
    char why[48];
    snprintf(why, sizeof why, "\"splits.%s\" is 0", SPLIT_NAME[s]);
    NG_CHECK(map_array(&ds->split_npy[s], ds->dir, SPLIT_FILE[s], count[s] > 0, NG_DTYPE_I64, 1,
                       count[s], 0, why, populate));
    ds->split[s] = ds->split_npy[s].data;
  }
  return NG_OK;
}

/* ---- validation ---- */

static ng_status check_csr(const struct ng_hetero *ds, int32_t r) {
  const ng_hetero_etype *et = &ds->etypes[r];
  const char *src = ds->ntypes[et->src].name, *dst = ds->ntypes[et->dst].name;
  const int64_t *indptr = et->csr.indptr;
  const int64_t rows = et->csr.nodes, edges = et->csr.nnz;
  char f[160];
  ng__hetero_csr_file(f, sizeof f, src, et->relation, dst, false);
  if (indptr[0] != 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indptr[0] = %lld, but it must be 0; the CSR is corrupt, re-create the "
                   "dataset",
                   ds->dir, f, (long long)indptr[0]);
  int64_t bad = ng__scan_monotone(indptr, rows);
  if (bad >= 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indptr[%lld] = %lld < indptr[%lld] = %lld: not monotone; the CSR is "
                   "corrupt, re-create the dataset",
                   ds->dir, f, (long long)(bad + 1), (long long)indptr[bad + 1], (long long)bad,
                   (long long)indptr[bad]);
  if (indptr[rows] != edges)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indptr[%lld] = %lld, but dataset.json says \"edges\": %lld for (%s, %s, "
                   "%s); the CSR and dataset.json disagree",
                   ds->dir, f, (long long)rows, (long long)indptr[rows], (long long)edges, src,
                   et->relation, dst);
  ng__hetero_csr_file(f, sizeof f, src, et->relation, dst, true);
  const int64_t limit = ds->ntypes[et->src].count;
  const void *idx = et->csr.idx64 ? (const void *)et->csr.idx64 : (const void *)et->csr.idx32;
  bad = ng__scan_range(idx, ds->info.index_bytes, edges, 0, limit);
  if (bad >= 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indices[%lld] = %lld (in row %lld, a \"%s\" node) is not a \"%s\" id "
                   "in [0, %lld): entries are ids of the source type",
                   ds->dir, f, (long long)bad, (long long)ng__csr_index(&et->csr, bad),
                   (long long)ng__csr_row_of(indptr, rows, bad), dst, src, (long long)limit);
  return NG_OK;
}

static ng_status check_labels(const struct ng_hetero *ds) {
  if (ds->info.target < 0)
    return NG_OK;
  const ng_hetero_ntype *nt = &ds->ntypes[ds->info.target];
  char f[64];
  ng__hetero_labels_file(f, sizeof f, nt->name);
  int64_t bad = ng__scan_range(nt->labels, 4, nt->count, -1, nt->classes);
  if (bad >= 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: labels[%lld] = %d is outside [-1, %d) (-1 marks an unlabelled node); "
                   "fix the labels or the type's \"classes\" in dataset.json",
                   ds->dir, f, (long long)bad, nt->labels[bad], nt->classes);
  int32_t top = -1;
  for (int64_t i = 0; i < nt->count; i++)
    top = nt->labels[i] > top ? nt->labels[i] : top;
  const int64_t allowed = 2 * ((int64_t)top + 1) + CLASS_SLACK;
  if (nt->classes > allowed)
    return ng__err(NG_ERR_FORMAT,
                   "%s: node type \"%s\" says \"classes\": %d but its largest label is %d; at "
                   "most %lld (2 x (largest + 1) + %d) are accepted, so that the output layer is "
                   "not mostly dead columns: set \"classes\" to %d",
                   ds->dir, nt->name, nt->classes, top, (long long)allowed, CLASS_SLACK, top + 1);
  return NG_OK;
}

static ng_status check_splits(const struct ng_hetero *ds) {
  if (ds->info.target < 0)
    return NG_OK;
  const ng_hetero_ntype *nt = &ds->ntypes[ds->info.target];
  const int64_t n = nt->count;
  uint8_t *owner = NULL; /* which split (1 + s) holds each node, 0: none */
  int64_t count[3] = {ds->info.train, ds->info.val, ds->info.test};
  ng_status st = NG_OK;
  if (count[0] + count[1] + count[2] > 0) {
    owner = ng__calloc((size_t)n, 1, "split membership");
    if (!owner)
      return NG_ERR_NOMEM;
  }
  for (int s = 0; s < 3 && st == NG_OK; s++) {
    const int64_t *ids = ds->split[s];
    int64_t bad = ng__scan_range(ids, 8, count[s], 0, n);
    if (bad >= 0) {
      st = ng__err(NG_ERR_FORMAT,
                   "%s/%s: entry %lld is %lld, not a \"%s\" id in [0, %lld) (splits hold ids of "
                   "the target type)",
                   ds->dir, SPLIT_FILE[s], (long long)bad, (long long)ids[bad], nt->name,
                   (long long)n);
      break;
    }
    for (int64_t i = 0; i < count[s]; i++) {
      const int64_t v = ids[i];
      if (nt->labels[v] < 0) {
        st = ng__err(NG_ERR_FORMAT,
                     "%s/%s: entry %lld is node %lld, which is unlabelled (label -1); split nodes "
                     "need labels",
                     ds->dir, SPLIT_FILE[s], (long long)i, (long long)v);
        break;
      }
      if (owner[v]) {
        st = ng__err(NG_ERR_FORMAT,
                     owner[v] == 1 + s ? "%s/%s: node %lld appears twice (entry %lld); remove the "
                                         "repeat%s"
                                       : "%s/%s: node %lld (entry %lld) is also in the %s split; "
                                         "splits must be disjoint",
                     ds->dir, SPLIT_FILE[s], (long long)v, (long long)i,
                     owner[v] == 1 + s ? "" : SPLIT_NAME[owner[v] - 1]);
        break;
      }
      owner[v] = (uint8_t)(1 + s);
    }
  }
  free(owner);
  return st;
}

static ng_status check_features(const struct ng_hetero *ds, bool all) {
  for (int32_t t = 0; t < ds->info.node_types; t++) {
    const ng_hetero_ntype *nt = &ds->ntypes[t];
    if (!nt->features || nt->count == 0)
      continue;
    const int64_t dim = nt->feature_dim;
    const int64_t rows = all ? nt->count : NG_MIN(nt->count, (int64_t)FEATURE_SAMPLE_ROWS);
    char f[64];
    ng__hetero_features_file(f, sizeof f, nt->name);
    for (int64_t k = 0; k < rows; k++) {
      /* Evenly spread rows, the first and the last among them. */
      const int64_t row = rows == nt->count ? k : (rows > 1 ? k * (nt->count - 1) / (rows - 1) : 0);
      int64_t bad = ng__scan_nonfinite(nt->features + row * dim, dim);
      if (bad >= 0)
        return ng__err(NG_ERR_FORMAT,
                       "%s/%s: row %lld, column %lld is %g; features must be finite%s", ds->dir, f,
                       (long long)row, (long long)bad, (double)nt->features[row * dim + bad],
                       all ? "" : " (found by the sample of rows checked on open)");
    }
  }
  return NG_OK;
}

/* ---- handles ---- */

ng_status ng__hetero_check(ng_hetero_t ds) {
  if (!ds)
    return ng__err(NG_ERR_INVALID_ARG, "the heterogeneous dataset handle is NULL");
  if (ds->magic != NG_HETERO_MAGIC)
    return ng__err(NG_ERR_STATE,
                   "the heterogeneous dataset handle is closed or not one from ng_hetero_open");
  return NG_OK;
}

static void free_hetero(struct ng_hetero *ds) {
  for (int32_t t = 0; ds->ntypes && t < ds->info.node_types; t++) {
    ng__npy_close(&ds->ntypes[t].features_npy);
    ng__npy_close(&ds->ntypes[t].labels_npy);
  }
  for (int32_t r = 0; ds->etypes && r < ds->info.edge_types; r++) {
    ng__npy_close(&ds->etypes[r].indptr_npy);
    ng__npy_close(&ds->etypes[r].indices_npy);
  }
  for (int s = 0; s < 3; s++)
    ng__npy_close(&ds->split_npy[s]);
  ng_dataset_close(ds->homo);
  free(ds->ntypes);
  free(ds->etypes);
  free(ds->dir);
  ds->magic = 0;
  free(ds);
}

void ng_hetero_close(ng_hetero_t ds) {
  if (!ds || ds->magic != NG_HETERO_MAGIC)
    return;
  free_hetero(ds);
}

/* A homogeneous folder as one node type "node" and one relation (node, to, node): the arrays
 * are the open dataset's, checked by ng_dataset_open. */
static ng_status open_homogeneous(struct ng_hetero *ds, const ng_open_opts *opts) {
  NG_CHECK(ng_dataset_open(&ds->homo, ds->dir, opts));
  const struct ng_dataset *h = ds->homo;
  ds->ntypes = ng__calloc(1, sizeof *ds->ntypes, "node types");
  ds->etypes = ng__calloc(1, sizeof *ds->etypes, "edge types");
  if (!ds->ntypes || !ds->etypes)
    return NG_ERR_NOMEM;
  ng__strlcpy(ds->info.name, h->info.name, sizeof ds->info.name);
  ds->info.node_types = ds->info.edge_types = 1;
  ds->info.nodes = h->info.nodes;
  ds->info.edges = h->info.edges;
  ds->info.index_bytes = h->info.index_bytes;
  ds->info.homogeneous = 1;
  ds->info.train = h->info.train;
  ds->info.val = h->info.val;
  ds->info.test = h->info.test;
  ng_hetero_ntype *nt = &ds->ntypes[0];
  ng__strlcpy(nt->name, "node", sizeof nt->name);
  nt->count = h->info.nodes;
  nt->feature_dim = h->info.feature_dim;
  nt->classes = h->info.classes;
  nt->features = h->features;
  nt->labels = h->labels;
  if (nt->classes > 0) {
    ds->info.target = 0;
    ds->info.classes = nt->classes;
  }
  ng_hetero_etype *et = &ds->etypes[0];
  ng__strlcpy(et->relation, "to", sizeof et->relation);
  et->csr = h->csr;
  for (int s = 0; s < 3; s++)
    ds->split[s] = h->split[s];
  memcpy(ds->id, h->id, sizeof ds->id);
  ds->has_id = h->has_id;
  return NG_OK;
}

ng_status ng_hetero_open(ng_hetero_t *out, const char *dir, const ng_open_opts *opts) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_open: out is NULL");
  *out = NULL;
  ng_open_opts o;
  NG_CHECK(ng__open_args(&o, "ng_hetero_open", dir, opts, "docs/heterogeneous.md"));
  struct ng_hetero *ds = ng__calloc(1, sizeof *ds, "a heterogeneous dataset handle");
  if (!ds)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  char *path = NULL, *text = NULL;
  cJSON *root = NULL;
  num_map nums = {0};
  size_t len = 0;
  NG_CHECK_GOTO(st, ng__dir_copy(&ds->dir, dir), fail);
  ds->info.size = sizeof ds->info;
  ds->info.target = -1;
  path = ng__path_join(ds->dir, "dataset.json");
  if (!path) {
    st = NG_ERR_NOMEM;
    goto fail;
  }
  NG_CHECK_GOTO(st, ng__json_read(&root, &text, &len, path), fail);
  if (!cJSON_IsObject(root)) {
    st = ng__err(NG_ERR_FORMAT, "%s: the top level is %s; it must be a JSON object", path,
                 ng__json_type_name(root));
    goto fail;
  }
  if (!cJSON_GetObjectItemCaseSensitive(root, "node_types")) {
    NG_CHECK_GOTO(st, open_homogeneous(ds, &o), fail);
  } else {
    NG_CHECK_GOTO(st, map_numbers(&nums, root, text, len, path), fail);
    const jctx c = {path, &nums};
    NG_CHECK_GOTO(st, parse_json(ds, root, &c), fail);
    NG_CHECK_GOTO(st, map_arrays(ds, o.populate != 0), fail);
    for (int32_t r = 0; r < ds->info.edge_types; r++)
      NG_CHECK_GOTO(st, check_csr(ds, r), fail);
    NG_CHECK_GOTO(st, check_labels(ds), fail);
    NG_CHECK_GOTO(st, check_splits(ds), fail);
    NG_CHECK_GOTO(st, check_features(ds, o.check_features != 0), fail);
  }
  free_numbers(&nums);
  cJSON_Delete(root);
  free(text);
  free(path);
  ds->magic = NG_HETERO_MAGIC;
  *out = ds;
  return NG_OK;
fail:
  free_numbers(&nums);
  cJSON_Delete(root);
  free(text);
  free(path);
  free_hetero(ds);
  return st;
}

/* ---- accessors ---- */

ng_status ng_hetero_info_get(ng_hetero_info *out, ng_hetero_t ds) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_info_get: out is NULL");
  NG_CHECK(ng__hetero_check(ds));
  return ng__copy_sized(out, &ds->info, sizeof ds->info, "ng_hetero_info_get: out->size");
}

static ng_status check_index(int32_t i, int32_t n, const char *what, const char *call) {
  if (i < 0 || i >= n)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s %d is out of range; the dataset has %d", call, what,
                   (int)i, (int)n);
  return NG_OK;
}

ng_status ng_hetero_node_type(ng_node_type_info *out, ng_hetero_t ds, int32_t type) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_node_type: out is NULL");
  NG_CHECK(ng__hetero_check(ds));
  NG_CHECK(check_index(type, ds->info.node_types, "node type", "ng_hetero_node_type"));
  const ng_hetero_ntype *nt = &ds->ntypes[type];
  ng_node_type_info v = NG_NODE_TYPE_INFO_INIT;
  ng__strlcpy(v.name, nt->name, sizeof v.name);
  v.count = nt->count;
  v.feature_dim = nt->feature_dim;
  v.classes = nt->classes;
  return ng__copy_sized(out, &v, sizeof v, "ng_hetero_node_type: out->size");
}

ng_status ng_hetero_edge_type(ng_edge_type_info *out, ng_hetero_t ds, int32_t rel) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_edge_type: out is NULL");
  NG_CHECK(ng__hetero_check(ds));
  NG_CHECK(check_index(rel, ds->info.edge_types, "edge type", "ng_hetero_edge_type"));
  const ng_hetero_etype *et = &ds->etypes[rel];
  ng_edge_type_info v = NG_EDGE_TYPE_INFO_INIT;
  ng__strlcpy(v.relation, et->relation, sizeof v.relation);
  v.src_type = et->src;
  v.dst_type = et->dst;
  v.edges = et->csr.nnz;
  return ng__copy_sized(out, &v, sizeof v, "ng_hetero_edge_type: out->size");
}

ng_status ng_hetero_find_node_type(int32_t *out, ng_hetero_t ds, const char *name) {
  if (!out || !name)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_find_node_type: out or name is NULL");
  *out = -1;
  NG_CHECK(ng__hetero_check(ds));
  *out = find_type(ds, ds->info.node_types, name);
  if (*out < 0) {
    char types[512];
    type_list(types, sizeof types, ds, ds->info.node_types);
    return ng__err(NG_ERR_NOT_FOUND, "%s: no node type \"%.40s\"; the types are %s", ds->dir, name,
                   types);
  }
  return NG_OK;
}

ng_status ng_hetero_find_edge_type(int32_t *out, ng_hetero_t ds, const char *src,
                                   const char *relation, const char *dst) {
  if (!out || !src || !relation || !dst)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_find_edge_type: an argument is NULL");
  *out = -1;
  NG_CHECK(ng__hetero_check(ds));
  for (int32_t r = 0; r < ds->info.edge_types; r++) {
    const ng_hetero_etype *et = &ds->etypes[r];
    if (strcmp(et->relation, relation) == 0 && strcmp(ds->ntypes[et->src].name, src) == 0 &&
        strcmp(ds->ntypes[et->dst].name, dst) == 0) {
      *out = r;
      return NG_OK;
    }
  }
  return ng__err(NG_ERR_NOT_FOUND, "%s: no edge type (%.40s, %.40s, %.40s)", ds->dir, src, relation,
                 dst);
}

ng_status ng_hetero_features(const float **out, ng_hetero_t ds, int32_t type) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_features: out is NULL");
  *out = NULL;
  NG_CHECK(ng__hetero_check(ds));
  NG_CHECK(check_index(type, ds->info.node_types, "node type", "ng_hetero_features"));
  *out = ds->ntypes[type].features;
  return NG_OK;
}

ng_status ng_hetero_labels(const int32_t **out, ng_hetero_t ds) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_labels: out is NULL");
  *out = NULL;
  NG_CHECK(ng__hetero_check(ds));
  if (ds->info.target >= 0)
    *out = ds->ntypes[ds->info.target].labels;
  return NG_OK;
}

ng_status ng_hetero_csr(const int64_t **indptr, const void **indices, int32_t *index_bytes,
                        ng_hetero_t ds, int32_t rel) {
  if (!indptr || !indices || !index_bytes)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_csr: an output pointer is NULL");
  *indptr = NULL;
  *indices = NULL;
  *index_bytes = 0;
  NG_CHECK(ng__hetero_check(ds));
  NG_CHECK(check_index(rel, ds->info.edge_types, "edge type", "ng_hetero_csr"));
  const ng_csr *g = &ds->etypes[rel].csr;
  *indptr = g->indptr;
  *indices = g->idx32 ? (const void *)g->idx32 : (const void *)g->idx64;
  *index_bytes = g->idx32 ? 4 : 8;
  return NG_OK;
}

ng_status ng_hetero_split(const int64_t **ids, int64_t *n, ng_hetero_t ds, int split) {
  if (!ids || !n)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_split: ids or n is NULL");
  *ids = NULL;
  *n = 0;
  NG_CHECK(ng__hetero_check(ds));
  if (split < 0 || split > 2)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_split: split %d; 0 train, 1 val, 2 test", split);
  const int64_t count[3] = {ds->info.train, ds->info.val, ds->info.test};
  *ids = ds->split[split];
  *n = count[split];
  return NG_OK;
}
