/* The server's request parsers and response writers (http_impl.h): pure functions of their
 * arguments, so that the tests and the fuzzers (tests/fuzz/fuzz_infer_request.c,
 * fuzz_graph_update.c) drive them without a socket or an engine. Requests are parsed with cJSON;
 * responses are written by hand, since the outputs are long arrays of numbers whose text must
 * read back to the same bits. */
#include "core_impl.h"
#include "http_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ---- */

/* cJSON keeps a number's value but not how it was written, and a double cannot tell 1.0, 1e3 or
 * -0 from 1, 1000 or 0. Integers (ids above all) must be plain integer literals, so parse_json
 * walks the text beside the tree and marks every number written otherwise with a type bit that
 * cJSON leaves unused (its own flags end at cJSON_StringIsConst; cJSON_IsNumber reads the low
 * byte only, and cJSON_Delete the two flags): json_int refuses a marked number, json_float reads
 * it as any other. */
#define NOT_PLAIN_INT (1 << 12)
_Static_assert(NOT_PLAIN_INT > cJSON_StringIsConst && (NOT_PLAIN_INT & 0xFF) == 0,
               "the mark must not collide with cJSON's types or flags");

/* Finds the next number literal in [*p, end), outside strings: sets *s and *n and moves *p past
 * it; false when there is none. cJSON accepted the text, so a number is a maximal run of
 * number characters starting with '-' or a digit, and a string ends at an unescaped quote. */
static bool next_number(const char **p, const char *end, const char **s, size_t *n) {
  const char *q = *p;
  while (q < end) {
    if (*q == '"') {
      for (q++; q < end && *q != '"'; q++)
        if (*q == '\\')
          q++;
      q++;
    } else if (*q == '-' || (*q >= '0' && *q <= '9')) {
      const char *b = q;
      while (q < end && strchr("0123456789+-.eE", *q) && *q)
        q++;
      *s = b;
      *n = (size_t)(q - b);
      *p = q;
      return true;
    } else {
      q++;
    }
  }
  *p = end;
  return false;
}

/* An optional minus and digits without a leading zero, and not -0. */
static bool plain_int(const char *s, size_t n) {
  const size_t neg = n && s[0] == '-';
  if (n == neg || (s[neg] == '0' && (n > neg + 1 || neg)))
    return false;
  for (size_t i = neg; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

/* Marks the numbers of the siblings from `v` on and of their children, in document order, the
 * order of the literals in the text (cJSON keeps members and elements in that order). */
static void mark_numbers(cJSON *v, const char **p, const char *end) {
  for (; v; v = v->next) {
    if (cJSON_IsNumber(v)) {
      const char *s = NULL;
      size_t n = 0;
      if (!next_number(p, end, &s, &n) || !plain_int(s, n))
        v->type |= NOT_PLAIN_INT;
    } else if (v->child) {
      mark_numbers(v->child, p, end);
    }
  }
}

/* Parses exactly `len` bytes as one JSON value (whitespace around it allowed). */
static ng_status parse_json(cJSON **out, const char *body, size_t len, const char *what) {
  *out = NULL;
  if (!body || len == 0)
    return ng__err(NG_ERR_INVALID_ARG, "%s: empty body; send a JSON object", what);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    size_t off = at && at >= body && at <= body + len ? (size_t)(at - body) : 0;
    return ng__err(NG_ERR_INVALID_ARG, "%s: malformed JSON at byte %zu", what, off);
  }
  size_t used = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
  for (size_t i = used; i < len; i++)
    if (body[i] != ' ' && body[i] != '\t' && body[i] != '\n' && body[i] != '\r' && body[i]) {
      cJSON_Delete(root);
      return ng__err(NG_ERR_INVALID_ARG, "%s: malformed JSON: text after the value at byte %zu",
                     what, i);
    }
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return ng__err(NG_ERR_INVALID_ARG, "%s: the body must be a JSON object", what);
  }
  const char *cursor = body;
  mark_numbers(root->child, &cursor, body + used);
  *out = root;
  return NG_OK;
}

/* An integer JSON number, written as a plain integer literal, that a double holds exactly. */
static bool json_int(const cJSON *v, int64_t *out) {
  if (!cJSON_IsNumber(v) || (v->type & NOT_PLAIN_INT))
    return false;
  const double d = v->valuedouble;
  if (!(d >= -NG_HTTP_MAX_EXACT_INT && d <= NG_HTTP_MAX_EXACT_INT) || d != floor(d))
    return false;
  *out = (int64_t)d;
  return true;
}

