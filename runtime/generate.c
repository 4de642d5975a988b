/* The graph generator: a degree-corrected, class-homophilous power-law graph whose features
 * correlate with the class (docs/generate.md). Two passes over the nodes (row lengths, then the
 * rows themselves) write straight into the memory-mapped output, so the auxiliary memory is
 * O(nodes) and small next to the dataset. Every random draw comes from a counter-based stream
 * keyed by (seed, purpose, node), and every floating-point reduction runs over a fixed
 * partition of the nodes, so the files never depend on the number of threads. */
#include "rng.h"
#include "dataset_impl.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bumped whenever the same options and seed would produce different files. */
#define GEN_MODEL_VERSION 1

enum {
  /* The fixed partition of the nodes for reductions and scans (never the thread count). */
  CHUNK_NODES = 1 << 14,
  /* Work units of the parallel phases: small enough to balance hub rows across threads. */
  EDGE_CHUNK_NODES = 1 << 10,
  FEATURE_CHUNK_NODES = 1 << 8,
  /* Alias tables are built per block of this many members (in parallel), with a small
   * top-level table choosing the block. A block index must fit the 32-bit multiply-shift of
   * alias_pick(). */
  ALIAS_BLOCK = 1 << 16,
  /* Weighted redraws of one neighbour before falling back to a scan of the candidate pool. */
  MAX_TRIES = 64,
  FEISTEL_ROUNDS = 4,
  /* Rows at most this long are sorted by insertion. */
  INSERTION_SORT_MAX = 32,
};

/* One purpose word per random quantity, so that no two quantities share a stream. */
enum {
  STREAM_THETA = 1,
  STREAM_DEGREE,
  STREAM_EDGES,
  STREAM_FEATURES,
  STREAM_MEANS,
  STREAM_CLASS_PERM,
  STREAM_SPLIT_PERM,
};

/* Euclidean norm of every class's mean feature vector. With unit noise per column, two class
 * means are about 1.4 noise deviations apart whatever the feature dimension: the features alone
 * classify well above chance, and averaging over homophilous neighbours is what makes the
 * classes clearly separable, so that a GNN beats a per-node model. */
#define MEAN_NORM 1.0

/* ---- a pseudo-random permutation of [0, n): balanced Feistel network with cycle walking ---- */

typedef struct {
  int64_t n;
  int half_bits;
  uint64_t mask;
  uint64_t key[FEISTEL_ROUNDS];
} feistel_perm;

static void perm_init(feistel_perm *p, int64_t n, uint64_t seed, uint64_t purpose) {
  int bits = 2;
  while (((int64_t)1 << bits) < n)
    bits += 2;
  p->n = n;
  p->half_bits = bits / 2;
  p->mask = ((uint64_t)1 << p->half_bits) - 1;
  for (int i = 0; i < FEISTEL_ROUNDS; i++)
    p->key[i] = ng_hash3(seed, purpose, (uint64_t)i);
}

/* Cycle walking turns the bijection of [0, 4^half_bits) into one of [0, n); the domain is less
 * than 4n, so fewer than four steps are expected. */
static int64_t perm_fwd(const feistel_perm *p, int64_t v) {
  uint64_t x = (uint64_t)v;
  do {
    uint64_t l = x >> p->half_bits, r = x & p->mask;
    for (int i = 0; i < FEISTEL_ROUNDS; i++) {
      uint64_t t = l ^ (ng_mix64(r ^ p->key[i]) & p->mask);
      l = r;
      r = t;
    }
    x = (l << p->half_bits) | r;
  } while (x >= (uint64_t)p->n);
  return (int64_t)x;
}

static int64_t perm_inv(const feistel_perm *p, int64_t v) {
  uint64_t x = (uint64_t)v;
  do {
    uint64_t l = x >> p->half_bits, r = x & p->mask;
    for (int i = FEISTEL_ROUNDS - 1; i >= 0; i--) {
      uint64_t t = r ^ (ng_mix64(l ^ p->key[i]) & p->mask);
      r = l;
      l = t;
    }
    x = (l << p->half_bits) | r;
  } while (x >= (uint64_t)p->n);
  return (int64_t)x;
}

/* ---- alias tables ---- */

typedef struct {
  uint32_t thresh; /* keep the bucket when a 32-bit uniform is below this */
  int32_t alias;   /* otherwise take this bucket (an index in the same table) */
} alias_ent;

/* A candidate pool: its members (NULL: the identity over [0, n)), block alias tables over the
 * members' weights and a top table over the blocks' total weights. */
typedef struct {
  int64_t n;
  const int32_t *members;
  alias_ent *ent; /* [n]; block b covers [b * ALIAS_BLOCK, min(n, (b + 1) * ALIAS_BLOCK)) */
  alias_ent *top; /* [nblocks] */
  int64_t nblocks;
} pool;

/* Bucket index from the high 32 bits, keep-or-alias coin from the low 32 bits of one draw. The
 * multiply-shift skews bucket probabilities by at most len / 2^32 (1.5e-5 for a full block). */
static inline int64_t alias_pick(const alias_ent *e, uint64_t len, uint64_t r) {
  uint64_t j = ((r >> 32) * len) >> 32;
  return (uint32_t)r < e[j].thresh ? (int64_t)j : (int64_t)e[j].alias;
}

static inline int64_t pool_draw(const pool *p, ng_rng *r) {
  int64_t lo = alias_pick(p->top, (uint64_t)p->nblocks, ng_rng_next(r)) * ALIAS_BLOCK;
  int64_t len = NG_MIN((int64_t)ALIAS_BLOCK, p->n - lo);
  int64_t j = lo + alias_pick(p->ent + lo, (uint64_t)len, ng_rng_next(r));
  return p->members ? p->members[j] : j;
}

static uint32_t to_thresh(double p) {
  double t = p * 4294967296.0;
  return t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
}

/* Vose's alias method over weights w[0, n) (overwritten), n >= 1 and a positive sum; `work`
 * holds n indices: the small stack grows from the front, the large one from the back. */
