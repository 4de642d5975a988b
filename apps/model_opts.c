/* The options that describe a model, shared by `train`, `demo` and `serve`: a served model is
 * built from the same command-line options as the one trained, so that its checkpoint fits. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

const char *const CLI_MODEL_NAMES[] = {"sage", "gcn", "gat", "gin", "sage-pool", NULL};
const char *const CLI_AGGR_NAMES[] = {"auto", "mean", "sum", "max", "min", "gcn", NULL};
const char *const CLI_COMBINE_NAMES[] = {"sum", "concat", NULL};
const char *const CLI_NORMALIZE_NAMES[] = {"none", "row", NULL};

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

static ng_aggregator aggregator_of(int choice, int model) {
  switch (choice) {
  case 1:
    return NG_AGGREGATOR_MEAN;
  case 2:
    return NG_AGGREGATOR_SUM;
  case 3:
    return NG_AGGREGATOR_MAX;
  case 4:
    return NG_AGGREGATOR_MIN;
  case 5:
    return NG_AGGREGATOR_GCN;
  default:
    return model == NG_MODEL_GCN ? NG_AGGREGATOR_GCN : NG_AGGREGATOR_MEAN;
  }
}

int cli_build_model(ng_model_t *out, const char *command, const cli_model_cfg *c,
                    const ng_dataset_info *info) {
  double fan[CLI_MAX_LAYERS], wd[CLI_MAX_LAYERS];
  int n_layers, n_wd, rc;
  if ((rc = cli_parse_list(command, "fanouts", c->fanouts, fan, &n_layers)) != CLI_CONTINUE)
    return rc;
  if ((rc = cli_parse_list(command, "weight-decay", c->weight_decay, wd, &n_wd)) != CLI_CONTINUE)
    return rc;
  if (n_wd != 1 && n_wd != n_layers)
    return cli_usage_error(command,
                           "--weight-decay has %d values for %d layers: give one value, or one "
                           "per layer (input layer first)",
                           n_wd, n_layers);
  for (int i = 0; i < n_layers; i++)
    if (fan[i] != floor(fan[i]) || (fan[i] < 1 && fan[i] != -1) || fan[i] > INT32_MAX)
      return cli_usage_error(command, "--fanouts: %g is not a positive integer or -1 (all)",
                             fan[i]);
  for (int i = 0; i < n_wd; i++)
    if (wd[i] < 0)
      return cli_usage_error(command, "--weight-decay: %g is negative", wd[i]);
  ng_model_t m = NULL;
  ng_status st = ng_model_create(&m, (ng_model_kind)c->model, info->feature_dim);
  for (int l = 0; l < n_layers && st == NG_OK; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    lo.fanout = (int32_t)fan[n_layers - 1 - l]; /* --fanouts lists hops from the targets out */
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
