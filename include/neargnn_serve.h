/// The serving engine: answers inference requests for nodes of a dataset with a trained model,
/// batches concurrent requests, and applies durable online graph updates (docs/serving.md for the
/// HTTP API, docs/serving-engine.md for the engine).
///
/// The public serving API, beside neargnn.h: the engine (this first half) and the KServe v2 HTTP
/// server in front of it (the second half). `neargnn serve` (apps/cmd_serve.c) is built on these
/// two alone. Both live in the library's `serve` layer, above `runtime`.
///
/// Threading: every function may be called from any thread at the same time, except create and
/// destroy. ng_engine_infer and ng_engine_update block the calling thread until their answer is
/// ready (ng_engine_submit is ng_engine_infer without the wait); the engine's own threads (its
/// lanes: main-lane workers and a hub lane, each a batcher and device thread; and CPU workers) do
/// the work.
#ifndef NEARGNN_SERVE_H
#define NEARGNN_SERVE_H

#include "neargnn.h"

#include <stdint.h>

#define NG_ENGINE_MAX_LAYERS 8

typedef struct ng_engine ng_engine;

typedef struct {
  size_t size;         ///< sizeof(ng_engine_opts)
  const char *name;    ///< the model's name in URLs (/v2/models/{name}); NULL: the dataset's name
  const char *device;  ///< "cpu" or "cuda"
  ng_mode mode;        ///< how cold rows reach the device (AUTO: HYBRID on a GPU, CPU on cpu)
  int workers;         ///< CPU worker threads (0: every allowed core but one)
  int threads;         ///< OpenMP threads of the CPU backend (0: default)
  int64_t cache_bytes; ///< hot tier size as in ng_train_opts (0 with cache_ratio -1: auto)
  double cache_ratio;  ///< hot tier share as in ng_train_opts
  int max_batch;       ///< most target nodes merged into one device batch (default 256)
  int max_delay_us;    ///< longest a request waits for others to join its batch (default 500)
  /// Most requests admitted and not yet answered; more are refused as busy (0: max_batch, one
  /// full batch waiting beyond the one computing, below the HTTP front's connection limit).
  int queue_cap;
  int64_t max_request_nodes; ///< most node ids in one request (default 4096)
  /// A request whose receptive field (sampled or full) has more edges than this is a hub
  /// request: its cold neighbours are aggregated by CPU workers near the data, in parallel, while
  /// the device takes the hot part (0: the engine's default).
  int64_t hub_edges;
  /// The append-only update log (NULL: updates are refused with NG_ERR_UNSUPPORTED). Replayed
  /// by ng_engine_create; every acknowledged update is in it, fsynced.
  const char *log_path;
  /// Feature normalisation: AUTO (the default) takes the checkpoint's; another value must be
  /// the checkpoint's.
  ng_normalize normalize;
  /// The deadline of a request that gives no timeout_ms, in ms from its admission (default
  /// 1000; 1 to NG_ENGINE_MAX_TIMEOUT_MS). A request that cannot start before its deadline is
  /// refused as busy and never computed.
  int64_t request_timeout_ms;
  /// Most estimated work merged into one device batch: the edges of its requests' unrolled
  /// receptive fields plus their nodes (0: 4 x hub_edges). A batch is capped by this and by
  /// max_batch nodes, whichever it reaches first; a request over it alone still runs.
  int64_t max_batch_work;
  /// Bytes of host memory for the cache of layer-0 outputs that full-neighbourhood requests
  /// reuse (0: off, the default). Serves models of two layers or more whose input layer
  /// aggregates raw rows without parameters (GraphSAGE, GCN, GIN); GAT and SAGE-pool run
  /// without it. Answers are the same bits with or without it on the CPU backend.
  int64_t embedding_cache_bytes;
  /// Rows to load into that cache at start (NULL: none): a float32 .npy of every node's layer-0
  /// output, as `neargnn embed --layer 0 --for-serve` writes it, with the FILE.prefill.json
  /// beside it naming the dataset and checkpoint they were computed from (another dataset or
  /// checkpoint is refused with NG_ERR_FORMAT). Rows that updates replayed from the log changed
  /// are left out; rows are taken in node order until the cache is full. Needs
  /// embedding_cache_bytes > 0 and a model the cache serves (NG_ERR_INVALID_ARG otherwise).
  /// Borrowed; read by ng_engine_create only.
  const char *embedding_cache_prefill;
  /// Main-lane workers: threads that each take ordinary batches from the one queue and compute
  /// them on a backend instance of their own (on CUDA its own streams), so that one batch is
  /// built on the host while another runs on the device (0: 2 on "cuda", 1 on "cpu"; at most
  /// NG_ENGINE_MAX_SERVE_WORKERS). Answers are the same bits whichever worker computes them.
  int serve_workers;
} ng_engine_opts;
#define NG_ENGINE_OPTS_INIT                                                                        \
  {                                                                                                \
    sizeof(ng_engine_opts), NULL, "cpu", NG_MODE_AUTO, 0, 0, 0, -1.0, 256, 500, 0, 4096, 0, NULL,  \
        NG_NORMALIZE_AUTO, 1000, 0, 0, NULL, 0                                                     \
  }
