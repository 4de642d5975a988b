/* Internal view of a heterogeneous dataset folder (docs/heterogeneous.md): node types with their
 * own counts and feature tables, edge types (src type, relation, dst type) each a CSR over its
 * destination type. */
#ifndef NG_HETERO_IMPL_H
#define NG_HETERO_IMPL_H

#include "dataset_impl.h"

#define NG_HETERO_MAGIC 0x6e676874u /* "nght" */
/* Limits that keep dataset.json small and the per-(relation, hop) tables of the sampler and
 * models bounded; MAG has 4 node types and 4 (7 with reverses) relations, IGBH 4 and 7. */
#define NG_HETERO_MAX_NODE_TYPES 64
#define NG_HETERO_MAX_EDGE_TYPES 256

typedef struct {
  char name[NG_HETERO_NAME_MAX + 1];
  int64_t count;
  int64_t feature_dim;
  int32_t classes;     ///< > 0 only on the target type
  ng_npy features_npy; ///< unmapped when feature_dim == 0 (or the folder is homogeneous)
  ng_npy labels_npy;   ///< unmapped when classes == 0 (or the folder is homogeneous)
  const float *features;
  const int32_t *labels;
} ng_hetero_ntype;

typedef struct {
  char relation[NG_HETERO_NAME_MAX + 1];
  int32_t src, dst;  ///< node types
  ng_npy indptr_npy; ///< unmapped for a homogeneous folder (its arrays are the dataset's)
  ng_npy indices_npy;
  ng_csr csr; ///< rows: dst nodes (csr.nodes = dst count); entries: src ids
} ng_hetero_etype;

struct ng_hetero {
  uint32_t magic; ///< NG_HETERO_MAGIC while open, 0 after close
  char *dir;      ///< the folder (owned)
  ng_hetero_info info;
  ng_hetero_ntype *ntypes; ///< [info.node_types]
  ng_hetero_etype *etypes; ///< [info.edge_types]
  ng_npy split_npy[3];
  const int64_t *split[3]; ///< train, val, test ids of the target type (NULL when empty)
  uint8_t id[NG_DATASET_ID_BYTES];
  bool has_id;
  ng_dataset_t homo; ///< the homogeneous dataset viewed as one type and one relation, or NULL
};

/// File names of a heterogeneous folder's arrays, written into `buf` (`cap` bytes):
/// `<type>.features.npy`, `<type>.labels.npy`, `<src>.<relation>.<dst>.indptr.npy` and
/// `<src>.<relation>.<dst>.indices.npy`. Names hold no '.', so each file name is unambiguous.
void ng__hetero_features_file(char *buf, size_t cap, const char *type);
void ng__hetero_labels_file(char *buf, size_t cap, const char *type);
void ng__hetero_csr_file(char *buf, size_t cap, const char *src, const char *rel, const char *dst,
                         bool indices);

/// Whether `name` is a valid node type or relation name: 1 to NG_HETERO_NAME_MAX letters,
/// digits, '_' or '-' (they become file names).
bool ng__hetero_name_ok(const char *name);

/// Writes a heterogeneous dataset atomically: arrays into a temporary folder beside the
/// destination (ng_dataset_writer's), dataset.json on commit, then the folder is opened with
/// ng_hetero_open and renamed into place only when it passes.
typedef struct {
  ng_dataset_writer w; ///< the temporary folder (its homogeneous arrays[] stay unused)
  int n, cap;
  struct ng_hetero_warray {
    char file[160];
    ng_npy npy;
  } * a;
} ng_hetero_writer;

/// Starts a dataset at `dst_dir`, which must not exist (NG_ERR_EXISTS names it otherwise).
ng_status ng__hetero_writer_begin(ng_hetero_writer *hw, const char *dst_dir);
/// Creates array file `file` in the temporary folder, zero-filled and mapped read-write.
ng_status ng__hetero_writer_array(ng_npy **out, ng_hetero_writer *hw, const char *file,
                                  ng_dtype dtype, int ndim, const int64_t *shape);
/// Flushes every array, writes dataset.json from `desc` (its info's name, index_bytes and
/// splits, each node type's name, count, feature_dim and classes, each edge type's relation,
/// src, dst and csr.nnz) with `source`, checks the folder opens, and renames it into place.
/// The writer is finished either way; nothing is left behind on failure.
ng_status ng__hetero_writer_commit(ng_hetero_writer *hw, const struct ng_hetero *desc,
                                   const char *source);
/// Removes the temporary folder and frees the writer; safe on a zeroed or finished writer.
void ng__hetero_writer_abort(ng_hetero_writer *hw);

/// Checks a handle at the API edge: NULL or closed handles are reported, not followed.
ng_status ng__hetero_check(ng_hetero_t ds);

/// A hot tier per node type within one budget (docs/heterogeneous.md#tiering): how many rows of
/// each type's feature table the device keeps, and which.
typedef struct {
  int32_t n_types;
  int64_t *hot;  ///< [n_types] rows of each type in the hot tier (0 for a type without features)
  int64_t **ids; ///< [n_types] each type's hot ids, hottest first (NULL when hot is 0)
  int64_t bytes; ///< bytes the hot rows take, at most the budget
} ng_hetero_hot_plan;

/// Chooses the hot rows of every type within `budget` bytes. A row's score is the reads a
/// uniform sampler makes of it per byte it takes: its in-degree summed over the relations whose
/// source is its type, divided by its type's row bytes (feature_dim * 4), so that for the same
/// in-degree a narrow type's rows go first (a 128-column row costs an eighth of a 1024-column
/// one). Rows are taken by descending score (ties: lower type, then lower id) while they fit; a
/// type whose next row no longer fits takes no more. Free with ng__hetero_hot_plan_free.
ng_status ng__hetero_hot_plan(ng_hetero_hot_plan *out, const struct ng_hetero *ds, int64_t budget);
void ng__hetero_hot_plan_free(ng_hetero_hot_plan *p);
/// The in-degree of every node of type `t` over the relations whose source is `t` into deg
/// [count] (the score's numerator).
void ng__hetero_source_degree(double *deg, const struct ng_hetero *ds, int32_t t);

#endif /* NG_HETERO_IMPL_H */
