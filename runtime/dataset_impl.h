/* Internal view of a dataset folder (see docs/dataset-format.md) and the atomic writer that
 * converters and the generator use. */
#ifndef NG_DATASET_IMPL_H
#define NG_DATASET_IMPL_H

#include "graph_impl.h"
#include "npy_impl.h"

#define NG_DATASET_MAGIC 0x6e676473u /* "ngds" */
#define NG_DATASET_FORMAT "neargnn-dataset"
#define NG_DATASET_VERSION 1
/// Bytes of a dataset's random id (dataset.json writes it as 32 lowercase hex digits).
#define NG_DATASET_ID_BYTES 16

/// The arrays of a dataset folder; NG_ARRAY_FILE[] gives their file names.
typedef enum {
  NG_ARR_INDPTR = 0, ///< int64 [nodes + 1]
  NG_ARR_INDICES,    ///< int32 (nodes < 2^31) or int64 [edges]
  NG_ARR_FEATURES,   ///< float32 [nodes, feature_dim]; absent when feature_dim == 0
  NG_ARR_LABELS,     ///< int32 [nodes], -1 = unlabelled; absent when classes == 0
  NG_ARR_TRAIN,      ///< int64 [train]; absent when empty
  NG_ARR_VAL,        ///< int64 [val]
  NG_ARR_TEST,       ///< int64 [test]
  NG_ARR_ORIG_ID,    ///< int64 [nodes]: the source's id of each node; absent when ids are kept
  NG_ARR_COUNT_
} ng_array_id;

extern const char *const NG_ARRAY_FILE[NG_ARR_COUNT_];

/// Node ids fit int32 below this many nodes; at or above it indices are int64.
#define NG_INDEX32_MAX_NODES ((int64_t)1 << 31)
/* The most classes a converter accepts (labels 0 to NG_MAX_CLASSES - 1). The output layer and
 * its gradients scale with the class count, so a stray large label would otherwise turn into
 * gigabytes of logits (docs/convert.md). */
#define NG_MAX_CLASSES 65536
/* Sparse labels are refused when the class count (largest label + 1) exceeds
 * NG_SPARSE_CLASS_FACTOR x the distinct labels used + NG_SPARSE_CLASS_SLACK: most classes
 * would be empty, which is almost always a label column that was not renumbered. */
#define NG_SPARSE_CLASS_FACTOR 2
#define NG_SPARSE_CLASS_SLACK 8

struct ng_dataset {
  uint32_t magic; ///< NG_DATASET_MAGIC while open, 0 after close
  char *dir;      ///< the folder (owned)
  ng_dataset_info info;
  ng_npy arrays[NG_ARR_COUNT_]; ///< unmapped (map == NULL) when absent
  ng_csr csr;                   ///< a borrowed view of indptr/indices
  const float *features;        ///< NULL when feature_dim == 0
  const int32_t *labels;        ///< NULL when classes == 0
  const int64_t *split[3];      ///< train, val, test ids (NULL when empty)
  /// dataset.json's "id": 16 random bytes each writer draws anew, so that a log or cache made
  /// for one dataset is not taken for another of the same counts (has_id false: none given).
  uint8_t id[NG_DATASET_ID_BYTES];
  bool has_id;
  /// Buffers a dataset built from memory owns (ng_dataset_from_arrays: a CSR built from an
  /// edge list, converted labels or ids), freed with ng__big_free on close; {NULL, 0} when unused.
  struct {
    void *ptr;
    size_t bytes;
  } owned[6];
};

/// Checks what the library relies on in an assembled dataset (info, csr, labels, split and
/// orig_id pointers): the CSR's structure and id ranges, labels within [-1, classes), splits
/// in range, disjoint and labelled, orig ids non-negative, and the features finite (every value
/// with `all_features`, else a fixed sample of rows). Messages name `ds->dir` as the folder.
ng_status ng__dataset_validate(const struct ng_dataset *ds, bool all_features);

/// NG_ERR_IO naming the file when one of the dataset's mapped arrays was truncated since it was
/// opened (ng__map_verify): checked before work that reads them, instead of meeting SIGBUS.
ng_status ng__dataset_verify_maps(const struct ng_dataset *ds);

/// Checks a handle at the API edge: NULL or closed handles are reported, not followed.
ng_status ng__dataset_check(ng_dataset_t ds);

/// Metadata written to dataset.json besides what the arrays say.
typedef struct {
  ng_dataset_info info; ///< name, counts (nodes, edges, feature_dim, classes, splits, ...)
  char source[512];     ///< free text: how the dataset was made (converter input, options)
} ng_dataset_meta;

