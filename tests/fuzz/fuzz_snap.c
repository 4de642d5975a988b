/* libFuzzer target: a SNAP edge list converted with ng_dataset_convert().
 *
 * Input layout: byte 0 picks the options (bit 0: undirected; bit 1: random features of
 * 1 + bits 2-3 columns; bits 4-5: random labels of that many classes, with random splits); the
 * rest is the edge-list file. A conversion that succeeds must write a dataset that opens with
 * every check; one that fails must leave no output (fuzz_files.h). */
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || !fuzz_scratch())
    return 0;
  char src[512];
  snprintf(src, sizeof src, "%s/edges.txt", fuzz_dir);
  if (!fuzz_write(src, data + 1, size - 1))
    return 0;
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  o.name = "fuzz";
  o.undirected = data[0] & 1;
  if (data[0] & 2) {
    o.features = NG_FEATURES_RANDOM;
    o.feature_dim = 1 + ((data[0] >> 2) & 3);
  }
  o.classes = (data[0] >> 4) & 3;
  fuzz_convert_check(src, &o);
  return 0;
}
