/* User-defined aggregators (ng_aggregator_define): the definition's checks, done once when a
 * layer takes the aggregator, so that every backend can trust its state size and laws. */
#include "backend_impl.h"

#include <math.h>
#include <string.h>

/* Values and weights the checks use: positive (power means and logarithms stay defined),
 * distinct, not round. */
static const float CHECK_X[] = {0.73f, 1.91f, 0.28f, 1.37f, 0.55f, 1.62f, 0.94f};
static const float CHECK_W[] = {1.0f, 0.5f, 1.25f, 0.8f, 1.0f, 0.35f, 1.1f};
#define CHECK_N ((int)(sizeof CHECK_X / sizeof CHECK_X[0]))

/* finalize over x[i0..i1) with weights w (one state). */
static float run(const ng_aggregator_def *d, const float *x, const float *w, int i0, int i1,
                 float *s) {
  d->init(s);
  for (int i = i0; i < i1; i++)
    d->accumulate(s, x[i], w[i]);
  return d->finalize(s, (float)(i1 - i0));
}

static bool close_to(float a, float b, float rel) {
  return isfinite(a) && isfinite(b) && fabsf(a - b) <= rel * (1.0f + fmaxf(fabsf(a), fabsf(b)));
}

float ng__agg_linear_coef(const ng_aggregator_def *def, float w, float degree) {
  float s[NG_AGG_STATE_MAX], z[NG_AGG_STATE_MAX];
  def->init(s);
  def->accumulate(s, 1.0f, w);
  def->init(z);
  return def->finalize(s, degree) - def->finalize(z, degree);
}

/* The source text defines function `fn` (by name; the CUDA backend compiles it). */
static ng_status check_source_has(const ng_aggregator_def *d, const char *fn) {
  if (!strstr(d->source, fn))
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggregator \"%s\": its source defines no %s; write the functions once with "
                   "NG_AGGREGATOR_SOURCE and pass its name as source",
                   d->name, fn);
  return NG_OK;
}

static ng_status check_laws(const ng_aggregator_def *d) {
  float s[NG_AGG_STATE_MAX], t[NG_AGG_STATE_MAX];
  const float *x = CHECK_X, *w = CHECK_W;
  const int n = CHECK_N;
  /* The merge law: the states of two halves merge into the whole list's state. */
  const float whole = run(d, x, w, 0, n, s);
  if (!isfinite(whole))
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggregator \"%s\": finalize gives %g over %d positive neighbour values; it "
                   "must be finite",
                   d->name, (double)whole, n);
  for (int k = 1; k < n; k++) {
    run(d, x, w, 0, k, s);
    run(d, x, w, k, n, t);
    d->merge(s, t);
    const float merged = d->finalize(s, (float)n);
    if (!close_to(merged, whole, 1e-4f))
      return ng__err(NG_ERR_INVALID_ARG,
                     "aggregator \"%s\": merging the states of neighbours [0, %d) and [%d, %d) "
                     "finalizes to %.7g, one state over all of them to %.7g; merge must be the "
                     "law that combines two partial states (associative, commutative)",
                     d->name, k, k, n, (double)merged, (double)whole);
    run(d, x, w, k, n, s); /* commutative: the other order */
    run(d, x, w, 0, k, t);
    d->merge(s, t);
    const float swapped = d->finalize(s, (float)n);
    if (!close_to(swapped, whole, 1e-4f))
      return ng__err(NG_ERR_INVALID_ARG,
                     "aggregator \"%s\": merge(state of [%d, %d), state of [0, %d)) finalizes to "
                     "%.7g but the whole list to %.7g; merge must be commutative",
                     d->name, k, n, k, (double)swapped, (double)whole);
  }
  /* The backward: linear (y(a x + b x') = a y(x) + b y(x'), coefficients from the functions),
   * or grad against a central difference of finalize. */
  for (int j = 0; j < n; j++) {
    float xp[CHECK_N], xm[CHECK_N];
    memcpy(xp, x, sizeof xp);
    memcpy(xm, x, sizeof xm);
    const float h = 1e-2f * x[j];
    xp[j] = x[j] + h;
    xm[j] = x[j] - h;
    const float fd = (run(d, xp, w, 0, n, t) - run(d, xm, w, 0, n, t)) / (xp[j] - xm[j]);
    float g;
    if (d->linear) {
      g = ng__agg_linear_coef(d, w[j], (float)n);
    } else {
      const float y = run(d, x, w, 0, n, s);
      g = d->grad(s, (float)n, x[j], w[j], y);
    }
    if (!(isfinite(g) && fabsf(g - fd) <= 1e-2f * (fabsf(fd) + 1e-2f)))
      return ng__err(NG_ERR_INVALID_ARG,
                     "aggregator \"%s\": d y / d x of neighbour %d is %.6g by %s but %.6g by a "
                     "finite difference; %s",
                     d->name, j, (double)g, d->linear ? "the linearity declared" : "agg_grad",
                     (double)fd,
                     d->linear ? "an aggregator that is not linear in its inputs needs agg_grad"
                               : "fix agg_grad");
  }
  if (d->linear) {
    float x2[CHECK_N];
    for (int i = 0; i < n; i++)
      x2[i] = 3.0f * x[i];
    const float y3 = run(d, x2, w, 0, n, s);
    if (!close_to(y3, 3.0f * whole, 1e-4f))
      return ng__err(NG_ERR_INVALID_ARG,
                     "aggregator \"%s\" is declared linear but tripling its inputs gives %.7g, "
                     "not 3 x %.7g; declare it non-linear and give agg_grad",
                     d->name, (double)y3, (double)whole);
  }
  return NG_OK;
}

