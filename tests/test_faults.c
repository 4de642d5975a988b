/* Fault injection (docs/faults.md): allocations of core's allocator, the backend's memory ops
 * (device memory, pinned staging memory, page-locking the zero-copy rows) and the pinning of
 * worker threads fail on demand while Cora trains on the CPU backend, at trainer creation,
 * during the first epoch and during a checkpoint save. Each failure must give NG_ERR_NOMEM with a
 * message naming what was being allocated, or the documented fallback, never a crash or a hang
 * (ctest's TIMEOUT is the backstop); the trainer must then be destroyed cleanly (the asan preset
 * finds leaks) and, after a failed epoch or save, go on training. */
#include "ng_test_fetch.h"

#include "core_impl.h"
#include "fault_impl.h"
#include "pool_impl.h"
#include "pipeline_impl.h"

#include <stdlib.h>
#include <string.h>

/* The backend the suite trains on: "cpu" here; tests/test_gpu_faults.c builds this file again
 * with FAULTS_DEVICE "cuda", where the same hooks sit in front of the CUDA backend. */
#ifndef FAULTS_DEVICE
#define FAULTS_DEVICE "cpu"
#endif
/* Failure points of a sweep that are run (the GPU variant thins them: each is a trainer). */
#ifndef FAULTS_STRIDE
#define FAULTS_STRIDE 1
#endif

static ng_dataset_t cora;

static bool file_exists(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f)
    fclose(f);
  return f != NULL;
}
static ng_model_t model;

typedef enum { AT_CREATE, AT_EPOCH, AT_SAVE } stage;
static const char *const stage_names[] = {"create", "epoch", "save"};

/* A HYBRID_STATIC run with the zero-copy transfer and a simulated hot tier, so that every hook
 * is on its path: model buffers (alloc), staging slots (host_alloc), the registered cold rows
 * (host_register) and the worker pool. `workers` -1 runs inline. */
/* opts() with batches of 70 training nodes, whose packages outgrow a slot's first MiB. */
static bool big_batch;

static ng_train_opts opts(int workers) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = big_batch ? 70 : 32; /* 140 training nodes: 2 or 5 iterations per epoch */
  o.seed = 5;
  o.mode = workers < 0 ? NG_MODE_BASELINE : NG_MODE_HYBRID_STATIC;
  o.transfer = NG_FETCH_ZCOPY;
  o.workers = workers;
  o.partial_workers = 1;
  o.cache_ratio = 0.3;
  o.normalize = NG_NORMALIZE_ROW;
  o.device = FAULTS_DEVICE;
  return o;
}

/* The arming of one hook; `nth` 0 only counts (allocator) or disarms (backend). */
typedef struct {
  const char *name;
  bool backend;       /* a backend hook (else core's allocator) */
  ng_fault_op op;     /* backend */
  const char *needle; /* what the message of an injected failure must contain */
} hook;

static const hook hooks[] = {
    {"allocator", false, NG_FAULT_ALLOC, "out of memory"},
    {"alloc", true, NG_FAULT_ALLOC, "out of device memory"},
    {"host_alloc", true, NG_FAULT_HOST_ALLOC, "pinned host memory"},
    {"host_register", true, NG_FAULT_HOST_REGISTER, "page-lock"},
};

static void arm(const hook *h, int64_t nth, bool sticky) {
  if (h->backend)
    ng__fault_backend(h->op, nth, sticky, 0);
  else
    ng__fault_alloc(nth, NULL, sticky);
}

static int64_t fired(const hook *h) {
  return h->backend ? ng__fault_backend_fired(h->op) : ng__fault_alloc_fired();
}

/* Runs create, one epoch and a save, with the fault armed just before `at`; returns whether it
 * fired. A fired fault must fail that stage with NG_ERR_NOMEM and the hook's message; then the
 * trainer (when there is one) trains another epoch and is destroyed. */
