/* `embed`: layer-wise inference of a trained model (docs/inference.md). */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))

/* One line per layer: where inference's time went (docs/inference.md). */
static void embed_report(FILE *f, const ng_infer_report *r) {
  fprintf(f,
          "neargnn embed: producers %d, chunks in flight %d, %.2f GB resident on the device "
          "(cold rows uploaded in %.2f s)\n",
          (int)r->producers, (int)r->slots, (double)r->device_bytes / 1e9, r->upload_seconds);
  for (int l = 0; l < r->layers && l < NG_INFER_REPORT_LAYERS; l++)
    fprintf(f,
            "neargnn embed: layer %d: %" PRId64 " rows in %.2f s, chunks of %" PRId64
            " (host %.2f s over the producers, device thread computing %.2f s, waiting %.2f s)\n",
            l, r->rows[l], r->seconds[l], r->chunk[l], r->host_seconds[l], r->device_seconds[l],
            r->wait_seconds[l]);
  fprintf(f, "neargnn embed: output written back to disk in %.2f s after the last layer\n",
          r->write_seconds);
}

static ng_status embed_json(const char *path, const ng_infer_report *r, int64_t n, double secs) {
  /* Built in memory and written atomically (ng_file_write), as every output. */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    fprintf(stderr, "neargnn embed: out of memory building %s\n", path);
    return NG_ERR_NOMEM;
  }
  fprintf(f,
          "{\"nodes\": %" PRId64 ", \"seconds\": %.6f, \"producers\": %d, \"slots\": %d, "
          "\"device_bytes\": %" PRId64 ", \"file_bytes\": %" PRId64
          ", \"upload_seconds\": %.6f, \"write_seconds\": %.6f, \"layers\": [",
          n, secs, (int)r->producers, (int)r->slots, r->device_bytes, r->file_bytes,
          r->upload_seconds, r->write_seconds);
  for (int l = 0; l < r->layers && l < NG_INFER_REPORT_LAYERS; l++)
    fprintf(f,
            "%s{\"rows\": %" PRId64 ", \"chunk\": %" PRId64 ", \"seconds\": %.6f, "
            "\"host_seconds\": %.6f, \"device_seconds\": %.6f, \"wait_seconds\": %.6f}",
            l ? ", " : "", r->rows[l], r->chunk[l], r->seconds[l], r->host_seconds[l],
            r->device_seconds[l], r->wait_seconds[l]);
  fprintf(f, "]}\n");
  ng_status st = fclose(f) == 0 ? NG_OK : NG_ERR_NOMEM;
  if (st == NG_OK)
    st = ng_file_write(path, buf, len);
  free(buf);
  return st;
}

/* The hash that names a file in FILE.prefill.json: the same lines as ng__prefill_hash_file
 * (serve/ecache.c), which the server checks it with; the command sees the public API only, and
 * tests/cli_embed.sh checks that both agree. */
static uint64_t prefill_mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x9E3779B97F4A7C15ULL;
  return h ^ (h >> 29);
}

static int prefill_hash_file(uint64_t *out, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  enum { CHUNK = 1 << 20 }; /* a multiple of 8: words never straddle two reads */
  unsigned char *buf = malloc(CHUNK);
  uint64_t h = 0xcbf29ce484222325ULL, total = 0;
  size_t n;
  while (buf && (n = fread(buf, 1, CHUNK, f)) > 0) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w = 0;
      for (int b = 7; b >= 0; b--)
        w = w << 8 | buf[i + (size_t)b];
      h = prefill_mix(h, w);
    }
    if (i < n) {
      uint64_t w = 0;
      for (size_t b = n; b > i; b--)
        w = w << 8 | buf[b - 1];
      h = prefill_mix(h, w);
    }
    total += n;
  }
  const int bad = !buf || ferror(f);
  free(buf);
  fclose(f);
  *out = prefill_mix(h, total);
  return bad ? -1 : 0;
}

/* Writes OUT.prefill.json beside embed's rows of layer 0: the dataset (its dataset.json and
 * indptr.npy) and the checkpoint they were computed from, by hash, which `serve
 * --embedding-cache-prefill OUT` checks before it loads them (docs/serving.md). */
