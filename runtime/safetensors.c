/* safetensors reader and writer. The header is untrusted JSON: every field is checked before a
 * pointer into the data is formed, so a hostile file fails with a message, never a crash. */
#include "safetensors_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

enum {
  ST_PREFIX = 8, /* the little-endian header length before the JSON */
  ST_ALIGN = 8,  /* the writer starts the data section at a multiple of this */
  /* A header of NG_ST_MAX_TENSORS entries and NG_ST_MAX_META metadata entries stays below 1 MiB
   * even with every string character escaped as \uXXXX (writers produce a few tens of KiB); the
   * cap bounds what a hostile header can make cJSON allocate to a few tens of MiB. */
  ST_MAX_HEADER = 1 << 20,
};

/* JSON numbers are doubles: from 2^53 on, not every integer has one. */
#define ST_MAX_INT 9007199254740992.0

static const char META_KEY[] = "__metadata__";

static const char *const ST_DTYPE[NG_DTYPE_COUNT_] = {
    [NG_DTYPE_F32] = "F32",   [NG_DTYPE_F64] = "F64", [NG_DTYPE_I32] = "I32",
    [NG_DTYPE_I64] = "I64",   [NG_DTYPE_U8] = "U8",   [NG_DTYPE_I8] = "I8",
    [NG_DTYPE_BOOL] = "BOOL", [NG_DTYPE_U16] = "U16",
};

/* safetensors dtypes this library does not compute with, named so that the error says
 * "unsupported" rather than "unknown". */
static const char *const ST_OTHER_DTYPES[] = {"F16", "BF16", "F8_E4M3", "F8_E5M2",
                                              "I16", "U32",  "U64",     "C64"};

#define ST_DTYPE_LIST "F32, F64, I32, I64, U8, I8 and BOOL"

/* ---- shared checks ---- */

/* Whether `s` (`n` bytes) is well-formed UTF-8: no overlong forms, surrogates or code points
 * past U+10FFFF. On failure *bad is the offset of the first offending byte. */
static bool utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0)
        lo = 0xA0; /* overlong */
      else if (c == 0xED)
        hi = 0x9F; /* UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0)
        lo = 0x90; /* overlong */
      else if (c == 0xF4)
        hi = 0x8F; /* past U+10FFFF */
    } else {
      *bad = i;
      return false;
    }
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) {
      *bad = i;
      return false;
    }
    for (size_t k = 2; k < len; k++) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) {
        *bad = i;
        return false;
      }
    }
    i += len;
  }
  return true;
}

/* The number of elements and bytes of `ndim` dimensions of `esize`-byte elements; false when
 * either overflows (partial products too: [2, 2^62, 0] holds no byte but 2^63 elements). */
static bool shape_bytes(const int64_t *shape, int ndim, size_t esize, uint64_t *nbytes) {
  uint64_t count = 1, bytes = esize;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || __builtin_mul_overflow(count, (uint64_t)shape[i], &count) ||
        __builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes))
      return false;
  }
  if (count > INT64_MAX || bytes > SIZE_MAX)
    return false;
  *nbytes = bytes;
  return true;
}

/* ---- reading ---- */

static const char *json_kind(const cJSON *item) {
  if (cJSON_IsString(item))
    return "string";
  if (cJSON_IsNumber(item))
    return "number";
  if (cJSON_IsBool(item))
    return "boolean";
  if (cJSON_IsNull(item))
    return "null";
  if (cJSON_IsArray(item))
    return "array";
  return "object";
}

/* A JSON number that is an integer in [0, 2^53): what an offset or a dimension must be. */
static bool json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item))
    return false;
  double d = item->valuedouble;
  if (!(d >= 0 && d < ST_MAX_INT) || (double)(uint64_t)d != d)
    return false;
  *out = (uint64_t)d;
  return true;
}

