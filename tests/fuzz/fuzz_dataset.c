/* libFuzzer target: a whole dataset folder from one input, opened with every check.
 *
 * Input layout: sections separated by SEP. Section 0 is dataset.json; sections 1..7 are the
 * array files in NG_ARRAY_FILE order (indptr, indices, features, labels, train, val, test). An
 * empty or missing section leaves that file out. tests/fuzz/make_corpus.sh writes seeds.
 *
 * Beyond "no crash, no leak", an accepted dataset is re-checked here, sequentially and
 * independently of runtime/dataset.c, and a rejected one must say which folder it is about. */
#include "dataset_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char SEP[] = "\n@@\n";
enum { SEP_LEN = sizeof SEP - 1, FILES = 1 + NG_ARR_COUNT_ };

static char dir[256];

static const char *file_name(int i) {
  return i == 0 ? "dataset.json" : NG_ARRAY_FILE[i - 1];
}

static void file_path(char *buf, size_t cap, int i) {
  snprintf(buf, cap, "%s/%s", dir, file_name(i));
}

static void remove_dir(void) {
  char path[512];
  for (int i = 0; i < FILES; i++) {
    file_path(path, sizeof path, i);
    unlink(path);
  }
  rmdir(dir);
}

/* One folder for the whole run, in memory when /dev/shm exists (files are rewritten for every
 * input). */
static bool make_dir(void) {
  if (dir[0])
    return true;
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/ngfuzz-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) {
    dir[0] = '\0';
    return false;
  }
  atexit(remove_dir);
  return true;
}

static bool write_all(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return false;
  bool ok = fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

/* The rules of docs/dataset-format.md, checked the slow, obvious way. */
static void recheck(const struct ng_dataset *ds) {
  const ng_dataset_info *in = &ds->info;
  const ng_csr *g = &ds->csr;
  if (g->nodes != in->nodes || g->nnz != in->edges || g->indptr[0] != 0 ||
      g->indptr[g->nodes] != g->nnz || (g->idx32 == NULL) == (g->idx64 == NULL))
    __builtin_trap();
  for (int64_t v = 0; v < g->nodes; v++)
    if (g->indptr[v + 1] < g->indptr[v])
      __builtin_trap();
  for (int64_t e = 0; e < g->nnz; e++) {
    int64_t u = ng__csr_index(g, e);
    if (u < 0 || u >= g->nodes)
      __builtin_trap();
  }
  if ((ds->labels != NULL) != (in->classes > 0) || (ds->features != NULL) != (in->feature_dim > 0))
    __builtin_trap();
  for (int64_t v = 0; ds->labels && v < in->nodes; v++)
    if (ds->labels[v] < -1 || ds->labels[v] >= in->classes)
      __builtin_trap();
  for (int64_t i = 0; ds->features && i < in->nodes * in->feature_dim; i++)
    if (!isfinite(ds->features[i]))
      __builtin_trap();
  const int64_t count[3] = {in->train, in->val, in->test};
  for (int s = 0; s < 3; s++) {
    if ((ds->split[s] != NULL) != (count[s] > 0))
      __builtin_trap();
    for (int64_t i = 0; i < count[s]; i++) {
      int64_t v = ds->split[s][i];
      if (v < 0 || v >= in->nodes || ds->labels[v] < 0)
        __builtin_trap();
      /* Quadratic, but the fuzzer's arrays are tiny. */
      for (int t = 0; t <= s; t++)
        for (int64_t j = 0; j < (t == s ? i : count[t]); j++)
          if (ds->split[t][j] == v)
            __builtin_trap();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!make_dir())
    return 0;
  const uint8_t *p = data, *end = data + size;
  for (int i = 0; i < FILES; i++) {
    const uint8_t *next = p < end ? memmem(p, (size_t)(end - p), SEP, SEP_LEN) : NULL;
    const uint8_t *stop = next ? next : end;
    char path[512];
    file_path(path, sizeof path, i);
    unlink(path);
    if (stop > p && !write_all(path, p, (size_t)(stop - p)))
      return 0;
    p = next ? next + SEP_LEN : end;
  }

  ng_open_opts opts = NG_OPEN_OPTS_INIT;
  opts.check_features = 1;
  ng_dataset_t ds = NULL;
  if (ng_dataset_open(&ds, dir, &opts) != NG_OK) {
    if (ds != NULL || !strstr(ng_last_error(), dir))
      __builtin_trap();
    return 0;
  }
  recheck(ds);
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  ng_degree_stats st = NG_DEGREE_STATS_INIT;
  if (ng_dataset_info_get(&info, ds) != NG_OK || ng_dataset_degree_stats(&st, ds) != NG_OK)
    __builtin_trap();
  if (info.nodes > 0 && (st.min > st.max || st.p50 > st.p99 || st.max > info.edges ||
                         st.isolated > info.nodes || st.in_max > info.edges))
    __builtin_trap();
  ng_dataset_close(ds);
  return 0;
}
