/* Dataset subcommands: `generate`, `convert` and `info`. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))
#define FEATURE_BYTES 4      /* features are float32 */
#define LABEL_BYTES 4        /* labels are int32 */
#define INDPTR_BYTES 8       /* indptr and split ids are int64 */
#define SPLIT_SUM_SLACK 1e-9 /* 0.7 + 0.1 + 0.2 may exceed 1 in binary */

/// The GPU feature caches `info` sizes, as fractions of the nodes.
static const double CACHE_FRACTIONS[] = {0.05, 0.10, 0.25};

/* ---- shared by generate and convert ---- */

/* A failed generate/convert: the library leaves nothing behind, which the message repeats. */
static int write_failed(ng_status st, const char *out) {
  if (st == NG_ERR_INTERRUPTED) {
    fprintf(stderr, "neargnn: interrupted; %s was not created\n", out);
    return CLI_EXIT_INTERRUPTED;
  }
  return cli_runtime_error(st);
}

/* Sums the sizes of the regular files in `dir` (a dataset folder is flat). */
static int dir_bytes(const char *dir, int64_t *out) {
  DIR *d = opendir(dir);
  if (!d)
    return errno;
  int64_t sum = 0;
  struct dirent *e;
  struct stat st;
  while ((e = readdir(d)))
    if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
      sum += (int64_t)st.st_size;
  closedir(d);
  *out = sum;
  return 0;
}

/* The lines both print_written and print_written_hetero end with: classes, splits, bytes on disk
 * and time. */
static void print_written_tail(const char *out, int32_t classes, int64_t train, int64_t val,
                               int64_t test, double seconds) {
  printf("%-10s %" PRId32 "\n", "classes", classes);
  printf("%-10s train %" PRId64 ", val %" PRId64 ", test %" PRId64 "\n", "splits", train, val,
         test);
  int64_t bytes = 0;
  int err = dir_bytes(out, &bytes);
  char human[32];
  cli_fmt_bytes(human, sizeof human, (double)bytes);
  if (err)
    printf("%-10s unknown (cannot list %s: %s)\n", "bytes", out, strerror(err));
  else
    printf("%-10s %" PRId64 " (%s)\n", "bytes", bytes, human);
  printf("%-10s %.3f\n", "seconds", seconds);
}

/* Prints what generate/convert wrote: counts read back from the new dataset (which also checks
 * it), bytes on disk, time and rate. */
static int print_written(const char *verb, const char *out, double seconds) {
  ng_dataset_t ds = NULL;
  ng_status st = ng_dataset_open(&ds, out, NULL);
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  if (st == NG_OK)
    st = ng_dataset_info_get(&info, ds);
  ng_dataset_close(ds);
  if (st != NG_OK)
    return cli_runtime_error(st);
  printf("%-10s %s\n", verb, out);
  printf("%-10s %s\n", "name", info.name);
  printf("%-10s %" PRId64 "\n", "nodes", info.nodes);
  printf("%-10s %" PRId64 "\n", "edges", info.edges);
  printf("%-10s %" PRId64 "\n", "features", info.feature_dim);
  print_written_tail(out, info.classes, info.train, info.val, info.test, seconds);
  printf("%-10s %.0f\n", "edges/s", seconds > 0 ? (double)info.edges / seconds : 0.0);
  return CLI_EXIT_OK;
}

/* The three split shares must leave room for each other. */
static int check_split_sum(const char *command, double train, double val, double test) {
  if (train + val + test > 1.0 + SPLIT_SUM_SLACK)
    return cli_usage_error(command,
                           "--train %g + --val %g + --test %g = %g; the shares must add up to "
                           "at most 1",
                           train, val, test, train + val + test);
  return CLI_CONTINUE;
}

/* ---- generate ---- */

/* What generate --hetero wrote: per node type and per relation, read back from the dataset. */
static int print_written_hetero(const char *verb, const char *out, double seconds) {
  ng_hetero_t ds = NULL;
  ng_status st = ng_hetero_open(&ds, out, NULL);
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  if (st == NG_OK)
    st = ng_hetero_info_get(&info, ds);
  if (st != NG_OK) {
    ng_hetero_close(ds);
    return cli_runtime_error(st);
  }
  printf("%-10s %s\n", verb, out);
  printf("%-10s %s\n", "name", info.name);
  printf("%-10s %" PRId64 "\n", "nodes", info.nodes);
  printf("%-10s %" PRId64 "\n", "edges", info.edges);
  for (int32_t t = 0; t < info.node_types && st == NG_OK; t++) {
    ng_node_type_info nt = NG_NODE_TYPE_INFO_INIT;
    st = ng_hetero_node_type(&nt, ds, t);
    printf("%-10s %s: %" PRId64 " nodes, %" PRId64 " features%s\n", "type", nt.name, nt.count,
           nt.feature_dim, t == info.target ? " (target)" : "");
  }
  for (int32_t r = 0; r < info.edge_types && st == NG_OK; r++) {
    ng_edge_type_info et = NG_EDGE_TYPE_INFO_INIT;
    ng_node_type_info src = NG_NODE_TYPE_INFO_INIT, dst = NG_NODE_TYPE_INFO_INIT;
    st = ng_hetero_edge_type(&et, ds, r);
    if (st == NG_OK)
      st = ng_hetero_node_type(&src, ds, et.src_type);
    if (st == NG_OK)
      st = ng_hetero_node_type(&dst, ds, et.dst_type);
    if (st == NG_OK)
      printf("%-10s (%s, %s, %s): %" PRId64 " edges\n", "relation", src.name, et.relation, dst.name,
             et.edges);
  }
  ng_hetero_close(ds);
  if (st != NG_OK)
    return cli_runtime_error(st);
  print_written_tail(out, info.classes, info.train, info.val, info.test, seconds);
  return CLI_EXIT_OK;
}

