/* The CUDA backend's device sampler (gpu/backend_cuda_sample.cu): its blocks equal the CPU
 * sampler's bit for bit (both index widths, every branch of the draw, GCN weights, transposes,
 * the full neighbourhood), it refuses bad targets alike, and training with it (--sampler gpu)
 * gives the same bits as with CPU sampling in every mode. Exits 77 (skipped) without CUDA or
 * without a device. */
#include "ng_cpu.h"
#include "ng_test.h"
#include "ng_test_fetch.h"
#include "ng_test_graph.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef NG_HAVE_CUDA

int main(void) {
  printf("gpu_sample: skipped: this build has no CUDA backend (configure with -DNG_CUDA=ON)\n");
  return 77;
}

#else

#include "ng_cuda.h"

static void test_blocks(void) {
  ng_backend *gpu = NULL;
  EXPECT_OK(ng__backend_cuda_create(&gpu, 0));
  if (!gpu)
    return;
  double rate = 0.0;
  ng_test_check_device_sampler(gpu, &rate);
  printf("gpu_sample: %.1f M sampled edges/s (test graph, including the copy back)\n", rate / 1e6);
  ng__backend_destroy(gpu);
}

/* Two epochs on Cora with a simulated cold tier: every mode and the inline pipeline give the
 * checkpoint of CPU sampling, bit for bit. */
static void test_training(void) {
  ng_dataset_t cora = ng_test_fetch_cora();
  ng_model_t model = ng_test_cora_sage();
  const ng_mode modes[] = {NG_MODE_BASELINE, NG_MODE_ZEROCOPY, NG_MODE_PARTIAL, NG_MODE_HYBRID};
  const int workers[] = {-1, 2, 3, 3};
  for (int m = 0; cora && model && m < 4; m++) {
    uint8_t *bytes[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    for (int s = 0; s < 2; s++) {
      ng_train_opts o = NG_TRAIN_OPTS_INIT;
      o.device = "cuda";
      o.batch = 16;
      o.seed = 5;
      o.mode = modes[m];
      o.workers = workers[m];
      o.cache_ratio = 0.3;
      o.sampler = s ? NG_SAMPLER_DEVICE : NG_SAMPLER_CPU;
      ng_trainer_t t = NULL;
      EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
      if (!t)
        continue;
      EXPECT_STR(ng_trainer_sampler(t), s ? "device" : "cpu");
      for (int e = 0; e < 2; e++) {
        ng_epoch_stats st = NG_EPOCH_STATS_INIT;
        EXPECT_OK(ng_trainer_epoch(&st, t));
      }
      const char *path = ng_test_path(s ? "gpu_sampled.safetensors" : "cpu_sampled.safetensors");
      EXPECT_OK(ng_trainer_save(t, path));
      bytes[s] = ng_test_read_file(path, &len[s]);
      ng_trainer_destroy(t);
    }
    EXPECT_TRUE(bytes[0] && bytes[1] && len[0] == len[1] &&
                memcmp(bytes[0], bytes[1], len[0]) == 0);
    free(bytes[0]);
    free(bytes[1]);
  }
  ng_model_destroy(model);
  ng_dataset_close(cora);
}

int main(void) {
  int count = 0;
  char desc[512];
  if (ng__cuda_devices(&count, desc, sizeof desc) != NG_OK || count == 0) {
    printf("gpu_sample: skipped: no CUDA device visible\n");
    return 77;
  }
  printf("gpu_sample: %s\n", desc);
  RUN_TEST(test_blocks);
  RUN_TEST(test_training);
  return ng_test_summary();
}

#endif /* NG_HAVE_CUDA */
