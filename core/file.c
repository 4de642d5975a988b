/* File helpers shared by the dataset store, the converters and the checkpoint reader. */
#include "core_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

char *ng__path_join(const char *dir, const char *rel) {
  size_t n = strlen(dir) + strlen(rel) + 2;
  char *p = ng__malloc(n, "a path");
  if (p)
    snprintf(p, n, "%s/%s", dir, rel);
  return p;
}

bool ng__file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

ng_status ng__file_open_regular(int *out_fd, size_t *out_len, const char *path,
                                const char *missing_fix, const char *irregular_fix) {
  *out_fd = -1;
  *out_len = 0;
  /* O_NONBLOCK: opening a FIFO planted in place of a file must not wait for a writer. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT && missing_fix)
      return ng__err(NG_ERR_NOT_FOUND, "%s: missing; %s", path, missing_fix);
    return ng__err_errno(errno == ENOENT ? NG_ERR_NOT_FOUND : NG_ERR_IO, errno, "%s", path);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return ng__err_errno(NG_ERR_IO, e, "%s: stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    if (irregular_fix)
      return ng__err(NG_ERR_FORMAT, "%s: not a regular file; %s", path, irregular_fix);
    return ng__err(NG_ERR_FORMAT, "%s: not a regular file", path);
  }
  *out_fd = fd;
  *out_len = (size_t)st.st_size;
  return NG_OK;
}

ng_status ng__file_map(void **out_map, size_t *out_len, const char *path, size_t min_len,
                       const char *kind, const char *short_fix, bool populate) {
  *out_map = NULL;
  *out_len = 0;
  int fd;
  size_t len;
  NG_CHECK(ng__file_open_regular(&fd, &len, path, NULL, NULL));
  if (len < min_len) {
    close(fd);
    if (short_fix)
      return ng__err(NG_ERR_FORMAT, "%s: file of %zu bytes is too short to be %s; %s", path, len,
                     kind, short_fix);
    return ng__err(NG_ERR_FORMAT, "%s: file of %zu bytes is too short to be %s", path, len, kind);
  }
  void *map = mmap(NULL, len, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED)
    return ng__err_errno(NG_ERR_IO, e, "%s: mmap", path);
  *out_map = map;
  *out_len = len;
  return NG_OK;
}

/* ---- temporary files beside a destination ---- */

char *ng__tmp_template(const char *dst) {
  size_t n = strlen(dst) + sizeof NG_TMP_INFIX + 32;
  char *p = ng__malloc(n, "a temporary file name");
  if (p)
    snprintf(p, n, "%s" NG_TMP_INFIX "%ld-XXXXXX", dst, (long)getpid());
  return p;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0; /* best effort: go on with the rest */
}

int ng__tmp_sweep(const char *dst) {
  char *dir = strdup(dst);
  if (!dir)
    return 0;
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    dir[--n] = '\0';
  char *slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : dir, *folder = ".";
  if (slash) {
    *slash = '\0';
    folder = slash == dir ? "/" : dir;
  }
  char prefix[512];
  int plen = snprintf(prefix, sizeof prefix, "%s" NG_TMP_INFIX, base);
  int removed = 0;
  DIR *d = plen > 0 && (size_t)plen < sizeof prefix ? opendir(folder) : NULL;
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
    if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
      continue;
    char *end = NULL;
    long pid = strtol(e->d_name + plen, &end, 10);
    /* Only a writer that is gone: kill(pid, 0) fails with ESRCH for a dead process (EPERM
     * means it lives under another user; a reused pid keeps its file until it dies). */
    if (!end || *end != '-' || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 ||
        errno != ESRCH)
      continue;
    char *path = ng__path_join(folder, e->d_name);
    if (path && nftw(path, remove_entry, 8, FTW_DEPTH | FTW_PHYS) == 0)
      removed++;
    free(path);
  }
  if (d)
    closedir(d);
  free(dir);
  return removed;
}