static void alias_build(alias_ent *e, double *w, int64_t n, int32_t *work) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++)
    sum += w[i];
  int64_t ns = 0, nl = n;
  for (int64_t i = 0; i < n; i++) {
    w[i] = w[i] * (double)n / sum;
    if (w[i] < 1.0)
      work[ns++] = (int32_t)i;
    else
      work[--nl] = (int32_t)i;
  }
  while (ns > 0 && nl < n) {
    int32_t s = work[--ns], l = work[nl];
    e[s].thresh = to_thresh(w[s]);
    e[s].alias = l;
    w[l] = (w[l] + w[s]) - 1.0;
    if (w[l] < 1.0) {
      nl++;
      work[ns++] = l;
    }
  }
  /* What is left has probability one up to rounding. */
  while (ns > 0) {
    int32_t s = work[--ns];
    e[s].thresh = UINT32_MAX;
    e[s].alias = s;
  }
  while (nl < n) {
    int32_t l = work[nl++];
    e[l].thresh = UINT32_MAX;
    e[l].alias = l;
  }
}

/* ---- normal deviates ---- */

/* Standard normal deviates by Marsaglia and Tsang's ziggurat (128 layers): one 64-bit draw per
 * value on the fast path (about 99% of draws), so the feature fill is bound by memory, not by
 * log and sqrt. As Doornik (2005) advises, the layer comes from other bits than the value. */
enum { ZIG_LAYERS = 128 };
typedef struct {
  uint32_t k[ZIG_LAYERS];
  double w[ZIG_LAYERS], f[ZIG_LAYERS];
} ziggurat;

static void zig_init(ziggurat *z) {
  const double m1 = 2147483648.0, vn = 9.91256303526217e-3;
  double dn = 3.442619855899, tn = dn;
  double q = vn / exp(-0.5 * dn * dn);
  z->k[0] = (uint32_t)((dn / q) * m1);
  z->k[1] = 0;
  z->w[0] = q / m1;
  z->w[ZIG_LAYERS - 1] = dn / m1;
  z->f[0] = 1.0;
  z->f[ZIG_LAYERS - 1] = exp(-0.5 * dn * dn);
  for (int i = ZIG_LAYERS - 2; i >= 1; i--) {
    dn = sqrt(-2.0 * log(vn / dn + exp(-0.5 * dn * dn)));
    z->k[i + 1] = (uint32_t)((dn / tn) * m1);
    tn = dn;
    z->f[i] = exp(-0.5 * dn * dn);
    z->w[i] = dn / m1;
  }
}

/* Uniform in (0, 1): never 0, so its logarithm is finite. */
static inline double uniform_open(ng_rng *r) {
  return ((double)(ng_rng_next(r) >> 11) + 0.5) * 0x1.0p-53;
}

/* The rare outcomes of a draw that fell outside its layer's rectangle: the base strip's tail,
 * or a wedge under the density; otherwise a fresh draw (Marsaglia and Tsang's nfix). */
static double __attribute__((noinline)) zig_slow(const ziggurat *z, ng_rng *r, uint64_t bits) {
  /* Where the base strip's tail begins. */
  const double tail = 3.442619855899;
  for (;;) {
    int32_t hz = (int32_t)(uint32_t)bits;
    int iz = (int)((bits >> 32) & (ZIG_LAYERS - 1));
    uint32_t ahz = hz < 0 ? 0u - (uint32_t)hz : (uint32_t)hz;
    double x = (double)hz * z->w[iz];
    if (ahz < z->k[iz])
      return x;
    if (iz == 0) { /* Marsaglia's exponential rejection for the tail */
      double xt, y;
      do {
        xt = -log(uniform_open(r)) / tail;
        y = -log(uniform_open(r));
      } while (y + y < xt * xt);
      return hz > 0 ? tail + xt : -tail - xt;
    }
    if (z->f[iz] + uniform_open(r) * (z->f[iz - 1] - z->f[iz]) < exp(-0.5 * x * x))
      return x;
    bits = ng_rng_next(r);
  }
}

static inline double zig_normal(const ziggurat *z, ng_rng *r) {
  uint64_t bits = ng_rng_next(r);
  int32_t hz = (int32_t)(uint32_t)bits;
  int iz = (int)((bits >> 32) & (ZIG_LAYERS - 1));
  uint32_t ahz = hz < 0 ? 0u - (uint32_t)hz : (uint32_t)hz;
  if (NG_LIKELY(ahz < z->k[iz]))
    return (double)hz * z->w[iz];
  return zig_slow(z, r, bits);
}

/* ---- the generator's state ---- */

/* A neighbour's first draw in flight: the alias slot, then the member index it resolves to. */
typedef struct {
  int64_t pos;
  uint32_t coin; /* keep-or-alias coin */
  uint32_t own;  /* 1: drawn from the own class's pool, 0: from the global pool */
} draw;

/* One slot of a thread's duplicate filter: `stamp` is the row that wrote it, so the table never
 * needs clearing between rows. */
typedef struct {
  int32_t key;
  int32_t stamp;
} set_slot;

typedef struct {
  const ng_generate_opts *o;
  int64_t n;
  int nt;
  uint64_t seed;
  int32_t classes;
  /* The groups that shape the edges and the features: the classes, or with --links the
   * communities (labels are then community % classes). */
  int32_t groups;
  bool links;
  int64_t feature_dim;
  double inv_alpha;  /* 1 / (exponent - 1): the weights' Pareto tail index, inverted */
  double raw_cap;    /* the largest raw weight (raw weights start at 1) */
  double scale;      /* raw weight -> expected row length */
  uint64_t h_thresh; /* a neighbour is drawn from the own class when 32 bits fall below this */
  bool use_global, use_class;
  feistel_perm class_perm, split_perm;

  int64_t *indptr;
  int32_t *indices;
  int32_t *labels;
  int32_t *group; /* [n] each node's group: `labels` itself unless links */
  size_t group_bytes;
  float *features;
  int64_t *split_ids[3];
  int64_t split_size[3];
  int64_t split_end[3]; /* cumulative split sizes: ranks below split_end[s] and above the
                           previous end are in split s */

  float *means; /* [groups, feature_dim] */
  ziggurat zig;
  int32_t *members;   /* node ids grouped by group */
  int64_t *class_off; /* [groups + 1] */
  alias_ent *global_ent, *class_ent, *tops;
  size_t members_bytes, ent_bytes;
  pool global;
  pool *class_pools;    /* [groups] */
  int64_t *chunk_stats; /* per-chunk sums, maxima and split counts */
  set_slot *sets;       /* [nt * set_cap] */
  int64_t set_cap;
  draw *draws; /* [nt * max_row] */
  int64_t max_row;
  ng_progress progress;
} gen;

