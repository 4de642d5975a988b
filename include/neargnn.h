/// neargnn — sampled graph neural networks on graphs whose features do not fit in GPU memory.
///
/// This header is the whole public C API. It is C11, includes no CUDA header and exposes no
/// struct body of a handle. Conventions (docs/api.md shows them in use):
///  - every call that can fail returns an ng_status and writes its results through out-params,
///    output first; the detail of a failure is in ng_last_error() (thread-local);
///  - every create/open has a destroy/close that accepts NULL;
///  - option structs start with `size_t size` and have an initializer macro, so fields can be
///    added without breaking callers;
///  - pointer parameters are borrowed unless their comment says otherwise.
#ifndef NEARGNN_H
#define NEARGNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NG_VERSION_MAJOR 0
#define NG_VERSION_MINOR 1
#define NG_VERSION_PATCH 0

/// The library's version as "MAJOR.MINOR.PATCH".
const char *ng_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Status codes and errors                                                                     */
/* ------------------------------------------------------------------------------------------ */

/// The one table of status codes: X(name, description). It generates the enum, ng_status_name()
/// and ng_status_str(). New codes are appended, never renumbered.
#define NG_STATUS_MAP(X)                                                                           \
  X(OK, "success")                                                                                 \
  X(ERR_INVALID_ARG, "invalid argument")                                                           \
  X(ERR_IO, "input/output error")                                                                  \
  X(ERR_FORMAT, "malformed or inconsistent input file")                                            \
  X(ERR_NOMEM, "out of memory")                                                                    \
  X(ERR_UNSUPPORTED, "not supported by this build or this input")                                  \
  X(ERR_EXISTS, "destination already exists")                                                      \
  X(ERR_NOT_FOUND, "not found")                                                                    \
  X(ERR_STATE, "operation not valid in the object's current state")                                \
  X(ERR_INTERRUPTED, "interrupted")                                                                \
  X(ERR_CUDA, "CUDA error")                                                                        \
  X(ERR_CUBLAS, "cuBLAS error")                                                                    \
  X(ERR_DNNL, "oneDNN error")                                                                      \
  X(ERR_INTERNAL, "internal error (a bug in neargnn: please report it)")                           \
  X(ERR_NONFINITE, "non-finite result (NaN or infinity)")

typedef enum {
#define NG_STATUS_ENUM_(name, desc) NG_##name,
  NG_STATUS_MAP(NG_STATUS_ENUM_)
#undef NG_STATUS_ENUM_
      NG_STATUS_COUNT_
} ng_status;

/// The enum name of a status without the prefix ("ERR_IO"); "UNKNOWN" for values not in the table.
const char *ng_status_name(ng_status status);
/// A one-line English description of a status ("input/output error").
const char *ng_status_str(ng_status status);
/// The detail of the last failure on the calling thread: what failed, where, and how to fix it.
/// Empty string when nothing failed yet. The pointer stays valid until the next failing call on
/// this thread.
const char *ng_last_error(void);

/// Whether this build has the CUDA backend (1) or not (0).
int ng_has_cuda(void);
/// 1 if this build can run ranks under mpirun (CMake found MPI; docs/distributed.md), else 0.
/// The built-in launcher (`neargnn train --ranks N`) needs no MPI.
int ng_has_mpi(void);
/// The CUDA devices the CUDA backend sees: their number into *count and a one-line description
/// into desc[cap] (names, memory). NG_ERR_UNSUPPORTED in a build without the CUDA backend.
ng_status ng_cuda_devices(int *count, char *desc, size_t cap);

/* ------------------------------------------------------------------------------------------ */
/* Progress reporting                                                                          */
/* ------------------------------------------------------------------------------------------ */

/// Called by long operations (generation, conversion, training) from the calling thread, at most
/// a few times per second. `phase` names the current step ("edges", "features"); `done` and
/// `total` are in the phase's own unit (total 0 when unknown). Returning non-zero asks the
/// operation to stop: it then returns NG_ERR_INTERRUPTED and leaves nothing half-written.
typedef int (*ng_progress_fn)(void *ctx, const char *phase, double done, double total);

/* ------------------------------------------------------------------------------------------ */
/* Datasets                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/// A dataset on disk: a folder with dataset.json and NumPy arrays (see docs/dataset-format.md).
typedef struct ng_dataset *ng_dataset_t;

typedef struct {
  size_t size;        ///< sizeof(ng_open_opts)
  int check_features; ///< also scan every feature value and reject NaN/Inf (reads all features)
  int populate;       ///< pre-fault the mappings (MAP_POPULATE) instead of reading lazily
} ng_open_opts;
#define NG_OPEN_OPTS_INIT                                                                          \
  { sizeof(ng_open_opts), 0, 0 }
/// NG_OPEN_OPTS_INIT into *out, for bindings that cannot expand the macro (python/neargnn).
void ng_open_opts_init(ng_open_opts *out);

/// Counts of an open dataset.
typedef struct {
  size_t size;              ///< sizeof(ng_dataset_info), set by the caller
  char name[64];            ///< dataset.json "name", NUL-terminated (truncated if longer)
  int64_t nodes;            ///< number of nodes
  int64_t edges;            ///< number of stored (directed) adjacency entries, i.e. indices' length
  int64_t feature_dim;      ///< columns of features; 0 when the dataset has no features
  int32_t classes;          ///< number of classes; 0 when the dataset has no labels
  int32_t undirected;       ///< 1 when every edge is stored in both directions
  int32_t index_bytes;      ///< 4 (int32 indices) or 8 (int64 indices)
  int64_t train, val, test; ///< sizes of the three splits (0 when absent)
  int32_t orig_ids;         ///< 1 when orig_id.npy maps node ids back to the source's ids
} ng_dataset_info;
#define NG_DATASET_INFO_INIT                                                                       \
  { sizeof(ng_dataset_info), {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/// Opens the dataset in folder `dir`: memory-maps its arrays (no copy) and validates everything
/// the library relies on (file formats, shapes against dataset.json, CSR structure, id ranges,
/// disjoint splits, label range). On failure *out is NULL and ng_last_error() names the file and
/// the fix. `opts` may be NULL for defaults.
ng_status ng_dataset_open(ng_dataset_t *out, const char *dir, const ng_open_opts *opts);
/// Unmaps and frees a dataset; NULL is accepted.
void ng_dataset_close(ng_dataset_t ds);
/// Fills `out` (whose `size` the caller set, see NG_DATASET_INFO_INIT) with the dataset's counts.
ng_status ng_dataset_info_get(ng_dataset_info *out, ng_dataset_t ds);
/// The id each node had in the dataset this one was renumbered from (orig_id.npy, [nodes],
/// borrowed, valid while `ds` is open), or NULL in *out when the dataset has no mapping (its ids
/// are the original ones). User-visible node ids (predictions) go through it.
ng_status ng_dataset_orig_ids(const int64_t **out, ng_dataset_t ds);

/// Degree distribution summary of an open dataset (row lengths of the CSR, i.e. how many
/// neighbours each node aggregates from, and in-degrees, how often each node is a neighbour).
typedef struct {
  size_t size;              ///< sizeof(ng_degree_stats), set by the caller
  int64_t min, max;         ///< row length (neighbours per node)
  double mean;              ///< mean row length
  int64_t p50, p90, p99;    ///< row length percentiles
  int64_t isolated;         ///< nodes with no neighbours
  int64_t self_loops;       ///< entries (v, v)
  int64_t in_max;           ///< largest in-degree
  double in_top1pct_share;  ///< share of all entries pointing to the 1% most-referenced nodes
  double powerlaw_exponent; ///< maximum-likelihood exponent of the row lengths >= xmin
  int64_t powerlaw_xmin;    ///< the xmin used for the fit
} ng_degree_stats;
#define NG_DEGREE_STATS_INIT                                                                       \
  { sizeof(ng_degree_stats), 0, 0, 0.0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0 }

/// Computes the degree distribution summary (reads the whole CSR once; OpenMP parallel).
ng_status ng_dataset_degree_stats(ng_degree_stats *out, ng_dataset_t ds);

/// Element types of the integer arrays given to ng_dataset_from_arrays().
typedef enum { NG_INT32 = 0, NG_INT64 = 1 } ng_int_type;

/// Caller-owned arrays that make a dataset without a folder (ng_dataset_from_arrays). The graph
/// is either a CSR (`indptr` set) or an edge list (`edge_src`/`edge_dst` set). Arrays marked
/// borrowed are read in place, never copied: the caller keeps them alive and unchanged until
/// ng_dataset_close. Arrays in another type than the one the library reads are converted into
/// a copy the dataset owns (noted per field).
typedef struct {
  size_t size;      ///< sizeof(ng_dataset_arrays)
  const char *name; ///< the dataset's name (copied, truncated to 63 bytes); NULL gives "arrays"
  int64_t nodes;    ///< number of nodes (> 0)
  /* The graph as CSR: row v = indices[indptr[v] : indptr[v + 1]], the nodes v aggregates from. */
  const void *indptr;      ///< [nodes + 1]; borrowed when NG_INT64, converted (copied) if NG_INT32
  ng_int_type indptr_type; ///< element type of indptr
  const void *indices;     ///< [indptr[nodes]] node ids; borrowed (either type)
  ng_int_type index_type;  ///< element type of indices (and of the edge list)
  /* ... or as an edge list: edge e carries messages from edge_src[e] to edge_dst[e] (PyG's
   * edge_index[0] and [1]). The library builds the CSR (row = destination, neighbours in the
   * order of the list, duplicates and self loops kept) into memory the dataset owns; the lists
   * themselves are only read during the call. */
  const void *edge_src;   ///< [edges] source ids, of index_type
  const void *edge_dst;   ///< [edges] destination ids, of index_type
  int64_t edges;          ///< number of edges in the list (ignored for a CSR)
  int32_t undirected;     ///< edge list: add every edge in both directions; CSR: records the flag
  const float *features;  ///< [nodes, feature_dim] row-major float32; borrowed; NULL: none
  int64_t feature_dim;    ///< columns of features (0 when features is NULL)
  const void *labels;     ///< [nodes], -1 = unlabelled; borrowed if NG_INT32, copied if NG_INT64
  ng_int_type label_type; ///< element type of labels
  int32_t classes;        ///< number of classes; 0: the largest label + 1
  const void *split[3];   ///< train, val and test node ids (NULL: empty split)
  int64_t split_size[3];  ///< their lengths
  ng_int_type split_type; ///< element type of the split ids: borrowed if NG_INT64, else copied
  int32_t check_features; ///< scan every feature value for NaN/Inf (else a sample of rows)
} ng_dataset_arrays;
#define NG_DATASET_ARRAYS_INIT                                                                     \
  {                                                                                                \
    sizeof(ng_dataset_arrays), NULL, 0, NULL, NG_INT64, NULL, NG_INT64, NULL, NULL, 0, 0, NULL, 0, \
        NULL, NG_INT32, 0, {NULL, NULL, NULL}, {0, 0, 0}, NG_INT64, 0                              \
  }

/// Makes a dataset from caller-owned arrays without copying them (see ng_dataset_arrays for the
/// exceptions), validated as ng_dataset_open validates a folder: CSR structure and id ranges,
/// label range, disjoint and labelled splits, finite features (messages name the array). `a` is
/// borrowed for the call; the arrays it points to, as its comments say. Close with
/// ng_dataset_close. On failure *out is NULL.
ng_status ng_dataset_from_arrays(ng_dataset_t *out, const ng_dataset_arrays *a);
/// The feature table a dataset reads: its mapping of features.npy, or the caller's array of
/// ng_dataset_from_arrays (the same pointer). Borrowed, valid while `ds` is open; NULL in *out
/// when the dataset has no features.
ng_status ng_dataset_features(const float **out, ng_dataset_t ds);
/// The node ids of split `split` (0 train, 1 val, 2 test, as ng_split) into *ids (borrowed, valid
/// while `ds` is open; NULL when the split is empty) and their number into *n.
ng_status ng_dataset_split(const int64_t **ids, int64_t *n, ng_dataset_t ds, int split);