/* A number that a float holds without overflow. */
static bool json_float(const cJSON *v, float *out) {
  if (!cJSON_IsNumber(v))
    return false;
  const double d = v->valuedouble;
  if (!(d >= -(double)FLT_MAX && d <= (double)FLT_MAX))
    return false;
  *out = (float)d;
  return true;
}

/* The optional "id": a short string, copied. */
static ng_status parse_id(char **out, const cJSON *root, const char *what) {
  *out = NULL;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
  if (!id)
    return NG_OK;
  if (!cJSON_IsString(id) || !id->valuestring)
    return ng__err(NG_ERR_INVALID_ARG, "%s: \"id\" must be a string", what);
  if (strlen(id->valuestring) > NG_HTTP_MAX_ID_LEN)
    return ng__err(NG_ERR_INVALID_ARG, "%s: \"id\" is longer than %d bytes", what,
                   NG_HTTP_MAX_ID_LEN);
  *out = strdup(id->valuestring);
  return *out ? NG_OK : ng__err(NG_ERR_NOMEM, "%s: no memory for the id", what);
}

/* One INT64 input tensor `in` of shape [n] whose name is `name`: its ids into ids[n] (*n is
 * its shape's n; ids NULL: only the shape is read). */
static ng_status parse_ids(int64_t *ids, int64_t *n, const cJSON *in, const char *name) {
  const char *what = "infer request";
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
  if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "INT64") != 0)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s has datatype %s; it must be \"INT64\"", what, name,
                   cJSON_IsString(dt) ? dt->valuestring : "(none)");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape");
  if (!ids) {
    *n = -1;
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 1 || !json_int(shape->child, n) ||
        *n < 1)
      return ng__err(NG_ERR_INVALID_ARG, "%s: %s must have shape [n] with n >= 1", what, name);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
    if (!cJSON_IsArray(data))
      return ng__err(NG_ERR_INVALID_ARG, "%s: %s needs \"data\", a flat array of ids", what, name);
    const int count = cJSON_GetArraySize(data);
    if ((int64_t)count != *n)
      return ng__err(NG_ERR_INVALID_ARG, "%s: %s has shape [%" PRId64 "] but %d values in \"data\"",
                     what, name, *n, count);
    return NG_OK;
  }
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
  int64_t i = 0;
  for (const cJSON *v = data->child; v; v = v->next, i++)
    if (!json_int(v, &ids[i]) || ids[i] < 0)
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: %s data[%" PRId64 "] is not a node id (a plain integer >= 0: no "
                     "fraction, exponent or -0)",
                     what, name, i);
  return NG_OK;
}

/* The input tensor named `name` among `inputs`, or NULL. */
static const cJSON *input_named(const cJSON *inputs, const char *name) {
  for (const cJSON *in = inputs->child; in; in = in->next) {
    const cJSON *nm = cJSON_IsObject(in) ? cJSON_GetObjectItemCaseSensitive(in, "name") : NULL;
    if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0)
      return in;
  }
  return NULL;
}

/* "inputs": one tensor "node_ids" (a node request), or two, "src_ids" and "dst_ids" of the same
 * shape (a pair request: the pairs' sources in req.node_ids, their destinations in
 * req.dst_ids, both in the one allocation `ids`). */
