/* The hybrid runtime's robustness on the CPU backend: a worker that fails stops the epoch with
 * its error and leaves a state that continues bit-identically; a failure on the device side
 * stops the workers; an interrupted epoch with several workers resumes bit-identically; the
 * telemetry reports what happened. Nothing may hang (ctest's TIMEOUT is the backstop). */
#include "ng_test_agg.h"
#include "ng_test_fetch.h"

#include "core_impl.h"
#include "fault_impl.h"
#include "safetensors_impl.h"
#include "pipeline_impl.h"
#include "trainer_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static ng_dataset_t cora;
static ng_model_t model;

/* The precision of every trainer made here (test_bf16_device_sampler sets bf16). */
static ng_precision precision = NG_PRECISION_FP32;

static ng_trainer_t make(ng_mode mode, int workers, double lr, ng_progress_fn progress,
                         void *progress_ctx, ng_telemetry_fn telemetry, void *telemetry_ctx) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.precision = precision;
  o.batch = 16; /* 140 training nodes: 9 iterations per epoch */
  o.lr = lr;
  o.seed = 11;
  o.mode = mode;
  o.workers = workers;
  o.cache_ratio = 0.3;
  o.period_ms = 0.01;
  o.telemetry = telemetry;
  o.telemetry_ctx = telemetry_ctx;
  o.telemetry_s = 1e-4;
  o.progress = progress;
  o.progress_ctx = progress_ctx;
  o.normalize = NG_NORMALIZE_ROW;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  return t;
}

static uint8_t *checkpoint(ng_trainer_t t, const char *name, size_t *len) {
  const char *path = ng_test_path(name);
  EXPECT_OK(ng_trainer_save(t, path));
  return ng_test_read_file(path, len);
}

/* Two uninterrupted epochs: the reference every other run must reproduce. */
static uint8_t *reference(size_t *len) {
  ng_trainer_t t = make(NG_MODE_HYBRID, 3, 0.01, NULL, NULL, NULL, NULL);
  for (int e = 0; t && e < 2; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
  }
  uint8_t *b = t ? checkpoint(t, "ref.safetensors", len) : NULL;
  ng_trainer_destroy(t);
  return b;
}

/* The reference's checkpoint in *ref and a trainer `t` to compare with it; false (both freed)
 * when either could not be made. */
static bool with_reference(uint8_t **ref, size_t *ref_len, ng_trainer_t t) {
  *ref = reference(ref_len);
  if (t && *ref)
    return true;
  free(*ref);
  ng_trainer_destroy(t);
  return false;
}

/* --device-share is for hybrid-static with the zcopy transfer and rows the device reads (Cora's
 * 5.7 KB rows are): other modes, the batch transfer and values outside [0, 1] are refused with a
 * message, and a valid share trains. */
static void test_device_share_options(void) {
  static const struct {
    ng_mode mode;
    ng_fetch transfer;
    double share;
    ng_status want;
  } cases[] = {
      {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 0.25, NG_OK},
      {NG_MODE_HYBRID, NG_FETCH_ZCOPY, 0.25, NG_ERR_INVALID_ARG},
      {NG_MODE_PARTIAL, NG_FETCH_AUTO, 0.25, NG_ERR_INVALID_ARG},
      {NG_MODE_HYBRID_STATIC, NG_FETCH_BATCH, 0.25, NG_ERR_INVALID_ARG},
      {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 1.5, NG_ERR_INVALID_ARG},
      {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, -0.1, NG_ERR_INVALID_ARG},
      {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, NAN, NG_ERR_INVALID_ARG},
  };
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.batch = 16;
    o.mode = cases[i].mode;
    o.transfer = cases[i].transfer;
    o.workers = 2;
    o.partial_workers = 2;
    o.cache_ratio = 0.3;
    o.device_share = cases[i].share;
    ng_trainer_t t = NULL;
    EXPECT_STATUS(ng_trainer_create(&t, cora, model, &o), cases[i].want);
    if (cases[i].want != NG_OK) {
      EXPECT_ERR_HAS("device share");
      continue;
    }
    ng_epoch_stats st = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&st, t));
    EXPECT_TRUE(st.device_share == 0.25 && st.fetch.zcopy_bytes > 0);
    ng_trainer_destroy(t);
  }
}

