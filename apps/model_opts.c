/* The options that describe a model, shared by `train`, `demo`, `embed` and `serve`. `train`
 * builds its model from them; `embed` and `serve` build the one the checkpoint describes, with
 * any option given in place of its setting, so that the library refuses one that differs. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const CLI_COMBINE_NAMES[] = {"sum", "concat", NULL};

int cli_parse_list(const char *command, const char *option, const char *text, double *out, int *n) {
  *n = 0;
  const char *p = text;
  while (*p) {
    if (*n == CLI_MAX_LAYERS)
      return cli_usage_error(command, "--%s: at most %d values", option, CLI_MAX_LAYERS);
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !isfinite(v) || (*end && *end != ','))
      return cli_usage_error(command, "--%s: '%s' is not a comma-separated list of numbers", option,
                             text);
    out[(*n)++] = v;
    p = *end ? end + 1 : end;
    if (*end == ',' && !*p)
      return cli_usage_error(command, "--%s: '%s' ends with a comma", option, text);
  }
  if (*n == 0)
    return cli_usage_error(command, "--%s: empty list", option);
  return CLI_CONTINUE;
}

int cli_parse_fanouts(const char *command, const char *text, bool zero_ok, int32_t *blocks,
                      int *layers) {
  double fan[CLI_MAX_LAYERS];
  int rc;
  if ((rc = cli_parse_list(command, "fanouts", text, fan, layers)) != CLI_CONTINUE)
    return rc;
  for (int i = 0; i < *layers; i++) {
    if (fan[i] != floor(fan[i]) || fan[i] < -1 || (fan[i] == 0 && !zero_ok) || fan[i] > INT32_MAX)
      return cli_usage_error(command, "--fanouts: %g is not a %s integer or -1 (all)", fan[i],
                             zero_ok ? "non-negative" : "positive");
    blocks[*layers - 1 - i] = (int32_t)fan[i]; /* from the targets out; block 0 is the input */
  }
  return CLI_CONTINUE;
}

/* The aggregator of --aggregator choice `choice` (an index of cli_aggregator_names(); 0 = auto). */
static ng_aggregator aggregator_of(int choice, int model) {
  ng_aggregator a = model == NG_MODEL_GCN ? NG_AGGREGATOR_GCN : NG_AGGREGATOR_MEAN;
  if (choice > 0) /* every choice but auto is a built-in's name, which parses */
    (void)ng_aggregator_parse(&a, cli_aggregator_names()[choice]);
  return a;
}

int cli_build_model(ng_model_t *out, const char *command, const cli_model_cfg *c,
                    const ng_dataset_info *info) {
  double wd[CLI_MAX_LAYERS];
  int32_t blocks[CLI_MAX_LAYERS];
  int n_layers, n_wd, rc;
  if ((rc = cli_parse_fanouts(command, c->fanouts, false, blocks, &n_layers)) != CLI_CONTINUE)
    return rc;
  if ((rc = cli_parse_list(command, "weight-decay", c->weight_decay, wd, &n_wd)) != CLI_CONTINUE)
    return rc;
  if (n_wd != 1 && n_wd != n_layers)
    return cli_usage_error(command,
                           "--weight-decay has %d values for %d layers: give one value, or one "
                           "per layer (input layer first)",
                           n_wd, n_layers);
  for (int i = 0; i < n_wd; i++)
    if (wd[i] < 0)
      return cli_usage_error(command, "--weight-decay: %g is negative", wd[i]);
  ng_model_t m = NULL;
  ng_status st = ng_model_create(&m, (ng_model_kind)c->model, info->feature_dim);
  for (int l = 0; l < n_layers && st == NG_OK; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    lo.fanout = blocks[l];
    lo.aggregator = aggregator_of(c->aggregator, c->model);
    lo.out_dim = l + 1 < n_layers ? c->hidden : info->classes;
    lo.activation = l + 1 < n_layers ? NG_ACT_RELU : NG_ACT_NONE;
    lo.dropout = (float)c->dropout;
    lo.weight_decay = (float)(n_wd == 1 ? wd[0] : wd[l]);
    lo.combine = (ng_sage_combine)c->combine;
    if (c->model == NG_MODEL_GAT) {
      /* Velickovic et al.: hidden layers concatenate their heads, the output layer averages. */
      bool hidden = l + 1 < n_layers;
      lo.heads = (int32_t)(hidden ? (c->heads > 0 ? c->heads : 8)
                                  : (c->output_heads > 0 ? c->output_heads : 1));
      lo.combine = hidden ? NG_HEADS_CONCAT : NG_HEADS_MEAN;
      lo.out_dim = hidden ? c->hidden * lo.heads : info->classes;
      lo.attn_dropout = (float)c->attn_dropout;
    }
    st = ng_model_add_layer(m, &lo);
  }
  if (st != NG_OK) {
    ng_model_destroy(m);
    return cli_runtime_error(st);
  }
  *out = m;
  return CLI_CONTINUE;
}

/* The options CLI_MODEL_OPTS defines: those that describe a checkpoint's model. */
static const char *const MODEL_OPT_NAMES[] = {
    "model",
    "fanouts",
    "hidden",
    "aggregator",
    "combine",
    "dropout",
    "weight-decay",
    "heads",
    "output-heads",
    "attn-dropout",
    "normalize-features",
};