static ng_status parse_node_ids(ng_http_infer *out, const cJSON *inputs) {
  const char *what = "infer request";
  const int k = cJSON_IsArray(inputs) ? cJSON_GetArraySize(inputs) : -1;
  if (k != 1 && k != 2)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: \"inputs\" must be an array holding one tensor, \"node_ids\", or two, "
                   "\"src_ids\" and \"dst_ids\" (pair scores)",
                   what);
  for (const cJSON *in = inputs->child; in; in = in->next) {
    if (!cJSON_IsObject(in))
      return ng__err(NG_ERR_INVALID_ARG, "%s: every input must be an object", what);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
    const char *nm = cJSON_IsString(name) ? name->valuestring : NULL;
    const bool known = nm && (k == 1 ? strcmp(nm, "node_ids") == 0
                                     : strcmp(nm, "src_ids") == 0 || strcmp(nm, "dst_ids") == 0);
    if (!known)
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: unknown input %s%s%s; the model's inputs are \"node_ids\" alone, or "
                     "\"src_ids\" and \"dst_ids\" together",
                     what, nm ? "\"" : "", nm ? nm : "(no name)", nm ? "\"" : "");
  }
  const cJSON *src = input_named(inputs, k == 1 ? "node_ids" : "src_ids");
  const cJSON *dst = k == 2 ? input_named(inputs, "dst_ids") : NULL;
  if (k == 2 && (!src || !dst))
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: a pair request gives \"src_ids\" and \"dst_ids\", "
                   "one of each",
                   what);
  int64_t n = 0, n_dst = 0;
  NG_CHECK(parse_ids(NULL, &n, src, k == 1 ? "node_ids" : "src_ids"));
  if (dst) {
    NG_CHECK(parse_ids(NULL, &n_dst, dst, "dst_ids"));
    if (n_dst != n)
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: src_ids has shape [%" PRId64 "] but dst_ids [%" PRId64
                     "]; pairs need both of one shape",
                     what, n, n_dst);
  }
  out->ids = malloc((size_t)n * (dst ? 2 : 1) * sizeof *out->ids);
  if (!out->ids)
    return ng__err(NG_ERR_NOMEM, "%s: no memory for %" PRId64 " ids", what, n);
  NG_CHECK(parse_ids(out->ids, &n, src, k == 1 ? "node_ids" : "src_ids"));
  if (dst)
    NG_CHECK(parse_ids(out->ids + n, &n, dst, "dst_ids"));
  out->req.node_ids = out->ids;
  out->req.dst_ids = dst ? out->ids + n : NULL;
  out->req.n = n;
  return NG_OK;
}

static ng_status parse_parameters(ng_infer_request *req, const cJSON *params, int32_t layers) {
  const char *what = "infer request";
  if (!params)
    return NG_OK;
  if (!cJSON_IsObject(params))
    return ng__err(NG_ERR_INVALID_ARG, "%s: \"parameters\" must be an object", what);
  const cJSON *fan = cJSON_GetObjectItemCaseSensitive(params, "fanouts");
  if (fan) {
    const int nf = cJSON_IsArray(fan) ? cJSON_GetArraySize(fan) : -1;
    if (nf < 1 || nf > NG_ENGINE_MAX_LAYERS)
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: \"fanouts\" must be an array of 1 to %d integers (one per layer, from "
                     "the targets outwards)",
                     what, NG_ENGINE_MAX_LAYERS);
    if (layers > 0 && nf != layers)
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: \"fanouts\" has %d values but the model has %d layers", what, nf, layers);
    int k = 0;
    for (const cJSON *v = fan->child; v; v = v->next, k++) {
      int64_t f = 0;
      if (!json_int(v, &f) || (f < 1 && f != -1) || f > INT32_MAX)
        return ng__err(NG_ERR_INVALID_ARG,
                       "%s: fanouts[%d] is not a positive integer or -1 (all neighbours)", what, k);
      /* The list reads from the targets outwards, as `train --fanouts`; the engine counts
       * layers from the input, as ng_layer_opts. */
      req->fanout[nf - 1 - k] = (int32_t)f;
    }
    req->n_fanouts = nf;
  }
  const cJSON *seed = cJSON_GetObjectItemCaseSensitive(params, "seed");
  if (seed) {
    int64_t s = -1;
    if (cJSON_IsString(seed) && seed->valuestring[0] >= '0' && seed->valuestring[0] <= '9' &&
        strlen(seed->valuestring) <= 20) {
      char *end = NULL;
      errno = 0;
      unsigned long long u = strtoull(seed->valuestring, &end, 10);
      if (*end || errno)
        return ng__err(NG_ERR_INVALID_ARG, "%s: \"seed\" '%s' is not an unsigned 64-bit integer",
                       what, seed->valuestring);
      req->seed = (uint64_t)u;
    } else if (json_int(seed, &s) && s >= 0) {
      req->seed = (uint64_t)s;
    } else {
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: \"seed\" must be an integer >= 0 (as a string above 2^53)", what);
    }
  }
  const cJSON *emb = cJSON_GetObjectItemCaseSensitive(params, "embedding_layer");
  if (emb) {
    int64_t l = -1;
    if (!json_int(emb, &l) || l < 0 || l >= NG_ENGINE_MAX_LAYERS || (layers > 0 && l >= layers))
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: \"embedding_layer\" must be a layer index from 0 to %d", what,
                     (layers > 0 ? layers : NG_ENGINE_MAX_LAYERS) - 1);
    req->embedding_layer = (int32_t)l;
  }
  const cJSON *tmo = cJSON_GetObjectItemCaseSensitive(params, "timeout_ms");
  if (tmo) {
    int64_t t = -1;
    if (!json_int(tmo, &t) || t < 1 || t > NG_ENGINE_MAX_TIMEOUT_MS)
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: \"timeout_ms\" must be an integer from 1 to %d (ms from admission by "
                     "which the request must start; without it, --request-timeout-ms)",
                     what, NG_ENGINE_MAX_TIMEOUT_MS);
    req->timeout_ms = t;
  }
  return NG_OK;
}