static ng_status parse_dtype(ng_dtype *out, const cJSON *item, const char *name,
                             const char *tensor) {
  if (!cJSON_IsString(item) || !item->valuestring)
    return ng__err(NG_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is %s, not a string such as \"F32\"",
                   name, tensor, item ? json_kind(item) : "missing");
  const char *s = item->valuestring;
  for (int d = 0; d < NG_DTYPE_COUNT_; d++) {
    if (strcmp(s, ST_DTYPE[d]) == 0) {
      *out = (ng_dtype)d;
      return NG_OK;
    }
  }
  for (size_t i = 0; i < NG_ARRAY_LEN(ST_OTHER_DTYPES); i++) {
    if (strcmp(s, ST_OTHER_DTYPES[i]) == 0)
      return ng__err(NG_ERR_UNSUPPORTED,
                     "%s: tensor '%s': dtype %s is not supported (" ST_DTYPE_LIST
                     " are); convert the tensor before saving it",
                     name, tensor, s);
  }
  return ng__err(NG_ERR_FORMAT,
                 "%s: tensor '%s': unknown dtype \"%.32s\"; the supported ones are " ST_DTYPE_LIST,
                 name, tensor, s);
}

static ng_status parse_shape(ng_st_tensor *t, const cJSON *item, const char *name) {
  if (!cJSON_IsArray(item))
    return ng__err(NG_ERR_FORMAT, "%s: tensor '%s': \"shape\" is %s, not an array of sizes", name,
                   t->name, item ? json_kind(item) : "missing");
  int ndim = 0;
  const cJSON *dim;
  cJSON_ArrayForEach(dim, item) {
    if (ndim == NG_NPY_MAX_DIMS)
      return ng__err(NG_ERR_UNSUPPORTED,
                     "%s: tensor '%s' has %d dimensions; at most %d are supported (reshape it "
                     "before saving)",
                     name, t->name, cJSON_GetArraySize(item), NG_NPY_MAX_DIMS);
    uint64_t v;
    if (!json_uint(dim, &v))
      return ng__err(NG_ERR_FORMAT,
                     "%s: tensor '%s': dimension %d of \"shape\" is not an integer in [0, 2^53)",
                     name, t->name, ndim);
    t->shape[ndim++] = (int64_t)v;
  }
  t->ndim = ndim;
  return NG_OK;
}

/* Parses one tensor entry; `data_len` is the size of the data section. */
static ng_status parse_tensor(ng_st_tensor *t, uint64_t *begin, uint64_t *end, const char *key,
                              const cJSON *item, size_t data_len, const char *name) {
  size_t klen = strlen(key);
  if (klen >= sizeof t->name)
    return ng__err(NG_ERR_FORMAT,
                   "%s: tensor name '%.40s...' is %zu bytes long; at most %zu are supported", name,
                   key, klen, sizeof t->name - 1);
  memcpy(t->name, key, klen + 1);
  if (!cJSON_IsObject(item))
    return ng__err(NG_ERR_FORMAT,
                   "%s: tensor '%s': entry is %s, not an object with \"dtype\", \"shape\" and "
                   "\"data_offsets\"",
                   name, t->name, json_kind(item));
  NG_CHECK(parse_dtype(&t->dtype, cJSON_GetObjectItemCaseSensitive(item, "dtype"), name, t->name));
  NG_CHECK(parse_shape(t, cJSON_GetObjectItemCaseSensitive(item, "shape"), name));

  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
      !json_uint(cJSON_GetArrayItem(offs, 0), begin) ||
      !json_uint(cJSON_GetArrayItem(offs, 1), end))
    return ng__err(NG_ERR_FORMAT,
                   "%s: tensor '%s': \"data_offsets\" is not an array [begin, end] of two integers "
                   "in [0, 2^53)",
                   name, t->name);
  if (*end < *begin)
    return ng__err(NG_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                   t->name, (unsigned long long)*begin, (unsigned long long)*end);
  if (*end > data_len)
    return ng__err(NG_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the %zu-byte "
                   "data section; the file is truncated or corrupt",
                   name, t->name, (unsigned long long)*begin, (unsigned long long)*end, data_len);
  size_t esize = ng__dtype_size(t->dtype);
  uint64_t want;
  if (!shape_bytes(t->shape, t->ndim, esize, &want))
    return ng__err(NG_ERR_FORMAT, "%s: tensor '%s': shape too large", name, t->name);
  char dims[128];
  if (*end - *begin != want)
    return ng__err(NG_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes but shape %s of %s "
                   "needs %llu; the file is corrupt",
                   name, t->name, (unsigned long long)*begin, (unsigned long long)*end,
                   (unsigned long long)(*end - *begin),
                   ng__shape_text(dims, sizeof dims, t->ndim, t->shape), ST_DTYPE[t->dtype],
                   (unsigned long long)want);
  t->nbytes = (size_t)want;
  return NG_OK;
}

