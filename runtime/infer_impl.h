/* Layer-wise full-neighbour inference (runtime/infer.c): every node, or the receptive field of
 * a node set, one layer at a time, in chunks, with the host work of the next chunk (sampling
 * its full 1-hop neighbourhood, gathering its input rows) overlapping the device's computation
 * of the current one. docs/inference.md describes it. */
#ifndef NG_INFER_IMPL_H
#define NG_INFER_IMPL_H

#include "feature_store_impl.h"
#include "model_impl.h"
#include "sampler_impl.h"

/// Intermediate layers up to this many bytes live in anonymous memory, larger ones in a
/// memory-mapped temporary file (ng_infer_opts.host_bytes = 0).
#define NG_INFER_HOST_BYTES_DEFAULT ((int64_t)1 << 30)
/// Staging slots at most (chunks in flight): producers + 2.
#define NG_INFER_MAX_SLOTS 64
/// Destinations per chunk when the caller leaves it to inference (ng_infer_ctx.chunk 0): small on
/// the host paths and where the host gathers a layer's input rows, large where a GPU reads them
/// itself (runtime/infer.c says why).
#define NG_INFER_CHUNK_SMALL 4096
#define NG_INFER_CHUNK_LARGE 65536
/// Device memory left free beside what inference keeps resident (plus 5% of what is free): the
/// chunks' buffers and the model's workspace.
#define NG_INFER_DEVICE_MARGIN ((int64_t)1 << 30)

/// What inference reads: the model on its backend, the graph, the host's feature table and the
/// feature store whose hot rows are in device memory. Everything is borrowed.
typedef struct {
  ng_model_exec *ex;     ///< the model and its parameters on the backend
  const ng_csr *graph;   ///< row v = the neighbours v aggregates from
  const float *features; ///< the host's table [nodes, in_dim] (the trainer's, maybe normalised)
  const ng_store *store; ///< hot rows [0, store->hot) in backend memory; cold rows via host_dev
                         ///< (zero-copy) when registered, else gathered on the host; may be NULL
  int threads;           ///< host threads: beside a GPU, threads - 1 producers sample and
                         ///< gather chunks in parallel; OpenMP threads of the rest
  int64_t chunk;         ///< destinations per chunk (0: chosen per layer, see runtime/infer.c)
  int64_t host_bytes;    ///< see NG_INFER_HOST_BYTES_DEFAULT; < 0: every intermediate in a file
  const char *temp_dir;  ///< folder of the temporary files (NULL: $TMPDIR, else /tmp)
  int64_t device_bytes;  ///< device memory for the cold input rows and intermediate layers
                         ///< kept resident (0: what is free less a margin; < 0: none)
  int producers;         ///< producer threads (0: by the backend, see runtime/infer.c)
  /// A host-memory backend sized by the OpenMP default (no thread count given): each layer
  /// times a few chunks with every thread and with one, and computes the others with the
  /// faster (runtime/infer.c, adapt_team). The bits do not depend on it.
  bool adapt_threads;
  bool device_paths;       ///< tests: a host-memory backend takes the device paths (staging,
                           ///< uploads, resident layers), whose ops it also has
  ng_progress_fn progress; ///< optional; phase "infer", in destination rows over all layers
  void *progress_ctx;
  /// NG_PRECISION_BF16: the host's table in bf16, read (and converted to fp32 where it is read)
  /// instead of `features`, with the store's bf16 hot rows and zero-copy view; NULL: fp32.
  const uint16_t *features_bf16;
  /// Optional: called on the calling thread once rows [first, first + n) of the caller's `out`
  /// are written (every node in id order, or targets sorted and distinct: the last layer then
  /// writes `out` chunk by chunk), e.g.
  /// to start writing a mapped output file back to disk while the layer goes on.
  void (*rows_done)(void *ctx, int64_t first, int64_t n);
  void *rows_done_ctx;
} ng_infer_ctx;

/// Statistics of one run (for tests and the benchmark).
typedef struct {
  int64_t rows[NG_MAX_LAYERS];    ///< destinations computed per layer (the receptive field)
  int64_t chunks;                 ///< chunks over all layers
  int64_t chunk[NG_MAX_LAYERS];   ///< destinations per chunk per layer
  int64_t file_bytes;             ///< bytes of layer outputs that lived in temporary files
  int64_t hot_rows, cold_rows;    ///< input-layer rows read from the device's hot tier / the host
  int64_t device_bytes;           ///< device memory held for resident cold rows and layer outputs
  int producers, slots;           ///< producer threads, staging slots (chunks in flight)
  double upload_s;                ///< seconds uploading the cold input rows (part of layer_s[0])
  double layer_s[NG_MAX_LAYERS];  ///< wall seconds per layer
  double host_s[NG_MAX_LAYERS];   ///< producers' busy seconds per layer, summed over threads
  double wait_s[NG_MAX_LAYERS];   ///< the device thread's seconds waiting for produced chunks
  double device_s[NG_MAX_LAYERS]; ///< the device thread's seconds computing chunks
} ng_infer_stats;

/// Computes the output of layer `layer` (0-based; the last layer gives logits) of nodes
/// `targets[n]` (any order, repeats allowed; NULL: every node in id order, n = nodes) into host
/// memory `out` [n, out_dim of the layer]; targets sorted and distinct are written in place by
/// the last layer (no temporary copy of the output). Deterministic: the bits depend on the
/// parameters, the graph and the features only, never on the chunk size, threads or timing. `stats`
/// may be NULL.
ng_status ng__infer(float *out, const ng_infer_ctx *c, int layer, const int64_t *targets, int64_t n,
                    ng_infer_stats *stats);

/// Copies the figures of `s` (a run of `layers` layers) into the caller's report, as far as its
/// size reaches.
void ng__infer_report(ng_infer_report *out, const ng_infer_stats *s, int layers);

#endif /* NG_INFER_IMPL_H */