/* Raw weight of node v: Pareto with minimum 1 and tail index exponent - 1, capped. */
static inline double theta_raw(const gen *g, int64_t v) {
  uint64_t h = ng_hash3(g->seed, STREAM_THETA, (uint64_t)v);
  double u = (double)(h >> 11) * 0x1.0p-53;
  return fmin(g->raw_cap, pow(1.0 - u, -g->inv_alpha));
}

/* ---- parallel phases over fixed chunks, with progress and interruption ---- */

typedef int64_t (*chunk_fn)(gen *g, int64_t chunk, int tid);

/* Runs fn over chunks [0, nchunks) on g->nt threads. fn returns its work in the phase's unit;
 * the calling thread (OpenMP thread 0) reports progress as base + done out of total, and when
 * the callback asks to stop the remaining chunks are skipped. */
static ng_status par_chunks(gen *g, const char *phase, int64_t nchunks, double base, double total,
                            chunk_fn fn) {
  atomic_int_fast64_t next = 0, done = 0;
  atomic_int stop = 0;
  ng_status st = NG_OK;
#pragma omp parallel num_threads(g->nt)
  {
    int tid = omp_get_thread_num();
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
      int64_t c = atomic_fetch_add(&next, 1);
      if (c >= nchunks)
        break;
      int64_t w = fn(g, c, tid);
      int64_t d = atomic_fetch_add(&done, w) + w;
      if (tid == 0 && ng__progress(&g->progress, phase, base + (double)d, total, false) != NG_OK) {
        st = NG_ERR_INTERRUPTED;
        atomic_store(&stop, 1);
      }
    }
  }
  return st;
}

/* ---- classes ---- */

/* Group of node v: its rank in a random permutation, modulo the group count, so that groups
 * are exactly balanced (sizes differ by at most one) and independent of the node id. Without
 * links the groups are the classes; with links they are the communities, and a node's class is
 * its community modulo the classes, so a class is a union of communities and the edges stay
 * homophilous in the classes too. */
static ng_status make_classes(gen *g) {
  int64_t n = g->n, C = g->groups;
  if (g->links) {
    g->group_bytes = (size_t)n * sizeof *g->group;
    g->group = ng__big_alloc(g->group_bytes, "the community of every node");
    if (!g->group)
      return NG_ERR_NOMEM;
  } else {
    g->group = g->labels;
  }
#pragma omp parallel for num_threads(g->nt) schedule(static)
  for (int64_t v = 0; v < n; v++) {
    g->group[v] = (int32_t)(perm_fwd(&g->class_perm, v) % C);
    if (g->links)
      g->labels[v] = g->group[v] % g->classes;
  }
  g->class_off = ng__calloc((size_t)C + 1, sizeof *g->class_off, "class offsets");
  if (!g->class_off)
    return NG_ERR_NOMEM;
  for (int64_t c = 0; c < C; c++)
    g->class_off[c + 1] = g->class_off[c] + (c < n ? (n - 1 - c) / C + 1 : 0);
  if (!g->use_class)
    return NG_OK;
  g->members_bytes = (size_t)n * sizeof *g->members;
  /* Rank r belongs to class r % C as its (r / C)-th member: one parallel pass, no counting. */
  g->members = ng__big_alloc(g->members_bytes, "the class member lists");
  if (!g->members)
    return NG_ERR_NOMEM;
#pragma omp parallel for num_threads(g->nt) schedule(static)
  for (int64_t r = 0; r < n; r++)
    g->members[g->class_off[r % C] + r / C] = (int32_t)perm_inv(&g->class_perm, r);
  return NG_OK;
}

/* ---- weights and row lengths ---- */

/* Expected value of min(X, cap) for X Pareto with minimum xm and tail index a > 1. */
static double capped_pareto_mean(double xm, double a, double cap) {
  return xm * (a - pow(cap / xm, 1.0 - a)) / (a - 1.0);
}

/* Picks the weights' minimum so that capped weights have mean avg_degree, then rescales by the
 * realised sum (a fixed-chunk reduction) so that the expected edge count is exact. */
static ng_status make_weights(gen *g) {
  double a = g->o->exponent - 1.0, davg = g->o->avg_degree, n = (double)g->n;
  /* The structural cutoff: a node of weight sqrt(n * avg_degree) is expected about once per
   * row of that length, so heavy rows and hubs rarely collide. */
  double cap = fmin(sqrt(n * davg), n - 1.0);
  /* Bisection: the capped mean grows with the minimum, from 0 to cap (> avg_degree). */
  double lo = 0.0, hi = cap;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; i++) {
    double mid = 0.5 * (lo + hi);
    if (capped_pareto_mean(mid, a, cap) < davg)
      lo = mid;
    else
      hi = mid;
  }
  g->inv_alpha = 1.0 / a;
  g->raw_cap = cap / hi;

  int64_t nchunks = (g->n + CHUNK_NODES - 1) / CHUNK_NODES;
  double *sums = ng__malloc((size_t)nchunks * sizeof *sums, "weight sums");
  if (!sums)
    return NG_ERR_NOMEM;
#pragma omp parallel for num_threads(g->nt) schedule(dynamic, 1)
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t v0 = c * CHUNK_NODES, v1 = NG_MIN(g->n, v0 + CHUNK_NODES);
    double s = 0.0;
    for (int64_t v = v0; v < v1; v++)
      s += theta_raw(g, v);
    sums[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < nchunks; c++)
    total += sums[c];
  free(sums);
  g->scale = davg * n / total;
  return NG_OK;
}

