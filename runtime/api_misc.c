/* Small public calls the command needs besides training (so that it includes only neargnn.h):
 * writing .npy arrays, the scheduler's telemetry header, the CUDA devices this build sees. */
#include "npy_impl.h"
#include "ctrl_impl.h"
#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *ng_telemetry_decisions_header(void) {
  return ng__ctrl_log_header();
}

ng_status ng_npy_save(const char *path, int is_float, ng_int_type type, int ndim,
                      const int64_t *shape, const void *data) {
  if (!path || !*path || !shape || ndim < 1 || ndim > 2 || (unsigned)type > NG_INT64)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_npy_save: a path, 1 or 2 dimensions and an element type are needed");
  char *tmp;
  NG_CHECK(ng__atomic_begin(&tmp, path));
  const ng_dtype dtype = is_float ? NG_DTYPE_F32 : type == NG_INT64 ? NG_DTYPE_I64 : NG_DTYPE_I32;
  return ng__atomic_end(tmp, path, ng__npy_write(tmp, dtype, ndim, shape, data));
}

ng_status ng_file_write(const char *path, const void *data, size_t len) {
  if (!path || !*path || (len > 0 && !data))
    return ng__err(NG_ERR_INVALID_ARG, "ng_file_write: a path and the data are needed");
  return ng__atomic_write(path, data, len);
}

ng_status ng_cuda_devices(int *count, char *desc, size_t cap) {
  if (!count || (cap > 0 && !desc))
    return ng__err(NG_ERR_INVALID_ARG, "ng_cuda_devices: count or desc is NULL");
  *count = 0;
  if (cap > 0)
    desc[0] = '\0';
#ifdef NG_HAVE_CUDA
  return ng__cuda_devices(count, desc, cap);
#else
  return ng__err(NG_ERR_UNSUPPORTED, "this build of neargnn has no CUDA backend");
#endif
}

int ng_has_cuda(void) {
#ifdef NG_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}
