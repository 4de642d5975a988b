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

#endif /* NG_TEST_HETERO_H */
