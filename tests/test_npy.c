/* .npy reading and writing: round trips, headers as numpy writes them, and hostile files. */
#include "ng_test.h"
#include "npy_impl.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char NPY_MAGIC[] = "\x93NUMPY";

/* Builds a .npy file image the way numpy.save does: magic, version, little-endian header
 * length, the dict text, spaces and a final newline padding the prefix to `align` bytes
 * (numpy >= 1.14 aligns to 64, older releases to 16), then `data_bytes` of data. Returns the
 * total length, 0 when it does not fit `cap`. */
static size_t make_npy(unsigned char *buf, size_t cap, int major, const char *dict, size_t align,
                       size_t data_bytes) {
  size_t pre = major == 1 ? 10 : 12, n = strlen(dict);
  size_t total = (pre + n + 1 + align - 1) / align * align;
  if (total + data_bytes > cap)
    return 0;
  size_t hlen = total - pre;
  memcpy(buf, NPY_MAGIC, 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  for (size_t i = 0; i < pre - 8; i++)
    buf[8 + i] = (unsigned char)(hlen >> (8 * i));
  memcpy(buf + pre, dict, n);
  memset(buf + pre + n, ' ', hlen - n - 1);
  buf[total - 1] = '\n';
  for (size_t i = 0; i < data_bytes; i++)
    buf[total + i] = (unsigned char)(i * 7 + 3);
  return total + data_bytes;
}

static ng_status parse(ng_npy_header *h, const unsigned char *buf, size_t len) {
  return ng__npy_parse_header(h, buf, len, "test.npy");
}

/* Every dtype in ranks 0..3: create, fill with a pattern, close, map, compare. */
static void test_round_trip_all_dtypes_and_ranks(void) {
  static const int64_t shapes[4][3] = {{0, 0, 0}, {7, 0, 0}, {3, 5, 0}, {2, 3, 4}};
  for (int d = 0; d < NG_DTYPE_COUNT_; d++) {
    for (int rank = 0; rank <= 3; rank++) {
      char name[64];
      snprintf(name, sizeof name, "rt_%d_%d.npy", d, rank);
      char path[4096];
      snprintf(path, sizeof path, "%s", ng_test_path(name));
      ng_npy w;
      EXPECT_OK(ng__npy_create(&w, path, (ng_dtype)d, rank, shapes[rank]));
      EXPECT_EQ_I(w.hdr.data_offset % 64, 0);
      unsigned char *bytes = w.data;
      for (size_t i = 0; i < w.hdr.nbytes; i++)
        bytes[i] = d == NG_DTYPE_BOOL ? (unsigned char)(i % 2) : (unsigned char)(i * 13 + 1);
      EXPECT_OK(ng__npy_sync(&w, path));
      ng__npy_close(&w);

      ng_npy r;
      EXPECT_OK(ng__npy_map(&r, path, rank == 2));
      EXPECT_EQ_I(r.hdr.dtype, d);
      EXPECT_EQ_I(r.hdr.ndim, rank);
      for (int i = 0; i < rank; i++)
        EXPECT_EQ_I(r.hdr.shape[i], shapes[rank][i]);
      int64_t count = 1;
      for (int i = 0; i < rank; i++)
        count *= shapes[rank][i];
      EXPECT_EQ_I(ng__npy_count(&r.hdr), count);
      EXPECT_EQ_I(r.hdr.nbytes, (size_t)count * ng__dtype_size((ng_dtype)d));
      const unsigned char *got = r.data;
      size_t mismatches = 0;
      for (size_t i = 0; i < r.hdr.nbytes; i++)
        mismatches +=
            got[i] != (d == NG_DTYPE_BOOL ? (unsigned char)(i % 2) : (unsigned char)(i * 13 + 1));
      EXPECT_EQ_I(mismatches, 0);
      ng__npy_close(&r);
      EXPECT_TRUE(r.map == NULL);
    }
  }
}

static void test_write_and_create_refuses_existing(void) {
  const char *p = ng_test_path("write.npy");
  const double vals[4] = {1.5, -2.25, 1e300, 3.0};
  int64_t shape[1] = {4};
  EXPECT_OK(ng__npy_write(p, NG_DTYPE_F64, 1, shape, vals));
  ng_npy r;
  EXPECT_OK(ng__npy_map(&r, p, false));
  EXPECT_EQ_I(r.hdr.dtype, NG_DTYPE_F64);
  EXPECT_TRUE(memcmp(r.data, vals, sizeof vals) == 0);
  ng__npy_close(&r);
  EXPECT_STATUS(ng__npy_write(p, NG_DTYPE_F64, 1, shape, vals), NG_ERR_EXISTS);
  EXPECT_ERR_HAS("write.npy");
  int64_t bad_shape[1] = {-1};
  EXPECT_STATUS(ng__npy_write(ng_test_path("neg.npy"), NG_DTYPE_F32, 1, bad_shape, vals),
                NG_ERR_INVALID_ARG);
}

static void test_shrink(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("shrink.npy"));
  int64_t shape[2] = {10, 3};
  ng_npy w;
  EXPECT_OK(ng__npy_create(&w, path, NG_DTYPE_I32, 2, shape));
  int32_t *v = w.data;
  for (int i = 0; i < 30; i++)
    v[i] = 100 + i;
  EXPECT_STATUS(ng__npy_shrink(&w, path, 11), NG_ERR_INTERNAL);
  EXPECT_OK(ng__npy_shrink(&w, path, 4));
  EXPECT_EQ_I(w.hdr.shape[0], 4);
  EXPECT_EQ_I(w.hdr.nbytes, 48);
  ng__npy_close(&w);
  struct stat st;
  EXPECT_TRUE(stat(path, &st) == 0);
  ng_npy r;
  EXPECT_OK(ng__npy_map(&r, path, false));
  EXPECT_EQ_I(st.st_size, (off_t)(r.hdr.data_offset + 48));
  EXPECT_EQ_I(r.hdr.ndim, 2);
  EXPECT_EQ_I(r.hdr.shape[0], 4);
  EXPECT_EQ_I(r.hdr.shape[1], 3);
  const int32_t *g = r.data;
  for (int i = 0; i < 12; i++)
    EXPECT_EQ_I(g[i], 100 + i);
  ng__npy_close(&r);
}