/// Writes a dataset into `<dst>.tmp-<pid>-XXXXXX` beside the destination and renames it into place
/// on commit, so that readers never see a half-written dataset.
typedef struct {
  char *dst_dir;
  char *tmp_dir;
  ng_npy arrays[NG_ARR_COUNT_];
} ng_dataset_writer;

/// Starts a dataset at `dst_dir`, which must not exist (NG_ERR_EXISTS names it otherwise).
ng_status ng__writer_begin(ng_dataset_writer *w, const char *dst_dir);
/// Creates one array file in the temporary folder, zero-filled and mapped read-write.
ng_status ng__writer_array(ng_npy **out, ng_dataset_writer *w, ng_array_id id, ng_dtype dtype,
                           int ndim, const int64_t *shape);
/// Shrinks an array's first dimension (after deduplication).
ng_status ng__writer_shrink(ng_dataset_writer *w, ng_array_id id, int64_t new_dim0);
/// Flushes every array, writes dataset.json from `meta`, and renames the folder into place.
/// On failure the temporary folder is removed. The writer is finished either way.
ng_status ng__writer_commit(ng_dataset_writer *w, const ng_dataset_meta *meta);
/// The last step of a commit, for writers that write their own arrays and dataset.json into
/// `w->tmp_dir` (the heterogeneous writer): makes the folder readable, durable, and renames it
/// into place. On failure the temporary folder is removed. The writer is finished either way.
ng_status ng__writer_publish(ng_dataset_writer *w);
/// A fresh random dataset id as 32 lowercase hex digits (dataset.json's "id").
ng_status ng__dataset_random_id(char hex[2 * NG_DATASET_ID_BYTES + 1]);
/// Removes the temporary folder and frees the writer; safe after commit and on a zeroed writer.
void ng__writer_abort(ng_dataset_writer *w);

/* ---- shared with the heterogeneous loader (runtime/hetero.c) ---- */

struct cJSON;

/// The argument checks ng_dataset_open and ng_hetero_open share: `dir` given and an existing
/// folder, `opts` (borrowed, may be NULL) initialised. `*o` gets the defaults with the caller's
/// fields over them. `fn` names the call and `doc` the format's document in the messages.
ng_status ng__open_args(ng_open_opts *o, const char *fn, const char *dir, const ng_open_opts *opts,
                        const char *doc);
/// A copy of `dir` (free) without its trailing slashes, into `*out`.
ng_status ng__dir_copy(char **out, const char *dir);
/// What a JSON item is, for messages: "a string", "a number", ..., "invalid".
const char *ng__json_type_name(const struct cJSON *item);
/// Copies the caller's share of a versioned struct: its first `*size` bytes, keeping its size
/// field. A caller compiled against an older, smaller struct gets only the fields it knows.
/// `what` names the struct in the message when its size field is too small.
ng_status ng__copy_sized(void *dst, const void *src, size_t full, const char *what);

/// Reads and parses a dataset.json at `path` with the checks every dataset.json gets: a regular
/// file of at most 1 MiB, no NUL characters, valid JSON with nothing but whitespace after it, no
/// key twice in one object. On success `*out_root` (cJSON_Delete) and `*out_text` (free, its
/// `*out_len` bytes, the numbers as written) are the caller's.
ng_status ng__json_read(struct cJSON **out_root, char **out_text, size_t *out_len,
                        const char *path);
/// Prints `root` (taken: deleted here, on every path) into a new file at `path` with a final
/// newline, and syncs it; the file must not exist yet. Writers call it inside their temporary
/// folder.
ng_status ng__json_write(const char *path, struct cJSON *root);
/// dataset.json's optional "id" (32 lowercase hex digits) into `id`; `*has_id` false when absent.
ng_status ng__json_parse_id(uint8_t id[NG_DATASET_ID_BYTES], bool *has_id, const struct cJSON *root,
                            const char *path);
/// Parallel scans that return the lowest bad position (-1: none), whatever the thread count:
/// the first i < n with a[i + 1] < a[i];
int64_t ng__scan_monotone(const int64_t *a, int64_t n);
/// the first element of `a` (int32 or int64 by `elem_bytes`) outside [low, limit);
int64_t ng__scan_range(const void *a, int elem_bytes, int64_t n, int64_t low, int64_t limit);
/// the first NaN or infinity of x[0 .. n).
int64_t ng__scan_nonfinite(const float *x, int64_t n);
/// The row of CSR entry `e`: the last r with indptr[r] <= e (indptr already validated).
int64_t ng__csr_row_of(const int64_t *indptr, int64_t rows, int64_t e);

#endif /* NG_DATASET_IMPL_H */
