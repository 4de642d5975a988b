/* Link prediction on the command line: `split-edges`, and `train --task link` (cmd_train.c
 * parses the shared options and hands the run to cli_train_link). docs/link-prediction.md. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))

const char *const CLI_TASK_NAMES[] = {"node", "link", NULL};
static const char *const NEG_SOURCE_NAMES[] = {"source", "uniform", NULL};

int cmd_split_edges(int argc, char **argv) {
  ng_split_edges_opts o = NG_SPLIT_EDGES_OPTS_INIT;
  const char *dataset = NULL;
  int undirected = 0, directed = 0;
  cli_opt opts[] = {
      CLI_OPT_STRING("dataset", &dataset, "DIR", "the dataset folder (links/ is written into it)",
                     .required = true),
      CLI_OPT_FLOAT("val", &o.val, "F", 0, false, 1, true,
                    "share of the edges held out for validation"),
      CLI_OPT_FLOAT("test", &o.test, "F", 0, false, 1, true,
                    "share of the edges held out for test"),
      CLI_OPT_INT("neg-per-pos", &o.neg_per_pos, "K", 1, 100000,
                  "fixed negatives per held-out positive (non-edges of the full graph)"),
      CLI_OPT_CHOICE("neg-source", &o.neg_source, "S", NEG_SOURCE_NAMES,
                     "the held-out negatives: source (the positive's source and a uniform "
                     "destination: OGB's MRR and Hits@K) or uniform (both ends uniform: the "
                     "Planetoid protocol's AUC and AP)"),
      CLI_OPT_UINT64("seed", &o.seed, "S", "the split and the negatives derive from it"),
      CLI_OPT_FLAG("undirected", &undirected,
                   "edges are node pairs stored both ways: hold out {u, v} and remove both "
                   "entries (default: dataset.json's \"undirected\")"),
      CLI_OPT_FLAG("directed", &directed, "every stored entry is an edge of its own"),
      CLI_OPT_INT("threads", &o.threads, "T", 0, INT32_MAX,
                  "threads; 0: OMP_NUM_THREADS or every core (the output never depends on it)"),
  };
  cli_spec spec = {
      .command = "split-edges",
      .synopsis = "--dataset DIR [options]",
      .about = "Splits a dataset's edges for link prediction into DIR/links/: training, "
               "validation and test positives, K fixed negatives per held-out positive, and the "
               "message-passing graph without the held-out edges, which link training samples "
               "from. Deterministic from --seed; an existing links/ is replaced atomically.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .example = "neargnn split-edges --dataset data/cora --val 0.05 --test 0.1 --seed 1 "
                 "--undirected",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  if (undirected && directed)
    return cli_usage_error(spec.command, "--undirected and --directed exclude each other");
  o.undirected = undirected ? 1 : directed ? 0 : -1;
  ng_link_split_info info = NG_LINK_SPLIT_INFO_INIT;
  const ng_status st = ng_dataset_split_edges(&info, dataset, &o);
  if (st != NG_OK)
    return cli_runtime_error(st);
  printf("split %s/links: %" PRId64 " train, %" PRId64 " val, %" PRId64
         " test edges (%s), %d %s negatives per held-out edge, message-passing graph %" PRId64
         " entries\n",
         dataset, info.train, info.val, info.test, info.undirected ? "undirected" : "directed",
         (int)info.neg_per_pos, NEG_SOURCE_NAMES[info.neg_source], info.mp_edges);
  return CLI_EXIT_OK;
}

static void print_metrics(const char *what, const ng_link_metrics *m) {
  printf("%s: auc %.4f  ap %.4f  mrr %.4f  hits@10 %.4f  hits@50 %.4f  hits@100 %.4f  "
         "loss %.4f\n",
         what, m->auc, m->ap, m->mrr, m->hits10, m->hits50, m->hits100, m->loss);
}

static cJSON *metrics_json(const ng_link_metrics *m) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "auc", m->auc);
  cJSON_AddNumberToObject(o, "ap", m->ap);
  cJSON_AddNumberToObject(o, "mrr", m->mrr);
  cJSON_AddNumberToObject(o, "hits10", m->hits10);
  cJSON_AddNumberToObject(o, "hits50", m->hits50);
  cJSON_AddNumberToObject(o, "hits100", m->hits100);
  cJSON_AddNumberToObject(o, "loss", m->loss);
  cJSON_AddNumberToObject(o, "positives", (double)m->positives);
  cJSON_AddNumberToObject(o, "negatives", (double)m->negatives);
  return o;
}

static int write_json(const char *path, cJSON *root) {
  char *text = cJSON_Print(root);
  FILE *f = text ? fopen(path, "w") : NULL;
  const bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  const bool closed = f && fclose(f) == 0;
  free(text);
  if (!ok || !closed) {
    fprintf(stderr, "neargnn train: error: cannot write %s\n", path);
    return CLI_EXIT_RUNTIME;
  }
  return CLI_EXIT_OK;
}

int cli_train_link(ng_dataset_t ds, ng_model_t m, const ng_train_opts *o, const cli_link_cfg *l,
                   int64_t epochs, int64_t eval_every, const char *json, const char *checkpoint) {
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  lo.decoder = (ng_link_decoder)l->decoder;
  lo.neg = (ng_link_neg)l->neg;
  lo.neg_per_pos = l->neg_per_pos;
  lo.self_pairs = l->self_pairs;
  ng_link_trainer_t t = NULL;
  ng_status st = ng_link_trainer_create(&t, ds, m, o, &lo);
  if (st == NG_OK)
    st = ng_link_trainer_set_epoch_iters(t, l->epoch_iters);
  if (st != NG_OK) {
    ng_link_trainer_destroy(t);
    return cli_runtime_error(st);
  }
  ng_link_split_info info = NG_LINK_SPLIT_INFO_INIT;
  (void)ng_link_info(&info, t);
  fprintf(stderr,
          "link training: %" PRId64 " train edges, %" PRId64 " val, %" PRId64
          " test; decoder %s, %d %s negatives per positive\n",
          info.train, info.val, info.test, ng_link_decoder_name((ng_link_decoder)l->decoder),
          (int)l->neg_per_pos, ng_link_neg_name((ng_link_neg)l->neg));
  cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "epochs");
  cJSON_AddStringToObject(root, "task", "link");
  cJSON_AddNumberToObject(root, "train_edges", (double)info.train);
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  for (int64_t e = 0; e < epochs && st == NG_OK; e++) {
    st = ng_link_trainer_epoch(&s, t);
    if (st != NG_OK)
      break;
    ng_link_metrics v = NG_LINK_METRICS_INIT;
    const bool eval = info.val > 0 && eval_every > 0 && (e + 1) % eval_every == 0;
    if (eval && (st = ng_link_trainer_evaluate(&v, t, NG_SPLIT_VAL)) != NG_OK)
      break;
    /* %a: the loss's exact bits, which every mode and thread count must agree on. */
    printf("epoch %" PRId64 ": loss %.6f (%a)  train acc %.4f  %.1f it/s", s.epoch + 1, s.loss,
           s.loss, s.train_acc, s.it_per_s);
    /* The controller's split of the workers between PARTIAL and TRANSFER at the epoch's end
     * (none inline). */
    if (s.workers[0] + s.workers[1] > 0)
      printf("  split %d/%d", s.workers[0], s.workers[1]);
    if (eval)
      printf("  val auc %.4f ap %.4f mrr %.4f", v.auc, v.ap, v.mrr);
    printf("\n");
    cJSON *je = cJSON_CreateObject();
    cJSON_AddNumberToObject(je, "epoch", (double)(s.epoch + 1));
    cJSON_AddNumberToObject(je, "loss", s.loss);
    cJSON_AddNumberToObject(je, "train_acc", s.train_acc);
    cJSON_AddNumberToObject(je, "seconds", s.seconds);
    cJSON_AddNumberToObject(je, "iterations", (double)s.iterations);
    cJSON_AddNumberToObject(je, "it_per_s", s.it_per_s);
    /* Positive training edges per second: the epoch's mini-batches (all of the training edges
     * unless --epoch-iters caps them) over its seconds. */
    const int64_t batch = o->batch > 0 ? o->batch : info.train;
    const double trained =
        (double)(s.iterations * batch < info.train ? s.iterations * batch : info.train);
    cJSON_AddNumberToObject(je, "edges_per_s", s.seconds > 0 ? trained / s.seconds : 0);
    char bits[64];
    snprintf(bits, sizeof bits, "%a", s.loss);
    cJSON_AddStringToObject(je, "loss_hex", bits);
    cJSON_AddNumberToObject(je, "iter_ms_median", s.iter_ms_median);
    cJSON_AddNumberToObject(je, "iter_ms_p99", s.iter_ms_p99);
    cJSON_AddNumberToObject(je, "partial_workers", s.workers[0]);
    cJSON_AddNumberToObject(je, "transfer_workers", s.workers[1]);
    cJSON_AddNumberToObject(je, "device_share", s.device_share);
    if (eval)
      cJSON_AddItemToObject(je, "val", metrics_json(&v));
    cJSON_AddItemToArray(arr, je);
  }
  int rc = CLI_EXIT_OK;
  if (st == NG_OK && info.test > 0) {
    ng_link_metrics r = NG_LINK_METRICS_INIT;
    const double t0 = cli_now();
    if ((st = ng_link_trainer_evaluate(&r, t, NG_SPLIT_TEST)) == NG_OK) {
      const double seconds = cli_now() - t0;
      print_metrics("test", &r);
      cJSON *jt = metrics_json(&r);
      /* The whole evaluation: layer-wise embeddings of the nodes named, then the scoring. */
      cJSON_AddNumberToObject(jt, "seconds", seconds);
      cJSON_AddItemToObject(root, "test", jt);
    }
  }
  /* The GNN and the decoder, for `neargnn serve` (pair scores) and the link trainer's reload. */
  if (st == NG_OK && checkpoint && (st = ng_link_trainer_save(t, checkpoint)) == NG_OK)
    fprintf(stderr, "checkpoint: %s\n", checkpoint);
  if (st != NG_OK)
    rc = cli_runtime_error(st);
  else if (json)
    rc = write_json(json, root);
  cJSON_Delete(root);
  ng_link_trainer_destroy(t);
  return rc;
}
