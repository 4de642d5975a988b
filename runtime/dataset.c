/* Opening a dataset folder: dataset.json and the memory-mapped .npy arrays, validated against
 * each other before anything else in the library trusts them (docs/dataset-format.md). */
#include "dataset_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* dataset.json is a few hundred bytes; anything far larger is not one. */
enum { JSON_MAX_BYTES = 1 << 20 };
/* Scans work in blocks of this many elements: large enough to amortise the scheduling, small
 * enough that a thread stops soon after an earlier bad position is known. Arrays of one block
 * or less are scanned by the calling thread alone: a thread team would cost more. */
enum { SCAN_BLOCK = 1 << 16 };
/* JSON numbers are doubles: integers above 2^53 are not exact, so no count may exceed it. */
#define JSON_MAX_COUNT ((double)((int64_t)1 << 53))

static const char *const SPLIT_NAME[3] = {"train", "val", "test"};
/* Classes beyond twice the labels in use that a dataset may declare (check_labels). */
enum { CLASS_SLACK = 8 };

/* ---- dataset.json ---- */

static ng_status read_small_file(char **out, size_t *out_len, const char *path) {
  *out = NULL;
  *out_len = 0;
  int fd;
  size_t size;
  NG_CHECK(ng__file_open_regular(
      &fd, &size, path,
      "a dataset folder holds dataset.json and .npy arrays (make one with neargnn convert or "
      "neargnn generate)",
      "replace it with the dataset's JSON file"));
  if (size > JSON_MAX_BYTES) {
    close(fd);
    return ng__err(NG_ERR_FORMAT, "%s: %lld bytes, far larger than any dataset.json (limit %d)",
                   path, (long long)size, JSON_MAX_BYTES);
  }
  size_t cap = size;
  char *buf = ng__malloc(cap + 1, "dataset.json");
  if (!buf) {
    close(fd);
    return NG_ERR_NOMEM;
  }
  size_t len = 0;
  while (len < cap) {
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return ng__err_errno(NG_ERR_IO, e, "%s: read", path);
    }
    if (n == 0)
      break;
    len += (size_t)n;
  }
  close(fd);
  buf[len] = '\0';
  *out = buf;
  *out_len = len;
  return NG_OK;
}

const char *ng__json_type_name(const cJSON *item) {
  if (cJSON_IsString(item))
    return "a string";
  if (cJSON_IsNumber(item))
    return "a number";
  if (cJSON_IsBool(item))
    return "a boolean";
  if (cJSON_IsNull(item))
    return "null";
  if (cJSON_IsArray(item))
    return "an array";
  if (cJSON_IsObject(item))
    return "an object";
  return "invalid";
}

/* The source text of the numbers of dataset.json's objects ("nodes", "splits.val"): cJSON keeps
 * doubles only, which cannot tell 9007199254740993 from 2^53 nor 2.708e3 from 2708. */
enum { NUM_TOKS = 64 };
typedef struct {
  int n;
  struct {
    char key[64];  /* the key path, objects joined with '.' */
    char text[41]; /* the number as written (cut at 40 characters) */
  } t[NUM_TOKS];
} num_toks;

static void scan_numbers(num_toks *nt, const char *t, size_t len) {
  enum { DEPTH = 8 };
  char keys[DEPTH][32];
  bool obj[DEPTH];
  int depth = 0; /* open containers; those past DEPTH are counted but not tracked */
  bool expect_key = false;
  nt->n = 0;
  for (size_t i = 0; i < len;) {
    const char c = t[i];
    if (c == '{' || c == '[') {
      if (depth < DEPTH) {
        obj[depth] = c == '{';
        keys[depth][0] = '\0';
      }
      depth++;
      expect_key = c == '{';
      i++;
    } else if (c == '}' || c == ']') {
      depth -= depth > 0;
      i++;
    } else if (c == ',') {
      expect_key = depth > 0 && depth <= DEPTH && obj[depth - 1];
      i++;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < len && t[j] != '"')
        j += t[j] == '\\' ? 2 : 1;
      if (expect_key && depth > 0 && depth <= DEPTH) {
        const size_t k = NG_MIN(j - i - 1, sizeof keys[0] - 1);
        memcpy(keys[depth - 1], t + i + 1, k);
        keys[depth - 1][k] = '\0';
      }
      expect_key = false;
      i = j + 1;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < len && (strchr("+-.eE", t[j]) || (t[j] >= '0' && t[j] <= '9')))
        j++;
      bool plain = depth > 0 && depth <= DEPTH && nt->n < NUM_TOKS;
      for (int d = 0; plain && d < depth; d++)
        plain = obj[d];
      if (plain) { /* a value of an object nested in objects only */
        char *key = nt->t[nt->n].key;
        size_t at = 0;
        for (int d = 0; d < depth && at < sizeof nt->t[0].key; d++)
          at += (size_t)snprintf(key + at, sizeof nt->t[0].key - at, "%s%s", d ? "." : "", keys[d]);
        const size_t k = NG_MIN(j - i, sizeof nt->t[0].text - 1);
        memcpy(nt->t[nt->n].text, t + i, k);
        nt->t[nt->n].text[k] = '\0';
        nt->n++;
      }
      i = j;
    } else {
      i++;
    }
  }
}

/* A required non-negative integer key of `obj`; `prefix` names the enclosing object in messages
 * ("splits." or ""). Written as plain digits and at most 2^53, so that the double cJSON holds is
 * the number written. */