static ng_status parse_meta(ng_st_file *out, const cJSON *obj, const char *name) {
  if (!cJSON_IsObject(obj))
    return ng__err(NG_ERR_FORMAT, "%s: \"%s\" is %s, not an object of strings", name, META_KEY,
                   json_kind(obj));
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    const char *key = item->string ? item->string : "";
    if (out->n_meta == NG_ST_MAX_META)
      return ng__err(NG_ERR_FORMAT, "%s: more than %d metadata entries; at most %d are supported",
                     name, NG_ST_MAX_META, NG_ST_MAX_META);
    ng_st_meta *m = &out->meta[out->n_meta];
    if (strlen(key) >= sizeof m->key)
      return ng__err(NG_ERR_FORMAT, "%s: metadata key '%.40s...' is longer than %zu bytes", name,
                     key, sizeof m->key - 1);
    if (!cJSON_IsString(item) || !item->valuestring)
      return ng__err(NG_ERR_FORMAT,
                     "%s: metadata value of '%s' is %s; safetensors metadata values are strings",
                     name, key, json_kind(item));
    if (strlen(item->valuestring) >= sizeof m->value)
      return ng__err(NG_ERR_FORMAT, "%s: metadata value of '%s' is longer than %zu bytes", name,
                     key, sizeof m->value - 1);
    for (int i = 0; i < out->n_meta; i++) {
      if (strcmp(out->meta[i].key, key) == 0)
        return ng__err(NG_ERR_FORMAT, "%s: metadata key '%s' appears twice", name, key);
    }
    ng__strlcpy(m->key, key, sizeof m->key);
    ng__strlcpy(m->value, item->valuestring, sizeof m->value);
    out->n_meta++;
  }
  return NG_OK;
}

typedef struct {
  uint64_t begin, end;
  int idx;
} st_span;