static void test_worker_failure(void) {
  size_t ref_len = 0, len = 0;
  uint8_t *ref = NULL;
  ng_trainer_t t = make(NG_MODE_BASELINE, 3, 0.01, NULL, NULL, NULL, NULL);
  if (!with_reference(&ref, &ref_len, t))
    return;
  /* Iteration 4 of epoch 1 fails. The workers reach it while the device still runs epoch 0
   * (they go on with the next epoch), which must not be disturbed: the failure surfaces in
   * order, after iterations 0-3 of epoch 1 are trained. */
  atomic_store(&ng__pipeline_fault_epoch, 1);
  atomic_store(&ng__pipeline_fault_iter, 4);
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_EQ_I(s.iterations, 9);
  EXPECT_STATUS(ng_trainer_epoch(&s, t), NG_ERR_IO);
  EXPECT_ERR_HAS("injected failure");
  EXPECT_ERR_HAS("worker");
  EXPECT_ERR_HAS("iteration 4");
  EXPECT_EQ_I(ng_trainer_epochs_done(t), 1);
  atomic_store(&ng__pipeline_fault_iter, -1);
  atomic_store(&ng__pipeline_fault_epoch, -1);
  /* The state is consistent: the rest of the epoch, from the failed iteration on, completes
   * the same weights. */
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_EQ_I(s.iterations, 5);
  uint8_t *b = checkpoint(t, "failed.safetensors", &len);
  EXPECT_TRUE(b && len == ref_len && memcmp(b, ref, len) == 0);
  free(b);
  ng_trainer_destroy(t);

  /* Inline (no worker threads), the same order: iterations 0-3 train, then the failure. */
  t = make(NG_MODE_BASELINE, -1, 0.01, NULL, NULL, NULL, NULL);
  atomic_store(&ng__pipeline_fault_epoch, 0);
  atomic_store(&ng__pipeline_fault_iter, 4);
  EXPECT_STATUS(ng_trainer_epoch(&s, t), NG_ERR_IO);
  EXPECT_ERR_HAS("injected failure");
  EXPECT_ERR_HAS("iteration 4");
  atomic_store(&ng__pipeline_fault_iter, -1);
  atomic_store(&ng__pipeline_fault_epoch, -1);
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_EQ_I(s.iterations, 5);
  EXPECT_OK(ng_trainer_epoch(&s, t));
  b = checkpoint(t, "failed-inline.safetensors", &len);
  EXPECT_TRUE(b && len == ref_len && memcmp(b, ref, len) == 0);
  free(b);
  free(ref);
  ng_trainer_destroy(t);
}

static void test_device_failure(void) {
  /* The first step makes the weights about 1e37; a later forward overflows. */
  ng_trainer_t t = make(NG_MODE_HYBRID, 3, 1e37, NULL, NULL, NULL, NULL);
  if (!t)
    return;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  double t0 = ng__now();
  EXPECT_STATUS(ng_trainer_epoch(&s, t), NG_ERR_STATE);
  EXPECT_ERR_HAS("loss");
  EXPECT_TRUE(ng__now() - t0 < 30.0);
  /* The step of the diverging iteration was queued before its loss was read: the step guard
   * kept it (and any later one) from the parameters, which are all finite. */
  const char *path = ng_test_path("diverged.safetensors");
  EXPECT_OK(ng_trainer_save(t, path));
  ng_st_file f;
  memset(&f, 0, sizeof f);
  EXPECT_OK(ng__st_open(&f, path));
  int64_t finite = 0, values = 0;
  for (int k = 0; k < f.n; k++) {
    if (f.tensors[k].dtype != NG_DTYPE_F32)
      continue;
    const float *v = f.tensors[k].data;
    for (size_t j = 0; j < f.tensors[k].nbytes / sizeof(float); j++)
      finite += isfinite(v[j]) != 0;
    values += (int64_t)(f.tensors[k].nbytes / sizeof(float));
  }
  EXPECT_TRUE(values > 0);
  EXPECT_EQ_I(finite, values);
  /* ... and the step count is that of the steps applied: one per iteration done (9 an epoch),
   * so that Adam resumes from the checkpoint with the right bias correction. */
  const char *step = ng__st_meta(&f, "step"), *iter = ng__st_meta(&f, "iteration"),
             *epochs = ng__st_meta(&f, "epochs_done");
  EXPECT_TRUE(step && iter && epochs);
  if (step && iter && epochs) {
    EXPECT_TRUE(atoll(step) >= 1);
    EXPECT_EQ_I(atoll(step), atoll(epochs) * 9 + atoll(iter));
  }
  ng__st_close(&f);
  ng_trainer_destroy(t);
}

typedef struct {
  int calls, stop_at;
} stopper;