/// Options of ng_dataset_generate(): a degree-corrected power-law graph whose node classes
/// correlate with both its edges (homophily) and its features, so a GNN can learn it and a
/// power-law hot set exists.
typedef struct {
  size_t size;          ///< sizeof(ng_generate_opts)
  const char *name;     ///< dataset.json "name" (copied); NULL gives "generated"
  int64_t nodes;        ///< number of nodes (>= 2)
  double avg_degree;    ///< mean number of neighbours per node (> 0)
  double exponent;      ///< power-law exponent of the degree distribution (> 2)
  int32_t classes;      ///< number of classes (>= 1)
  double homophily;     ///< probability that an edge stays within its class [0, 1]
  int64_t feature_dim;  ///< feature columns (0: no features)
  double feature_noise; ///< standard deviation of the noise around each class's mean feature
  double train_frac;    ///< share of nodes in the training split
  double val_frac;      ///< share of nodes in the validation split (the rest: test, up to 1.0)
  double test_frac;     ///< share of nodes in the test split
  uint64_t seed;        ///< the output depends only on the options and this seed, never on threads
  int threads;          ///< OpenMP threads (0: the OpenMP default)
  ng_progress_fn progress; ///< optional progress callback
  void *progress_ctx;      ///< passed to `progress`
} ng_generate_opts;
#define NG_GENERATE_OPTS_INIT                                                                      \
  {                                                                                                \
    sizeof(ng_generate_opts), NULL, 100000, 16.0, 2.5, 16, 0.8, 128, 1.0, 0.1, 0.1, 0.2, 1, 0,     \
        NULL, NULL                                                                                 \
  }

/// Generates a dataset into folder `dst_dir`, which must not exist. Written atomically: into a
/// temporary folder beside it, renamed into place when complete.
ng_status ng_dataset_generate(const char *dst_dir, const ng_generate_opts *opts);

/// Input formats of ng_dataset_convert().
typedef enum {
  NG_FORMAT_PLANETOID = 0, ///< edges.txt, features.npy, labels.npy, train/val/test.txt
  NG_FORMAT_SNAP = 1,      ///< a whitespace-separated edge list with '#' comments
  NG_FORMAT_OGB = 2,       ///< an OGB node-property folder (raw/*.csv.gz, split/<scheme>/)
} ng_format;

/// Features given to a dataset whose source has none (SNAP edge lists).
typedef enum {
  NG_FEATURES_NONE = 0,   ///< no features array
  NG_FEATURES_RANDOM = 1, ///< standard normal values from the seed
} ng_feature_fill;

typedef struct {
  size_t size;              ///< sizeof(ng_convert_opts)
  ng_format format;         ///< input format
  const char *name;         ///< dataset.json "name" (copied); NULL: the source folder's base name
  int undirected;           ///< SNAP/OGB: store every edge in both directions (planetoid always is)
  ng_feature_fill features; ///< SNAP: features to make up
  int64_t feature_dim;      ///< SNAP with NG_FEATURES_RANDOM: columns
  int32_t classes;          ///< SNAP: random labels in [0, classes) when > 0 (with random splits)
  double train_frac, val_frac, test_frac; ///< SNAP with classes > 0: random split shares
  const char *split;       ///< OGB: split scheme folder under split/; NULL picks the only one
  uint64_t seed;           ///< seed of anything made up
  ng_progress_fn progress; ///< optional progress callback
  void *progress_ctx;      ///< passed to `progress`
} ng_convert_opts;
#define NG_CONVERT_OPTS_INIT                                                                       \
  {                                                                                                \
    sizeof(ng_convert_opts), NG_FORMAT_PLANETOID, NULL, 0, NG_FEATURES_NONE, 0, 0, 0.1, 0.1, 0.2,  \
        NULL, 1, NULL, NULL                                                                        \
  }
/// NG_CONVERT_OPTS_INIT into *out, for bindings that cannot expand the macro (python/neargnn).
void ng_convert_opts_init(ng_convert_opts *out);

/// Converts the dataset at `src` (a folder, or for SNAP a file) into folder `dst_dir`, which
/// must not exist. Streams the input with memory bounded by the output's size, removes self
/// loops and duplicate edges, and writes atomically (temporary folder, then rename).
ng_status ng_dataset_convert(const char *dst_dir, const char *src, const ng_convert_opts *opts);

/* ------------------------------------------------------------------------------------------ */
/* Aggregators and models                                                                      */
/* ------------------------------------------------------------------------------------------ */

/// How neighbour rows are reduced. Every reduction is associative and commutative, so partial
/// states over disjoint neighbour sets merge (the basis of near-data partial aggregation).
typedef enum { NG_REDUCE_SUM = 0, NG_REDUCE_MAX = 1, NG_REDUCE_MIN = 2 } ng_reduce;
/// Per-edge weights applied before the reduction.
typedef enum {
  NG_EDGE_WEIGHT_NONE = 0,
  NG_EDGE_WEIGHT_GCN_NORM = 1, ///< 1 / sqrt((deg(dst) + 1) (deg(src) + 1)), degrees of the graph
} ng_edge_weight;
/// What turns a merged state into the aggregated row.
typedef enum {
  NG_FINALIZE_NONE = 0,
  NG_FINALIZE_MEAN = 1, ///< divide by the number of neighbours (0 neighbours give 0)
} ng_finalize;

/// A per-hop aggregator: reduce, edge weight, finalize, and whether the node itself counts as
/// a neighbour with weight 1 / (deg + 1) (GCN's A + I). The built-ins below cover sum, mean, max,
/// min and GCN.
typedef struct {
  ng_reduce reduce;
  ng_edge_weight edge_weight;
  ng_finalize finalize;
  int32_t self_loop;
  /// A user-defined aggregator (ng_aggregator_define), borrowed: it must outlive every model
  /// that uses it. NULL for the built-ins; when set, reduce and finalize are ignored.
  const struct ng_aggregator_def *user;
} ng_aggregator;

#define NG_AGGREGATOR_SUM                                                                          \
  ((ng_aggregator){NG_REDUCE_SUM, NG_EDGE_WEIGHT_NONE, NG_FINALIZE_NONE, 0, NULL})
#define NG_AGGREGATOR_MEAN                                                                         \
  ((ng_aggregator){NG_REDUCE_SUM, NG_EDGE_WEIGHT_NONE, NG_FINALIZE_MEAN, 0, NULL})
#define NG_AGGREGATOR_MAX                                                                          \
  ((ng_aggregator){NG_REDUCE_MAX, NG_EDGE_WEIGHT_NONE, NG_FINALIZE_NONE, 0, NULL})
#define NG_AGGREGATOR_MIN                                                                          \
  ((ng_aggregator){NG_REDUCE_MIN, NG_EDGE_WEIGHT_NONE, NG_FINALIZE_NONE, 0, NULL})
#define NG_AGGREGATOR_GCN                                                                          \
  ((ng_aggregator){NG_REDUCE_SUM, NG_EDGE_WEIGHT_GCN_NORM, NG_FINALIZE_NONE, 1, NULL})

/* ---- user-defined aggregators (docs/aggregators.md) ---- */

/// The most state floats per feature a user aggregator may keep.
#define NG_AGG_STATE_MAX 8

/// The qualifier of the functions inside NG_AGGREGATOR_SOURCE: `static inline` in host code;
/// the CUDA backend compiles the same text with it defined as `__device__ __forceinline__`.
#ifndef NG_AGG_FN
#define NG_AGG_FN static inline
#endif

/// Defines an aggregator's functions once, for the CPU and the GPU. The arguments after `name`
/// are plain C over float (no preprocessor lines, no globals, no calls but to each other and
/// to <math.h>'s float functions such as expf, logf, powf, fabsf, sqrtf, fmaxf, fminf) that
/// define, each with the qualifier NG_AGG_FN, the functions
///
///     void  agg_init(float *s);                                  // a fresh state s[0..S)
///     void  agg_accumulate(float *s, float x, float w);          // one neighbour value x,
///                                                                // edge weight w (1 unweighted)
///     void  agg_merge(float *s, const float *t);                 // s = s (+) t: associative
///                                                                // and commutative
///     float agg_finalize(const float *s, float degree);          // the output (degree = the
///                                                                // neighbours; may be 0)
///     float agg_grad(const float *s, float degree, float x, float w, float y); // d y / d x of
///                                                                // one neighbour, y = finalize
///
/// (agg_grad only for an aggregator not declared linear). The macro expands to those
/// functions, compiled here; to `static const char name[]`, their source text, which the CUDA
/// backend compiles at run time with NVRTC into its gather-aggregate kernels; and to
/// `name_accumulate_row`, agg_accumulate over one neighbour row (ng_aggregator_def's
/// accumulate_row: the CPU backend's loop, inlined and vectorised in the defining unit).
/// NG_AGGREGATOR_FUNCTIONS(name) fills a definition's function fields from them. One
/// aggregator per translation unit (the names are fixed), unless the names are renamed with
/// `#define agg_init my_init` ... around it (the text handed to NVRTC keeps the fixed names).
#define NG_AGGREGATOR_SOURCE(name, ...)                                                            \
  __VA_ARGS__                                                                                      \
  static const char name[] = #__VA_ARGS__;                                                         \
  NG_AGG_ROW_FN void name##_accumulate_row(float *s, int32_t state_size, const float *x, float w,  \
                                           int64_t n) {                                            \
    if (state_size == 1) {                                                                         \
      for (int64_t c = 0; c < n; c++)                                                              \
        agg_accumulate(s + c, x[c], w);                                                            \
    } else {                                                                                       \
      for (int64_t c = 0; c < n; c++)                                                              \
        agg_accumulate(s + c * state_size, x[c], w);                                               \
    }                                                                                              \
  }

/// The qualifier of the row function NG_AGGREGATOR_SOURCE defines (host code).
#ifndef NG_AGG_ROW_FN
#define NG_AGG_ROW_FN static inline
#endif

/// The function fields of an ng_aggregator_def, from NG_AGGREGATOR_SOURCE(name, ...) in the same
/// unit: `{.size = sizeof(ng_aggregator_def), .name = "x", .state_size = 1, .grad = agg_grad,
/// NG_AGGREGATOR_FUNCTIONS(x_source)}`.
#define NG_AGGREGATOR_FUNCTIONS(name)                                                              \
  .init = agg_init, .accumulate = agg_accumulate, .merge = agg_merge, .finalize = agg_finalize,    \
  .source = name, .accumulate_row = name##_accumulate_row

/// A user aggregator: per feature c of a destination, y = finalize(accumulate(... init, x_1,
/// w_1) ..., x_n, w_n), degree n) over its neighbours' values x_j = h_j[c] in edge order. All
/// pointers are borrowed and must outlive the models that use the aggregator.
typedef struct ng_aggregator_def {
  size_t size;        ///< sizeof(ng_aggregator_def)
  const char *name;   ///< shown by ng_aggregator_name and recorded in checkpoints
  int32_t state_size; ///< S, floats of state per feature, 1 .. NG_AGG_STATE_MAX
  /// 1: y is linear in the neighbour values (y = sum_j a(w_j, degree) x_j), so its gradient
  /// is derived from accumulate and finalize and `grad` may be NULL; 0: `grad` is required.
  int32_t linear;
  void (*init)(float *s);
  void (*accumulate)(float *s, float x, float w);
  void (*merge)(float *s, const float *t);
  float (*finalize)(const float *s, float degree);
  float (*grad)(const float *s, float degree, float x, float w, float y);
  /// The same functions as CUDA C source (the `name` of NG_AGGREGATOR_SOURCE), or NULL for an
  /// aggregator that runs on the CPU only (the CUDA backend then refuses it).
  const char *source;
  /// Optional (NULL: accumulate per feature): accumulate(s + c S, x[c], w) for c < n in one
  /// call, which NG_AGGREGATOR_SOURCE defines as `name_accumulate_row`; it must give the same
  /// states bit for bit (checked).
  void (*accumulate_row)(float *s, int32_t state_size, const float *x, float w, int64_t n);
} ng_aggregator_def;

/// Makes *out a SAGE layer aggregator that runs `def` (borrowed): unweighted, no self loop
/// (out->edge_weight may be set to NG_EDGE_WEIGHT_GCN_NORM afterwards). Checks the definition:
/// every function given, the state size, that the source defines the five (four when linear)
/// fixed names, and on generated values that merging the states of two halves of a neighbour
/// list finalizes like one state over the whole list, that a linear aggregator is linear, and
/// that `grad` agrees with a finite difference of finalize (relative tolerance 1e-2).
/// NG_ERR_INVALID_ARG naming the failed check.
ng_status ng_aggregator_define(ng_aggregator *out, const ng_aggregator_def *def);

/// Activation after a layer.
typedef enum { NG_ACT_NONE = 0, NG_ACT_RELU = 1 } ng_activation;

