/* Layer-wise inference on the GPU (runtime/infer.c's device path): the input layer's hot rows
 * come from the device's hot tier, cold ones by zero-copy (zerocopy mode) or batched through
 * pinned staging (baseline mode), or uploaded once with the intermediate layers resident in
 * device memory (ng_infer_opts.device_bytes). Every tier split, residency and chunk size gives
 * the same bits on the GPU, subsets equal the rows of an all-node run, and the logits follow the
 * CPU backend's within fp32 tolerance. A generated graph (no data files). Exits 77 without CUDA
 * or a GPU. */
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
#include "ng_test_gpu.h"

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
/* device_bytes: as ng_infer_opts.device_bytes (-1: the host paths alone, 0: every layer
 * resident that fits). */
static float *embed(ng_dataset_t ds, ng_model_t m, const char *device, ng_mode mode, double ratio,
                    int64_t chunk, const int64_t *ids, int64_t n, int64_t device_bytes) {
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
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  io.device_bytes = device_bytes;
  ng_infer_report rep = NG_INFER_REPORT_INIT;
  io.report = &rep;
  EXPECT_OK(ng_trainer_embed(out, t, ids, n, &io));
  EXPECT_EQ_I(rep.layers, 2);
  /* The default chunk (0): 20,000 nodes are too few for large chunks beside 2 or more producers
   * (two chunks a producer at least), so 4096, or 8192 with one producer. */
  if (chunk == 0 && !ids)
    for (int l = 0; l < 2; l++)
      EXPECT_TRUE(rep.chunk[l] == 4096 || (rep.producers == 1 && rep.chunk[l] == 8192));
  else if (!ids)
    EXPECT_EQ_I(rep.chunk[0], chunk);
  if (device_bytes < 0)
    EXPECT_EQ_I(rep.device_bytes, 0);
  else if (device_bytes == 0 && !ids && strcmp(device, "cuda") == 0) /* cold rows + hidden */
    EXPECT_TRUE(rep.device_bytes >= (int64_t)NODES * HIDDEN * 4);
  double acc = -1;
  EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_VAL));
  EXPECT_TRUE(acc >= 0.0 && acc <= 1.0);
  ng_trainer_destroy(t);
  return out;
}

static void check_kind(ng_dataset_t ds, ng_model_kind kind) {
  ng_model_t m = make_model(kind);
  float *cpu = embed(ds, m, "cpu", NG_MODE_CPU, -1.0, 4096, NULL, 0, 0);
  float *all_hot = embed(ds, m, "cuda", NG_MODE_BASELINE, 1.0, 4096, NULL, 0, -1);
  float *batched = embed(ds, m, "cuda", NG_MODE_BASELINE, 0.3, 4096, NULL, 0, -1);
  float *zcopy = embed(ds, m, "cuda", NG_MODE_ZEROCOPY, 0.3, 1000, NULL, 0, -1);
  float *cold = embed(ds, m, "cuda", NG_MODE_ZEROCOPY, 0.0, 777, NULL, 0, -1);
  /* Resident: the cold rows uploaded once and the hidden layer in device memory; and a budget
   * that holds the hidden layer but not the cold rows beside it. */
  float *resident = embed(ds, m, "cuda", NG_MODE_ZEROCOPY, 0.3, 999, NULL, 0, 0);
  float *res_auto = embed(ds, m, "cuda", NG_MODE_ZEROCOPY, 0.3, 0, NULL, 0, 0);
  float *res_cold = embed(ds, m, "cuda", NG_MODE_BASELINE, 0.0, 4096, NULL, 0, 0);
  float *res_small =
      embed(ds, m, "cuda", NG_MODE_BASELINE, 0.3, 512, NULL, 0, (int64_t)NODES * HIDDEN * 4 + 64);
  const int64_t ids[] = {19999, 3, 12345, 3, 0};
  float *sub = embed(ds, m, "cuda", NG_MODE_HYBRID, 0.3, 4096, ids, 5, -1);
  float *sub_res = embed(ds, m, "cuda", NG_MODE_HYBRID, 0.3, 100, ids, 5, 0);
  const size_t bytes = (size_t)NODES * CLASSES * sizeof(float);
  if (cpu && all_hot && batched && zcopy && cold && sub && resident && res_auto && res_cold &&
      res_small && sub_res) {
    EXPECT_TRUE(memcmp(all_hot, batched, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, zcopy, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, cold, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, resident, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, res_auto, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, res_cold, bytes) == 0);
    EXPECT_TRUE(memcmp(all_hot, res_small, bytes) == 0);
    EXPECT_TRUE(memcmp(sub, sub_res, 5 * CLASSES * sizeof(float)) == 0);
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
  free(resident);
  free(res_auto);
  free(res_cold);
  free(res_small);
  free(sub);
  free(sub_res);
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
  if (!ng_test_gpu_found("gpu_infer"))
    return 77;
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
