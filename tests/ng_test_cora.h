/* Cora (standard Planetoid split, ../shared/data/cora) and Kipf & Welling's recipe, shared by
 * the suites that train on it, so that the recipe the accuracy bars rest on is written once. */
#ifndef NG_TEST_CORA_H
#define NG_TEST_CORA_H

#include "ng_test.h"

/// Cora, converted once into the test's temporary folder and opened with feature checks; ends
/// the suite (exit 1) when it cannot be converted.
ng_dataset_t ng_test_fetch_cora(void);
/// A small GraphSAGE model for Cora: 1433 -> 16 (fanout 5, dropout 0.5) -> 7 (fanout 10).
ng_model_t ng_test_cora_sage(void);
/// Kipf & Welling's 2-layer model for Cora: 1433 -> `hidden` (ReLU) -> 7, dropout 0.5 on each
/// layer's input, weight decay 5e-4 on the first layer; GCN's normalised sum for NG_MODEL_GCN,
/// the mean otherwise. `fanout0` is the input layer's (-1: every neighbour), `fanout1` the
/// output layer's.
ng_model_t ng_test_cora_recipe_model(ng_model_kind kind, int32_t fanout0, int32_t fanout1,
                                     int64_t hidden);
/// The recipe's training options: Adam with lr 0.01, row-normalised features, full batch, `seed`.
ng_train_opts ng_test_cora_recipe_opts(uint64_t seed);

#endif /* NG_TEST_CORA_H */
