/* `neargnn serve`: answers KServe v2 inference requests for the nodes of a dataset with a
 * trained model, over HTTP, and takes online graph updates (docs/serving.md). The engine
 * (include/neargnn_serve.h) does the work; its HTTP server (the same header) speaks the protocol;
 * this file reads the options, waits for SIGTERM or SIGINT, and shuts down in order. */
#include "cli.h"
#include "neargnn_serve.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))

/* --mode: the library's names, and `transfer` for its batched-DMA mode (`baseline`). */
static int parse_mode(ng_mode *out, const char *command, const char *name) {
  if (strcmp(name, "transfer") == 0) {
    *out = NG_MODE_BASELINE;
    return CLI_CONTINUE;
  }
  if (ng_mode_parse(out, name) != NG_OK)
    return cli_usage_error(command,
                           "--mode '%s': give auto, cpu, transfer (= baseline), zerocopy, partial, "
                           "hybrid-static or hybrid",
                           name);
  return CLI_CONTINUE;
}

int cmd_serve(int argc, char **argv) {
  cli_model_cfg net = {.fanouts = "25,10", .weight_decay = "0", .hidden = 256};
  ng_engine_opts eo = NG_ENGINE_OPTS_INIT;
  ng_http_opts ho = NG_HTTP_OPTS_INIT;
  const char *dataset = NULL, *checkpoint = NULL, *mode = "auto";
  const char *prefill = NULL;
  int32_t max_batch = eo.max_batch, max_delay_us = eo.max_delay_us, queue = eo.queue_cap;
  int32_t workers = eo.workers, threads = eo.threads, port = ho.port;
  int32_t serve_workers = eo.serve_workers;
  int32_t max_connections = ho.max_connections, per_client = ho.max_connections_per_client;
  int32_t health_connections = ho.health_connections;
  int64_t max_request_nodes = eo.max_request_nodes, hub_edges = eo.hub_edges;
  int64_t request_timeout_ms = eo.request_timeout_ms;
  int64_t cache_bytes = eo.cache_bytes, max_body = ho.max_body_bytes;
  int64_t embedding_cache = eo.embedding_cache_bytes;
  int64_t min_body_rate = ho.min_body_rate;
  double cache_ratio = eo.cache_ratio, drain_s = ho.drain_timeout_s;
  double header_timeout_s = ho.header_timeout_s;
  ho.host = "127.0.0.1";
  eo.device = "cpu";
  /* --normalize-features: the checkpoint's unless given (cli_model_for_checkpoint); none for a
   * checkpoint that does not record it. */
  eo.normalize = NG_NORMALIZE_NONE;
  cli_opt opts[] = {
      CLI_OPT_STRING("dataset", &dataset, "DIR", "dataset folder", .required = true),
      CLI_OPT_STRING("checkpoint", &checkpoint, "FILE",
                     "the trained model (train --checkpoint), which describes the model and its "
                     "feature normalisation; model options given must match it",
                     .required = true),
      CLI_MODEL_OPTS(&net, &eo.normalize),
      CLI_OPT_STRING("name", &eo.name, "NAME", "the model's name in URLs (/v2/models/NAME)",
                     .default_text = "the dataset's name"),
      CLI_OPT_STRING("host", &ho.host, "ADDR",
                     "numeric address to listen on: 127.0.0.1, 0.0.0.0 (every interface), ::1"),
      CLI_OPT_INT("port", &port, "N", 0, 65535, "TCP port; 0 = a free one (printed)"),
      CLI_OPT_STRING("device", &eo.device, "DEV", "cpu, or cuda in a build with the CUDA backend"),
      CLI_OPT_STRING("mode", &mode, "M",
                     "how cold feature rows reach the device: transfer (batched DMA), zerocopy, "
                     "partial (CPU aggregation), hybrid; auto = hybrid on cuda, cpu on cpu"),
      CLI_OPT_INT("max-batch", &max_batch, "N", 1, 1 << 20,
                  "most target nodes merged into one device batch"),
      CLI_OPT_INT("max-delay-us", &max_delay_us, "US", 0, 10000000,
                  "longest a request waits for others to join its batch"),
      CLI_OPT_INT("queue", &queue, "N", 0, 1 << 24,
                  "most requests admitted and not yet answered; more get 503; 0 = --max-batch"),
      CLI_OPT_INT("request-timeout-ms", &request_timeout_ms, "MS", 1, NG_ENGINE_MAX_TIMEOUT_MS,
                  "a request's deadline unless it gives parameters.timeout_ms: one that cannot "
                  "start by then is answered 503 and never computed"),
      CLI_OPT_INT("max-request-nodes", &max_request_nodes, "N", 1, INT32_MAX,
                  "most node ids in one request"),
      CLI_OPT_INT("hub-edges", &hub_edges, "N", 0, INT64_MAX,
                  "a request whose receptive field has more edges is a hub request (CPU workers "
                  "aggregate its cold neighbours); 0 = the engine's default"),
      CLI_OPT_STRING("log", &eo.log_path, "FILE",
                     "the append-only update log: replayed at start, every acknowledged update "
                     "fsynced to it; without it updates are refused"),
      CLI_OPT_INT("workers", &workers, "N", 0, 4096, "CPU worker threads; 0 = all cores but one"),
      CLI_OPT_INT("serve-workers", &serve_workers, "N", 0, NG_ENGINE_MAX_SERVE_WORKERS,
                  "main-lane workers, each computing ordinary batches on its own backend "
                  "instance so that one batch is built while another runs; 0 = 2 on cuda, 1 on "
                  "cpu"),
      CLI_OPT_INT("threads", &threads, "T", 0, 4096,
                  "OpenMP threads of the CPU backend; 0 = OMP_NUM_THREADS or all"),
      CLI_OPT_BYTES("gpu-cache-bytes", &cache_bytes, "SIZE", 0,
                    "device memory for hot feature rows; 0 = --cache-ratio or auto"),
      CLI_OPT_BYTES("embedding-cache", &embedding_cache, "SIZE", 0,
                    "host memory for cached layer-0 outputs that full-neighbourhood requests "
                    "reuse (GraphSAGE, GCN, GIN of 2+ layers; exact under updates); 0 = off"),
      CLI_OPT_STRING("embedding-cache-prefill", &prefill, "FILE",
                     "load layer-0 rows into the embedding cache at start: the .npy of neargnn "
                     "embed --layer 0 --for-serve (same dataset and checkpoint; rows the log's "
                     "updates changed are left out; until the cache is full)"),
      CLI_OPT_FLOAT("cache-ratio", &cache_ratio, "R", 0, false, 1, false,
                    "hot rows as a share of the nodes",
                    .default_text = "what fits in half the free device memory; all on cpu"),
      CLI_OPT_BYTES("max-body", &max_body, "SIZE", 1024,
                    "largest request body; larger ones get 413 unread"),
      CLI_OPT_INT("max-connections", &max_connections, "N", 1, 65536,
                  "open connections at once for any request"),
      CLI_OPT_INT("health-connections", &health_connections, "N", 0, 65536,
                  "connections beyond --max-connections that answer only health checks and "
                  "/metrics (other requests there get 503)"),
      CLI_OPT_INT("max-connections-per-client", &per_client, "N", 0, 65536,
                  "open connections from one client address; 0 = no cap (behind a proxy every "
                  "connection comes from the proxy's address)"),
      CLI_OPT_FLOAT("header-timeout-s", &header_timeout_s, "S", 0, true, 86400, false,
                    "a request's headers must be complete this long after its connection opened "
                    "or answered the previous request, else the connection is closed (an idle "
                    "keep-alive connection too)"),
      CLI_OPT_BYTES("min-body-rate", &min_body_rate, "SIZE", 0,
                    "bytes per second a request body must keep arriving at, measured over 5 s "
                    "windows; slower ones are closed; 0 = no minimum"),
      CLI_OPT_FLOAT("drain-timeout", &drain_s, "S", 0, false, INFINITY, false,
                    "on SIGTERM, longest wait for the requests in flight"),
  };
  cli_spec spec = {
      .command = "serve",
      .synopsis = "--dataset DIR --checkpoint FILE [options]",
      .about = "Serves a trained model over HTTP (KServe v2 / Open Inference Protocol): "
               "predictions and embeddings of nodes, full-neighbour or sampled, with dynamic "
               "batching, and durable online graph updates (POST /v2/models/NAME/graph). Prints "
               "the URL once it answers; SIGTERM or Ctrl-C drains the requests in flight and "
               "exits 0.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .notes = "Endpoints, request and update formats, errors and metrics: docs/serving.md. Node "
               "ids are the dataset's (after `reorder`, not the original ones).",
      .example =
          "neargnn serve --dataset data/cora --checkpoint cora.st --port 8000 --log cora.log",
  };
  cli_model_opts_from_checkpoint(opts, N_OPTS(opts));
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  if ((rc = parse_mode(&eo.mode, spec.command, mode)) != CLI_CONTINUE)
    return rc;
  eo.max_batch = max_batch;
  eo.max_delay_us = max_delay_us;
  eo.queue_cap = queue;
  eo.max_request_nodes = max_request_nodes;
  eo.hub_edges = hub_edges;
  eo.request_timeout_ms = request_timeout_ms;
  eo.workers = workers;
  eo.serve_workers = serve_workers;
  eo.threads = threads;
  eo.cache_bytes = cache_bytes;
  eo.cache_ratio = cache_ratio;
  eo.embedding_cache_bytes = embedding_cache;
  eo.embedding_cache_prefill = prefill;
  ho.port = port;
  ho.max_body_bytes = max_body;
  ho.max_connections = max_connections;
  ho.health_connections = health_connections;
  ho.max_connections_per_client = per_client;
  ho.header_timeout_s = header_timeout_s;
  ho.min_body_rate = min_body_rate;
  ho.drain_timeout_s = drain_s;

  /* SIGTERM and SIGINT are taken by sigwait() below: blocked here, before any thread starts, so
   * that every thread of the engine and of the server inherits the mask. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  signal(SIGPIPE, SIG_IGN);

  ng_dataset_t ds = NULL;
  ng_model_t m = NULL;
  ng_engine *engine = NULL;
  ng_http_server *server = NULL;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  ng_status st = ng_dataset_open(&ds, dataset, NULL);
  if (st == NG_OK)
    st = ng_dataset_info_get(&info, ds);
  if (st != NG_OK) {
    rc = cli_runtime_error(st);
    goto done;
  }
  if ((rc = cli_model_for_checkpoint(&m, &eo.normalize, spec.command, &spec, &net, checkpoint,
                                     &info)) != CLI_CONTINUE)
    goto done;
  const double t0 = cli_now();
  st = ng_engine_create(&engine, ds, m, checkpoint, &eo);
  if (st == NG_OK)
    st = ng_http_server_start(&server, engine, &ho);
  if (st != NG_OK) {
    rc = cli_runtime_error(st);
    goto done;
  }
  ng_engine_info ei;
  ng_engine_info_get(&ei, engine);
  ng_engine_log_info li = NG_ENGINE_LOG_INFO_INIT;
  if (eo.log_path && ng_engine_log_info_get(&li, engine) == NG_OK) {
    /* A cut is never silent: it names what was cut, so that an operator can tell a crash's torn
     * append from anything else. */
    if (li.cut_offset >= 0)
      fprintf(stderr,
              "neargnn serve: %s: cut %" PRId64 " bytes from byte %" PRId64
              " (%s; no valid record follows it, so it is taken for an append a crash "
              "interrupted)\n",
              eo.log_path, li.cut_bytes, li.cut_offset, li.cut_what);
    if (li.migrated)
      fprintf(stderr, "neargnn serve: %s: rewritten from log format version 1 to the current one\n",
              eo.log_path);
    fprintf(stderr, "neargnn serve: %s: %" PRId64 " update(s) replayed\n", eo.log_path,
            li.replayed);
  }
  const bool v6 = strchr(ho.host, ':') != NULL;
  fprintf(stderr,
          "neargnn serve: model %s (%" PRId64
          " nodes, %d layers), mode %s on %s, ready in %.2f s\n",
          ei.name, ei.nodes, (int)ei.layers, ng_mode_name(eo.mode), eo.device, cli_now() - t0);
  /* The one line on stdout: scripts read the port from it (with --port 0). */
  printf("listening on http://%s%s%s:%d/v2/models/%s\n", v6 ? "[" : "", ho.host, v6 ? "]" : "",
         ng_http_server_port(server), ei.name);
  fflush(stdout);

  int sig = 0;
  while (sigwait(&stop, &sig) != 0)
    ;
  fprintf(stderr, "neargnn serve: %s: draining the requests in flight\n",
          sig == SIGTERM ? "SIGTERM" : "SIGINT");
  const int left = ng_http_server_stop(server);
  server = NULL;
  if (left > 0)
    fprintf(stderr,
            "neargnn serve: %d request(s) still in flight after %.0f s (--drain-timeout); their "
            "connections were closed\n",
            left, drain_s);
  rc = left > 0 ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
  if (rc == CLI_EXIT_OK)
    fprintf(stderr, "neargnn serve: stopped\n");

done:
  ng_http_server_stop(server);
  ng_engine_destroy(engine);
  ng_model_destroy(m);
  ng_dataset_close(ds);
  return rc;
}
