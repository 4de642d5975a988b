/* Inference subcommands: `evaluate` (accuracy and loss of a checkpoint on a dataset's splits) and
 * `predict` (classes or logits of a split, a node list or every node). The model comes from the
 * checkpoint's own description (ng_model_from_checkpoint), so no model options are repeated;
 * the parameters are loaded without the optimizer state (ng_trainer_load_weights). */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))
/* Returns a library call's failure (the command sees only the public header). */
#define TRY(call)                                                                                  \
  do {                                                                                             \
    const ng_status try_st_ = (call);                                                              \
    if (try_st_ != NG_OK)                                                                          \
      return try_st_;                                                                              \
  } while (0)

static const char *const SPLIT_NAMES[] = {"train", "val", "test", "all", NULL};

/* What both commands share: the checkpoint, the dataset and where inference runs. */
typedef struct {
  const char *checkpoint, *dataset, *device;
  int32_t threads;
  int64_t eval_chunk;
  int progress;
  int check_features; /* an index of CLI_CHECK_FEATURES_NAMES */
} infer_cfg;

// clang-format off
#define INFER_OPTS(c)                                                                              \
  CLI_OPT_STRING("checkpoint", &(c)->checkpoint, "FILE",                                           \
                 "a checkpoint written by neargnn train --checkpoint", .required = true),          \
      CLI_OPT_STRING("dataset", &(c)->dataset, "DIR",                                              \
                     "dataset folder (the training one, or another with the same feature "         \
                     "columns and classes)", .required = true),                                    \
      CLI_OPT_STRING("device", &(c)->device, "DEV", "cpu, or cuda in a build with the CUDA "       \
                     "backend"),                                                                   \
      CLI_OPT_INT("threads", &(c)->threads, "T", 0, 4096, "CPU threads; 0 = OMP_NUM_THREADS or all"),\
      CLI_OPT_INT("eval-chunk", &(c)->eval_chunk, "N", 0, INT32_MAX / 2,                           \
                  "nodes per chunk of layer-wise full-neighbour inference; 0 = per layer "         \
                  "(docs/inference.md)"),                                                          \
      CLI_OPT_CHECK_FEATURES(&(c)->check_features),                                                \
      CLI_OPT_PROGRESS(&(c)->progress)
// clang-format on

/* An open dataset, the checkpoint's model and a trainer holding its weights. */
typedef struct {
  ng_dataset_t ds;
  ng_model_t model;
  ng_trainer_t t;
  ng_dataset_info info;
  ng_checkpoint_info ck;
  cli_progress pr;
  bool progress_on;
} session;

static void session_close(session *s) {
  ng_trainer_destroy(s->t);
  ng_model_destroy(s->model);
  ng_dataset_close(s->ds);
}

static ng_status session_open(session *s, const infer_cfg *c, const char *command) {
  memset(s, 0, sizeof *s);
  s->info = (ng_dataset_info)NG_DATASET_INFO_INIT;
  s->ck = (ng_checkpoint_info)NG_CHECKPOINT_INFO_INIT;
  TRY(ng_checkpoint_info_get(&s->ck, c->checkpoint));
  TRY(ng_model_from_checkpoint(&s->model, c->checkpoint));
  TRY(cli_dataset_open(&s->ds, c->dataset, c->check_features));
  TRY(ng_dataset_info_get(&s->info, s->ds));
  if (strcmp(s->ck.dataset, s->info.name) != 0 || s->ck.nodes != s->info.nodes)
    fprintf(stderr,
            "neargnn %s: note: the checkpoint was trained on '%s' (%" PRId64 " nodes); "
            "inferring on '%s' (%" PRId64 " nodes)\n",
            command, s->ck.dataset, s->ck.nodes, s->info.name, s->info.nodes);
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.device = c->device;
  o.threads = c->threads;
  o.eval_chunk = c->eval_chunk;
  o.normalize = s->ck.normalize;          /* the features as the model saw them in training */
  o.features_memory = NG_FEATURES_MAPPED; /* inference reads the table once: no copy */
  o.workers = -1;                         /* no training: no worker threads */
  if (strcmp(c->device, "cpu") != 0) {
    o.cache_ratio = 0.0;       /* no hot tier: inference gathers its rows from host memory */
    o.mode = NG_MODE_BASELINE; /* AUTO's hybrid splits workers, and there are none */
  }
  cli_progress_begin(&s->pr, command, (cli_progress_mode)c->progress);
  s->progress_on = true;
  o.progress = cli_progress_cb;
  o.progress_ctx = &s->pr;
  TRY(ng_trainer_create(&s->t, s->ds, s->model, &o));
  return ng_trainer_load_weights(s->t, c->checkpoint);
}

