/* Helpers shared by the fuzz targets that hand a parser files: one scratch folder per run (in
 * memory when /dev/shm exists), inputs split into sections that become files, and a recursive
 * remove for what a converter wrote. */
#ifndef NG_FUZZ_FILES_H
#define NG_FUZZ_FILES_H

#include "neargnn.h"

#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/// Separates the sections (files) of one fuzz input.
static const char FUZZ_SEP[] = "\n@@\n";
enum { FUZZ_SEP_LEN = sizeof FUZZ_SEP - 1 };

static char fuzz_dir[256];

static int fuzz_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

/// Removes `path` and everything under it; a missing path is fine.
static void fuzz_rm_rf(const char *path) {
  nftw(path, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void fuzz_dir_remove(void) {
  fuzz_rm_rf(fuzz_dir);
}

/// The run's scratch folder, made on first use and removed at exit; NULL when it cannot be made.
static const char *fuzz_scratch(void) {
  if (fuzz_dir[0])
    return fuzz_dir;
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  snprintf(fuzz_dir, sizeof fuzz_dir, "%s/ngfuzz-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(fuzz_dir)) {
    fuzz_dir[0] = '\0';
    return NULL;
  }
  atexit(fuzz_dir_remove);
  return fuzz_dir;
}

/// Writes n bytes to a new file `path`.
static bool fuzz_write(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return false;
  bool ok = fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

/// Splits [data, data + size) at FUZZ_SEP into at most `max` sections; section i is
/// [start[i], start[i] + len[i]). Missing sections get length 0. Returns how many were found.
static int fuzz_sections(const uint8_t *data, size_t size, int max, const uint8_t **start,
                         size_t *len) {
  const uint8_t *p = data, *end = data + size;
  int found = 0;
  for (int i = 0; i < max; i++) {
    const uint8_t *next = p < end ? memmem(p, (size_t)(end - p), FUZZ_SEP, FUZZ_SEP_LEN) : NULL;
    const uint8_t *stop = next ? next : end;
    start[i] = p;
    len[i] = (size_t)(stop - p);
    found += p < end;
    p = next ? next + FUZZ_SEP_LEN : end;
  }
  return found;
}

/// Converts `src` into a fresh folder under the scratch folder and checks the outcome: a
/// conversion that succeeds must write a dataset that opens with every check (features
/// included); one that fails must say why and leave no output behind.
static void fuzz_convert_check(const char *src, const ng_convert_opts *opts) {
  char dst[512];
  snprintf(dst, sizeof dst, "%s/out", fuzz_dir);
  fuzz_rm_rf(dst);
  ng_status st = ng_dataset_convert(dst, src, opts);
  if (st != NG_OK) {
    if (!*ng_last_error() || access(dst, F_OK) == 0)
      __builtin_trap();
    return;
  }
  ng_open_opts oo = NG_OPEN_OPTS_INIT;
  oo.check_features = 1;
  ng_dataset_t ds = NULL;
  if (ng_dataset_open(&ds, dst, &oo) != NG_OK) {
    fprintf(stderr, "converted dataset does not open: %s\n", ng_last_error());
    __builtin_trap();
  }
  ng_dataset_close(ds);
  fuzz_rm_rf(dst);
}

#endif /* NG_FUZZ_FILES_H */