static ng_status parse_outputs(unsigned *mask, const cJSON *outputs, bool pairs) {
  const char *what = "infer request";
  /* KServe v2: without "outputs", every output of the model is returned (a pair request's
   * one, its scores). */
  *mask = pairs ? NG_OUT_SCORE : NG_OUT_LOGITS | NG_OUT_EMBEDDING | NG_OUT_CLASS;
  if (!outputs)
    return NG_OK;
  if (!cJSON_IsArray(outputs) || cJSON_GetArraySize(outputs) < 1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: \"outputs\" must be a non-empty array of {\"name\": ...} objects", what);
  *mask = 0;
  int k = 0;
  for (const cJSON *o = outputs->child; o; o = o->next, k++) {
    const cJSON *name = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "name") : NULL;
    const char *s = cJSON_IsString(name) ? name->valuestring : NULL;
    if (s && strcmp(s, "logits") == 0)
      *mask |= NG_OUT_LOGITS;
    else if (s && strcmp(s, "embedding") == 0)
      *mask |= NG_OUT_EMBEDDING;
    else if (s && strcmp(s, "class") == 0)
      *mask |= NG_OUT_CLASS;
    else if (s && strcmp(s, "score") == 0)
      *mask |= NG_OUT_SCORE;
    else
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: outputs[%d] is not one of \"logits\", \"embedding\", \"class\", "
                     "\"score\"",
                     what, k);
  }
  return NG_OK;
}

ng_status ng__parse_infer_request(ng_http_infer *out, const char *body, size_t len,
                                  int32_t layers) {
  memset(out, 0, sizeof *out);
  cJSON *root = NULL;
  NG_CHECK(parse_json(&root, body, len, "infer request"));
  out->req.embedding_layer = layers >= 2 ? layers - 2 : 0;
  ng_status st = parse_id(&out->id, root, "infer request");
  if (st == NG_OK)
    st = parse_node_ids(out, cJSON_GetObjectItemCaseSensitive(root, "inputs"));
  if (st == NG_OK)
    st = parse_parameters(&out->req, cJSON_GetObjectItemCaseSensitive(root, "parameters"), layers);
  if (st == NG_OK)
    st = parse_outputs(&out->req.outputs, cJSON_GetObjectItemCaseSensitive(root, "outputs"),
                       out->req.dst_ids != NULL);
  cJSON_Delete(root);
  if (st != NG_OK)
    ng__http_infer_clear(out);
  return st;
}

void ng__http_infer_clear(ng_http_infer *r) {
  if (!r)
    return;
  free(r->ids);
  free(r->id);
  memset(r, 0, sizeof *r);
}

/* ---- the graph update ---- */

static const char *const UPDATE_KEYS[] = {"id",           "add_nodes",       "add_edges",
                                          "remove_edges", "update_features", "parameters"};

/* How many rows of `dim` values `rows` holds: an array of rows, or one flat array. -1: neither
 * (the message names `what`). */
static int64_t count_rows(const cJSON *rows, int64_t dim, const char *what) {
  if (!cJSON_IsArray(rows)) {
    (void)ng__err(NG_ERR_INVALID_ARG, "graph update: %s must be an array of feature rows", what);
    return -1;
  }
  const int64_t n = cJSON_GetArraySize(rows);
  if (n == 0 || !cJSON_IsArray(rows->child)) {
    if (n % dim != 0) {
      (void)ng__err(NG_ERR_INVALID_ARG,
                    "graph update: %s has %" PRId64 " values, not a multiple of the %" PRId64
                    " feature columns",
                    what, n, dim);
      return -1;
    }
    return n / dim;
  }
  int64_t r = 0;
  for (const cJSON *row = rows->child; row; row = row->next, r++)
    if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != dim) {
      (void)ng__err(NG_ERR_INVALID_ARG,
                    "graph update: %s row %" PRId64 " is not an array of %" PRId64 " numbers", what,
                    r, dim);
      return -1;
    }
  return n;
}

