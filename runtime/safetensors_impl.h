/* safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
 * length, a JSON header mapping tensor names to {dtype, shape, data_offsets} plus an optional
 * "__metadata__" object of string values, then the raw little-endian data. PyTorch reads them
 * with safetensors.torch.load_file. Used for checkpoints (model + optimizer state). */
#ifndef NG_SAFETENSORS_IMPL_H
#define NG_SAFETENSORS_IMPL_H

#include "npy_impl.h"

#define NG_ST_MAX_TENSORS 256
#define NG_ST_MAX_META 32

/// One tensor: a borrowed pointer to its data when writing; into the mapping when reading.
typedef struct {
  char name[128];
  ng_dtype dtype; ///< F32, F64, I32, I64, U8, I8, BOOL map to safetensors' names
  int ndim;
  int64_t shape[NG_NPY_MAX_DIMS];
  const void *data;
  size_t nbytes;
} ng_st_tensor;

typedef struct {
  char key[64];
  char value[256];
} ng_st_meta;

/// Writes `n` tensors and `n_meta` metadata entries to `path` atomically (a temporary file
/// beside it, fsync, rename). The header lists the tensors in the given order; the data section
/// holds them without gaps (the format allows none), ordered by decreasing element size, so that
/// every tensor starts at a multiple of its element size (the header is padded to 8 bytes).
/// `tensors` and `meta` are borrowed. On failure an existing `path` is left untouched.
ng_status ng__st_write(const char *path, const ng_st_tensor *tensors, int n, const ng_st_meta *meta,
                       int n_meta);

/// A read-only mapped safetensors file.
typedef struct {
  void *map;
  size_t map_len;
  int n;
  ng_st_tensor tensors[NG_ST_MAX_TENSORS];
  int n_meta;
  ng_st_meta meta[NG_ST_MAX_META];
} ng_st_file;

/// Maps and validates `path`: header length within the file, JSON well-formed, every tensor's
/// dtype known, shape non-negative, offsets inside the data section, consistent with dtype and
/// shape, non-overlapping, without gaps, and aligned to the element size. Errors name the file
/// and the tensor.
ng_status ng__st_open(ng_st_file *out, const char *path);
/// The tensor called `name`, or NULL.
const ng_st_tensor *ng__st_find(const ng_st_file *f, const char *name);
/// The metadata value of `key`, or NULL.
const char *ng__st_meta(const ng_st_file *f, const char *key);
/// Unmaps; accepts NULL and a zeroed, closed or ng__st_parse()-filled struct.
void ng__st_close(ng_st_file *f);
/// Parses a buffer holding a whole safetensors file (for the fuzz target; ng__st_open uses it).
/// `buf` is borrowed: the tensors point into it, and `out->map` stays NULL.
ng_status ng__st_parse(ng_st_file *out, const void *buf, size_t len, const char *name);

/// CRC-32 (zlib's) of `n` bytes, in chunks that zlib's uInt length can hold: the per-tensor
/// checksum a checkpoint records (runtime/trainer_ckpt.c writes and checks it, serve/ checks it).
uint32_t ng__crc32(const void *data, size_t n);

#endif /* NG_SAFETENSORS_IMPL_H */
