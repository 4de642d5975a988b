/* The heterogeneous generator (docs/heterogeneous.md): node types and relations given as text,
 * labels on the target type planted through latent classes that every node of every type has,
 * so that a relational model can learn them from the relations and features.
 *
 * Every draw comes from a stream keyed by (seed, purpose, type or relation, node) through
 * core/rng.h: each relation's row lengths, then its rows, are drawn row by row in parallel, and
 * the files never depend on the thread count. A node's latent class is an affine permutation of
 * its id cut into equal ranges, so the members of a class are enumerable without memory. */
#include "hetero_impl.h"
#include "rng.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bumped whenever the same options and seed would produce different files. */
#define GEN_MODEL_VERSION 1
/* Euclidean norm of every class's mean feature vector (the homogeneous generator's choice):
 * features alone classify above chance; the relations make the classes clearly separable. */
#define MEAN_NORM 1.0
/* Poisson row lengths are drawn exactly (Knuth) up to this mean, by a rounded normal above. */
#define POISSON_EXACT_MAX 30.0

enum { ROW_CHUNK = 1 << 10 };

/* One purpose word per random quantity; the type or relation index is the next key. */
enum {
  STREAM_CLASS_PERM = 101,
  STREAM_LENGTH,
  STREAM_ENTRIES,
  STREAM_MEANS,
  STREAM_FEATURES,
  STREAM_SPLIT,
};

static const char PRESET_MAG_TYPES[] =
    "paper:736389:128,author:1134649:0,institution:8740:0,field_of_study:59965:0";
/* ogbn-mag's relations as entries per destination row: 7,145,660 writes (9.70 per paper and
 * 6.30 per author), 5,416,271 cites (7.36 per paper), 1,043,998 author-institution pairs (0.92
 * per author) and 7,505,078 paper-topic pairs (10.19 per paper). */
static const char PRESET_MAG_RELATIONS[] =
    "author:writes:paper:9.70,paper:written_by:author:6.30,paper:cites:paper:7.36,"
    "institution:affiliated_with:author:0.92,field_of_study:has_topic:paper:10.19";
static const char PRESET_IGBH_TYPES[] =
    "paper:1000000:1024,author:1926066:1024,institute:14751:1024,fos:190449:1024";
static const char PRESET_IGBH_RELATIONS[] =
    "paper:cites:paper:12.07,author:writes:paper:3.99,paper:written_by:author:2.07,"
    "institute:affiliated_to:author:0.62,fos:topic:paper:4.22";

ng_status ng_hetero_preset(const char **types, const char **relations, const char **target,
                           const char *preset) {
  if (!types || !relations || !target || !preset)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_preset: an argument is NULL");
  *target = "paper";
  if (strcmp(preset, "mag") == 0) {
    *types = PRESET_MAG_TYPES;
    *relations = PRESET_MAG_RELATIONS;
  } else if (strcmp(preset, "igbh") == 0) {
    *types = PRESET_IGBH_TYPES;
    *relations = PRESET_IGBH_RELATIONS;
  } else {
    return ng__err(NG_ERR_NOT_FOUND, "no heterogeneous preset \"%.40s\"; the presets are mag, igbh",
                   preset);
  }
  return NG_OK;
}

/* ---- the spec text ---- */

typedef struct {
  char name[NG_HETERO_NAME_MAX + 1];
  int64_t count, dim;
  /* class(v) = ((a v + b) mod count) * classes / count; ainv inverts a modulo count. */
  int64_t a, ainv, b;
} gen_type;

typedef struct {
  char relation[NG_HETERO_NAME_MAX + 1];
  int32_t src, dst;
  double degree;
} gen_rel;

/* The next `sep`-separated field of `*s` into `buf`; false when the item has no more. */
static bool next_field(char *buf, size_t cap, const char **s, char sep) {
  const char *end = strchr(*s, sep);
  size_t n = end ? (size_t)(end - *s) : strlen(*s);
  if (n >= cap)
    n = cap - 1;
  memcpy(buf, *s, n);
  buf[n] = '\0';
  *s = end ? end + 1 : *s + strlen(*s);
  return end != NULL;
}

static bool parse_count(int64_t *out, const char *t, double scale) {
  char *end = NULL;
  double v = strtod(t, &end);
  if (end == t)
    return false;
  double mult = 1;
  if (*end == 'k' || *end == 'K')
    mult = 1e3, end++;
  else if (*end == 'M')
    mult = 1e6, end++;
  else if (*end == 'G')
    mult = 1e9, end++;
  if (*end || !(v >= 0) || !isfinite(v))
    return false;
  v = floor(v * mult * scale + 0.5);
  if (v < 1 || v > (double)((int64_t)1 << 53))
    return false;
  *out = (int64_t)v;
  return true;
}