/* Headers byte for byte as numpy writes them (format 1.0 and 2.0, 16- and 64-byte alignment,
 * the three byte-order characters, Python 2 longs, scalars and 1-element tuples). */
static void test_parse_numpy_headers(void) {
  static const struct {
    int major;
    size_t align;
    const char *dict;
    ng_dtype dtype;
    int ndim;
    int64_t shape[3];
  } cases[] = {
      {1,
       64,
       "{'descr': '<f4', 'fortran_order': False, 'shape': (2708, 1433), }",
       NG_DTYPE_F32,
       2,
       {2708, 1433, 0}},
      {1,
       64,
       "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }",
       NG_DTYPE_I32,
       1,
       {5, 0, 0}},
      {1,
       16,
       "{'descr': '<i8', 'fortran_order': False, 'shape': (), }",
       NG_DTYPE_I64,
       0,
       {0, 0, 0}},
      {1,
       16,
       "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 4, 2), }",
       NG_DTYPE_U8,
       3,
       {3, 4, 2}},
      {1,
       64,
       "{'descr': '|b1', 'fortran_order': False, 'shape': (6,), }",
       NG_DTYPE_BOOL,
       1,
       {6, 0, 0}},
      {1,
       64,
       "{'descr': '|i1', 'fortran_order': False, 'shape': (0,), }",
       NG_DTYPE_I8,
       1,
       {0, 0, 0}},
      {1,
       64,
       "{'descr': '=f8', 'fortran_order': False, 'shape': (2, 2), }",
       NG_DTYPE_F64,
       2,
       {2, 2, 0}},
      {1,
       16,
       "{'descr': '<i8', 'fortran_order': False, 'shape': (3L, 4L), }",
       NG_DTYPE_I64,
       2,
       {3, 4, 0}},
      {2,
       64,
       "{'descr': '<f4', 'fortran_order': False, 'shape': (10,), }",
       NG_DTYPE_F32,
       1,
       {10, 0, 0}},
      {3,
       64,
       "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), }",
       NG_DTYPE_I32,
       2,
       {1, 2, 0}},
      /* Key order and spacing are not fixed by the format. */
      {1,
       64,
       "{\"shape\":(4,),\"fortran_order\":False,\"descr\":\"<i4\"}",
       NG_DTYPE_I32,
       1,
       {4, 0, 0}},
  };
  for (size_t c = 0; c < NG_ARRAY_LEN(cases); c++) {
    unsigned char buf[512];
    size_t len = make_npy(buf, sizeof buf, cases[c].major, cases[c].dict, cases[c].align, 0);
    EXPECT_TRUE(len > 0);
    ng_npy_header h;
    EXPECT_OK(parse(&h, buf, len));
    EXPECT_EQ_I(h.dtype, cases[c].dtype);
    EXPECT_EQ_I(h.ndim, cases[c].ndim);
    size_t nbytes = ng__dtype_size(cases[c].dtype);
    for (int i = 0; i < cases[c].ndim; i++) {
      EXPECT_EQ_I(h.shape[i], cases[c].shape[i]);
      nbytes *= (size_t)cases[c].shape[i];
    }
    EXPECT_EQ_I(h.nbytes, nbytes);
    EXPECT_EQ_I(h.data_offset, len);
    EXPECT_EQ_I(h.data_offset % cases[c].align, 0);
  }
}

