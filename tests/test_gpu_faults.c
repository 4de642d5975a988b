/* Fault injection on the GPU (docs/faults.md): tests/test_faults.c's suite again with
 * `--device cuda`, where the hooks sit in front of the CUDA backend: its device memory (the hot
 * tier, the model's buffers), its pinned staging memory and its page-locking of the zero-copy
 * rows fail at each call (every FAULTS_STRIDE-th point of a sweep), a limit on pinned memory
 * holds, and threads that cannot be pinned run unbound. Then a real failure, not an injected one:
 * the device's memory is filled by another backend, and creating a trainer must fail with a clear
 * error, no crash, and work once the memory is back. Exits 77 (skipped) without CUDA or a GPU. */
#ifndef NG_HAVE_CUDA
#include <stdio.h>
int main(void) {
  printf("skipped: this build has no CUDA backend\n");
  return 77;
}
#else
#define FAULTS_DEVICE "cuda"
#define FAULTS_STRIDE 4
#define FAULTS_NO_MAIN
#include "test_faults.c"

#include "ng_cuda.h"

enum { BALLAST_MAX = 4096 };

/* Device memory taken by a second CUDA backend until little is left: then the trainer's own
 * allocations meet a real cudaMalloc failure. */
static void test_device_memory_exhausted(void) {
  ng_backend *b = NULL;
  EXPECT_OK(ng__backend_cuda_create(&b, 0));
  if (!b)
    return;
  static void *ballast[BALLAST_MAX];
  int n = 0;
  size_t taken = 0;
  for (size_t chunk = (size_t)1 << 30; chunk >= ((size_t)1 << 20) && n < BALLAST_MAX;) {
    if (b->iface->alloc(b, &ballast[n], chunk) == NG_OK) {
      taken += chunk;
      n++;
    } else {
      chunk /= 2;
    }
  }
  size_t free_b = 0, total_b = 0;
  EXPECT_OK(b->iface->mem_info(b, &free_b, &total_b));
  printf("  ballast %.2f GiB in %d pieces, %.1f MiB of device memory left\n",
         (double)taken / (1 << 30), n, (double)free_b / (1 << 20));

  ng_train_opts o = opts(2);
  o.cache_ratio = 1.0; /* 15 MB of hot rows: more than is left */
  ng_trainer_t t = NULL;
  ng_status st = ng_trainer_create(&t, cora, model, &o);
  if (st == NG_OK) { /* what creation left may still fit: the first epoch must then fail */
    ng_epoch_stats es = NG_EPOCH_STATS_INIT;
    st = ng_trainer_epoch(&es, t);
  }
  printf("  with the device full: %s: %s\n", ng_status_name(st), ng_last_error());
  EXPECT_TRUE(st == NG_ERR_NOMEM || st == NG_ERR_CUDA || st == NG_ERR_CUBLAS);
  EXPECT_TRUE(strstr(ng_last_error(), "memory") != NULL);
  EXPECT_TRUE(strstr(ng_last_error(), "[injected]") == NULL);
  ng_trainer_destroy(t);
  t = NULL;

  for (int i = 0; i < n; i++)
    b->iface->free(b, ballast[i]);
  ng__backend_destroy(b);
  /* The memory is back: the same configuration trains. */
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  if (t) {
    ng_epoch_stats es = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&es, t));
    EXPECT_EQ_I(es.iterations, 5);
  }
  ng_trainer_destroy(t);
}

int main(void) {
  int gpus = 0;
  char desc[512];
  if (ng__cuda_devices(&gpus, desc, sizeof desc) != NG_OK || gpus == 0) {
    printf("skipped: no CUDA device\n");
    return 77;
  }
  printf("device: %s\n", desc);
  cora = ng_test_fetch_cora();
  model = ng_test_cora_sage();
  RUN_TEST(test_pinning_refused);
  RUN_TEST(test_backend_ops);
  RUN_TEST(test_pinned_limit);
  RUN_TEST(test_staging_sized);
  RUN_TEST(test_allocator);
  RUN_TEST(test_device_memory_exhausted);
  ng_model_destroy(model);
  ng_dataset_close(cora);
  return ng_test_summary();
}
#endif
