/* .npy reader and writer. The header is untrusted text: every step is bounds-checked. */
#include "npy_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
enum { NPY_ALIGN = 64, NPY_V1_MAX_HEADER = 65535, NPY_MAX_HEADER = 1 << 20 };

static const struct {
  const char *descr; /* without the byte-order character */
  const char *name;
  size_t size;
} DTYPES[NG_DTYPE_COUNT_] = {
    [NG_DTYPE_F32] = {"f4", "float32", 4}, [NG_DTYPE_F64] = {"f8", "float64", 8},
    [NG_DTYPE_I32] = {"i4", "int32", 4},   [NG_DTYPE_I64] = {"i8", "int64", 8},
    [NG_DTYPE_U8] = {"u1", "uint8", 1},    [NG_DTYPE_I8] = {"i1", "int8", 1},
    [NG_DTYPE_BOOL] = {"b1", "bool", 1},   [NG_DTYPE_U16] = {"u2", "uint16", 2},
};

size_t ng__dtype_size(ng_dtype dtype) {
  return (unsigned)dtype < NG_DTYPE_COUNT_ ? DTYPES[dtype].size : 0;
}

const char *ng__dtype_name(ng_dtype dtype) {
  return (unsigned)dtype < NG_DTYPE_COUNT_ ? DTYPES[dtype].name : "unknown";
}

/* NumPy's descr string ("<f4"). */
static const char *dtype_descr(ng_dtype dtype) {
  static const char *const full[NG_DTYPE_COUNT_] = {
      [NG_DTYPE_F32] = "<f4",  [NG_DTYPE_F64] = "<f8", [NG_DTYPE_I32] = "<i4",
      [NG_DTYPE_I64] = "<i8",  [NG_DTYPE_U8] = "|u1",  [NG_DTYPE_I8] = "|i1",
      [NG_DTYPE_BOOL] = "|b1", [NG_DTYPE_U16] = "<u2",
  };
  return (unsigned)dtype < NG_DTYPE_COUNT_ ? full[dtype] : "?";
}

int64_t ng__npy_count(const ng_npy_header *hdr) {
  int64_t n = 1;
  for (int i = 0; i < hdr->ndim; i++)
    n *= hdr->shape[i];
  return n;
}

/* ---- header parsing: a tiny scanner over the Python dict literal ---- */

typedef struct {
  const char *p, *end;
} scan;

static void skip_ws(scan *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
    s->p++;
}

static bool eat(scan *s, char c) {
  skip_ws(s);
  if (s->p < s->end && *s->p == c) {
    s->p++;
    return true;
  }
  return false;
}

/* A quoted Python string into buf; false when malformed or longer than cap-1. */
static bool read_str(scan *s, char *buf, size_t cap) {
  skip_ws(s);
  if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
    return false;
  char q = *s->p++;
  size_t n = 0;
  while (s->p < s->end && *s->p != q) {
    if (n + 1 >= cap)
      return false;
    buf[n++] = *s->p++;
  }
  if (s->p >= s->end)
    return false;
  s->p++;
  buf[n] = '\0';
  return true;
}

static bool read_word(scan *s, const char *word) {
  skip_ws(s);
  size_t n = strlen(word);
  if ((size_t)(s->end - s->p) >= n && memcmp(s->p, word, n) == 0) {
    s->p += n;
    return true;
  }
  return false;
}

static bool read_dim(scan *s, int64_t *out) {
  skip_ws(s);
  if (s->p >= s->end || *s->p < '0' || *s->p > '9')
    return false;
  int64_t v = 0;
  while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
    if (v > (INT64_MAX - 9) / 10)
      return false;
    v = v * 10 + (*s->p++ - '0');
  }
  if (s->p < s->end && *s->p == 'L') /* Python 2 longs */
    s->p++;
  *out = v;
  return true;
}

static ng_status parse_descr(ng_npy_header *out, const char *descr, const char *name) {
  char order = descr[0];
  const char *code = descr + 1;
  if (order != '<' && order != '|' && order != '=') {
    if (order == '>')
      return ng__err(NG_ERR_UNSUPPORTED,
                     "%s: big-endian dtype '%s'; re-save it little-endian "
                     "(numpy: arr.astype(arr.dtype.newbyteorder('<')))",
                     name, descr);
    return ng__err(NG_ERR_FORMAT, "%s: unknown dtype '%s'", name, descr);
  }
  for (int d = 0; d < NG_DTYPE_COUNT_; d++) {
    if (strcmp(code, DTYPES[d].descr) == 0) {
      if (order == '|' && DTYPES[d].size > 1)
        break;
      out->dtype = (ng_dtype)d;
      return NG_OK;
    }
  }
  return ng__err(NG_ERR_UNSUPPORTED,
                 "%s: dtype '%s' is not supported (float32, float64, int32, int64, uint8, int8, "
                 "bool are)",
                 name, descr);
}