static bool run_once(const hook *h, stage at, int64_t nth, bool sticky, int workers) {
  const ng_train_opts o = opts(workers);
  ng_trainer_t t = NULL;
  ng_status st = NG_OK;
  bool hit = false, deferred = false;
  for (int s = AT_CREATE; s <= AT_SAVE && st == NG_OK; s++) {
    if (s == (int)at)
      arm(h, nth, sticky);
    ng_epoch_stats es = NG_EPOCH_STATS_INIT;
    if (s == AT_CREATE)
      st = ng_trainer_create(&t, cora, model, &o);
    else if (s == AT_EPOCH)
      st = ng_trainer_epoch(&es, t);
    else {
      (void)remove(ng_test_path("fault.safetensors"));
      st = ng_trainer_save(t, ng_test_path("fault.safetensors"));
      /* A failed save leaves nothing at the path. */
      if (st != NG_OK && file_exists(ng_test_path("fault.safetensors")))
        ng_test_fail(__FILE__, __LINE__, "%s fault %lld: a failed save left a file", h->name,
                     (long long)nth);
    }
    if (s == (int)at) {
      hit = fired(h) > 0;
      ng__fault_reset();
      /* Workers go on with the next epoch before this one ends: a fault they meet there
       * surfaces, in order, from the next call. */
      deferred = hit && s == AT_EPOCH && st == NG_OK;
      if (hit && st != NG_ERR_NOMEM && !deferred)
        ng_test_fail(__FILE__, __LINE__, "%s fault %lld at %s: got %s (%s), expected NOMEM",
                     h->name, (long long)nth, stage_names[s], ng_status_name(st), ng_last_error());
      if (hit && !deferred && nth == 1)
        printf("  %s at %s: %s\n", h->name, stage_names[s], ng_last_error());
      if (hit && !deferred &&
          (!strstr(ng_last_error(), "[injected]") || !strstr(ng_last_error(), h->needle)))
        ng_test_fail(__FILE__, __LINE__, "%s fault %lld at %s: message \"%s\" lacks \"%s\"",
                     h->name, (long long)nth, stage_names[s], ng_last_error(), h->needle);
      if (!hit && st != NG_OK)
        ng_test_fail(__FILE__, __LINE__, "%s fault %lld at %s did not fire but got %s (%s)",
                     h->name, (long long)nth, stage_names[s], ng_status_name(st), ng_last_error());
    }
  }
  if (hit && at == AT_CREATE && t)
    ng_test_fail(__FILE__, __LINE__, "%s fault %lld: a failed create left a trainer", h->name,
                 (long long)nth);
  /* After a failed epoch or save the trainer is consistent: it trains on and saves. */
  if (t && at != AT_CREATE) {
    ng_epoch_stats es = NG_EPOCH_STATS_INIT;
    if (deferred) {
      EXPECT_STATUS(ng_trainer_epoch(&es, t), NG_ERR_NOMEM);
      EXPECT_ERR_HAS("[injected]");
      EXPECT_ERR_HAS(h->needle);
    }
    EXPECT_OK(ng_trainer_epoch(&es, t));
    EXPECT_OK(ng_trainer_save(t, ng_test_path("after.safetensors")));
  }
  ng_trainer_destroy(t);
  return hit;
}

/* Every failure point of a stage up to `limit`, `stride` apart: a sweep stops at the first
 * `nth` that no longer fires (past the stage's last call). Returns the points that fired. */
static int sweep(const hook *h, stage at, int64_t limit, int64_t stride, bool sticky, int workers) {
  int n = 0;
  for (int64_t nth = 1; nth <= limit; nth += stride) {
    if (!run_once(h, at, nth, sticky, workers))
      break;
    n++;
  }
  return n;
}

/* Allocations of core's allocator fail one at a time, everywhere in create, the first epoch
 * (with workers and inline) and save. */