/* Copies the rows counted by count_rows into `dst` (rows x dim floats). */
static ng_status copy_rows(float *dst, const cJSON *rows, const char *what) {
  int64_t k = 0;
  const bool nested = rows->child && cJSON_IsArray(rows->child);
  for (const cJSON *row = rows->child; row; row = row->next) {
    const cJSON *first = nested ? row->child : row;
    for (const cJSON *v = first; v; v = nested ? v->next : NULL, k++)
      if (!json_float(v, &dst[k]))
        return ng__err(NG_ERR_INVALID_ARG,
                       "graph update: %s value %" PRId64 " is not a finite float", what, k);
  }
  return NG_OK;
}

/* Number of [src, dst] pairs in `edges` (-1 on a malformed list). */
static int64_t count_edges(const cJSON *edges, const char *what) {
  if (!cJSON_IsArray(edges)) {
    (void)ng__err(NG_ERR_INVALID_ARG, "graph update: \"%s\" must be an array of [src, dst] pairs",
                  what);
    return -1;
  }
  return cJSON_GetArraySize(edges);
}

static ng_status copy_edges(int64_t *src, int64_t *dst, const cJSON *edges, const char *what) {
  int64_t k = 0;
  for (const cJSON *e = edges->child; e; e = e->next, k++) {
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !json_int(e->child, &src[k]) ||
        !json_int(e->child->next, &dst[k]) || src[k] < 0 || dst[k] < 0)
      return ng__err(NG_ERR_INVALID_ARG,
                     "graph update: %s[%" PRId64
                     "] is not a pair [src, dst] of node ids (plain integers >= 0: no fraction, "
                     "exponent or -0)",
                     what, k);
  }
  return NG_OK;
}

