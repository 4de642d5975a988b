/* The bf16 feature table of a run in NG_PRECISION_BF16 (runtime/features_bf16.c, docs/training.md
 * "Precision"): the features rounded to bf16 (core/bf16.h), half the bytes of the fp32 table. */
#ifndef NG_FEATURES_BF16_IMPL_H
#define NG_FEATURES_BF16_IMPL_H

#include "dataset_impl.h"

/// The bf16 file written beside a dataset's features.npy: uint16 [nodes, feature_dim].
#define NG_BF16_FEATURES_FILE "features.bf16.npy"

/// A bf16 table: a read-only mapping of the dataset's features.bf16.npy, or anonymous memory.
typedef struct {
  const uint16_t *rows; ///< [nodes, dim]
  ng_npy map;           ///< the file's mapping (map.map NULL when none)
  uint16_t *owned;      ///< anonymous memory (ng__big_free), or NULL
  size_t bytes;
  bool created; ///< the file was written by this open
} ng_bf16_table;

/// Opens the bf16 table of `src` [nodes, dim] (borrowed). When `src` is the dataset's own mapping
/// of features.npy, the table is <dir>/features.bf16.npy: mapped in place when it exists with
/// the right shape and features.npy's modification time (which it is given when written), else
/// written first (temporary file,
/// renamed into place, `progress` phase "bf16 features") and then mapped, so the fp32 table is
/// never copied into memory. A folder that cannot be written, or any other `src` (normalised or
/// in-memory features), gets a table in anonymous memory (half the bytes of `src`), and so does
/// `in_memory` (features_memory COPY: huge pages).
ng_status ng__bf16_table_open(ng_bf16_table *out, const struct ng_dataset *ds, const float *src,
                              bool in_memory, int threads, ng_progress *progress);
void ng__bf16_table_close(ng_bf16_table *t);

/// Tests only (tests/test_bf16_table.c): when set, the writer of features.bf16.npy calls it with
/// the table's path after the table is written to its temporary file and before the rename that
/// puts it in place, so that a test can have another process write the same table meanwhile.
extern void (*ng__bf16_before_rename)(const char *path);

/// Rounds n values of src into dst (to nearest, ties to even) with `threads` threads.
void ng__bf16_convert(uint16_t *dst, const float *src, size_t n, int threads);

#endif /* NG_FEATURES_BF16_IMPL_H */