static int stop_training(void *ctx, const char *phase, double done, double total) {
  stopper *s = ctx;
  (void)done, (void)total;
  if (strcmp(phase, "train") != 0)
    return 0;
  struct timespec nap = {0, 260 * 1000 * 1000}; /* past the progress rate limit */
  nanosleep(&nap, NULL);
  return ++s->calls >= s->stop_at;
}

static void test_interrupt_and_resume(void) {
  size_t ref_len = 0, len = 0;
  uint8_t *ref = NULL;
  stopper stop = {0, 12}; /* the 3rd iteration of epoch 1 */
  ng_trainer_t t = make(NG_MODE_HYBRID, 3, 0.01, stop_training, &stop, NULL, NULL);
  if (!with_reference(&ref, &ref_len, t))
    return;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_STATUS(ng_trainer_epoch(&s, t), NG_ERR_INTERRUPTED);
  const char *mid = ng_test_path("mid.safetensors");
  EXPECT_OK(ng_trainer_save(t, mid));
  ng_trainer_destroy(t);
  /* Resumed with another mode and worker count: the same bits. */
  t = make(NG_MODE_PARTIAL, 2, 0.01, NULL, NULL, NULL, NULL);
  EXPECT_OK(ng_trainer_load(t, mid));
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_EQ_I(s.iterations, 6);
  uint8_t *b = checkpoint(t, "resumed.safetensors", &len);
  EXPECT_TRUE(b && len == ref_len && memcmp(b, ref, len) == 0);
  free(b);
  free(ref);
  ng_trainer_destroy(t);
}

/* Loading a checkpoint while the workers are already on the next epoch's iterations discards
 * their work: the epoch the checkpoint continues trains the same bits as an uninterrupted run
 * (and its order, rewritten in a buffer the workers read, is not raced). */
static void test_load_while_ahead(void) {
  size_t ref_len = 0, len = 0;
  uint8_t *ref = NULL;
  ng_trainer_t t = make(NG_MODE_HYBRID, 3, 0.01, NULL, NULL, NULL, NULL);
  if (!with_reference(&ref, &ref_len, t))
    return;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&s, t));
  uint8_t *after0 = checkpoint(t, "after0.safetensors", &len);
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_OK(ng_trainer_epoch(&s, t)); /* the workers are now on epoch 3 */
  EXPECT_OK(ng_trainer_load(t, ng_test_path("after0.safetensors")));
  EXPECT_EQ_I(ng_trainer_epochs_done(t), 1);
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_EQ_I(s.epoch, 1);
  uint8_t *b = checkpoint(t, "reloaded.safetensors", &len);
  EXPECT_TRUE(b && len == ref_len && memcmp(b, ref, len) == 0);
  free(b);
  free(after0);
  free(ref);
  ng_trainer_destroy(t);
}

/* Telemetry that takes 1 ms on the device thread after every iteration (telemetry_s tiny): the
 * workers get the CPU meanwhile. */
static void slow_telemetry(const ng_telemetry *t, void *ctx) {
  (void)t, (void)ctx;
  struct timespec nap = {0, 1000 * 1000};
  nanosleep(&nap, NULL);
}

/* The timeline: every iteration has its spans on the device thread and on some worker, in
 * Chrome trace JSON; a trainer that records none says so. */
