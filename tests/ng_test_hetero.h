/* A small real heterogeneous dataset for the suites: Cora with generated authors
 * (docs/heterogeneous.md#a-small-real-dataset-for-the-tests), built at test time. */
#ifndef NG_TEST_HETERO_H
#define NG_TEST_HETERO_H

#include "ng_test.h"

enum { CORA_AUTHORS = 1500, CORA_CLASSES = 7, CORA_MAX_AUTHORS_PER_PAPER = 3 };
#define CORA_AUTHOR_HOMOPHILY 0.8
#define CORA_AUTHOR_SEED 41u

/// The home class of generated author `a`.
int32_t ng_test_cora_author_class(int64_t a);
/// Writes Cora with generated authors into `dir` (which must not exist) from the open Cora
/// dataset `cora` (borrowed).
ng_status ng_test_build_cora_hetero(const char *dir, ng_dataset_t cora);

/// The same graph as one homogeneous dataset, built in memory from the open fixture `het`
/// (borrowed; keep it open while the result is): papers are nodes 0 .. 2707 and author a is node
/// 2708 + a, without features (zero rows); every relation's entries are edges of the one graph
/// (a paper's row is its cites row then its writes row, an author's its written_by row); the
/// papers' labels and the fixture's splits. The homogeneous GCN the relational models are
/// compared with runs on it. Close with ng_dataset_close; *owned (free) holds its arrays.
ng_status ng_test_cora_union(ng_dataset_t *out, void **owned, ng_hetero_t het);

#endif /* NG_TEST_HETERO_H */
