/* A small test harness: assertions print both operands with file and line, and a failing
 * assertion fails the suite but lets the rest of the test function continue. */
#ifndef NG_TEST_H
#define NG_TEST_H

#include "neargnn.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define NG_TEST_LEN(a) (sizeof(a) / sizeof((a)[0]))

extern int ng_test_failures;

void ng_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define EXPECT_TRUE(c)                                                                             \
  do {                                                                                             \
    if (!(c))                                                                                      \
      ng_test_fail(__FILE__, __LINE__, "expected true: %s", #c);                                   \
  } while (0)

#define EXPECT_EQ_I(a, b)                                                                          \
  do {                                                                                             \
    long long ng_a_ = (long long)(a), ng_b_ = (long long)(b);                                      \
    if (ng_a_ != ng_b_)                                                                            \
      ng_test_fail(__FILE__, __LINE__, "%s == %s: %lld vs %lld", #a, #b, ng_a_, ng_b_);            \
  } while (0)

#define EXPECT_NEAR(a, b, tol)                                                                     \
  do {                                                                                             \
    double ng_a_ = (double)(a), ng_b_ = (double)(b);                                               \
    if (!(fabs(ng_a_ - ng_b_) <= (tol)))                                                           \
      ng_test_fail(__FILE__, __LINE__, "%s ~ %s (tol %g): %.9g vs %.9g", #a, #b, (double)(tol),    \
                   ng_a_, ng_b_);                                                                  \
  } while (0)

#define EXPECT_STR(a, b)                                                                           \
  do {                                                                                             \
    const char *ng_a_ = (a), *ng_b_ = (b);                                                         \
    if (strcmp(ng_a_, ng_b_) != 0)                                                                 \
      ng_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" vs \"%s\"", #a, #b, ng_a_, ng_b_);        \
  } while (0)

/// Expects `call` to return `status`; on a mismatch prints both and ng_last_error().
#define EXPECT_STATUS(call, status)                                                                \
  do {                                                                                             \
    ng_status ng_s_ = (call);                                                                      \
    if (ng_s_ != (status))                                                                         \
      ng_test_fail(__FILE__, __LINE__, "%s: got %s, expected %s (last error: %s)", #call,          \
                   ng_status_name(ng_s_), ng_status_name(status), ng_last_error());                \
  } while (0)
#define EXPECT_OK(call) EXPECT_STATUS(call, NG_OK)

/// Expects ng_last_error() to contain `needle` (error messages must name the file and fix).
#define EXPECT_ERR_HAS(needle)                                                                     \
  do {                                                                                             \
    if (!strstr(ng_last_error(), (needle)))                                                        \
      ng_test_fail(__FILE__, __LINE__, "last error \"%s\" lacks \"%s\"", ng_last_error(),          \
                   (needle));                                                                      \
  } while (0)

/// Runs a test function, printing its name and whether it passed. The environment variable
/// NG_TEST_CASES selects cases by name, comma-separated: `a,b` runs only cases a and b,
/// `-a,-b` every case but a and b (tests/CMakeLists.txt splits long suites this way: the last
/// entry excludes the cases the others name, so that every case runs in some entry).
#define RUN_TEST(fn) ng_test_run(#fn, fn)
void ng_test_run(const char *name, void (*fn)(void));
/// Prints "N passed, N failed" and returns the process exit code: 1 when a case failed, when
/// NG_TEST_CASES names a case the suite does not run, or when it selected none.
int ng_test_summary(void);

/// A fresh empty folder under $TMPDIR (removed with its content by ng_test_summary()).
const char *ng_test_tmpdir(void);
/// A path inside ng_test_tmpdir(); the buffer is static and overwritten by the next call.
const char *ng_test_path(const char *name);
/// The real-data folder ($NG_DATA_DIR, default ../shared/data relative to the source tree).
const char *ng_test_data_dir(void);
/// malloc() that ends the suite (exit 2) when memory runs out; 0 bytes gives a valid pointer.
void *ng_test_xmalloc(size_t bytes);

/// qsort() comparison of two int64_t, ascending.
int ng_test_cmp_i64(const void *a, const void *b);

/// Writes `len` bytes to `path`; returns false on failure.
bool ng_test_write_file(const char *path, const void *data, size_t len);
/// The whole file at `path` in a new buffer (free()) with a '\0' after its bytes, its size in
/// `*len` (may be NULL); NULL when it cannot be read.
void *ng_test_read_file(const char *path, size_t *len);
/// Whether `path` exists (a file, folder or anything else).
bool ng_test_exists(const char *path);
/// Opens the dataset in `dir` with feature checks, expecting success; NULL when it failed.
ng_dataset_t ng_test_open_ok(const char *dir);

#endif /* NG_TEST_H */