static void test_trace(void) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 16;
  o.mode = NG_MODE_HYBRID;
  o.workers = 2;
  o.cache_ratio = 0.3;
  o.trace_spans = 1 << 12;
  o.telemetry = slow_telemetry;
  o.telemetry_s = 1e-6;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  if (!t)
    return;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_OK(ng_trainer_epoch(&s, t));
  const char *path = ng_test_path("trace.json");
  int64_t spans = 0, dropped = -1;
  EXPECT_OK(ng_trainer_write_trace(t, path, &spans, &dropped));
  EXPECT_EQ_I(dropped, 0);
  size_t len = 0;
  char *text = (char *)ng_test_read_file(path, &len);
  EXPECT_TRUE(text != NULL);
  if (text) {
    text = realloc(text, len + 1);
    text[len] = '\0';
    static const char fwd[] = "\"ph\":\"X\",\"name\":\"forward\"",
                      smp[] = "\"ph\":\"X\",\"name\":\"sample\"",
                      fch[] = "\"ph\":\"X\",\"name\":\"fetch\"";
    int64_t forwards = 0, samples = 0, fetches = 0, events = 0;
    for (const char *p = text; (p = strstr(p, "\"ph\":\"X\"")) != NULL; p++) {
      events++;
      forwards += strncmp(p, fwd, sizeof fwd - 1) == 0;
      samples += strncmp(p, smp, sizeof smp - 1) == 0;
      fetches += strncmp(p, fch, sizeof fch - 1) == 0;
    }
    EXPECT_EQ_I(events, spans);
    EXPECT_EQ_I(forwards, 18); /* two epochs of 9 iterations */
    /* The workers may have produced some of a third epoch already. */
    EXPECT_TRUE(samples >= 18 && samples <= 27 && fetches == samples);
    EXPECT_TRUE(strstr(text, "\"thread_name\"") && strstr(text, "worker 1"));
    /* One pool for both epochs: the workers went on from the first into the second. */
    int64_t starts = 0, epochs = 0;
    for (const char *p = text; (p = strstr(p, "\"name\":\"start\"")) != NULL; p++)
      starts++;
    for (const char *p = text; (p = strstr(p, "\"name\":\"epoch\"")) != NULL; p++)
      epochs++;
    EXPECT_EQ_I(starts, 1);
    EXPECT_EQ_I(epochs, 2);
    /* The next epoch's order is shuffled by a worker, not by the device thread between two
     * epochs: epoch 1's during epoch 0 (published at the pool's start; a window of 8 holds
     * fewer than epoch 0's 9 iterations, so some worker comes round for another position
     * after it, while the device thread naps 1 ms after each iteration), and perhaps epoch 2's
     * before the trace stopped the workers. Only workers record `prepare` spans. */
    static const char prep[] = "{\"ph\":\"X\",\"name\":\"prepare\",";
    int64_t prepares = 0;
    bool epoch1 = false;
    for (const char *p = text; (p = strstr(p, prep)) != NULL; p++) {
      prepares++;
      const char *args = strstr(p, "\"args\":{\"epoch\":");
      epoch1 |= args && atoi(args + strlen("\"args\":{\"epoch\":")) == 1;
    }
    EXPECT_TRUE(prepares >= 1 && prepares <= 2);
    EXPECT_TRUE(epoch1);
    free(text);
  }
  ng_trainer_destroy(t);
  /* Without trace_spans there is nothing to write. */
  o.trace_spans = 0;
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  EXPECT_STATUS(ng_trainer_write_trace(t, path, NULL, NULL), NG_ERR_STATE);
  ng_trainer_destroy(t);
}

typedef struct {
  int lines;
  int64_t iterations;
  int bad;
  bool decided;
} tel_log;

static void on_telemetry(const ng_telemetry *t, void *ctx) {
  tel_log *l = ctx;
  l->lines++;
  l->iterations += t->iterations;
  l->decided |= t->decisions[0] != '\0';
  if (t->workers[0] + t->workers[1] != 3 || !(t->device_busy >= 0.0 && t->device_busy <= 1.0) ||
      t->it_per_s < 0 || t->seconds <= 0 || t->pcie_bytes < 0 || t->cpu_cold_bytes < 0)
    l->bad++;
}

static void test_telemetry(void) {
  tel_log log = {0, 0, 0, false};
  ng_trainer_t t = make(NG_MODE_HYBRID, 3, 0.01, NULL, NULL, on_telemetry, &log);
  if (!t)
    return;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_TRUE(log.lines > 0);
  EXPECT_EQ_I(log.bad, 0);
  EXPECT_TRUE(log.iterations > 0 && log.iterations <= 9);
  EXPECT_TRUE(log.decided);
  EXPECT_EQ_I(s.workers[0] + s.workers[1], 3);
  EXPECT_TRUE(strstr(ng_trainer_placement(t), "worker") != NULL);
  ng_trainer_destroy(t);
}

/* The controller's decisions in order, with the trainer call each came in. */
typedef struct {
  int call; /* set by the test before each epoch */
  int n;
  int calls[512];
  char reason[512][16];
  bool moved[512];
} decision_log;

static void on_decisions(const ng_telemetry *t, void *ctx) {
  decision_log *l = ctx;
  for (const char *line = t->decisions; *line && l->n < 512;) {
    /* period,move,reason,... */
    const char *move = strchr(line, ',');
    const char *reason = move ? strchr(move + 1, ',') : NULL;
    const char *end = reason ? strchr(reason + 1, ',') : NULL;
    if (!end)
      break;
    snprintf(l->reason[l->n], sizeof l->reason[0], "%.*s", (int)(end - reason - 1), reason + 1);
    l->moved[l->n] = strncmp(move + 1, "none", 4) != 0;
    l->calls[l->n++] = l->call;
    const char *nl = strchr(line, '\n');
    line = nl ? nl + 1 : line + strlen(line);
  }
}