static int write_prefill_meta(const char *out, const char *dataset, const char *checkpoint,
                              const ng_dataset_info *info, int64_t dim) {
  const char *rel[2] = {"dataset.json", "indptr.npy"};
  uint64_t h[3];
  char path[4200];
  for (int k = 0; k < 3; k++) {
    if (k < 2)
      snprintf(path, sizeof path, "%s/%s", dataset, rel[k]);
    else
      snprintf(path, sizeof path, "%s", checkpoint);
    if (prefill_hash_file(&h[k], path)) {
      fprintf(stderr, "neargnn embed: error: cannot read %s: %s\n", path, strerror(errno));
      return CLI_EXIT_RUNTIME;
    }
  }
  char meta[512];
  const int n =
      snprintf(meta, sizeof meta,
               "{\"format\":\"neargnn-embedding-prefill\",\"version\":1,\"layer\":0,"
               "\"nodes\":%" PRId64 ",\"dim\":%" PRId64 ",\"ids\":\"%s\","
               "\"dataset_json\":\"%016llx\",\"indptr\":\"%016llx\","
               "\"checkpoint\":\"%016llx\"}\n",
               info->nodes, dim, info->orig_ids ? "original" : "dataset", (unsigned long long)h[0],
               (unsigned long long)h[1], (unsigned long long)h[2]);
  snprintf(path, sizeof path, "%s.prefill.json", out);
  ng_status st = ng_file_write(path, meta, (size_t)n);
  if (st != NG_OK)
    return cli_runtime_error(st);
  fprintf(stderr,
          "neargnn embed: %s names the dataset and checkpoint for serve "
          "--embedding-cache-prefill\n",
          path);
  return CLI_EXIT_OK;
}

/* The dataset's ids of the rows to write into *ids (n of them): those of the --nodes file (the
 * user's ids, kept in *user_ids), or every node's. */
static ng_status embed_ids(int64_t **ids, int64_t **user_ids, int64_t *n, const char *nodes_file,
                           ng_dataset_t ds, int64_t nodes) {
  ng_status st = NG_OK;
  if (nodes_file)
    st = ng_node_list_load(user_ids, n, nodes_file);
  else
    *n = nodes;
  /* the user's ids (original ones of a renumbered dataset) to the dataset's; without a list,
   * row v is the node whose user id is v */
  if (st == NG_OK && !(*ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **ids)))
    st = NG_ERR_NOMEM;
  for (int64_t i = 0; st == NG_OK && !*user_ids && i < *n; i++)
    (*ids)[i] = i;
  if (st == NG_OK)
    st = ng_dataset_ids_of(*ids, *user_ids ? *user_ids : *ids, *n, ds);
  return st;
}

/* Infers layer `layer`'s output (`dim` columns) of the rows `ids` with `device_bytes` of device
 * memory (ng_infer_opts) and writes it to the .npy `out`, with the progress shown as `progress`
 * (a cli_progress_mode) says and the figures on stderr (and in `json` when given). */
static ng_status embed_write(ng_trainer_t t, const int64_t *ids, int64_t n, int64_t dim,
                             int64_t layer, int64_t device_bytes, const char *out, const char *json,
                             int progress) {
  cli_progress pr;
  cli_progress_begin(&pr, "embed", (cli_progress_mode)progress);
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  io.layer = (int32_t)layer;
  io.progress = cli_progress_cb;
  io.progress_ctx = &pr;
  io.device_bytes = device_bytes;
  ng_infer_report rep = NG_INFER_REPORT_INIT;
  io.report = &rep;
  const double t0 = cli_now();
  ng_status st = ng_trainer_embed_npy(out, t, ids, n, &io);
  cli_progress_end(&pr, st);
  const double secs = cli_now() - t0;
  if (st == NG_OK) {
    fprintf(stderr, "neargnn embed: %" PRId64 " nodes x %" PRId64 " (%s) written to %s in %.2f s\n",
            n, dim, layer < 0 ? "logits" : "embeddings", out, secs);
    embed_report(stderr, &rep);
  }
  if (st == NG_OK && json)
    st = embed_json(json, &rep, n, secs);
  return st;
}