/// The most main-lane workers (ng_engine_opts.serve_workers).
#define NG_ENGINE_MAX_SERVE_WORKERS 64
/// The longest deadline a request or the engine's options may give (one hour, in ms).
#define NG_ENGINE_MAX_TIMEOUT_MS 3600000

/// Reads the checkpoint (as ng_trainer_load reads it: a damaged or edited file is refused),
/// loads its weights, opens what the mode needs, replays the update log and starts the engine's
/// threads. `model` NULL serves the model the checkpoint describes; a given `model` (and
/// normalisation) must be the checkpoint's: a differing setting is NG_ERR_FORMAT naming it and
/// both values. `ds` and `model` are borrowed; the engine keeps a copy of the model.
ng_status ng_engine_create(ng_engine **out, ng_dataset_t ds, ng_model_t model,
                           const char *checkpoint, const ng_engine_opts *opts);
/// Stops admitting, answers every admitted request (their callbacks have all returned when it
/// returns), stops the threads and frees; NULL accepted.
void ng_engine_destroy(ng_engine *e);

/// What the metadata endpoint reports.
typedef struct {
  char name[64];
  int64_t nodes; ///< current node count (grows with updates)
  int64_t feature_dim;
  int32_t classes;
  int32_t layers;
  int64_t layer_dim[NG_ENGINE_MAX_LAYERS]; ///< output columns of each layer
  int32_t ready;                           ///< 1 once the engine answers requests
  /// 1 when the engine serves a link checkpoint (ng_link_trainer_save) and answers pair-score
  /// requests (the last layer's output is then the node embedding); 0 for node classification.
  int32_t pair_scores;
  int32_t decoder; ///< the link decoder (ng_link_decoder) when pair_scores is 1, else 0
} ng_engine_info;
void ng_engine_info_get(ng_engine_info *out, const ng_engine *e);

/// Outputs a request asks for (bit mask).
enum { NG_OUT_LOGITS = 1, NG_OUT_EMBEDDING = 2, NG_OUT_CLASS = 4, NG_OUT_SCORE = 8 };

typedef struct {
  const int64_t *node_ids; ///< n ids, each in [0, nodes)
  int64_t n;               ///< 1 to max_request_nodes
  unsigned outputs;        ///< NG_OUT_* mask (0 means logits)
  int32_t embedding_layer; ///< which layer's output is "embedding" (0-based; < 0: layers - 2)
  /// Sampling instead of the full neighbourhood: n_fanouts == layers, fanout[l] for layer l from
  /// the input layer (as ng_layer_opts), with `seed`. n_fanouts 0: full neighbourhood.
  int32_t n_fanouts;
  int32_t fanout[NG_ENGINE_MAX_LAYERS];
  uint64_t seed;
  /// The request's deadline in ms from its admission (0: the engine's request_timeout_ms; at
  /// most NG_ENGINE_MAX_TIMEOUT_MS). A request that cannot start before it is refused as busy.
  int64_t timeout_ms;
  /// Pair scores (an engine built from a link checkpoint, ng_link_trainer_save): non-NULL asks
  /// for the decoder's score of each pair (node_ids[i], dst_ids[i]), i < n, into
  /// ng_infer_result.score; `outputs` must then be NG_OUT_SCORE (or 0). The pairs' ends, each
  /// once, are the request's target nodes: their embeddings (the last layer's output) come from
  /// the batched forward pass of node requests, with the same batching, tiers, deadlines, cache
  /// and updates, and the decoder scores each pair as the link trainer does offline
  /// (ng_link_trainer_score: the same bits on the CPU backend). An engine of a node-
  /// classification checkpoint refuses it (NG_ERR_INVALID_ARG). Appended last: a request
  /// zero-initialised (memset, `= {0}`) leaves it NULL, a node request.
  const int64_t *dst_ids;
} ng_infer_request;

