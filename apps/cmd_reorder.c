/* The `reorder` subcommand: renumbers a dataset so that its hot nodes come first. */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_ITERATIONS 1000

static const char *const SCORE_NAMES[] = {"degree", "rpr", "wrpr", NULL};
static const ng_hot_score SCORE_VALUES[] = {NG_HOT_DEGREE, NG_HOT_RPR, NG_HOT_WRPR};
/* The fractions ng_reorder_opts.entry_share reports, in its order. */
static const int SHARE_PERCENT[NG_REORDER_SHARES] = {5, 10, 25};

int cmd_reorder(int argc, char **argv) {
  ng_reorder_opts o = NG_REORDER_OPTS_INIT;
  const char *dataset = NULL, *out = NULL;
  int score = 0, progress = CLI_PROGRESS_AUTO; /* degree: the best hit rate measured so far */
  cli_opt opts[] = {
      CLI_OPT_STRING("dataset", &dataset, "DIR", "the dataset folder to reorder", .required = true),
      CLI_OPT_STRING("out", &out, "DIR", "output folder; must not exist", .required = true),
      CLI_OPT_CHOICE("score", &score, "S", SCORE_NAMES,
                     "what ranks the nodes: degree (in-degree), rpr (reverse PageRank) or wrpr "
                     "(reverse PageRank towards the training nodes)"),
      CLI_OPT_INT("iterations", &o.iterations, "N", 1, MAX_ITERATIONS,
                  "PageRank iterations of rpr and wrpr"),
      CLI_OPT_INT("threads", &o.threads, "T", 0, INT32_MAX,
                  "threads; 0: OMP_NUM_THREADS or every core"),
      CLI_OPT_PROGRESS(&progress),
  };
  cli_spec spec = {
      .command = "reorder",
      .synopsis = "--dataset DIR --out DIR [options]",
      .about = "Writes a copy of a dataset whose node ids are renumbered by descending score, so "
               "that the nodes whose features sampling reads most are ids 0, 1, 2, ... and a GPU "
               "feature cache of H rows holds ids [0, H). Features, labels and splits move with "
               "their nodes; orig_id.npy maps every new id back to the source's id. The folder "
               "is written atomically: it appears only when complete.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .notes = "Prints what it wrote and the share of all row entries (neighbour references) "
               "that point into the first 5%, 10% and 25% of the new ids. Ctrl-C stops cleanly "
               "and writes nothing (exit status 130). See docs/tiering.md.",
      .example = "neargnn reorder --dataset data/pl10m --out data/pl10m-hot --score wrpr",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  o.score = SCORE_VALUES[score];

  ng_dataset_t ds = NULL;
  ng_status st = ng_dataset_open(&ds, dataset, NULL);
  if (st != NG_OK)
    return cli_runtime_error(st);
  double share[NG_REORDER_SHARES] = {0};
  o.entry_share = share;
  cli_progress pr;
  cli_progress_begin(&pr, spec.command, (cli_progress_mode)progress);
  o.progress = cli_progress_cb;
  o.progress_ctx = &pr;
  double t0 = cli_now();
  st = ng_dataset_reorder(out, ds, &o);
  double seconds = cli_now() - t0;
  cli_progress_end(&pr, st);
  ng_dataset_close(ds);
  if (st == NG_ERR_INTERRUPTED) {
    fprintf(stderr, "neargnn: interrupted; %s was not created\n", out);
    return CLI_EXIT_INTERRUPTED;
  }
  if (st != NG_OK)
    return cli_runtime_error(st);

  /* Read the counts back from the new folder, which also validates it. */
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  st = ng_dataset_open(&ds, out, NULL);
  if (st == NG_OK)
    st = ng_dataset_info_get(&info, ds);
  ng_dataset_close(ds);
  if (st != NG_OK)
    return cli_runtime_error(st);
  printf("%-10s %s\n", "reordered", out);
  printf("%-10s %s\n", "from", dataset);
  if (o.score == NG_HOT_DEGREE)
    printf("%-10s %s\n", "score", SCORE_NAMES[score]);
  else
    printf("%-10s %s, %" PRId32 " iterations\n", "score", SCORE_NAMES[score], o.iterations);
  printf("%-10s %" PRId64 "\n", "nodes", info.nodes);
  printf("%-10s %" PRId64 "\n", "edges", info.edges);
  printf("%-10s %.3f\n", "seconds", seconds);
  printf("row entries into the first ids:\n");
  for (int k = 0; k < NG_REORDER_SHARES; k++)
    printf("  top %2d%%  %6.2f%%\n", SHARE_PERCENT[k], 100.0 * share[k]);
  return CLI_EXIT_OK;
}
