/* The model description a checkpoint carries (runtime/checkpoint.c): written by ng_trainer_save,
 * checked by ng_trainer_load and ng_trainer_load_weights, read by ng_model_from_checkpoint. */
#ifndef NG_CHECKPOINT_IMPL_H
#define NG_CHECKPOINT_IMPL_H

#include "model_impl.h"
#include "safetensors_impl.h"

#define NG_CHECKPOINT_FORMAT "neargnn-checkpoint"
/// Metadata entries the description takes at most: kind, in_dim, layers, one per layer,
/// normalisation and four of the dataset.
#define NG_CKPT_DESC_MAX (3 + NG_MAX_LAYERS + 1 + 4)

/// Writes the description of `m` trained with `normalize` on a dataset of `info` into
/// meta[0..] and returns the number of entries (0 when `cap` < NG_CKPT_DESC_MAX).
int ng__ckpt_describe(ng_st_meta *meta, int cap, const struct ng_model *m, ng_normalize normalize,
                      const ng_dataset_info *info);
/// Checks a checkpoint's description against the model, normalisation and dataset of this run;
/// the error names the setting and both values. `weights_only` (inference) skips the fanouts
/// and the dataset's identity (name, nodes). Checkpoints without a description pass.
ng_status ng__ckpt_check(const ng_st_file *f, const char *path, const struct ng_model *m,
                         ng_normalize normalize, const ng_dataset_info *info, bool weights_only);

#endif /* NG_CHECKPOINT_IMPL_H */