/// A request's answer. The engine allocates the arrays (malloc); ng_infer_result_free frees them.
typedef struct {
  float *logits;    ///< [n, classes] or NULL
  float *embedding; ///< [n, embedding_dim] or NULL
  int64_t *cls;     ///< [n] argmax of the logits, or NULL
  int64_t n, classes, embedding_dim;
  int32_t hub;         ///< 1 when the request was served on the hub path
  int64_t batch_nodes; ///< target nodes of the device batch it rode in
  /// The input rows of the batch it rode in, read from the hot tier and from host memory.
  int64_t hot_rows, cold_rows;
  double queue_us, compute_us; ///< time waiting for a batch, and the batch's compute
  float *score; ///< [n] the pairs' scores (a pair request: ng_infer_request.dst_ids), or NULL
} ng_infer_result;
void ng_infer_result_free(ng_infer_result *r);

/// Answers one request (blocking): ng_engine_submit, then a wait for its callback. Errors:
/// NG_ERR_INVALID_ARG for a bad id, layer, fanout or timeout (ng_last_error() says which);
/// NG_ERR_STATE ("busy", the caller answers 503) when the admission queue is full, when the wait
/// predicted from the queued work and the measured cost would pass the request's deadline
/// (refused at once), when the deadline passes before the request starts (answered at its
/// deadline, never computed), or while the engine drains. Same request on an unchanged graph:
/// same bits, whatever it is batched with and whichever lane computes it.
ng_status ng_engine_infer(ng_engine *e, const ng_infer_request *req, ng_infer_result *res);

/// A request's answer, called once for every request ng_engine_submit admitted. `status`:
/// NG_OK (*res is filled; the caller frees it with ng_infer_result_free), NG_ERR_STATE (busy:
/// its deadline passed before it could start; never computed), NG_ERR_INTERRUPTED (cancelled:
/// dropped from the queue, or computed and its answer discarded), NG_ERR_NONFINITE or another
/// error of its batch; *res holds nothing but on NG_OK. `message` says why (empty on NG_OK; valid
/// during the call only). It runs on an engine thread, or on the thread of ng_engine_cancel for a
/// request cancelled while queued, possibly before ng_engine_submit has returned; it must return
/// quickly (it holds up the thread that answers other requests), and may call ng_engine_submit
/// and ng_engine_cancel but not ng_engine_destroy.
typedef void (*ng_infer_done_fn)(void *user, ng_status status, const char *message);
/// Names an admitted request for ng_engine_cancel (never 0; not reused by one engine).
typedef uint64_t ng_infer_ticket;

/// Admits one request without waiting for its answer: the answer comes through `done(user,
/// ...)`. `req` (and its node ids) and `res` are borrowed until the callback has run. On NG_OK
/// the request is admitted, *ticket (may be NULL) names it and `done` will be called exactly
/// once; on an error nothing was admitted and `done` is never called. Errors: as
/// ng_engine_infer's at admission (a bad request, a full queue, a predicted wait past the
/// deadline, draining), all returned at once.
ng_status ng_engine_submit(ng_engine *e, const ng_infer_request *req, ng_infer_result *res,
                           ng_infer_done_fn done, void *user, ng_infer_ticket *ticket);