static ng_status json_count(int64_t *out, const cJSON *obj, const char *prefix, const char *key,
                            const char *path, const num_toks *nt) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!item)
    return ng__err(NG_ERR_FORMAT,
                   "%s: key \"%s%s\" is missing; add it (see docs/dataset-format.md)", path, prefix,
                   key);
  if (!cJSON_IsNumber(item))
    return ng__err(NG_ERR_FORMAT, "%s: \"%s%s\" is %s; it must be a non-negative integer", path,
                   prefix, key, ng__json_type_name(item));
  double d = item->valuedouble;
  if (!(d >= 0.0))
    return ng__err(NG_ERR_FORMAT, "%s: \"%s%s\" is %g; counts must be non-negative", path, prefix,
                   key, d);
  char full[96];
  snprintf(full, sizeof full, "%s%s", prefix, key);
  const char *text = NULL;
  for (int i = 0; i < nt->n && !text; i++)
    if (strcmp(nt->t[i].key, full) == 0)
      text = nt->t[i].text;
  char shown[48];
  if (text)
    snprintf(shown, sizeof shown, "%s", text);
  else
    snprintf(shown, sizeof shown, "%.17g", d);
  if (d > JSON_MAX_COUNT)
    return ng__err(NG_ERR_FORMAT, "%s: \"%s\" is %s; it must be an integer of at most 2^53", path,
                   full, shown);
  bool digits = text && *text;
  for (const char *c = text; digits && *c; c++)
    digits = *c >= '0' && *c <= '9';
  if (d != floor(d) || !digits)
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"%s\" is %s; it must be an integer written in plain digits (no "
                   "fraction, no exponent)",
                   path, full, shown);
  /* Exactly: 9007199254740993 reads as the double 2^53. */
  int64_t v = 0;
  for (const char *c = text; *c; c++)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c - '0', &v) ||
        v > ((int64_t)1 << 53))
      return ng__err(NG_ERR_FORMAT, "%s: \"%s\" is %s; it must be an integer of at most 2^53", path,
                     full, shown);
  *out = v;
  return NG_OK;
}

/* A key that appears twice in one object: cJSON would keep the first silently. */
static ng_status json_no_duplicates(const cJSON *item, const char *path) {
  for (const cJSON *a = item ? item->child : NULL; a; a = a->next) {
    if (cJSON_IsObject(item) && a->string)
      for (const cJSON *b = a->next; b; b = b->next)
        if (b->string && strcmp(a->string, b->string) == 0)
          return ng__err(NG_ERR_FORMAT, "%s: key \"%.64s\" appears twice in one object", path,
                         a->string);
    NG_CHECK(json_no_duplicates(a, path));
  }
  return NG_OK;
}

/* An optional string key: NULL when absent, an error when present with another type. */
static ng_status json_opt_string(const char **out, const cJSON *obj, const char *key,
                                 const char *path) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = NULL;
  if (!item)
    return NG_OK;
  if (!cJSON_IsString(item) || !item->valuestring)
    return ng__err(NG_ERR_FORMAT, "%s: \"%s\" is %s; it must be a string", path, key,
                   ng__json_type_name(item));
  *out = item->valuestring;
  return NG_OK;
}

static ng_status json_req_string(const char **out, const cJSON *obj, const char *key,
                                 const char *path) {
  NG_CHECK(json_opt_string(out, obj, key, path));
  if (!*out)
    return ng__err(NG_ERR_FORMAT, "%s: key \"%s\" is missing; add it (see docs/dataset-format.md)",
                   path, key);
  return NG_OK;
}

/* Checks dataset.json's keys, types and the consistency of its counts, filling `info`. */
/* The optional "id": 32 hex digits, the dataset's 16 random bytes. */
static ng_status parse_id(uint8_t id[NG_DATASET_ID_BYTES], bool *has_id, const cJSON *root,
                          const char *path) {
  const char *text = NULL;
  NG_CHECK(json_opt_string(&text, root, "id", path));
  *has_id = text != NULL;
  if (!text)
    return NG_OK;
  bool ok = strlen(text) == 2 * NG_DATASET_ID_BYTES;
  for (int i = 0; ok && i < NG_DATASET_ID_BYTES; i++) {
    unsigned v = 0;
    for (int k = 0; k < 2 && ok; k++) {
      const char c = text[2 * i + k];
      ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      v = v * 16 + (unsigned)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    id[i] = (uint8_t)v;
  }
  if (!ok)
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"id\" is \"%.40s\"; it must be 32 lowercase hex digits (the dataset's "
                   "random id) or be left out",
                   path, text);
  return NG_OK;
}