static int span_cmp(const void *a, const void *b) {
  const st_span *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

/* The tensors must tile the data section exactly, as the reference implementation demands: no
 * overlap (two tensors aliasing one buffer), no gap and no trailing bytes (room for a second,
 * hidden payload). */
static ng_status check_layout(const ng_st_file *f, st_span *spans, size_t data_len,
                              const char *name) {
  qsort(spans, (size_t)f->n, sizeof *spans, span_cmp);
  uint64_t pos = 0;
  for (int i = 0; i < f->n; i++) {
    const st_span *s = &spans[i];
    if (s->begin < pos)
      return ng__err(NG_ERR_FORMAT,
                     "%s: tensor '%s' (data_offsets [%llu, %llu]) overlaps tensor '%s' (which ends "
                     "at %llu)",
                     name, f->tensors[s->idx].name, (unsigned long long)s->begin,
                     (unsigned long long)s->end, f->tensors[spans[i - 1].idx].name,
                     (unsigned long long)pos);
    if (s->begin > pos)
      return ng__err(NG_ERR_FORMAT,
                     "%s: %llu unused bytes before tensor '%s' (data_offsets [%llu, %llu]); the "
                     "format allows no gaps between tensors",
                     name, (unsigned long long)(s->begin - pos), f->tensors[s->idx].name,
                     (unsigned long long)s->begin, (unsigned long long)s->end);
    pos = s->end;
  }
  if (pos != data_len)
    return ng__err(NG_ERR_FORMAT,
                   "%s: %llu bytes after the last tensor's data; the file is not one safetensors "
                   "file",
                   name, (unsigned long long)(data_len - pos));
  return NG_OK;
}

static ng_status parse_header(ng_st_file *out, const char *text, size_t hlen,
                              const unsigned char *data, size_t data_len, const char *name) {
  /* JSON allows no raw control character; rejecting them first also keeps NUL bytes (which
   * would cut cJSON's strings short) out of names. */
  for (size_t i = 0; i < hlen; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return ng__err(NG_ERR_FORMAT,
                     "%s: header byte %zu is a control character (0x%02x), not JSON text; not a "
                     "safetensors file",
                     name, i, c);
  }
  size_t bad = 0;
  if (!utf8_valid((const unsigned char *)text, hlen, &bad))
    return ng__err(NG_ERR_FORMAT, "%s: header byte %zu is not valid UTF-8; not a safetensors file",
                   name, bad);
  const char *end = text;
  cJSON *root = cJSON_ParseWithLengthOpts(text, hlen, &end, false);
  if (!root)
    return ng__err(NG_ERR_FORMAT, "%s: the header is not valid JSON (error near header byte %zu)",
                   name, (size_t)(end - text));
  ng_status st = NG_OK;
  st_span spans[NG_ST_MAX_TENSORS];
  for (const char *p = end; p < text + hlen; p++) {
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      st = ng__err(NG_ERR_FORMAT,
                   "%s: unexpected text after the header's JSON at header byte %zu; only "
                   "whitespace may pad it",
                   name, (size_t)(p - text));
      goto cleanup;
    }
  }
  if (!cJSON_IsObject(root)) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s: the header is a JSON %s, not an object mapping tensor names to entries", name,
                 json_kind(root));
    goto cleanup;
  }
  bool have_meta = false;
  const cJSON *item;
  cJSON_ArrayForEach(item, root) {
    const char *key = item->string ? item->string : "";
    if (strcmp(key, META_KEY) == 0) {
      if (have_meta) {
        st = ng__err(NG_ERR_FORMAT, "%s: \"%s\" appears twice", name, META_KEY);
        goto cleanup;
      }
      have_meta = true;
      NG_CHECK_GOTO(st, parse_meta(out, item, name), cleanup);
      continue;
    }
    if (out->n == NG_ST_MAX_TENSORS) {
      st = ng__err(NG_ERR_FORMAT, "%s: more than %d tensors; at most %d are supported", name,
                   NG_ST_MAX_TENSORS, NG_ST_MAX_TENSORS);
      goto cleanup;
    }
    ng_st_tensor *t = &out->tensors[out->n];
    st_span *s = &spans[out->n];
    NG_CHECK_GOTO(st, parse_tensor(t, &s->begin, &s->end, key, item, data_len, name), cleanup);
    for (int i = 0; i < out->n; i++) {
      if (strcmp(out->tensors[i].name, t->name) == 0) {
        st = ng__err(NG_ERR_FORMAT, "%s: tensor '%s' appears twice", name, t->name);
        goto cleanup;
      }
    }
    /* A misaligned tensor would make every typed access through the pointer undefined. */
    t->data = data + s->begin;
    size_t esize = ng__dtype_size(t->dtype);
    if ((uintptr_t)t->data % esize != 0) {
      /* The file's byte, not only the data offset: a header whose length leaves the data section
       * misaligned misplaces a tensor at data offset 0 too. */
      st = ng__err(NG_ERR_FORMAT,
                   "%s: tensor '%s' starts at byte %llu of the file (data offset %llu after a "
                   "%zu-byte header), not aligned to its %zu-byte elements; re-save the file with "
                   "safetensors",
                   name, t->name, (unsigned long long)(8 + hlen + s->begin),
                   (unsigned long long)s->begin, hlen, esize);
      goto cleanup;
    }
    /* A C bool holding anything but 0 or 1 is undefined behaviour to read. */
    if (t->dtype == NG_DTYPE_BOOL) {
      const unsigned char *v = t->data;
      for (size_t i = 0; i < t->nbytes; i++) {
        if (v[i] > 1) {
          st = ng__err(NG_ERR_FORMAT, "%s: tensor '%s': BOOL element %zu is %u, not 0 or 1", name,
                       t->name, i, v[i]);
          goto cleanup;
        }
      }
    }
    s->idx = out->n++;
  }
  st = check_layout(out, spans, data_len, name);
cleanup:
  cJSON_Delete(root);
  return st;
}

