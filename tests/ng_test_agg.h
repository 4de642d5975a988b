/* User aggregators the tests define once with NG_AGGREGATOR_SOURCE (the host functions here, the
 * same text for the CUDA backend's NVRTC): a power mean (non-linear, one state float), a
 * softmax aggregation with a fixed temperature (non-linear, three state floats merged by
 * rescaling: the online-softmax law) and a mean (declared linear, no agg_grad). The fixed
 * function names are renamed per aggregator so that the three live in one translation unit. */
#ifndef NG_TEST_AGG_H
#define NG_TEST_AGG_H

#include "neargnn.h"

#include <math.h>

/* Power mean, p = 3: y = (sum_j w_j |x_j|^3 / n)^(1/3). */
#define agg_init pm_init
#define agg_accumulate pm_accumulate
#define agg_merge pm_merge
#define agg_finalize pm_finalize
#define agg_grad pm_grad
// clang-format off
NG_AGGREGATOR_SOURCE(ng_test_powmean_src,
  NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) {
    const float a = fabsf(x);
    s[0] = s[0] + w * (a * a * a);
  }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = s[0] + t[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) {
    return n > 0.0f ? cbrtf(s[0] / n) : 0.0f;
  }
  NG_AGG_FN float agg_grad(const float *s, float n, float x, float w, float y) {
    (void)s;
    /* d y / d x = w x |x| / (n y^2) */
    return y > 0.0f ? w * x * fabsf(x) / (n * y * y) : 0.0f;
  })
// clang-format on
#undef agg_init
#undef agg_accumulate
#undef agg_merge
#undef agg_finalize
#undef agg_grad

/* Softmax aggregation, temperature 0.5: y = sum_j x_j e^(x_j / T) / sum_j e^(x_j / T). State:
 * the running maximum m of x / T, s = sum e^(x/T - m), v = sum x e^(x/T - m). */
#define agg_init sm_init
#define agg_accumulate sm_accumulate
#define agg_merge sm_merge
#define agg_finalize sm_finalize
#define agg_grad sm_grad
// clang-format off
NG_AGGREGATOR_SOURCE(ng_test_softmax_src,
  NG_AGG_FN void agg_init(float *s) {
    s[0] = -INFINITY;
    s[1] = 0.0f;
    s[2] = 0.0f;
  }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) {
    (void)w;
    const float z = x * 2.0f;
    if (z > s[0]) {
      const float r = expf(s[0] - z);
      s[1] = s[1] * r;
      s[2] = s[2] * r;
      s[0] = z;
    }
    const float e = expf(z - s[0]);
    s[1] = s[1] + e;
    s[2] = s[2] + x * e;
  }
  NG_AGG_FN void agg_merge(float *s, const float *t) {
    const float m = fmaxf(s[0], t[0]);
    const float a = expf(s[0] - m), b = expf(t[0] - m);
    s[1] = s[1] * a + t[1] * b;
    s[2] = s[2] * a + t[2] * b;
    s[0] = m;
  }
  NG_AGG_FN float agg_finalize(const float *s, float n) {
    return n > 0.0f ? s[2] / s[1] : 0.0f;
  }
  NG_AGG_FN float agg_grad(const float *s, float n, float x, float w, float y) {
    (void)n;
    (void)w;
    /* a_j (1 + (x_j - y) / T), a_j = e^(x_j / T - m) / s */
    const float a = expf(x * 2.0f - s[0]) / s[1];
    return a * (1.0f + (x - y) * 2.0f);
  })
// clang-format on
#undef agg_init
#undef agg_accumulate
#undef agg_merge
#undef agg_finalize
#undef agg_grad

/* Mean, declared linear: the gradient comes from accumulate and finalize. */
#define agg_init mn_init
#define agg_accumulate mn_accumulate
#define agg_merge mn_merge
#define agg_finalize mn_finalize
// clang-format off
NG_AGGREGATOR_SOURCE(ng_test_mean_src,
  NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) { s[0] = s[0] + w * x; }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = s[0] + t[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) { return n > 0.0f ? s[0] / n : 0.0f; })
// clang-format on
#undef agg_init
#undef agg_accumulate
#undef agg_merge
#undef agg_finalize

/* Each definition names its renamed functions (NG_AGGREGATOR_FUNCTIONS would take the fixed
 * names, which are undefined again here). */
static const ng_aggregator_def ng_test_powmean = {.size = sizeof(ng_aggregator_def),
                                                  .name = "powmean3",
                                                  .state_size = 1,
                                                  .init = pm_init,
                                                  .accumulate = pm_accumulate,
                                                  .merge = pm_merge,
                                                  .finalize = pm_finalize,
                                                  .grad = pm_grad,
                                                  .source = ng_test_powmean_src,
                                                  .accumulate_row =
                                                      ng_test_powmean_src_accumulate_row};
static const ng_aggregator_def ng_test_softmax = {.size = sizeof(ng_aggregator_def),
                                                  .name = "softmax-t0.5",
                                                  .state_size = 3,
                                                  .init = sm_init,
                                                  .accumulate = sm_accumulate,
                                                  .merge = sm_merge,
                                                  .finalize = sm_finalize,
                                                  .grad = sm_grad,
                                                  .source = ng_test_softmax_src,
                                                  .accumulate_row =
                                                      ng_test_softmax_src_accumulate_row};
static const ng_aggregator_def ng_test_mean = {.size = sizeof(ng_aggregator_def),
                                               .name = "user-mean",
                                               .state_size = 1,
                                               .linear = 1,
                                               .init = mn_init,
                                               .accumulate = mn_accumulate,
                                               .merge = mn_merge,
                                               .finalize = mn_finalize,
                                               .source = ng_test_mean_src,
                                               .accumulate_row = ng_test_mean_src_accumulate_row};

#endif /* NG_TEST_AGG_H */