static const cli_opt *find_opt(const cli_opt *opts, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(opts[i].name, name) == 0)
      return &opts[i];
  return NULL;
}

/* generate --hetero SHAPE: a preset's (or custom) types and relations, --types and --relations
 * replacing the preset's; the options shared with the homogeneous generator keep their meaning. */
static int generate_hetero(const cli_spec *spec, const char *shape, const char *out,
                           const ng_generate_opts *o, const char *types, const char *relations,
                           const char *target, double scale, int progress) {
  static const char *const HOMOGENEOUS_ONLY[] = {"nodes", "avg-degree", "exponent", "dim"};
  for (size_t i = 0; i < N_OPTS(HOMOGENEOUS_ONLY); i++)
    if (find_opt(spec->opts, spec->n_opts, HOMOGENEOUS_ONLY[i])->seen)
      return cli_usage_error(spec->command,
                             "--%s applies to homogeneous graphs; with --hetero give counts, "
                             "dimensions and degrees in --types and --relations",
                             HOMOGENEOUS_ONLY[i]);
  ng_hetero_generate_opts h = NG_HETERO_GENERATE_OPTS_INIT;
  if (strcmp(shape, "custom") == 0) {
    if (!types || !relations)
      return cli_usage_error(spec->command,
                             "--hetero custom needs --types and --relations (or use --hetero mag "
                             "or igbh)");
  } else if (ng_hetero_preset(&h.types, &h.relations, &h.target, shape) != NG_OK) {
    return cli_usage_error(spec->command, "--hetero %s: the shapes are mag, igbh and custom",
                           shape);
  }
  if (types)
    h.types = types;
  if (relations)
    h.relations = relations;
  if (target)
    h.target = target;
  else if (types)
    h.target = NULL; /* the first of the types given */
  h.scale = scale;
  h.name = o->name ? o->name : "generated-hetero";
  if (find_opt(spec->opts, spec->n_opts, "classes")->seen)
    h.classes = o->classes;
  if (find_opt(spec->opts, spec->n_opts, "homophily")->seen)
    h.homophily = o->homophily;
  if (find_opt(spec->opts, spec->n_opts, "noise")->seen)
    h.feature_noise = o->feature_noise;
  h.train_frac = o->train_frac;
  h.val_frac = o->val_frac;
  h.test_frac = o->test_frac;
  h.seed = o->seed;
  h.threads = o->threads;
  cli_progress pr;
  cli_progress_begin(&pr, spec->command, (cli_progress_mode)progress);
  h.progress = cli_progress_cb;
  h.progress_ctx = &pr;
  double t0 = cli_now();
  ng_status st = ng_hetero_generate(out, &h);
  double seconds = cli_now() - t0;
  cli_progress_end(&pr, st);
  if (st == NG_ERR_INVALID_ARG)
    return cli_usage_error(spec->command, "%s", ng_last_error());
  if (st != NG_OK)
    return write_failed(st, out);
  return print_written_hetero("generated", out, seconds);
}