/// Cancels an admitted request that is not answered yet: one still queued is dropped, never
/// computed, and its callback runs (NG_ERR_INTERRUPTED) before this returns; one already in a
/// batch is computed and its answer discarded, its callback running (NG_ERR_INTERRUPTED) when
/// the batch ends. Returns NG_OK, or NG_ERR_NOT_FOUND when no such request waits or computes
/// (answered already, or being answered now: its callback brings the answer).
ng_status ng_engine_cancel(ng_engine *e, ng_infer_ticket ticket);

/// One online update. Node ids of added nodes are assigned in order from the current count.
typedef struct {
  int64_t add_nodes;         ///< nodes to append
  const float *add_features; ///< [add_nodes, feature_dim]
  int64_t n_add_edges;       ///< edges (src, dst): dst aggregates src from now on
  const int64_t *add_src, *add_dst;
  int64_t n_remove_edges;
  const int64_t *remove_src, *remove_dst;
  int64_t n_feature_rows; ///< rows whose features are replaced
  const int64_t *feature_ids;
  const float *feature_values; ///< [n_feature_rows, feature_dim]
} ng_graph_update;

/// Validates, appends to the log, fsyncs, then publishes the update (blocking). On NG_OK the
/// update is durable and visible to every request that starts afterwards; no batch sees half of
/// it. Concurrent calls commit as a group that shares one write and one fsync, each update
/// applied as if the calls were serialised in arrival order; each call still returns only once
/// its update is durable and published. *first_new_id (may be NULL) gets the id of the first
/// added node.
ng_status ng_engine_update(ng_engine *e, const ng_graph_update *u, int64_t *first_new_id);

/// What an update changed (ng_engine_apply).
typedef struct {
  size_t size;          ///< sizeof(ng_update_result)
  int64_t first_new_id; ///< id of the first added node (the node count before the update)
  int64_t added_nodes;
  /// Edges that were not there before: an edge the graph has, or one given twice, counts once
  /// or not at all.
  int64_t added_edges;
  int64_t removed_edges;
  int64_t updated_features; ///< feature rows replaced
  /// 1 when the update was appended to the log; 0 when it changed nothing (every count 0, or
  /// only edges the graph has), which is answered NG_OK without a record.
  int32_t logged;
} ng_update_result;
#define NG_UPDATE_RESULT_INIT                                                                      \
  { sizeof(ng_update_result), -1, 0, 0, 0, 0, 0 }

/// ng_engine_update, reporting what the update changed into *out (may be NULL; initialise it
/// with NG_UPDATE_RESULT_INIT). An update that changes nothing is not logged and changes no
/// snapshot. Errors as ng_engine_update.
ng_status ng_engine_apply(ng_engine *e, const ng_graph_update *u, ng_update_result *out);

/// What ng_engine_create found in the update log.
typedef struct {
  size_t size;      ///< sizeof(ng_engine_log_info)
  int64_t records;  ///< records in the log now
  int64_t replayed; ///< records ng_engine_create replayed
  /// Byte of the log from which ng_engine_create cut a torn tail (a record a crash cut short
  /// during its append, never acknowledged), or -1 when nothing was cut.
  int64_t cut_offset;
  int64_t cut_bytes; ///< bytes cut off
  char cut_what[96]; ///< what was at cut_offset ("" when nothing was cut)
  int32_t migrated;  ///< 1 when a version-1 log was rewritten in the current format
} ng_engine_log_info;
#define NG_ENGINE_LOG_INFO_INIT                                                                    \
  { sizeof(ng_engine_log_info), 0, 0, -1, 0, {0}, 0 }

/// Fills *out (initialised with NG_ENGINE_LOG_INFO_INIT). Errors: NG_ERR_INVALID_ARG for a NULL
/// or closed engine or an `out` without its size, NG_ERR_UNSUPPORTED when the engine has no log.
ng_status ng_engine_log_info_get(ng_engine_log_info *out, const ng_engine *e);