static void test_allocator(void) {
  const hook *h = &hooks[0];
  int c = sweep(h, AT_CREATE, 2000, FAULTS_STRIDE, false, 2);
  int e = sweep(h, AT_EPOCH, 2000, 3 * FAULTS_STRIDE, false, 2);
  int i = sweep(h, AT_EPOCH, 2000, 3 * FAULTS_STRIDE, false, -1);
  int s = sweep(h, AT_SAVE, 2000, FAULTS_STRIDE, false, 2);
  printf("  allocator failure points: create %d, epoch %d (+%d inline, every 3rd), save %d\n", c, e,
         i, s);
  EXPECT_TRUE(c > 5 && e > 0 && i > 0 && s > 0);
  /* Memory that stays exhausted (sticky) from some point of the epoch on. */
  for (int64_t nth = 1; nth <= 64; nth *= 4)
    run_once(h, AT_EPOCH, nth, true, 2);
  /* A match on what is being allocated: the checkpoint's buffer. */
  ng_trainer_t t = NULL;
  const ng_train_opts o = opts(2);
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  ng__fault_alloc(1, "checkpoint", false);
  EXPECT_STATUS(ng_trainer_save(t, ng_test_path("m.safetensors")), NG_ERR_NOMEM);
  EXPECT_ERR_HAS("for a checkpoint [injected]");
  EXPECT_EQ_I(ng__fault_alloc_fired(), 1);
  ng__fault_reset();
  EXPECT_OK(ng_trainer_save(t, ng_test_path("m.safetensors")));
  ng_trainer_destroy(t);
}

/* The backend's memory ops fail at each of their calls, and sticky from each on. */
static void test_backend_ops(void) {
  for (size_t k = 1; k < NG_TEST_LEN(hooks); k++) {
    const hook *h = &hooks[k];
    int total = 0;
    for (int at = AT_CREATE; at <= AT_SAVE; at++) {
      int n = sweep(h, (stage)at, 200, FAULTS_STRIDE, false, 2) +
              sweep(h, (stage)at, 200, FAULTS_STRIDE, true, 2);
      printf("  %s failure points at %s: %d\n", h->name, stage_names[at], n);
      total += n;
    }
    EXPECT_TRUE(total > 0);
  }
}

/* Packages larger than a staging slot's first MiB (the whole training set a batch): the slots
 * sized at set-up (ng__pipeline_presize, one thread a worker) are refused with a clear error
 * from ng_trainer_create, at every allocation, and without that sizing their growth in the
 * epoch is refused as clearly. */
static void test_staging_sized(void) {
  const hook *h = &hooks[2]; /* host_alloc */
  big_batch = true;
  const int slots = 2 * 7; /* two workers' slots of 1 MiB, made before the sizing */
  const int c = sweep(h, AT_CREATE, 200, FAULTS_STRIDE, false, 2);
  printf("  host_alloc failure points at create: %d\n", c);
  EXPECT_TRUE(c > slots / FAULTS_STRIDE);
  /* The points in the sizing itself say so. */
  int sizing = 0;
  const ng_train_opts o = opts(2);
  for (int64_t nth = 1; nth <= 200; nth++) {
    ng_trainer_t t = NULL;
    ng__fault_backend(h->op, nth, false, 0);
    const ng_status st = ng_trainer_create(&t, cora, model, &o);
    ng__fault_reset();
    ng_trainer_destroy(t);
    if (st == NG_OK)
      break; /* past the last point */
    if (!strstr(ng_last_error(), "before the first epoch"))
      continue;
    EXPECT_EQ_I(st, NG_ERR_NOMEM);
    EXPECT_ERR_HAS("pinned host memory");
    EXPECT_ERR_HAS("[injected]");
    if (sizing++ == 0)
      printf("  sizing refused: %s\n", ng_last_error());
  }
  EXPECT_EQ_I(sizing, NG_SLOT_PRESIZE); /* the PARTIAL worker's slots (the TRANSFER one's fit) */
  atomic_store(&ng__pipeline_presize_limit, 0);
  /* Inline (baseline: every package stages its cold rows), so that the growth is certain. */
  const int grown = sweep(h, AT_EPOCH, 200, FAULTS_STRIDE, false, -1) +
                    sweep(h, AT_EPOCH, 200, FAULTS_STRIDE, true, -1);
  atomic_store(&ng__pipeline_presize_limit, -1);
  printf("  host_alloc failure points at epoch, slots not sized at set-up: %d\n", grown);
  EXPECT_TRUE(grown > 0);
  big_batch = false;
}

