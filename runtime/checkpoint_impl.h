/* The checkpoint codec (runtime/checkpoint.c): the one writer and the one reader of neargnn
 * checkpoints. ng_trainer_save writes through it; ng_trainer_load, ng_trainer_load_weights, the
 * serving engine, ng_model_from_checkpoint and ng_checkpoint_info_get read through it, so every
 * reader refuses the same damaged or edited files. docs/training.md lists the keys. */
#ifndef NG_CHECKPOINT_IMPL_H
#define NG_CHECKPOINT_IMPL_H

#include "link_impl.h"
#include "model_impl.h"
#include "safetensors_impl.h"

#define NG_CHECKPOINT_FORMAT "neargnn-checkpoint"
/// The format version written. Version 2 adds "header_crc", a CRC-32 over every other metadata
/// entry and the tensor table, and requires the per-tensor CRCs ("checksums"), the epoch base
/// and the model's description; version 1 files still load, with whatever of these they have.
#define NG_CHECKPOINT_VERSION 2

/// The model a checkpoint describes (the "model.*", "train.*" and "dataset.*" keys).
typedef struct {
  bool described; ///< false for version-1 files written before the description existed
  ng_model_kind kind;
  int64_t in_dim;
  int layers;
  ng_layer_opts layer[NG_MAX_LAYERS]; ///< user aggregators as their built-in parts
  char aggregator[NG_MAX_LAYERS][64]; ///< each layer's aggregator name as recorded
  ng_normalize normalize;
  char dataset[64];
  int64_t nodes, feature_dim, classes;
} ng_ckpt_desc;

/// The run a checkpoint continues (the counters, seed, batch and optimizer).
typedef struct {
  int64_t epochs_done, step, iteration, batch;
  bool has_base; ///< read: the file records base_epochs and base_step (version 1 may not)
  int64_t base_epochs, base_step;
  ng_optimizer optimizer;
  uint64_t seed;
} ng_ckpt_run;

/// The decoder of a link checkpoint (ng_link_trainer_save): the "link.*" keys, and for the MLP
/// the tensors "decoder.w1" [dim, hidden], "decoder.b1" [hidden], "decoder.w2" [hidden],
/// "decoder.b2" [1] after the model's and the optimizer's.
typedef struct {
  bool present; ///< a link checkpoint: the last layer's output is a node embedding
  ng_link_decoder decoder;
  int64_t hidden; ///< the MLP's hidden width (0 for the dot product)
} ng_ckpt_link;

/// A checkpoint read and verified by ng__ckpt_read: its tensors point into `file`.
typedef struct {
  int version;
  ng_ckpt_link link;
  ng_model_kind model; ///< the "model" key
  ng_ckpt_run run;
  ng_ckpt_desc desc;
  bool checksummed; ///< every tensor's CRC-32 was checked (version 1 files may have none)
  ng_st_file file;
} ng_ckpt;

/// Writes model `m`'s checkpoint to `path` atomically: `host` holds the parameters, then the
/// optimizer's two states (m->n_params floats each); the description records `normalize` and
/// the dataset `info`, and `run` the counters (its has_base is ignored: the base is always
/// written). Everything is borrowed.
ng_status ng__ckpt_write(const char *path, const struct ng_model *m, const float *host,
                         ng_normalize normalize, const ng_dataset_info *info,
                         const ng_ckpt_run *run);
/// ng__ckpt_write of a link trainer's GNN, the same keys and tensors, plus its decoder `dec`
/// (borrowed; dec->dim must be the last layer's width): "link.decoder", "link.mlp_hidden" and,
/// for the MLP, its four tensors and their CRCs ("link.checksums").
ng_status ng__ckpt_write_link(const char *path, const struct ng_model *m, const float *host,
                              ng_normalize normalize, const ng_dataset_info *info,
                              const ng_ckpt_run *run, const ng_link_dec *dec);