/* Workers that go on into the next epoch keep the controller's period going: no epoch they
 * go on into starts with a settling period (one follows a move only), while an epoch that
 * starts a pool (after a load of an earlier epoch stopped the workers) does. */
static void test_period_spans_epochs(void) {
  decision_log *log = calloc(1, sizeof *log);
  ng_trainer_t t = log ? make(NG_MODE_HYBRID, 3, 0.01, NULL, NULL, on_decisions, log) : NULL;
  if (!t) {
    free(log);
    return;
  }
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  const char *path = ng_test_path("period.safetensors");
  for (log->call = 0; log->call < 4; log->call++) {
    EXPECT_OK(ng_trainer_epoch(&s, t));
    if (log->call == 0)
      EXPECT_OK(ng_trainer_save(t, path));
  }
  EXPECT_OK(ng_trainer_load(t, path)); /* epoch 1 again: the workers, on epoch 4, stop */
  EXPECT_OK(ng_trainer_epoch(&s, t));
  EXPECT_TRUE(log->n > 0 && log->n < 512);
  int continued = 0, restarted = 0;
  for (int i = 1; i < log->n; i++) {
    if (log->calls[i] == log->calls[i - 1])
      continue;
    const bool settling = strcmp(log->reason[i], "settling") == 0;
    if (log->calls[i] < 4) { /* the workers went on */
      EXPECT_TRUE(!settling || log->moved[i - 1]);
      continued += !settling;
    } else {
      restarted++;
      EXPECT_TRUE(settling);
    }
  }
  EXPECT_EQ_I(restarted, 1);
  EXPECT_TRUE(continued >= 1);
  ng_trainer_destroy(t);
  free(log);
}

/* The sample feed: with the device sampler (on the CPU backend, a thread running the CPU
 * sampler) the workers fetch blocks they did not sample, and every mode, inline or with workers,
 * reproduces the reference bit for bit; the trace shows the feed's track. A sampler failure
 * reaches the caller with its message, and the next epoch trains. */
static void test_device_sampler(void) {
  const ng_mode modes[] = {NG_MODE_HYBRID, NG_MODE_PARTIAL, NG_MODE_BASELINE, NG_MODE_ZEROCOPY};
  const int workers[] = {3, 2, -1, 1};
  for (int m = 0; m < 4; m++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.batch = 16;
    o.lr = 0.01;
    o.seed = 11;
    o.mode = modes[m];
    o.workers = workers[m];
    o.cache_ratio = 0.3;
    o.period_ms = 0.01;
    o.normalize = NG_NORMALIZE_ROW;
    o.sampler = NG_SAMPLER_DEVICE;
    o.precision = precision;
    o.trace_spans = m == 0 ? 4096 : 0;
    ng_trainer_t t = NULL;
    EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    if (!with_reference(&ref, &ref_len, t))
      continue;
    EXPECT_STR(ng_trainer_sampler(t), "device");
    for (int e = 0; e < 2; e++) {
      ng_epoch_stats s = NG_EPOCH_STATS_INIT;
      EXPECT_OK(ng_trainer_epoch(&s, t));
    }
    size_t len = 0;
    uint8_t *got = checkpoint(t, "fed.safetensors", &len);
    EXPECT_TRUE(got && len == ref_len && memcmp(got, ref, len) == 0);
    free(got);
    if (m == 0) {
      const char *path = ng_test_path("fed_trace.json");
      int64_t spans = 0, dropped = 0;
      EXPECT_OK(ng_trainer_write_trace(t, path, &spans, &dropped));
      size_t tl = 0;
      char *text = (char *)ng_test_read_file(path, &tl);
      EXPECT_TRUE(text && strstr(text, "sample feed") && strstr(text, "feed wait"));
      free(text);
    }
    free(ref);
    ng_trainer_destroy(t);
  }

  /* the fifth sampled position fails: the epoch fails with the sampler's message */
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 16;
  o.seed = 11;
  o.mode = NG_MODE_HYBRID;
  o.workers = 3;
  o.cache_ratio = 0.3;
  o.sampler = NG_SAMPLER_DEVICE;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  if (!t)
    return;
  ng__fault_backend(NG_FAULT_SAMPLER_RUN, 5, false, 0);
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  EXPECT_STATUS(ng_trainer_epoch(&s, t), NG_ERR_NOMEM);
  EXPECT_ERR_HAS("sampler_run");
  EXPECT_ERR_HAS("[injected]");
  ng__fault_reset();
  EXPECT_OK(ng_trainer_epoch(&s, t));
  ng_trainer_destroy(t);

  /* the option is checked */
  o.sampler = (ng_sampler_kind)7;
  EXPECT_STATUS(ng_trainer_create(&t, cora, model, &o), NG_ERR_INVALID_ARG);
  o.sampler = NG_SAMPLER_AUTO;
  o.sampler_memory_share = 0.0;
  EXPECT_STATUS(ng_trainer_create(&t, cora, model, &o), NG_ERR_INVALID_ARG);
}

