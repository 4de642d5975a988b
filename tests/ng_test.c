#include "ng_test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ng_test_failures;
static int tests_passed, tests_failed, tests_elsewhere;
static char tmpdir[4096];

/* NG_TEST_CASES: which cases this run takes (ng_test.h). A long suite is registered as several
 * ctest entries over one executable, so that no entry runs long on a loaded machine; the names
 * are parsed once, and each remembers whether the suite has such a case, so that a misspelt
 * name fails the run instead of quietly selecting nothing. */
enum { MAX_FILTER_NAMES = 64 };
static struct {
  bool parsed, any_positive;
  int n;
  struct {
    char name[128];
    bool exclude, seen;
  } names[MAX_FILTER_NAMES];
} filter;

static void filter_parse(void) {
  filter.parsed = true;
  const char *spec = getenv("NG_TEST_CASES");
  if (!spec)
    return;
  while (*spec) {
    size_t len = strcspn(spec, ",");
    if (len > 0) {
      if (filter.n == MAX_FILTER_NAMES || len >= sizeof filter.names[0].name) {
        fprintf(stderr, "NG_TEST_CASES: more than %d names, or a name of %zu characters\n",
                MAX_FILTER_NAMES, len);
        exit(2);
      }
      bool exclude = spec[0] == '-';
      snprintf(filter.names[filter.n].name, sizeof filter.names[0].name, "%.*s",
               (int)(len - exclude), spec + exclude);
      filter.names[filter.n].exclude = exclude;
      filter.any_positive |= !exclude;
      filter.n++;
    }
    spec += len + (spec[len] == ',');
  }
}

/* Whether case `name` runs here: named, or not excluded when only exclusions are given. */
static bool filter_selects(const char *name) {
  if (!filter.parsed)
    filter_parse();
  if (filter.n == 0)
    return true;
  bool named = false, excluded = false;
  for (int i = 0; i < filter.n; i++) {
    if (strcmp(filter.names[i].name, name) != 0)
      continue;
    filter.names[i].seen = true;
    if (filter.names[i].exclude)
      excluded = true;
    else
      named = true;
  }
  return filter.any_positive ? named && !excluded : !excluded;
}

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
  if (!filter_selects(name)) {
    tests_elsewhere++;
    return;
  }
  int before = ng_test_failures;
  /* Each case's wall time, to see which cases make a suite long (tests/CMakeLists.txt splits
   * those suites). */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  fn();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (ng_test_failures == before) {
    tests_passed++;
    printf("ok      %s (%.1f s)\n", name, s);
  } else {
    tests_failed++;
    printf("FAILED  %s (%.1f s)\n", name, s);
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
  if (!filter.parsed)
    filter_parse();
  bool filter_ok = true;
  for (int i = 0; i < filter.n; i++) {
    if (!filter.names[i].seen) {
      fprintf(stderr, "NG_TEST_CASES names %s, which this suite does not run\n",
              filter.names[i].name);
      filter_ok = false;
    }
  }
  if (tests_passed + tests_failed == 0) {
    fprintf(stderr, "no case ran (NG_TEST_CASES=%s)\n", getenv("NG_TEST_CASES"));
    filter_ok = false;
  }
  if (tests_elsewhere)
    printf("%d passed, %d failed (%d cases left to other runs by NG_TEST_CASES)\n", tests_passed,
           tests_failed, tests_elsewhere);
  else
    printf("%d passed, %d failed\n", tests_passed, tests_failed);
  return tests_failed || !filter_ok ? 1 : 0;
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
