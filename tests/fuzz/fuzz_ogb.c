/* libFuzzer target: an OGB node-property folder converted with ng_dataset_convert().
 *
 * Input layout: byte 0 bit 0 asks for an undirected graph; the rest is sections separated by
 * FUZZ_SEP ("\n@@\n"), in the order raw/num-node-list.csv.gz, raw/edge.csv.gz,
 * raw/node-feat.csv.gz, raw/node-label.csv.gz, split/s/train.csv.gz, split/s/valid.csv.gz,
 * split/s/test.csv.gz. An empty or missing section leaves that file out (split/s/ exists when
 * any split section is given). The files are plain text: the reader passes non-gzip data
 * through, and a section may itself be gzip data. A conversion that succeeds must write a
 * dataset that opens with every check; one that fails must leave no output (fuzz_files.h).
 * tests/fuzz/make_convert_corpus.sh writes seeds. */
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const FILES[] = {"raw/num-node-list.csv.gz", "raw/edge.csv.gz",
                                    "raw/node-feat.csv.gz",     "raw/node-label.csv.gz",
                                    "split/s/train.csv.gz",     "split/s/valid.csv.gz",
                                    "split/s/test.csv.gz"};
enum { NFILES = sizeof FILES / sizeof FILES[0], FIRST_SPLIT = 4 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || !fuzz_scratch())
    return 0;
  char src[512], path[640];
  snprintf(src, sizeof src, "%s/in", fuzz_dir);
  fuzz_rm_rf(src);
  const uint8_t *start[NFILES];
  size_t len[NFILES];
  fuzz_sections(data + 1, size - 1, NFILES, start, len);
  bool split = false;
  for (int i = FIRST_SPLIT; i < NFILES; i++)
    split |= len[i] > 0;
  snprintf(path, sizeof path, "%s/raw", src);
  if (mkdir(src, 0700) != 0 || mkdir(path, 0700) != 0)
    return 0;
  snprintf(path, sizeof path, "%s/split", src);
  if (split && mkdir(path, 0700) != 0)
    return 0;
  snprintf(path, sizeof path, "%s/split/s", src);
  if (split && mkdir(path, 0700) != 0)
    return 0;
  for (int i = 0; i < NFILES; i++) {
    snprintf(path, sizeof path, "%s/%s", src, FILES[i]);
    if (len[i] > 0 && !fuzz_write(path, start[i], len[i]))
      return 0;
  }
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_OGB;
  o.name = "fuzz";
  o.undirected = data[0] & 1;
  fuzz_convert_check(src, &o);
  return 0;
}