ng_status ng__npy_parse_header(ng_npy_header *out, const void *buf, size_t len, const char *name) {
  const unsigned char *b = buf;
  memset(out, 0, sizeof *out);
  if (len < 10 || memcmp(b, NPY_MAGIC, sizeof NPY_MAGIC) != 0)
    return ng__err(NG_ERR_FORMAT, "%s: not a .npy file (bad magic); write it with numpy.save",
                   name);
  unsigned major = b[6];
  size_t hlen, pre;
  if (major == 1) {
    hlen = (size_t)b[8] | ((size_t)b[9] << 8);
    pre = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12)
      return ng__err(NG_ERR_FORMAT, "%s: truncated .npy header", name);
    hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
    pre = 12;
  } else {
    return ng__err(NG_ERR_UNSUPPORTED, "%s: .npy format version %u.%u is not supported", name,
                   major, b[7]);
  }
  if (hlen > NPY_MAX_HEADER || pre + hlen > len)
    return ng__err(NG_ERR_FORMAT, "%s: .npy header of %zu bytes runs past the end of the file",
                   name, hlen);

  scan s = {(const char *)b + pre, (const char *)b + pre + hlen};
  bool have_descr = false, have_order = false, have_shape = false;
  char descr[16] = {0};
  if (!eat(&s, '{'))
    return ng__err(NG_ERR_FORMAT, "%s: .npy header is not a dict", name);
  while (!eat(&s, '}')) {
    char key[32];
    if (!read_str(&s, key, sizeof key) || !eat(&s, ':'))
      return ng__err(NG_ERR_FORMAT, "%s: malformed .npy header", name);
    if (strcmp(key, "descr") == 0) {
      if (!read_str(&s, descr, sizeof descr) || descr[0] == '\0')
        return ng__err(NG_ERR_UNSUPPORTED,
                       "%s: structured or unreadable dtype in .npy header; save a plain "
                       "numeric array",
                       name);
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (read_word(&s, "False")) {
        have_order = true;
      } else if (read_word(&s, "True")) {
        return ng__err(NG_ERR_UNSUPPORTED,
                       "%s: Fortran-order array; save it in C order (numpy.ascontiguousarray)",
                       name);
      } else {
        return ng__err(NG_ERR_FORMAT, "%s: malformed fortran_order in .npy header", name);
      }
    } else if (strcmp(key, "shape") == 0) {
      if (!eat(&s, '('))
        return ng__err(NG_ERR_FORMAT, "%s: malformed shape in .npy header", name);
      out->ndim = 0;
      while (!eat(&s, ')')) {
        if (out->ndim == NG_NPY_MAX_DIMS)
          return ng__err(NG_ERR_UNSUPPORTED, "%s: more than %d dimensions", name, NG_NPY_MAX_DIMS);
        if (!read_dim(&s, &out->shape[out->ndim]))
          return ng__err(NG_ERR_FORMAT, "%s: malformed shape in .npy header", name);
        out->ndim++;
        if (!eat(&s, ',')) {
          if (!eat(&s, ')'))
            return ng__err(NG_ERR_FORMAT, "%s: malformed shape in .npy header", name);
          break;
        }
      }
      have_shape = true;
    } else {
      return ng__err(NG_ERR_FORMAT, "%s: unknown key '%s' in .npy header", name, key);
    }
    if (!eat(&s, ',')) {
      if (!eat(&s, '}'))
        return ng__err(NG_ERR_FORMAT, "%s: malformed .npy header", name);
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    return ng__err(NG_ERR_FORMAT, "%s: .npy header lacks descr, fortran_order or shape", name);
  NG_CHECK(parse_descr(out, descr, name));

  /* The element count must fit int64 too (ng__npy_count), even where a zero dimension makes
   * the byte count small: (2, 2^62, 0) is 0 bytes but its partial products overflow. */
  size_t nbytes = ng__dtype_size(out->dtype);
  int64_t count = 1;
  for (int i = 0; i < out->ndim; i++) {
    if (!ng__mul_ok(nbytes, (size_t)out->shape[i], &nbytes) ||
        __builtin_mul_overflow(count, out->shape[i], &count))
      return ng__err(NG_ERR_FORMAT, "%s: shape too large", name);
  }
  out->nbytes = nbytes;
  out->data_offset = pre + hlen;
  /* numpy pads the header so that the data is aligned (to 16 or 64 bytes); a misaligned start
   * would make every typed access through the mapping undefined behaviour. */
  if (out->data_offset % ng__dtype_size(out->dtype) != 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the data starts at byte %zu, not a multiple of its %zu-byte elements; "
                   "re-save it with numpy.save",
                   name, out->data_offset, ng__dtype_size(out->dtype));
  return NG_OK;
}

/* ---- mapping ---- */

ng_status ng__npy_map(ng_npy *out, const char *path, bool populate) {
  memset(out, 0, sizeof *out);
  void *map;
  size_t len;
  /* Watched: a dataset array truncated under a run is reported, not a crash (ng__map_verify). */
  NG_CHECK(ng__file_map_watched(&map, &len, path, 10, "a .npy file", NULL, populate));
  ng_status st2 = ng__npy_parse_header(&out->hdr, map, len, path);
  if (st2 == NG_OK) {
    size_t want = out->hdr.data_offset + out->hdr.nbytes;
    if (want < out->hdr.data_offset || len < want)
      st2 = ng__err(NG_ERR_FORMAT,
                    "%s: truncated: the header implies %zu data bytes but the file holds %zu; "
                    "re-create the file",
                    path, out->hdr.nbytes, len - NG_MIN(len, out->hdr.data_offset));
    else if (len > want)
      st2 = ng__err(NG_ERR_FORMAT,
                    "%s: %zu unexpected bytes after the data; the file is not one .npy array", path,
                    len - want);
  }
  if (st2 != NG_OK) {
    ng__map_unwatch(map);
    munmap(map, len);
    memset(out, 0, sizeof *out);
    return st2;
  }
  out->map = map;
  out->map_len = len;
  out->data = (char *)map + out->hdr.data_offset;
  return NG_OK;
}

/* Formats a header padded with spaces and a final newline so that the data starts at a
 * multiple of NPY_ALIGN bytes, or exactly at `fixed_total` when that is non-zero (to rewrite a
 * header in place). Returns the total prefix length (magic to data), 0 when it does not fit. */
static size_t format_header(char *buf, size_t cap, ng_dtype dtype, int ndim, const int64_t *shape,
                            size_t fixed_total) {
  char dict[256];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   dtype_descr(dtype));
  for (int i = 0; i < ndim; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i],
                  ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  size_t pre = 10; /* version 1.0 is enough: our dicts are far below 64 KiB */
  size_t total = (pre + (size_t)n + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
  if (fixed_total) {
    if (fixed_total < pre + (size_t)n + 1)
      return 0;
    total = fixed_total;
  }
  if (total > cap)
    return 0;
  size_t hlen = total - pre;
  memcpy(buf, NPY_MAGIC, sizeof NPY_MAGIC);
  buf[6] = 1;
  buf[7] = 0;
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memcpy(buf + pre, dict, (size_t)n);
  memset(buf + pre + n, ' ', hlen - (size_t)n - 1);
  buf[total - 1] = '\n';
  return total;
}

ng_status ng__npy_create(ng_npy *out, const char *path, ng_dtype dtype, int ndim,
                         const int64_t *shape) {
  memset(out, 0, sizeof *out);
  if (ndim < 0 || ndim > NG_NPY_MAX_DIMS || (unsigned)dtype >= NG_DTYPE_COUNT_)
    return ng__err(NG_ERR_INVALID_ARG, "%s: bad dtype or rank", path);
  size_t nbytes = ng__dtype_size(dtype);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || !ng__mul_ok(nbytes, (size_t)shape[i], &nbytes))
      return ng__err(NG_ERR_INVALID_ARG, "%s: bad shape", path);
  }
  char hdr[512];
  size_t pre = format_header(hdr, sizeof hdr, dtype, ndim, shape, 0);
  if (pre == 0)
    return ng__err(NG_ERR_INTERNAL, "%s: .npy header does not fit", path);
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return ng__err_errno(errno == EEXIST ? NG_ERR_EXISTS : NG_ERR_IO, errno, "%s: create", path);
  size_t len = pre + nbytes;
  ng_status st = NG_OK;
  if (pwrite(fd, hdr, pre, 0) != (ssize_t)pre) {
    st = ng__err_errno(NG_ERR_IO, errno, "%s: write header", path);
  } else if (ftruncate(fd, (off_t)len) != 0) {
    st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot size the file to %zu bytes", path, len);
  } else {
    /* Reserve the blocks now, so that a full disk is an error here and not SIGBUS later. */
    int e = posix_fallocate(fd, 0, (off_t)len);
    if (e != 0 && e != EOPNOTSUPP && e != EINVAL)
      st = ng__err_errno(NG_ERR_IO, e, "%s: cannot reserve %zu bytes (disk full?)", path, len);
  }
  void *map = MAP_FAILED;
  if (st == NG_OK) {
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
      st = ng__err_errno(NG_ERR_IO, errno, "%s: mmap", path);
  }
  close(fd);
  if (st != NG_OK) {
    unlink(path);
    return st;
  }
  out->hdr.dtype = dtype;
  out->hdr.ndim = ndim;
  for (int i = 0; i < ndim; i++)
    out->hdr.shape[i] = shape[i];
  out->hdr.data_offset = pre;
  out->hdr.nbytes = nbytes;
  out->map = map;
  out->map_len = len;
  out->data = (char *)map + pre;
  out->writable = true;
  return NG_OK;
}