/// Model families. A model is described per hop (layer); every family runs on every backend
/// (docs/aggregators.md).
typedef enum {
  NG_MODEL_SAGE = 0, ///< GraphSAGE: separate weights for the node itself and its aggregated
                     ///< neighbours (Hamilton et al. 2017)
  NG_MODEL_GCN = 1,  ///< GCN: one weight over the normalised aggregation (Kipf & Welling 2017)
  /// GAT: multi-head attention over each node's neighbours and itself (Velickovic et al. 2018),
  /// LeakyReLU(0.2) scores and a softmax per destination; `heads` per layer, heads
  /// concatenated (combine NG_HEADS_CONCAT, hidden layers) or averaged (NG_HEADS_MEAN, the
  /// output layer). The aggregator field is ignored. Its layers need the raw rows of every
  /// neighbour (the attention needs the layer's weights), so cold rows are transferred or read
  /// by zero-copy, never partially aggregated: mode PARTIAL is refused, HYBRID runs TRANSFER.
  NG_MODEL_GAT = 2,
  /// GIN (Xu et al. 2019, GIN-0): MLP(h + sum of the neighbours), the MLP two linear layers with
  /// a ReLU between (hidden width out_dim), then the layer's activation. The aggregation is a
  /// plain sum (the aggregator field is ignored), so cold neighbours are partially aggregated
  /// near the data as for GraphSAGE.
  NG_MODEL_GIN = 3,
  /// GraphSAGE with max-pooling (Hamilton et al. 2017): agg = max over neighbours of
  /// ReLU(h_j W_pool + b_pool) (W_pool [in, in]), then h W_self + agg W_neigh + b. Like GAT it
  /// needs its neighbours' raw rows (the pool's weights come before the max): cold rows are
  /// transferred or read by zero-copy, never partially aggregated.
  NG_MODEL_SAGE_POOL = 4,
} ng_model_kind;

/// How a GraphSAGE layer combines the node and its neighbours.
typedef enum {
  NG_SAGE_SUM = 0,     ///< h W_self + agg W_neigh + b  (as PyG's SAGEConv and DGL's SAGEConv)
  NG_SAGE_CONCAT = 1,  ///< [h W_self || agg W_neigh] + b, each half out_dim / 2 columns
  NG_HEADS_MEAN = 0,   ///< GAT: the heads' outputs averaged (out_dim columns a head)
  NG_HEADS_CONCAT = 1, ///< GAT: the heads' outputs side by side (out_dim / heads columns a head)
} ng_sage_combine;

/// One layer (hop) of a model. Layers are added from the input towards the output; the last
/// layer's out_dim is the number of classes.
typedef struct {
  size_t size; ///< sizeof(ng_layer_opts)
  /// Neighbours sampled per node for this layer's hop in training (-1 = all). Layers go from
  /// the input, so the last layer samples the targets' own neighbours: `neargnn train
  /// --fanouts 25,10` (hops from the targets outwards, as PyG's num_neighbors) is the last
  /// layer with 25 and the input layer with 10.
  int32_t fanout;
  ng_aggregator aggregator; ///< e.g. NG_AGGREGATOR_MEAN; GCN layers use NG_AGGREGATOR_GCN
  int64_t out_dim;          ///< output columns
  ng_activation activation; ///< applied after the layer (usually RELU except on the last layer)
  float dropout;            ///< dropout probability on this layer's input in training
  float weight_decay;       ///< L2 coefficient for this layer's parameters
  ng_sage_combine combine;  ///< GraphSAGE: how self and neighbours combine; GAT: the heads
  int32_t bias;             ///< add a bias vector (1) or not (0)
  int32_t heads;            ///< GAT: attention heads (>= 1); ignored by the other kinds
  float attn_dropout;       ///< GAT: dropout probability on the attention coefficients
} ng_layer_opts;
#define NG_LAYER_OPTS_INIT                                                                         \
  {                                                                                                \
    sizeof(ng_layer_opts), 10, NG_AGGREGATOR_MEAN, 16, NG_ACT_RELU, 0.0f, 0.0f, NG_SAGE_SUM, 1, 1, \
        0.0f                                                                                       \
  }
/// NG_LAYER_OPTS_INIT into *out, for bindings that cannot expand the macro (python/neargnn).
void ng_layer_opts_init(ng_layer_opts *out);

typedef struct ng_model *ng_model_t;

/// Creates an empty model of `kind` whose input has `in_dim` feature columns.
ng_status ng_model_create(ng_model_t *out, ng_model_kind kind, int64_t in_dim);
/// Appends a layer (copied). The first layer reads the features; each next layer reads the
/// previous layer's output. At most 8 layers.
ng_status ng_model_add_layer(ng_model_t model, const ng_layer_opts *layer);
/// Number of layers and trainable parameters.
ng_status ng_model_shape(int32_t *layers, int64_t *params, ng_model_t model);
/// Destroys a model; NULL is accepted. A model used by a trainer must outlive it.
void ng_model_destroy(ng_model_t model);
/// The kind and input columns of a model; either pointer may be NULL.
ng_status ng_model_kind_get(ng_model_kind *kind, int64_t *in_dim, ng_model_t model);
/// The options of layer `layer` (0 = the input layer) of `model` into *out; out->size must be
/// set (NG_LAYER_OPTS_INIT).
ng_status ng_model_layer_get(ng_layer_opts *out, ng_model_t model, int32_t layer);
/// Builds the model a checkpoint was trained with (kind, input columns, every layer's options),
/// from the settings ng_trainer_save records in it, after the checks ng_trainer_load makes of
/// the file (a damaged or edited one is refused). NG_ERR_FORMAT for checkpoints written before
/// neargnn recorded them (the message says how to re-save one).
ng_status ng_model_from_checkpoint(ng_model_t *out, const char *path);
/// A built-in aggregator's name ("mean", "sum", "max", "min", "gcn"), a user aggregator's
/// name (ng_aggregator_def.name), or "custom".
const char *ng_aggregator_name(ng_aggregator aggregator);
/// The built-in aggregator `name` ("mean", "sum", "max", "min", "gcn") into *out;
/// NG_ERR_INVALID_ARG for another name (the message lists them).
ng_status ng_aggregator_parse(ng_aggregator *out, const char *name);
/// The name of built-in aggregator number `index` (0, 1, ...: "mean", "sum", "max", "min",
/// "gcn"), or NULL past the last: the list ng_aggregator_parse reads.
const char *ng_aggregator_builtin_name(int32_t index);
/// The name of a model family ("sage", "gcn", "gat", "gin", "sage-pool"; "?" when unknown), as
/// checkpoints record it and ng_model_parse reads it.
const char *ng_model_name(ng_model_kind kind);
/// Parses a model family's name into *out; NG_ERR_INVALID_ARG for an unknown name.
ng_status ng_model_parse(ng_model_kind *out, const char *name);