/* Poisson deviate: inversion for small means, else Hoermann's transformed rejection (PTRS). */
static int64_t poisson(ng_rng *r, double lam) {
  if (lam < 10.0) {
    double p = exp(-lam), s = p, u = ng_rng_uniform(r);
    int64_t k = 0;
    while (u > s && p > 0.0) {
      k++;
      p *= lam / (double)k;
      s += p;
    }
    return k;
  }
  double slam = sqrt(lam), loglam = log(lam);
  double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
  double inv_alpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2.0);
  for (;;) {
    double u = ng_rng_uniform(r) - 0.5, v = ng_rng_uniform(r);
    double us = 0.5 - fabs(u);
    if (us <= 0.0)
      continue;
    double kd = floor((2.0 * a / us + b) * u + lam + 0.43);
    if (us >= 0.07 && v <= vr)
      return (int64_t)kd;
    if (kd < 0.0 || (us < 0.013 && v > us))
      continue;
    int sign;
    if (log(v) + log(inv_alpha) - log(a / (us * us) + b) <=
        -lam + kd * loglam - lgamma_r(kd + 1.0, &sign))
      return (int64_t)kd;
  }
}

/* Row lengths into indptr[v + 1]; per-chunk sum and maximum into chunk_stats. */
static int64_t degree_chunk(gen *g, int64_t c, int tid) {
  (void)tid;
  int64_t v0 = c * CHUNK_NODES, v1 = NG_MIN(g->n, v0 + CHUNK_NODES), sum = 0, mx = 0;
  for (int64_t v = v0; v < v1; v++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(g->seed, STREAM_DEGREE, (uint64_t)v));
    int64_t d = poisson(&r, g->scale * theta_raw(g, v));
    d = NG_MIN(d, g->n - 1); /* not inside NG_MIN, which would draw twice */
    g->indptr[v + 1] = d;
    sum += d;
    mx = NG_MAX(mx, d);
  }
  g->chunk_stats[2 * c] = sum;
  g->chunk_stats[2 * c + 1] = mx;
  return v1 - v0;
}

static ng_status make_degrees(gen *g) {
  int64_t nchunks = (g->n + CHUNK_NODES - 1) / CHUNK_NODES;
  g->chunk_stats = ng__malloc((size_t)nchunks * 3 * sizeof *g->chunk_stats, "chunk statistics");
  if (!g->chunk_stats)
    return NG_ERR_NOMEM;
  NG_CHECK(par_chunks(g, "degrees", nchunks, 0.0, (double)g->n, degree_chunk));
  /* Exclusive scan of the chunk sums, then each chunk turns its lengths into offsets. */
  int64_t off = 0;
  g->max_row = 0;
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t s = g->chunk_stats[2 * c];
    g->max_row = NG_MAX(g->max_row, g->chunk_stats[2 * c + 1]);
    g->chunk_stats[2 * c] = off;
    off += s;
  }
  g->indptr[0] = 0;
#pragma omp parallel for num_threads(g->nt) schedule(static)
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t v0 = c * CHUNK_NODES, v1 = NG_MIN(g->n, v0 + CHUNK_NODES), run = g->chunk_stats[2 * c];
    for (int64_t v = v0; v < v1; v++) {
      run += g->indptr[v + 1];
      g->indptr[v + 1] = run;
    }
  }
  return ng__progress(&g->progress, "degrees", (double)g->n, (double)g->n, true);
}

/* ---- alias tables of the candidate pools ---- */

typedef struct {
  pool *p;
  int64_t block;
} block_job;

static ng_status make_pools(gen *g) {
  int64_t n = g->n, C = g->groups;
  int64_t npools = (g->use_global ? 1 : 0) + (g->use_class ? C : 0);
  if (npools == 0)
    return NG_OK;
  g->ent_bytes = (size_t)n * sizeof(alias_ent);
  if (g->use_class) {
    g->class_pools = ng__calloc((size_t)C, sizeof *g->class_pools, "class pools");
    g->class_ent = ng__big_alloc(g->ent_bytes, "the class alias tables");
    if (!g->class_pools || !g->class_ent)
      return NG_ERR_NOMEM;
  }
  if (g->use_global) {
    g->global_ent = ng__big_alloc(g->ent_bytes, "the global alias table");
    if (!g->global_ent)
      return NG_ERR_NOMEM;
  }
  pool **pools = ng__malloc((size_t)npools * sizeof(pool *), "pool list");
  if (!pools)
    return NG_ERR_NOMEM;
  int64_t k = 0, njobs = 0;
  if (g->use_global) {
    g->global = (pool){.n = n, .members = NULL, .ent = g->global_ent};
    pools[k++] = &g->global;
  }
  for (int64_t c = 0; g->use_class && c < C; c++) {
    int64_t off = g->class_off[c];
    g->class_pools[c] = (pool){
        .n = g->class_off[c + 1] - off, .members = g->members + off, .ent = g->class_ent + off};
    pools[k++] = &g->class_pools[c];
  }
  for (k = 0; k < npools; k++) {
    pools[k]->nblocks = (pools[k]->n + ALIAS_BLOCK - 1) / ALIAS_BLOCK;
    njobs += pools[k]->nblocks;
  }
  ng_status st = NG_OK;
  block_job *jobs = ng__malloc((size_t)njobs * sizeof *jobs, "alias block list");
  double *bw = ng__malloc((size_t)njobs * sizeof *bw, "alias block weights");
  g->tops = ng__malloc((size_t)njobs * sizeof *g->tops, "top alias tables");
  double *wbuf = ng__malloc((size_t)g->nt * ALIAS_BLOCK * sizeof *wbuf, "alias build buffers");
  int32_t *ibuf = ng__malloc((size_t)g->nt * ALIAS_BLOCK * sizeof *ibuf, "alias build buffers");
  int32_t *topwork = ng__malloc((size_t)njobs * sizeof *topwork, "alias build buffers");
  if (!jobs || !bw || !g->tops || !wbuf || !ibuf || !topwork) {
    st = NG_ERR_NOMEM;
    goto cleanup;
  }
  int64_t j = 0;
  for (k = 0; k < npools; k++) {
    pools[k]->top = g->tops + j;
    for (int64_t b = 0; b < pools[k]->nblocks; b++)
      jobs[j++] = (block_job){pools[k], b};
  }
#pragma omp parallel for num_threads(g->nt) schedule(dynamic, 1)
  for (int64_t i = 0; i < njobs; i++) {
    const pool *p = jobs[i].p;
    double *w = wbuf + (size_t)omp_get_thread_num() * ALIAS_BLOCK;
    int32_t *work = ibuf + (size_t)omp_get_thread_num() * ALIAS_BLOCK;
    int64_t lo = jobs[i].block * ALIAS_BLOCK, len = NG_MIN((int64_t)ALIAS_BLOCK, p->n - lo);
    double s = 0.0;
    for (int64_t m = 0; m < len; m++) {
      w[m] = theta_raw(g, p->members ? p->members[lo + m] : lo + m);
      s += w[m];
    }
    bw[i] = s;
    alias_build(p->ent + lo, w, len, work);
  }
  /* Top tables over each pool's block weights; `bw` is in pool order, like the tops. */
#pragma omp parallel for num_threads(g->nt) schedule(dynamic, 1)
  for (k = 0; k < npools; k++) {
    pool *p = pools[k];
    if (p->nblocks > 0) {
      int64_t first = p->top - g->tops;
      alias_build(p->top, bw + first, p->nblocks, topwork + first);
    }
  }
cleanup:
  free(topwork);
  free(ibuf);
  free(wbuf);
  free(bw);
  free(jobs);
  free(pools);
  return st;
}