/// The MLP decoder's parameters of link checkpoint `c` into mlp[dim hidden + 2 hidden + 1] as
/// ng_link_dec lays them out (W1, b1, w2, b2); `dim` is the last layer's width.
ng_status ng__ckpt_link_mlp(float *mlp, const ng_ckpt *c, int64_t dim);
/// A relational model's checkpoint (ng_hetero_trainer_save, docs/heterogeneous.md#checkpoints):
/// the model's description, the dataset's schema and the run's counters. Its tensors are
/// "hetero.params" and the optimizer's two states, n_params floats each.
typedef struct {
  char model[16]; ///< ng_hetero_model_name
  int64_t layers, hidden, embed_dim, bases, heads;
  int64_t node_types, edge_types, target, classes;
  uint32_t schema; ///< CRC-32 of the types (name, count, width) and relations (names)
  char dataset[64];
  int64_t epochs_done, step;
  uint64_t seed;
  int64_t n_params;
} ng_ckpt_hetero;
/// Writes `h` and host[3 * n_params] (parameters, then the optimizer's states) to `path`
/// atomically, with the header CRC and every tensor's CRC as a node checkpoint's.
ng_status ng__ckpt_write_hetero(const char *path, const ng_ckpt_hetero *h, const float *host);
/// Maps `path` into *f (close it with ng__st_close, also after a failure) and reads it as
/// strictly as ng__ckpt_read: only the keys of a relational checkpoint, each well-formed, the
/// header CRC, every tensor's CRC, exactly its three tensors of n_params floats; *params points
/// at the parameters in the mapping.
ng_status ng__ckpt_read_hetero(ng_ckpt_hetero *h, const float **params, ng_st_file *f,
                               const char *path);
/// Maps `path` and reads it strictly: every metadata key known to its version and present
/// where required, no key twice, every value well-formed and in range (finite
/// hyper-parameters), the header CRC (version 2) and every tensor's CRC checked, and for a
/// described checkpoint exactly the tensors its model has. Errors name the file and the key.
/// Close *out with ng__ckpt_close, also after a failure.
ng_status ng__ckpt_read(ng_ckpt *out, const char *path);
/// ng__ckpt_read of a whole file in memory (`buf` borrowed: the tensors point into it); `name`
/// names it in errors. For the fuzz target.
ng_status ng__ckpt_parse(ng_ckpt *out, const void *buf, size_t len, const char *name);
/// Unmaps; accepts a zeroed, failed or closed ng_ckpt.
void ng__ckpt_close(ng_ckpt *c);
/// Checks what `c` describes against the model, normalisation and dataset of this run; the
/// error names the setting (as the command's option) and both values. `weights_only`
/// (inference) skips the fanouts and the dataset's identity (name, nodes). A checkpoint
/// without a description is checked by its model kind alone (its shapes by ng__ckpt_tensors).
ng_status ng__ckpt_verify(const ng_ckpt *c, const char *path, const struct ng_model *m,
                          ng_normalize normalize, const ng_dataset_info *info, bool weights_only);
/// Copies `m`'s parameters from `c` into host[0, n_params) and, with `with_state`, the
/// optimizer's states into host[n_params, 3 n_params); each tensor's name, dtype and shape are
/// checked.
ng_status ng__ckpt_tensors(float *host, const ng_ckpt *c, const char *path,
                           const struct ng_model *m, bool with_state);
/// Builds the model `c` describes (NG_ERR_FORMAT without a description, NG_ERR_UNSUPPORTED for
/// a user aggregator, which only the program that defined it has).
ng_status ng__ckpt_model(ng_model_t *out, const ng_ckpt *c, const char *path);
/// The header CRC of a checkpoint's metadata (every entry but "header_crc") and tensor table
/// (names, dtypes, shapes, in order): what "header_crc" holds, as 8 hex digits.
uint32_t ng__ckpt_header_crc(const ng_st_meta *meta, int n_meta, const ng_st_tensor *tensors,
                             int n);

/// A model's parameters and its optimizer's two states, `n` floats each on `be`, copied to the
/// host one after another as a checkpoint holds them: *out [3 n] (the caller frees it, even on
/// failure). Node, link and relational checkpoints all copy out through it.
ng_status ng__ckpt_copy_out(float **out, ng_backend *be, const float *params, const float *state1,
                            const float *state2, int64_t n);

#endif /* NG_CHECKPOINT_IMPL_H */