static ng_status parse_types(gen_type **out, int32_t *n, const char *text, double scale) {
  *out = NULL;
  *n = 0;
  if (!text || !*text)
    return ng__err(NG_ERR_INVALID_ARG, "no node types given; list them as NAME:COUNT:DIM,... (e.g. "
                                       "paper:736389:128,author:1134649:0) or use a preset");
  gen_type *t = ng__calloc(NG_HETERO_MAX_NODE_TYPES, sizeof *t, "node types");
  if (!t)
    return NG_ERR_NOMEM;
  const char *s = text;
  while (*s) {
    char item[128], f[3][64];
    next_field(item, sizeof item, &s, ',');
    const char *p = item;
    int k = 0;
    bool more = true;
    while (more && k < 3)
      more = next_field(f[k++], sizeof f[0], &p, ':');
    if (k != 3 || more) {
      free(t);
      return ng__err(NG_ERR_INVALID_ARG,
                     "node type \"%.60s\": expected NAME:COUNT:DIM (e.g. paper:736389:128)", item);
    }
    if (*n == NG_HETERO_MAX_NODE_TYPES) {
      free(t);
      return ng__err(NG_ERR_INVALID_ARG, "more than %d node types", NG_HETERO_MAX_NODE_TYPES);
    }
    gen_type *g = &t[*n];
    char *end = NULL;
    long long dim = strtoll(f[2], &end, 10);
    if (!ng__hetero_name_ok(f[0]) || !parse_count(&g->count, f[1], scale) || !*f[2] || *end ||
        dim < 0 || dim > (1 << 20)) {
      free(t);
      return ng__err(NG_ERR_INVALID_ARG,
                     "node type \"%.60s\": NAME is 1 to %d letters, digits, '_' or '-', COUNT a "
                     "positive count (k, M, G suffixes; after --scale at least 1) and DIM 0 to "
                     "%d",
                     item, NG_HETERO_NAME_MAX, 1 << 20);
    }
    for (int32_t q = 0; q < *n; q++)
      if (strcmp(t[q].name, f[0]) == 0) {
        free(t);
        return ng__err(NG_ERR_INVALID_ARG, "node type \"%s\" is named twice", f[0]);
      }
    ng__strlcpy(g->name, f[0], sizeof g->name);
    g->dim = dim;
    (*n)++;
  }
  *out = t;
  return NG_OK;
}

static int32_t type_index(const gen_type *t, int32_t n, const char *name) {
  for (int32_t i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0)
      return i;
  return -1;
}

static ng_status parse_relations(gen_rel **out, int32_t *n, const char *text, const gen_type *t,
                                 int32_t ntypes) {
  *out = NULL;
  *n = 0;
  if (!text || !*text)
    return ng__err(NG_ERR_INVALID_ARG,
                   "no relations given; list them as SRC:RELATION:DST:DEGREE,... (e.g. "
                   "author:writes:paper:9.7) or use a preset");
  gen_rel *r = ng__calloc(NG_HETERO_MAX_EDGE_TYPES, sizeof *r, "relations");
  if (!r)
    return NG_ERR_NOMEM;
  const char *s = text;
  while (*s) {
    char item[160], f[4][64];
    next_field(item, sizeof item, &s, ',');
    const char *p = item;
    int k = 0;
    bool more = true;
    while (more && k < 4)
      more = next_field(f[k++], sizeof f[0], &p, ':');
    ng_status st = NG_OK;
    if (k != 4 || more)
      st = ng__err(NG_ERR_INVALID_ARG,
                   "relation \"%.60s\": expected SRC:RELATION:DST:DEGREE (e.g. "
                   "author:writes:paper:9.7)",
                   item);
    else if (*n == NG_HETERO_MAX_EDGE_TYPES)
      st = ng__err(NG_ERR_INVALID_ARG, "more than %d relations", NG_HETERO_MAX_EDGE_TYPES);
    gen_rel *g = &r[*n];
    if (st == NG_OK) {
      g->src = type_index(t, ntypes, f[0]);
      g->dst = type_index(t, ntypes, f[2]);
      char *end = NULL;
      g->degree = strtod(f[3], &end);
      if (g->src < 0 || g->dst < 0)
        st = ng__err(NG_ERR_INVALID_ARG, "relation \"%.60s\": \"%s\" is not one of the node types",
                     item, g->src < 0 ? f[0] : f[2]);
      else if (!ng__hetero_name_ok(f[1]))
        st = ng__err(NG_ERR_INVALID_ARG,
                     "relation \"%.60s\": RELATION is 1 to %d letters, digits, '_' or '-'", item,
                     NG_HETERO_NAME_MAX);
      else if (!*f[3] || *end || !(g->degree >= 0) || !isfinite(g->degree) || g->degree > 1e6)
        st = ng__err(NG_ERR_INVALID_ARG,
                     "relation \"%.60s\": DEGREE is the mean entries per DST row, 0 to 1e6", item);
    }
    for (int32_t q = 0; st == NG_OK && q < *n; q++)
      if (r[q].src == g->src && r[q].dst == g->dst && strcmp(r[q].relation, f[1]) == 0)
        st = ng__err(NG_ERR_INVALID_ARG, "relation (%s, %s, %s) is listed twice", f[0], f[1], f[2]);
    if (st != NG_OK) {
      free(r);
      return st;
    }
    ng__strlcpy(g->relation, f[1], sizeof g->relation);
    (*n)++;
  }
  *out = r;
  return NG_OK;
}