static ng_status parse_json(ng_dataset_info *info, const cJSON *root, const char *dir,
                            const char *path, const num_toks *nt) {
  if (!cJSON_IsObject(root))
    return ng__err(NG_ERR_FORMAT, "%s: the top level is %s; it must be a JSON object", path,
                   ng__json_type_name(root));
  const char *format = NULL;
  NG_CHECK(json_req_string(&format, root, "format", path));
  if (strcmp(format, NG_DATASET_FORMAT) != 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"format\" is \"%.64s\", not \"" NG_DATASET_FORMAT
                   "\"; this folder is not a neargnn dataset",
                   path, format);
  int64_t version = 0;
  NG_CHECK(json_count(&version, root, "", "version", path, nt));
  if (version > NG_DATASET_VERSION)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "%s: dataset format version %lld is newer than this neargnn reads (%d); "
                   "upgrade neargnn",
                   path, (long long)version, NG_DATASET_VERSION);
  if (version < 1)
    return ng__err(NG_ERR_FORMAT, "%s: \"version\" is %lld; versions start at 1", path,
                   (long long)version);

  const char *name = NULL;
  NG_CHECK(json_opt_string(&name, root, "name", path));
  if (!name) { /* unnamed: the folder's base name */
    const char *slash = strrchr(dir, '/');
    name = slash && slash[1] ? slash + 1 : dir;
  }
  /* The public struct documents truncation, so a long name is cut, never an error. */
  ng__strlcpy(info->name, name, sizeof info->name);

  NG_CHECK(json_count(&info->nodes, root, "", "nodes", path, nt));
  NG_CHECK(json_count(&info->edges, root, "", "edges", path, nt));
  NG_CHECK(json_count(&info->feature_dim, root, "", "feature_dim", path, nt));
  int64_t classes = 0;
  NG_CHECK(json_count(&classes, root, "", "classes", path, nt));
  if (classes > NG_MAX_CLASSES)
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"classes\" is %lld; at most %d are accepted (the output layer and its "
                   "gradients grow with it): renumber the labels 0 to classes - 1",
                   path, (long long)classes, NG_MAX_CLASSES);
  info->classes = (int32_t)classes;

  const char *index_dtype = NULL;
  NG_CHECK(json_req_string(&index_dtype, root, "index_dtype", path));
  if (strcmp(index_dtype, "int32") == 0) {
    if (info->nodes >= NG_INDEX32_MAX_NODES)
      return ng__err(NG_ERR_FORMAT,
                     "%s: \"index_dtype\" is \"int32\" but %lld nodes need ids of 2^31 and "
                     "more; store indices.npy as int64 and set \"index_dtype\": \"int64\"",
                     path, (long long)info->nodes);
    info->index_bytes = 4;
  } else if (strcmp(index_dtype, "int64") == 0) {
    info->index_bytes = 8;
  } else {
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"index_dtype\" is \"%.32s\"; it must be \"int32\" or \"int64\"", path,
                   index_dtype);
  }

  const char *feature_dtype = NULL;
  NG_CHECK(json_opt_string(&feature_dtype, root, "feature_dtype", path));
  if (feature_dtype && strcmp(feature_dtype, "float32") != 0)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "%s: \"feature_dtype\" is \"%.32s\"; only float32 features are supported "
                   "(numpy: features.astype(numpy.float32))",
                   path, feature_dtype);

  const cJSON *undirected = cJSON_GetObjectItemCaseSensitive(root, "undirected");
  if (undirected && !cJSON_IsBool(undirected))
    return ng__err(NG_ERR_FORMAT, "%s: \"undirected\" is %s; it must be true or false", path,
                   ng__json_type_name(undirected));
  info->undirected = undirected && cJSON_IsTrue(undirected);

  const cJSON *orig_ids = cJSON_GetObjectItemCaseSensitive(root, "orig_ids");
  if (orig_ids && !cJSON_IsBool(orig_ids))
    return ng__err(NG_ERR_FORMAT, "%s: \"orig_ids\" is %s; it must be true or false", path,
                   ng__json_type_name(orig_ids));
  info->orig_ids = orig_ids && cJSON_IsTrue(orig_ids);

  const char *source = NULL;
  NG_CHECK(json_opt_string(&source, root, "source", path));

  const cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
  if (!splits)
    return ng__err(NG_ERR_FORMAT,
                   "%s: key \"splits\" is missing; add {\"train\": N, \"val\": N, \"test\": N} "
                   "(zeros when there are none)",
                   path);
  if (!cJSON_IsObject(splits))
    return ng__err(NG_ERR_FORMAT, "%s: \"splits\" is %s; it must be an object", path,
                   ng__json_type_name(splits));
  int64_t *count[3] = {&info->train, &info->val, &info->test};
  int64_t total = 0;
  for (int s = 0; s < 3; s++) {
    NG_CHECK(json_count(count[s], splits, "splits.", SPLIT_NAME[s], path, nt));
    if (*count[s] > 0 && info->classes == 0)
      return ng__err(NG_ERR_FORMAT,
                     "%s: \"splits.%s\" is %lld but \"classes\" is 0: split nodes need labels; "
                     "add labels.npy and set \"classes\", or set the split to 0",
                     path, SPLIT_NAME[s], (long long)*count[s]);
    total += *count[s]; /* each is at most 2^53: no overflow */
  }
  if (total > info->nodes)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the splits hold %lld nodes together but the graph has %lld; splits must "
                   "be disjoint sets of nodes",
                   path, (long long)total, (long long)info->nodes);
  return NG_OK;
}

ng_status ng__json_read(cJSON **out_root, char **out_text, size_t *out_len, const char *path) {
  *out_root = NULL;
  *out_text = NULL;
  *out_len = 0;
  char *text = NULL;
  size_t len = 0;
  ng_status st = read_small_file(&text, &len, path);
  if (st != NG_OK)
    return st;
  /* A NUL byte, or the escape of one, would end a string early in cJSON's copy of it. */
  const char *nul = memchr(text, '\0', len);
  const char *esc = NULL;
  for (size_t i = 0; i + 5 < len && !esc; i++)
    if (text[i] == '\\' && (text[i + 1] == 'u' || text[i + 1] == 'U') &&
        strncmp(text + i + 2, "0000", 4) == 0)
      esc = text + i;
  if (nul || esc) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s: byte %zu is %s; dataset.json holds text without NUL characters", path,
                 (size_t)((nul ? nul : esc) - text), nul ? "a NUL byte" : "the escape \\u0000");
    free(text);
    return st;
  }
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!root) {
    /* Where the parser stopped, as the line and column an editor shows. */
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
      line += text[i] == '\n';
      col = text[i] == '\n' ? 1 : col + 1;
    }
    st = ng__err(NG_ERR_FORMAT,
                 "%s: not valid JSON (error near line %zu, column %zu); fix or re-create it", path,
                 line, col);
    free(text);
    return st;
  }
  /* Only whitespace may follow the object. */
  for (const char *p = end; st == NG_OK && p < text + len; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
      st = ng__err(NG_ERR_FORMAT,
                   "%s: unexpected text after the JSON object, at byte %zu; fix or re-create it",
                   path, (size_t)(p - text));
  if (st == NG_OK)
    st = json_no_duplicates(root, path);
  if (st != NG_OK) {
    cJSON_Delete(root);
    free(text);
    return st;
  }
  *out_root = root;
  *out_text = text;
  *out_len = len;
  return NG_OK;
}

static ng_status load_json(struct ng_dataset *ds) {
  ng_dataset_info *info = &ds->info;
  const char *dir = ds->dir;
  char *path = ng__path_join(dir, "dataset.json");
  if (!path)
    return NG_ERR_NOMEM;
  char *text = NULL;
  size_t len = 0;
  cJSON *root = NULL;
  ng_status st = ng__json_read(&root, &text, &len, path);
  if (st != NG_OK)
    goto cleanup;
  /* A heterogeneous folder has no "nodes": say which call reads it instead of "missing key". */
  if (cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "node_types"))
    st = ng__err(NG_ERR_UNSUPPORTED,
                 "%s: a heterogeneous dataset (it lists \"node_types\"); this reads the "
                 "homogeneous layout only: open it with ng_hetero_open (docs/heterogeneous.md)",
                 path);
  num_toks *nt = st == NG_OK ? ng__malloc(sizeof *nt, "dataset.json's numbers") : NULL;
  if (st == NG_OK && !nt)
    st = NG_ERR_NOMEM;
  if (st == NG_OK) {
    scan_numbers(nt, text, len);
    st = parse_json(info, root, dir, path, nt);
  }
  free(nt);
  if (st == NG_OK)
    st = parse_id(ds->id, &ds->has_id, root, path);
  cJSON_Delete(root);
cleanup:
  free(text);
  free(path);
  return st;
}

/* ---- arrays ---- */

