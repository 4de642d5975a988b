/* A program embedding neargnn's serving API (include/neargnn_serve.h): opens a dataset and a
 * checkpoint trained on it, starts the engine and its KServe v2 HTTP server on a free port,
 * answers one request in-process for each of a few nodes, and shuts down in order. Builds
 * against an installed neargnn like train_cora (examples/README.md).
 *
 *   serve_cora DATASET CHECKPOINT [NODE...]    e.g. a dataset and a checkpoint of `neargnn train`
 */
#include <neargnn.h>
#include <neargnn_serve.h>

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what, ng_status st) {
  fprintf(stderr, "serve_cora: %s: %s: %s\n", what, ng_status_str(st), ng_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: serve_cora DATASET CHECKPOINT [NODE...]\n");
    return 2;
  }
  ng_dataset_t ds = NULL;
  ng_model_t model = NULL;
  ng_engine *engine = NULL;
  ng_http_server *server = NULL;
  ng_checkpoint_info ck = NG_CHECKPOINT_INFO_INIT;
  int rc = 0;
  /* The checkpoint describes its model (kind, layers, normalisation): no flags to repeat. */
  ng_status st = ng_checkpoint_info_get(&ck, argv[2]);
  if (st == NG_OK)
    st = ng_dataset_open(&ds, argv[1], NULL);
  if (st == NG_OK)
    st = ng_model_from_checkpoint(&model, argv[2]);
  ng_engine_opts eo = NG_ENGINE_OPTS_INIT;
  eo.normalize = ck.normalize;
  eo.workers = 1;
  if (st == NG_OK)
    st = ng_engine_create(&engine, ds, model, argv[2], &eo);
  ng_http_opts ho = NG_HTTP_OPTS_INIT;
  ho.port = 0; /* any free port */
  if (st == NG_OK)
    st = ng_http_server_start(&server, engine, &ho);
  if (st != NG_OK) {
    rc = fail("start", st);
    goto done;
  }
  ng_engine_info info;
  ng_engine_info_get(&info, engine);
  printf("serving %s (%lld nodes, %d classes) on http://127.0.0.1:%d/v2/models/%s\n", info.name,
         (long long)info.nodes, info.classes, ng_http_server_port(server), info.name);
  /* The same requests the HTTP front answers, made in-process: full neighbourhoods. */
  for (int i = 3; i < (argc > 3 ? argc : 4); i++) {
    const int64_t id = argc > 3 ? strtoll(argv[i], NULL, 10) : 0;
    ng_infer_request req = {.node_ids = &id, .n = 1, .outputs = NG_OUT_CLASS | NG_OUT_LOGITS};
    ng_infer_result res = {0};
    st = ng_engine_infer(engine, &req, &res);
    if (st != NG_OK) {
      rc = fail("infer", st);
      break;
    }
    printf("node %lld: class %lld (logit %.4f), batch of %lld, %lld hot + %lld cold input rows\n",
           (long long)id, (long long)res.cls[0], res.logits[res.cls[0]], (long long)res.batch_nodes,
           (long long)res.hot_rows, (long long)res.cold_rows);
    ng_infer_result_free(&res);
  }
done:
  if (ng_http_server_stop(server) != 0)
    fprintf(stderr, "serve_cora: requests were still in flight at shutdown\n");
  ng_engine_destroy(engine);
  ng_model_destroy(model);
  ng_dataset_close(ds);
  return rc;
}
