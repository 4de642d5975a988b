/* `neargnn train-hetero`: a relational model (R-GCN, R-SAGE) on a heterogeneous dataset, over
 * ng_hetero_trainer_* (docs/heterogeneous.md#training). */
#include "cli.h"

#include <inttypes.h>
#include <math.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))

int cmd_train_hetero(int argc, char **argv) {
  const char *data = NULL, *fanouts = "10,10";
  int model = 0;
  int32_t epochs = 10, batch = 256, threads = 0, bases = 0, heads = 4;
  int64_t hidden = 64, embed_dim = 0;
  double lr = 0.01, weight_decay = 0.0, dropout = 0.5;
  uint64_t seed = 1;
  cli_opt opts[] = {
      CLI_OPT_STRING("data", &data, "DIR", "the heterogeneous dataset folder", .required = true),
      CLI_OPT_CHOICE("model", &model, "M", cli_hetero_model_names(), NULL),
      CLI_OPT_STRING("fanouts", &fanouts, "K,K",
                     "neighbours per hop for every relation, from the targets out (-1: all); "
                     "their count is the number of layers"),
      CLI_OPT_INT("hidden", &hidden, "N", 1, 1 << 20, "columns of the hidden layers"),
      CLI_OPT_INT("embed-dim", &embed_dim, "N", 0, 1 << 20,
                  "columns of the embedding of each type without features (0: --hidden)"),
      CLI_OPT_INT("bases", &bases, "B", 0, 1024,
                  "R-GCN's basis decomposition: each layer's weights of one input width as "
                  "combinations of B shared bases (0: a weight per relation)"),
      CLI_OPT_INT("heads", &heads, "H", 1, 64,
                  "R-GAT's attention heads (hidden layers concatenate them: --hidden a multiple)"),
      CLI_OPT_INT("epochs", &epochs, "N", 1, 1000000, "epochs"),
      CLI_OPT_INT("batch", &batch, "N", 1, INT32_MAX, "target nodes per mini-batch"),
      CLI_OPT_FLOAT("lr", &lr, "F", 0, true, 1e9, false, "Adam's learning rate"),
      CLI_OPT_FLOAT("weight-decay", &weight_decay, "F", 0, false, 1e9, false,
                    "L2 on every parameter but the embeddings"),
      CLI_OPT_FLOAT("dropout", &dropout, "P", 0, false, 1, true,
                    "dropout on every layer's input rows in training"),
      CLI_OPT_UINT64("seed", &seed, "S", "parameters, shuffles, samples and dropout"),
      CLI_OPT_INT("threads", &threads, "T", 0, INT32_MAX,
                  "threads (0: OMP_NUM_THREADS or every core; the bits never depend on it)"),
  };
  cli_spec spec = {
      .command = "train-hetero",
      .synopsis = "--data DIR [options]",
      .about =
          "Trains R-GCN, R-SAGE or R-GAT to classify the target type of a heterogeneous dataset "
          "(neargnn generate --hetero, convert --format ogb on ogbn-mag) on the CPU: "
          "mini-batches of training targets, per-relation sampling, cross-entropy, Adam. "
          "Prints each epoch's loss, training and validation accuracy, then the test "
          "accuracy with every neighbour.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .example = "neargnn train-hetero --data data/mag --model rgcn --fanouts 10,10 --epochs 3",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  int32_t blocks[CLI_MAX_LAYERS];
  int layers = 0;
  if ((rc = cli_parse_fanouts(spec.command, fanouts, true, blocks, &layers)) != CLI_CONTINUE)
    return rc;
  ng_hetero_t ds = NULL;
  ng_status st = ng_hetero_open(&ds, data, NULL);
  if (st != NG_OK)
    return cli_runtime_error(st);
  ng_hetero_train_opts o = NG_HETERO_TRAIN_OPTS_INIT;
  o.model = (ng_hetero_model_kind)model;
  o.layers = layers;
  o.hidden = hidden;
  o.embed_dim = embed_dim;
  o.fanouts = blocks;
  o.batch_size = batch;
  o.lr = (float)lr;
  o.weight_decay = (float)weight_decay;
  o.dropout = (float)dropout;
  o.seed = seed;
  o.threads = threads;
  o.bases = bases;
  o.heads = heads;
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  ng_hetero_trainer_t t = NULL;
  if ((st = ng_hetero_info_get(&info, ds)) == NG_OK)
    st = ng_hetero_trainer_create(&t, ds, &o);
  for (int32_t e = 0; e < epochs && st == NG_OK; e++) {
    double loss = 0.0, acc = 0.0, val = 0.0;
    if ((st = ng_hetero_trainer_epoch(&loss, &acc, t)) != NG_OK)
      break;
    if (info.val > 0 && (st = ng_hetero_trainer_evaluate(&val, NULL, t, NG_SPLIT_VAL)) != NG_OK)
      break;
    /* %a: the loss's exact bits, which every thread count must agree on. */
    printf("epoch %d: loss %.6f (%a)  train acc %.4f", (int)e + 1, loss, loss, acc);
    if (info.val > 0)
      printf("  val acc %.4f", val);
    printf("\n");
  }
  if (st == NG_OK && info.test > 0) {
    double test = 0.0, loss = 0.0;
    if ((st = ng_hetero_trainer_evaluate(&test, &loss, t, NG_SPLIT_TEST)) == NG_OK)
      printf("test: acc %.4f  loss %.4f\n", test, loss);
  }
  rc = st == NG_OK ? CLI_EXIT_OK : cli_runtime_error(st);
  ng_hetero_trainer_destroy(t);
  ng_hetero_close(ds);
  return rc;
}