/* What dataset.json implies about one array. */
typedef struct {
  bool present;
  ng_dtype dtype;
  int ndim;
  int64_t shape[2];
  const char *why; /* the dataset.json fact that decides presence, for messages */
} array_spec;

static void array_specs(array_spec spec[NG_ARR_COUNT_], const ng_dataset_info *in) {
  const char *none = "";
  memset(spec, 0, sizeof(array_spec) * NG_ARR_COUNT_);
  spec[NG_ARR_INDPTR] = (array_spec){true, NG_DTYPE_I64, 1, {in->nodes + 1, 0}, none};
  spec[NG_ARR_INDICES] = (array_spec){
      true, in->index_bytes == 8 ? NG_DTYPE_I64 : NG_DTYPE_I32, 1, {in->edges, 0}, none};
  spec[NG_ARR_FEATURES] = (array_spec){
      in->feature_dim > 0, NG_DTYPE_F32, 2, {in->nodes, in->feature_dim}, "\"feature_dim\" is 0"};
  spec[NG_ARR_LABELS] =
      (array_spec){in->classes > 0, NG_DTYPE_I32, 1, {in->nodes, 0}, "\"classes\" is 0"};
  spec[NG_ARR_TRAIN] =
      (array_spec){in->train > 0, NG_DTYPE_I64, 1, {in->train, 0}, "\"splits.train\" is 0"};
  spec[NG_ARR_VAL] =
      (array_spec){in->val > 0, NG_DTYPE_I64, 1, {in->val, 0}, "\"splits.val\" is 0"};
  spec[NG_ARR_TEST] =
      (array_spec){in->test > 0, NG_DTYPE_I64, 1, {in->test, 0}, "\"splits.test\" is 0"};
  spec[NG_ARR_ORIG_ID] = (array_spec){
      in->orig_ids != 0, NG_DTYPE_I64, 1, {in->nodes, 0}, "\"orig_ids\" is false or absent"};
}

static ng_status map_array(ng_npy *out, const char *dir, ng_array_id id, const array_spec *spec,
                           bool populate) {
  char *path = ng__path_join(dir, NG_ARRAY_FILE[id]);
  if (!path)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (errno != ENOENT)
      st = ng__err_errno(NG_ERR_IO, errno, "%s", path);
    else if (spec->present)
      st = ng__err(NG_ERR_NOT_FOUND,
                   "%s: missing, but dataset.json implies a %s array of shape [%lld%s]; restore "
                   "the file or re-run neargnn convert",
                   path, ng__dtype_name(spec->dtype), (long long)spec->shape[0],
                   spec->ndim == 2 ? ", ..." : "");
    goto cleanup;
  }
  if (!spec->present) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s: present but dataset.json says %s; remove the file or update dataset.json",
                 path, spec->why);
    goto cleanup;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = ng__err(NG_ERR_FORMAT, "%s: is %s, not a regular file; replace it with the .npy array",
                 path, ng__file_kind(sb.st_mode));
    goto cleanup;
  }
  st = ng__npy_map(out, path, populate);
  if (st != NG_OK)
    goto cleanup;
  const ng_npy_header *h = &out->hdr;
  if (h->dtype != spec->dtype) {
    st = ng__err(
        NG_ERR_FORMAT, "%s: dtype %s, but it must be %s; re-save it (numpy: a.astype(numpy.%s))",
        path, ng__dtype_name(h->dtype), ng__dtype_name(spec->dtype), ng__dtype_name(spec->dtype));
    goto cleanup;
  }
  bool same = h->ndim == spec->ndim;
  for (int i = 0; same && i < spec->ndim; i++)
    same = h->shape[i] == spec->shape[i];
  if (!same) {
    char got[128], want[64];
    ng__shape_text(got, sizeof got, h->ndim, h->shape);
    ng__shape_text(want, sizeof want, spec->ndim, spec->shape);
    st = ng__err(NG_ERR_FORMAT,
                 "%s: shape %s, but dataset.json implies %s; the array and dataset.json disagree, "
                 "re-create one of them",
                 path, got, want);
    goto cleanup;
  }
cleanup:
  if (st != NG_OK)
    ng__npy_close(out);
  free(path);
  return st;
}

/* ---- parallel scans ----
 * Each scan finds the lowest bad position, so that the message does not depend on the number
 * of threads or on timing. Blocks past an already known bad position are skipped; every block
 * at or below the final answer is scanned, hence the minimum is exact. Messages are written
 * after the parallel region: ng_last_error() is thread-local. */

typedef int64_t (*block_scan_fn)(const void *ctx, int64_t lo, int64_t hi);

static int64_t first_bad(int64_t n, block_scan_fn scan_block, const void *ctx) {
  int64_t best = INT64_MAX;
  int64_t blocks = n / SCAN_BLOCK + (n % SCAN_BLOCK != 0);
#pragma omp parallel for schedule(dynamic, 4) if (blocks > 1)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t lo = b * SCAN_BLOCK;
    if (lo > __atomic_load_n(&best, __ATOMIC_RELAXED))
      continue;
    int64_t hi = NG_MIN(lo + SCAN_BLOCK, n);
    int64_t pos = scan_block(ctx, lo, hi);
    if (pos < 0)
      continue;
    int64_t cur = __atomic_load_n(&best, __ATOMIC_RELAXED);
    while (pos < cur && !__atomic_compare_exchange_n(&best, &cur, pos, false, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED)) {
    }
  }
  return best == INT64_MAX ? -1 : best;
}

typedef struct {
  const void *a;
  int64_t limit; /* exclusive upper bound of valid values */
  int64_t low;   /* inclusive lower bound (labels: -1) */
} range_ctx;

/* Each block first accumulates a branch-free flag (vectorisable), and only rescans to locate the
 * bad element when the flag says there is one. */
static int64_t scan_monotone(const void *ctx, int64_t lo, int64_t hi) {
  const int64_t *a = ((const range_ctx *)ctx)->a;
  bool bad = false;
  for (int64_t i = lo; i < hi; i++)
    bad |= a[i + 1] < a[i];
  if (bad)
    for (int64_t i = lo; i < hi; i++)
      if (a[i + 1] < a[i])
        return i;
  return -1;
}