static int finish(session *s, ng_status st) {
  if (s->progress_on)
    cli_progress_end(&s->pr, st);
  session_close(s);
  return st == NG_OK ? CLI_EXIT_OK : cli_runtime_error(st);
}

static int write_text(const char *path, const char *text) {
  if (strcmp(path, "-") == 0) {
    fputs(text, stdout);
    return CLI_EXIT_OK;
  }
  const ng_status st = ng_file_write(path, text, strlen(text));
  return st == NG_OK ? CLI_EXIT_OK : cli_runtime_error(st);
}

/* ---- evaluate ---- */

int cmd_evaluate(int argc, char **argv) {
  infer_cfg c = {.device = "cpu", .eval_chunk = 0};
  const char *json = NULL;
  cli_opt opts[] = {
      INFER_OPTS(&c),
      CLI_OPT_STRING("json", &json, "FILE", "also write the figures as JSON (- for stdout)"),
  };
  cli_spec spec = {
      .command = "evaluate",
      .synopsis = "--checkpoint FILE --dataset DIR [options]",
      .about = "Loads a checkpoint's model and weights (the model's settings come from the "
               "checkpoint) and reports the accuracy and mean cross-entropy loss on each split of "
               "the dataset, with full-neighbour layer-wise inference.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .example = "neargnn evaluate --checkpoint cora.ckpt --dataset data/cora",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  session s;
  ng_status st = session_open(&s, &c, spec.command);
  const int64_t sizes[3] = {s.info.train, s.info.val, s.info.test};
  double acc[3] = {-1, -1, -1}, loss[3] = {-1, -1, -1};
  for (int k = 0; k < 3 && st == NG_OK; k++)
    if (sizes[k] > 0)
      st = ng_trainer_evaluate(&acc[k], &loss[k], s.t, (ng_split)k);
  if (s.progress_on) {
    cli_progress_end(&s.pr, st);
    s.progress_on = false;
  }
  if (st != NG_OK)
    return finish(&s, st);
  cJSON *root = json ? cJSON_CreateObject() : NULL;
  const bool quiet = json && strcmp(json, "-") == 0;
  if (!quiet)
    printf("%-6s %10s %9s %9s\n", "split", "nodes", "accuracy", "loss");
  for (int k = 0; k < 3; k++) {
    if (!quiet) {
      if (sizes[k] > 0)
        printf("%-6s %10" PRId64 " %9.4f %9.4f\n", SPLIT_NAMES[k], sizes[k], acc[k], loss[k]);
      else
        printf("%-6s %10s %9s %9s\n", SPLIT_NAMES[k], "0", "n/a", "n/a");
    }
    cJSON *e = root ? cJSON_AddObjectToObject(root, SPLIT_NAMES[k]) : NULL;
    if (!e)
      continue;
    cJSON_AddNumberToObject(e, "nodes", (double)sizes[k]);
    if (sizes[k] > 0) {
      cJSON_AddNumberToObject(e, "accuracy", acc[k]);
      cJSON_AddNumberToObject(e, "loss", loss[k]);
    } else {
      cJSON_AddNullToObject(e, "accuracy");
      cJSON_AddNullToObject(e, "loss");
    }
  }
  if (root) {
    cJSON_AddStringToObject(root, "checkpoint", c.checkpoint);
    cJSON_AddStringToObject(root, "dataset", s.info.name);
    cJSON_AddNumberToObject(root, "epochs_done", (double)s.ck.epochs_done);
    char *text = cJSON_Print(root);
    if (text) {
      size_t n = strlen(text);
      char *line = malloc(n + 2);
      if (line) {
        memcpy(line, text, n);
        memcpy(line + n, "\n", 2);
        rc = write_text(json, line);
        free(line);
      }
      cJSON_free(text);
    }
    cJSON_Delete(root);
  }
  session_close(&s);
  return rc == CLI_CONTINUE ? CLI_EXIT_OK : rc;
}

/* ---- predict ---- */

typedef struct {
  int64_t orig, id;
} id_pair;

static int cmp_pair(const void *a, const void *b) {
  const id_pair *x = a, *y = b;
  return (x->orig > y->orig) - (x->orig < y->orig);
}

/* Parses --nodes: "3,17,42" or "@FILE" (one id per line, '#' comments). */
static int parse_nodes(int64_t **out, int64_t *n, const char *text) {
  FILE *f = NULL;
  char *buf = NULL;
  if (text[0] == '@') {
    f = fopen(text + 1, "r");
    if (!f) {
      fprintf(stderr, "neargnn: error: cannot read %s: %s\n", text + 1, strerror(errno));
      return CLI_EXIT_RUNTIME;
    }
  }
  int64_t cap = 64, len = 0;
  int64_t *ids = malloc((size_t)cap * sizeof *ids);
  char line[256];
  const char *p = text;
  int rc = CLI_CONTINUE;
  long long line_no = 0;
  while (ids && rc == CLI_CONTINUE) {
    if (f) {
      if (!fgets(line, sizeof line, f))
        break;
      line_no++;
      char *hash = strchr(line, '#');
      if (hash)
        *hash = '\0';
      p = line;
    } else if (!*p) {
      break;
    }
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
      p++;
    if (!*p && f)
      continue;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0) {
      /* A file's text is not echoed: the path may name anything (a link to a secret). */
      if (f)
        rc = cli_usage_error("predict", "--nodes %s, line %lld: not a node id (one per line)", text,
                             line_no);
      else
        rc = cli_usage_error("predict", "--nodes: '%.40s' is not a list of node ids", p);
      break;
    }
    if (len == cap) {
      int64_t *grown = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
      if (!grown) {
        free(ids);
        ids = NULL;
        break;
      }
      ids = grown;
    }
    ids[len++] = v;
    p = end;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
      p++;
    if (!f && *p == ',')
      p++;
    else if (!f && *p) {
      rc = cli_usage_error("predict", "--nodes: '%s' is not a comma-separated list of ids", text);
      break;
    }
  }
  if (f)
    fclose(f);
  free(buf);
  if (!ids) {
    fprintf(stderr, "neargnn: error: out of memory reading --nodes\n");
    return CLI_EXIT_RUNTIME;
  }
  if (rc != CLI_CONTINUE || len == 0) {
    free(ids);
    return rc != CLI_CONTINUE ? rc : cli_usage_error("predict", "--nodes: no node ids");
  }
  *out = ids;
  *n = len;
  return CLI_CONTINUE;
}