/* ------------------------------------------------------------------------------------------ */
/* Training                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef enum { NG_OPTIMIZER_ADAM = 0, NG_OPTIMIZER_SGD = 1 } ng_optimizer;

/// Where the host keeps the feature table that CPU workers and zero-copy reads use.
typedef enum {
  /// MAPPED: the table is read (and registered for zero-copy) in place, never copied, so that
  /// peak host memory stays within the bound of docs/memory.md (issue 20). Before, AUTO copied
  /// the table when it took at most half of the available memory.
  NG_FEATURES_AUTO = 0,
  /// The dataset's mapping of its file, read in place (page cache, 4 KiB pages): no copy.
  NG_FEATURES_MAPPED = 1,
  /// A copy in anonymous memory backed by 2 MiB pages (transparent huge pages): reads of random
  /// rows miss the TLB far less (on the H100 machine PARTIAL workers ran ~27% faster, W1). The
  /// copy drops the mapping's pages as it goes, but the estimate counts the table twice.
  NG_FEATURES_COPY = 2,
} ng_features_memory;

/// Where the hot rows of a data-parallel run's GPUs live (docs/distributed.md, "The feature
/// cache across GPUs").
typedef enum {
  /// Every GPU caches the same hot rows [0, H) (H per GPU as in a single-GPU run).
  NG_CACHE_REPLICATED = 0,
  /// The R GPUs of one host cache rows [0, R x H) between them, row g on GPU g mod R (H rows
  /// each), and read their peers' rows over NVLink or PCIe peer-to-peer (CUDA IPC). Without
  /// peer-to-peer access between the GPUs the run falls back to replicated with a note; ranks
  /// on several hosts are refused.
  NG_CACHE_PARTITIONED = 1,
  /// Partitioned when it pays off: several ranks, all on one host, on GPUs that reach each
  /// other peer-to-peer; R x H rows serve markedly more reads than H (at least 5 points more of
  /// the graph's row entries); and peer copies run faster than 2 x host-to-device copies
  /// (measured at start-up, or read from a bench_floor --json file, cache_bench). Else
  /// replicated.
  NG_CACHE_AUTO = 2,
} ng_cache_placement;

/// Who reads a data-parallel run's cold rows from host memory (ng_train_opts.cold_fetch;
/// docs/distributed.md, "Cooperative cold fetch").
typedef enum {
  /// Every rank reads the cold rows of its own input layers, even those another rank of its host
  /// reads in the same iteration.
  NG_COLD_FETCH_OWN = 0,
  /// The ranks of one host split each iteration's cold rows by owner (row g: rank g mod R),
  /// each reads the rows it owns that any rank needs, once for the host, and sends them to the
  /// ranks that need them (the communicator's all-to-all). The same bits as OWN. So far the CPU
  /// backend's path: fp32 or bf16 features, no input dropout, the host work inline (workers -1; the
  /// default workers 0 becomes -1), all ranks on one host.
  NG_COLD_FETCH_COOPERATIVE = 1,
} ng_cold_fetch;

typedef enum {
  /// The checkpoint's normalisation (ng_engine_opts; the trainer refuses it).
  NG_NORMALIZE_AUTO = -1,
  NG_NORMALIZE_NONE = 0,
  NG_NORMALIZE_ROW = 1, ///< divide each feature row by its sum (rows summing to 0 stay 0)
} ng_normalize;

/// How the features of cold nodes (ids >= H, outside the GPU's hot tier) reach the device for
/// one iteration. All give bit-identical losses and weights for the same seed
/// (docs/tiering.md).
typedef enum {
  NG_FETCH_PARTIAL = 0, ///< the CPU reduces cold neighbour rows into one partial state per
                        ///< destination near the data; the device merges it with the hot part
  NG_FETCH_BATCH = 1,   ///< the CPU gathers the unique cold rows into pinned staging, one copy
  NG_FETCH_ZCOPY = 2,   ///< the device reads cold rows from pinned host memory (zero-copy)
  NG_FETCH_AUTO = 3,    ///< (ng_train_opts.transfer) ZCOPY for rows of 512 B and more, else BATCH
} ng_fetch;

/// Who does the host work of an iteration and how (docs/scheduler.md). Worker threads sample
/// whole iterations and fetch their cold rows; a worker in the PARTIAL group aggregates them
/// near the data, one in the TRANSFER group batches them or leaves them to zero-copy. Every
/// mode gives the same weights bit for bit.
typedef enum {
  NG_MODE_AUTO = 0,          ///< HYBRID on a GPU, CPU on the cpu device
  NG_MODE_CPU = 1,           ///< no GPU: the CPU backend is the device and every row is hot
  NG_MODE_BASELINE = 2,      ///< hot cache + every cold row batched for DMA (PaGraph-style)
  NG_MODE_ZEROCOPY = 3,      ///< hot cache + the GPU reads cold rows by zero-copy
  NG_MODE_PARTIAL = 4,       ///< hot cache + every worker aggregates cold rows near the data
  NG_MODE_HYBRID_STATIC = 5, ///< a fixed split of PARTIAL and TRANSFER workers
  NG_MODE_HYBRID = 6,        ///< the feedback scheduler moves workers between the two groups
} ng_mode;

/// Iteration counters of a run's feature fetching (also per epoch in ng_epoch_stats).
typedef struct {
  int64_t hot_rows;       ///< feature rows read from the hot tier (neighbour and self rows)
  int64_t cold_rows;      ///< feature rows read from host memory
  int64_t h2d_bytes;      ///< bytes copied host-to-device (iteration packages)
  int64_t zcopy_bytes;    ///< cold-row bytes the device read from host memory (zero-copy)
  int64_t cpu_cold_bytes; ///< cold-row bytes the CPU read (partial aggregation, batching)
  int64_t cold_edges;     ///< input-layer edges whose source row is cold (in every mode)
  int64_t destinations;   ///< input-layer destinations (PARTIAL: a state each on the host)
} ng_fetch_stats;

/// One line of run-time telemetry (ng_train_opts.telemetry), about the interval since the last.
typedef struct {
  int64_t epoch;
  double t;                 ///< seconds since the epoch started
  double seconds;           ///< length of the interval
  int64_t iterations;       ///< iterations the device finished in the interval
  double it_per_s;          ///< iterations / seconds
  int workers[2];           ///< PARTIAL and TRANSFER workers at the end of the interval
  double group_it_per_s[2]; ///< per-thread iterations/s of each group (0 without a worker)
  int64_t pcie_bytes;       ///< h2d copies + zero-copy reads in the interval
  int64_t cpu_cold_bytes;   ///< cold-row bytes read by the CPU workers
  int ring_depth;           ///< iterations ready for the device at the end of the interval
  double device_busy;       ///< share of the interval the device thread did not wait for input
  const char *decisions;    ///< the controller's decisions of the interval (CSV lines), or ""
  double device_share;      ///< PARTIAL destinations the device reduces (ng_train_opts), at the end
} ng_telemetry;
typedef void (*ng_telemetry_fn)(const ng_telemetry *t, void *ctx);

/// The arithmetic of the device's matrix products and the storage of the features
/// (ng_train_opts.precision; docs/training.md, "Precision"). Every precision accumulates in
/// fp32, and within one precision results are bit-identical across modes and worker counts.
typedef enum {
  NG_PRECISION_FP32 = 0, ///< IEEE fp32 products (the default; CUDA cores on a GPU)
  NG_PRECISION_TF32 = 1, ///< inputs rounded to TF32 on the tensor cores (CUDA backend only)
  /// Features stored in bf16 (rounded to nearest, ties to even), fp32 products: host rows,
  /// PCIe transfers and the GPU hot tier take half the bytes (twice the hot rows fit). The
  /// table is features.bf16.npy, written once beside the dataset's features.npy on first use
  /// and then mapped in place (anonymous memory, half the fp32 table's size, when the folder
  /// is read-only or the features are normalised or in memory). Every read converts a row to
  /// fp32 exactly, so every mode computes on the same values. Both backends.
  NG_PRECISION_BF16 = 2,
} ng_precision;

/// The most kinds of op an op profile tells apart (ng_trainer_op_profile never lists more).
#define NG_OP_PROFILE_MAX 128

/// Device time of one kind of op, summed over the iterations the trainer sampled
/// (ng_train_opts.op_profile_every; ng_trainer_op_profile).
typedef struct {
  char name[32]; ///< e.g. "gemm fwd", "aggr bwd", "input aggr"
  int32_t layer; ///< the model layer (0 = input), or -1 for the step's other ops
  int64_t calls; ///< timed calls (over every sampled iteration)
  double ms;     ///< their device time in all
  double flops;  ///< floating-point operations they did in all
  double bytes;  ///< bytes they must move through device memory in all (each input once)
} ng_op_time;

/// Who samples the mini-batches' blocks (ng_train_opts.sampler; docs/sampling.md).
typedef enum {
  /// The device when it has a sampler of its own (the GPU) and the graph's topology takes at most
  /// sampler_memory_share of its free memory; else the CPU workers.
  NG_SAMPLER_AUTO = 0,
  NG_SAMPLER_CPU = 1, ///< each worker samples the iterations it fetches
  /// The device samples (on the CPU backend, a thread does the same work) and hands the blocks
  /// to the workers, which only fetch. The blocks, hence the results, are those of CPU sampling
  /// bit for bit.
  NG_SAMPLER_DEVICE = 2,
} ng_sampler_kind;

typedef struct {
  size_t size;            ///< sizeof(ng_train_opts)
  int64_t batch;          ///< target nodes per mini-batch; 0 = the whole training split at once
  double lr;              ///< learning rate
  ng_optimizer optimizer; ///< Adam (default) or SGD
  double momentum;        ///< SGD momentum
  uint64_t seed;          ///< everything random derives from it (init, shuffles, samples, dropout)
  int threads;            ///< CPU threads (0: the OpenMP default); results do not depend on it
  const char *device;     ///< "cpu" (default); "cuda" when built with the CUDA backend
  ng_normalize normalize; ///< feature normalisation (applied to a copy of the features)
  /// Nodes per chunk in layer-wise full-neighbour inference; 0 (the default): per layer, 65536
  /// where a GPU reads the layer's input rows itself, else 4096 (docs/inference.md).
  int64_t eval_chunk;
  ng_progress_fn progress; ///< optional; phases "train" (iterations) and "eval" (nodes)
  void *progress_ctx;
  ng_mode mode; ///< who fetches cold rows and how (docs/scheduler.md)
  /// The hot tier: rows [0, H) of the features are kept in device memory (reorder the dataset
  /// first so that they are the hottest, see ng_dataset_reorder). H comes from cache_bytes
  /// (H = cache_bytes / row bytes) when it is > 0, else from cache_ratio (H = ratio * nodes)
  /// when it is in [0, 1], else (both at their defaults 0 and -1) as many rows as fit in half
  /// of the device's free memory. On the CPU backend the features are host memory already: every
  /// row is hot unless a size is given (which then only simulates a tier, e.g. for tests).
  int64_t cache_bytes;
  double cache_ratio;
  /// Worker threads (one per core): 0 = every core this process may use but one, which the
  /// device thread keeps; -1 = none, the calling thread does the host work between device steps.
  int workers;
  const char *cpuset; ///< cores for the threads, e.g. "0-15" (NULL: every allowed core)
  ng_fetch transfer;  ///< the TRANSFER group's strategy: BATCH, ZCOPY or AUTO
  /// PARTIAL workers of HYBRID_STATIC, and HYBRID's start; -1: half, except HYBRID with
  /// zero-copy TRANSFER workers, which starts with all but one PARTIAL (docs/scheduler.md)
  int partial_workers;
  double period_ms; ///< HYBRID: how often the controller compares the groups
  double threshold; ///< HYBRID: relative difference that moves a worker (docs/scheduler.md)
  ng_telemetry_fn telemetry; ///< optional, called from the training thread every telemetry_s
  void *telemetry_ctx;
  double telemetry_s;
  /// Packages copied to the device ahead of the iteration it computes, 1 to 3 (default 3): the
  /// copies and zero-copy reads of the next `lookahead` iterations overlap the current one.
  /// 1 is double buffering; each step deeper holds one more package per worker in pinned
  /// memory and one more in device memory.
  int lookahead;
  ng_features_memory features_memory; ///< see ng_features_memory (default AUTO)
  /// HYBRID_STATIC with the zcopy TRANSFER strategy and rows of at least 2 KB: the share of each
  /// PARTIAL package's destinations, in [0, 1] (rounded down to 32nds), whose cold
  /// neighbour rows the device reads by zero-copy and reduces, instead of the worker. HYBRID
  /// picks it by itself while every worker is PARTIAL (docs/scheduler.md); 0 otherwise.
  double device_share;
  /// Record a timeline of the runtime's threads (the device thread's waits and launches, each
  /// worker's sampling, fetch and waits), at most this many spans per thread (0: off, the
  /// default); ng_trainer_write_trace() writes it. A span costs two clock reads and 32 bytes.
  int64_t trace_spans;
  /// Iterations the workers may have ready ahead of the device (the ready ring's window,
  /// docs/scheduler.md), 1 to NG_READY_WINDOW_MAX; 0 (the default) = 4 x workers, at least 4.
  /// A wider window lets the workers go on while the device waits for a late package or the
  /// trainer works between two epochs, and the device catch up afterwards. Each worker owns
  /// lookahead + max(2, ceil(window / workers)) pinned staging slots, each as large as 1 + 1/16
  /// x the largest package once used: 7 per worker by default. Ignored without worker threads
  /// (workers -1).
  int ready_window;
  ng_precision precision; ///< GEMM arithmetic and feature storage (default FP32)
  /// Time every op of the device step with device events on one iteration in this many, from
  /// the second epoch on (0: off, the default); ng_trainer_op_profile() reads the sums. A timed
  /// iteration waits for its events, so keep it sparse (the harness uses 25).
  int op_profile_every;
  ng_sampler_kind sampler;     ///< who samples (default AUTO)
  double sampler_memory_share; ///< AUTO: the share of free device memory the topology may take
  /// Refuse (ng_trainer_create fails with NG_ERR_NOMEM before allocating anything large) a
  /// configuration whose host memory estimate (ng_memory_estimate.host_total) exceeds this many
  /// bytes; 0 (the default) = no limit.
  int64_t max_host_memory;
  /// Layer-wise inference keeps a layer's output for all its nodes up to this many bytes in
  /// anonymous memory, a larger one in a memory-mapped temporary file under temp_dir (0: the
  /// default, 1 GiB; -1: always a file). See docs/inference.md.
  int64_t infer_host_bytes;
  const char *temp_dir; ///< folder of inference's temporary files (copied; NULL: $TMPDIR or /tmp)
  /// Data-parallel training (docs/distributed.md): this process is one rank of `comm`
  /// (ng_comm_create; borrowed, it must outlive the trainer). Each rank trains its share of every
  /// global mini-batch of `batch` targets and the gradients are summed over the ranks (NCCL on
  /// cuda, the communicator on cpu), so every rank holds the same parameters. NULL (the default),
  /// or a communicator of one rank: one process.
  struct ng_comm *comm;
  /// Where the GPUs of a data-parallel run cache hot rows (default REPLICATED). One rank, or
  /// the CPU backend: replicated whatever is asked.
  ng_cache_placement cache_placement;
  /// AUTO: the peer and host-to-device rates from this bench_floor --json file ("peer_gbs",
  /// "h2d_gbs", "peer_p2p") instead of measuring them at start-up (NULL: measure).
  const char *cache_bench;
  /// Who reads the cold rows of a data-parallel run (default OWN; one rank: OWN whatever is
  /// asked).
  ng_cold_fetch cold_fetch;
} ng_train_opts;
/// The widest ready window (ng_train_opts.ready_window).
#define NG_READY_WINDOW_MAX 1024
#define NG_TRAIN_OPTS_INIT                                                                         \
  {                                                                                                \
    sizeof(ng_train_opts), 1024, 0.01, NG_OPTIMIZER_ADAM, 0.9, 1, 0, "cpu", NG_NORMALIZE_NONE, 0,  \
        NULL, NULL, NG_MODE_AUTO, 0, -1.0, 0, NULL, NG_FETCH_AUTO, -1, 50.0, 0.10, NULL, NULL,     \
        1.0, 3, NG_FEATURES_AUTO, 0.0, 0, 0, NG_PRECISION_FP32, 0, NG_SAMPLER_AUTO, 0.25, 0, 0,    \
        NULL, NULL, NG_CACHE_REPLICATED, NULL, NG_COLD_FETCH_OWN                                   \
  }
/// NG_TRAIN_OPTS_INIT into *out, for bindings that cannot expand the macro (python/neargnn).
void ng_train_opts_init(ng_train_opts *out);

/// What one epoch did.
typedef struct {
  size_t size;           ///< sizeof(ng_epoch_stats), set by the caller
  int64_t epoch;         ///< 0-based number of the epoch just finished
  int64_t iterations;    ///< mini-batches trained by this call
  double loss;           ///< mean training loss over the epoch's mini-batches
  double train_acc;      ///< accuracy on the mini-batches' targets during training
  double seconds;        ///< wall time of the epoch
  double it_per_s;       ///< iterations per second
  int64_t sampled_edges; ///< edges in all blocks of the epoch
  ng_fetch_stats fetch;  ///< the epoch's feature reads; hit rate = hot / (hot + cold)
  int32_t workers[2];    ///< PARTIAL and TRANSFER workers at the end of the epoch
  double iter_ms_median; ///< median time between two iterations finishing on the device
  double iter_ms_p99;    ///< its 99th percentile (nearest rank)
  double device_share;   ///< the device share at the end of the epoch (ng_train_opts)
  int32_t ranks;         ///< ranks that trained the epoch (ng_train_opts.comm; 1: one process)
  /// Mean time of one iteration's gradient all-reduce on this rank, in ms (device time of the
  /// NCCL call on cuda, wall time on cpu, waiting for the slowest rank included); 0 with one rank.
  double allreduce_ms;
} ng_epoch_stats;
#define NG_EPOCH_STATS_INIT                                                                        \
  { sizeof(ng_epoch_stats), 0, 0, 0.0, 0.0, 0.0, 0.0, 0, {0}, {0, 0}, 0.0, 0.0, 0.0, 1, 0.0 }

typedef enum { NG_SPLIT_TRAIN = 0, NG_SPLIT_VAL = 1, NG_SPLIT_TEST = 2 } ng_split;

/* ---- ranks of a data-parallel run (docs/distributed.md) ---- */

/// The group of processes (ranks) that train one model together.
typedef struct ng_comm *ng_comm_t;

/// Joins this process's group. `how`:
///  - "mpi": MPI_COMM_WORLD (initialises MPI unless the program did; a build with MPI only);
///  - "env": the built-in launcher's group (`neargnn train --ranks N` sets NG_RANK, NG_RANKS and
///    NG_DIST_ADDR=host:port, where rank 0 listens and the others connect over TCP);
///  - "auto" or NULL: "env" when NG_RANKS is set, else "mpi" when the process was started by
///    mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set), else a group of one rank.
/// Collective: every rank of the group must call it.
ng_status ng_comm_create(ng_comm_t *out, const char *how);
/// This process's rank in [0, size), the group's size, the rank among the ranks of its host
/// (which picks the host's GPU) and how many ranks its host runs; -1 for a bad handle.
int ng_comm_rank(ng_comm_t comm);
int ng_comm_size(ng_comm_t comm);
int ng_comm_local_rank(ng_comm_t comm);
int ng_comm_local_size(ng_comm_t comm);
/// "one", "socket" or "mpi".
const char *ng_comm_kind(ng_comm_t comm);
/// Leaves the group (MPI_Finalize when ng_comm_create initialised MPI); accepts NULL.
void ng_comm_destroy(ng_comm_t comm);

