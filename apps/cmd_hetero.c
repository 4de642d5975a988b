/* `neargnn train-hetero`: a relational model (R-GCN, R-SAGE) on a heterogeneous dataset, over
 * ng_hetero_trainer_* (docs/heterogeneous.md#training). */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))

static const char *const PREDICT_SPLITS[] = {"train", "val", "test", "all", NULL};

/* Writes "node,class" for the target-type nodes of split `split` (3: every node) to `path`, the
 * predicted class of each (the largest logit, the first on a tie). */
static ng_status write_predictions(ng_hetero_trainer_t t, ng_hetero_t ds, int split,
                                   const char *path) {
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  ng_status st = ng_hetero_info_get(&info, ds);
  ng_node_type_info nt = NG_NODE_TYPE_INFO_INIT;
  if (st == NG_OK)
    st = ng_hetero_node_type(&nt, ds, info.target);
  if (st != NG_OK)
    return st;
  const int64_t *ids = NULL;
  int64_t n = 0;
  int64_t *all = NULL;
  if (split == 3) {
    n = nt.count;
    all = malloc(sizeof *all * (size_t)(n > 0 ? n : 1));
    if (!all)
      return NG_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++)
      all[i] = i;
    ids = all;
  } else if ((st = ng_hetero_split(&ids, &n, ds, split)) != NG_OK)
    return st;
  float *logits = malloc(sizeof *logits * (size_t)(n > 0 ? n : 1) * (size_t)info.classes);
  if (!logits)
    st = NG_ERR_NOMEM;
  if (st == NG_OK)
    st = ng_hetero_trainer_predict(logits, t, ids, n);
  /* Built in memory and written atomically (ng_file_write), as every output. */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = st == NG_OK ? open_memstream(&buf, &len) : NULL;
  if (st == NG_OK && !f)
    st = NG_ERR_NOMEM;
  if (st == NG_OK) {
    fprintf(f, "node,class\n");
    for (int64_t i = 0; i < n; i++) {
      const float *row = logits + i * info.classes;
      int32_t best = 0;
      for (int32_t c = 1; c < info.classes; c++)
        if (row[c] > row[best])
          best = c;
      fprintf(f, "%" PRId64 ",%d\n", ids[i], (int)best);
    }
    if (fclose(f) != 0)
      st = NG_ERR_NOMEM;
    else
      st = ng_file_write(path, buf, len);
  }
  free(buf);
  free(logits);
  free(all);
  return st;
}

int cmd_train_hetero(int argc, char **argv) {
  const char *data = NULL, *fanouts = "10,10", *checkpoint = NULL, *load = NULL;
  const char *predict = NULL;
  int predict_split = 2;
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
      CLI_OPT_INT("epochs", &epochs, "N", 0, 1000000, "epochs (0: only --load and --predict)"),
      CLI_OPT_STRING("load", &load, "FILE",
                     "start from the weights of a checkpoint of train-hetero --checkpoint (the "
                     "same model and dataset schema)"),
      CLI_OPT_STRING("checkpoint", &checkpoint, "FILE",
                     "save the trained model (weights, optimizer state, description) to FILE"),
      CLI_OPT_STRING("predict", &predict, "FILE",
                     "write \"node,class\" lines: the predicted class of the target type's "
                     "nodes of --predict-split, every neighbour"),
      CLI_OPT_CHOICE("predict-split", &predict_split, "S", PREDICT_SPLITS,
                     "the nodes --predict writes (all: every node of the target type)"),
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
  if (st == NG_OK && load)
    st = ng_hetero_trainer_load_weights(t, load);
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
  if (st == NG_OK && checkpoint && (st = ng_hetero_trainer_save(t, checkpoint)) == NG_OK)
    printf("checkpoint: %s\n", checkpoint);
  if (st == NG_OK && predict && (st = write_predictions(t, ds, predict_split, predict)) == NG_OK)
    printf("predictions: %s\n", predict);
  rc = st == NG_OK ? CLI_EXIT_OK : cli_runtime_error(st);
  ng_hetero_trainer_destroy(t);
  ng_hetero_close(ds);
  return rc;
}