void cli_model_opts_from_checkpoint(cli_opt *opts, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < sizeof MODEL_OPT_NAMES / sizeof *MODEL_OPT_NAMES; k++)
      if (strcmp(opts[i].name, MODEL_OPT_NAMES[k]) == 0)
        opts[i].default_text = "the checkpoint's";
}

static bool given(const cli_spec *spec, const char *name) {
  const cli_opt *o = cli_find_opt(spec, name);
  return o && o->seen;
}

/* The checkpoint's model `ck` with the model options given on the command line in place of its
 * settings: the library then compares the two and names a setting that differs. */
static int override_model(ng_model_t *out, const char *command, const cli_spec *spec,
                          const cli_model_cfg *c, ng_model_t ck) {
  ng_model_kind kind = NG_MODEL_SAGE;
  int64_t in_dim = 0;
  int32_t n = 0;
  ng_status st = ng_model_kind_get(&kind, &in_dim, ck);
  if (st == NG_OK)
    st = ng_model_shape(&n, NULL, ck);
  if (st != NG_OK)
    return cli_runtime_error(st);
  double fan[CLI_MAX_LAYERS], wd[CLI_MAX_LAYERS];
  int n_fan = 0, n_wd = 0, rc;
  if (given(spec, "fanouts")) {
    if ((rc = cli_parse_list(command, "fanouts", c->fanouts, fan, &n_fan)) != CLI_CONTINUE)
      return rc;
    if (n_fan != n)
      return cli_usage_error(command,
                             "--fanouts %s gives %d layers, but the checkpoint's model has %d; "
                             "leave --fanouts out (inference takes every neighbour)",
                             c->fanouts, n_fan, (int)n);
  }
  if (given(spec, "weight-decay") &&
      (rc = cli_parse_list(command, "weight-decay", c->weight_decay, wd, &n_wd)) != CLI_CONTINUE)
    return rc;
  if (given(spec, "model"))
    kind = (ng_model_kind)c->model;
  ng_model_t m = NULL;
  st = ng_model_create(&m, kind, in_dim);
  for (int32_t l = 0; l < n && st == NG_OK; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    st = ng_model_layer_get(&lo, ck, l);
    if (st != NG_OK)
      break;
    const bool hidden = l + 1 < n;
    if (n_fan)
      lo.fanout = (int32_t)fan[n - 1 - l]; /* --fanouts lists hops from the targets out */
    if (given(spec, "aggregator"))
      lo.aggregator = aggregator_of(c->aggregator, (int)kind);
    if (given(spec, "combine") && kind != NG_MODEL_GAT)
      lo.combine = (ng_sage_combine)c->combine;
    if (given(spec, "dropout"))
      lo.dropout = (float)c->dropout;
    if (n_wd)
      lo.weight_decay = (float)(n_wd == 1 ? wd[0] : wd[l < n_wd ? l : n_wd - 1]);
    if (given(spec, "attn-dropout"))
      lo.attn_dropout = (float)c->attn_dropout;
    if (kind == NG_MODEL_GAT && hidden) {
      const int64_t width = lo.out_dim / (lo.heads > 0 ? lo.heads : 1);
      if (given(spec, "heads"))
        lo.heads = (int32_t)c->heads;
      lo.out_dim = (given(spec, "hidden") ? c->hidden : width) * lo.heads;
    } else if (hidden && given(spec, "hidden")) {
      lo.out_dim = c->hidden;
    }
    if (kind == NG_MODEL_GAT && !hidden && given(spec, "output-heads"))
      lo.heads = (int32_t)c->output_heads;
    st = ng_model_add_layer(m, &lo);
  }
  if (st != NG_OK) {
    ng_model_destroy(m);
    return cli_runtime_error(st);
  }
  *out = m;
  return CLI_CONTINUE;
}

int cli_model_for_checkpoint(ng_model_t *out, ng_normalize *normalize, const char *command,
                             const cli_spec *spec, const cli_model_cfg *c, const char *checkpoint,
                             const ng_dataset_info *info) {
  ng_checkpoint_info ci = NG_CHECKPOINT_INFO_INIT;
  ng_status st = ng_checkpoint_info_get(&ci, checkpoint);
  if (st != NG_OK)
    return cli_runtime_error(st);
  if (!given(spec, "normalize-features") && ci.described)
    *normalize = ci.normalize;
  if (!ci.described) /* written before checkpoints described their model: the options do */
    return cli_build_model(out, command, c, info);
  ng_model_t ck = NULL;
  if ((st = ng_model_from_checkpoint(&ck, checkpoint)) != NG_OK)
    return cli_runtime_error(st);
  bool any = false;
  for (size_t k = 0; k < sizeof MODEL_OPT_NAMES / sizeof *MODEL_OPT_NAMES; k++)
    any |= strcmp(MODEL_OPT_NAMES[k], "normalize-features") != 0 && given(spec, MODEL_OPT_NAMES[k]);
  if (!any) {
    *out = ck;
    return CLI_CONTINUE;
  }
  int rc = override_model(out, command, spec, c, ck);
  ng_model_destroy(ck);
  return rc;
}
