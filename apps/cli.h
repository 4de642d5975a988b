/* The `neargnn` command: the subcommand table, a strict option parser, progress display and the
 * output helpers every subcommand shares. Subcommands use only the public API (neargnn.h). */
#ifndef NG_CLI_H
#define NG_CLI_H

#include "neargnn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define CLI_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define CLI_PRINTF(fmt_idx, arg_idx)
#endif

/// Exit statuses of the command (sysexits-like, but the ones scripts actually test for).
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_RUNTIME = 1,       ///< the library reported an error
  CLI_EXIT_USAGE = 2,         ///< bad command line
  CLI_EXIT_INTERRUPTED = 130, ///< stopped by SIGINT (128 + 2, as shells report it)
};

/// Returned by cli_parse() when the command should go on (any other value is an exit status).
#define CLI_CONTINUE (-1)

/// One subcommand: `run` gets argv with argv[0] = the subcommand's name and returns the exit
/// status.
typedef struct {
  const char *name;
  const char *summary; ///< one line for `neargnn --help`
  int (*run)(int argc, char **argv);
} cli_command;

int cmd_generate(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_reorder(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_evaluate(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_split_edges(int argc, char **argv);
int cmd_train_hetero(int argc, char **argv);

/* ---- options (args.c) ---- */

typedef enum {
  CLI_FLAG,   ///< no value; dst is int, set to 1
  CLI_STRING, ///< dst is const char *, pointing into argv
  CLI_CHOICE, ///< dst is int or an enum: the index of the value in `choices`
  CLI_INT,    ///< dst is int32_t/int or int64_t (see `width`); decimal suffixes k, M, G, T
  CLI_UINT64, ///< dst is uint64_t; decimal suffixes k, M, G, T
  CLI_BYTES,  ///< dst is int64_t; binary suffixes K, M, G, T (optionally followed by B or iB)
  CLI_FLOAT,  ///< dst is double; finite
} cli_type;

/// An option `--name`. Build them with the CLI_OPT_* macros below.
typedef struct {
  const char *name;           ///< without the leading "--"
  cli_type type;              ///< how the value is parsed
  void *dst;                  ///< where the value goes; its value before parsing is the default
  size_t width;               ///< CLI_INT: sizeof *dst (4 or 8)
  const char *metavar;        ///< the value's placeholder in the usage text ("N", "DIR")
  const char *help;           ///< one line of help; NULL for a choice: its list of choices
  int64_t ilo, ihi;           ///< CLI_INT, CLI_BYTES: inclusive range
  double flo, fhi;            ///< CLI_FLOAT: range
  bool flo_open, fhi_open;    ///< CLI_FLOAT: the bound itself is excluded
  const char *const *choices; ///< CLI_CHOICE: NULL-terminated list of the accepted values
  const char *default_text;   ///< shown as the default instead of the value of *dst
  bool required;              ///< the command cannot run without it
  bool seen;                  ///< set by cli_parse() when the option was given
} cli_opt;

/* Each macro takes, after the help text, optional further designated initializers such as
 * `.required = true` or `.default_text = "..."`. */
#define CLI_OPT_FLAG(nm, ptr, hlp, ...)                                                            \
  { .name = (nm), .type = CLI_FLAG, .dst = (ptr), .help = (hlp), __VA_ARGS__ }
#define CLI_OPT_STRING(nm, ptr, meta, hlp, ...)                                                    \
  { .name = (nm), .type = CLI_STRING, .dst = (ptr), .metavar = (meta), .help = (hlp), __VA_ARGS__ }
/// A choice among `list`; `ptr` points to an int or an enum of int's size (a library option's
/// field), which a table entry of another size refuses to compile.
#define CLI_OPT_CHOICE(nm, ptr, meta, list, hlp, ...)                                              \
  {                                                                                                \
    .name = (nm), .type = CLI_CHOICE, .dst = (ptr), .width = CLI_INT_SIZED(ptr),                   \
    .metavar = (meta), .choices = (list), .help = (hlp), __VA_ARGS__                               \
  }
/// sizeof(int), or a compile error (an array of negative size) when *ptr is not that size.
#define CLI_INT_SIZED(ptr) sizeof(char[sizeof *(ptr) == sizeof(int) ? sizeof(int) : -1])
/// An integer option in [lo, hi]; the destination may be 32 or 64 bits wide.
#define CLI_OPT_INT(nm, ptr, meta, lo, hi, hlp, ...)                                               \
  {                                                                                                \
    .name = (nm), .type = CLI_INT, .dst = (ptr), .width = sizeof *(ptr), .metavar = (meta),        \
    .ilo = (lo), .ihi = (hi), .help = (hlp), __VA_ARGS__                                           \
  }
#define CLI_OPT_UINT64(nm, ptr, meta, hlp, ...)                                                    \
  { .name = (nm), .type = CLI_UINT64, .dst = (ptr), .metavar = (meta), .help = (hlp), __VA_ARGS__ }
/// A size in bytes, at least `lo`.
#define CLI_OPT_BYTES(nm, ptr, meta, lo, hlp, ...)                                                 \
  {                                                                                                \
    .name = (nm), .type = CLI_BYTES, .dst = (ptr), .metavar = (meta), .ilo = (lo),                 \
    .ihi = INT64_MAX, .help = (hlp), __VA_ARGS__                                                   \
  }
/// A float option in [lo, hi]; `lo_open`/`hi_open` exclude the bound itself.
#define CLI_OPT_FLOAT(nm, ptr, meta, lo, lo_open_, hi, hi_open_, hlp, ...)                         \
  {                                                                                                \
    .name = (nm), .type = CLI_FLOAT, .dst = (ptr), .metavar = (meta), .flo = (lo),                 \
    .flo_open = (lo_open_), .fhi = (hi), .fhi_open = (hi_open_), .help = (hlp), __VA_ARGS__        \
  }
/// The --progress option of long-running commands; `ptr` is an int holding a cli_progress_mode.
#define CLI_OPT_PROGRESS(ptr)                                                                      \
  CLI_OPT_CHOICE("progress", ptr, "WHEN", CLI_PROGRESS_MODES,                                      \
                 "progress on stderr: auto (a redrawn line on a terminal, else plain lines), "     \
                 "plain or none", )

#define CLI_MAX_POSITIONAL 4

/// Everything a subcommand's command line accepts, and its help text.
typedef struct {
  const char *command;    ///< "generate"
  const char *synopsis;   ///< what follows the command name in the usage line
  const char *about;      ///< a paragraph saying what the command does
  cli_opt *opts;          ///< the options (their `seen` fields are written)
  size_t n_opts;          ///< entries of `opts`
  const char *positional; ///< the positional arguments' placeholder ("DIR"), NULL for none
  int min_positional, max_positional;
  const char *notes;                   ///< optional paragraph after the options
  const char *example;                 ///< one example command line (or several, one per line)
  const char *pos[CLI_MAX_POSITIONAL]; ///< the positional arguments, after cli_parse()
  int n_pos;                           ///< how many
} cli_spec;

/// Parses argv[1..argc) (argv[0] is the subcommand's name) into the options' destinations.
/// Long options take `--name value` or `--name=value`; `--` ends the options; `-h`/`--help`
/// prints the help to stdout. Returns CLI_CONTINUE when the command should run, else the exit
/// status (0 after --help, CLI_EXIT_USAGE after a usage error it has printed).
int cli_parse(cli_spec *spec, int argc, char **argv);
/// Prints the command's help (usage, options with defaults, example) to `out`.
void cli_print_help(const cli_spec *spec, FILE *out);
/// Looks an option up by name (for checks across options after parsing); NULL when absent.
const cli_opt *cli_find_opt(const cli_spec *spec, const char *name);
/// Prints "neargnn CMD: <message>" and the hint to see the help, to stderr; returns
/// CLI_EXIT_USAGE. `command` NULL means the top level.
int cli_usage_error(const char *command, const char *fmt, ...) CLI_PRINTF(2, 3);
/// Reports a failed library call: "neargnn: error: <status>: <detail>" to stderr. Returns
/// CLI_EXIT_RUNTIME, or CLI_EXIT_INTERRUPTED for NG_ERR_INTERRUPTED.
int cli_runtime_error(ng_status status);
/// Whether this process is a rank started by a launcher (neargnn's --ranks, or mpirun).
bool cli_launched_rank(void);
/// The values of --check-features on commands that open a dataset: how open looks for NaN and
/// infinity in the features (a sample of rows, or every row).
extern const char *const CLI_CHECK_FEATURES_NAMES[];
#define CLI_OPT_CHECK_FEATURES(ptr)                                                                \
  CLI_OPT_CHOICE("check-features", ptr, "HOW", CLI_CHECK_FEATURES_NAMES,                           \
                 "NaN/Inf check of the features on open: sample (4098 rows spread over the "       \
                 "table) or full (every row; reads the whole table)")
/// Opens the dataset folder `dir` with the --check-features choice `check` (an index of
/// CLI_CHECK_FEATURES_NAMES).
ng_status cli_dataset_open(ng_dataset_t *out, const char *dir, int check);
/// Runs `ranks` copies of `neargnn ARGV...` (argv[0] is the command) on this host as the ranks of
/// one data-parallel run (apps/launch.c); returns the first failing rank's exit status, or 0.
int cli_launch(const char *command, int argc, char **argv, int ranks);
/// As cli_runtime_error, with the detail given instead of ng_last_error() (an earlier failure's
/// message, kept while a later call overwrote the thread's last error).
int cli_runtime_error_detail(ng_status status, const char *detail);
/// The one of the `n` candidates closest to `word` within a small edit distance, or NULL: for
/// "did you mean ...?" hints.
const char *cli_suggest(const char *word, const char *const *candidates, size_t n);

/* ---- the options of a model, shared by train, demo, embed and serve (model_opts.c) ---- */

#define CLI_MAX_LAYERS 8

/// What the command line says about a model: its shape. How its input features are normalised
/// (training and serving must agree on it too) goes straight into the command's library options
/// (ng_train_opts.normalize, ng_engine_opts.normalize): see CLI_MODEL_OPTS.
typedef struct {
  const char *fanouts;      ///< "25,10": hop 1 first (neighbours of the targets), then hop 2
  const char *weight_decay; ///< one value for every layer, or one per layer (input layer first)
  int model, aggregator, combine;
  int64_t hidden;
  double dropout;
  int64_t heads, output_heads; ///< GAT: heads of the hidden layers (concatenated), of the output
  double attn_dropout;         ///< GAT: dropout on the attention coefficients
} cli_model_cfg;

/// The most choices of an option over a library enum.
#define CLI_MAX_CHOICES 15
/// The choices of the options over the library's enums, NULL-terminated and in the enum's order
/// (a choice's index is its value), read from the library's name functions (ng_model_name, ...)
/// so that the command repeats none of its names. cli_aggregator_names() is "auto", then the
/// built-ins (ng_aggregator_builtin_name); cli_transfer_names() names NG_FETCH_PARTIAL "-" (no
/// transfer way).
const char *const *cli_model_names(void);
const char *const *cli_aggregator_names(void);
const char *const *cli_normalize_names(void);
const char *const *cli_optimizer_names(void);
const char *const *cli_mode_names(void);
const char *const *cli_transfer_names(void);
const char *const *cli_cache_placement_names(void);
const char *const *cli_cold_fetch_names(void);
extern const char *const CLI_COMBINE_NAMES[];

/// The options of a cli_model_cfg `c` (a pointer), for a command's option table, with
/// --normalize-features into `norm` (an ng_normalize *: the library options' own field).
// clang-format off
#define CLI_MODEL_OPTS(c, norm)                                                                    \
  CLI_OPT_CHOICE("model", &(c)->model, "M", cli_model_names(), NULL),                              \
      CLI_OPT_STRING("fanouts", &(c)->fanouts, "LIST",                                             \
                     "neighbours sampled per hop, from the targets outwards (25,10: 25 of each "   \
                     "target, then 10 of each of those, as PyG's num_neighbors); the output "      \
                     "layer takes the first value; -1 = all; one value per layer"),                \
      CLI_OPT_INT("hidden", &(c)->hidden, "H", 1, INT32_MAX, "hidden layer width"),                \
      CLI_OPT_CHOICE("aggregator", &(c)->aggregator, "A", cli_aggregator_names(),                  \
                     "neighbour aggregator; auto = mean for sage, gcn for gcn"),                   \
      CLI_OPT_CHOICE("combine", &(c)->combine, "C", CLI_COMBINE_NAMES,                                 \
                     "GraphSAGE: sum (h Ws + agg Wn) or concat ([h Ws || agg Wn])"),               \
      CLI_OPT_FLOAT("dropout", &(c)->dropout, "P", 0, false, 1, true,                              \
                    "dropout on every layer's input in training"),                                 \
      CLI_OPT_STRING("weight-decay", &(c)->weight_decay, "LIST",                                   \
                     "L2 coefficient: one value, or one per layer from the input (5e-4,0)"),       \
      CLI_OPT_CHOICE("normalize-features", (norm), "N", cli_normalize_names(),            \
                     "none, or row: divide each feature row by its sum (Kipf & Welling)"),         \
      CLI_OPT_INT("heads", &(c)->heads, "K", 1, 1024,                                              \
                  "GAT: attention heads of each hidden layer, concatenated (hidden layers have "   \
                  "heads x hidden columns)", .default_text = "8"),                                 \
      CLI_OPT_INT("output-heads", &(c)->output_heads, "K", 1, 1024,                                \
                  "GAT: attention heads of the output layer, averaged", .default_text = "1"),      \
      CLI_OPT_FLOAT("attn-dropout", &(c)->attn_dropout, "P", 0, false, 1, true,                    \
                    "GAT: dropout on the attention coefficients in training")
// clang-format on

/// Parses a comma-separated list of at most CLI_MAX_LAYERS numbers into out[*n] for --`option`;
/// returns CLI_CONTINUE, or CLI_EXIT_USAGE after printing the error.
int cli_parse_list(const char *command, const char *option, const char *text, double *out, int *n);
/// --fanouts TEXT (hops from the targets out, -1: all; 0 only when `zero_ok`) into `blocks` in
/// block order (block 0, the input layer, first) and their count into *layers.
int cli_parse_fanouts(const char *command, const char *text, bool zero_ok, int32_t *blocks,
                      int *layers);
/// Builds the model the options describe for a dataset of `info`'s shape; returns CLI_CONTINUE
/// with *out set, or an exit status after printing the error.
int cli_build_model(ng_model_t *out, const char *command, const cli_model_cfg *c,
                    const ng_dataset_info *info);
/// The model and normalisation `embed` and `serve` run: the checkpoint's (its description),
/// with each model option given on the command line (`spec`'s seen ones) in place of its
/// setting (*normalize holds --normalize-features' value on entry, and keeps it when given), so
/// that loading the weights refuses an option that differs, naming it and both values. A checkpoint
/// that describes no model (format version 1) is built from the options. Returns CLI_CONTINUE with
/// *out and *normalize set, or an exit status after printing the error.
int cli_model_for_checkpoint(ng_model_t *out, ng_normalize *normalize, const char *command,
                             const cli_spec *spec, const cli_model_cfg *c, const char *checkpoint,
                             const ng_dataset_info *info);
/// Shows "the checkpoint's" as the default of the model options among `opts` (for `embed` and
/// `serve`, whose model comes from the checkpoint).
void cli_model_opts_from_checkpoint(cli_opt *opts, size_t n);

/* ---- training (cmd_train.c): what train, demo (cmd_demo.c) and embed (cmd_embed.c) share ---- */

/// The choices of training options that have no library name table, in their enum's order;
/// CLI_SAMPLER_NAMES calls the device sampler "gpu" (its name on the cuda device).
extern const char *const CLI_FEATURES_MEMORY_NAMES[];
extern const char *const CLI_PRECISION_NAMES[];
extern const char *const CLI_SAMPLER_NAMES[];

/// What `train`, `demo` and `embed` are told: the library's options, which the option table binds
/// directly (their defaults are NG_TRAIN_OPTS_INIT's), and what only the command reads.
typedef struct {
  ng_train_opts o;   ///< --normalize-features and every runtime option; o.comm: the ranks
  cli_model_cfg net; ///< the model's shape
  int64_t epochs, eval_every;
  double dram_gbs; ///< the host's DRAM read rate for the scaling floor; 0: from cache_bench
  double join_s;   ///< joining the ranks (ng_comm_create), seconds
} cli_train_cfg;

/* The options of the model and the training, shared by train, demo and embed, bound to the
 * fields of the cli_train_cfg `c` (a pointer). */
// clang-format off
#define CLI_TRAIN_OPTS(c)                                                                           \
  CLI_MODEL_OPTS(&(c)->net, &(c)->o.normalize),                                                                       \
      CLI_OPT_INT("epochs", &(c)->epochs, "N", 1, INT32_MAX, "epochs to train"),                   \
      CLI_OPT_INT("batch", &(c)->o.batch, "B", 0, INT32_MAX,                                         \
                  "target nodes per mini-batch; 0 = the whole training split"),                    \
      CLI_OPT_FLOAT("lr", &(c)->o.lr, "F", 0, true, INFINITY, false, "learning rate"),               \
      CLI_OPT_CHOICE("optimizer", &(c)->o.optimizer, "O", cli_optimizer_names(), NULL),                   \
      CLI_OPT_FLOAT("momentum", &(c)->o.momentum, "F", 0, false, 1, true, "SGD momentum"),           \
      CLI_OPT_INT("eval-every", &(c)->eval_every, "N", 0, INT32_MAX,                               \
                  "validation accuracy every N epochs (full-neighbour inference); 0 = only at "    \
                  "the end"),                                                                      \
      CLI_OPT_UINT64("seed", &(c)->o.seed, "S",                                                      \
                     "random seed: same seed, same losses bit for bit, whatever --threads"),       \
      CLI_OPT_INT("threads", &(c)->o.threads, "T", 0, 4096,                                          \
                  "CPU threads; 0 = OMP_NUM_THREADS or all"),                                      \
      CLI_OPT_STRING("device", &(c)->o.device, "DEV",                                                \
                     "cpu, or cuda in a build with the CUDA backend"),                             \
      CLI_OPT_CHOICE(                                                                              \
          "mode", &(c)->o.mode, "M", cli_mode_names(),                                                     \
          "who fetches cold feature rows and how: cpu, baseline (batched DMA), "                   \
          "zerocopy, partial (CPU aggregation), hybrid-static or hybrid; auto = hybrid "           \
          "on cuda, cpu on cpu"),                                                                  \
      CLI_OPT_INT("workers", &(c)->o.workers, "N", -1, 4096,                                         \
                  "worker threads (one per core); 0 = all allowed cores but the device "           \
                  "thread's; -1 = none (host work between device steps)"),                         \
      CLI_OPT_STRING("cpuset", &(c)->o.cpuset, "LIST", "cores for the threads, e.g. 0-15"),          \
      CLI_OPT_CHOICE("transfer", &(c)->o.transfer, "T", cli_transfer_names(),                              \
                     "hybrid modes: the TRANSFER group's way, batch, zcopy or auto (zcopy for "    \
                     "rows >= 512 B)"),                                                            \
      CLI_OPT_INT("partial-workers", &(c)->o.partial_workers, "N", -1, 4096,                         \
                  "hybrid-static: PARTIAL workers; hybrid: at the start; -1 = half"),              \
      CLI_OPT_FLOAT("device-share", &(c)->o.device_share, "F", 0, false, 1, false,                   \
                    "hybrid-static with zcopy and rows >= 2 KB: share of PARTIAL destinations "    \
                    "whose cold rows the GPU reads and reduces (32nds; hybrid picks it)"),    \
      CLI_OPT_FLOAT("period-ms", &(c)->o.period_ms, "MS", 0, true, INFINITY, false,                  \
                    "hybrid: how often the scheduler compares the groups"),                        \
      CLI_OPT_FLOAT("threshold", &(c)->o.threshold, "F", 0, false, INFINITY, false,                  \
                    "hybrid: relative throughput difference that moves a worker"),                 \
      CLI_OPT_FLOAT("telemetry-s", &(c)->o.telemetry_s, "S", 0, true, INFINITY, false,               \
                    "--telemetry: seconds per line"),                                              \
      CLI_OPT_CHOICE("features-memory", &(c)->o.features_memory, "M", CLI_FEATURES_MEMORY_NAMES,         \
                     "the host's feature table: mapped (the dataset's file, read in place), "      \
                     "copy (into huge pages: faster random reads, counted twice in the memory "    \
                     "estimate); auto = mapped"),                                                  \
      CLI_OPT_INT("lookahead", &(c)->o.lookahead, "N", 1, 3,                                         \
                  "packages copied to the device ahead of the one it computes (1 = double "       \
                  "buffering)"),                                                                   \
      CLI_OPT_INT("ready-window", &(c)->o.ready_window, "N", 0, NG_READY_WINDOW_MAX,                 \
                  "iterations the workers may have ready ahead of the device; 0 = 4 x "            \
                  "workers (at least 4)"),                                                         \
      CLI_OPT_CHOICE("precision", &(c)->o.precision, "P", CLI_PRECISION_NAMES,                           \
                     "fp32; tf32 (tensor-core products, cuda only); or bf16: features stored "    \
                     "in bf16 (half the host, PCIe and hot-tier bytes; features.bf16.npy is "     \
                     "written beside the dataset on first use), fp32 products; all accumulate "   \
                     "in fp32"),                                                                   \
      CLI_OPT_CHOICE("sampler", &(c)->o.sampler, "S", CLI_SAMPLER_NAMES,                                 \
                     "who samples the blocks: the workers (cpu), the device (gpu; the workers "    \
                     "then only fetch), or auto: gpu when the topology fits in a quarter of its "  \
                     "free memory; the blocks are the same either way"),                          \
      CLI_OPT_INT("op-profile", &(c)->o.op_profile_every, "N", 0, INT32_MAX,                               \
                  "time every op of the device step on one iteration in N (device events) and "    \
                  "print the table at the end; 0 = off"),                                          \
      CLI_OPT_BYTES("max-host-memory", &(c)->o.max_host_memory, "SIZE", 0,                           \
                    "refuse a configuration whose host memory estimate (printed at the start, "    \
                    "docs/memory.md) exceeds SIZE, e.g. 60G; 0 = no limit"),                       \
      CLI_OPT_BYTES("infer-host-memory", &(c)->o.infer_host_bytes, "SIZE", 0,                        \
                    "inference keeps a layer's outputs up to SIZE in memory, larger ones in a "    \
                    "memory-mapped temporary file; 0 = 1G"),                                       \
      CLI_OPT_STRING("temp-dir", &(c)->o.temp_dir, "DIR",                                            \
                     "folder of inference's temporary files", .default_text = "$TMPDIR or /tmp"),  \
      CLI_OPT_INT("eval-chunk", &(c)->o.eval_chunk, "N", 0, INT32_MAX / 2,                           \
                  "nodes per chunk in layer-wise full-neighbour inference; 0 = per layer: "        \
                  "65536 where the GPU reads the layer's input rows itself, else 4096"),           \
      CLI_OPT_BYTES("gpu-cache-bytes", &(c)->o.cache_bytes, "SIZE", 0,                               \
                    "device memory for hot feature rows [0, H), e.g. 8G; 0 = --cache-ratio or "    \
                    "auto"),                                                                       \
      CLI_OPT_FLOAT("cache-ratio", &(c)->o.cache_ratio, "R", 0, false, 1, false,                     \
                    "hot rows as a share of the nodes",                                            \
                    .default_text = "what fits in half the free device memory; all on cpu"),       \
      CLI_OPT_CHOICE("cache-placement", &(c)->o.cache_placement, "P", cli_cache_placement_names(),         \
                     "several GPUs of one host: replicated (each caches rows [0, H)), "            \
                     "partitioned (together rows [0, R x H), peers' rows read over NVLink/P2P), " \
                     "or auto (partitioned when it serves markedly more reads and peer copies "   \
                     "beat 2 x H2D; docs/distributed.md)"),                                        \
      CLI_OPT_STRING("cache-bench", &(c)->o.cache_bench, "FILE",                                     \
                     "--cache-placement auto: peer_gbs and h2d_gbs from this bench_floor --json "  \
                     "file instead of a start-up measurement; its cpu_alone_gbs is the floor's "   \
                     "host DRAM rate"),                                                            \
      CLI_OPT_CHOICE("cold-fetch", &(c)->o.cold_fetch, "F", cli_cold_fetch_names(),                        \
                     "several ranks of one host: own (each reads its cold rows) or cooperative "   \
                     "(each row read once for the host by its owner rank and sent to the ranks "   \
                     "that need it; docs/distributed.md)"),                                        \
      CLI_OPT_FLOAT("dram-gbs", &(c)->dram_gbs, "GBS", 0, false, INFINITY, false,                  \
                    "the host's DRAM read rate for the scaling floor of the report",               \
                    .default_text = "--cache-bench's cpu_alone_gbs, else no floor")
// clang-format on

/* The files a training run reads or writes besides the dataset; NULL: none. */
typedef struct {
  const char *checkpoint, *resume, *json, *predictions, *telemetry, *trace;
  /* --checkpoint-every: after this many iterations, or seconds of training (0: never). */
  int64_t every_iters;
  double every_s;
} cli_train_files;
/// Trains `c->epochs` epochs of `m` on `ds` and evaluates, printing the run and writing `files`
/// (progress: a cli_progress_mode); the shared core of train and demo. Returns the exit status.
int cli_run_training(ng_dataset_t ds, ng_model_t m, const cli_train_cfg *c, const char *command,
                     int progress, const cli_train_files *files);

/* ---- link prediction (cmd_link.c) ---- */

extern const char *const CLI_TASK_NAMES[];
const char *const *cli_link_decoder_names(void);
const char *const *cli_link_neg_names(void);
/// The relational models (ng_hetero_model_name): train-hetero's --model.
const char *const *cli_hetero_model_names(void);

/// What `train --task link` adds to the training options.
typedef struct {
  int task;            ///< 0 node classification, 1 link prediction
  int decoder, neg;    ///< an ng_link_decoder, an ng_link_neg
  int32_t neg_per_pos; ///< training negatives per positive
  int64_t embed_dim;   ///< the last layer's width (0: --hidden)
  int self_pairs;      ///< --self-pairs
  int64_t epoch_iters; ///< --epoch-iters: mini-batches per epoch at most (0: all)
} cli_link_cfg;

// clang-format off
#define CLI_LINK_OPTS(l)                                                                           \
  CLI_OPT_CHOICE("task", &(l)->task, "T", CLI_TASK_NAMES,                                          \
                 "node (classification) or link (prediction on DIR/links from split-edges; the "   \
                 "last layer is the --embed-dim wide embedding, --batch counts positive edges)"),  \
      CLI_OPT_CHOICE("decoder", &(l)->decoder, "D", cli_link_decoder_names(),                             \
                     "--task link: dot, or mlp over h_u * h_v"),                                   \
      CLI_OPT_CHOICE("neg", &(l)->neg, "N", cli_link_neg_names(),                                         \
                     "--task link: negatives uniform (both ends), or the source kept and the "     \
                     "destination by degree^0.75"),                         \
      CLI_OPT_INT("neg-per-pos", &(l)->neg_per_pos, "K", 1, 1024,                                  \
                  "--task link: training negatives per positive edge"),                            \
      CLI_OPT_INT("embed-dim", &(l)->embed_dim, "D", 0, INT32_MAX,                                 \
                  "--task link: the embedding's width, the last layer's (0: --hidden)"),          \
      CLI_OPT_FLAG("self-pairs", &(l)->self_pairs,                                                 \
                   "--task link: each node paired with itself is a positive too (GAE's A + I)"),  \
      CLI_OPT_INT("epoch-iters", &(l)->epoch_iters, "N", 0, INT64_MAX,                             \
                  "--task link: at most N mini-batches per epoch (0: every training edge)")
// clang-format on

/// Trains `m` for link prediction on `ds` for `epochs` epochs, with validation metrics every
/// `eval_every` epochs and the test metrics at the end (printed; also into `json` when set), then
/// writes the link checkpoint `checkpoint` when set (ng_link_trainer_save). Returns the exit
/// status.
int cli_train_link(ng_dataset_t ds, ng_model_t m, const ng_train_opts *o, const cli_link_cfg *l,
                   int64_t epochs, int64_t eval_every, const char *json, const char *checkpoint);

/* ---- progress (progress.c) ---- */

/// Values of the --progress option, in the order of CLI_PROGRESS_MODES.
typedef enum {
  CLI_PROGRESS_AUTO = 0,
  CLI_PROGRESS_PLAIN = 1,
  CLI_PROGRESS_NONE = 2
} cli_progress_mode;
extern const char *const CLI_PROGRESS_MODES[];

/// Progress display of one long operation, and the SIGINT handler that stops it cleanly.
typedef struct {
  const char *what;   ///< the subcommand's name, printed before each progress line
  int style;          ///< what is shown: redrawn line, plain lines or nothing
  double start;       ///< when the operation began (cli_now())
  double last_draw;   ///< when a line was last printed or redrawn (0 before the first)
  char phase[48];     ///< the current phase, to notice a new one
  double phase_start; ///< when the current phase first reported
  double phase_done0; ///< what it had done then
  size_t drawn;       ///< terminal: columns of the line on screen (0 when none)
  bool printed;       ///< anything was shown
  bool handler_installed;
} cli_progress;

/// Starts showing progress on stderr per `mode` and installs the SIGINT handler (unless SIGINT is
/// ignored, as in background jobs of non-interactive shells).
void cli_progress_begin(cli_progress *p, const char *what, cli_progress_mode mode);
/// The ng_progress_fn to pass to the library with the cli_progress as its context. Shows nothing
/// during the first second; returns non-zero once SIGINT arrived, so the library stops.
int cli_progress_cb(void *ctx, const char *phase, double done, double total);
/// Clears a redrawn progress line (on a terminal) so that the caller can print results between
/// phases of one long operation; the SIGINT handler stays.
void cli_progress_clear(cli_progress *p);
/// True once SIGINT arrived during the operation (also between library calls).
bool cli_progress_interrupted(void);
/// Ends the display (clears the terminal line, or after plain lines prints one saying how the
/// operation, whose result is `status`, ended) and restores SIGINT.
void cli_progress_end(cli_progress *p, ng_status status);

/* ---- formatting (format.c) ---- */

/// Monotonic time in seconds.
double cli_now(void);
/// cli_now() when main() began: the start of the whole run's figures.
double cli_start_time(void);
/// "14.8 MiB" (powers of 1024, 3 significant digits).
void cli_fmt_bytes(char *buf, size_t cap, double bytes);
/// "12.3M" (powers of 1000, 3 significant digits).
void cli_fmt_count(char *buf, size_t cap, double count);
/// "45 s", "3 min 05 s", "2 h 07 min".
void cli_fmt_duration(char *buf, size_t cap, double seconds);

#endif /* NG_CLI_H */