/* ---- rows ---- */

static inline uint64_t set_hash(int64_t key, uint64_t mask) {
  return (((uint64_t)key * 0x9e3779b97f4a7c15ULL) >> 32) & mask;
}

/* Adds `key` to the row `stamp`'s set; false when it is already there. */
static inline bool set_add(set_slot *set, uint64_t mask, int32_t stamp, int64_t key) {
  uint64_t h = set_hash(key, mask);
  while (set[h].stamp == stamp) {
    if (set[h].key == key)
      return false;
    h = (h + 1) & mask;
  }
  set[h].key = (int32_t)key;
  set[h].stamp = stamp;
  return true;
}

/* The first member of the pool, from a random start onwards, that is neither v nor already in
 * the row; -1 when the pool is exhausted. Only reached when weighted draws keep colliding. */
static int64_t pool_scan(int64_t n, const int32_t *members, ng_rng *r, set_slot *set, uint64_t mask,
                         int64_t v) {
  int64_t j = (int64_t)ng_rng_below(r, (uint64_t)n);
  for (int64_t k = 0; k < n; k++, j = j + 1 == n ? 0 : j + 1) {
    int64_t u = members ? members[j] : j;
    if (u != v && set_add(set, mask, (int32_t)v, u))
      return u;
  }
  return -1;
}

/* Sorts a row of distinct ids: quicksort (median-of-three pivot, the smaller part first, so the
 * stack stays logarithmic) down to short runs, then insertion sort. */
static void sort_row(int32_t *a, int64_t n) {
  while (n > INSERTION_SORT_MAX) {
    int64_t m = n / 2;
    int32_t x = a[0], y = a[m], z = a[n - 1], t;
    int64_t med = (x < y) == (y < z) ? m : ((y < x) == (x < z) ? 0 : n - 1);
    t = a[0];
    a[0] = a[med];
    a[med] = t;
    /* Hoare partition around a[0]: [0, j] <= pivot <= [j + 1, n), both parts non-empty. */
    int32_t pivot = a[0];
    int64_t i = -1, j = n;
    for (;;) {
      do
        i++;
      while (a[i] < pivot);
      do
        j--;
      while (a[j] > pivot);
      if (i >= j)
        break;
      t = a[i];
      a[i] = a[j];
      a[j] = t;
    }
    if (j + 1 < n - (j + 1)) {
      sort_row(a, j + 1);
      a += j + 1;
      n -= j + 1;
    } else {
      sort_row(a + j + 1, n - (j + 1));
      n = j + 1;
    }
  }
  for (int64_t i = 1; i < n; i++) {
    int32_t x = a[i];
    int64_t j = i;
    for (; j > 0 && a[j - 1] > x; j--)
      a[j] = a[j - 1];
    a[j] = x;
  }
}

/* Row v: each neighbour comes from v's class with probability `homophily`, else from all
 * nodes, weighted by the weights in both cases; no self loops and no duplicates. The first draw
 * of every neighbour is made in three sweeps that prefetch what the next sweep reads, so that
 * the cache misses of a row overlap instead of following one another. */
static void fill_row(const gen *g, int64_t v, set_slot *set, draw *dr) {
  int64_t beg = g->indptr[v], d = g->indptr[v + 1] - beg;
  if (d == 0)
    return;
  int32_t *dst = g->indices + beg;
  uint64_t cap = 16;
  while (cap < 2 * (uint64_t)d)
    cap *= 2;
  uint64_t mask = cap - 1;
  ng_rng r;
  ng_rng_seed(&r, ng_hash3(g->seed, STREAM_EDGES, (uint64_t)v));
  const pool *pools[2] = {&g->global, g->use_class ? &g->class_pools[g->group[v]] : &g->global};
  /* With links the communities are small: a row draws at most as many neighbours from its own
   * community as it has other members, the rest from all nodes, so that hub rows do not spend
   * their draws on a community they have exhausted. */
  const int64_t own_cap = g->links && g->use_global ? pools[1]->n - 1 : INT64_MAX;
  int64_t n_own = 0;
  for (int64_t i = 0; i < d; i++) {
    /* The source is chosen once per neighbour, so that redraws keep the homophily share. */
    uint32_t own = g->use_class && (!g->use_global || (ng_rng_next(&r) >> 32) < g->h_thresh);
    if (own && n_own >= own_cap)
      own = 0;
    n_own += own;
    const pool *p = pools[own];
    int64_t lo = alias_pick(p->top, (uint64_t)p->nblocks, ng_rng_next(&r)) * ALIAS_BLOCK;
    uint64_t len = (uint64_t)NG_MIN((int64_t)ALIAS_BLOCK, p->n - lo), x = ng_rng_next(&r);
    dr[i] = (draw){lo + (int64_t)(((x >> 32) * len) >> 32), (uint32_t)x, own};
    __builtin_prefetch(&p->ent[dr[i].pos]);
  }
  for (int64_t i = 0; i < d; i++) {
    const pool *p = pools[dr[i].own];
    alias_ent e = p->ent[dr[i].pos];
    if (dr[i].coin >= e.thresh)
      dr[i].pos = (dr[i].pos & ~(int64_t)(ALIAS_BLOCK - 1)) + e.alias;
    if (p->members)
      __builtin_prefetch(&p->members[dr[i].pos]);
  }
  int64_t redraw = 0;
  for (int64_t i = 0; i < d; i++) {
    const pool *p = pools[dr[i].own];
    int64_t u = p->members ? p->members[dr[i].pos] : dr[i].pos;
    if (u != v && set_add(set, mask, (int32_t)v, u))
      dst[i] = (int32_t)u;
    else /* remember the neighbour's position and pool in the draws already consumed */
      dr[redraw++] = (draw){.pos = i, .coin = 0, .own = dr[i].own};
  }
  /* Neighbours whose first draw was v or a duplicate: redraw from the same pool, then scan. */
  for (int64_t k = 0; k < redraw; k++) {
    int64_t i = dr[k].pos;
    const pool *p = pools[dr[k].own];
    int64_t u = -1;
    for (int t = 1; t < MAX_TRIES && u < 0; t++) {
      int64_t c = pool_draw(p, &r);
      if (c != v && set_add(set, mask, (int32_t)v, c))
        u = c;
    }
    if (u < 0)
      u = pool_scan(p->n, p->members, &r, set, mask, v);
    if (u < 0) /* the own class is exhausted: any node will do (rows are shorter than n) */
      u = pool_scan(g->n, NULL, &r, set, mask, v);
    dst[i] = (int32_t)u;
  }
  sort_row(dst, d);
}

