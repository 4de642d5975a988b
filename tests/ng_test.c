#include "ng_test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int ng_test_failures;
static int tests_passed, tests_failed;
static char tmpdir[4096];

void ng_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s:%d: FAIL: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  ng_test_failures++;
}

void ng_test_run(const char *name, void (*fn)(void)) {
  int before = ng_test_failures;
  fn();
  if (ng_test_failures == before) {
    tests_passed++;
    printf("ok      %s\n", name);
  } else {
    tests_failed++;
    printf("FAILED  %s\n", name);
  }
  fflush(stdout);
}

int ng_test_summary(void) {
  if (tmpdir[0] && !getenv("NG_TEST_KEEP")) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
      fprintf(stderr, "warning: could not remove %s\n", tmpdir);
  }
  printf("%d passed, %d failed\n", tests_passed, tests_failed);
  return tests_failed ? 1 : 0;
}

const char *ng_test_tmpdir(void) {
  if (!tmpdir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ngtest-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
      perror("mkdtemp");
      exit(2);
    }
  }
  return tmpdir;
}

const char *ng_test_path(const char *name) {
  static char buf[4096 + 256];
  snprintf(buf, sizeof buf, "%s/%s", ng_test_tmpdir(), name);
  return buf;
}

const char *ng_test_data_dir(void) {
  const char *d = getenv("NG_DATA_DIR");
  return d && *d ? d : "../shared/data";
}

void *ng_test_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

int ng_test_cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

bool ng_test_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return false;
  bool ok = fwrite(data, 1, len, f) == len;
  return fclose(f) == 0 && ok;
}

void *ng_test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[n] = '\0';
    if (len)
      *len = (size_t)n;
  }
  return buf;
}

bool ng_test_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

ng_dataset_t ng_test_open_ok(const char *dir) {
  ng_dataset_t ds = NULL;
  ng_open_opts oo = NG_OPEN_OPTS_INIT;
  oo.check_features = 1;
  EXPECT_OK(ng_dataset_open(&ds, dir, &oo));
  return ds;
}