/* A limit on pinned memory: staging slots above it are refused with a clear error. */
static void test_pinned_limit(void) {
  static const size_t limits[] = {1, 4096, 1 << 16, 1 << 20};
  for (size_t k = 0; k < NG_TEST_LEN(limits); k++) {
    for (int at = AT_CREATE; at <= AT_EPOCH; at++) {
      const ng_train_opts o = opts(2);
      ng_trainer_t t = NULL;
      if (at == AT_CREATE)
        ng__fault_backend(NG_FAULT_HOST_ALLOC, 0, false, limits[k]);
      ng__fault_backend(NG_FAULT_HOST_REGISTER, 0, false, limits[k]);
      ng_status st = ng_trainer_create(&t, cora, model, &o);
      if (st == NG_OK) {
        ng__fault_backend(NG_FAULT_HOST_ALLOC, 0, false, limits[k]);
        ng_epoch_stats es = NG_EPOCH_STATS_INIT;
        st = ng_trainer_epoch(&es, t);
      }
      const bool hit = ng__fault_backend_fired(NG_FAULT_HOST_ALLOC) +
                           ng__fault_backend_fired(NG_FAULT_HOST_REGISTER) >
                       0;
      ng__fault_reset();
      if (hit) {
        EXPECT_EQ_I(st, NG_ERR_NOMEM);
        EXPECT_ERR_HAS("page-lock");
      } else {
        EXPECT_OK(st);
      }
      ng_trainer_destroy(t);
    }
  }
}

static void noop_worker(void *ctx, int worker) {
  (void)ctx;
  (void)worker;
}

/* Workers (and the device thread) that cannot be pinned run unbound, and the placement says so. */
static void test_pinning_refused(void) {
  ng__fault_pin(true);
  ng_trainer_t t = NULL;
  const ng_train_opts o = opts(2);
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  ng_epoch_stats es = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&es, t));
  EXPECT_EQ_I(es.iterations, 5);
  const char *place = ng_trainer_placement(t);
  printf("  placement: %s\n", place);
  EXPECT_TRUE(strstr(place, "2 of 2 workers unbound (binding refused)") != NULL);
  EXPECT_TRUE(strstr(place, "device thread unbound") != NULL);
  EXPECT_OK(ng_trainer_save(t, ng_test_path("pin.safetensors")));
  ng_trainer_destroy(t);
  ng__fault_pin(false);

  /* The pool itself: nothing bound, the description says so. */
  ng_pool_opts po = NG_POOL_OPTS_INIT;
  po.workers = 3;
  po.bind = true;
  ng__fault_pin(true);
  ng_pool *p = NULL;
  EXPECT_OK(ng__pool_start(&p, &po, noop_worker, NULL));
  ng__fault_pin(false);
  if (p) {
    for (int w = 0; w < 3; w++)
      EXPECT_TRUE(!ng__pool_bound(p, w));
    EXPECT_TRUE(strstr(ng__pool_describe(p), "3 of 3 workers unbound") != NULL);
    ng__pool_join(p);
  }
}

#ifndef FAULTS_NO_MAIN
int main(void) {
  cora = ng_test_fetch_cora();
  model = ng_test_cora_sage();
  RUN_TEST(test_pinning_refused);
  RUN_TEST(test_backend_ops);
  RUN_TEST(test_pinned_limit);
  RUN_TEST(test_staging_sized);
  RUN_TEST(test_allocator);
  ng_model_destroy(model);
  ng_dataset_close(cora);
  return ng_test_summary();
}
#endif