ng_status ng__st_parse(ng_st_file *out, const void *buf, size_t len, const char *name) {
  memset(out, 0, sizeof *out);
  if (!name)
    name = "safetensors buffer";
  const unsigned char *b = buf;
  if (!b || len < ST_PREFIX)
    return ng__err(NG_ERR_FORMAT,
                   "%s: %zu bytes is too short for a safetensors file (it starts with an 8-byte "
                   "header length); was it written completely?",
                   name, b ? len : 0);
  uint64_t hlen = 0;
  for (int i = 0; i < ST_PREFIX; i++)
    hlen |= (uint64_t)b[i] << (8 * i);
  if (hlen > ST_MAX_HEADER)
    return ng__err(NG_ERR_FORMAT,
                   "%s: header length %llu exceeds the limit of %d bytes (a header of %d tensors "
                   "needs far less); not a safetensors file",
                   name, (unsigned long long)hlen, ST_MAX_HEADER, NG_ST_MAX_TENSORS);
  if (hlen > len - ST_PREFIX)
    return ng__err(NG_ERR_FORMAT,
                   "%s: header length %llu runs past the end of the %zu-byte file; the file is "
                   "truncated or not a safetensors file",
                   name, (unsigned long long)hlen, len);
  /* cJSON reads strings up to a NUL: give it a terminated copy, not the mapping. */
  char *text = ng__malloc((size_t)hlen + 1, "a safetensors header");
  if (!text) {
    ng__err_prefix("%s", name);
    return NG_ERR_NOMEM;
  }
  memcpy(text, b + ST_PREFIX, (size_t)hlen);
  text[hlen] = '\0';
  size_t data_off = ST_PREFIX + (size_t)hlen;
  ng_status st = parse_header(out, text, (size_t)hlen, b + data_off, len - data_off, name);
  free(text);
  if (st != NG_OK)
    memset(out, 0, sizeof *out);
  return st;
}

ng_status ng__st_open(ng_st_file *out, const char *path) {
  memset(out, 0, sizeof *out);
  void *map;
  size_t len;
  NG_CHECK(ng__file_map(&map, &len, path, ST_PREFIX, "a safetensors file",
                        "was it written completely?", false));
  ng_status st = ng__st_parse(out, map, len, path);
  if (st != NG_OK) {
    munmap(map, len);
    return st;
  }
  out->map = map;
  out->map_len = len;
  return NG_OK;
}

const ng_st_tensor *ng__st_find(const ng_st_file *f, const char *name) {
  for (int i = 0; f && name && i < f->n; i++) {
    if (strcmp(f->tensors[i].name, name) == 0)
      return &f->tensors[i];
  }
  return NULL;
}

const char *ng__st_meta(const ng_st_file *f, const char *key) {
  for (int i = 0; f && key && i < f->n_meta; i++) {
    if (strcmp(f->meta[i].key, key) == 0)
      return f->meta[i].value;
  }
  return NULL;
}

void ng__st_close(ng_st_file *f) {
  if (!f)
    return;
  if (f->map)
    munmap(f->map, f->map_len);
  memset(f, 0, sizeof *f);
}

/* ---- writing ---- */

/* Checks a fixed-size string field: NUL-terminated inside it and valid UTF-8 (cJSON copies
 * bytes as they are, and the reader rejects invalid UTF-8). */
static ng_status check_text(const char *s, size_t cap, const char *path, const char *what) {
  const char *nul = memchr(s, '\0', cap);
  if (!nul)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s '%.40s...' is not NUL-terminated within %zu bytes",
                   path, what, s, cap);
  size_t bad = 0;
  if (!utf8_valid((const unsigned char *)s, (size_t)(nul - s), &bad))
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s '%s' is not valid UTF-8 (byte %zu)", path, what, s,
                   bad);
  return NG_OK;
}