static int64_t scan_range_i32(const void *ctx, int64_t lo, int64_t hi) {
  const range_ctx *c = ctx;
  const int32_t *a = c->a;
  /* Offsetting by `low` turns the two-sided test into one unsigned comparison. */
  uint64_t span = (uint64_t)(c->limit - c->low);
  bool bad = false;
  for (int64_t i = lo; i < hi; i++)
    bad |= (uint64_t)((int64_t)a[i] - c->low) >= span;
  if (bad)
    for (int64_t i = lo; i < hi; i++)
      if ((uint64_t)((int64_t)a[i] - c->low) >= span)
        return i;
  return -1;
}

static int64_t scan_range_i64(const void *ctx, int64_t lo, int64_t hi) {
  const range_ctx *c = ctx;
  const int64_t *a = c->a;
  /* Values are compared as is (no offset that could overflow): low is 0 or -1. */
  bool bad = false;
  for (int64_t i = lo; i < hi; i++)
    bad |= a[i] < c->low || a[i] >= c->limit;
  if (bad)
    for (int64_t i = lo; i < hi; i++)
      if (a[i] < c->low || a[i] >= c->limit)
        return i;
  return -1;
}

typedef struct {
  const int64_t *ids;
  const int32_t *labels;
} labelled_ctx;

static int64_t scan_labelled(const void *ctx, int64_t lo, int64_t hi) {
  const labelled_ctx *c = ctx;
  for (int64_t i = lo; i < hi; i++)
    if (c->labels[c->ids[i]] < 0)
      return i;
  return -1;
}

typedef struct {
  const float *x;
} finite_ctx;

static int64_t scan_finite(const void *ctx, int64_t lo, int64_t hi) {
  const float *x = ((const finite_ctx *)ctx)->x;
  /* An all-ones exponent field is exactly NaN or +-Inf; the bit test vectorises. */
  bool bad = false;
  for (int64_t i = lo; i < hi; i++) {
    uint32_t bits;
    memcpy(&bits, &x[i], sizeof bits);
    bad |= (bits & 0x7f800000u) == 0x7f800000u;
  }
  if (bad)
    for (int64_t i = lo; i < hi; i++)
      if (!isfinite(x[i]))
        return i;
  return -1;
}

/* The row of entry `e`: the last v with indptr[v] <= e (indptr already validated). */
static int64_t row_of(const int64_t *indptr, int64_t nodes, int64_t e) {
  int64_t lo = 0, hi = nodes; /* invariant: indptr[lo] <= e < indptr[hi] */
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (indptr[mid] <= e)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

static ng_status check_csr(const struct ng_dataset *ds) {
  const int64_t *indptr = ds->csr.indptr;
  const char *f = NG_ARRAY_FILE[NG_ARR_INDPTR];
  int64_t nodes = ds->info.nodes, edges = ds->info.edges;
  if (indptr[0] != 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indptr[0] = %lld, but it must be 0; the CSR is corrupt, re-run "
                   "neargnn convert",
                   ds->dir, f, (long long)indptr[0]);
  range_ctx rc = {indptr, 0, 0};
  int64_t bad = first_bad(nodes, scan_monotone, &rc);
  if (bad >= 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indptr[%lld] = %lld < indptr[%lld] = %lld: not monotone; the CSR is "
                   "corrupt, re-run neargnn convert",
                   ds->dir, f, (long long)(bad + 1), (long long)indptr[bad + 1], (long long)bad,
                   (long long)indptr[bad]);
  if (indptr[nodes] != edges)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indptr[%lld] = %lld, but dataset.json says \"edges\": %lld (the length "
                   "of indices.npy); the CSR is corrupt, re-run neargnn convert",
                   ds->dir, f, (long long)nodes, (long long)indptr[nodes], (long long)edges);

  f = NG_ARRAY_FILE[NG_ARR_INDICES];
  range_ctx ic = {ds->csr.idx64 ? (const void *)ds->csr.idx64 : (const void *)ds->csr.idx32, nodes,
                  0};
  bad = first_bad(edges, ds->info.index_bytes == 8 ? scan_range_i64 : scan_range_i32, &ic);
  if (bad >= 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: indices[%lld] = %lld (in row %lld) is not a node id in [0, %lld); the "
                   "CSR is corrupt, re-run neargnn convert",
                   ds->dir, f, (long long)bad, (long long)ng__csr_index(&ds->csr, bad),
                   (long long)row_of(indptr, nodes, bad), (long long)nodes);
  return NG_OK;
}

static ng_status check_labels(const struct ng_dataset *ds) {
  if (!ds->labels)
    return NG_OK;
  range_ctx rc = {ds->labels, ds->info.classes, -1};
  int64_t bad = first_bad(ds->info.nodes, scan_range_i32, &rc);
  if (bad >= 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s/%s: labels[%lld] = %d is outside [-1, %d) (-1 marks an unlabelled node); "
                   "fix the labels or \"classes\" in dataset.json",
                   ds->dir, NG_ARRAY_FILE[NG_ARR_LABELS], (long long)bad, ds->labels[bad],
                   ds->info.classes);
  /* The output layer is `classes` wide: a count far above the labels (a hand-edited 65536 for 7
   * real classes) would train and store a layer of mostly dead columns. The converters' rule,
   * with the largest label in place of the distinct ones: at most 2 x (largest + 1) + 8. */
  int32_t top = -1;
  const int64_t n = ds->info.nodes;
  const int32_t *lab = ds->labels;
#pragma omp parallel for schedule(static) reduction(max : top) if (n > SCAN_BLOCK)
  for (int64_t i = 0; i < n; i++)
    top = lab[i] > top ? lab[i] : top;
  const int64_t used = (int64_t)top + 1;
  if (ds->info.classes > 2 * used + CLASS_SLACK)
    return ng__err(NG_ERR_FORMAT,
                   "%s: \"classes\" is %d but the largest label in %s is %d: the output layer "
                   "would be %d wide for %lld classes in use; set \"classes\" to %lld in "
                   "dataset.json (at most twice the labels in use, plus %d, are accepted)",
                   ds->dir, ds->info.classes, NG_ARRAY_FILE[NG_ARR_LABELS], (int)top,
                   ds->info.classes, (long long)used, (long long)NG_MAX(used, (int64_t)1),
                   CLASS_SLACK);
  return NG_OK;
}

static const int64_t *split_count(const struct ng_dataset *ds, int s) {
  return s == 0 ? &ds->info.train : s == 1 ? &ds->info.val : &ds->info.test;
}

