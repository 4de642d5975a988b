/* `neargnn`: the command-line front end of the library. This file holds the subcommand table,
 * the top-level usage and `help`; each group of subcommands lives in its own cmd_*.c file. */
#include "cli.h"

#include <errno.h>
#include <string.h>

static int cmd_help(int argc, char **argv);

static const cli_command COMMANDS[] = {
    {"generate", "generate a synthetic power-law dataset with learnable classes", cmd_generate},
    {"convert", "convert planetoid, SNAP or OGB data into a dataset folder", cmd_convert},
    {"info", "show counts, degree statistics and memory footprint of a dataset", cmd_info},
    {"split-edges", "split a dataset's edges for link prediction (held-out edges, negatives)",
     cmd_split_edges},
    {"reorder", "renumber a dataset so that its hot nodes come first", cmd_reorder},
    {"train", "train a GraphSAGE, GCN, GAT, GIN or SAGE-pool model on a dataset", cmd_train},
    {"train-hetero", "train R-GCN or R-SAGE on a heterogeneous dataset", cmd_train_hetero},
    {"evaluate", "accuracy and loss of a checkpoint on a dataset's splits", cmd_evaluate},
    {"predict", "classes or logits of a checkpoint for a split or a node list", cmd_predict},
    {"demo", "generate a graph and train on it (the quick tour)", cmd_demo},
    {"embed", "write embeddings or logits of a trained model (layer-wise inference)", cmd_embed},
    {"serve", "serve a trained model over HTTP (KServe v2), with online graph updates", cmd_serve},
    {"version", "show the version and build features", cmd_version},
    {"help", "show the help of a command", cmd_help},
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static const cli_command *find_command(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(COMMANDS[i].name, name) == 0)
      return &COMMANDS[i];
  return NULL;
}

static void print_usage(FILE *out) {
  fputs("usage: neargnn COMMAND [options]\n"
        "       neargnn help COMMAND | neargnn COMMAND --help\n\n"
        "Trains, evaluates, predicts with and serves sampled graph neural networks on graphs\n"
        "whose node features do not fit in GPU memory.\n\ncommands:\n",
        out);
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(out, "  %-12s%s\n", COMMANDS[i].name, COMMANDS[i].summary);
  fputs("\nExit status: 0 success, 1 runtime error, 2 usage error, 130 interrupted (Ctrl-C).\n"
        "Progress goes to stderr; results go to stdout.\n\n"
        "example:\n"
        "  neargnn generate --out /tmp/pl --nodes 1M && neargnn info /tmp/pl\n",
        out);
}

static int unknown_command(const char *name) {
  const char *names[N_COMMANDS];
  for (size_t i = 0; i < N_COMMANDS; i++)
    names[i] = COMMANDS[i].name;
  const char *guess = cli_suggest(name, names, N_COMMANDS);
  if (guess)
    return cli_usage_error(NULL, "unknown command '%s'; did you mean '%s'?", name, guess);
  return cli_usage_error(NULL, "unknown command '%s'", name);
}

/* `neargnn help [COMMAND]`: the top-level usage, or the command's own --help. */
static int cmd_help(int argc, char **argv) {
  cli_spec spec = {
      .command = "help",
      .synopsis = "[COMMAND]",
      .about = "Shows the list of commands, or the help of COMMAND (the same as 'neargnn COMMAND "
               "--help').",
      .positional = "COMMAND",
      .max_positional = 1,
      .example = "neargnn help generate",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  if (spec.n_pos == 0) {
    print_usage(stdout);
    return CLI_EXIT_OK;
  }
  const cli_command *cmd = find_command(spec.pos[0]);
  if (!cmd)
    return unknown_command(spec.pos[0]);
  char *help_argv[] = {(char *)cmd->name, "--help", NULL};
  return cmd->run(2, help_argv);
}

/* Output that could not be written (full disk, closed pipe) is an error, not a success. */
static int finish_stdout(int rc) {
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) {
    /* A reader that went away (`| head`) is not worth a message; anything else is. */
    if (errno != EPIPE)
      fprintf(stderr, "neargnn: error: writing the output failed: %s\n",
              errno ? strerror(errno) : "unknown error");
    return rc == CLI_EXIT_OK ? CLI_EXIT_RUNTIME : rc;
  }
  return rc;
}

int main(int argc, char **argv) {
  (void)cli_start_time(); /* fixes the whole run's start for --json's figures */
  if (argc < 2) {
    print_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
    print_usage(stdout);
    return finish_stdout(CLI_EXIT_OK);
  }
  if (strcmp(name, "--version") == 0)
    name = "version";
  else if (name[0] == '-')
    return cli_usage_error(NULL, "unknown option '%s' (options follow the command)", name);
  const cli_command *cmd = find_command(name);
  if (!cmd)
    return unknown_command(name);
  argv[1] = (char *)cmd->name;
  return finish_stdout(cmd->run(argc - 1, argv + 1));
}
