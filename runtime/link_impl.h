/* Link prediction (runtime/link.c, runtime/link_split.c): the split folder <dataset>/links/
 * (docs/dataset-format.md, "Link splits") and what the trainer and the tests share. */
#ifndef NG_LINK_IMPL_H
#define NG_LINK_IMPL_H

#include "core_impl.h"
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

#endif /* NG_LINK_IMPL_H */