typedef struct ng_trainer *ng_trainer_t;

/// Creates a trainer for `model` on `ds` and initialises the model's parameters from
/// opts->seed. `ds` is borrowed (it must outlive the trainer); the model description is copied,
/// so layers added to `model` later do not change this trainer.
ng_status ng_trainer_create(ng_trainer_t *out, ng_dataset_t ds, ng_model_t model,
                            const ng_train_opts *opts);
/// Trains one epoch over the shuffled training split, or the rest of an epoch that was stopped
/// (by the progress callback, e.g. Ctrl-C, or restored mid-epoch from a checkpoint). A stopped
/// epoch keeps every iteration it completed: NG_ERR_INTERRUPTED leaves a consistent state that
/// ng_trainer_save can write.
ng_status ng_trainer_epoch(ng_epoch_stats *out, ng_trainer_t trainer);
/// Accuracy and mean loss on a split with full-neighbour layer-wise inference (every node, one
/// layer at a time, in chunks of opts->eval_chunk nodes).
ng_status ng_trainer_evaluate(double *accuracy, double *loss, ng_trainer_t trainer, ng_split split);
/// Class predictions of all nodes (full-neighbour inference) into `out[nodes]`, indexed by the
/// dataset's node ids.
ng_status ng_trainer_predict(int32_t *out, ng_trainer_t trainer);
/// Logits and/or predicted classes of `n` nodes (full-neighbour inference, computed once per
/// parameter state and shared with ng_trainer_evaluate): `logits` [n, classes] row-major and
/// `classes` [n], either may be NULL. `nodes` [n] are dataset node ids (borrowed); NULL means
/// every node in id order (then n must be the number of nodes).
ng_status ng_trainer_predict_nodes(float *logits, int32_t *classes, ng_trainer_t trainer,
                                   const int64_t *nodes, int64_t n);

/// Layers an ng_infer_report describes at most.
#define NG_INFER_REPORT_LAYERS 8

/// Where the time of one ng_trainer_embed() went, layer by layer (docs/inference.md).
typedef struct {
  size_t size;       ///< sizeof(ng_infer_report)
  int32_t layers;    ///< layers computed (0 .. the requested layer)
  int32_t producers; ///< host threads that sampled and gathered chunks in parallel
  int32_t slots;     ///< staging slots: chunks in flight at most
  int64_t rows[NG_INFER_REPORT_LAYERS];          ///< destinations per layer (the receptive field)
  double seconds[NG_INFER_REPORT_LAYERS];        ///< wall seconds per layer
  double host_seconds[NG_INFER_REPORT_LAYERS];   ///< producers' busy seconds, summed over threads
  double wait_seconds[NG_INFER_REPORT_LAYERS];   ///< the device thread waiting for chunks
  double device_seconds[NG_INFER_REPORT_LAYERS]; ///< the device thread computing chunks
  double upload_seconds; ///< uploading the cold input rows once (part of seconds[0])
  int64_t device_bytes;  ///< device memory held for resident input rows and layer outputs
  int64_t file_bytes;    ///< layer outputs that lived in temporary files
  int64_t chunk[NG_INFER_REPORT_LAYERS]; ///< destinations per chunk per layer (docs/inference.md)
  /// ng_trainer_embed_npy: seconds writing the output file back to disk after the last layer
  /// (most of it is written back while the last layer runs); 0 otherwise.
  double write_seconds;
} ng_infer_report;
#define NG_INFER_REPORT_INIT                                                                       \
  { sizeof(ng_infer_report), 0, 0, 0, {0}, {0}, {0}, {0}, {0}, 0.0, 0, 0, {0}, 0.0 }

/// Options of ng_trainer_embed().
typedef struct {
  size_t size;   ///< sizeof(ng_infer_opts)
  int32_t layer; ///< whose output: 0 = the input layer's, ...; -1 (the default) = the last (logits)
  int64_t chunk; ///< destinations per chunk (0: the trainer's eval_chunk, whose 0 is per layer)
  int64_t host_bytes;      ///< as ng_train_opts.infer_host_bytes (0: the trainer's)
  const char *temp_dir;    ///< as ng_train_opts.temp_dir (borrowed; NULL: the trainer's)
  ng_progress_fn progress; ///< optional; phase "infer", in rows over every layer computed
  void *progress_ctx;
  /// GPU memory inference may keep the input table's cold rows and intermediate layers in, so
  /// that each row crosses PCIe once: 0 (the default) = what is free less a margin; -1 = none
  /// (cold rows by the training paths, intermediate layers in host memory). Same bits either way.
  int64_t device_bytes;
  /// Optional: receives the run's figures (borrowed; initialise it with NG_INFER_REPORT_INIT).
  ng_infer_report *report;
} ng_infer_opts;
#define NG_INFER_OPTS_INIT                                                                         \
  { sizeof(ng_infer_opts), -1, 0, 0, NULL, NULL, NULL, 0, NULL }
/// NG_INFER_OPTS_INIT into *out, for bindings that cannot expand the macro (python/neargnn).
void ng_infer_opts_init(ng_infer_opts *out);

/// Columns of layer `layer`'s output (-1: the last layer, i.e. the classes) into *dim.
ng_status ng_trainer_embed_dim(int64_t *dim, ng_trainer_t trainer, int32_t layer);
/// Full-neighbour inference (no sampling, no dropout) with the trainer's current parameters:
/// the output of layer opts->layer (embeddings, or logits for the last layer) of nodes
/// `nodes[n]` (internal ids, any order, repeats allowed; NULL: every node in id order, n is then
/// ignored) into `out` [n, dim] (borrowed host memory, e.g. a mapped .npy; dim from
/// ng_trainer_embed_dim). Layer by layer, in chunks, over only the receptive field of `nodes`
/// (the nodes within layer - l hops for layer l), or every node when that is all of them; the
/// host samples and gathers the next chunk while the device computes the current one, the input
/// layer reads hot rows from the device's hot tier, and intermediate layers larger than
/// host_bytes live in a memory-mapped temporary file. Deterministic, and bit for bit what a
/// full-neighbour mini-batch forward of each node alone gives on the CPU backend
/// (docs/inference.md). `opts` may be NULL. Safe to call between epochs; not concurrently with
/// another call on the same trainer.
ng_status ng_trainer_embed(float *out, ng_trainer_t trainer, const int64_t *nodes, int64_t n,
                           const ng_infer_opts *opts);
/// ng_trainer_embed of `nodes[n]` (NULL: every node) into a new float32 NumPy file `path`
/// [n, dim], written through a memory mapping under a temporary name beside it, synced and
/// renamed into place: a failure leaves nothing behind (`neargnn embed`).
ng_status ng_trainer_embed_npy(const char *path, ng_trainer_t trainer, const int64_t *nodes,
                               int64_t n, const ng_infer_opts *opts);
/// Reads a node list into a new array (*out, free() it) of *n ids: an int64 NumPy file of shape
/// [n] or [n, 1] (a name ending in .npy), else text with one id per line (blank lines and '#'
/// comments skipped). The ids are not checked against a dataset here.
ng_status ng_node_list_load(int64_t **out, int64_t *n, const char *path);
/// The dataset's ids of user-visible ones: out[i] for ids[i], i < n (out may be ids). On a
/// renumbered dataset the user's ids are the original ones (ng_dataset_orig_ids); else they are
/// the same. An id outside [0, nodes) is an error naming its entry.
ng_status ng_dataset_ids_of(int64_t *out, const int64_t *ids, int64_t n, ng_dataset_t ds);

