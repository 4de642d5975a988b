/* `demo`: generate a graph, then train on it (the README's main job). */
#include "cli.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb;
  (void)type;
  (void)ftw;
  return remove(path) != 0 ? -1 : 0;
}

/* Removes the demo's temporary dataset folder (no links followed, children first). */
static void remove_tree(const char *dir) {
  if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    fprintf(stderr, "neargnn demo: could not remove %s: %s\n", dir, strerror(errno));
}

int cmd_demo(int argc, char **argv) {
  cli_train_cfg c = {.o = NG_TRAIN_OPTS_INIT,
                     .net = {.fanouts = "10,5", .weight_decay = "0", .hidden = 128, .dropout = 0.2},
                     .epochs = 2,
                     .eval_every = 0};
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.name = "demo";
  g.nodes = 500000;
  g.avg_degree = 15;
  g.feature_dim = 128;
  g.classes = 16;
  g.feature_noise = 1.0;
  const char *keep = NULL;
  int progress = CLI_PROGRESS_AUTO;
  cli_opt opts[] = {
      CLI_OPT_INT("nodes", &g.nodes, "N", 1000, INT32_MAX, "nodes of the generated graph"),
      CLI_OPT_FLOAT("avg-degree", &g.avg_degree, "F", 0, true, INFINITY, false,
                    "mean neighbours per node"),
      CLI_OPT_INT("dim", &g.feature_dim, "D", 1, 1 << 20, "feature columns"),
      CLI_OPT_INT("classes", &g.classes, "C", 2, 1 << 16, "classes"),
      CLI_OPT_STRING("keep", &keep, "DIR",
                     "write the generated dataset to DIR and keep it (default: a temporary "
                     "folder, removed at the end)"),
      CLI_TRAIN_OPTS(&c),
      CLI_OPT_PROGRESS(&progress),
  };
  cli_spec spec = {
      .command = "demo",
      .synopsis = "[options]",
      .about = "Generates a 500 000-node power-law graph (7.5 M edges) with 16 learnable classes "
               "(128-d features, homophily 0.8), trains a 2-layer GraphSAGE-mean model on it on "
               "the CPU (fanouts 10,5, hidden 128, batch 1024, 2 epochs), and prints throughput "
               "and accuracy. Takes well under two minutes on 2 cores; every option of `train` "
               "can change the run.",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .example = "neargnn demo --threads 2",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  char tmp[4096];
  const char *dir = keep;
  if (!dir) {
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/neargnn-demo-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp)) {
      fprintf(stderr, "neargnn: error: cannot create a folder under %s: %s\n", tmp,
              strerror(errno));
      return CLI_EXIT_RUNTIME;
    }
    rmdir(tmp); /* the generator creates the folder itself, atomically */
    dir = tmp;
  }
  g.threads = c.o.threads;
  g.seed = c.o.seed;
  printf("generating %" PRId64 " nodes, average degree %g, %" PRId64 "-d features, %d classes\n",
         g.nodes, g.avg_degree, g.feature_dim, (int)g.classes);
  fflush(stdout);
  cli_progress pr;
  cli_progress_begin(&pr, spec.command, (cli_progress_mode)progress);
  g.progress = cli_progress_cb;
  g.progress_ctx = &pr;
  double t0 = cli_now();
  ng_status st = ng_dataset_generate(dir, &g);
  cli_progress_end(&pr, st);
  if (st != NG_OK)
    return cli_runtime_error(st);
  printf("generated in %.2f s: %s\n", cli_now() - t0, dir);
  ng_dataset_t ds = NULL;
  ng_model_t m = NULL;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  st = ng_dataset_open(&ds, dir, NULL);
  if (st == NG_OK)
    st = ng_dataset_info_get(&info, ds);
  if (st != NG_OK) {
    rc = cli_runtime_error(st);
  } else if ((rc = cli_build_model(&m, spec.command, &c.net, &info)) == CLI_CONTINUE) {
    printf("training GraphSAGE: %" PRId64 " edges, %" PRId64 " training nodes, fanouts %s, "
           "batch %" PRId64 "\n",
           info.edges, info.train, c.net.fanouts, c.o.batch);
    fflush(stdout);
    const cli_train_files none = {NULL, NULL, NULL, NULL, NULL, NULL, 0, 0.0};
    rc = cli_run_training(ds, m, &c, spec.command, progress, &none);
  }
  ng_model_destroy(m);
  ng_dataset_close(ds);
  if (!keep)
    remove_tree(dir);
  return rc;
}