/* About 100 lines, a third of them the option table and the help text, which read best whole. */
int cmd_embed(int argc, char **argv) {
  cli_train_cfg c = {.o = NG_TRAIN_OPTS_INIT,
                     .net = {.fanouts = "25,10", .weight_decay = "0", .hidden = 256},
                     .epochs = 10,
                     .eval_every = 1};
  const char *dataset = NULL, *checkpoint = NULL, *nodes_file = NULL, *out = NULL;
  int64_t layer = -1, device_bytes = 0;
  int check_features = 0, for_serve = 0;
  const char *json = NULL;
  int progress = CLI_PROGRESS_AUTO;
  cli_opt opts[] = {
      CLI_OPT_STRING("checkpoint", &checkpoint, "FILE", "the trained model (from train)",
                     .required = true),
      CLI_OPT_STRING("dataset", &dataset, "DIR", "dataset folder", .required = true),
      CLI_OPT_CHECK_FEATURES(&check_features),
      CLI_OPT_STRING("out", &out, "FILE", "the .npy to write (float32 [nodes, dim])",
                     .required = true),
      CLI_OPT_INT("layer", &layer, "K", -1, 7,
                  "whose output: 0 = the first layer's (embeddings), ...; -1 = the last (logits)"),
      CLI_OPT_STRING("nodes", &nodes_file, "FILE",
                     "only these nodes, in this order: text (one id per line) or int64 .npy; "
                     "original ids of a renumbered dataset (default: every node)"),
      CLI_OPT_INT("infer-device-memory", &device_bytes, "BYTES", -1, INT64_MAX,
                  "GPU memory for the cold input rows and intermediate layers kept resident "
                  "(each row crosses PCIe once); 0 = what is free less a margin, -1 = none"),
      CLI_OPT_STRING("json", &json, "FILE", "also write the per-layer figures as JSON"),
      CLI_OPT_FLAG("for-serve", &for_serve,
                   "also write FILE.prefill.json, naming the dataset and checkpoint, so that serve "
                   "--embedding-cache-prefill FILE loads these rows (needs --layer 0, every node)"),
      CLI_TRAIN_OPTS(&c),
      CLI_OPT_PROGRESS(&progress),
  };
  cli_spec spec = {
      .command = "embed",
      .synopsis = "--checkpoint FILE --dataset DIR --out FILE.npy [options]",
      .about = "Writes the embeddings (a layer's output) or logits of every node, or of the "
               "nodes listed in a file, by layer-wise full-neighbour inference with a trained "
               "checkpoint (docs/inference.md). The checkpoint describes the model and its "
               "feature normalisation; model options given must match it.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .notes = "Row i of the output is the i-th node of --nodes, or node i (its original id in a "
               "renumbered dataset). Logits' argmax is train --predictions' class.",
      .example = "neargnn embed --checkpoint cora.ckpt --dataset data/cora --layer 0 --out "
                 "cora-emb.npy",
  };
  cli_model_opts_from_checkpoint(opts, N_OPTS(opts));
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  /* The server caches layer 0's output of any node it is asked for: the rows of every node. */
  if (for_serve && (layer != 0 || nodes_file))
    return cli_usage_error(spec.command, "--for-serve writes the rows the server caches: layer 0 "
                                         "of every node (--layer 0, no --nodes)");
  ng_dataset_t ds = NULL;
  ng_status st = cli_dataset_open(&ds, dataset, check_features);
  if (st != NG_OK)
    return cli_runtime_error(st);
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  ng_model_t m = NULL;
  ng_trainer_t t = NULL;
  int64_t *user_ids = NULL, *ids = NULL, n = 0, dim = 0;
  st = ng_dataset_info_get(&info, ds);
  if (st != NG_OK) {
    rc = cli_runtime_error(st);
    goto done;
  }
  if ((rc = cli_model_for_checkpoint(&m, &c.o.normalize, spec.command, &spec, &c.net, checkpoint,
                                     &info)) != CLI_CONTINUE)
    goto done;
  rc = CLI_EXIT_OK;
  st = embed_ids(&ids, &user_ids, &n, nodes_file, ds, info.nodes);
  ng_train_opts *o = &c.o;
  o->workers = -1; /* no training: no worker pool */
  /* The hybrid modes split workers, which inference has none of: its input layer reads the cold
   * rows by zero-copy (docs/inference.md), so on a GPU they become zerocopy, the default too. */
  const bool gpu = o->device && strcmp(o->device, "cuda") == 0;
  if (o->mode == NG_MODE_HYBRID || o->mode == NG_MODE_HYBRID_STATIC ||
      (o->mode == NG_MODE_AUTO && gpu))
    o->mode = NG_MODE_ZEROCOPY;
  if (st == NG_OK)
    st = ng_trainer_create(&t, ds, m, o);
  if (st == NG_OK) /* the weights alone: any --seed or --batch, another dataset of its shape */
    st = ng_trainer_load_weights(t, checkpoint);
  if (st == NG_OK)
    st = ng_trainer_embed_dim(&dim, t, (int32_t)layer);
  if (st == NG_OK) {
    st = embed_write(t, ids, n, dim, layer, device_bytes, out, json, progress);
    if (st == NG_OK && for_serve)
      rc = write_prefill_meta(out, dataset, checkpoint, &info, dim);
  }
  if (st == NG_ERR_INTERRUPTED)
    rc = CLI_EXIT_INTERRUPTED;
  else if (st != NG_OK)
    rc = cli_runtime_error(st);
done:
  free(user_ids);
  free(ids);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
  return rc;
}