/// A trainer's memory, estimated before anything is allocated (docs/memory.md gives the
/// formulas). Bytes, except where said.
typedef struct {
  size_t size;        ///< sizeof(ng_memory_estimate)
  int64_t features;   ///< the host's feature table: the mapping, or the trainer's own table
  int64_t topology;   ///< graph (indptr, indices), labels and splits (mapped)
  int64_t staging;    ///< pinned staging slots and per-worker scratch (sampler, fetch)
  int64_t inference;  ///< layer-wise inference's host memory (outputs in memory, chunks, logits)
  int64_t allowance;  ///< the runtime's fixed allowance (libraries, threads, small tables): 2 GiB
  int64_t host_total; ///< the sum of the five above: peak RSS should stay below it
  int64_t device;     ///< device memory: hot rows, parameters and optimizer state, packages
  int64_t hot_rows;   ///< rows of the hot tier the estimate assumes
  int32_t workers;    ///< worker threads
  int32_t slots;      ///< staging slots per worker
  int64_t package_bytes; ///< the largest package the estimate assumes (one mini-batch's input)
  int64_t available; ///< memory the process may still fill (MemAvailable, cgroup limit); 0: unknown
} ng_memory_estimate;
#define NG_MEMORY_ESTIMATE_INIT                                                                    \
  { sizeof(ng_memory_estimate), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/// Estimates the memory ng_trainer_create(ds, model, opts) and training will need, without
/// allocating it (a CUDA device with an automatic hot tier is asked for its free memory).
ng_status ng_trainer_estimate_memory(ng_memory_estimate *out, ng_dataset_t ds, ng_model_t model,
                                     const ng_train_opts *opts);
/// Saves parameters, optimizer state, the epoch and iteration counters atomically as safetensors
/// (PyTorch reads the weights with safetensors.torch.load_file; names are documented in
/// docs/training.md).
ng_status ng_trainer_save(ng_trainer_t trainer, const char *path);
/// Restores a checkpoint saved by ng_trainer_save for the same model shape (tensor names and
/// shapes are checked); with the same seed and batch, training then continues bit-identically to
/// an uninterrupted run. A checkpoint taken in the middle of an epoch is refused unless the batch
/// matches, since the rest of the epoch depends on it; another seed is always refused. The
/// file is read strictly (NG_ERR_FORMAT naming the key, tensor or values): the CRC-32 of its
/// metadata and of each tensor, every key known and every value in range, and the counters'
/// consistency. Checkpoints of format version 1 load with the checks their keys allow.
ng_status ng_trainer_load(ng_trainer_t trainer, const char *path);
/// Loads only a checkpoint's parameters, for inference (ng_trainer_evaluate, _predict): no
/// optimizer state, counters, seed or batch are read or checked, and the dataset may be another
/// one with the same feature columns and classes (inductive use). The model's settings are
/// checked as ng_trainer_load checks them.
ng_status ng_trainer_load_weights(ng_trainer_t trainer, const char *path);

/// What a checkpoint records about its run (ng_checkpoint_info_get).
typedef struct {
  size_t size;            ///< sizeof(ng_checkpoint_info), set by the caller
  int32_t described;      ///< 1 when it records the model's settings (else the fields below
                          ///< up to `classes` are 0 / empty)
  ng_model_kind kind;     ///< the model's kind
  int32_t layers;         ///< its number of layers
  ng_normalize normalize; ///< the feature normalisation it was trained with
  char dataset[64];       ///< the dataset's name
  int64_t nodes;          ///< the dataset's nodes
  int64_t feature_dim;    ///< its feature columns
  int32_t classes;        ///< its classes
  int64_t epochs_done;    ///< epochs trained
  uint64_t seed;          ///< the run's seed
  int64_t batch;          ///< its batch
  ng_optimizer optimizer; ///< its optimizer
} ng_checkpoint_info;
#define NG_CHECKPOINT_INFO_INIT                                                                    \
  {                                                                                                \
    sizeof(ng_checkpoint_info), 0, NG_MODEL_SAGE, 0, NG_NORMALIZE_NONE, {0}, 0, 0, 0, 0, 0, 0,     \
        NG_OPTIMIZER_ADAM                                                                          \
  }
/// Reads what checkpoint `path` records, after the checks ng_trainer_load makes of the file.
ng_status ng_checkpoint_info_get(ng_checkpoint_info *out, const char *path);
/// The header line of the hybrid scheduler's decision log (ng_telemetry.decisions lines are in
/// this CSV format).
const char *ng_telemetry_decisions_header(void);
/// Writes `len` bytes of `data` (borrowed) to the file `path` atomically: a temporary file beside
/// it, synced and renamed into place. `path` must be absent or a regular file, in an existing
/// folder: a symbolic link, folder, device or FIFO there is refused (NG_ERR_INVALID_ARG, the
/// message says what it is), a missing folder is NG_ERR_NOT_FOUND naming it
/// (docs/guarantees.md, "Atomic writes").
ng_status ng_file_write(const char *path, const void *data, size_t len);
/// Writes `data` as a NumPy .npy file (C order) atomically: NG_INT32 / NG_INT64 elements, or
/// float32 when `is_float` is non-zero (then `type` is ignored). `shape` has `ndim` (1 or 2)
/// entries; `data` is borrowed.
ng_status ng_npy_save(const char *path, int is_float, ng_int_type type, int ndim,
                      const int64_t *shape, const void *data);
/// The number of epochs trained so far (including those restored by ng_trainer_load).
int64_t ng_trainer_epochs_done(ng_trainer_t trainer);
/// The number of hot-tier rows H of a trainer (rows [0, H) of the features are in device memory).
int64_t ng_trainer_hot_rows(ng_trainer_t trainer);
/// Whether the trainer reads its own copy of the feature table (NG_FEATURES_COPY, or a normalised
/// copy) rather than the dataset's mapping (AUTO and MAPPED); -1 for an invalid trainer.
int ng_trainer_features_copied(ng_trainer_t trainer);
/// Parses "partial", "batch", "zcopy" or "auto".
ng_status ng_fetch_parse(ng_fetch *out, const char *name);
/// The name of a fetch strategy ("partial", "batch", "zcopy", "auto"; "?" when unknown).
const char *ng_fetch_name(ng_fetch fetch);
/// Parses "auto", "cpu", "baseline", "zerocopy", "partial", "hybrid-static" or "hybrid".
ng_status ng_mode_parse(ng_mode *out, const char *name);
/// The name of a mode, as ng_mode_parse reads it ("?" when unknown).
const char *ng_mode_name(ng_mode mode);
/// One line describing where the last epoch's threads ran (workers, cores, device thread), or
/// "" before the first epoch. Owned by the trainer.
const char *ng_trainer_placement(ng_trainer_t trainer);
/// Who samples the trainer's blocks: "cpu" (the workers) or "device" (ng_train_opts.sampler).
const char *ng_trainer_sampler(ng_trainer_t trainer);
/// Writes the timeline recorded so far (ng_train_opts.trace_spans) as Chrome trace-event JSON, for
/// Perfetto (ui.perfetto.dev) or chrome://tracing: one track per thread, one event per span, in
/// microseconds. `spans` and `dropped` (each may be NULL) receive the spans written and those
/// dropped at the per-thread limit. NG_ERR_STATE when the trainer records none. Workers that went
/// on with the next epoch stop first (its first iterations then wait for a pool to start).
/// docs/scheduler.md lists the spans.
ng_status ng_trainer_write_trace(ng_trainer_t trainer, const char *path, int64_t *spans,
                                 int64_t *dropped);
/// The device time of each kind of op over the iterations timed so far
/// (ng_train_opts.op_profile_every), in the order the step first ran them: up to `cap` entries
/// into `out` (borrowed), their number into *n (0 when profiling is off or nothing was timed
/// yet). *iterations (may be NULL) receives the number of timed iterations, so that
/// ms / iterations is an op's time per iteration.
ng_status ng_trainer_op_profile(ng_op_time *out, int cap, int *n, int64_t *iterations,
                                ng_trainer_t trainer);
/// Where a trainer caches its hot rows (ng_train_opts.cache_placement) and why.
typedef struct {
  ng_cache_placement placement; ///< resolved: REPLICATED or PARTITIONED
  int32_t parts;                ///< GPUs the hot set is spread over (1: replicated)
  int64_t hot_rows;             ///< the hot set: rows [0, hot_rows)
  int64_t gpu_rows;             ///< the hot rows this rank's device holds
  double peer_gbs, h2d_gbs;     ///< the rates AUTO compared (0: not needed)
  double probe_s;               ///< start-up seconds spent choosing (scanning, measuring)
  char why[256];                ///< the reason for the choice, one sentence
} ng_cache_info;
/// The hot tier's placement of `trainer` into *out.
ng_status ng_trainer_cache_info(ng_cache_info *out, ng_trainer_t trainer);
/// The name of a placement ("replicated", "partitioned", "auto"), or NULL.
const char *ng_cache_placement_name(ng_cache_placement p);
/// Parses a placement's name ("replicated", "partitioned", "auto") into *out;
/// NG_ERR_INVALID_ARG otherwise.
ng_status ng_cache_placement_parse(ng_cache_placement *out, const char *name);
/// The name of a cold-fetch mode ("own", "cooperative"), or NULL.
const char *ng_cold_fetch_name(ng_cold_fetch f);
/// Parses a cold-fetch mode's name into *out; NG_ERR_INVALID_ARG otherwise.
ng_status ng_cold_fetch_parse(ng_cold_fetch *out, const char *name);

/// The cold rows of a trainer's epochs so far, over the ranks of its host (docs/distributed.md):
/// what the host read from its memory, per iteration and per target, which with the host's DRAM
/// bandwidth bounds the targets/s any number of GPUs can reach (the scaling floor).
typedef struct {
  size_t size;        ///< sizeof(ng_cold_fetch_stats), set by the caller
  ng_cold_fetch mode; ///< resolved: COOPERATIVE only with several ranks
  int32_t ranks;      ///< ranks counted (the host's)
  int64_t steps;      ///< iterations counted on this rank (those made ahead included)
  /// Distinct cold rows the ranks' input layers needed per iteration, summed over the ranks:
  /// what they read from host memory without cooperation.
  double rows_needed_per_step;
  /// Cold rows the ranks read from host memory per iteration (cooperative: each row once).
  double rows_read_per_step;
  double rows_sent_per_step; ///< rows that went from one rank to another per iteration
  int64_t row_bytes;         ///< bytes of one row as the host table stores it
  /// rows_read_per_step x row_bytes / the global batch: host DRAM bytes per target.
  double bytes_per_target;
  /// The NUMA placement rule's choice for this host (docs/distributed.md, "NUMA placement"),
  /// reported and not applied: nothing binds memory or threads to it yet.
  int32_t numa_nodes; ///< the host's NUMA nodes (1 without NUMA information)
  /// Where the table's rows would sit (ng_numa_placement_name): 0 one node, 1 a replica on
  /// each node that runs a rank, 2 the rows partitioned over the nodes.
  int32_t placement;
  int32_t rank_node; ///< the node whose cores the rule gives this rank's workers (its GPU's)
  /// The share of the nodes' summed DRAM read rate the placement reaches: the floor over the
  /// host's DRAM rate is bytes_per_target's times this (1 on one node).
  double placement_bw_share;
} ng_cold_fetch_stats;
#define NG_COLD_FETCH_STATS_INIT                                                                   \
  { sizeof(ng_cold_fetch_stats), NG_COLD_FETCH_OWN, 1, 0, 0.0, 0.0, 0.0, 0, 0.0, 1, 0, 0, 1.0 }
/// The name of ng_cold_fetch_stats.placement ("one_node", "replica_per_node", "partitioned"),
/// or "?".
const char *ng_numa_placement_name(int32_t placement);
/// The cold-row figures of `trainer`'s epochs so far into *out (zero before the first epoch).
ng_status ng_trainer_cold_fetch(ng_cold_fetch_stats *out, ng_trainer_t trainer);

/// The rates a `bench_floor --json` file records (ng_train_opts.cache_bench), in GB/s; 0: not
/// in the file.
typedef struct {
  size_t size;              ///< sizeof(ng_bench_rates), set by the caller
  double peer_gbs, h2d_gbs; ///< a GPU reading a peer GPU's memory; host-to-device copies
  int32_t peer_p2p;         ///< 1: the peer reads went GPU to GPU, not through the host
  /// The largest "cpu_alone_gbs": CPU threads reading rows from host DRAM, the rate that with
  /// ng_cold_fetch_stats.bytes_per_target gives the scaling floor.
  double dram_gbs;
} ng_bench_rates;
#define NG_BENCH_RATES_INIT                                                                        \
  { sizeof(ng_bench_rates), 0.0, 0.0, 0, 0.0 }
/// Reads the rates of the bench_floor --json file `path` into *out (the library's one reader of
/// the file, which the hot tier's AUTO placement uses too). A figure the file lacks, or a file
/// that is not JSON, reads as 0; NG_ERR_IO when the file cannot be opened.
ng_status ng_bench_rates_read(ng_bench_rates *out, const char *path);

/// Where ng_trainer_create's time went, in seconds (ng_trainer_startup).
typedef struct {
  double features_copy_s; ///< copying the feature table into huge pages (features_memory), or 0
  double hot_upload_s;    ///< copying the hot rows into device memory, or 0
  double register_s;      ///< registering the cold rows for zero-copy reads, or 0
  double total_s;         ///< the whole of ng_trainer_create
  double sampler_s;       ///< putting the topology in device memory for its sampler, or 0
  /// sizing the workers' first staging slots from the first mini-batch (page-locking them on
  /// CUDA) before the first epoch, and the largest size they were given (docs/scheduler.md), or 0
  double staging_s;
  int64_t staging_slot_bytes;
} ng_startup_times;
/// The set-up times of `trainer` into *out.
ng_status ng_trainer_startup(ng_startup_times *out, ng_trainer_t trainer);
/// Destroys a trainer; NULL is accepted.
void ng_trainer_destroy(ng_trainer_t trainer);
/// The name of an optimizer ("adam", "sgd"; "?" when unknown), as ng_optimizer_parse reads it.
const char *ng_optimizer_name(ng_optimizer optimizer);
/// Parses an optimizer's name into *out; NG_ERR_INVALID_ARG for an unknown name.
ng_status ng_optimizer_parse(ng_optimizer *out, const char *name);
/// The name of a feature normalisation ("none", "row"; "?" for NG_NORMALIZE_AUTO and unknown
/// values), as checkpoints record it and ng_normalize_parse reads it.
const char *ng_normalize_name(ng_normalize normalize);
/// Parses a normalisation's name ("none", "row") into *out; NG_ERR_INVALID_ARG otherwise.
ng_status ng_normalize_parse(ng_normalize *out, const char *name);

/* ------------------------------------------------------------------------------------------ */
/* Hot-set reordering                                                                          */
/* ------------------------------------------------------------------------------------------ */

/// How ng_dataset_reorder() scores how often sampling will read a node's features.
typedef enum {
  NG_HOT_DEGREE = 0, ///< in-degree: how often the node appears in rows
  NG_HOT_RPR = 1,    ///< reverse PageRank: rank flows from a node to the neighbours in its row
  NG_HOT_WRPR = 2,   ///< weighted reverse PageRank: teleport only to training nodes
} ng_hot_score;

/// Fractions of the nodes for which ng_reorder_opts.entry_share reports a share.
#define NG_REORDER_SHARES 3

typedef struct {
  size_t size;             ///< sizeof(ng_reorder_opts)
  ng_hot_score score;      ///< the score that orders the nodes (descending, ties by id);
                           ///< the default, in-degree, had the best hit rate on generated graphs
  int32_t iterations;      ///< PageRank iterations of NG_HOT_RPR / NG_HOT_WRPR (>= 1)
  int threads;             ///< OpenMP threads (0: the OpenMP default); output never depends on it
  ng_progress_fn progress; ///< optional; phases "scores", "graph", "features"
  void *progress_ctx;      ///< passed to `progress`
  double *entry_share;     ///< optional out [NG_REORDER_SHARES]: share of all row entries pointing
                           ///< into the first floor(5%, 10%, 25% of nodes) new ids (on success)
} ng_reorder_opts;
#define NG_REORDER_OPTS_INIT                                                                       \
  { sizeof(ng_reorder_opts), NG_HOT_DEGREE, 10, 0, NULL, NULL, NULL }

/// Writes a copy of `src` into folder `dst_dir` (which must not exist) whose nodes are
/// renumbered by descending score, so that the hottest nodes are ids [0, H) for any H. Rows keep
/// their neighbours' original order (renumbered, not re-sorted); features, labels and splits
/// move with their nodes (split ids sorted); orig_id.npy maps every new id to the id it has in
/// the dataset `src` was made from (src's own id when src has no orig_id.npy). Written
/// atomically; nothing is left behind on failure or interruption. `src` is borrowed; `opts` may
/// be NULL for defaults.
ng_status ng_dataset_reorder(const char *dst_dir, ng_dataset_t src, const ng_reorder_opts *opts);

/* ---- link prediction (docs/link-prediction.md) ---- */

/// Options of ng_dataset_split_edges().
typedef struct {
  size_t size;         ///< sizeof(ng_split_edges_opts)
  double val, test;    ///< shares of the edges held out for validation and test, each in [0, 1)
  int32_t neg_per_pos; ///< K: fixed negatives written per held-out positive (>= 1)
  uint64_t seed;       ///< the split and the negatives derive from it alone
  /// 1: the graph stores every edge both ways; an edge {u, v} (u < v) is one candidate, and
  /// holding it out removes both entries. -1 (the default): dataset.json's "undirected".
  int32_t undirected;
  int threads; ///< OpenMP threads (0: the OpenMP default); the output never depends on it
  /// The held-out negatives' sources: 0 (the default) the positive's own, with a destination
  /// drawn uniformly (OGB's corruption, for MRR and Hits@K); 1 both ends drawn uniformly (the
  /// Planetoid protocol's random non-edges, for AUC and AP).
  int32_t neg_source;
} ng_split_edges_opts;
#define NG_SPLIT_EDGES_OPTS_INIT                                                                   \
  { sizeof(ng_split_edges_opts), 0.05, 0.10, 100, 1, -1, 0, 0 }

/// What a split holds (ng_dataset_split_edges, ng_link_info).
typedef struct {
  size_t size;         ///< sizeof(ng_link_split_info), set by the caller
  int64_t train;       ///< positive training edges (the message-passing graph's candidates)
  int64_t val, test;   ///< held-out positives
  int32_t neg_per_pos; ///< K fixed negatives per held-out positive
  int32_t undirected;  ///< 1: edges are node pairs stored both ways
  int64_t mp_edges;    ///< adjacency entries of the message-passing graph (links/indices.npy)
  uint64_t seed;       ///< the split's seed
  int32_t neg_source;  ///< ng_split_edges_opts.neg_source
} ng_link_split_info;
#define NG_LINK_SPLIT_INFO_INIT                                                                    \
  { sizeof(ng_link_split_info), 0, 0, 0, 0, 0, 0, 0, 0 }

/// Splits the edges of the dataset folder `dir` for link prediction and writes the split into
/// `dir`/links/ (docs/dataset-format.md, "Link splits"): training, validation and test positive
/// edges, K fixed negatives per held-out positive (node pairs that are neither self loops nor
/// edges of the full graph; see opts->neg_source), and the message-passing graph, the
/// dataset's CSR without the validation and test edges, which link training samples from so
/// that no held-out edge leaks. Deterministic from opts->seed (any thread count). An existing
/// links/ is replaced; the new one appears whole or not at all. `info` (may be NULL) receives the
/// counts. `opts` may be NULL for defaults.
ng_status ng_dataset_split_edges(ng_link_split_info *info, const char *dir,
                                 const ng_split_edges_opts *opts);

/// The decoder that scores a node pair from its two embeddings (ng_link_opts.decoder).
typedef enum {
  NG_LINK_DECODER_DOT = 0, ///< <h_u, h_v>
  NG_LINK_DECODER_MLP = 1, ///< w2 . relu(W1 (h_u (.) h_v) + b1) + b2 (hidden width mlp_hidden)
} ng_link_decoder;

/// How training negatives are drawn (ng_link_opts.neg).
typedef enum {
  NG_LINK_NEG_UNIFORM = 0, ///< both ends drawn uniformly (PyG's binary negative sampling)
  /// the positive's source kept, its destination drawn in proportion to degree^0.75 (word2vec's
  /// rule, degrees of the message-passing graph)
  NG_LINK_NEG_DEGREE = 1,
} ng_link_neg;

/// The names of a decoder ("dot", "mlp") and of a negative sampler ("uniform", "degree"); "?" when
/// unknown. The parsers read them back (NG_ERR_INVALID_ARG naming the choices).
const char *ng_link_decoder_name(ng_link_decoder decoder);
ng_status ng_link_decoder_parse(ng_link_decoder *out, const char *name);
const char *ng_link_neg_name(ng_link_neg neg);
ng_status ng_link_neg_parse(ng_link_neg *out, const char *name);

/// Options of link training, beside the ng_train_opts of the GNN.
typedef struct {
  size_t size;             ///< sizeof(ng_link_opts)
  ng_link_decoder decoder; ///< DOT (default) or MLP
  ng_link_neg neg;         ///< UNIFORM (default) or DEGREE
  int32_t neg_per_pos;     ///< negatives per positive in training (>= 1; default 1)
  int32_t mlp_hidden;      ///< the MLP decoder's hidden width (default 64)
  /// 1: each mini-batch's targets (its pairs' endpoints) paired with themselves are positives
  /// too, as GAE reconstructs A + I; 0 (the default): only the edges.
  int32_t self_pairs;
} ng_link_opts;
#define NG_LINK_OPTS_INIT                                                                          \
  { sizeof(ng_link_opts), NG_LINK_DECODER_DOT, NG_LINK_NEG_UNIFORM, 1, 64, 0 }

/// Ranking and classification figures of a split's held-out positives against their fixed
/// negatives (ng_link_trainer_evaluate, ng_link_metrics_compute).
typedef struct {
  size_t size;   ///< sizeof(ng_link_metrics), set by the caller
  double auc;    ///< ROC AUC over all positive and negative scores (ties count one half)
  double ap;     ///< average precision over the same scores (tied scores form one step)
  double mrr;    ///< mean over positives of 1 / rank among itself and its K negatives
  double hits10; ///< share of positives whose rank is at most 10
  double hits50, hits100;
  double loss; ///< mean BCE-with-logits over the positives and negatives
  int64_t positives, negatives;
} ng_link_metrics;
#define NG_LINK_METRICS_INIT                                                                       \
  { sizeof(ng_link_metrics), 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/// The metrics of `n` positive scores `pos[n]`, each against its `k` negatives `neg[n * k]` (row
/// i: positive i's). A positive's rank is 1 + the negatives scored above it + half of those
/// scored equal (OGB's optimistic/pessimistic mean); AUC counts ties one half; AP takes tied
/// scores as one threshold. n >= 1, k >= 1; non-finite scores are refused.
ng_status ng_link_metrics_compute(ng_link_metrics *out, const float *pos, const float *neg,
                                  int64_t n, int32_t k);

typedef struct ng_link_trainer *ng_link_trainer_t;

/// Creates a link-prediction trainer for `model` (its last layer's output is the node
/// embedding) on the dataset folder `ds` (opened with ng_dataset_open; borrowed, it must outlive
/// the trainer) and its split links/ (ng_dataset_split_edges). The GNN runs on the split's
/// message-passing graph with the runtime of node training (`opts`: batch is positive edges per
/// mini-batch, 0 = all of them at once, i.e. full-batch with full fanouts); `lopts` (NULL:
/// defaults) chooses the decoder and the negatives.
ng_status ng_link_trainer_create(ng_link_trainer_t *out, ng_dataset_t ds, ng_model_t model,
                                 const ng_train_opts *opts, const ng_link_opts *lopts);
/// Trains one epoch over the shuffled positive training edges: each mini-batch samples the
/// neighbourhoods of its pairs' endpoints as one seed set, scores the pairs with the decoder and
/// steps on BCE with logits. out->train_acc is the share of pairs on the right side of 0.
ng_status ng_link_trainer_epoch(ng_epoch_stats *out, ng_link_trainer_t trainer);
/// Evaluates split NG_SPLIT_VAL or NG_SPLIT_TEST: embeddings of every node by full-neighbour
/// layer-wise inference on the message-passing graph, then the held-out positives and their
/// fixed negatives scored by the decoder.
ng_status ng_link_trainer_evaluate(ng_link_metrics *out, ng_link_trainer_t trainer, ng_split split);
/// The split's counts (links/links.json) into *out.
ng_status ng_link_info(ng_link_split_info *out, ng_link_trainer_t trainer);
/// Writes the trainer's model to the checkpoint `path` (atomically; docs/link-prediction.md,
/// "Checkpoints"): the GNN's parameters and optimizer states with the same keys and tensors as
/// ng_trainer_save, plus the decoder: "link.decoder" (and "link.mlp_hidden") in the metadata and,
/// for the MLP, its weights as the tensors decoder.w1 [dim, hidden], decoder.b1, decoder.w2,
/// decoder.b2. The serving engine built from it answers pair-score requests; a node-class
/// trainer's ng_trainer_load_weights and the engine read its GNN as any checkpoint's (the last
/// layer is then the embedding); ng_trainer_load (resuming node training) refuses it.
ng_status ng_link_trainer_save(ng_link_trainer_t trainer, const char *path);
/// Loads the weights of a link checkpoint (ng_link_trainer_save) into the trainer: the GNN's
/// parameters and the decoder's (not the optimizer's state or the counters). The model, the
/// feature normalisation and the decoder must be the checkpoint's (NG_ERR_FORMAT naming the
/// setting otherwise); a node-classification checkpoint is refused.
ng_status ng_link_trainer_load_weights(ng_link_trainer_t trainer, const char *path);
/// Scores the `n` pairs (src[i], dst[i]) into scores[n] offline: the embeddings of their ends by
/// full-neighbour layer-wise inference over the split's message-passing graph (as
/// ng_link_trainer_evaluate), then the decoder. The serving engine's answer to the same pairs on
/// the same graph is the same bits on the CPU backend. All arrays are borrowed.
ng_status ng_link_trainer_score(float *scores, ng_link_trainer_t trainer, const int64_t *src,
                                const int64_t *dst, int64_t n);
/// Accepts NULL.
void ng_link_trainer_destroy(ng_link_trainer_t trainer);

/* ---- heterogeneous datasets (docs/heterogeneous.md) ---------------------------------------- */

/// An open heterogeneous dataset: several node types, each with its own count and feature table,
/// and several edge types (src type, relation, dst type), each a CSR over its destination type.
typedef struct ng_hetero *ng_hetero_t;

/// Longest node type or relation name, in bytes (names are letters, digits, '_' and '-').
#define NG_HETERO_NAME_MAX 31

/// Counts of an open heterogeneous dataset.
typedef struct {
  size_t size;              ///< sizeof(ng_hetero_info), set by the caller
  char name[64];            ///< dataset.json "name", NUL-terminated (truncated if longer)
  int32_t node_types;       ///< number of node types (1 for a homogeneous folder)
  int32_t edge_types;       ///< number of edge types (1 for a homogeneous folder)
  int64_t nodes;            ///< nodes of every type together
  int64_t edges;            ///< stored entries of every edge type together
  int32_t target;           ///< the labelled node type; -1 when no type has labels
  int32_t classes;          ///< classes of the target type's labels; 0 without labels
  int32_t index_bytes;      ///< 4 (int32 indices) or 8 (int64 indices), for every edge type
  int32_t homogeneous;      ///< 1 when the folder is in the homogeneous layout
  int64_t train, val, test; ///< sizes of the three splits (ids of the target type)
} ng_hetero_info;
#define NG_HETERO_INFO_INIT                                                                        \
  { sizeof(ng_hetero_info), {0}, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0 }

/// One node type.
typedef struct {
  size_t size;                       ///< sizeof(ng_node_type_info), set by the caller
  char name[NG_HETERO_NAME_MAX + 1]; ///< the type's name
  int64_t count;                     ///< nodes of this type; their ids are 0 .. count-1
  int64_t feature_dim;               ///< columns of its feature table; 0: none (learn an embedding)
  int32_t classes;                   ///< classes of its labels; 0 unless it is the target type
} ng_node_type_info;
#define NG_NODE_TYPE_INFO_INIT                                                                     \
  { sizeof(ng_node_type_info), {0}, 0, 0, 0 }

/// One edge type: a CSR whose rows are the destination type's nodes and whose entries are ids of
/// the source type (the neighbours a destination node aggregates from over this relation).
typedef struct {
  size_t size;                           ///< sizeof(ng_edge_type_info), set by the caller
  char relation[NG_HETERO_NAME_MAX + 1]; ///< the relation's name
  int32_t src_type;                      ///< node type of the entries (message senders)
  int32_t dst_type;                      ///< node type of the rows (message receivers)
  int64_t edges;                         ///< stored entries
} ng_edge_type_info;
#define NG_EDGE_TYPE_INFO_INIT                                                                     \
  { sizeof(ng_edge_type_info), {0}, 0, 0, 0 }

/// Opens the dataset folder `dir` (borrowed) for reading, validating it as docs/dataset-format.md
/// says: every count, dtype and shape, every CSR's structure and source-type id range, labels,
/// splits and (sampled or, with opts->check_features, all) features. A folder in the homogeneous
/// layout opens as one node type "node" and one edge type (node, "to", node). `opts` may be NULL.
/// Close with ng_hetero_close(); on failure *out is NULL and ng_last_error() says what and why.
ng_status ng_hetero_open(ng_hetero_t *out, const char *dir, const ng_open_opts *opts);
/// Closes a dataset from ng_hetero_open(); accepts NULL.
void ng_hetero_close(ng_hetero_t ds);
/// Copies the dataset's counts into `*out` (its `size` set by the caller).
ng_status ng_hetero_info_get(ng_hetero_info *out, ng_hetero_t ds);
/// Copies node type `type` (0 .. node_types-1, in dataset.json's order) into `*out`.
ng_status ng_hetero_node_type(ng_node_type_info *out, ng_hetero_t ds, int32_t type);
/// Copies edge type `rel` (0 .. edge_types-1, in dataset.json's order) into `*out`.
ng_status ng_hetero_edge_type(ng_edge_type_info *out, ng_hetero_t ds, int32_t rel);
/// The index of the node type named `name` (borrowed); NG_ERR_NOT_FOUND lists the names.
ng_status ng_hetero_find_node_type(int32_t *out, ng_hetero_t ds, const char *name);
/// The index of edge type (src, relation, dst), all borrowed; NG_ERR_NOT_FOUND when absent.
ng_status ng_hetero_find_edge_type(int32_t *out, ng_hetero_t ds, const char *src,
                                   const char *relation, const char *dst);
/// Node type `type`'s feature table, [count, feature_dim] row-major; NULL when it has none.
/// Borrowed, valid while `ds` is open.
ng_status ng_hetero_features(const float **out, ng_hetero_t ds, int32_t type);
/// The target type's labels, [count], -1 = unlabelled; NULL without labels. Borrowed.
ng_status ng_hetero_labels(const int32_t **out, ng_hetero_t ds);
/// Edge type `rel`'s CSR: `*indptr` [dst count + 1] and `*indices` [edges] of `*index_bytes`
/// bytes each (4: int32, 8: int64). Borrowed, valid while `ds` is open.
ng_status ng_hetero_csr(const int64_t **indptr, const void **indices, int32_t *index_bytes,
                        ng_hetero_t ds, int32_t rel);
/// Split `split` (0 train, 1 val, 2 test): ids of the target type. Borrowed; NULL when empty.
ng_status ng_hetero_split(const int64_t **ids, int64_t *n, ng_hetero_t ds, int split);

/// Options of ng_hetero_generate(): a heterogeneous graph whose node types, feature widths and
/// relations are given as text (the command line's `--types` and `--relations`; presets from
/// ng_hetero_preset()), with labels on the target type planted so that they are learnable from
/// the relations: every node of every type has a latent class, and each entry of a relation's
/// row comes, with probability `homophily`, from the row node's class.
typedef struct {
  size_t size;      ///< sizeof(ng_hetero_generate_opts)
  const char *name; ///< dataset.json "name" (copied); NULL gives "generated-hetero"
  /// Node types, comma-separated `NAME:COUNT:DIM` (COUNT takes k, M, G; DIM 0: no features),
  /// e.g. "paper:736389:128,author:1134649:0".
  const char *types;
  /// Edge types, comma-separated `SRC:RELATION:DST:DEGREE`: DEGREE is the mean number of
  /// entries per DST row (neighbours of type SRC each DST node aggregates from), e.g.
  /// "author:writes:paper:9.7".
  const char *relations;
  const char *target;      ///< the labelled type's name; NULL: the first type
  double scale;            ///< every type's COUNT is multiplied by this (> 0; 1: as written)
  int32_t classes;         ///< classes of the target type (1 to 65536)
  double homophily;        ///< probability that an entry comes from the row node's class [0, 1]
  double feature_noise;    ///< standard deviation of the noise around each class's mean feature
  double train_frac;       ///< share of target nodes in the training split
  double val_frac;         ///< share in the validation split
  double test_frac;        ///< share in the test split
  uint64_t seed;           ///< the output depends only on the options and this seed
  int threads;             ///< OpenMP threads (0: the OpenMP default); never changes the output
  ng_progress_fn progress; ///< optional progress callback
  void *progress_ctx;      ///< passed to `progress`
} ng_hetero_generate_opts;
#define NG_HETERO_GENERATE_OPTS_INIT                                                               \
  {                                                                                                \
    sizeof(ng_hetero_generate_opts), NULL, NULL, NULL, NULL, 1.0, 16, 0.7, 1.0, 0.1, 0.1, 0.2, 1,  \
        0, NULL, NULL                                                                              \
  }

/// The `types`, `relations` and `target` text of a named shape: "mag" (ogbn-mag's four types and
/// its relations with written_by, the reverse of writes, at ogbn-mag's counts) or "igbh"
/// (IGBH's four types at 1024 features, at about IGBH-small's counts). The strings are static.
/// NG_ERR_NOT_FOUND names the presets for another name.
ng_status ng_hetero_preset(const char **types, const char **relations, const char **target,
                           const char *preset);

/// Generates a heterogeneous dataset into folder `dst_dir`, which must not exist; written
/// atomically, as ng_dataset_generate. Every draw is a function of (seed, purpose, type or
/// relation, node) through core/rng.h, so the files do not depend on the thread count.
ng_status ng_hetero_generate(const char *dst_dir, const ng_hetero_generate_opts *opts);

/// Converts an OGB heterogeneous node-property folder (ogbn-mag's layout: raw/num-node-dict,
/// raw/relations/<src>___<rel>___<dst>/edge.csv.gz, raw/node-feat/<type>/,
/// raw/node-label/<type>/, split/<scheme>/<type>/) into the heterogeneous dataset `dst_dir`,
/// which must not exist; written atomically. Of `opts` (may be NULL): `name`, `split` (the
/// scheme), `undirected` (adds each relation's reverse, rev_<relation>; a relation within one
/// type is stored both ways) and the progress callback are used. `src` is borrowed.
ng_status ng_hetero_convert_ogb(const char *dst_dir, const char *src, const ng_convert_opts *opts);

/// Options of ng_dataset_generate_links(): the planted communities.
typedef struct {
  size_t size;         ///< sizeof(ng_generate_links_opts)
  int64_t communities; ///< communities, 1 to nodes; 0: about one per 256 nodes, at least `classes`
} ng_generate_links_opts;
#define NG_GENERATE_LINKS_OPTS_INIT                                                                \
  { sizeof(ng_generate_links_opts), 0 }

/// Generates a dataset for link prediction into `dst_dir` (docs/generate.md#links): the graph
/// of ng_dataset_generate() with the classes replaced, for the edges and the features, by
/// `links->communities` planted communities (a degree-corrected stochastic block model: a row
/// draws `homophily` of its entries from its own community, each in proportion to the weights;
/// every community has its own mean feature). A node's label is its community modulo `classes`.
/// `links` may be NULL (the defaults). Deterministic from the seed, whatever the thread count.
ng_status ng_dataset_generate_links(const char *dst_dir, const ng_generate_opts *opts,
                                    const ng_generate_links_opts *links);

/// Caps each later epoch of `trainer` at `iters` mini-batches (0, the default: every training
/// edge once): the epoch trains the first iters x batch positives of its shuffle, which depends
/// on (seed, epoch), so successive epochs train different edges. For benchmarks on graphs whose
/// epoch is hundreds of thousands of mini-batches (the L4 workload, docs/eval.md).
ng_status ng_link_trainer_set_epoch_iters(ng_link_trainer_t trainer, int64_t iters);

/* ---- relational models on heterogeneous datasets (docs/heterogeneous.md#models) ---------- */

/// A relational model: per-relation weights over a heterogeneous mini-batch.
typedef enum {
  /// R-GCN (Schlichtkrull et al.): h'_v = act(W_0,t h_v + b_t + sum over relations r into v's
  /// type t of W_r mean over N_r(v) of h_u), one self weight per node type.
  NG_HETERO_MODEL_RGCN = 0,
  /// R-SAGE: one GraphSAGE layer per relation (root weight, neighbour weight and bias of its own,
  /// as PyG's HeteroConv of SAGEConv), summed over the relations into a type.
  NG_HETERO_MODEL_RSAGE = 1,
  /// R-GAT (MLPerf's IGBH model): one GAT layer per relation (its own source and destination
  /// weights, attention vectors, heads and bias), summed over the relations into a type.
  NG_HETERO_MODEL_RGAT = 2
} ng_hetero_model_kind;
/// "rgcn", "rsage"; "?" for another value.
const char *ng_hetero_model_name(ng_hetero_model_kind kind);
/// The kind named `name`; NG_ERR_INVALID_ARG (the message lists the names) for another.
ng_status ng_hetero_model_parse(ng_hetero_model_kind *out, const char *name);

/// Options of ng_hetero_trainer_create().
typedef struct {
  size_t size;                ///< sizeof(ng_hetero_train_opts)
  ng_hetero_model_kind model; ///< default R-GCN
  int32_t layers;             ///< hops, 1 to 8 (default 2)
  int64_t hidden;             ///< columns of the hidden layers (default 64)
  /// Columns of the learned embedding of each node type without features (default 0: hidden).
  int64_t embed_dim;
  /// Fanouts [layers], block 0 (the input layer) first, each for every relation; NULL: 10 each.
  /// -1 takes every neighbour, 0 none. Borrowed.
  const int32_t *fanouts;
  /// Optional [layers * relations]: rel_fanouts[l * relations + r] is relation r's fanout in
  /// block l, replacing `fanouts`. Borrowed.
  const int32_t *rel_fanouts;
  int32_t batch_size; ///< target nodes per mini-batch (default 256)
  int32_t eval_batch; ///< targets per mini-batch in evaluation (default 1024)
  float lr;           ///< Adam's learning rate (default 0.01)
  float weight_decay; ///< L2 on every parameter but the embeddings (default 0)
  uint64_t seed;      ///< parameters, shuffles and samples (default 1)
  int32_t threads;    ///< CPU backend threads (0: the default); the bits do not depend on it
  float dropout;      ///< dropout on every layer's input rows in training (default 0.5)
  /// R-GCN's basis decomposition: 0 (default), a weight per term; B > 0, each layer's weights of
  /// one input width are combinations of B shared bases (docs/heterogeneous.md#models).
  int32_t bases;
  /// R-GAT's attention heads (default 4): hidden layers concatenate them (hidden must be a
  /// multiple), the last layer averages them.
  int32_t heads;
} ng_hetero_train_opts;
#define NG_HETERO_TRAIN_OPTS_INIT                                                                  \
  {                                                                                                \
    sizeof(ng_hetero_train_opts), NG_HETERO_MODEL_RGCN, 2, 64, 0, NULL, NULL, 256, 1024, 0.01f,    \
        0.0f, 1, 0, 0.5f, 0, 4                                                                     \
  }
/// NG_HETERO_TRAIN_OPTS_INIT as a function, for bindings that cannot expand the macro.
void ng_hetero_train_opts_init(ng_hetero_train_opts *out);

/// Trains a relational model on the target type of a heterogeneous dataset (CPU backend):
/// mini-batches of shuffled training ids, per-relation sampling, cross-entropy, Adam.
typedef struct ng_hetero_trainer *ng_hetero_trainer_t;

/// A trainer over `ds` (borrowed: keep it open until ng_hetero_trainer_destroy) with `opts`
/// (NULL: defaults; copied). The dataset needs a target type with classes and a training split.
ng_status ng_hetero_trainer_create(ng_hetero_trainer_t *out, ng_hetero_t ds,
                                   const ng_hetero_train_opts *opts);
/// Destroys a trainer; accepts NULL.
void ng_hetero_trainer_destroy(ng_hetero_trainer_t t);
/// One epoch over the training split: *loss the mean of the mini-batches' mean losses,
/// *accuracy the fraction of training targets predicted right during the epoch (either may be
/// NULL).
ng_status ng_hetero_trainer_epoch(double *loss, double *accuracy, ng_hetero_trainer_t t);
/// Accuracy and mean loss on split `split` with every neighbour of every hop (either output may
/// be NULL). The result does not depend on threads.
ng_status ng_hetero_trainer_evaluate(double *accuracy, double *loss, ng_hetero_trainer_t t,
                                     ng_split split);
/// The model's parameters (*n floats, borrowed until the next call on the trainer): the
/// embeddings, then each layer's weights and biases (docs/heterogeneous.md#models).
ng_status ng_hetero_trainer_params(const float **params, int64_t *n, ng_hetero_trainer_t t);
/// Saves the model (parameters, optimizer state, description, the dataset's schema) to `path`
/// atomically, through the checkpoint codec (docs/heterogeneous.md#checkpoints).
ng_status ng_hetero_trainer_save(ng_hetero_trainer_t t, const char *path);
/// Replaces the parameters with those of checkpoint `path`, which must describe the same model
/// (kind, layers, widths, bases, heads) on a dataset of the same schema; the file is read
/// strictly (a damaged or edited one is refused) and the trainer is unchanged on failure.
ng_status ng_hetero_trainer_load_weights(ng_hetero_trainer_t t, const char *path);
/// Logits [n, classes] (host, caller-allocated) of the target-type nodes `ids` [n], every
/// neighbour, without dropout: the evaluation's forward pass, in batches of eval_batch.
ng_status ng_hetero_trainer_predict(float *logits, ng_hetero_trainer_t t, const int64_t *ids,
                                    int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* NEARGNN_H */
