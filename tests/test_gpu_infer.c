/* Layer-wise inference on the GPU (runtime/infer.c's device path): the input layer's hot rows
 * come from the device's hot tier, cold ones by zero-copy (zerocopy mode) or batched through
 * pinned staging (baseline mode). Every tier split and chunk size gives the same bits on the
 * GPU, subsets equal the rows of an all-node run, and the logits follow the CPU backend's
 * within fp32 tolerance. A generated graph (no data files). Exits 77 without CUDA or a GPU. */
#include "ng_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef NG_HAVE_CUDA
int main(void) {
  printf("skipped: this build has no CUDA backend\n");
  return 77;
}
#else
#include "ng_cuda.h"

enum { NODES = 20000, DIM = 64, CLASSES = 6, HIDDEN = 32 };

static ng_model_t make_model(ng_model_kind kind) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, kind, DIM));
  for (int l = 0; l < 2; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    lo.out_dim = l ? CLASSES : HIDDEN;
    lo.activation = l ? NG_ACT_NONE : NG_ACT_RELU;
    lo.aggregator = kind == NG_MODEL_GCN ? NG_AGGREGATOR_GCN : NG_AGGREGATOR_MEAN;
    lo.fanout = 10;
    EXPECT_OK(ng_model_add_layer(m, &lo));
  }
  return m;
}

/* Every node's logits (or a subset's) with a fresh trainer (parameters from the seed). */
static float *embed(ng_dataset_t ds, ng_model_t m, const char *device, ng_mode mode, double ratio,
                    int64_t chunk, const int64_t *ids, int64_t n) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.device = device;
  o.mode = mode;
  o.cache_ratio = ratio;
  o.seed = 5;
  o.eval_chunk = chunk;
  o.workers = 1;
  o.transfer = NG_FETCH_ZCOPY;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, ds, m, &o));
  if (!t)
    return NULL;
  const int64_t rows = ids ? n : NODES;
  float *out = ng_test_xmalloc((size_t)rows * CLASSES * sizeof(float));
  for (int64_t i = 0; i < rows * CLASSES; i++)
    out[i] = NAN;
  EXPECT_OK(ng_trainer_embed(out, t, ids, n, NULL));
  double acc = -1;
  EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_VAL));
  EXPECT_TRUE(acc >= 0.0 && acc <= 1.0);
  ng_trainer_destroy(t);
  return out;
}

static void check_kind(ng_dataset_t ds, ng_model_kind kind) {
  ng_model_t m = make_model(kind);
  float *cpu = embed(ds, m, "cpu", NG_MODE_CPU, -1.0, 4096, NULL, 0);
  float *all_hot = embed(ds, m, "cuda", NG_MODE_BASELINE, 1.0, 4096, NULL, 0);
  float *batched = embed(ds, m, "cuda", NG_MODE_BASELINE, 0.3, 4096, NULL, 0);
  float *zcopy = embed(ds, m, "cuda", NG_MODE_ZEROCOPY, 0.3, 1000, NULL, 0);
  float *cold = embed(ds, m, "cuda", NG_MODE_ZEROCOPY, 0.0, 777, NULL, 0);
  const int64_t ids[] = {19999, 3, 12345, 3, 0};
  float *sub = embed(ds, m, "cuda", NG_MODE_HYBRID, 0.3, 4096, ids, 5);
  const size_t bytes = (size_t)NODES * CLASSES * sizeof(float);
  if (cpu && all_hot && batched && zcopy && cold && sub) {
    EXPECT_TRUE(memcmp(all_hot, batched, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, zcopy, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, cold, bytes) == 0);
    for (int i = 0; i < 5; i++)
      EXPECT_TRUE(memcmp(&sub[i * CLASSES], &all_hot[ids[i] * CLASSES], CLASSES * sizeof(float)) ==
                  0);
    double worst = 0;
    for (int64_t i = 0; i < (int64_t)NODES * CLASSES; i++) {
      const double d = fabs((double)cpu[i] - (double)all_hot[i]) / (1.0 + fabs((double)cpu[i]));
      worst = d > worst ? d : worst;
    }
    printf("  %s: largest CPU/GPU difference %.3g\n", kind == NG_MODEL_GCN ? "gcn" : "sage", worst);
    EXPECT_TRUE(worst < 1e-4);
  }
  free(cpu);
  free(all_hot);
  free(batched);
  free(zcopy);
  free(cold);
  free(sub);
  ng_model_destroy(m);
}

static ng_dataset_t graph;

static void test_sage(void) {
  check_kind(graph, NG_MODEL_SAGE);
}
static void test_gcn(void) {
  check_kind(graph, NG_MODEL_GCN);
}

int main(void) {
  int devices = 0;
  char desc[512];
  if (ng__cuda_devices(&devices, desc, sizeof desc) != NG_OK || devices == 0) {
    printf("skipped: no CUDA device (%s)\n", devices ? ng_last_error() : "none visible");
    return 77;
  }
  printf("gpu_infer: %s\n", desc);
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.nodes = NODES;
  g.avg_degree = 8;
  g.feature_dim = DIM;
  g.classes = CLASSES;
  g.seed = 4;
  const char *dir = ng_test_path("gen");
  EXPECT_OK(ng_dataset_generate(dir, &g));
  graph = ng_test_open_ok(dir);
  if (!graph)
    return ng_test_summary();
  RUN_TEST(test_sage);
  RUN_TEST(test_gcn);
  ng_dataset_close(graph);
  return ng_test_summary();
}
#endif