ng_status ng__npy_sync(ng_npy *npy, const char *path) {
  if (npy->map && npy->writable && msync(npy->map, npy->map_len, MS_SYNC) != 0)
    return ng__err_errno(NG_ERR_IO, errno, "%s: msync", path);
  return NG_OK;
}

ng_status ng__npy_shrink(ng_npy *npy, const char *path, int64_t new_dim0) {
  ng_npy_header *h = &npy->hdr;
  if (!npy->writable || h->ndim < 1 || new_dim0 < 0 || new_dim0 > h->shape[0])
    return ng__err(NG_ERR_INTERNAL, "%s: bad shrink to %lld rows", path, (long long)new_dim0);
  size_t row = h->shape[0] ? h->nbytes / (size_t)h->shape[0] : 0;
  int64_t shape[NG_NPY_MAX_DIMS];
  memcpy(shape, h->shape, sizeof shape);
  shape[0] = new_dim0;
  char hdr[512];
  if (format_header(hdr, sizeof hdr, h->dtype, h->ndim, shape, h->data_offset) == 0)
    return ng__err(NG_ERR_INTERNAL, "%s: header does not fit when shrinking", path);
  memcpy(npy->map, hdr, h->data_offset);
  if (row == 0) { /* zero rows before: the row size comes from the other dimensions */
    row = ng__dtype_size(h->dtype);
    for (int i = 1; i < h->ndim; i++)
      row *= (size_t)h->shape[i];
  }
  size_t len = h->data_offset + row * (size_t)new_dim0;
  ng_status st = ng__npy_sync(npy, path);
  if (st != NG_OK)
    return st;
  munmap(npy->map, npy->map_len);
  npy->map = NULL;
  if (truncate(path, (off_t)len) != 0)
    return ng__err_errno(NG_ERR_IO, errno, "%s: truncate", path);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return ng__err_errno(NG_ERR_IO, errno, "%s: reopen", path);
  void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED)
    return ng__err_errno(NG_ERR_IO, e, "%s: mmap", path);
  h->shape[0] = new_dim0;
  h->nbytes = row * (size_t)new_dim0;
  npy->map = map;
  npy->map_len = len;
  npy->data = (char *)map + h->data_offset;
  return NG_OK;
}

void ng__npy_close(ng_npy *npy) {
  if (npy && npy->map) {
    ng__map_unwatch(npy->map);
    munmap(npy->map, npy->map_len);
  }
  if (npy)
    memset(npy, 0, sizeof *npy);
}

ng_status ng__npy_write(const char *path, ng_dtype dtype, int ndim, const int64_t *shape,
                        const void *data) {
  ng_npy npy;
  NG_CHECK(ng__npy_create(&npy, path, dtype, ndim, shape));
  if (npy.hdr.nbytes)
    memcpy(npy.data, data, npy.hdr.nbytes);
  ng_status st = ng__npy_sync(&npy, path);
  ng__npy_close(&npy);
  return st;
}

const char *ng__shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < cap)
    snprintf(buf + n, cap - n, "]");
  return buf;
}