static int64_t edge_chunk(gen *g, int64_t c, int tid) {
  int64_t v0 = c * EDGE_CHUNK_NODES, v1 = NG_MIN(g->n, v0 + EDGE_CHUNK_NODES);
  set_slot *set = g->sets + (size_t)tid * (size_t)g->set_cap;
  draw *dr = g->draws + (size_t)tid * (size_t)g->max_row;
  for (int64_t v = v0; v < v1; v++)
    fill_row(g, v, set, dr);
  return g->indptr[v1] - g->indptr[v0];
}

static ng_status make_edges(gen *g) {
  int64_t edges = g->indptr[g->n];
  int64_t cap = 16;
  while (cap < 2 * g->max_row)
    cap *= 2;
  g->set_cap = cap;
  g->sets = ng__malloc((size_t)g->nt * (size_t)cap * sizeof *g->sets, "duplicate filters");
  g->draws = ng__malloc((size_t)g->nt * (size_t)g->max_row * sizeof *g->draws, "draw buffers");
  if (!g->sets || !g->draws)
    return NG_ERR_NOMEM;
  for (int64_t i = 0; i < (int64_t)g->nt * cap; i++)
    g->sets[i] = (set_slot){-1, -1};
  int64_t nchunks = (g->n + EDGE_CHUNK_NODES - 1) / EDGE_CHUNK_NODES;
  NG_CHECK(par_chunks(g, "edges", nchunks, 0.0, (double)edges, edge_chunk));
  return ng__progress(&g->progress, "edges", (double)edges, (double)edges, true);
}

/* ---- features ---- */

static ng_status make_means(gen *g) {
  int64_t C = g->groups, D = g->feature_dim;
  zig_init(&g->zig);
  g->means = ng__malloc((size_t)C * (size_t)D * sizeof *g->means, "class mean features");
  if (!g->means)
    return NG_ERR_NOMEM;
  for (int64_t c = 0; c < C; c++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(g->seed, STREAM_MEANS, (uint64_t)c));
    float *mu = g->means + c * D;
    double norm2 = 0.0;
    for (int64_t k = 0; k < D; k++) {
      double z = zig_normal(&g->zig, &r);
      mu[k] = (float)z;
      norm2 += z * z;
    }
    double f = norm2 > 0.0 ? MEAN_NORM / sqrt(norm2) : 0.0;
    for (int64_t k = 0; k < D; k++)
      mu[k] = (float)(mu[k] * f);
  }
  return NG_OK;
}

static int64_t feature_chunk(gen *g, int64_t c, int tid) {
  (void)tid;
  int64_t D = g->feature_dim, v0 = c * FEATURE_CHUNK_NODES;
  int64_t v1 = NG_MIN(g->n, v0 + FEATURE_CHUNK_NODES);
  double noise = g->o->feature_noise;
  for (int64_t v = v0; v < v1; v++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(g->seed, STREAM_FEATURES, (uint64_t)v));
    const float *mu = g->means + (int64_t)g->group[v] * D;
    float *x = g->features + v * D;
    for (int64_t k = 0; k < D; k++)
      x[k] = (float)(mu[k] + noise * zig_normal(&g->zig, &r));
  }
  return v1 - v0;
}

/* ---- splits ---- */

/* Node v's split: its rank in a second random permutation against the split sizes (0 train,
 * 1 val, 2 test, 3 none). Exact sizes, uniformly random, computable per node in parallel. */
static inline int split_of(const gen *g, int64_t v) {
  int64_t r = perm_fwd(&g->split_perm, v);
  int s = 0;
  while (s < 3 && r >= g->split_end[s])
    s++;
  return s;
}

static int64_t split_count_chunk(gen *g, int64_t c, int tid) {
  (void)tid;
  int64_t v0 = c * CHUNK_NODES, v1 = NG_MIN(g->n, v0 + CHUNK_NODES), cnt[4] = {0, 0, 0, 0};
  for (int64_t v = v0; v < v1; v++)
    cnt[split_of(g, v)]++;
  for (int s = 0; s < 3; s++)
    g->chunk_stats[3 * c + s] = cnt[s];
  return v1 - v0;
}

static int64_t split_fill_chunk(gen *g, int64_t c, int tid) {
  (void)tid;
  int64_t v0 = c * CHUNK_NODES, v1 = NG_MIN(g->n, v0 + CHUNK_NODES), pos[3];
  for (int s = 0; s < 3; s++)
    pos[s] = g->chunk_stats[3 * c + s];
  for (int64_t v = v0; v < v1; v++) {
    int s = split_of(g, v);
    if (s < 3)
      g->split_ids[s][pos[s]++] = v;
  }
  return v1 - v0;
}