static void test_parse_rejects(void) {
  static const struct {
    const char *dict;
    ng_status status;
    const char *needle;
  } cases[] = {
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", NG_ERR_UNSUPPORTED,
       "big-endian"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", NG_ERR_UNSUPPORTED, "Fortran"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", NG_ERR_UNSUPPORTED,
       "not supported"},
      {"{'descr': '|i4', 'fortran_order': False, 'shape': (3,), }", NG_ERR_UNSUPPORTED,
       "not supported"},
      {"{'descr': 'xf4', 'fortran_order': False, 'shape': (3,), }", NG_ERR_FORMAT, "unknown dtype"},
      {"{'descr': [('a', '<i4'), ('b', '<f8')], 'fortran_order': False, 'shape': (3,), }",
       NG_ERR_UNSUPPORTED, "structured"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
       NG_ERR_FORMAT, "malformed shape"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
       NG_ERR_FORMAT, "too large"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 4611686018427387904, 0), }",
       NG_ERR_FORMAT, "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", NG_ERR_FORMAT,
       "malformed shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1), }", NG_ERR_UNSUPPORTED,
       "dimensions"},
      {"{'descr': '<f4', 'fortran_order': False, }", NG_ERR_FORMAT, "lacks"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", NG_ERR_FORMAT,
       "unknown key"},
      {"['descr', '<f4']", NG_ERR_FORMAT, "not a dict"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,), }", NG_ERR_FORMAT, "fortran_order"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (3,), }", NG_ERR_FORMAT, "malformed"},
  };
  for (size_t c = 0; c < NG_ARRAY_LEN(cases); c++) {
    unsigned char buf[512];
    size_t len = make_npy(buf, sizeof buf, 1, cases[c].dict, 64, 0);
    ng_npy_header h;
    EXPECT_STATUS(parse(&h, buf, len), cases[c].status);
    EXPECT_ERR_HAS("test.npy");
    EXPECT_ERR_HAS(cases[c].needle);
  }

  unsigned char buf[512];
  const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  size_t len = make_npy(buf, sizeof buf, 1, ok, 64, 0);
  ng_npy_header h;
  EXPECT_OK(parse(&h, buf, len));

  buf[1] = 'n'; /* bad magic */
  EXPECT_STATUS(parse(&h, buf, len), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("bad magic");
  buf[1] = 'N';
  buf[6] = 4; /* version 4.0 does not exist */
  EXPECT_STATUS(parse(&h, buf, len), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS("version 4");
  buf[6] = 1;
  /* Header length past the end of the buffer. */
  EXPECT_STATUS(parse(&h, buf, len - 1), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("past the end");
  buf[8] = 0xff;
  buf[9] = 0xff;
  EXPECT_STATUS(parse(&h, buf, len), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("past the end");
  EXPECT_STATUS(parse(&h, buf, 5), NG_ERR_FORMAT);
  /* A format 2.0 prefix cut before its 4-byte length. */
  size_t len2 = make_npy(buf, sizeof buf, 2, ok, 64, 0);
  EXPECT_TRUE(len2 > 0);
  EXPECT_STATUS(parse(&h, buf, 11), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("truncated");
  /* Data that would start at a misaligned offset (8-byte elements at byte 20). */
  const char *dict8 = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
  len = make_npy(buf, sizeof buf, 1, dict8, 4, 0);
  EXPECT_TRUE(len % 8 != 0);
  EXPECT_STATUS(parse(&h, buf, len), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("not a multiple");
}

/* File-level checks of ng__npy_map: size against the header, and things that are not files. */
static void test_map_rejects(void) {
  unsigned char buf[512];
  const char *dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (8,), }";
  size_t len = make_npy(buf, sizeof buf, 1, dict, 64, 32);
  char path[4096];
  ng_npy r;

  snprintf(path, sizeof path, "%s", ng_test_path("exact.npy"));
  EXPECT_TRUE(ng_test_write_file(path, buf, len));
  EXPECT_OK(ng__npy_map(&r, path, false));
  EXPECT_EQ_I(((const int32_t *)r.data)[1], 0x342d261f); /* bytes 3 + 7i for i = 4..7 */
  ng__npy_close(&r);

  snprintf(path, sizeof path, "%s", ng_test_path("truncated.npy"));
  EXPECT_TRUE(ng_test_write_file(path, buf, len - 1));
  EXPECT_STATUS(ng__npy_map(&r, path, false), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("truncated.npy");
  EXPECT_ERR_HAS("truncated: the header implies 32 data bytes but the file holds 31");
  EXPECT_TRUE(r.map == NULL);

  unsigned char more[600];
  memcpy(more, buf, len);
  memset(more + len, 0x55, 3);
  snprintf(path, sizeof path, "%s", ng_test_path("trailing.npy"));
  EXPECT_TRUE(ng_test_write_file(path, more, len + 3));
  EXPECT_STATUS(ng__npy_map(&r, path, false), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("trailing.npy: 3 unexpected bytes");

  /* A header that claims more header bytes than the file has. */
  snprintf(path, sizeof path, "%s", ng_test_path("hdr_past_eof.npy"));
  EXPECT_TRUE(ng_test_write_file(path, buf, 40));
  EXPECT_STATUS(ng__npy_map(&r, path, false), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("past the end of the file");

  snprintf(path, sizeof path, "%s", ng_test_path("tiny.npy"));
  EXPECT_TRUE(ng_test_write_file(path, buf, 6));
  EXPECT_STATUS(ng__npy_map(&r, path, false), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("too short");

  EXPECT_STATUS(ng__npy_map(&r, ng_test_path("absent.npy"), false), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("absent.npy");

  snprintf(path, sizeof path, "%s", ng_test_path("dir.npy"));
  EXPECT_TRUE(mkdir(path, 0755) == 0);
  EXPECT_STATUS(ng__npy_map(&r, path, false), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("not a regular file");

  snprintf(path, sizeof path, "%s", ng_test_path("zero.npy"));
  EXPECT_TRUE(symlink("/dev/zero", path) == 0);
  EXPECT_STATUS(ng__npy_map(&r, path, false), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("not a regular file");

  /* A FIFO must be refused at once, not wait for a writer. */
  snprintf(path, sizeof path, "%s", ng_test_path("fifo.npy"));
  EXPECT_TRUE(mkfifo(path, 0644) == 0);
  EXPECT_STATUS(ng__npy_map(&r, path, false), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("not a regular file");
}

/* The real Cora arrays, written by numpy: shapes and the counts its README gives. */
static void test_cora_arrays(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cora/features.npy", ng_test_data_dir());
  ng_npy f;
  EXPECT_OK(ng__npy_map(&f, path, false));
  EXPECT_EQ_I(f.hdr.dtype, NG_DTYPE_F32);
  EXPECT_EQ_I(f.hdr.ndim, 2);
  EXPECT_EQ_I(f.hdr.shape[0], 2708);
  EXPECT_EQ_I(f.hdr.shape[1], 1433);
  if (f.data) {
    const float *x = f.data;
    int64_t nonzero = 0, not_binary = 0;
    for (int64_t i = 0; i < 2708 * 1433; i++) {
      nonzero += x[i] != 0.0f;
      not_binary += x[i] != 0.0f && x[i] != 1.0f;
    }
    EXPECT_EQ_I(nonzero, 49216);
    EXPECT_EQ_I(not_binary, 0);
  }
  ng__npy_close(&f);

  snprintf(path, sizeof path, "%s/cora/labels.npy", ng_test_data_dir());
  ng_npy l;
  EXPECT_OK(ng__npy_map(&l, path, true));
  EXPECT_EQ_I(l.hdr.dtype, NG_DTYPE_I32);
  EXPECT_EQ_I(l.hdr.ndim, 1);
  EXPECT_EQ_I(l.hdr.shape[0], 2708);
  if (l.data) {
    static const int64_t sizes[7] = {351, 217, 418, 818, 426, 298, 180};
    int64_t count[7] = {0}, outside = 0;
    const int32_t *y = l.data;
    for (int i = 0; i < 2708; i++) {
      if (y[i] >= 0 && y[i] < 7)
        count[y[i]]++;
      else
        outside++;
    }
    EXPECT_EQ_I(outside, 0);
    for (int c = 0; c < 7; c++)
      EXPECT_EQ_I(count[c], sizes[c]);
  }
  ng__npy_close(&l);
}

int main(void) {
  RUN_TEST(test_round_trip_all_dtypes_and_ranks);
  RUN_TEST(test_write_and_create_refuses_existing);
  RUN_TEST(test_shrink);
  RUN_TEST(test_parse_numpy_headers);
  RUN_TEST(test_parse_rejects);
  RUN_TEST(test_map_rejects);
  RUN_TEST(test_cora_arrays);
  return ng_test_summary();
}
