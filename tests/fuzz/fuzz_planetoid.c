/* libFuzzer target: a planetoid folder converted with ng_dataset_convert().
 *
 * Input layout: sections separated by FUZZ_SEP ("\n@@\n"), in the order edges.txt,
 * features.npy, labels.npy, train.txt, val.txt, test.txt; an empty or missing section leaves
 * that file out. A conversion that succeeds must write a dataset that opens with every check;
 * one that fails must leave no output (fuzz_files.h). tests/fuzz/make_convert_corpus.sh writes
 * seeds. */
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const FILES[] = {"edges.txt", "features.npy", "labels.npy",
                                    "train.txt", "val.txt",      "test.txt"};
enum { NFILES = sizeof FILES / sizeof FILES[0] };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fuzz_scratch())
    return 0;
  char src[512], path[640];
  snprintf(src, sizeof src, "%s/in", fuzz_dir);
  fuzz_rm_rf(src);
  if (mkdir(src, 0700) != 0)
    return 0;
  const uint8_t *start[NFILES];
  size_t len[NFILES];
  fuzz_sections(data, size, NFILES, start, len);
  for (int i = 0; i < NFILES; i++) {
    snprintf(path, sizeof path, "%s/%s", src, FILES[i]);
    if (len[i] > 0 && !fuzz_write(path, start[i], len[i]))
      return 0;
  }
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_PLANETOID;
  o.name = "fuzz";
  fuzz_convert_check(src, &o);
  return 0;
}