static ng_status check_tensor(const ng_st_tensor *tensors, int i, const char *path) {
  const ng_st_tensor *t = &tensors[i];
  NG_CHECK(check_text(t->name, sizeof t->name, path, "tensor name"));
  if (strcmp(t->name, META_KEY) == 0)
    return ng__err(NG_ERR_INVALID_ARG, "%s: a tensor cannot be called '%s' (the metadata key)",
                   path, META_KEY);
  for (int j = 0; j < i; j++) {
    if (strcmp(tensors[j].name, t->name) == 0)
      return ng__err(NG_ERR_INVALID_ARG, "%s: tensor '%s' is given twice", path, t->name);
  }
  if ((unsigned)t->dtype >= NG_DTYPE_COUNT_)
    return ng__err(NG_ERR_INVALID_ARG, "%s: tensor '%s': invalid dtype %d", path, t->name,
                   (int)t->dtype);
  if (t->ndim < 0 || t->ndim > NG_NPY_MAX_DIMS)
    return ng__err(NG_ERR_INVALID_ARG, "%s: tensor '%s': rank %d is outside [0, %d]", path, t->name,
                   t->ndim, NG_NPY_MAX_DIMS);
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0 || (double)t->shape[d] >= ST_MAX_INT)
      return ng__err(NG_ERR_INVALID_ARG, "%s: tensor '%s': dimension %d is %lld", path, t->name, d,
                     (long long)t->shape[d]);
  }
  uint64_t want;
  if (!shape_bytes(t->shape, t->ndim, ng__dtype_size(t->dtype), &want))
    return ng__err(NG_ERR_INVALID_ARG, "%s: tensor '%s': shape too large", path, t->name);
  char dims[128];
  if (t->nbytes != want)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: tensor '%s' has %zu bytes but shape %s of %s needs %llu", path, t->name,
                   t->nbytes, ng__shape_text(dims, sizeof dims, t->ndim, t->shape),
                   ST_DTYPE[t->dtype], (unsigned long long)want);
  if (want && !t->data)
    return ng__err(NG_ERR_INVALID_ARG, "%s: tensor '%s' has no data", path, t->name);
  return NG_OK;
}

static ng_status check_meta(const ng_st_meta *meta, int i, const char *path) {
  const ng_st_meta *m = &meta[i];
  NG_CHECK(check_text(m->key, sizeof m->key, path, "metadata key"));
  NG_CHECK(check_text(m->value, sizeof m->value, path, "metadata value"));
  for (int j = 0; j < i; j++) {
    if (strcmp(meta[j].key, m->key) == 0)
      return ng__err(NG_ERR_INVALID_ARG, "%s: metadata key '%s' is given twice", path, m->key);
  }
  return NG_OK;
}

/* Formats integers as a JSON array text. cJSON prints numbers with %1.15g, which turns integers
 * from 10^15 on into exponent form ("1e+15") that readers of unsigned offsets reject; raw text
 * keeps every integer exact. */
static void format_uints(char *buf, size_t cap, const uint64_t *v, int n) {
  size_t len = 0;
  buf[len++] = '[';
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%llu", i ? "," : "", (unsigned long long)v[i]);
  snprintf(buf + len, cap - len, "]");
}

/* The header JSON text (free with cJSON_free), listing `tensors` in order with the data offsets
 * in `spans` and the metadata first, as the reference implementation writes it. */
static ng_status build_header(char **out, const ng_st_tensor *tensors, const st_span *spans, int n,
                              const ng_st_meta *meta, int n_meta, const char *path) {
  *out = NULL;
  /* Room for NG_NPY_MAX_DIMS integers of up to 20 digits with their separators. */
  char nums[NG_NPY_MAX_DIMS * 21 + 4];
  bool ok = true;
  cJSON *root = cJSON_CreateObject();
  cJSON *m = root && n_meta ? cJSON_AddObjectToObject(root, META_KEY) : NULL;
  ok = root && (n_meta == 0 || m);
  for (int i = 0; ok && i < n_meta; i++)
    ok = cJSON_AddStringToObject(m, meta[i].key, meta[i].value) != NULL;
  for (int i = 0; ok && i < n; i++) {
    const ng_st_tensor *t = &tensors[i];
    cJSON *e = cJSON_AddObjectToObject(root, t->name);
    ok = e && cJSON_AddStringToObject(e, "dtype", ST_DTYPE[t->dtype]);
    uint64_t dims[NG_NPY_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
      dims[d] = (uint64_t)t->shape[d];
    format_uints(nums, sizeof nums, dims, t->ndim);
    ok = ok && cJSON_AddRawToObject(e, "shape", nums);
    uint64_t offs[2] = {spans[i].begin, spans[i].end};
    format_uints(nums, sizeof nums, offs, 2);
    ok = ok && cJSON_AddRawToObject(e, "data_offsets", nums);
  }
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (!text)
    return ng__err(NG_ERR_NOMEM, "%s: out of memory building the safetensors header", path);
  *out = text;
  return NG_OK;
}

static ng_status write_all(int fd, const void *buf, size_t len, const char *path) {
  const char *p = buf;
  while (len > 0) {
    /* Linux writes at most about 2 GiB per call; ask for 1 GiB at a time. */
    ssize_t w = write(fd, p, NG_MIN(len, (size_t)1 << 30));
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return ng__err_errno(NG_ERR_IO, errno, "%s: cannot write (is the disk full?)", path);
    }
    p += w;
    len -= (size_t)w;
  }
  return NG_OK;
}