int cmd_generate(int argc, char **argv) {
  ng_generate_opts o = NG_GENERATE_OPTS_INIT;
  const char *out = NULL;
  int progress = CLI_PROGRESS_AUTO;
  const char *hetero = NULL, *types = NULL, *relations = NULL, *target = NULL;
  double scale = 1.0;
  int links = 0;
  ng_generate_links_opts lo = NG_GENERATE_LINKS_OPTS_INIT;
  cli_opt opts[] = {
      CLI_OPT_STRING("out", &out, "DIR", "output folder; must not exist", .required = true),
      CLI_OPT_INT("nodes", &o.nodes, "N", 2, INT64_MAX,
                  "number of nodes; suffixes k, M, G as in 10M"),
      CLI_OPT_FLOAT("avg-degree", &o.avg_degree, "F", 0, true, INFINITY, false,
                    "mean number of neighbours per node"),
      CLI_OPT_FLOAT("exponent", &o.exponent, "F", 2, true, INFINITY, false,
                    "power-law exponent of the degrees, > 2"),
      CLI_OPT_INT("classes", &o.classes, "C", 1, INT32_MAX, "number of classes"),
      CLI_OPT_FLOAT("homophily", &o.homophily, "F", 0, false, 1, false,
                    "share of edges within a class, 0 to 1"),
      CLI_OPT_INT("dim", &o.feature_dim, "D", 0, INT64_MAX, "feature columns, 0 for none"),
      CLI_OPT_FLOAT("noise", &o.feature_noise, "F", 0, false, INFINITY, false,
                    "noise (standard deviation) around each class's mean feature"),
      CLI_OPT_FLOAT("train", &o.train_frac, "F", 0, false, 1, false,
                    "share of nodes in the training split"),
      CLI_OPT_FLOAT("val", &o.val_frac, "F", 0, false, 1, false,
                    "share of nodes in the validation split"),
      CLI_OPT_FLOAT("test", &o.test_frac, "F", 0, false, 1, false,
                    "share of nodes in the test split"),
      CLI_OPT_UINT64("seed", &o.seed, "S", "random seed; the output does not depend on --threads"),
      CLI_OPT_INT("threads", &o.threads, "T", 0, INT32_MAX,
                  "threads; 0: OMP_NUM_THREADS or every core"),
      CLI_OPT_STRING("name", &o.name, "NAME", "dataset name written to dataset.json",
                     .default_text = "generated"),
      CLI_OPT_STRING("hetero", &hetero, "SHAPE",
                     "a heterogeneous graph: mag, igbh (presets) or custom "
                     "(docs/heterogeneous.md)"),
      CLI_OPT_STRING("types", &types, "LIST",
                     "--hetero: node types NAME:COUNT:DIM,... (replaces the preset's)"),
      CLI_OPT_STRING("relations", &relations, "LIST",
                     "--hetero: relations SRC:RELATION:DST:DEGREE,... (DEGREE: mean entries "
                     "per DST node; replaces the preset's)"),
      CLI_OPT_STRING("target", &target, "TYPE",
                     "--hetero: the labelled node type (default: paper for the presets, else the "
                     "first type)"),
      CLI_OPT_FLOAT("scale", &scale, "F", 0, true, INFINITY, false,
                    "--hetero: multiplies every type's COUNT"),
      CLI_OPT_FLAG("links", &links,
                   "for link prediction: planted communities shape the edges and the features "
                   "(docs/generate.md#links)"),
      CLI_OPT_INT("communities", &lo.communities, "K", 0, INT32_MAX,
                  "--links: communities; 0: about one per 256 nodes"),
      CLI_OPT_PROGRESS(&progress),
  };
  cli_spec spec = {
      .command = "generate",
      .synopsis = "--out DIR [options]",
      .about = "Generates a synthetic dataset: a degree-corrected power-law graph whose node "
               "classes correlate with its edges (homophily) and with its features, so that a GNN "
               "can learn it and a hot set of high-degree nodes exists. The folder is written "
               "atomically: it appears only when complete.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .notes = "Prints a summary (nodes, edges, bytes written, seconds, edges/s) on stdout. "
               "Ctrl-C stops cleanly and writes nothing (exit status 130).",
      .example =
          "neargnn generate --out data/pl10m --nodes 10M --avg-degree 20 --dim 256 --seed 7\n"
          "neargnn generate --out data/pl10m-links --links --nodes 10M --seed 7\n"
          "neargnn generate --out data/mag --hetero mag --seed 7\n"
          "neargnn generate --out data/h --hetero custom --types "
          "paper:100k:128,author:200k:0 --relations "
          "author:writes:paper:4,paper:written_by:author:2,paper:cites:paper:8",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  if ((rc = check_split_sum(spec.command, o.train_frac, o.val_frac, o.test_frac)) != CLI_CONTINUE)
    return rc;
  if (hetero && links)
    return cli_usage_error(spec.command, "--links and --hetero cannot be combined");
  if (!links && find_opt(opts, N_OPTS(opts), "communities")->seen)
    return cli_usage_error(spec.command, "--communities applies with --links only");
  if (hetero)
    return generate_hetero(&spec, hetero, out, &o, types, relations, target, scale, progress);
  static const char *const HETERO_ONLY[] = {"types", "relations", "target", "scale"};
  for (size_t i = 0; i < N_OPTS(HETERO_ONLY); i++)
    if (find_opt(opts, N_OPTS(opts), HETERO_ONLY[i])->seen)
      return cli_usage_error(spec.command, "--%s applies with --hetero only", HETERO_ONLY[i]);

  cli_progress pr;
  cli_progress_begin(&pr, spec.command, (cli_progress_mode)progress);
  o.progress = cli_progress_cb;
  o.progress_ctx = &pr;
  double t0 = cli_now();
  ng_status st = links ? ng_dataset_generate_links(out, &o, &lo) : ng_dataset_generate(out, &o);
  double seconds = cli_now() - t0;
  cli_progress_end(&pr, st);
  if (st != NG_OK)
    return write_failed(st, out);
  return print_written("generated", out, seconds);
}

/* ---- convert ---- */

static const char *const FORMAT_NAMES[] = {"planetoid", "snap", "ogb", NULL};
static const ng_format FORMAT_VALUES[] = {NG_FORMAT_PLANETOID, NG_FORMAT_SNAP, NG_FORMAT_OGB};
static const char *const FEATURE_NAMES[] = {"none", "random", NULL};
static const ng_feature_fill FEATURE_VALUES[] = {NG_FEATURES_NONE, NG_FEATURES_RANDOM};

/* Options that only mean something for some input formats are refused for the others, so that
 * a typo in --format does not silently drop what the user asked for. */
static int check_convert_combinations(const cli_spec *spec, ng_format format, int features,
                                      int64_t dim, int32_t classes) {
  static const char *const snap_only[] = {"features", "dim", "classes", "train", "val", "test"};
  const char *fmt = FORMAT_NAMES[format];
  for (size_t i = 0; i < N_OPTS(snap_only); i++)
    if (format != NG_FORMAT_SNAP && cli_find_opt(spec, snap_only[i])->seen)
      return cli_usage_error(spec->command, "--%s applies to --format snap only, not %s",
                             snap_only[i], fmt);
  if (format != NG_FORMAT_OGB && cli_find_opt(spec, "split")->seen)
    return cli_usage_error(spec->command, "--split applies to --format ogb only, not %s", fmt);
  if (format == NG_FORMAT_PLANETOID && cli_find_opt(spec, "undirected")->seen)
    return cli_usage_error(spec->command, "planetoid data is always undirected; --undirected "
                                          "applies to --format snap and ogb");
  if (FEATURE_VALUES[features] == NG_FEATURES_RANDOM && dim == 0)
    return cli_usage_error(spec->command, "--features random needs --dim D (D >= 1)");
  if (FEATURE_VALUES[features] != NG_FEATURES_RANDOM && cli_find_opt(spec, "dim")->seen)
    return cli_usage_error(spec->command, "--dim applies only with --features random");
  if (classes == 0 && (cli_find_opt(spec, "train")->seen || cli_find_opt(spec, "val")->seen ||
                       cli_find_opt(spec, "test")->seen))
    return cli_usage_error(spec->command,
                           "--train/--val/--test need --classes C: splits are made only for "
                           "made-up labels");
  return CLI_CONTINUE;
}

/* After converting an OGB link-property folder (no raw/node-label.csv.gz): the link split read
 * from its plain files (OUT/links/links.json), or how to make one. */
static void print_ogbl_links(const char *in, const char *out) {
  char path[4096];
  struct stat sb;
  snprintf(path, sizeof path, "%s/raw/node-label.csv.gz", in);
  if (stat(path, &sb) == 0)
    return;
  snprintf(path, sizeof path, "%s/links/links.json", out);
  FILE *f = fopen(path, "re");
  if (!f) {
    printf("%-10s none: the split folder has no plain-file split (OGB ships torch .pt files); "
           "run neargnn split-edges --dataset %s, or dump the split to .npy files and convert "
           "again (docs/convert.md)\n",
           "links", out);
    return;
  }
  char text[4096];
  const size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  cJSON *j = cJSON_Parse(text);
  const double train = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "train")),
               val = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "val")),
               test = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "test")),
               k = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "neg_per_pos"));
  cJSON_Delete(j);
  printf("%-10s train %.0f, val %.0f, test %.0f, %.0f negatives per positive (%s/links)\n", "links",
         train, val, test, k, out);
}

