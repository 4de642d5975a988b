/* The trainer's state, shared by its files (runtime/): trainer.c creates and destroys it and
 * runs the epochs, trainer_setup.c builds its parts (the options' checks, the backend, the
 * sampler, the feature store, the pipeline), trainer_memory.c estimates the memory of a
 * configuration, trainer_infer.c evaluates, predicts and embeds, trainer_ckpt.c saves and loads
 * checkpoints. runtime/trainer_impl.h is what the layers above and the tests see. */
#ifndef NG_TRAINER_STATE_IMPL_H
#define NG_TRAINER_STATE_IMPL_H

#include "trainer_impl.h"

#include "cache_place_impl.h"
#include "dataset_impl.h"
#include "features_bf16_impl.h"
#include "model_impl.h"
#include "pipeline_impl.h"
#include "pool_impl.h"
#include "trainer_dist_impl.h"

/* A backend buffer that grows to the largest request and is reused (no steady-state allocs). */
typedef struct {
  void *ptr;
  size_t cap;
} growbuf;

struct ng_trainer {
  uint32_t magic;
  struct ng_dataset *ds;
  const struct ng_model *model; /* &model_copy */
  struct ng_model model_copy;   /* layers may be added to the caller's model afterwards */
  ng_train_opts opts;
  ng_backend *be;
  ng_pool_prefetch topo_prefetch; /* the machine's topology, loaded during ng_trainer_create */
  ng_model_exec ex;
  ng_sampler_cfg cfg;
  ng_sample_arena *arena;
  const float *features; /* the dataset's mapping, or features_owned (normalised or copied) */
  float *features_owned;
  ng_bf16_table bf16; /* NG_PRECISION_BF16: the table every path reads (bf16.rows) */
  /* [2][train]: the orders of two consecutive epochs, epoch e's in perm[e % 2] (perm_epoch[]
   * says which epoch each holds, -1: none), so that the runtime's workers can go on with the
   * next epoch's while the caller is between epochs. */
  int64_t *perm;
  int64_t perm_epoch[2];
  int64_t epochs_done;
  /* The device side of an iteration (the model, the store, the optimizer and its step count),
   * which the runtime runs. */
  ng_train_step step;
  /* Iterations of epoch `epochs_done` already trained: an epoch stopped by the progress
   * callback (Ctrl-C) or an error resumes at the next iteration, here or from a checkpoint. */
  int64_t iter_done;
  /* From epoch base_epochs on, which began after base_step optimizer steps, every epoch has
   * had ceil(train / batch) iterations: the checkpoint's step count is checked against it. A
   * load with another batch (allowed between epochs) starts a new base. */
  int64_t base_epochs, base_step;
  /* [nodes, classes] of full-neighbour inference with the current parameters, or NULL:
   * evaluating several splits infers once. */
  float *logits;
  ng_store store; /* the hot tier and the device side of the input layer */
  /* A partitioned hot tier (ng_train_opts.cache_placement) is read through the package's list
   * of hot rows, which inference does not build: it reads every row from host memory through
   * this store without a hot tier (the same table, hot 0, nothing to close). */
  ng_store store_eval;
  ng_cache_info cache;         /* the hot tier's placement and why */
  ng_fetch_cfg fetch;          /* the host side of the input layer */
  ng_pipeline *rt;             /* workers, ready ring, controller */
  ng_dev_sampler *dev_sampler; /* the device sampler (ng_train_opts.sampler), or NULL */
  ng_mode mode;                /* resolved */
  ng_prof prof;                /* the op profile (ng_train_opts.op_profile_every) */
  ng_startup_times startup;
  /* The epoch in progress, which the runtime counts each finished iteration into. */
  ng_epoch_tally tally;
  ng_progress prog;
  growbuf labels, eval_out;    /* backend memory */
  growbuf stage, stage_labels; /* host staging for backends with their own memory */
  char *temp_dir;              /* inference's temporary files (ng_train_opts.temp_dir, copied) */
  /* [val + test, classes]: the logits of the validation then the test split, or NULL. One
   * inference over both receptive fields serves both evaluations (they overlap mostly). */
  float *eval_logits;
  ng_memory_estimate mem;   /* the estimate the trainer was created under */
  ng_grad_reduce dist;      /* the ranks of a data-parallel run (ng_train_opts.comm) */
  ng_coop *coop;            /* cold-row counter and cooperative fetch (runtime/trainer_dist.c) */
  ng_cold_fetch_stats cold; /* the last epoch's cold-row figures */
  char dist_cpuset[1024];   /* this rank's share of its host's cores, or "" */
};