/* Writes header and data to a temporary file beside `path`, then renames it into place. */
static ng_status write_atomic(const char *path, const void *head, size_t head_len,
                              const ng_st_tensor *tensors, const int *order, int n) {
  char *tmp;
  NG_CHECK(ng__atomic_begin(&tmp, path));
  ng_status st = NG_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    st = ng__err_errno(NG_ERR_IO, errno,
                       "%s: cannot create a temporary file beside it (is the folder writable?)",
                       path);
  if (st == NG_OK)
    st = write_all(fd, head, head_len, path);
  for (int i = 0; st == NG_OK && i < n; i++) {
    const ng_st_tensor *t = &tensors[order[i]];
    if (t->nbytes)
      st = write_all(fd, t->data, t->nbytes, path);
  }
  if (fd >= 0 && close(fd) != 0 && st == NG_OK)
    st = ng__err_errno(NG_ERR_IO, errno, "%s: close", tmp);
  return ng__atomic_end(tmp, path, st);
}

ng_status ng__st_write(const char *path, const ng_st_tensor *tensors, int n, const ng_st_meta *meta,
                       int n_meta) {
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "safetensors writer: no file path given");
  if (n < 0 || n > NG_ST_MAX_TENSORS || (n > 0 && !tensors))
    return ng__err(NG_ERR_INVALID_ARG, "%s: %d tensors given; between 0 and %d can be written",
                   path, n, NG_ST_MAX_TENSORS);
  if (n_meta < 0 || n_meta > NG_ST_MAX_META || (n_meta > 0 && !meta))
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: %d metadata entries given; between 0 and %d can be written", path, n_meta,
                   NG_ST_MAX_META);
  for (int i = 0; i < n; i++)
    NG_CHECK(check_tensor(tensors, i, path));
  for (int i = 0; i < n_meta; i++)
    NG_CHECK(check_meta(meta, i, path));

  /* Data by decreasing element size: with the section starting at a multiple of 8, every
   * tensor then starts at a multiple of its own element size. */
  st_span spans[NG_ST_MAX_TENSORS];
  int order[NG_ST_MAX_TENSORS];
  int n_order = 0;
  uint64_t pos = 0;
  for (size_t esize = 8; esize >= 1; esize /= 2) {
    for (int i = 0; i < n; i++) {
      if (ng__dtype_size(tensors[i].dtype) != esize)
        continue;
      spans[i].begin = pos;
      if (__builtin_add_overflow(pos, (uint64_t)tensors[i].nbytes, &pos) ||
          (double)pos >= ST_MAX_INT)
        return ng__err(NG_ERR_INVALID_ARG,
                       "%s: the tensors hold more data than a safetensors header can index "
                       "exactly (2^53 bytes)",
                       path);
      spans[i].end = pos;
      order[n_order++] = i;
    }
  }

  char *json = NULL;
  NG_CHECK(build_header(&json, tensors, spans, n, meta, n_meta, path));
  size_t jlen = strlen(json);
  size_t hlen = (jlen + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
  char *head = ng__malloc(ST_PREFIX + hlen, "a safetensors header");
  if (!head) {
    cJSON_free(json);
    return NG_ERR_NOMEM;
  }
  for (int i = 0; i < ST_PREFIX; i++)
    head[i] = (char)(((uint64_t)hlen >> (8 * i)) & 0xff);
  memcpy(head + ST_PREFIX, json, jlen);
  memset(head + ST_PREFIX + jlen, ' ', hlen - jlen);
  cJSON_free(json);
  ng_status st = write_atomic(path, head, ST_PREFIX + hlen, tensors, order, n_order);
  free(head);
  return st;
}

uint32_t ng__crc32(const void *data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef *p = data;
  while (n > 0) {
    const uInt chunk = (uInt)NG_MIN(n, (size_t)1 << 30);
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return (uint32_t)crc;
}