int cmd_convert(int argc, char **argv) {
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  const char *out = NULL, *in = NULL;
  int format = 0, features = 0, progress = CLI_PROGRESS_AUTO;
  cli_opt opts[] = {
      CLI_OPT_CHOICE("format", &format, "FMT", FORMAT_NAMES,
                     "input format: planetoid (a folder with edges.txt, features.npy, labels.npy, "
                     "train/val/test.txt), snap (an edge list file) or ogb (an OGB node- or "
                     "link-property folder; a link split from plain files goes to DIR/links)",
                     .required = true),
      CLI_OPT_STRING("in", &in, "SRC", "input folder (snap: file)", .required = true),
      CLI_OPT_STRING("out", &out, "DIR", "output folder; must not exist", .required = true),
      CLI_OPT_FLAG("undirected", &o.undirected, "snap, ogb: store every edge in both directions"),
      CLI_OPT_CHOICE("features", &features, "KIND", FEATURE_NAMES,
                     "snap: features to make up: none or random (standard normal)"),
      CLI_OPT_INT("dim", &o.feature_dim, "D", 1, INT64_MAX,
                  "snap with --features random: feature columns", .default_text = "none"),
      CLI_OPT_INT("classes", &o.classes, "C", 0, INT32_MAX,
                  "snap: C random classes and splits; 0 for no labels"),
      CLI_OPT_FLOAT("train", &o.train_frac, "F", 0, false, 1, false,
                    "snap with --classes: share of nodes in the training split"),
      CLI_OPT_FLOAT("val", &o.val_frac, "F", 0, false, 1, false,
                    "snap with --classes: share of nodes in the validation split"),
      CLI_OPT_FLOAT("test", &o.test_frac, "F", 0, false, 1, false,
                    "snap with --classes: share of nodes in the test split"),
      CLI_OPT_STRING("split", &o.split, "NAME", "ogb: split scheme folder under split/",
                     .default_text = "the only one there"),
      CLI_OPT_UINT64("seed", &o.seed, "S", "seed of anything made up"),
      CLI_OPT_STRING("name", &o.name, "NAME", "dataset name written to dataset.json",
                     .default_text = "the base name of SRC"),
      CLI_OPT_PROGRESS(&progress),
  };
  cli_spec spec = {
      .command = "convert",
      .synopsis = "--format FMT --in SRC --out DIR [options]",
      .about = "Converts a graph dataset into a neargnn dataset folder (dataset.json and .npy "
               "arrays). Removes self loops and duplicate edges; writes atomically, so the "
               "folder appears only when complete.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .notes = "Prints a summary (nodes, edges, bytes written, seconds) on stdout. Ctrl-C stops "
               "cleanly and writes nothing (exit status 130).",
      .example = "neargnn convert --format planetoid --in ../shared/data/cora --out data/cora\n"
                 "neargnn convert --format snap --in soc-LiveJournal1.txt --out data/lj "
                 "--undirected --features random --dim 128 --classes 8",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  o.format = FORMAT_VALUES[format];
  o.features = FEATURE_VALUES[features];
  if ((rc = check_convert_combinations(&spec, o.format, features, o.feature_dim, o.classes)) !=
          CLI_CONTINUE ||
      (rc = check_split_sum(spec.command, o.train_frac, o.val_frac, o.test_frac)) != CLI_CONTINUE)
    return rc;

  cli_progress pr;
  cli_progress_begin(&pr, spec.command, (cli_progress_mode)progress);
  o.progress = cli_progress_cb;
  o.progress_ctx = &pr;
  /* An OGB folder with raw/relations/ is heterogeneous (ogbn-mag). */
  struct stat sb;
  char rel_dir[4096];
  snprintf(rel_dir, sizeof rel_dir, "%s/raw/relations", in);
  const bool hetero = o.format == NG_FORMAT_OGB && stat(rel_dir, &sb) == 0 && S_ISDIR(sb.st_mode);
  double t0 = cli_now();
  ng_status st = hetero ? ng_hetero_convert_ogb(out, in, &o) : ng_dataset_convert(out, in, &o);
  double seconds = cli_now() - t0;
  cli_progress_end(&pr, st);
  if (st != NG_OK)
    return write_failed(st, out);
  if (hetero)
    return print_written_hetero("converted", out, seconds);
  rc = print_written("converted", out, seconds);
  if (rc == CLI_EXIT_OK && o.format == NG_FORMAT_OGB)
    print_ogbl_links(in, out);
  return rc;
}

/* ---- info ---- */

/// Bytes of each array of a dataset, from its counts (the .npy headers are not counted).
typedef struct {
  int64_t indptr, indices, graph, features, labels, splits, total;
} footprint;

static footprint compute_footprint(const ng_dataset_info *in) {
  footprint f;
  f.indptr = (in->nodes + 1) * INDPTR_BYTES;
  f.indices = in->edges * in->index_bytes;
  f.graph = f.indptr + f.indices;
  f.features = in->nodes * in->feature_dim * FEATURE_BYTES;
  f.labels = in->classes > 0 ? in->nodes * LABEL_BYTES : 0;
  f.splits = (in->train + in->val + in->test) * INDPTR_BYTES;
  f.total = f.graph + f.features + f.labels + f.splits;
  return f;
}

/* Feature rows of the first `fraction` of the nodes (a hot set after reordering). */
static int64_t cache_rows(const ng_dataset_info *in, double fraction) {
  return (int64_t)floor(fraction * (double)in->nodes);
}

/* How many feature rows fit in `budget` bytes of GPU memory (all of them when rows are free). */
static int64_t rows_in_budget(const ng_dataset_info *in, int64_t budget) {
  int64_t row_bytes = in->feature_dim * FEATURE_BYTES;
  if (row_bytes == 0)
    return in->nodes;
  int64_t rows = budget / row_bytes;
  return rows < in->nodes ? rows : in->nodes;
}

static double pct(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0;
}

static void print_bytes_line(const char *label, int64_t bytes, const char *detail) {
  char human[32];
  cli_fmt_bytes(human, sizeof human, (double)bytes);
  if (*detail)
    printf("  %-10s %12" PRId64 "  %-10s  %s\n", label, bytes, human, detail);
  else
    printf("  %-10s %12" PRId64 "  %s\n", label, bytes, human);
}

static void print_info_text(const char *dir, const ng_dataset_info *in, const ng_degree_stats *d,
                            bool checked, int64_t gpu_budget) {
  printf("%-10s %s\n", "dataset", in->name);
  printf("%-10s %s\n", "folder", dir);
  printf("%-10s %" PRId64 "\n", "nodes", in->nodes);
  printf("%-10s %" PRId64, "edges", in->edges);
  if (in->undirected)
    printf(" (%" PRId64 " undirected edges)", (in->edges - d->self_loops) / 2 + d->self_loops);
  else
    printf(" (directed)");
  printf(", int%d indices\n", 8 * in->index_bytes);
  printf("%-10s %" PRId64, "features", in->feature_dim);
  if (in->feature_dim > 0)
    printf(" float32 columns%s", checked ? ", all values checked finite" : "");
  printf("\n%-10s %" PRId32 "\n", "classes", in->classes);
  printf("%-10s train %" PRId64 " (%.1f%%), val %" PRId64 " (%.1f%%), test %" PRId64 " (%.1f%%)\n",
         "splits", in->train, pct(in->train, in->nodes), in->val, pct(in->val, in->nodes), in->test,
         pct(in->test, in->nodes));

  printf("\ndegree (neighbours per node)\n");
  printf("  min %" PRId64 ", mean %.2f, p50 %" PRId64 ", p90 %" PRId64 ", p99 %" PRId64
         ", max %" PRId64 "\n",
         d->min, d->mean, d->p50, d->p90, d->p99, d->max);
  printf("  isolated nodes %" PRId64 " (%.1f%%), self loops %" PRId64 "\n", d->isolated,
         pct(d->isolated, in->nodes), d->self_loops);
  printf("  in-degree max %" PRId64 "; the 1%% most-referenced nodes receive %.1f%% of entries\n",
         d->in_max, 100.0 * d->in_top1pct_share);
  if (d->powerlaw_exponent > 0)
    printf("  power-law fit: exponent %.2f for degrees >= %" PRId64 "\n", d->powerlaw_exponent,
           d->powerlaw_xmin);
  else
    printf("  power-law fit: too few nodes with neighbours to fit\n");

  footprint f = compute_footprint(in);
  char detail[96];
  printf("\nmemory (bytes of array data)\n");
  snprintf(detail, sizeof detail, "indptr %" PRId64 " + indices %" PRId64, f.indptr, f.indices);
  print_bytes_line("graph", f.graph, detail);
  print_bytes_line("features", f.features, "");
  print_bytes_line("labels", f.labels, "");
  print_bytes_line("splits", f.splits, "");
  print_bytes_line("total", f.total, "");
  printf("\nGPU feature cache (the hottest rows)\n");
  for (size_t i = 0; i < N_OPTS(CACHE_FRACTIONS); i++) {
    char label[16];
    int64_t rows = cache_rows(in, CACHE_FRACTIONS[i]);
    snprintf(label, sizeof label, "%.0f%%", 100.0 * CACHE_FRACTIONS[i]);
    snprintf(detail, sizeof detail, "%" PRId64 " rows", rows);
    print_bytes_line(label, rows * in->feature_dim * FEATURE_BYTES, detail);
  }
  if (gpu_budget > 0) {
    char human[32];
    int64_t rows = rows_in_budget(in, gpu_budget);
    cli_fmt_bytes(human, sizeof human, (double)gpu_budget);
    printf("  %s holds %" PRId64 " rows (%.1f%% of the nodes)\n", human, rows,
           pct(rows, in->nodes));
  }
}

/* cJSON reports allocation failures by returning NULL; these keep track of any. */
static void jnum(bool *ok, cJSON *obj, const char *key, double v) {
  *ok = cJSON_AddNumberToObject(obj, key, v) != NULL && *ok;
}

static cJSON *jobj(bool *ok, cJSON *parent, const char *key) {
  cJSON *o = cJSON_AddObjectToObject(parent, key);
  *ok = o != NULL && *ok;
  return o;
}

static int print_info_json(const char *dir, const ng_dataset_info *in, const ng_degree_stats *d,
                           bool checked, int64_t gpu_budget) {
  bool ok = true;
  cJSON *root = cJSON_CreateObject();
  ok = root != NULL;
  ok = cJSON_AddStringToObject(root, "name", in->name) != NULL && ok;
  ok = cJSON_AddStringToObject(root, "folder", dir) != NULL && ok;
  jnum(&ok, root, "nodes", (double)in->nodes);
  jnum(&ok, root, "edges", (double)in->edges);
  ok = cJSON_AddBoolToObject(root, "undirected", in->undirected) != NULL && ok;
  jnum(&ok, root, "index_bytes", in->index_bytes);
  jnum(&ok, root, "feature_dim", (double)in->feature_dim);
  ok = cJSON_AddBoolToObject(root, "features_checked", checked) != NULL && ok;
  jnum(&ok, root, "classes", in->classes);
  cJSON *splits = jobj(&ok, root, "splits");
  jnum(&ok, splits, "train", (double)in->train);
  jnum(&ok, splits, "val", (double)in->val);
  jnum(&ok, splits, "test", (double)in->test);

  cJSON *deg = jobj(&ok, root, "degree");
  jnum(&ok, deg, "min", (double)d->min);
  jnum(&ok, deg, "mean", d->mean);
  jnum(&ok, deg, "p50", (double)d->p50);
  jnum(&ok, deg, "p90", (double)d->p90);
  jnum(&ok, deg, "p99", (double)d->p99);
  jnum(&ok, deg, "max", (double)d->max);
  jnum(&ok, deg, "isolated", (double)d->isolated);
  jnum(&ok, deg, "self_loops", (double)d->self_loops);
  jnum(&ok, deg, "in_max", (double)d->in_max);
  jnum(&ok, deg, "in_top1pct_share", d->in_top1pct_share);
  jnum(&ok, deg, "powerlaw_exponent", d->powerlaw_exponent);
  jnum(&ok, deg, "powerlaw_xmin", (double)d->powerlaw_xmin);

  footprint f = compute_footprint(in);
  cJSON *mem = jobj(&ok, root, "memory");
  jnum(&ok, mem, "indptr", (double)f.indptr);
  jnum(&ok, mem, "indices", (double)f.indices);
  jnum(&ok, mem, "graph", (double)f.graph);
  jnum(&ok, mem, "features", (double)f.features);
  jnum(&ok, mem, "labels", (double)f.labels);
  jnum(&ok, mem, "splits", (double)f.splits);
  jnum(&ok, mem, "total", (double)f.total);
  cJSON *caches = cJSON_AddArrayToObject(mem, "gpu_cache");
  ok = caches != NULL && ok;
  for (size_t i = 0; i < N_OPTS(CACHE_FRACTIONS); i++) {
    cJSON *c = cJSON_CreateObject();
    ok = c != NULL && cJSON_AddItemToArray(caches, c) && ok;
    int64_t rows = cache_rows(in, CACHE_FRACTIONS[i]);
    jnum(&ok, c, "fraction", CACHE_FRACTIONS[i]);
    jnum(&ok, c, "rows", (double)rows);
    jnum(&ok, c, "bytes", (double)(rows * in->feature_dim * FEATURE_BYTES));
  }
  if (gpu_budget > 0) {
    cJSON *b = jobj(&ok, mem, "gpu_memory");
    jnum(&ok, b, "bytes", (double)gpu_budget);
    jnum(&ok, b, "rows", (double)rows_in_budget(in, gpu_budget));
  }
  char *text = ok ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) {
    fprintf(stderr, "neargnn: error: %s: building the JSON output\n", ng_status_str(NG_ERR_NOMEM));
    return CLI_EXIT_RUNTIME;
  }
  printf("%s\n", text);
  cJSON_free(text);
  return CLI_EXIT_OK;
}