ng_status ng__parse_graph_update(ng_http_update *out, const char *body, size_t len,
                                 int64_t feature_dim) {
  memset(out, 0, sizeof *out);
  if (feature_dim < 1)
    return ng__err(NG_ERR_INVALID_ARG, "graph update: the model has no feature columns");
  cJSON *root = NULL;
  NG_CHECK(parse_json(&root, body, len, "graph update"));
  ng_status st = NG_OK;
  for (const cJSON *k = root->child; k && st == NG_OK; k = k->next) {
    bool known = false;
    for (size_t i = 0; i < NG_ARRAY_LEN(UPDATE_KEYS); i++)
      known = known || (k->string && strcmp(k->string, UPDATE_KEYS[i]) == 0);
    if (!known)
      st = ng__err(NG_ERR_INVALID_ARG,
                   "graph update: unknown key \"%s\" (add_nodes, add_edges, remove_edges, "
                   "update_features, id)",
                   k->string ? k->string : "");
  }
  const cJSON *an = cJSON_GetObjectItemCaseSensitive(root, "add_nodes");
  const cJSON *ae = cJSON_GetObjectItemCaseSensitive(root, "add_edges");
  const cJSON *re = cJSON_GetObjectItemCaseSensitive(root, "remove_edges");
  const cJSON *uf = cJSON_GetObjectItemCaseSensitive(root, "update_features");
  const cJSON *an_rows = NULL, *uf_ids = NULL, *uf_rows = NULL;
  int64_t n_add = 0, n_ae = 0, n_re = 0, n_uf = 0;
  if (st == NG_OK)
    st = parse_id(&out->id, root, "graph update");
  if (st == NG_OK && !an && !ae && !re && !uf)
    st = ng__err(NG_ERR_INVALID_ARG, "graph update: nothing to do; give add_nodes, add_edges, "
                                     "remove_edges or update_features");
  if (st == NG_OK && an) {
    int64_t count = -1;
    an_rows = cJSON_GetObjectItemCaseSensitive(an, "features");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(an, "count");
    if (!cJSON_IsObject(an) || !an_rows)
      st =
          ng__err(NG_ERR_INVALID_ARG, "graph update: \"add_nodes\" must be an object with "
                                      "\"features\" (one row per new node) and optional \"count\"");
    else if (c && (!json_int(c, &count) || count < 0))
      st = ng__err(NG_ERR_INVALID_ARG, "graph update: add_nodes.count must be an integer >= 0");
    else if ((n_add = count_rows(an_rows, feature_dim, "add_nodes.features")) < 0)
      st = NG_ERR_INVALID_ARG;
    else if (c && count != n_add)
      st = ng__err(NG_ERR_INVALID_ARG,
                   "graph update: add_nodes.count is %" PRId64 " but features has %" PRId64 " rows",
                   count, n_add);
  }
  if (st == NG_OK && ae && (n_ae = count_edges(ae, "add_edges")) < 0)
    st = NG_ERR_INVALID_ARG;
  if (st == NG_OK && re && (n_re = count_edges(re, "remove_edges")) < 0)
    st = NG_ERR_INVALID_ARG;
  if (st == NG_OK && uf) {
    uf_ids = cJSON_GetObjectItemCaseSensitive(uf, "ids");
    uf_rows = cJSON_GetObjectItemCaseSensitive(uf, "values");
    if (!cJSON_IsObject(uf) || !cJSON_IsArray(uf_ids) || !uf_rows)
      st = ng__err(NG_ERR_INVALID_ARG, "graph update: \"update_features\" must be an object with "
                                       "\"ids\" and \"values\" (one row per id)");
    else if ((n_uf = count_rows(uf_rows, feature_dim, "update_features.values")) < 0)
      st = NG_ERR_INVALID_ARG;
    else if (n_uf != cJSON_GetArraySize(uf_ids))
      st = ng__err(NG_ERR_INVALID_ARG,
                   "graph update: update_features has %d ids but %" PRId64 " rows of values",
                   cJSON_GetArraySize(uf_ids), n_uf);
  }
  if (st == NG_OK) {
    /* One buffer: the four edge arrays and the ids, then the two feature tables. The counts are
     * bounded by the body's length (every value takes a byte at least), so nothing overflows. */
    const size_t n_i64 = (size_t)(2 * n_ae + 2 * n_re + n_uf);
    const size_t n_f32 = (size_t)((n_add + n_uf) * feature_dim);
    out->buf = malloc(n_i64 * sizeof(int64_t) + n_f32 * sizeof(float) + 1);
    if (!out->buf)
      st = ng__err(NG_ERR_NOMEM, "graph update: no memory for its arrays");
  }
  if (st == NG_OK) {
    ng_graph_update *u = &out->u;
    int64_t *i64 = out->buf;
    float *f32 = (float *)(i64 + 2 * n_ae + 2 * n_re + n_uf);
    u->add_nodes = n_add;
    u->add_features = n_add ? f32 : NULL;
    u->n_add_edges = n_ae;
    u->add_src = i64;
    u->add_dst = i64 + n_ae;
    u->n_remove_edges = n_re;
    u->remove_src = i64 + 2 * n_ae;
    u->remove_dst = i64 + 2 * n_ae + n_re;
    u->n_feature_rows = n_uf;
    u->feature_ids = i64 + 2 * n_ae + 2 * n_re;
    u->feature_values = n_uf ? f32 + n_add * feature_dim : NULL;
    if (n_add)
      st = copy_rows(f32, an_rows, "add_nodes.features");
    if (st == NG_OK && n_ae)
      st = copy_edges(i64, i64 + n_ae, ae, "add_edges");
    if (st == NG_OK && n_re)
      st = copy_edges(i64 + 2 * n_ae, i64 + 2 * n_ae + n_re, re, "remove_edges");
    if (st == NG_OK && n_uf) {
      int64_t *ids = i64 + 2 * n_ae + 2 * n_re, k = 0;
      for (const cJSON *v = uf_ids->child; v && st == NG_OK; v = v->next, k++)
        if (!json_int(v, &ids[k]) || ids[k] < 0)
          st = ng__err(NG_ERR_INVALID_ARG,
                       "graph update: update_features.ids[%" PRId64
                       "] is not a node id (a plain integer >= 0: no fraction, exponent or -0)",
                       k);
      if (st == NG_OK)
        st = copy_rows(f32 + n_add * feature_dim, uf_rows, "update_features.values");
    }
  }
  cJSON_Delete(root);
  if (st != NG_OK)
    ng__http_update_clear(out);
  return st;
}