ng_status ng__aggregator_def_check(const ng_aggregator_def *d) {
  if (!d)
    return ng__err(NG_ERR_INVALID_ARG, "aggregator definition is NULL");
  if (d->size != sizeof(ng_aggregator_def))
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggregator definition: size is %zu but sizeof(ng_aggregator_def) is %zu; set "
                   ".size = sizeof(ng_aggregator_def)",
                   d->size, sizeof(ng_aggregator_def));
  if (!d->name || !d->name[0] || strlen(d->name) > 63 || strpbrk(d->name, " \t\n\"=,"))
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggregator definition: name \"%s\" must be 1 to 63 characters without "
                   "spaces, quotes, '=' or ','",
                   d->name ? d->name : "(null)");
  if (d->state_size < 1 || d->state_size > NG_AGG_STATE_MAX)
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggregator \"%s\": state_size %d is not in [1, %d] (NG_AGG_STATE_MAX)", d->name,
                   (int)d->state_size, NG_AGG_STATE_MAX);
  if (d->linear != 0 && d->linear != 1)
    return ng__err(NG_ERR_INVALID_ARG, "aggregator \"%s\": linear is %d; use 0 or 1", d->name,
                   (int)d->linear);
  const struct {
    const char *what;
    const void *fn;
    bool needed;
  } fns[] = {{"init", (const void *)d->init, true},
             {"accumulate", (const void *)d->accumulate, true},
             {"merge", (const void *)d->merge, true},
             {"finalize", (const void *)d->finalize, true},
             {"grad (the aggregator is not declared linear)", (const void *)d->grad, !d->linear}};
  for (size_t i = 0; i < NG_ARRAY_LEN(fns); i++)
    if (fns[i].needed && !fns[i].fn)
      return ng__err(NG_ERR_INVALID_ARG, "aggregator \"%s\": no %s function", d->name, fns[i].what);
  if (d->source) {
    NG_CHECK(check_source_has(d, "agg_init"));
    NG_CHECK(check_source_has(d, "agg_accumulate"));
    NG_CHECK(check_source_has(d, "agg_merge"));
    NG_CHECK(check_source_has(d, "agg_finalize"));
    if (!d->linear)
      NG_CHECK(check_source_has(d, "agg_grad"));
  }
  if (d->accumulate_row) { /* the row function is the per-feature one, bit for bit */
    float a[CHECK_N * NG_AGG_STATE_MAX], b[CHECK_N * NG_AGG_STATE_MAX];
    const int32_t S = d->state_size;
    for (int c = 0; c < CHECK_N; c++) {
      d->init(a + c * S);
      d->init(b + c * S);
    }
    for (int r = 0; r < 3; r++) {
      d->accumulate_row(a, S, CHECK_X, CHECK_W[r], CHECK_N);
      for (int c = 0; c < CHECK_N; c++)
        d->accumulate(b + c * S, CHECK_X[c], CHECK_W[r]);
    }
    if (memcmp(a, b, sizeof(float) * (size_t)(CHECK_N * S)) != 0)
      return ng__err(NG_ERR_INVALID_ARG,
                     "aggregator \"%s\": accumulate_row gives other states than accumulate per "
                     "feature; use the one NG_AGGREGATOR_SOURCE defines (NG_AGGREGATOR_FUNCTIONS)",
                     d->name);
  }
  return check_laws(d);
}

ng_status ng_aggregator_define(ng_aggregator *out, const ng_aggregator_def *def) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_aggregator_define: out is NULL");
  NG_CHECK(ng__aggregator_def_check(def));
  *out = (ng_aggregator){NG_REDUCE_SUM, NG_EDGE_WEIGHT_NONE, NG_FINALIZE_NONE, 0, def};
  return NG_OK;
}