/* info on a heterogeneous folder: its types and relations, as text or one JSON object. */
static int print_info_hetero(const char *dir, ng_hetero_t ds, bool json, bool checked) {
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  ng_status st = ng_hetero_info_get(&info, ds);
  cJSON *root = json ? cJSON_CreateObject() : NULL;
  cJSON *types = root ? cJSON_AddArrayToObject(root, "node_types") : NULL;
  cJSON *rels = root ? cJSON_AddArrayToObject(root, "edge_types") : NULL;
  if (st != NG_OK || (json && (!root || !types || !rels))) {
    cJSON_Delete(root);
    return cli_runtime_error(st != NG_OK ? st : NG_ERR_NOMEM);
  }
  if (!json) {
    printf("%-10s %s\n", "dataset", dir);
    printf("%-10s %s\n", "name", info.name);
    printf("%-10s heterogeneous\n", "layout");
    printf("%-10s %" PRId64 "\n", "nodes", info.nodes);
    printf("%-10s %" PRId64 "\n", "edges", info.edges);
  }
  ng_node_type_info nt[64];
  for (int32_t t = 0; t < info.node_types && t < 64 && st == NG_OK; t++) {
    nt[t] = (ng_node_type_info)NG_NODE_TYPE_INFO_INIT;
    st = ng_hetero_node_type(&nt[t], ds, t);
    if (st == NG_OK && !json)
      printf("%-10s %s: %" PRId64 " nodes, %" PRId64 " features%s\n", "type", nt[t].name,
             nt[t].count, nt[t].feature_dim, t == info.target ? " (target)" : "");
    cJSON *e = json ? cJSON_CreateObject() : NULL;
    if (e && cJSON_AddItemToArray(types, e)) {
      cJSON_AddStringToObject(e, "name", nt[t].name);
      cJSON_AddNumberToObject(e, "count", (double)nt[t].count);
      cJSON_AddNumberToObject(e, "feature_dim", (double)nt[t].feature_dim);
      cJSON_AddNumberToObject(e, "classes", nt[t].classes);
    }
  }
  for (int32_t r = 0; r < info.edge_types && st == NG_OK; r++) {
    ng_edge_type_info et = NG_EDGE_TYPE_INFO_INIT;
    st = ng_hetero_edge_type(&et, ds, r);
    if (st != NG_OK || et.src_type >= 64 || et.dst_type >= 64)
      break;
    const double mean =
        nt[et.dst_type].count > 0 ? (double)et.edges / (double)nt[et.dst_type].count : 0.0;
    if (!json)
      printf("%-10s (%s, %s, %s): %" PRId64 " edges, %.2f per %s\n", "relation",
             nt[et.src_type].name, et.relation, nt[et.dst_type].name, et.edges, mean,
             nt[et.dst_type].name);
    cJSON *e = json ? cJSON_CreateObject() : NULL;
    if (e && cJSON_AddItemToArray(rels, e)) {
      cJSON_AddStringToObject(e, "src", nt[et.src_type].name);
      cJSON_AddStringToObject(e, "relation", et.relation);
      cJSON_AddStringToObject(e, "dst", nt[et.dst_type].name);
      cJSON_AddNumberToObject(e, "edges", (double)et.edges);
      cJSON_AddNumberToObject(e, "mean_per_dst", mean);
    }
  }
  if (st != NG_OK) {
    cJSON_Delete(root);
    return cli_runtime_error(st);
  }
  if (!json) {
    printf("%-10s %" PRId32 "\n", "classes", info.classes);
    printf("%-10s train %" PRId64 ", val %" PRId64 ", test %" PRId64 "\n", "splits", info.train,
           info.val, info.test);
    printf("%-10s %s\n", "features", checked ? "every value finite" : "sampled rows finite");
    return CLI_EXIT_OK;
  }
  cJSON_AddStringToObject(root, "dataset", dir);
  cJSON_AddStringToObject(root, "name", info.name);
  cJSON_AddStringToObject(root, "layout", "heterogeneous");
  cJSON_AddNumberToObject(root, "nodes", (double)info.nodes);
  cJSON_AddNumberToObject(root, "edges", (double)info.edges);
  cJSON_AddNumberToObject(root, "classes", info.classes);
  cJSON *splits = cJSON_AddObjectToObject(root, "splits");
  if (splits) {
    cJSON_AddNumberToObject(splits, "train", (double)info.train);
    cJSON_AddNumberToObject(splits, "val", (double)info.val);
    cJSON_AddNumberToObject(splits, "test", (double)info.test);
  }
  cJSON_AddBoolToObject(root, "features_checked", checked);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text)
    return cli_runtime_error(NG_ERR_NOMEM);
  printf("%s\n", text);
  cJSON_free(text);
  return CLI_EXIT_OK;
}

