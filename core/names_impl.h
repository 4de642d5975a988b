/* The one name table of each enum of the public API that is written as text somewhere: in
 * messages, on the command line, in checkpoints, in the Python package. Each table is an X-macro
 * X(value, "name") in the enum's order; everything else is derived from it: the public
 * ng_<enum>_name()/ng_<enum>_parse() pairs (core/names.c), the checkpoint's strings
 * (runtime/checkpoint.c), the command's choice lists (through the public functions, apps/) and
 * the Python package's tables (read from the library at import). core/names.c checks at compile
 * time that each table lists its enum's values as 0, 1, 2, ..., so that a name's index in its
 * table is its value. */
#ifndef NG_NAMES_IMPL_H
#define NG_NAMES_IMPL_H

#include "neargnn.h"

/* clang-format off */
#define NG_MODEL_NAMES(X)                                                                          \
  X(NG_MODEL_SAGE, "sage") X(NG_MODEL_GCN, "gcn") X(NG_MODEL_GAT, "gat") X(NG_MODEL_GIN, "gin")    \
  X(NG_MODEL_SAGE_POOL, "sage-pool")

#define NG_MODE_NAMES(X)                                                                           \
  X(NG_MODE_AUTO, "auto") X(NG_MODE_CPU, "cpu") X(NG_MODE_BASELINE, "baseline")                    \
  X(NG_MODE_ZEROCOPY, "zerocopy") X(NG_MODE_PARTIAL, "partial")                                    \
  X(NG_MODE_HYBRID_STATIC, "hybrid-static") X(NG_MODE_HYBRID, "hybrid")

#define NG_FETCH_NAMES(X)                                                                          \
  X(NG_FETCH_PARTIAL, "partial") X(NG_FETCH_BATCH, "batch") X(NG_FETCH_ZCOPY, "zcopy")             \
  X(NG_FETCH_AUTO, "auto")

#define NG_OPTIMIZER_NAMES(X) X(NG_OPTIMIZER_ADAM, "adam") X(NG_OPTIMIZER_SGD, "sgd")

/* NG_NORMALIZE_AUTO (-1, "take the checkpoint's") is an option of the engine, not a
 * normalisation: it has no name and is never recorded. */
#define NG_NORMALIZE_NAMES(X) X(NG_NORMALIZE_NONE, "none") X(NG_NORMALIZE_ROW, "row")

#define NG_LINK_DECODER_NAMES(X) X(NG_LINK_DECODER_DOT, "dot") X(NG_LINK_DECODER_MLP, "mlp")
#define NG_LINK_NEG_NAMES(X) X(NG_LINK_NEG_UNIFORM, "uniform") X(NG_LINK_NEG_DEGREE, "degree")
#define NG_HETERO_MODEL_NAMES(X)                                                                   \
  X(NG_HETERO_MODEL_RGCN, "rgcn") X(NG_HETERO_MODEL_RSAGE, "rsage") X(NG_HETERO_MODEL_RGAT, "rgat")

#define NG_CACHE_PLACEMENT_NAMES(X)                                                                \
  X(NG_CACHE_REPLICATED, "replicated") X(NG_CACHE_PARTITIONED, "partitioned")                      \
  X(NG_CACHE_AUTO, "auto")

#define NG_COLD_FETCH_NAMES(X)                                                                     \
  X(NG_COLD_FETCH_OWN, "own") X(NG_COLD_FETCH_COOPERATIVE, "cooperative")

/* The parts of an aggregator, as checkpoints record them. */
#define NG_REDUCE_NAMES(X) X(NG_REDUCE_SUM, "sum") X(NG_REDUCE_MAX, "max") X(NG_REDUCE_MIN, "min")
#define NG_EDGE_WEIGHT_NAMES(X)                                                                    \
  X(NG_EDGE_WEIGHT_NONE, "none") X(NG_EDGE_WEIGHT_GCN_NORM, "gcn_norm")
#define NG_FINALIZE_NAMES(X) X(NG_FINALIZE_NONE, "none") X(NG_FINALIZE_MEAN, "mean")
#define NG_COMBINE_NAMES(X) X(NG_SAGE_SUM, "sum") X(NG_SAGE_CONCAT, "concat")
#define NG_ACTIVATION_NAMES(X) X(NG_ACT_NONE, "none") X(NG_ACT_RELU, "relu")

/* The built-in aggregators: X(initializer, "name"), an aggregator's name being the first entry
 * whose parts it has (ng_aggregator_name). Not an enum: the index is the built-in's number in
 * ng_aggregator_builtin_name. */
#define NG_AGGREGATOR_NAMES(X)                                                                     \
  X(NG_AGGREGATOR_MEAN, "mean") X(NG_AGGREGATOR_SUM, "sum") X(NG_AGGREGATOR_MAX, "max")            \
  X(NG_AGGREGATOR_MIN, "min") X(NG_AGGREGATOR_GCN, "gcn")
/* clang-format on */

/// The names of a table as an array initializer: `static const char *const N[] =
/// {NG_MODEL_NAMES(NG_NAME_ONLY)};`.
#define NG_NAME_ONLY(value, name) name,

/// The index of `name` in `names[0, n)`, or -1 (NULL matches nothing).
int ng__name_index(const char *const *names, int n, const char *name);

#endif