/* Locates the first repeated id of the splits taken in order train, val, test, after the
 * parallel pass found that there is one. Sequential: only runs on a broken dataset. */
static ng_status report_duplicate(const struct ng_dataset *ds, uint64_t *seen) {
  for (int s = 0; s < 3; s++) {
    const int64_t *ids = ds->split[s];
    for (int64_t i = 0; i < *split_count(ds, s); i++) {
      uint64_t v = (uint64_t)ids[i], bit = 1ull << (v % 64);
      if (!(seen[v / 64] & bit)) {
        seen[v / 64] |= bit;
        continue;
      }
      const char *file = NG_ARRAY_FILE[NG_ARR_TRAIN + s];
      for (int t = 0; t <= s; t++) {
        const int64_t *other = ds->split[t];
        int64_t end = t == s ? i : *split_count(ds, t);
        for (int64_t j = 0; j < end; j++) {
          if (other[j] != ids[i])
            continue;
          if (t == s)
            return ng__err(NG_ERR_FORMAT,
                           "%s/%s: node %lld appears twice (positions %lld and %lld); remove "
                           "the duplicate",
                           ds->dir, file, (long long)ids[i], (long long)j, (long long)i);
          return ng__err(NG_ERR_FORMAT,
                         "%s/%s: node %lld (position %lld) is also in %s (position %lld); the "
                         "splits must be disjoint",
                         ds->dir, file, (long long)ids[i], (long long)i,
                         NG_ARRAY_FILE[NG_ARR_TRAIN + t], (long long)j);
        }
      }
    }
  }
  return ng__err(NG_ERR_INTERNAL, "%s: a duplicate split id was found and then lost", ds->dir);
}

static ng_status check_splits(const struct ng_dataset *ds) {
  int64_t nodes = ds->info.nodes;
  for (int s = 0; s < 3; s++) {
    if (!ds->split[s])
      continue;
    range_ctx rc = {ds->split[s], nodes, 0};
    int64_t bad = first_bad(*split_count(ds, s), scan_range_i64, &rc);
    if (bad >= 0)
      return ng__err(NG_ERR_FORMAT,
                     "%s/%s: %s_idx[%lld] = %lld is not a node id in [0, %lld); fix the split",
                     ds->dir, NG_ARRAY_FILE[NG_ARR_TRAIN + s], SPLIT_NAME[s], (long long)bad,
                     (long long)ds->split[s][bad], (long long)nodes);
    labelled_ctx lc = {ds->split[s], ds->labels};
    bad = first_bad(*split_count(ds, s), scan_labelled, &lc);
    if (bad >= 0)
      return ng__err(NG_ERR_FORMAT,
                     "%s/%s: node %lld (%s_idx[%lld]) has label -1 (unlabelled); every node of "
                     "a split needs a label in [0, %d)",
                     ds->dir, NG_ARRAY_FILE[NG_ARR_TRAIN + s], (long long)ds->split[s][bad],
                     SPLIT_NAME[s], (long long)bad, ds->info.classes);
  }
  if (ds->info.train + ds->info.val + ds->info.test == 0)
    return NG_OK;

  /* Duplicates within and across splits at once: one bit per node, set atomically. */
  size_t words = (size_t)(nodes / 64 + 1), bytes = words * sizeof(uint64_t);
  uint64_t *seen = ng__big_alloc(bytes, "the split check's node bitmap");
  if (!seen)
    return NG_ERR_NOMEM;
  bool dup = false;
  for (int s = 0; s < 3 && !dup; s++) {
    const int64_t *ids = ds->split[s];
    int64_t n = *split_count(ds, s);
#pragma omp parallel for schedule(static) reduction(|| : dup) if (n > SCAN_BLOCK)
    for (int64_t i = 0; i < n; i++) {
      uint64_t v = (uint64_t)ids[i], bit = 1ull << (v % 64);
      if (__atomic_fetch_or(&seen[v / 64], bit, __ATOMIC_RELAXED) & bit)
        dup = true;
    }
  }
  ng_status st = NG_OK;
  if (dup) {
    memset(seen, 0, bytes);
    st = report_duplicate(ds, seen);
  }
  ng__big_free(seen, bytes);
  return st;
}

static int64_t scan_negative_i64(const void *ctx, int64_t lo, int64_t hi) {
  const int64_t *a = ctx;
  bool bad = false;
  for (int64_t i = lo; i < hi; i++)
    bad |= a[i] < 0;
  if (bad)
    for (int64_t i = lo; i < hi; i++)
      if (a[i] < 0)
        return i;
  return -1;
}

/* The source ids of renumbered datasets are non-negative (their uniqueness is the converter's
 * promise and is not checked: it would need a sort of the whole array). */
static ng_status check_orig_ids(const struct ng_dataset *ds) {
  if (!ds->info.orig_ids)
    return NG_OK;
  /* Every non-negative int64 is a valid source id, INT64_MAX included (docs/convert.md). */
  int64_t bad = first_bad(ds->info.nodes, scan_negative_i64, ds->arrays[NG_ARR_ORIG_ID].data);
  if (bad >= 0)
    return ng__err(NG_ERR_FORMAT, "%s/%s: orig_id[%lld] = %lld is negative; re-run neargnn convert",
                   ds->dir, NG_ARRAY_FILE[NG_ARR_ORIG_ID], (long long)bad,
                   (long long)((const int64_t *)ds->arrays[NG_ARR_ORIG_ID].data)[bad]);
  return NG_OK;
}

static ng_status check_features(const struct ng_dataset *ds) {
  if (!ds->features)
    return NG_OK;
  finite_ctx fc = {ds->features};
  int64_t dim = ds->info.feature_dim;
  int64_t bad = first_bad(ds->info.nodes * dim, scan_finite, &fc);
  if (bad < 0)
    return NG_OK;
  float v = ds->features[bad];
  const char *what = isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
  return ng__err(NG_ERR_FORMAT,
                 "%s/%s: features[%lld, %lld] is %s; replace non-finite values (numpy: "
                 "numpy.nan_to_num)",
                 ds->dir, NG_ARRAY_FILE[NG_ARR_FEATURES], (long long)(bad / dim),
                 (long long)(bad % dim), what);
}

