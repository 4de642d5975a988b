/* libFuzzer target: arbitrary bytes as a .npy header (ng__npy_parse_header) and as a whole file
 * (ng__npy_map through a memfd). Beyond "no crash", it traps when an accepted array breaks an
 * invariant that callers rely on. */
#include "npy_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What every accepted header must satisfy: a known dtype and rank, a shape whose element count
 * and byte count are exact, and a data offset inside the bytes seen and aligned to the dtype. */
static void check_header(const ng_npy_header *h, size_t len) {
  if ((unsigned)h->dtype >= NG_DTYPE_COUNT_ || h->ndim < 0 || h->ndim > NG_NPY_MAX_DIMS)
    __builtin_trap();
  size_t bytes = ng__dtype_size(h->dtype);
  for (int i = 0; i < h->ndim; i++) {
    if (h->shape[i] < 0)
      __builtin_trap();
    bytes *= (size_t)h->shape[i];
  }
  if (bytes != h->nbytes || (uint64_t)ng__npy_count(h) * ng__dtype_size(h->dtype) != h->nbytes)
    __builtin_trap();
  if (h->data_offset > len || h->data_offset % ng__dtype_size(h->dtype) != 0)
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ng_npy_header h;
  if (ng__npy_parse_header(&h, data, size, "fuzz.npy") == NG_OK)
    check_header(&h, size);

  /* The same bytes as a file. A memfd is a regular file that needs no folder or cleanup. */
  int fd = memfd_create("fuzz.npy", MFD_CLOEXEC);
  if (fd < 0)
    return 0;
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0)
      break;
    done += (size_t)n;
  }
  if (done == size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ng_npy npy;
    if (ng__npy_map(&npy, path, false) == NG_OK) {
      check_header(&npy.hdr, size);
      /* The file holds exactly the header and the data, and the mapping shows those bytes. */
      if (npy.map_len != size || npy.hdr.data_offset + npy.hdr.nbytes != size ||
          (const char *)npy.data != (const char *)npy.map + npy.hdr.data_offset)
        __builtin_trap();
      if (npy.hdr.nbytes && memcmp(npy.data, data + npy.hdr.data_offset, npy.hdr.nbytes) != 0)
        __builtin_trap();
      ng__npy_close(&npy);
    }
  }
  close(fd);
  return 0;
}
