/* Compressed sparse rows over node ids: the graph type that the sampler (cpu/) reads and the
 * dataset layer (runtime/) builds, kept here, below both, so that neither includes the other.
 * Row v lists the neighbours v aggregates from. Indices are int32 when the graph has fewer than
 * 2^31 nodes, else int64: exactly one of idx32/idx64 is set. The utilities that build and
 * transform graphs are the dataset layer's (runtime/graph_impl.h). */
#ifndef NG_CSR_IMPL_H
#define NG_CSR_IMPL_H

#include "core_impl.h"

typedef struct {
  int64_t nodes;
  int64_t nnz;
  int64_t *indptr; ///< [nodes + 1], indptr[0] == 0, monotone, indptr[nodes] == nnz
  int32_t *idx32;  ///< [nnz] when nodes < 2^31
  int64_t *idx64;  ///< [nnz] otherwise
} ng_csr;

/// The neighbour at position `e` of the index array, whichever its width.
static inline int64_t ng__csr_index(const ng_csr *g, int64_t e) {
  return g->idx32 ? (int64_t)g->idx32[e] : g->idx64[e];
}

#endif /* NG_CSR_IMPL_H */