/* bf16 feature storage through the runtime: the reference (hybrid, 3 workers) and every mode,
 * inline or with workers, with the device sampler feeding the workers, give the same bits; an
 * interrupted bf16 epoch resumes with another mode and worker count bit for bit. */
static void test_bf16_runtime(void) {
  precision = NG_PRECISION_BF16;
  test_device_sampler();
  test_interrupt_and_resume();
  precision = NG_PRECISION_FP32;
}

/* A trainer of `mode` for the staging tests: packages of several MB (Cora's 5.7 KB rows, a
 * large batch), so that slots must grow beyond their first 1 MiB. */
static ng_trainer_t make_staging(ng_mode mode, int workers, int64_t batch,
                                 ng_sampler_kind sampler) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = batch;
  o.lr = 0.01;
  o.seed = 11;
  o.mode = mode;
  o.transfer = NG_FETCH_ZCOPY;
  o.workers = workers;
  o.partial_workers = 1;
  o.cache_ratio = 0.3;
  o.normalize = NG_NORMALIZE_ROW;
  o.sampler = sampler;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, model, &o));
  return t;
}

/* The memory estimate bounds the package a mini-batch really makes (the staging slots are
 * sized from it and capped by it: a package above it grows every slot in the first epoch), for
 * every strategy and hot share: PARTIAL's states exist for every destination as soon as any
 * row is cold (a 90% hot tier drew a cold edge for most of them, which a state count
 * proportional to the cold share missed by 4x), and for none with every row hot. */
