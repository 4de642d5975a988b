/// The HTTP front of the serving mode (docs/serving.md): a KServe v2 / Open Inference Protocol
/// server on libmicrohttpd in front of the engine (include/neargnn_serve.h), and the pure functions
/// it is made of, which the tests and the fuzzers call directly: the request parsers and the
/// response writers (http_json.c).
#ifndef NG_SERVE_HTTP_IMPL_H
#define NG_SERVE_HTTP_IMPL_H

#include "neargnn_serve.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the request parsers and response writers (http_json.c): no I/O, no engine ---- */

/// Largest integer a JSON number carries exactly (2^53): larger ids and seeds are refused rather
/// than rounded.
#define NG_HTTP_MAX_EXACT_INT 9007199254740992.0
/// Longest request "id" echoed back (longer ones are refused: a KServe id is a short tag).
#define NG_HTTP_MAX_ID_LEN 256

/// A parsed infer request: `req` is ready for ng_engine_infer (its node_ids point into `ids`).
typedef struct {
  ng_infer_request req;
  int64_t *ids; ///< the node ids, then a pair request's dst_ids (malloc, owned)
  char *id;     ///< the request's "id" to echo (malloc, owned), NULL when absent
} ng_http_infer;

/// Parses a KServe v2 infer request body (`len` bytes, not NUL-terminated; borrowed):
///   {"id": "...", "inputs": [{"name": "node_ids", "datatype": "INT64", "shape": [n],
///    "data": [...]}], "parameters": {"fanouts": [25, 10], "seed": 7, "embedding_layer": 0,
///    "timeout_ms": 200},
///    "outputs": [{"name": "logits"}, {"name": "embedding"}, {"name": "class"}]}
/// or, for pair scores, the two inputs "src_ids" and "dst_ids" of one shape [n] (req.node_ids
/// and req.dst_ids, both in `ids`) and the output "score" (the default then).
/// `layers` is the model's layer count (for the default embedding layer, layers - 2, and the
/// fanout count); 0 skips those checks. Returns NG_OK with *out filled (free it with
/// ng__http_infer_clear), or NG_ERR_INVALID_ARG with ng_last_error() saying what is wrong and
/// *out empty. Never reads past `len`.
ng_status ng__parse_infer_request(ng_http_infer *out, const char *body, size_t len, int32_t layers);
/// Frees what a parsed request owns and empties it; NULL and an empty one accepted.
void ng__http_infer_clear(ng_http_infer *r);

/// A parsed graph update: `u` is ready for ng_engine_update (its arrays point into `buf`).
typedef struct {
  ng_graph_update u;
  void *buf; ///< one allocation holding every array (owned)
  char *id;  ///< the request's "id" to echo (owned), NULL when absent
} ng_http_update;

/// Parses the graph-update extension's body (`len` bytes, borrowed):
///   {"id": "...", "add_nodes": {"count": k, "features": [[...], ...]},
///    "add_edges": [[src, dst], ...], "remove_edges": [[src, dst], ...],
///    "update_features": {"ids": [...], "values": [[...], ...]}}
/// Every part is optional but one must be there. Feature rows have `feature_dim` values each,
/// given as one array per row or as one flat array of rows one after another. Returns NG_OK or
/// NG_ERR_INVALID_ARG (ng_last_error() says what is wrong; *out empty).
ng_status ng__parse_graph_update(ng_http_update *out, const char *body, size_t len,
                                 int64_t feature_dim);
/// Frees what a parsed update owns and empties it; NULL and an empty one accepted.
void ng__http_update_clear(ng_http_update *u);

/// The infer response: {"model_name", "id" (when given), "outputs": [{name, datatype, shape,
/// data}], "parameters": {hub, batch_nodes, hot_rows, cold_rows, queue_us, compute_us}}, with
/// the outputs `outputs` asks for (NG_OUT_*; 0 means logits) that `r` holds. Floats are written
/// with 9 significant digits, which read back to the same bits; a non-finite one as null.
/// Returns a malloc'd NUL-terminated string (its length in *len), or NULL when out of memory.
char *ng__infer_response_json(size_t *len, const char *model, const char *id, unsigned outputs,
                              const ng_infer_result *r);
/// The graph update's answer: {"model_name", "id", "first_new_id", "nodes", "added_nodes",
/// "added_edges", "removed_edges", "updated_features", "durable"}, the counts being what `r`
/// says changed (malloc'd, NULL when out of memory).
char *ng__update_response_json(size_t *len, const char *model, const char *id,
                               const ng_update_result *r, int64_t nodes);
/// A KServe error body, {"error": "<message>"} (malloc'd, NULL when out of memory).
char *ng__error_json(size_t *len, const char *message);
/// The model metadata answer (GET /v2/models/{name}) for `info`: the input and the three outputs
/// with their datatypes and shapes ("embedding" is the default layer's, layers - 2), and the
/// graph's counts as parameters. Malloc'd, NULL when out of memory.
char *ng__model_metadata_json(size_t *len, const ng_engine_info *info);

/// Appends `s` to `dst` (capacity `cap`, NUL-terminated) as a JSON string with its quotes,
/// escaping what JSON requires; returns the length the full text needs (as snprintf).
size_t ng__json_escape(char *dst, size_t cap, const char *s);

/* ---- the server (http.c) ---- */

/// Test only: the event-loop threads of the servers started from now on (0, the default: half
/// the cores, 2 to 8). Set before ng_http_server_start, from one thread.
extern int ng__http_test_threads;

/// Writes the Prometheus text of /metrics (the server's counters and the engine's) into a
/// malloc'd string; NULL when out of memory.
char *ng__http_metrics_text(size_t *len, ng_http_server *s);

#endif
