/* NumPy .npy files (format 1.0/2.0/3.0, little-endian, C order): parse, memory-map, create. */
#ifndef NG_NPY_IMPL_H
#define NG_NPY_IMPL_H

#include "core_impl.h"

#define NG_NPY_MAX_DIMS 4

typedef enum {
  NG_DTYPE_F32 = 0,
  NG_DTYPE_F64,
  NG_DTYPE_I32,
  NG_DTYPE_I64,
  NG_DTYPE_U8,
  NG_DTYPE_I8,
  NG_DTYPE_BOOL,
  NG_DTYPE_U16, ///< bf16 feature tables (features.bf16.npy) are stored as uint16
  NG_DTYPE_COUNT_
} ng_dtype;

/// Bytes per element of `dtype`.
size_t ng__dtype_size(ng_dtype dtype);
/// A readable name ("float32").
const char *ng__dtype_name(ng_dtype dtype);

/// A parsed .npy header.
typedef struct {
  ng_dtype dtype;
  int ndim;
  int64_t shape[NG_NPY_MAX_DIMS];
  size_t data_offset; ///< bytes from the start of the file to the first element
  size_t nbytes;      ///< bytes of data the shape and dtype imply
} ng_npy_header;

/// Parses the header at the start of `buf` (`len` bytes available, the whole file or at least
/// its header). Rejects anything this library does not read: big-endian or Fortran-order data,
/// unknown dtypes, more than NG_NPY_MAX_DIMS dimensions, negative or overflowing shapes.
/// `name` is the file name used in error messages.
ng_status ng__npy_parse_header(ng_npy_header *out, const void *buf, size_t len, const char *name);

/// A memory-mapped .npy file: `data` points at the first element inside the mapping.
typedef struct {
  ng_npy_header hdr;
  void *data;
  void *map;
  size_t map_len;
  bool writable;
} ng_npy;

/// Maps `path` read-only and validates its header and size (the file must hold exactly the
/// data the header implies). `populate` pre-faults the mapping.
ng_status ng__npy_map(ng_npy *out, const char *path, bool populate);
/// Creates `path` (which must not exist) sized for an array of `dtype` and `shape`, maps it
/// read-write and returns it with zero-filled data. The data offset is 64-byte aligned.
ng_status ng__npy_create(ng_npy *out, const char *path, ng_dtype dtype, int ndim,
                         const int64_t *shape);
/// Flushes a writable mapping to the file (msync) before it is renamed into place.
ng_status ng__npy_sync(ng_npy *npy, const char *path);
/// Shrinks the first dimension of a writable array to `new_dim0` rows (rewrites the header in
/// place, truncates the file and remaps it). Used when deduplication makes an array shorter.
ng_status ng__npy_shrink(ng_npy *npy, const char *path, int64_t new_dim0);
/// Unmaps; accepts a zeroed or already closed struct.
void ng__npy_close(ng_npy *npy);
/// Number of elements (product of the shape; 1 for a scalar).
int64_t ng__npy_count(const ng_npy_header *hdr);
/// Writes a whole array from memory to a new file `path` (create + copy + sync + close).
ng_status ng__npy_write(const char *path, ng_dtype dtype, int ndim, const int64_t *shape,
                        const void *data);

/// "[2, 3]": `shape` [ndim] as text for messages, into buf[cap] (cut short if it does not fit);
/// returns buf.
const char *ng__shape_text(char *buf, size_t cap, int ndim, const int64_t *shape);

#endif /* NG_NPY_IMPL_H */