void ng__http_update_clear(ng_http_update *u) {
  if (!u)
    return;
  free(u->buf);
  free(u->id);
  memset(u, 0, sizeof *u);
}

/* ---- writing ---- */

/* A growing string; `oom` sticks once an allocation failed. */
typedef struct {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static bool sb_reserve(sbuf *b, size_t extra) {
  if (b->oom)
    return false;
  if (b->len + extra + 1 <= b->cap)
    return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->p = p;
  b->cap = cap;
  return true;
}

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (!sb_reserve(b, n))
    return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void sb_puts(sbuf *b, const char *s) {
  sb_put(b, s, strlen(s));
}

static void sb_printf(sbuf *b, const char *fmt, ...) NG_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[128];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n < sizeof small) {
    sb_put(b, small, (size_t)n);
    return;
  }
  if (!sb_reserve(b, (size_t)n))
    return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

size_t ng__json_escape(char *dst, size_t cap, const char *s) {
  size_t n = 0;
#define EMIT(c)                                                                                    \
  do {                                                                                             \
    if (n + 1 < cap)                                                                               \
      dst[n] = (c);                                                                                \
    n++;                                                                                           \
  } while (0)
  EMIT('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    const unsigned char c = *p;
    if (c == '"' || c == '\\') {
      EMIT('\\');
      EMIT((char)c);
    } else if (c < 0x20) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", c);
      for (int i = 0; esc[i]; i++)
        EMIT(esc[i]);
    } else {
      EMIT((char)c);
    }
  }
  EMIT('"');
#undef EMIT
  if (cap)
    dst[n < cap ? n : cap - 1] = 0;
  return n;
}

static void sb_str(sbuf *b, const char *s) {
  const size_t need = ng__json_escape(NULL, 0, s);
  if (!sb_reserve(b, need))
    return;
  ng__json_escape(b->p + b->len, need + 1, s);
  b->len += need;
}

/* The output text, or NULL (and nothing leaked) when an allocation failed. */
static char *sb_finish(sbuf *b, size_t *len) {
  if (b->oom || !b->p) {
    free(b->p);
    return NULL;
  }
  if (len)
    *len = b->len;
  return b->p;
}

static void sb_floats(sbuf *b, const float *v, int64_t n) {
  sb_puts(b, "[");
  for (int64_t i = 0; i < n && !b->oom; i++) {
    if (i)
      sb_puts(b, ",");
    if (isfinite(v[i]))
      sb_printf(b, "%.9g", (double)v[i]);
    else
      sb_puts(b, "null");
  }
  sb_puts(b, "]");
}

static void sb_output_head(sbuf *b, bool *first, const char *name, const char *dtype, int64_t n,
                           int64_t cols) {
  sb_puts(b, *first ? "{\"name\":\"" : ",{\"name\":\"");
  *first = false;
  sb_printf(b, "%s\",\"datatype\":\"%s\",\"shape\":[%" PRId64, name, dtype, n);
  if (cols >= 0)
    sb_printf(b, ",%" PRId64, cols);
  sb_puts(b, "],\"data\":");
}

char *ng__infer_response_json(size_t *len, const char *model, const char *id, unsigned outputs,
                              const ng_infer_result *r) {
  sbuf b = {0};
  if (outputs == 0)
    outputs = NG_OUT_LOGITS;
  sb_puts(&b, "{\"model_name\":");
  sb_str(&b, model ? model : "");
  if (id) {
    sb_puts(&b, ",\"id\":");
    sb_str(&b, id);
  }
  sb_puts(&b, ",\"outputs\":[");
  bool first = true;
  if ((outputs & NG_OUT_LOGITS) && r->logits) {
    sb_output_head(&b, &first, "logits", "FP32", r->n, r->classes);
    sb_floats(&b, r->logits, r->n * r->classes);
    sb_puts(&b, "}");
  }
  if ((outputs & NG_OUT_EMBEDDING) && r->embedding) {
    sb_output_head(&b, &first, "embedding", "FP32", r->n, r->embedding_dim);
    sb_floats(&b, r->embedding, r->n * r->embedding_dim);
    sb_puts(&b, "}");
  }
  if ((outputs & NG_OUT_SCORE) && r->score) {
    sb_output_head(&b, &first, "score", "FP32", r->n, -1);
    sb_floats(&b, r->score, r->n);
    sb_puts(&b, "}");
  }
  if ((outputs & NG_OUT_CLASS) && r->cls) {
    sb_output_head(&b, &first, "class", "INT64", r->n, -1);
    sb_puts(&b, "[");
    for (int64_t i = 0; i < r->n && !b.oom; i++)
      sb_printf(&b, i ? ",%" PRId64 : "%" PRId64, r->cls[i]);
    sb_puts(&b, "]}");
  }
  sb_printf(&b,
            "],\"parameters\":{\"hub\":%s,\"batch_nodes\":%" PRId64 ",\"hot_rows\":%" PRId64
            ",\"cold_rows\":%" PRId64 ",\"queue_us\":%.1f,\"compute_us\":%.1f}}",
            r->hub ? "true" : "false", r->batch_nodes, r->hot_rows, r->cold_rows, r->queue_us,
            r->compute_us);
  return sb_finish(&b, len);
}