/// The trainer's own parallel loops' threads: opts->threads, 0: the OpenMP default.
int ng__trainer_threads(const ng_train_opts *o);
/// NG_OK for a live trainer; an error naming a NULL or destroyed handle.
ng_status ng__trainer_check(ng_trainer_t t);
/// Forgets the inferred logits (runtime/trainer_infer.c): the parameters are about to change.
void ng__trainer_drop_logits(ng_trainer_t t);

/* The epoch orders and plans (runtime/trainer.c), which presizing the staging reads too. */
/// The order of `epoch`'s training ids, shuffled into its buffer unless it is there already.
const int64_t *ng__trainer_epoch_order(ng_trainer_t t, int64_t epoch, int64_t n_train);
/// The plan of epoch `epoch` from iteration `first` over `order`, with the trainer's batch.
ng_epoch_plan ng__trainer_epoch_plan(const struct ng_trainer *t, int64_t batch, int64_t epoch,
                                     int64_t first, const int64_t *order);
/// The trainer's batch: the option, or the whole training set (at most that).
int64_t ng__trainer_batch(const struct ng_trainer *t);

/* The set-up steps (runtime/trainer_setup.c), in the order ng_trainer_create runs them. */
/// The options a caller passed (NULL: none) over the defaults, into *o.
ng_status ng__trainer_merge_opts(ng_train_opts *o, const ng_train_opts *opts);
/// Checks the model against the dataset and the options' ranges (`for_link`: the last layer is
/// an embedding, not the classes), before anything is allocated.
ng_status ng__trainer_check_opts(const ng_train_opts *opts, ng_dataset_t ds, ng_model_t model,
                                 bool for_link);
/// The backend of opts->device, created into *out.
ng_status ng__trainer_make_backend(ng_backend **out, const ng_train_opts *o);
/// Worker threads: `workers`, or for 0 the usable cores (or the cpuset's) less one.
ng_status ng__trainer_resolve_workers(int *out, int workers, const char *cpuset);
ng_status ng__trainer_setup_normalized(struct ng_trainer *t, const ng_train_opts *opts);
ng_status ng__trainer_setup_device(struct ng_trainer *t, const ng_train_opts *opts);
ng_status ng__trainer_warm_gemms(struct ng_trainer *t);
ng_status ng__trainer_setup_sampler(struct ng_trainer *t, const ng_train_opts *opts);
void ng__trainer_drop_topology(const struct ng_trainer *t);
ng_status ng__trainer_setup_store(struct ng_trainer *t, const ng_train_opts *opts);
void ng__trainer_drop_hot_rows(const struct ng_trainer *t);
ng_status ng__trainer_setup_runtime(struct ng_trainer *t, const ng_train_opts *opts);

/// The memory estimate for `opts` (checked) into *out (runtime/trainer_memory.c), with backend
/// `be` for the hot tier's size (NULL: one is made for the question when it needs a device's
/// free memory).
ng_status ng__trainer_estimate(ng_memory_estimate *out, ng_dataset_t ds, const struct ng_model *m,
                               const ng_train_opts *opts, ng_backend *be);

#endif /* NG_TRAINER_STATE_IMPL_H */