/* Without check_features, open still checks FEATURE_SAMPLE_ROWS rows spread evenly over the
 * table, the first and last among them, so that a dataset with NaN features usually fails
 * here, naming the row, rather than in training with a non-finite loss. The cost does not
 * grow with the table: 4098 rows (16 MiB at 1024 columns), one page-in each. Measured locally
 * on a generated 4.1 GB table (1M nodes x 1024 floats, page cache warm), the whole open took
 * ~160 ms with the sample against ~1000 ms with the full check_features scan, which grows with
 * the size (~4 s at 16 GB) while the sample stays the same. */
enum { FEATURE_SAMPLE_ROWS = 4096 + 2 };

static ng_status sample_features(const struct ng_dataset *ds) {
  if (!ds->features)
    return NG_OK;
  int64_t nodes = ds->info.nodes, dim = ds->info.feature_dim;
  int64_t samples = NG_MIN(nodes, (int64_t)FEATURE_SAMPLE_ROWS);
  int64_t first = INT64_MAX;
#pragma omp parallel for schedule(dynamic, 64) reduction(min : first)
  for (int64_t k = 0; k < samples; k++) {
    /* Evenly spaced and increasing: row 0 for k = 0, row nodes - 1 for the last k. */
    int64_t row =
        samples > 1 ? (int64_t)((double)k * (double)(nodes - 1) / (double)(samples - 1)) : 0;
    if (k == samples - 1)
      row = nodes - 1;
    finite_ctx fc = {ds->features + row * dim};
    int64_t bad = scan_finite(&fc, 0, dim);
    if (bad >= 0 && row * dim + bad < first)
      first = row * dim + bad;
  }
  if (first == INT64_MAX)
    return NG_OK;
  float v = ds->features[first];
  const char *what = isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
  return ng__err(NG_ERR_FORMAT,
                 "%s/%s: features[%lld, %lld] is %s (found by the check of %lld sampled rows on "
                 "open); replace non-finite values (numpy: numpy.nan_to_num), and run with "
                 "--check-features full (ng_open_opts.check_features) to find them all",
                 ds->dir, NG_ARRAY_FILE[NG_ARR_FEATURES], (long long)(first / dim),
                 (long long)(first % dim), what, (long long)samples);
}

/* ---- the public API ---- */

ng_status ng__dataset_validate(const struct ng_dataset *ds, bool all_features) {
  NG_CHECK(check_csr(ds));
  NG_CHECK(check_labels(ds));
  NG_CHECK(check_splits(ds));
  NG_CHECK(check_orig_ids(ds));
  return all_features ? check_features(ds) : sample_features(ds);
}

ng_status ng__dataset_verify_maps(const struct ng_dataset *ds) {
  for (int i = 0; i < NG_ARR_COUNT_; i++)
    NG_CHECK(ng__map_verify(ds->arrays[i].map));
  return NG_OK;
}

ng_status ng__dataset_check(ng_dataset_t ds) {
  if (!ds)
    return ng__err(NG_ERR_INVALID_ARG, "dataset handle is NULL; open one with ng_dataset_open");
  if (ds->magic != NG_DATASET_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG,
                   "dataset handle is closed or not a dataset; keep it open (no ng_dataset_close) "
                   "while it is used");
  return NG_OK;
}

void ng_dataset_close(ng_dataset_t ds) {
  if (!ds || ds->magic != NG_DATASET_MAGIC)
    return;
  for (int i = 0; i < NG_ARR_COUNT_; i++)
    ng__npy_close(&ds->arrays[i]);
  for (size_t i = 0; i < NG_ARRAY_LEN(ds->owned); i++)
    ng__big_free(ds->owned[i].ptr, ds->owned[i].bytes);
  free(ds->dir);
  ds->magic = 0;
  free(ds);
}

ng_status ng__open_args(ng_open_opts *o, const char *fn, const char *dir, const ng_open_opts *opts,
                        const char *doc) {
  if (!dir || !*dir)
    return ng__err(NG_ERR_INVALID_ARG, "%s: no dataset folder given", fn);
  *o = (ng_open_opts)NG_OPEN_OPTS_INIT;
  if (opts) {
    if (opts->size < sizeof opts->size)
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: opts->size is %zu; initialise the options with "
                     "NG_OPEN_OPTS_INIT",
                     fn, opts->size);
    /* A caller built against an older, smaller struct passes fewer fields; newer fields that
     * this library does not know are ignored. */
    memcpy(o, opts, NG_MIN(opts->size, sizeof *o));
  }
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    if (errno == ENOENT)
      return ng__err(NG_ERR_NOT_FOUND, "%s: no such dataset folder", dir);
    return ng__err_errno(NG_ERR_IO, errno, "%s", dir);
  }
  if (!S_ISDIR(sb.st_mode))
    return ng__err(NG_ERR_FORMAT,
                   "%s: is %s, not a folder; a dataset is a folder holding dataset.json and .npy "
                   "arrays (%s)",
                   dir, ng__file_kind(sb.st_mode), doc);
  return NG_OK;
}

ng_status ng__dir_copy(char **out, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  *out = strndup(dir, n);
  if (!*out)
    return ng__err(NG_ERR_NOMEM, "out of memory copying a path");
  return NG_OK;
}

ng_status ng_dataset_open(ng_dataset_t *out, const char *dir, const ng_open_opts *opts) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_open: out is NULL");
  *out = NULL;
  ng_open_opts o;
  NG_CHECK(ng__open_args(&o, "ng_dataset_open", dir, opts, "docs/dataset-format.md"));

  struct ng_dataset *ds = ng__calloc(1, sizeof *ds, "a dataset handle");
  if (!ds)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  NG_CHECK_GOTO(st, ng__dir_copy(&ds->dir, dir), fail);
  ds->info.size = sizeof ds->info;
  NG_CHECK_GOTO(st, load_json(ds), fail);

  array_spec spec[NG_ARR_COUNT_];
  array_specs(spec, &ds->info);
  for (int i = 0; i < NG_ARR_COUNT_; i++)
    NG_CHECK_GOTO(st, map_array(&ds->arrays[i], ds->dir, (ng_array_id)i, &spec[i], o.populate != 0),
                  fail);

  ds->csr.nodes = ds->info.nodes;
  ds->csr.nnz = ds->info.edges;
  /* The view is typed for writers too; the mappings are read-only, and so is every user. */
  ds->csr.indptr = ds->arrays[NG_ARR_INDPTR].data;
  if (ds->info.index_bytes == 8)
    ds->csr.idx64 = ds->arrays[NG_ARR_INDICES].data;
  else
    ds->csr.idx32 = ds->arrays[NG_ARR_INDICES].data;
  ds->features = ds->arrays[NG_ARR_FEATURES].data;
  ds->labels = ds->arrays[NG_ARR_LABELS].data;
  for (int s = 0; s < 3; s++)
    ds->split[s] = ds->arrays[NG_ARR_TRAIN + s].data;

  NG_CHECK_GOTO(st, ng__dataset_validate(ds, o.check_features != 0), fail);

  ds->magic = NG_DATASET_MAGIC;
  *out = ds;
  return NG_OK;
