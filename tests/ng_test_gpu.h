/* The GPU suites' start: find a CUDA device or skip. Only for builds with NG_HAVE_CUDA. */
#ifndef NG_TEST_GPU_H
#define NG_TEST_GPU_H

#include "ng_cuda.h"
#include "ng_test.h"

#include <stdbool.h>
#include <stdio.h>

/// Whether a CUDA device is visible. Prints "`suite`: <the devices>" when one is, and the skip
/// line when none is (the suite then returns 77, SKIP_RETURN_CODE).
static inline bool ng_test_gpu_found(const char *suite) {
  int devices = 0;
  char desc[512];
  if (ng__cuda_devices(&devices, desc, sizeof desc) != NG_OK || devices == 0) {
    printf("skipped: no CUDA device (%s)\n", devices ? ng_last_error() : "none visible");
    return false;
  }
  printf("%s: %s\n", suite, desc);
  return true;
}

#endif