static ng_status make_splits(gen *g) {
  int64_t nchunks = (g->n + CHUNK_NODES - 1) / CHUNK_NODES, n2 = 2 * g->n;
  NG_CHECK(par_chunks(g, "splits", nchunks, 0.0, (double)n2, split_count_chunk));
  int64_t off[3] = {0, 0, 0};
  for (int64_t c = 0; c < nchunks; c++) {
    for (int s = 0; s < 3; s++) {
      int64_t k = g->chunk_stats[3 * c + s];
      g->chunk_stats[3 * c + s] = off[s];
      off[s] += k;
    }
  }
  for (int s = 0; s < 3; s++) {
    if (off[s] != g->split_size[s])
      return ng__err(NG_ERR_INTERNAL, "generator: split %d has %lld nodes instead of %lld", s,
                     (long long)off[s], (long long)g->split_size[s]);
  }
  NG_CHECK(par_chunks(g, "splits", nchunks, (double)g->n, (double)n2, split_fill_chunk));
  return ng__progress(&g->progress, "splits", (double)n2, (double)n2, true);
}

/* ---- options ---- */

static ng_status validate(const ng_generate_opts *o) {
  if (o->size != sizeof(ng_generate_opts))
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: size is %zu but this library expects %zu; initialise them "
                   "with NG_GENERATE_OPTS_INIT",
                   o->size, sizeof(ng_generate_opts));
  if (o->name && strlen(o->name) >= sizeof(((ng_dataset_info *)0)->name))
    return ng__err(NG_ERR_INVALID_ARG, "generate options: name \"%s\" is longer than %zu bytes",
                   o->name, sizeof(((ng_dataset_info *)0)->name) - 1);
  if (o->nodes < 2 || o->nodes >= NG_INDEX32_MAX_NODES)
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: nodes is %lld; it must be at least 2 and below 2^31",
                   (long long)o->nodes);
  if (!(o->avg_degree > 0.0) || !(o->avg_degree < (double)(o->nodes - 1)))
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: avg_degree is %g; it must be above 0 and below nodes - 1 "
                   "(%lld)",
                   o->avg_degree, (long long)(o->nodes - 1));
  if (!(o->exponent > 2.0) || !isfinite(o->exponent))
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: exponent is %g; it must be above 2 (finite mean degree), "
                   "e.g. 2.5",
                   o->exponent);
  if (!(o->homophily >= 0.0 && o->homophily <= 1.0))
    return ng__err(NG_ERR_INVALID_ARG, "generate options: homophily is %g; it must be in [0, 1]",
                   o->homophily);
  if (o->classes < 1)
    return ng__err(NG_ERR_INVALID_ARG, "generate options: classes is %d; it must be at least 1",
                   (int)o->classes);
  if (o->feature_dim < 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: feature_dim is %lld; it must be 0 (no features) or more",
                   (long long)o->feature_dim);
  if (!(o->feature_noise >= 0.0) || !isfinite(o->feature_noise))
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: feature_noise is %g; it must be finite and at least 0",
                   o->feature_noise);
  const double fr[3] = {o->train_frac, o->val_frac, o->test_frac};
  const char *const names[3] = {"train_frac", "val_frac", "test_frac"};
  for (int s = 0; s < 3; s++) {
    if (!(fr[s] >= 0.0 && fr[s] <= 1.0))
      return ng__err(NG_ERR_INVALID_ARG, "generate options: %s is %g; it must be in [0, 1]",
                     names[s], fr[s]);
  }
  /* A little slack, so that 0.7 + 0.2 + 0.1 (1.0000000000000002) is accepted. */
  if (fr[0] + fr[1] + fr[2] > 1.0 + 1e-9)
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: train_frac + val_frac + test_frac is %g; it must be at "
                   "most 1",
                   fr[0] + fr[1] + fr[2]);
  size_t bytes; /* the features array must be addressable */
  if (!ng__mul_ok((size_t)o->nodes, (size_t)o->feature_dim, &bytes) ||
      !ng__mul_ok(bytes, sizeof(float), &bytes) || bytes > (size_t)INT64_MAX)
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate options: %lld nodes x %lld features do not fit in memory",
                   (long long)o->nodes, (long long)o->feature_dim);
  return NG_OK;
}

/* The shortest %g form that reads back as the same double, so the source line is exact. */
static void fmt_double(char *buf, size_t cap, double x) {
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, x);
    if (strtod(buf, NULL) == x)
      return;
  }
}

static void describe(char *out, size_t cap, const ng_generate_opts *o, int64_t communities) {
  char d[6][32];
  const double vals[6] = {o->avg_degree,    o->exponent,   o->homophily,
                          o->feature_noise, o->train_frac, o->val_frac};
  for (int i = 0; i < 6; i++)
    fmt_double(d[i], sizeof d[i], vals[i]);
  char test[32];
  fmt_double(test, sizeof test, o->test_frac);
  snprintf(out, cap,
           "neargnn generator (model %d): nodes=%lld avg_degree=%s exponent=%s classes=%d "
           "homophily=%s feature_dim=%lld feature_noise=%s train_frac=%s val_frac=%s "
           "test_frac=%s seed=%llu",
           GEN_MODEL_VERSION, (long long)o->nodes, d[0], d[1], (int)o->classes, d[2],
           (long long)o->feature_dim, d[3], d[4], d[5], test, (unsigned long long)o->seed);
  size_t len = strlen(out);
  if (communities > 0 && len < cap)
    snprintf(out + len, cap - len, " links communities=%lld", (long long)communities);
}

/* ---- the public entry point ---- */

static void gen_free(gen *g) {
  if (g->links)
    ng__big_free(g->group, g->group_bytes);
  free(g->means);
  free(g->class_off);
  ng__big_free(g->members, g->members_bytes);
  ng__big_free(g->global_ent, g->ent_bytes);
  ng__big_free(g->class_ent, g->ent_bytes);
  free(g->tops);
  free(g->class_pools);
  free(g->chunk_stats);
  free(g->sets);
  free(g->draws);
}

/* Writes the dataset of validated options `o`; `communities` > 0 plants that many communities
 * (ng_dataset_generate_links), 0 groups the nodes by class. */
