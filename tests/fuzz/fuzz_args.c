/* libFuzzer target: the `neargnn` option parser (apps/args.c, cli_parse()) on a command line
 * split from the input, against a table with every option type, a required option and
 * positional arguments. Nothing runs: a parse that says "continue" is checked against the table
 * (values in range, required options seen, positional count within bounds), with the parsed
 * values re-checked independently.
 *
 * Input layout: one argument per line (argv[0] is the command's name and not in the input).
 * The parser's messages (usage errors, --help) go to /dev/null; sanitizer and libFuzzer
 * reports are unaffected. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_ARGS = 64 };

static const char *const MODELS[] = {"sage", "gcn", "gat", NULL};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  FILE *null_out = fopen("/dev/null", "w");
  if (null_out) {
    stdout = null_out;
    stderr = null_out;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *argv[MAX_ARGS + 1] = {"fuzz"};
  int argc = 1;
  for (char *p = buf; argc < MAX_ARGS && p <= buf + size;) {
    char *nl = memchr(p, '\n', (size_t)(buf + size - p));
    if (nl)
      *nl = '\0';
    argv[argc++] = p;
    if (!nl)
      break;
    p = nl + 1;
  }
  argv[argc] = NULL;

  const char *dataset = NULL, *out = "default";
  int model = 0, verbose = 0;
  int32_t hidden = 256;
  int64_t nodes = 1000;
  uint64_t seed = 1;
  int64_t bytes = 0;
  double lr = 0.01, dropout = 0.0, ratio = 0.5;
  cli_opt opts[] = {
      CLI_OPT_STRING("dataset", &dataset, "DIR", "dataset folder", .required = true),
      CLI_OPT_STRING("out", &out, "FILE", "output"),
      CLI_OPT_CHOICE("model", &model, "NAME", MODELS, "model"),
      CLI_OPT_FLAG("verbose", &verbose, "more output"),
      CLI_OPT_INT("hidden", &hidden, "N", 1, 1 << 16, "hidden width"),
      CLI_OPT_INT("nodes", &nodes, "N", -5, INT64_MAX, "nodes"),
      CLI_OPT_UINT64("seed", &seed, "S", "seed"),
      CLI_OPT_BYTES("cache-bytes", &bytes, "SIZE", 0, "cache size"),
      CLI_OPT_FLOAT("lr", &lr, "LR", 0, true, INFINITY, false, "learning rate"),
      CLI_OPT_FLOAT("dropout", &dropout, "P", 0, false, 1, true, "dropout"),
      CLI_OPT_FLOAT("cache-ratio", &ratio, "R", 0, false, 1, false, "share",
                    .default_text = "half"),
  };
  cli_spec spec = {
      .command = "fuzz",
      .synopsis = "--dataset DIR [options] [NAME...]",
      .about = "A representative option table for the fuzzer.",
      .opts = opts,
      .n_opts = sizeof opts / sizeof opts[0],
      .positional = "NAME",
      .min_positional = 1,
      .max_positional = 3,
      .notes = "Notes\nwith a second line.",
      .example = "fuzz --dataset d x\nfuzz --dataset d --model gcn x y",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE) {
    if (rc != CLI_EXIT_OK && rc != CLI_EXIT_USAGE)
      __builtin_trap();
  } else {
    if (!opts[0].seen || !dataset || !*dataset || spec.n_pos < spec.min_positional ||
        spec.n_pos > spec.max_positional)
      __builtin_trap();
    for (int i = 0; i < spec.n_pos; i++)
      if (spec.pos[i] < buf || spec.pos[i] > buf + size)
        __builtin_trap();
    if (model < 0 || model > 2 || (verbose != 0 && verbose != 1) || hidden < 1 ||
        hidden > (1 << 16) || nodes < -5 || bytes < 0 || !(lr > 0) || !isfinite(lr) ||
        !(dropout >= 0 && dropout < 1) || !(ratio >= 0 && ratio <= 1))
      __builtin_trap();
    /* An option not given keeps its default. */
    if ((!opts[2].seen && model != 0) || (!opts[4].seen && hidden != 256) ||
        (!opts[6].seen && seed != 1) || (!opts[8].seen && lr != 0.01))
      __builtin_trap();
  }
  free(buf);
  return 0;
}