char *ng__update_response_json(size_t *len, const char *model, const char *id,
                               const ng_update_result *r, int64_t nodes) {
  sbuf b = {0};
  sb_puts(&b, "{\"model_name\":");
  sb_str(&b, model ? model : "");
  if (id) {
    sb_puts(&b, ",\"id\":");
    sb_str(&b, id);
  }
  if (r->added_nodes > 0)
    sb_printf(&b, ",\"first_new_id\":%" PRId64, r->first_new_id);
  sb_printf(&b,
            ",\"nodes\":%" PRId64 ",\"added_nodes\":%" PRId64 ",\"added_edges\":%" PRId64
            ",\"removed_edges\":%" PRId64 ",\"updated_features\":%" PRId64 ",\"durable\":true}",
            nodes, r->added_nodes, r->added_edges, r->removed_edges, r->updated_features);
  return sb_finish(&b, len);
}

char *ng__error_json(size_t *len, const char *message) {
  sbuf b = {0};
  sb_puts(&b, "{\"error\":");
  sb_str(&b, message && *message ? message : "error");
  sb_puts(&b, "}");
  return sb_finish(&b, len);
}

char *ng__model_metadata_json(size_t *len, const ng_engine_info *info) {
  sbuf b = {0};
  const int32_t layers = info->layers < NG_ENGINE_MAX_LAYERS ? info->layers : NG_ENGINE_MAX_LAYERS;
  const int32_t emb = layers >= 2 ? layers - 2 : 0;
  const int64_t emb_dim = layers > 0 ? info->layer_dim[emb] : 0;
  sb_puts(&b, "{\"name\":");
  sb_str(&b, info->name);
  sb_puts(&b, ",\"versions\":[\"1\"],\"platform\":\"neargnn\","
              "\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[-1]}");
  /* A link model also takes pairs, and answers their scores. */
  if (info->pair_scores)
    sb_puts(&b, ",{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[-1]},"
                "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[-1]}");
  sb_puts(&b, "],\"outputs\":[");
  sb_printf(&b, "{\"name\":\"logits\",\"datatype\":\"FP32\",\"shape\":[-1,%d]},",
            (int)info->classes);
  sb_printf(&b, "{\"name\":\"embedding\",\"datatype\":\"FP32\",\"shape\":[-1,%" PRId64 "]},",
            emb_dim);
  sb_puts(&b, "{\"name\":\"class\",\"datatype\":\"INT64\",\"shape\":[-1]}");
  if (info->pair_scores)
    sb_puts(&b, ",{\"name\":\"score\",\"datatype\":\"FP32\",\"shape\":[-1]}");
  sb_puts(&b, "],");
  sb_puts(&b, "\"parameters\":{");
  if (info->pair_scores)
    sb_printf(&b, "\"decoder\":\"%s\",", ng_link_decoder_name((ng_link_decoder)info->decoder));
  sb_printf(&b,
            "\"nodes\":%" PRId64 ",\"feature_dim\":%" PRId64
            ",\"classes\":%d,\"layers\":%d,\"embedding_layer\":%d,\"layer_dims\":[",
            info->nodes, info->feature_dim, (int)info->classes, (int)layers, (int)emb);
  for (int32_t l = 0; l < layers; l++)
    sb_printf(&b, l ? ",%" PRId64 : "%" PRId64, info->layer_dim[l]);
  sb_puts(&b, "]}}");
  return sb_finish(&b, len);
}
