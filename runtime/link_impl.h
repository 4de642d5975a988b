/* Link prediction (runtime/link.c, runtime/link_split.c): the split folder <dataset>/links/
 * (docs/dataset-format.md, "Link splits") and what the trainer and the tests share. */
#ifndef NG_LINK_IMPL_H
#define NG_LINK_IMPL_H

#include "core_impl.h"
#include "csr_impl.h"
#include "npy_impl.h"

#define NG_LINK_DIR "links"
#define NG_LINK_JSON "links.json"
#define NG_LINK_FORMAT "neargnn-links"
#define NG_LINK_VERSION 1

/// The arrays of a links folder; NG_LINK_FILE[] gives their names.
typedef enum {
  NG_LINK_ARR_INDPTR = 0, ///< int64 [nodes + 1]: the message-passing graph
  NG_LINK_ARR_INDICES,    ///< int32 or int64 (the dataset's index dtype) [mp_edges]
  NG_LINK_ARR_TRAIN_POS,  ///< int64 [train, 2]
  NG_LINK_ARR_VAL_POS,    ///< int64 [val, 2]
  NG_LINK_ARR_VAL_NEG,    ///< int64 [val, K, 2]: each positive's K negative pairs
  NG_LINK_ARR_TEST_POS,   ///< int64 [test, 2]
  NG_LINK_ARR_TEST_NEG,   ///< int64 [test, K, 2]
  NG_LINK_ARR_COUNT_
} ng_link_array;

extern const char *const NG_LINK_FILE[NG_LINK_ARR_COUNT_];

/// A node pair (source u, destination v); undirected splits store u < v.
typedef struct {
  int64_t u, v;
} ng_link_pair;

/// Whether (u, v) is in `sorted[n]` (sorted by u, then v).
bool ng__link_pair_find(const ng_link_pair *sorted, int64_t n, int64_t u, int64_t v);
/// qsort's order of pairs: by u, then v.
int ng__link_pair_cmp(const void *a, const void *b);

/* ---- the writers of a links folder (runtime/link_split.c), shared with the OGB link-property
 * converter (runtime/convert_ogbl.c) ---- */

/// The message-passing graph: `g` without every entry (row r, neighbour c), c != r, whose pair is
/// in `held` (n_held pairs, sorted): (r, c) itself, or with `undirected` (min, max). The arrays
/// (*indptr_out [nodes + 1], *indices_out in g's index width) are allocated here; the caller
/// frees them. Parallel over rows on `threads` OpenMP threads (>= 1); the output does not
/// depend on it.
ng_status ng__link_mp_graph(int64_t **indptr_out, void **indices_out, const ng_csr *g,
                            const ng_link_pair *held, int64_t n_held, bool undirected, int threads);
/// A split's arrays, as ng__link_write_split writes them.
typedef struct {
  int64_t nodes;
  const int64_t *indptr; ///< [nodes + 1]: the message-passing graph
  const void *indices;   ///< [indptr[nodes]], int64 when `wide`, else int32
  bool wide;
  const ng_link_pair *train, *val, *test; ///< the positives
  int64_t n_train, n_val, n_test;
  const ng_link_pair *val_neg, *test_neg; ///< [n_val, k], [n_test, k]
  int64_t k;
} ng_link_split_arrays;

/// Writes a links folder's arrays and links.json (from `in`, with the held-out shares `val` and
/// `test`) into `dir`, which must not hold them: the one writer of split-edges and the converters.
ng_status ng__link_write_split(const char *dir, const ng_link_split_arrays *a,
                               const ng_link_split_info *in, double val, double test);

/* ---- the decoder (runtime/link_score.c), shared by the trainer and the serving engine ---- */

/// A decoder with its weights (borrowed): the embedding's width `dim` and, for the MLP, its
/// hidden width and its parameters W1 [dim, hidden], b1 [hidden], w2 [hidden], b2 [1], one after
/// another in `mlp`.
typedef struct {
  ng_link_decoder decoder;
  int64_t dim, hidden;
  const float *mlp;
} ng_link_dec;

/// The MLP's score of embeddings a and b [dim]; hid [hidden] gets the pre-activations.
float ng__link_mlp_score(const ng_link_dec *dec, const float *a, const float *b, float *hid);
/// Scores of `n` pairs whose ends are rows u[i], v[i] of `h` [*, dim] into s[n], on up to
/// `threads` OpenMP threads. A pair's score is the same bits whatever the thread count and
/// whichever other pairs are scored with it: offline (runtime/link.c) and served
/// (serve/engine_forward.c) scores of the same embeddings are equal.
ng_status ng__link_score(const ng_link_dec *dec, float *s, const float *h, const int32_t *u,
                         const int32_t *v, int64_t n, int threads);

#endif /* NG_LINK_IMPL_H */