static ng_status generate(const char *dst_dir, const ng_generate_opts *o, int64_t communities) {
  gen g = {.o = o,
           .n = o->nodes,
           .nt = o->threads > 0 ? o->threads : omp_get_max_threads(),
           .seed = o->seed,
           .classes = o->classes,
           .groups = communities > 0 ? (int32_t)communities : o->classes,
           .links = communities > 0,
           .feature_dim = o->feature_dim};
  ng__progress_init(&g.progress, o->progress, o->progress_ctx);
  /* The group pools are needed when some neighbours come from the own group, the global pool
   * when some come from anywhere; with one group the two are the same. */
  g.use_class = g.groups > 1 && o->homophily > 0.0;
  g.use_global = !g.use_class || o->homophily < 1.0;
  g.h_thresh = (uint64_t)(o->homophily * 4294967296.0);
  perm_init(&g.class_perm, g.n, g.seed, STREAM_CLASS_PERM);
  perm_init(&g.split_perm, g.n, g.seed, STREAM_SPLIT_PERM);
  const double fr[3] = {o->train_frac, o->val_frac, o->test_frac};
  int64_t left = g.n;
  for (int s = 0; s < 3; s++) {
    g.split_size[s] = NG_MIN(left, (int64_t)llround(fr[s] * (double)g.n));
    left -= g.split_size[s];
    g.split_end[s] = g.n - left;
  }

  ng_dataset_writer w;
  ng_status st = ng__writer_begin(&w, dst_dir);
  if (st != NG_OK)
    return st;
  ng_npy *arr;
  int64_t shape[2] = {g.n + 1, 0};
  NG_CHECK_GOTO(st, ng__writer_array(&arr, &w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, shape), fail);
  g.indptr = arr->data;
  shape[0] = g.n;
  NG_CHECK_GOTO(st, ng__writer_array(&arr, &w, NG_ARR_LABELS, NG_DTYPE_I32, 1, shape), fail);
  g.labels = arr->data;

  NG_CHECK_GOTO(st, make_classes(&g), fail);
  NG_CHECK_GOTO(st, make_weights(&g), fail);
  NG_CHECK_GOTO(st, make_degrees(&g), fail);
  NG_CHECK_GOTO(st, make_pools(&g), fail);
  shape[0] = g.indptr[g.n];
  NG_CHECK_GOTO(st, ng__writer_array(&arr, &w, NG_ARR_INDICES, NG_DTYPE_I32, 1, shape), fail);
  g.indices = arr->data;
  NG_CHECK_GOTO(st, make_edges(&g), fail);

  if (g.feature_dim > 0) {
    NG_CHECK_GOTO(st, make_means(&g), fail);
    shape[0] = g.n;
    shape[1] = g.feature_dim;
    NG_CHECK_GOTO(st, ng__writer_array(&arr, &w, NG_ARR_FEATURES, NG_DTYPE_F32, 2, shape), fail);
    g.features = arr->data;
    int64_t nchunks = (g.n + FEATURE_CHUNK_NODES - 1) / FEATURE_CHUNK_NODES;
    NG_CHECK_GOTO(st, par_chunks(&g, "features", nchunks, 0.0, (double)g.n, feature_chunk), fail);
    NG_CHECK_GOTO(st, ng__progress(&g.progress, "features", (double)g.n, (double)g.n, true), fail);
  }

  const ng_array_id split_arr[3] = {NG_ARR_TRAIN, NG_ARR_VAL, NG_ARR_TEST};
  for (int s = 0; s < 3; s++) {
    if (g.split_size[s] == 0)
      continue;
    shape[0] = g.split_size[s];
    NG_CHECK_GOTO(st, ng__writer_array(&arr, &w, split_arr[s], NG_DTYPE_I64, 1, shape), fail);
    g.split_ids[s] = arr->data;
  }
  NG_CHECK_GOTO(st, make_splits(&g), fail);

  ng_dataset_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.info.size = sizeof meta.info;
  ng__strlcpy(meta.info.name, o->name ? o->name : "generated", sizeof meta.info.name);
  meta.info.nodes = g.n;
  meta.info.edges = g.indptr[g.n];
  meta.info.feature_dim = g.feature_dim;
  meta.info.classes = g.classes;
  meta.info.undirected = 0;
  meta.info.index_bytes = 4;
  meta.info.train = g.split_size[0];
  meta.info.val = g.split_size[1];
  meta.info.test = g.split_size[2];
  describe(meta.source, sizeof meta.source, o, communities);
  gen_free(&g);
  return ng__writer_commit(&w, &meta);

fail:
  gen_free(&g);
  ng__writer_abort(&w);
  return st;
}

ng_status ng_dataset_generate(const char *dst_dir, const ng_generate_opts *opts) {
  const ng_generate_opts defaults = NG_GENERATE_OPTS_INIT;
  const ng_generate_opts *o = opts ? opts : &defaults;
  NG_CHECK(validate(o));
  return generate(dst_dir, o, 0);
}

/* Communities of about this many nodes when the caller leaves the count to the generator: large
 * enough that a typical row (tens of entries) fits in its own community, small enough that a
 * community is a sharp signal of which pairs are edges. */
#define LINK_COMMUNITY_NODES 256

ng_status ng_dataset_generate_links(const char *dst_dir, const ng_generate_opts *opts,
                                    const ng_generate_links_opts *links) {
  const ng_generate_opts defaults = NG_GENERATE_OPTS_INIT;
  const ng_generate_opts *o = opts ? opts : &defaults;
  const ng_generate_links_opts ldefaults = NG_GENERATE_LINKS_OPTS_INIT;
  const ng_generate_links_opts *l = links ? links : &ldefaults;
  NG_CHECK(validate(o));
  if (l->size != sizeof(ng_generate_links_opts))
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate links options: size is %zu but this library expects %zu; initialise "
                   "them with NG_GENERATE_LINKS_OPTS_INIT",
                   l->size, sizeof(ng_generate_links_opts));
  if (l->communities < 0 || l->communities > o->nodes)
    return ng__err(NG_ERR_INVALID_ARG,
                   "generate links options: communities is %lld; it must be 0 (one per %d nodes) "
                   "or in [1, nodes] ([1, %lld])",
                   (long long)l->communities, LINK_COMMUNITY_NODES, (long long)o->nodes);
  int64_t k = l->communities;
  if (k == 0) {
    k = (o->nodes + LINK_COMMUNITY_NODES / 2) / LINK_COMMUNITY_NODES;
    if (k < o->classes)
      k = o->classes;
  }
  return generate(dst_dir, o, NG_MIN(k, o->nodes));
}