/* Maps user-visible ids (original ids of a renumbered dataset) to dataset ids, in place. */
static int map_user_ids(int64_t *ids, int64_t n, const int64_t *orig, int64_t nodes) {
  if (!orig) {
    for (int64_t i = 0; i < n; i++)
      if (ids[i] >= nodes)
        return cli_usage_error("predict",
                               "--nodes: %" PRId64 " is not a node id (the dataset "
                               "has %" PRId64 " nodes)",
                               ids[i], nodes);
    return CLI_CONTINUE;
  }
  id_pair *pairs = malloc((size_t)nodes * sizeof *pairs);
  if (!pairs) {
    fprintf(stderr, "neargnn: error: out of memory mapping node ids\n");
    return CLI_EXIT_RUNTIME;
  }
  for (int64_t v = 0; v < nodes; v++)
    pairs[v] = (id_pair){orig[v], v};
  qsort(pairs, (size_t)nodes, sizeof *pairs, cmp_pair);
  int rc = CLI_CONTINUE;
  for (int64_t i = 0; i < n && rc == CLI_CONTINUE; i++) {
    id_pair key = {ids[i], 0};
    id_pair *hit = bsearch(&key, pairs, (size_t)nodes, sizeof *pairs, cmp_pair);
    if (!hit)
      rc = cli_usage_error("predict",
                           "--nodes: %" PRId64 " is not an original node id of this "
                           "dataset (it was renumbered: ids are the source's)",
                           ids[i]);
    else
      ids[i] = hit->id;
  }
  free(pairs);
  return rc;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

int cmd_predict(int argc, char **argv) {
  infer_cfg c = {.device = "cpu", .eval_chunk = 0};
  int split = 2; /* test */
  const char *nodes_text = NULL, *out = NULL, *out_ids = NULL;
  int logits = 0;
  cli_opt opts[] = {
      INFER_OPTS(&c),
      CLI_OPT_CHOICE("split", &split, "S", SPLIT_NAMES,
                     "the nodes to predict: a split, or all nodes"),
      CLI_OPT_STRING("nodes", &nodes_text, "LIST",
                     "predict these nodes instead of a split: ids separated by commas, or @FILE "
                     "with one per line (original ids of a renumbered dataset)"),
      CLI_OPT_FLAG("logits", &logits, "write every class's logit instead of the predicted class"),
      CLI_OPT_STRING("out", &out, "FILE",
                     "write here instead of stdout: FILE.npy as NumPy (int32 classes, or float32 "
                     "[n, classes] logits), any other name as CSV"),
      CLI_OPT_STRING("out-ids", &out_ids, "FILE",
                     "with a .npy --out: also write the predicted nodes' ids (int64 .npy)"),
  };
  cli_spec spec = {
      .command = "predict",
      .synopsis = "--checkpoint FILE --dataset DIR [options]",
      .about = "Loads a checkpoint's model and weights and predicts, with full-neighbour "
               "layer-wise inference, the class (or every class's logit) of a split's nodes, of "
               "a node list, or of every node. Text output is CSV: the node's id (its original id "
               "when the dataset was renumbered) then the class or the logits.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .example = "neargnn predict --checkpoint cora.ckpt --dataset data/cora --split test --out "
                 "pred.npy --out-ids ids.npy",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  if (nodes_text && cli_find_opt(&spec, "split")->seen)
    return cli_usage_error(spec.command, "give --split or --nodes, not both");
  if (out_ids && !(out && ends_with(out, ".npy")))
    return cli_usage_error(spec.command, "--out-ids goes with a .npy --out");
  session s;
  ng_status st = session_open(&s, &c, spec.command);
  int64_t *ids = NULL, n = 0;
  const int64_t *orig = NULL;
  if (st == NG_OK)
    st = ng_dataset_orig_ids(&orig, s.ds);
  if (st != NG_OK)
    return finish(&s, st);
  /* The nodes, as dataset ids. */
  if (nodes_text) {
    rc = parse_nodes(&ids, &n, nodes_text);
    if (rc == CLI_CONTINUE)
      rc = map_user_ids(ids, n, orig, s.info.nodes);
  } else {
    const int64_t sizes[3] = {s.info.train, s.info.val, s.info.test};
    n = split == 3 ? s.info.nodes : sizes[split];
    if (n == 0)
      rc = cli_usage_error(spec.command, "dataset '%s' has no %s split", s.info.name,
                           SPLIT_NAMES[split]);
    ids = rc == CLI_CONTINUE ? malloc((size_t)n * sizeof *ids) : NULL;
    if (rc == CLI_CONTINUE && !ids)
      st = NG_ERR_NOMEM;
    if (ids && split == 3) {
      for (int64_t i = 0; i < n; i++)
        ids[i] = i;
    } else if (ids) {
      /* The split's ids in the dataset's order. */
      const int64_t *split_ids = NULL;
      int64_t count = 0;
      st = ng_dataset_split(&split_ids, &count, s.ds, split);
      if (st == NG_OK)
        memcpy(ids, split_ids, (size_t)count * sizeof *ids);
    }
  }
  if (rc != CLI_CONTINUE) {
    free(ids);
    session_close(&s);
    return rc;
  }
  const int64_t k = s.info.classes;
  float *lg = st == NG_OK && logits ? malloc((size_t)n * (size_t)k * sizeof *lg) : NULL;
  int32_t *cls = st == NG_OK && !logits ? malloc((size_t)n * sizeof *cls) : NULL;
  if (st == NG_OK && !lg && !cls)
    st = NG_ERR_NOMEM;
  if (st == NG_OK)
    st = ng_trainer_predict_nodes(lg, cls, s.t, ids, n);
  if (s.progress_on) {
    cli_progress_end(&s.pr, st);
    s.progress_on = false;
  }
  /* User-visible ids: the original ones of a renumbered dataset. */
  for (int64_t i = 0; st == NG_OK && orig && i < n; i++)
    ids[i] = orig[ids[i]];
  if (st == NG_OK && out && ends_with(out, ".npy")) {
    const int64_t shape[2] = {n, k};
    st = logits ? ng_npy_save(out, 1, NG_INT32, 2, shape, lg)
                : ng_npy_save(out, 0, NG_INT32, 1, shape, cls);
    if (st == NG_OK && out_ids)
      st = ng_npy_save(out_ids, 0, NG_INT64, 1, shape, ids);
    if (st == NG_OK)
      fprintf(stderr, "neargnn predict: %s of %" PRId64 " nodes written to %s%s%s\n",
              logits ? "logits" : "classes", n, out, out_ids ? ", their ids to " : "",
              out_ids ? out_ids : "");
  } else if (st == NG_OK) {
    /* A file is built in memory and written atomically (ng_file_write), as every output. */
    char *buf = NULL;
    size_t buf_len = 0;
    FILE *f = out ? open_memstream(&buf, &buf_len) : stdout;
    if (!f) {
      fprintf(stderr, "neargnn: error: out of memory building %s\n", out);
      rc = CLI_EXIT_RUNTIME;
    } else {
      fprintf(f, logits ? "node" : "node,class");
      for (int64_t j = 0; logits && j < k; j++)
        fprintf(f, ",logit%" PRId64, j);
      fputc('\n', f);
      for (int64_t i = 0; i < n; i++) {
        fprintf(f, "%" PRId64, ids[i]);
        if (logits)
          for (int64_t j = 0; j < k; j++)
            fprintf(f, ",%.6g", (double)lg[i * k + j]);
        else
          fprintf(f, ",%d", (int)cls[i]);
        fputc('\n', f);
      }
      if (out && fclose(f) != 0) {
        fprintf(stderr, "neargnn: error: out of memory building %s\n", out);
        rc = CLI_EXIT_RUNTIME;
      } else if (out) {
        const ng_status wst = ng_file_write(out, buf, buf_len);
        if (wst != NG_OK)
          rc = cli_runtime_error(wst);
      }
    }
    free(buf);
  }
  free(lg);
  free(cls);
  free(ids);
  if (st != NG_OK)
    return finish(&s, st);
  session_close(&s);
  return rc == CLI_CONTINUE ? CLI_EXIT_OK : rc;
}