/// Counters for /metrics (monotonic unless said otherwise).
typedef struct {
  int64_t requests, request_nodes, hub_requests;
  int64_t rejected_busy;        ///< refused at admission: the queue was full
  int64_t batches, batch_nodes; ///< device batches and the targets they held
  int64_t hot_rows, cold_rows;
  int64_t updates;
  int64_t queue_depth; ///< now (a gauge)
  /// Refused at admission because the predicted wait would pass the request's deadline.
  int64_t rejected_deadline;
  /// Admitted but refused when their deadline passed before they could start (never computed).
  int64_t timed_out;
  /// fdatasyncs of the update log by this process. Concurrent updates commit as a group that
  /// shares one write and one fsync, so this can be below `updates`.
  int64_t update_syncs;
  /// The cache of layer-0 outputs (embedding_cache_bytes): rows found and rows computed, rows
  /// evicted to make room and rows removed because an update changed them; rows held now (a
  /// gauge). All 0 when the cache is off.
  int64_t cache_hits, cache_misses, cache_evictions, cache_invalidations, cache_entries;
  /// Requests taken into a device batch (computed, or computing now). A request refused,
  /// expired or cancelled while queued is never counted here.
  int64_t computed;
  /// Requests cancelled (ng_engine_cancel; the HTTP front's client went away): dropped from the
  /// queue, or computed and their answer discarded.
  int64_t cancelled;
} ng_engine_stats;
void ng_engine_stats_get(ng_engine_stats *out, const ng_engine *e);

/* ---- the HTTP server (serve/http.c; docs/serving.md) ---- */

typedef struct ng_http_server ng_http_server;

typedef struct {
  size_t size;            ///< sizeof(ng_http_opts)
  const char *host;       ///< address to listen on (numeric IPv4 or IPv6); NULL: 127.0.0.1
  int port;               ///< TCP port; 0 picks a free one (ng_http_server_port tells which)
  int64_t max_body_bytes; ///< larger request bodies get 413 unread (default 16 MiB)
  /// Body bytes held at once across connections (default 4 x the max), charged as they arrive:
  /// past it, a body is dropped as it comes and answered 503.
  int64_t max_buffered_bytes;
  /// Open connections for any request (default 512). A request waiting for the engine holds its
  /// connection, not a thread: a pool of event-loop threads serves every connection.
  int max_connections;
  int retry_after_s;      ///< the Retry-After of a 503 (default 1)
  double drain_timeout_s; ///< ng_http_server_stop's longest wait for requests in flight (30 s)
  /// A request's headers must be complete this long after its connection opened or answered the
  /// previous request; else the connection is closed without an answer (default 10 s). An idle
  /// keep-alive connection is therefore closed after this long.
  double header_timeout_s;
  /// A body still arriving must bring min_body_rate x body_window_s bytes in each window of
  /// body_window_s from its headers on, or its connection is closed without an answer
  /// (defaults 1024 bytes/s and 5 s; a min_body_rate of 0: no minimum).
  int64_t min_body_rate;
  double body_window_s;
  int max_connections_per_client; ///< open connections from one address (default 64; 0: no cap)
  /// Connections accepted beyond max_connections that answer only /v2/health/live,
  /// /v2/health/ready, /v2/models/{name}/ready and /metrics; other requests on them get 503 and
  /// Connection: close (default 16).
  int health_connections;
} ng_http_opts;
#define NG_HTTP_OPTS_INIT                                                                          \
  { sizeof(ng_http_opts), NULL, 8000, (int64_t)16 << 20, 0, 512, 1, 30.0, 10.0, 1024, 5.0, 64, 16 }

/// Starts listening and answering in libmicrohttpd's threads (a pool of event loops, keep-alive;
/// an infer request waits for the engine with its connection suspended, and is cancelled if its
/// client closes the connection meanwhile).
/// `engine` is borrowed and must outlive the server. Returns NG_ERR_IO when the address cannot
/// be bound (ng_last_error() says which), NG_ERR_INVALID_ARG for bad options.
ng_status ng_http_server_start(ng_http_server **out, ng_engine *engine, const ng_http_opts *opts);
/// The port the server listens on (the one picked when opts->port was 0).
int ng_http_server_port(const ng_http_server *s);
/// Stops accepting connections, answers the requests in flight (new requests on open
/// connections get 503 and the connection is closed), waits for them up to the drain timeout,
/// then closes every connection and frees. NULL accepted. The engine is not touched: the caller
/// destroys it afterwards. Returns the number of requests still in flight at the timeout (0 after
/// a clean drain).
int ng_http_server_stop(ng_http_server *s);

#endif