static void test_estimate_bounds_package(void) {
  static const ng_mode modes[] = {NG_MODE_PARTIAL, NG_MODE_BASELINE, NG_MODE_HYBRID_STATIC};
  static const double ratios[] = {0.0, 0.3, 0.9, 0.99, 1.0};
  const int64_t *train = NULL;
  int64_t n_train = 0;
  EXPECT_OK(ng_dataset_split(&train, &n_train, cora, NG_SPLIT_TRAIN));
  /* The Cora model, and one whose input layer aggregates with a user aggregator of three state
   * floats a feature (its partial states are three times the mean's). */
  ng_model_t user = NULL;
  EXPECT_OK(ng_model_create(&user, NG_MODEL_SAGE, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.out_dim = 16;
  l0.fanout = 5;
  l0.aggregator =
      (ng_aggregator){NG_REDUCE_SUM, NG_EDGE_WEIGHT_NONE, NG_FINALIZE_NONE, 0, &ng_test_softmax};
  l1.out_dim = 7;
  l1.fanout = 10;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(user, &l0));
  EXPECT_OK(ng_model_add_layer(user, &l1));
  const ng_model_t models[] = {model, user};
  for (size_t k = 0; k < NG_TEST_LEN(models) * NG_TEST_LEN(modes); k++)
    for (size_t r = 0; r < NG_TEST_LEN(ratios); r++) {
      const size_t m = k % NG_TEST_LEN(modes);
      const ng_model_t mdl = models[k / NG_TEST_LEN(modes)];
      ng_train_opts o = NG_TRAIN_OPTS_INIT;
      o.batch = n_train;
      o.seed = 11;
      o.mode = modes[m];
      o.transfer = NG_FETCH_BATCH;
      o.workers = 2; /* the probe below sizes the slots again, uncapped */
      o.partial_workers = 1;
      o.cache_ratio = ratios[r];
      ng_trainer_t t = NULL;
      EXPECT_OK(ng_trainer_create(&t, cora, mdl, &o));
      if (!t)
        continue;
      ng_memory_estimate mem = NG_MEMORY_ESTIMATE_INIT;
      ng_pipeline *rt = ng__trainer_pipeline(t, &mem);
      const ng_epoch_plan plan = {
          .order = train, .n_train = n_train, .batch = n_train, .iters = 1, .seed = 11};
      size_t slot = 0;
      EXPECT_OK(ng__pipeline_presize(rt, &plan, 0.5f, SIZE_MAX, &slot));
      if (slot > ng__slot_size((size_t)mem.package_bytes + 4096))
        ng_test_fail(__FILE__, __LINE__,
                     "%s, %s model, cache ratio %g: a slot of %zu bytes for the package, above "
                     "the estimate's %lld",
                     ng_mode_name(modes[m]), mdl == user ? "user-aggregator" : "Cora", ratios[r],
                     slot, (long long)mem.package_bytes);
      ng_trainer_destroy(t);
    }
  ng_model_destroy(user);
}

/* Trains `epochs` epochs and returns the checkpoint (*len bytes) and the slots grown on demand
 * in all. */
static uint8_t *train_staging(ng_trainer_t t, int epochs, size_t *len, int64_t *grows) {
  for (int e = 0; e < epochs; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
  }
  *grows = ng__pipeline_slot_grows(ng__trainer_pipeline(t, NULL));
  return checkpoint(t, "staging.safetensors", len);
}

/* The staging slots are sized before the first epoch (ng__pipeline_presize): after set-up each
 * worker's first NG_SLOT_PRESIZE slots hold the first mini-batch's package (+ 1/16), within
 * what the memory estimate counts; an epoch of that one mini-batch grows no slot; an undersized
 * probe, or none, leaves the growth to the epoch as before; the bits never change. */
static void test_presized_slots(void) {
  static const struct {
    ng_mode mode;
    int workers;
    ng_sampler_kind sampler;
  } cases[] = {
      {NG_MODE_BASELINE, 2, NG_SAMPLER_CPU},      {NG_MODE_PARTIAL, 3, NG_SAMPLER_DEVICE},
      {NG_MODE_HYBRID_STATIC, 2, NG_SAMPLER_CPU}, {NG_MODE_BASELINE, -1, NG_SAMPLER_CPU},
      {NG_MODE_BASELINE, -1, NG_SAMPLER_DEVICE},
  };
  const size_t initial = (size_t)1 << 20; /* a slot's size at ng__pipeline_create */
  for (size_t c = 0; c < NG_TEST_LEN(cases); c++) {
    const int workers = cases[c].workers, n = workers > 0 ? workers : 1;
    printf("  %s, %d workers, %s sampler\n", ng_mode_name(cases[c].mode), workers,
           cases[c].sampler == NG_SAMPLER_DEVICE ? "device" : "cpu");
    /* One iteration an epoch (140 training nodes): the probe is that mini-batch. */
    ng_trainer_t t = make_staging(cases[c].mode, workers, 140, cases[c].sampler);
    if (!t)
      continue;
    ng_memory_estimate mem = NG_MEMORY_ESTIMATE_INIT;
    ng_pipeline *rt = ng__trainer_pipeline(t, &mem);
    ng_startup_times su;
    EXPECT_OK(ng_trainer_startup(&su, t));
    size_t slot = (size_t)su.staging_slot_bytes;
    if (workers < 0) {
      /* Inline (how inference and prediction make trainers): the trainer sizes nothing; the
       * runtime would, before the first epoch (plan: the training ids in their order). */
      EXPECT_EQ_I(su.staging_slot_bytes, 0);
      EXPECT_TRUE(ng__pipeline_slot_bytes(rt, 0, 0) == initial);
      const int64_t *train = NULL;
      int64_t n_train = 0;
      EXPECT_OK(ng_dataset_split(&train, &n_train, cora, NG_SPLIT_TRAIN));
      const ng_epoch_plan plan = {
          .order = train, .n_train = n_train, .batch = n_train, .iters = 1, .seed = 11};
      EXPECT_OK(ng__pipeline_presize(rt, &plan, 0.5f, SIZE_MAX, &slot));
    } else {
      EXPECT_TRUE(su.staging_s > 0.0);
    }
    printf("    slot %zu bytes (estimate: package %lld, staging %lld), sized in %.4f s\n", slot,
           (long long)mem.package_bytes, (long long)mem.staging, su.staging_s);
    EXPECT_TRUE(slot > initial);
    /* Within the estimate: a slot's share of it, and every slot made. */
    EXPECT_TRUE((double)slot <= (double)mem.package_bytes * (1.0 + 1.0 / NG_SLOT_GROWTH_DEN));
    EXPECT_TRUE((double)slot * NG_SLOT_PRESIZE * n <= (double)mem.staging);
    size_t largest = 0;
    for (int w = 0; w < n; w++) {
      for (int j = 0; j < NG_SLOT_PRESIZE; j++) {
        const size_t b = ng__pipeline_slot_bytes(rt, w, j);
        largest = b > largest ? b : largest;
        /* One strategy for every worker, or the hybrid's PARTIAL one (worker 0, the larger
         * package) and its TRANSFER one (ids only: its first 1 MiB suffices). */
        if (cases[c].mode != NG_MODE_HYBRID_STATIC || w == 0)
          EXPECT_TRUE(b == slot);
        else
          EXPECT_TRUE(b >= initial && b <= slot);
      }
      EXPECT_TRUE(ng__pipeline_slot_bytes(rt, w, NG_SLOT_PRESIZE) == initial);
    }
    EXPECT_TRUE(largest == slot);
    /* The epoch of that one mini-batch fits in the slots made: no growth (inline, the plan's
     * order is not the epoch's: its mini-batch may be a little larger). */
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
    EXPECT_EQ_I(s.iterations, 1);
    if (workers > 0)
      EXPECT_EQ_I(ng__pipeline_slot_grows(rt), 0);
    ng_trainer_destroy(t);

    /* Several iterations, sized or not, or undersized: the same bits; the slots grow on demand
     * where they must. */
    size_t ref_len = 0, len = 0;
    int64_t grows_none = 0, grows_small = 0, grows_sized = 0;
    atomic_store(&ng__pipeline_presize_limit, 0);
    t = make_staging(cases[c].mode, workers, 48, cases[c].sampler);
    EXPECT_OK(ng_trainer_startup(&su, t));
    EXPECT_EQ_I(su.staging_slot_bytes, 0);
    uint8_t *ref = t ? train_staging(t, 2, &ref_len, &grows_none) : NULL;
    ng_trainer_destroy(t);
    atomic_store(&ng__pipeline_presize_limit, (int64_t)initial + 4096);
    t = make_staging(cases[c].mode, workers, 48, cases[c].sampler);
    EXPECT_OK(ng_trainer_startup(&su, t));
    EXPECT_EQ_I(su.staging_slot_bytes, workers > 0 ? (int64_t)initial + 4096 : 0);
    uint8_t *small = t ? train_staging(t, 2, &len, &grows_small) : NULL;
    EXPECT_TRUE(ref && small && len == ref_len && memcmp(small, ref, len) == 0);
    free(small);
    ng_trainer_destroy(t);
    atomic_store(&ng__pipeline_presize_limit, -1);
    t = make_staging(cases[c].mode, workers, 48, cases[c].sampler);
    uint8_t *sized = t ? train_staging(t, 2, &len, &grows_sized) : NULL;
    EXPECT_TRUE(ref && sized && len == ref_len && memcmp(sized, ref, len) == 0);
    free(sized);
    ng_trainer_destroy(t);
    free(ref);
    printf("    slots grown on demand in 2 epochs: %lld unsized, %lld undersized, %lld sized\n",
           (long long)grows_none, (long long)grows_small, (long long)grows_sized);
    EXPECT_TRUE(grows_none > 0 && grows_small > 0);
    EXPECT_TRUE(workers < 0 ? grows_sized == grows_none : grows_sized < grows_none);
  }
  /* Once an epoch ran, the slots are not sized again. */
  ng_trainer_t t = make_staging(NG_MODE_BASELINE, 2, 48, NG_SAMPLER_CPU);
  if (!t)
    return;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&s, t));
  ng_pipeline *rt = ng__trainer_pipeline(t, NULL);
  ng__pipeline_stop(rt);
  ng__pipeline_settle(rt);
  const int64_t order[48] = {0};
  const ng_epoch_plan plan = {.order = order, .n_train = 48, .batch = 48, .iters = 1};
  size_t slot = 0;
  EXPECT_STATUS(ng__pipeline_presize(rt, &plan, 0.0f, SIZE_MAX, &slot), NG_ERR_STATE);
  ng_trainer_destroy(t);
}

int main(void) {
  cora = ng_test_fetch_cora();
  model = ng_test_cora_sage();
  RUN_TEST(test_device_share_options);
  RUN_TEST(test_worker_failure);
  RUN_TEST(test_device_failure);
  RUN_TEST(test_interrupt_and_resume);
  RUN_TEST(test_load_while_ahead);
  RUN_TEST(test_trace);
  RUN_TEST(test_telemetry);
  RUN_TEST(test_period_spans_epochs);
  RUN_TEST(test_device_sampler);
  RUN_TEST(test_bf16_runtime);
  RUN_TEST(test_presized_slots);
  RUN_TEST(test_estimate_bounds_package);
  ng_model_destroy(model);
  ng_dataset_close(cora);
  return ng_test_summary();
}