int cmd_info(int argc, char **argv) {
  int check_features = 0, json = 0;
  int64_t gpu_budget = 0;
  cli_opt opts[] = {
      CLI_OPT_FLAG("check-features", &check_features,
                   "also read every feature value and reject NaN or infinity"),
      CLI_OPT_FLAG("json", &json, "print one JSON object instead of text"),
      CLI_OPT_BYTES("gpu-memory", &gpu_budget, "SIZE", 1,
                    "also show how many feature rows fit in SIZE bytes of GPU memory "
                    "(suffixes K, M, G, T: powers of 1024)",
                    .default_text = "not shown"),
  };
  cli_spec spec = {
      .command = "info",
      .synopsis = "DIR [options]",
      .about = "Opens the dataset in folder DIR, checks it (shapes, CSR structure, id ranges, "
               "splits) and shows its counts, split sizes, degree distribution (percentiles, "
               "isolated nodes, self loops, in-degree skew, power-law fit) and memory footprint, "
               "with what a GPU cache of 5, 10 or 25% of the feature rows would take.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .positional = "DIR",
      .min_positional = 1,
      .max_positional = 1,
      .example = "neargnn info data/cora --json",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  const char *dir = spec.pos[0];

  ng_open_opts oo = NG_OPEN_OPTS_INIT;
  oo.check_features = check_features;
  ng_dataset_t ds = NULL;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  ng_degree_stats deg = NG_DEGREE_STATS_INIT;
  ng_status st = ng_dataset_open(&ds, dir, &oo);
  /* The homogeneous reader refuses a heterogeneous folder: describe it with the other one. */
  if (st == NG_ERR_UNSUPPORTED) {
    ng_hetero_t h = NULL;
    ng_status hst = ng_hetero_open(&h, dir, &oo);
    if (hst != NG_OK)
      rc = cli_runtime_error(hst);
    else if (gpu_budget > 0)
      rc = cli_usage_error(
          spec.command, "--gpu-memory applies to homogeneous datasets; %s is heterogeneous", dir);
    else
      rc = print_info_hetero(dir, h, json != 0, check_features != 0);
    ng_hetero_close(h);
    return rc;
  }
  if (st == NG_OK)
    st = ng_dataset_info_get(&info, ds);
  if (st == NG_OK)
    st = ng_dataset_degree_stats(&deg, ds);
  if (st != NG_OK) {
    rc = cli_runtime_error(st);
  } else if (json) {
    rc = print_info_json(dir, &info, &deg, check_features, gpu_budget);
  } else {
    print_info_text(dir, &info, &deg, check_features, gpu_budget);
    rc = CLI_EXIT_OK;
  }
  ng_dataset_close(ds);
  return rc;
}