fail:
  for (int i = 0; i < NG_ARR_COUNT_; i++)
    ng__npy_close(&ds->arrays[i]);
  free(ds->dir);
  free(ds);
  return st;
}

ng_status ng__copy_sized(void *dst, const void *src, size_t full, const char *what) {
  size_t size;
  memcpy(&size, dst, sizeof size);
  if (size < sizeof size)
    return ng__err(NG_ERR_INVALID_ARG, "%s: size is %zu; initialise it with its _INIT macro", what,
                   size);
  size_t n = NG_MIN(size, full);
  memcpy((char *)dst + sizeof size, (const char *)src + sizeof size, n - sizeof size);
  return NG_OK;
}

ng_status ng_dataset_orig_ids(const int64_t **out, ng_dataset_t ds) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_orig_ids: out is NULL");
  *out = NULL;
  NG_CHECK(ng__dataset_check(ds));
  if (ds->info.orig_ids)
    *out = ds->arrays[NG_ARR_ORIG_ID].data;
  return NG_OK;
}

ng_status ng_dataset_info_get(ng_dataset_info *out, ng_dataset_t ds) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_info_get: out is NULL");
  NG_CHECK(ng__dataset_check(ds));
  return ng__copy_sized(out, &ds->info, sizeof ds->info, "ng_dataset_info");
}

static int cmp_i64_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x < y) - (x > y);
}

/* Nearest-rank percentile of ascending `xs[n]` (n > 0): the smallest value with at least p% of
 * the samples at or below it. */
static int64_t percentile(const int64_t *xs, int64_t n, int64_t p) {
  int64_t rank = (p * n + 99) / 100;
  return xs[NG_MAX(rank, 1) - 1];
}

ng_status ng_dataset_degree_stats(ng_degree_stats *out, ng_dataset_t ds) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_degree_stats: out is NULL");
  NG_CHECK(ng__dataset_check(ds));
  if (out->size < sizeof out->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_degree_stats: size is %zu; initialise it with NG_DEGREE_STATS_INIT",
                   out->size);
  const ng_csr *g = &ds->csr;
  int64_t nodes = g->nodes;
  ng_degree_stats r = NG_DEGREE_STATS_INIT;
  if (nodes == 0)
    return ng__copy_sized(out, &r, sizeof r, "ng_degree_stats");

  size_t bytes = (size_t)nodes * sizeof(int64_t);
  int64_t *deg = ng__big_alloc(bytes, "row lengths");
  int64_t *indeg = deg ? ng__big_alloc(bytes, "in-degrees") : NULL;
  if (!indeg) {
    ng__big_free(deg, bytes);
    return NG_ERR_NOMEM;
  }
  int64_t dmin = INT64_MAX, dmax = 0, isolated = 0, loops = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(min : dmin) reduction(max : dmax)     \
    reduction(+ : isolated, loops) if (nodes > SCAN_BLOCK)
  for (int64_t v = 0; v < nodes; v++) {
    int64_t d = g->indptr[v + 1] - g->indptr[v];
    deg[v] = d;
    dmin = NG_MIN(dmin, d);
    dmax = NG_MAX(dmax, d);
    isolated += d == 0;
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
      loops += ng__csr_index(g, e) == v;
  }
  r.min = dmin;
  r.max = dmax;
  r.mean = (double)g->nnz / (double)nodes;
  r.isolated = isolated;
  r.self_loops = loops;

  ng_status st = ng__csr_in_degrees(g, indeg);
  if (st != NG_OK)
    goto cleanup;
  /* The share of the top 1% (at least one node) does not depend on how ties are ordered. */
  qsort(indeg, (size_t)nodes, sizeof *indeg, cmp_i64_desc);
  r.in_max = indeg[0];
  int64_t top = NG_MAX((nodes + 99) / 100, 1), top_sum = 0;
  for (int64_t i = 0; i < top; i++)
    top_sum += indeg[i];
  r.in_top1pct_share = g->nnz ? (double)top_sum / (double)g->nnz : 0.0;

  ng_powerlaw_fit fit;
  st = ng__powerlaw_fit(&fit, deg, nodes); /* sorts `deg` ascending */
  if (st != NG_OK)
    goto cleanup;
  r.powerlaw_exponent = fit.alpha;
  r.powerlaw_xmin = fit.xmin;
  r.p50 = percentile(deg, nodes, 50);
  r.p90 = percentile(deg, nodes, 90);
  r.p99 = percentile(deg, nodes, 99);
  st = ng__copy_sized(out, &r, sizeof r, "ng_degree_stats");
cleanup:
  ng__big_free(indeg, bytes);
  ng__big_free(deg, bytes);
  return st;
}

/* ---- the checks above, for the heterogeneous layout (runtime/hetero.c) ---- */

ng_status ng__json_parse_id(uint8_t id[NG_DATASET_ID_BYTES], bool *has_id, const cJSON *root,
                            const char *path) {
  return parse_id(id, has_id, root, path);
}

int64_t ng__scan_monotone(const int64_t *a, int64_t n) {
  range_ctx rc = {a, 0, 0};
  return first_bad(n, scan_monotone, &rc);
}

int64_t ng__scan_range(const void *a, int elem_bytes, int64_t n, int64_t low, int64_t limit) {
  range_ctx rc = {a, limit, low};
  return first_bad(n, elem_bytes == 8 ? scan_range_i64 : scan_range_i32, &rc);
}

int64_t ng__scan_nonfinite(const float *x, int64_t n) {
  finite_ctx fc = {x};
  return first_bad(n, scan_finite, &fc);
}

int64_t ng__csr_row_of(const int64_t *indptr, int64_t rows, int64_t e) {
  return row_of(indptr, rows, e);
}
