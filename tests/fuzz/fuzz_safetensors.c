/* libFuzzer target: parses arbitrary bytes as a safetensors file and, when they are accepted,
 * checks what the reader promises: every tensor's data inside the buffer, aligned, of the size
 * its dtype and shape imply, names unique and findable. A broken promise traps.
 * (The fuzz preset instruments the whole library, so coverage reaches into the reader.) */
#include "safetensors_impl.h"

#include <stdint.h>
#include <string.h>

/* Bytes of a tensor of `shape`, computed independently of the reader; false on overflow. */
static bool shape_bytes(const int64_t *shape, int ndim, size_t esize, uint64_t *nbytes) {
  uint64_t bytes = esize;
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || __builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes))
      return false;
  *nbytes = bytes;
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ng_st_file file;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ng__st_parse(&file, data, size, "fuzz input") != NG_OK) {
    if (file.n != 0 || file.n_meta != 0 || ng_last_error()[0] == '\0')
      __builtin_trap();
    return 0;
  }
  const unsigned char *lo = data, *hi = data + size;
  volatile unsigned sum = 0;
  for (int i = 0; i < file.n; i++) {
    const ng_st_tensor *t = &file.tensors[i];
    const unsigned char *p = t->data;
    size_t esize = ng__dtype_size(t->dtype);
    uint64_t want;
    if (esize == 0 || t->ndim < 0 || t->ndim > NG_NPY_MAX_DIMS ||
        !shape_bytes(t->shape, t->ndim, esize, &want) || want != t->nbytes || p < lo ||
        t->nbytes > (size_t)(hi - p) || (uintptr_t)p % esize != 0 ||
        memchr(t->name, '\0', sizeof t->name) == NULL || ng__st_find(&file, t->name) != t)
      __builtin_trap();
    for (size_t k = 0; k < t->nbytes; k++)
      sum += p[k];
    if (t->dtype == NG_DTYPE_BOOL)
      for (size_t k = 0; k < t->nbytes; k++)
        if (p[k] > 1)
          __builtin_trap();
  }
  for (int i = 0; i < file.n_meta; i++) {
    if (memchr(file.meta[i].key, '\0', sizeof file.meta[i].key) == NULL ||
        memchr(file.meta[i].value, '\0', sizeof file.meta[i].value) == NULL ||
        ng__st_meta(&file, file.meta[i].key) != file.meta[i].value)
      __builtin_trap();
  }
  ng__st_close(&file);
  (void)sum;
  return 0;
}