/* ---- latent classes ---- */

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static int64_t inverse_mod(int64_t a, int64_t n) {
  __int128 t = 0, nt = 1, r = n, nr = a;
  while (nr != 0) {
    __int128 q = r / nr, tmp = t - q * nt;
    t = nt;
    nt = tmp;
    tmp = r - q * nr;
    r = nr;
    nr = tmp;
  }
  return (int64_t)(t < 0 ? t + n : t);
}

static void class_perm_init(gen_type *g, uint64_t seed, int32_t type) {
  const int64_t n = g->count;
  uint64_t h = ng_hash3(seed, STREAM_CLASS_PERM, (uint64_t)type);
  g->a = 1;
  g->b = (int64_t)(ng_mix64(h) % (uint64_t)n);
  for (uint64_t i = 0; n > 2 && i < 1000; i++) {
    int64_t a = (int64_t)(ng_hash2(h, i) % (uint64_t)n);
    if (a > 1 && gcd64(a, n) == 1) {
      g->a = a;
      break;
    }
  }
  g->ainv = inverse_mod(g->a, n);
}

static inline int64_t class_pos(const gen_type *g, int64_t v) {
  return (int64_t)(((__int128)g->a * v + g->b) % g->count);
}

static inline int32_t class_of(const gen_type *g, int64_t v, int32_t classes) {
  return (int32_t)((__int128)class_pos(g, v) * classes / g->count);
}

/* The node at position p of the permuted order (class c holds positions [lo_c, lo_{c+1})). */
static inline int64_t node_at(const gen_type *g, int64_t p) {
  int64_t d = p - g->b;
  if (d < 0)
    d += g->count;
  return (int64_t)((__int128)g->ainv * d % g->count);
}

static inline int64_t class_lo(const gen_type *g, int32_t c, int32_t classes) {
  return (int64_t)(((__int128)c * g->count + classes - 1) / classes);
}

/* ---- draws ---- */

static inline double uniform01(ng_rng *r) {
  return (double)(ng_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double normal(ng_rng *r) {
  double u = uniform01(r), v = uniform01(r);
  return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v);
}

static int64_t poisson(ng_rng *r, double lam) {
  if (lam <= 0)
    return 0;
  if (lam > POISSON_EXACT_MAX) {
    double x = floor(lam + sqrt(lam) * normal(r) + 0.5);
    return x < 0 ? 0 : (int64_t)x;
  }
  const double limit = exp(-lam);
  double p = uniform01(r);
  int64_t k = 0;
  while (p > limit) {
    p *= uniform01(r);
    k++;
  }
  return k;
}

typedef struct {
  const ng_hetero_generate_opts *o;
  gen_type *t;
  gen_rel *r;
  int32_t nt, nr, target;
  int threads; /* of every parallel loop: opts->threads or the OpenMP default */
  ng_progress progress;
} gen;

/* Row lengths of relation `ri` into indptr[1 ..], then their prefix sums. */
static ng_status draw_lengths(const gen *g, int32_t ri, int64_t *indptr) {
  const gen_rel *rel = &g->r[ri];
  const int64_t rows = g->t[rel->dst].count;
  indptr[0] = 0;
#pragma omp parallel for schedule(dynamic, 4) num_threads(g->threads)
  for (int64_t c = 0; c < (rows + ROW_CHUNK - 1) / ROW_CHUNK; c++)
    for (int64_t v = c * ROW_CHUNK; v < NG_MIN(rows, (c + 1) * ROW_CHUNK); v++) {
      ng_rng rng;
      ng_rng_seed(&rng, ng_hash3(ng_hash2(g->o->seed, STREAM_LENGTH), (uint64_t)ri, (uint64_t)v));
      indptr[v + 1] = poisson(&rng, rel->degree);
    }
  for (int64_t v = 0; v < rows; v++)
    indptr[v + 1] += indptr[v];
  return NG_OK;
}

static ng_status draw_rows(gen *g, int32_t ri, const int64_t *indptr, void *indices, int ib) {
  const gen_rel *rel = &g->r[ri];
  const gen_type *src = &g->t[rel->src], *dst = &g->t[rel->dst];
  const int32_t classes = g->o->classes;
  const double hom = g->o->homophily;
  const int64_t rows = dst->count, chunks = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
  int stop = 0;
#pragma omp parallel for schedule(dynamic, 4) num_threads(g->threads)
  for (int64_t c = 0; c < chunks; c++) {
    if (__atomic_load_n(&stop, __ATOMIC_RELAXED))
      continue;
    for (int64_t v = c * ROW_CHUNK; v < NG_MIN(rows, (c + 1) * ROW_CHUNK); v++) {
      ng_rng rng;
      ng_rng_seed(&rng, ng_hash3(ng_hash2(g->o->seed, STREAM_ENTRIES), (uint64_t)ri, (uint64_t)v));
      const int32_t cls = class_of(dst, v, classes);
      const int64_t lo = class_lo(src, cls, classes), hi = class_lo(src, cls + 1, classes);
      for (int64_t e = indptr[v]; e < indptr[v + 1]; e++) {
        int64_t u;
        if (hi > lo && uniform01(&rng) < hom)
          u = node_at(src, lo + (int64_t)(ng_rng_next(&rng) % (uint64_t)(hi - lo)));
        else
          u = (int64_t)(ng_rng_next(&rng) % (uint64_t)src->count);
        if (ib == 8)
          ((int64_t *)indices)[e] = u;
        else
          ((int32_t *)indices)[e] = (int32_t)u;
      }
    }
    if (omp_get_thread_num() == 0 &&
        ng__progress(&g->progress, g->r[ri].relation, (double)NG_MIN(rows, (c + 1) * ROW_CHUNK),
                     (double)rows, false) != NG_OK)
      __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
  }
  if (stop)
    return ng__err(NG_ERR_INTERRUPTED, "generation interrupted; nothing was written");
  return NG_OK;
}

static ng_status draw_features(gen *g, int32_t ti, float *x) {
  const gen_type *t = &g->t[ti];
  const int32_t classes = g->o->classes;
  const int64_t dim = t->dim;
  float *means = ng__malloc((size_t)classes * (size_t)dim * sizeof(float), "class means");
  if (!means)
    return NG_ERR_NOMEM;
  for (int32_t c = 0; c < classes; c++) {
    ng_rng rng;
    ng_rng_seed(&rng, ng_hash3(ng_hash2(g->o->seed, STREAM_MEANS), (uint64_t)ti, (uint64_t)c));
    double norm = 0;
    for (int64_t j = 0; j < dim; j++) {
      double z = normal(&rng);
      means[c * dim + j] = (float)z;
      norm += z * z;
    }
    const double s = norm > 0 ? MEAN_NORM / sqrt(norm) : 0;
    for (int64_t j = 0; j < dim; j++)
      means[c * dim + j] = (float)(means[c * dim + j] * s);
  }
  const double noise = g->o->feature_noise;
  const int64_t rows = t->count;
#pragma omp parallel for schedule(dynamic, 4) num_threads(g->threads)
  for (int64_t c = 0; c < (rows + ROW_CHUNK - 1) / ROW_CHUNK; c++)
    for (int64_t v = c * ROW_CHUNK; v < NG_MIN(rows, (c + 1) * ROW_CHUNK); v++) {
      ng_rng rng;
      ng_rng_seed(&rng, ng_hash3(ng_hash2(g->o->seed, STREAM_FEATURES), (uint64_t)ti, (uint64_t)v));
      const float *m = means + (int64_t)class_of(t, v, classes) * dim;
      for (int64_t j = 0; j < dim; j++)
        x[v * dim + j] = (float)(m[j] + noise * normal(&rng));
    }
  free(means);
  return ng__progress(&g->progress, "features", (double)rows, (double)rows, true);
}

static inline int split_of(const gen *g, int64_t v) {
  const double u =
      (double)(ng_hash3(g->o->seed, STREAM_SPLIT, (uint64_t)v) >> 11) * (1.0 / 9007199254740992.0);
  const ng_hetero_generate_opts *o = g->o;
  return u < o->train_frac                                ? 0
         : u < o->train_frac + o->val_frac                ? 1
         : u < o->train_frac + o->val_frac + o->test_frac ? 2
                                                          : 3;
}

static ng_status validate(const ng_hetero_generate_opts *o) {
  if (!(o->scale > 0) || !isfinite(o->scale))
    return ng__err(NG_ERR_INVALID_ARG, "scale %g: it must be positive", o->scale);
  if (o->classes < 1 || o->classes > NG_MAX_CLASSES)
    return ng__err(NG_ERR_INVALID_ARG, "classes %d: between 1 and %d", (int)o->classes,
                   NG_MAX_CLASSES);
  if (!(o->homophily >= 0 && o->homophily <= 1))
    return ng__err(NG_ERR_INVALID_ARG, "homophily %g: between 0 and 1", o->homophily);
  if (!(o->feature_noise >= 0) || !isfinite(o->feature_noise))
    return ng__err(NG_ERR_INVALID_ARG, "feature noise %g: it must be finite and >= 0",
                   o->feature_noise);
  const double f[3] = {o->train_frac, o->val_frac, o->test_frac};
  for (int i = 0; i < 3; i++)
    if (!(f[i] >= 0 && f[i] <= 1))
      return ng__err(NG_ERR_INVALID_ARG, "split share %g: between 0 and 1", f[i]);
  if (f[0] + f[1] + f[2] > 1.0 + 1e-9)
    return ng__err(NG_ERR_INVALID_ARG, "split shares %g + %g + %g exceed 1", f[0], f[1], f[2]);
  return NG_OK;
}

ng_status ng_hetero_generate(const char *dst_dir, const ng_hetero_generate_opts *opts) {
  if (!opts || opts->size < sizeof opts->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_hetero_generate: options missing or size unset; initialise them with "
                   "NG_HETERO_GENERATE_OPTS_INIT");
  ng_hetero_generate_opts o = NG_HETERO_GENERATE_OPTS_INIT;
  memcpy(&o, opts, NG_MIN(opts->size, sizeof o));
  NG_CHECK(validate(&o));
  gen g = {.o = &o};
  ng_hetero_writer hw = {0};
  struct ng_hetero desc = {0};
  ng_status st = NG_OK;
  NG_CHECK_GOTO(st, parse_types(&g.t, &g.nt, o.types, o.scale), done);
  NG_CHECK_GOTO(st, parse_relations(&g.r, &g.nr, o.relations, g.t, g.nt), done);
  g.target = o.target ? type_index(g.t, g.nt, o.target) : 0;
  if (g.target < 0) {
    st = ng__err(NG_ERR_INVALID_ARG, "target \"%.40s\" is not one of the node types", o.target);
    goto done;
  }
  ng__progress_init(&g.progress, o.progress, o.progress_ctx);
  g.threads = o.threads > 0 ? o.threads : omp_get_max_threads();

  desc.ntypes = ng__calloc((size_t)g.nt, sizeof *desc.ntypes, "node types");
  desc.etypes = ng__calloc((size_t)g.nr, sizeof *desc.etypes, "edge types");
  if (!desc.ntypes || !desc.etypes) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  ng__strlcpy(desc.info.name, o.name ? o.name : "generated-hetero", sizeof desc.info.name);
  desc.info.node_types = g.nt;
  desc.info.edge_types = g.nr;
  desc.info.index_bytes = 4;
  for (int32_t t = 0; t < g.nt; t++) {
    class_perm_init(&g.t[t], o.seed, t);
    if (g.t[t].count >= NG_INDEX32_MAX_NODES)
      desc.info.index_bytes = 8;
    ng__strlcpy(desc.ntypes[t].name, g.t[t].name, sizeof desc.ntypes[t].name);
    desc.ntypes[t].count = g.t[t].count;
    desc.ntypes[t].feature_dim = g.t[t].dim;
    desc.ntypes[t].classes = t == g.target ? o.classes : 0;
  }
  NG_CHECK_GOTO(st, ng__hetero_writer_begin(&hw, dst_dir), done);

  char file[160];
  for (int32_t r = 0; r < g.nr; r++) {
    const gen_rel *rel = &g.r[r];
    const int64_t rows = g.t[rel->dst].count;
    ng_npy *ptr = NULL, *idx = NULL;
    int64_t shape[1] = {rows + 1};
    ng__hetero_csr_file(file, sizeof file, g.t[rel->src].name, rel->relation, g.t[rel->dst].name,
                        false);
    NG_CHECK_GOTO(st, ng__hetero_writer_array(&ptr, &hw, file, NG_DTYPE_I64, 1, shape), done);
    NG_CHECK_GOTO(st, draw_lengths(&g, r, ptr->data), done);
    const int64_t edges = ((const int64_t *)ptr->data)[rows];
    shape[0] = edges;
    ng__hetero_csr_file(file, sizeof file, g.t[rel->src].name, rel->relation, g.t[rel->dst].name,
                        true);
    NG_CHECK_GOTO(st,
                  ng__hetero_writer_array(&idx, &hw, file,
                                          desc.info.index_bytes == 8 ? NG_DTYPE_I64 : NG_DTYPE_I32,
                                          1, shape),
                  done);
    NG_CHECK_GOTO(st, draw_rows(&g, r, ptr->data, idx->data, desc.info.index_bytes), done);
    ng__strlcpy(desc.etypes[r].relation, rel->relation, sizeof desc.etypes[r].relation);
    desc.etypes[r].src = rel->src;
    desc.etypes[r].dst = rel->dst;
    desc.etypes[r].csr.nnz = edges;
  }
  for (int32_t t = 0; t < g.nt; t++) {
    if (g.t[t].dim == 0)
      continue;
    ng_npy *x = NULL;
    int64_t shape[2] = {g.t[t].count, g.t[t].dim};
    ng__hetero_features_file(file, sizeof file, g.t[t].name);
    NG_CHECK_GOTO(st, ng__hetero_writer_array(&x, &hw, file, NG_DTYPE_F32, 2, shape), done);
    NG_CHECK_GOTO(st, draw_features(&g, t, x->data), done);
  }
  /* Labels: every target node's latent class. Splits: a hash of the node per share. */
  const gen_type *tt = &g.t[g.target];
  ng_npy *lab = NULL;
  int64_t shape[1] = {tt->count};
  ng__hetero_labels_file(file, sizeof file, tt->name);
  NG_CHECK_GOTO(st, ng__hetero_writer_array(&lab, &hw, file, NG_DTYPE_I32, 1, shape), done);
  int32_t *labels = lab->data;
  int64_t count[4] = {0, 0, 0, 0};
  for (int64_t v = 0; v < tt->count; v++) {
    labels[v] = class_of(tt, v, o.classes);
    count[split_of(&g, v)]++;
  }
  static const char *const SPLIT_FILE[3] = {"train_idx.npy", "val_idx.npy", "test_idx.npy"};
  int64_t *ids[3] = {NULL, NULL, NULL};
  for (int s = 0; s < 3; s++) {
    if (count[s] == 0)
      continue;
    ng_npy *a = NULL;
    shape[0] = count[s];
    NG_CHECK_GOTO(st, ng__hetero_writer_array(&a, &hw, SPLIT_FILE[s], NG_DTYPE_I64, 1, shape),
                  done);
    ids[s] = a->data;
  }
  int64_t at[4] = {0, 0, 0, 0};
  for (int64_t v = 0; v < tt->count; v++) {
    int s = split_of(&g, v);
    if (s < 3)
      ids[s][at[s]++] = v;
  }
  desc.info.train = count[0];
  desc.info.val = count[1];
  desc.info.test = count[2];
  char source[1024];
  snprintf(source, sizeof source,
           "neargnn generate --hetero (model %d): types %.300s; relations %.400s; target %s, "
           "classes %d, homophily %g, noise %g, seed %llu",
           GEN_MODEL_VERSION, o.types, o.relations, tt->name, (int)o.classes, o.homophily,
           o.feature_noise, (unsigned long long)o.seed);
  st = ng__hetero_writer_commit(&hw, &desc, source);
done:
  ng__hetero_writer_abort(&hw);
  free(desc.ntypes);
  free(desc.etypes);
  free(g.t);
  free(g.r);
  return st;
}
