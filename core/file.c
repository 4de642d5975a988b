/* File helpers shared by the dataset store, the converters and the checkpoint reader. */
#include "core_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <limits.h>
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
      return ng__err(NG_ERR_FORMAT, "%s: is %s, not a regular file; %s", path,
                     ng__file_kind(st.st_mode), irregular_fix);
    return ng__err(NG_ERR_FORMAT, "%s: is %s, not a regular file", path, ng__file_kind(st.st_mode));
  }
  *out_fd = fd;
  *out_len = (size_t)st.st_size;
  return NG_OK;
}

static ng_status map_file(void **out_map, size_t *out_len, const char *path, size_t min_len,
                          const char *kind, const char *short_fix, bool populate, int *out_fd) {
  *out_map = NULL;
  *out_len = 0;
  if (out_fd)
    *out_fd = -1;
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
  if (map == MAP_FAILED || !out_fd)
    close(fd);
  if (map == MAP_FAILED)
    return ng__err_errno(NG_ERR_IO, e, "%s: mmap", path);
  if (out_fd)
    *out_fd = fd;
  *out_map = map;
  *out_len = len;
  return NG_OK;
}

ng_status ng__file_map(void **out_map, size_t *out_len, const char *path, size_t min_len,
                       const char *kind, const char *short_fix, bool populate) {
  return map_file(out_map, out_len, path, min_len, kind, short_fix, populate, NULL);
}

ng_status ng__file_map_watched(void **out_map, size_t *out_len, const char *path, size_t min_len,
                               const char *kind, const char *short_fix, bool populate) {
  int fd = -1;
  NG_CHECK(map_file(out_map, out_len, path, min_len, kind, short_fix, populate, &fd));
  ng__map_watch(*out_map, *out_len, fd, path);
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

int ng__remove_tree(const char *path) {
  return nftw(path, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
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
    if (path && ng__remove_tree(path) == 0)
      removed++;
    free(path);
  }
  if (d)
    closedir(d);
  free(dir);
  return removed;
}

/* ---- atomic writes ---- */

const char *ng__file_kind(unsigned mode) {
  const mode_t m = (mode_t)mode;
  if (S_ISREG(m))
    return "a regular file";
  if (S_ISDIR(m))
    return "a folder";
  if (S_ISLNK(m))
    return "a symbolic link";
  if (S_ISCHR(m))
    return "a character device";
  if (S_ISBLK(m))
    return "a block device";
  if (S_ISFIFO(m))
    return "a FIFO (named pipe)";
  if (S_ISSOCK(m))
    return "a socket";
  return "not a regular file";
}

/* The folder part of `path` into buf ("." for a bare name). */
static const char *parent_of(char *buf, size_t cap, const char *path) {
  ng__strlcpy(buf, path, cap);
  char *slash = strrchr(buf, '/');
  if (!slash)
    return ".";
  if (slash == buf)
    return "/";
  *slash = '\0';
  return buf;
}

ng_status ng__dst_check(const char *dst, bool *exists) {
  *exists = false;
  if (!dst || !*dst)
    return ng__err(NG_ERR_INVALID_ARG, "no output path given");
  const size_t len = strlen(dst);
  if (dst[len - 1] == '/')
    return ng__err(NG_ERR_INVALID_ARG, "%s: names a folder; give the path of a file", dst);
  if (len >= PATH_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "an output path of %zu bytes; at most %d are supported", len,
                   PATH_MAX - 1);
  struct stat st;
  if (lstat(dst, &st) == 0) {
    if (S_ISLNK(st.st_mode))
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: is a symbolic link; neargnn never writes through a link (give the "
                     "link's target as the path, or remove the link)",
                     dst);
    if (!S_ISREG(st.st_mode))
      return ng__err(NG_ERR_INVALID_ARG,
                     "%s: is %s; neargnn replaces only regular files (give the path of a file)",
                     dst, ng__file_kind(st.st_mode));
    *exists = true;
    return NG_OK;
  }
  if (errno != ENOENT)
    return ng__err_errno(NG_ERR_IO, errno, "%s", dst);
  char buf[PATH_MAX];
  const char *dir = parent_of(buf, sizeof buf, dst);
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return ng__err(NG_ERR_NOT_FOUND,
                     "%s: the folder %s does not exist; create it first (mkdir -p %s) or choose "
                     "another path",
                     dst, dir, dir);
    return ng__err_errno(NG_ERR_IO, errno, "%s: its folder %s", dst, dir);
  }
  if (!S_ISDIR(st.st_mode))
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s is %s, not a folder", dst, dir,
                   ng__file_kind(st.st_mode));
  return NG_OK;
}

ng_status ng__atomic_begin(char **out_tmp, const char *dst) {
  *out_tmp = NULL;
  bool exists;
  NG_CHECK(ng__dst_check(dst, &exists));
  /* Temporaries of writers killed before their rename go first. */
  ng__tmp_sweep(dst);
  /* The name carries this process's id (so that ng__tmp_sweep can tell a dead writer's) and a
   * counter (so that threads writing the same destination never share one). The file is not
   * created here: callers create it exclusively (O_EXCL), as ng__npy_create does. */
  static _Atomic unsigned counter;
  const unsigned k = counter++;
  const size_t n = strlen(dst) + sizeof NG_TMP_INFIX + 48;
  char *tmp = ng__malloc(n, "a temporary file name");
  if (!tmp)
    return NG_ERR_NOMEM;
  snprintf(tmp, n, "%s" NG_TMP_INFIX "%ld-w%05u", dst, (long)getpid(), k % 100000u);
  unlink(tmp); /* only a dead process with this process's id can have left it */
  *out_tmp = tmp;
  return NG_OK;
}

static ng_status fsync_path(const char *path, int flags, const char *what, const char *dst) {
  int fd = open(path, flags | O_CLOEXEC);
  /* EINVAL: file systems that cannot sync a folder have nothing to make durable. */
  if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL)) {
    const int e = errno;
    if (fd >= 0)
      close(fd);
    return ng__err_errno(NG_ERR_IO, e,
                         "%s: written, but syncing %s %s failed, so it may not survive a crash",
                         dst, what, path);
  }
  close(fd);
  return NG_OK;
}

ng_status ng__atomic_end(char *tmp, const char *dst, ng_status st) {
  if (!tmp)
    return st;
  if (st == NG_OK)
    st = fsync_path(tmp, O_RDONLY, "the temporary file", dst);
  bool exists = false;
  /* Checked again just before the rename: the destination may have changed while we wrote. */
  if (st == NG_OK)
    st = ng__dst_check(dst, &exists);
  if (st == NG_OK) {
    int rc;
    if (exists) {
      rc = rename(tmp, dst);
    } else {
      /* RENAME_NOREPLACE: whatever appeared at an absent destination meanwhile (a link, a
       * device) is never replaced; file systems without it fall back to rename(). */
      rc = renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_NOREPLACE);
      if (rc != 0 && (errno == EINVAL || errno == ENOSYS))
        rc = rename(tmp, dst);
    }
    if (rc != 0)
      st =
          errno == EEXIST
              ? ng__err(NG_ERR_EXISTS, "%s: appeared while it was being written; not replaced", dst)
              : ng__err_errno(NG_ERR_IO, errno, "%s: cannot rename the temporary file %s over it",
                              dst, tmp);
  }
  if (st != NG_OK) {
    unlink(tmp);
  } else {
    char buf[PATH_MAX];
    st = fsync_path(parent_of(buf, sizeof buf, dst), O_RDONLY | O_DIRECTORY, "its folder", dst);
  }
  free(tmp);
  return st;
}

ng_status ng__atomic_write(const char *dst, const void *data, size_t len) {
  char *tmp;
  NG_CHECK(ng__atomic_begin(&tmp, dst));
  ng_status st = NG_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot create the temporary file %s", dst, tmp);
  const char *p = data;
  while (st == NG_OK && len > 0) {
    /* Linux writes at most about 2 GiB per call; ask for 1 GiB at a time. */
    ssize_t w = write(fd, p, NG_MIN(len, (size_t)1 << 30));
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot write (is the disk full?)", dst);
    else {
      p += w;
      len -= (size_t)w;
    }
  }
  if (fd >= 0 && close(fd) != 0 && st == NG_OK)
    st = ng__err_errno(NG_ERR_IO, errno, "%s: close", tmp);
  return ng__atomic_end(tmp, dst, st);
}

/* ---- mapped files that shrink ---- */

/* A watched mapping. `lo` is written last on registration and cleared first on removal, so that
 * the SIGBUS handler, which takes no lock, sees a slot either whole or empty. */
#define WATCH_SLOTS 256
typedef struct {
  _Atomic uintptr_t lo;
  size_t len;
  int fd;
  char path[240];
} map_watch;

static map_watch watches[WATCH_SLOTS];
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;
static struct sigaction prev_bus;

static void put(const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0)
      return;
    s += w;
    n -= (size_t)w;
  }
}

/* A read past the end of a file that shrank under its mapping. Only async-signal-safe calls:
 * the line names the file, then the previous disposition takes over (for the default, the
 * return re-runs the faulting read, which ends the process with SIGBUS as without the watch). */
static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  /* Once: a previous handler that returns makes the read fault again. */
  static volatile sig_atomic_t told;
  const uintptr_t a = (uintptr_t)si->si_addr;
  for (int i = 0; i < WATCH_SLOTS && !told; i++) {
    const uintptr_t lo = watches[i].lo;
    if (lo && a >= lo && a - lo < watches[i].len) {
      put("neargnn: fatal: ");
      put(watches[i].path);
      put(" shrank while mapped (truncated or rewritten in place by another program); "
          "reading it raised SIGBUS\n");
      told = 1;
      break;
    }
  }
  if ((prev_bus.sa_flags & SA_SIGINFO) && prev_bus.sa_sigaction) {
    prev_bus.sa_sigaction(sig, si, uc);
  } else if (prev_bus.sa_handler != SIG_DFL && prev_bus.sa_handler != SIG_IGN) {
    prev_bus.sa_handler(sig);
  } else {
    signal(SIGBUS, SIG_DFL);
  }
}

static void install_sigbus(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &prev_bus);
}

void ng__map_watch(const void *map, size_t len, int fd, const char *path) {
  pthread_once(&bus_once, install_sigbus);
  pthread_mutex_lock(&watch_mu);
  int i = 0;
  while (i < WATCH_SLOTS && watches[i].lo)
    i++;
  if (i < WATCH_SLOTS) {
    watches[i].len = len;
    watches[i].fd = fd;
    ng__strlcpy(watches[i].path, path, sizeof watches[i].path);
    watches[i].lo = (uintptr_t)map;
    fd = -1;
  }
  pthread_mutex_unlock(&watch_mu);
  if (fd >= 0) /* every slot taken: this mapping goes unwatched */
    close(fd);
}

void ng__map_unwatch(const void *map) {
  if (!map)
    return;
  pthread_mutex_lock(&watch_mu);
  for (int i = 0; i < WATCH_SLOTS; i++)
    if (watches[i].lo == (uintptr_t)map) {
      watches[i].lo = 0;
      close(watches[i].fd);
      watches[i].fd = -1;
      break;
    }
  pthread_mutex_unlock(&watch_mu);
}

ng_status ng__map_verify(const void *p) {
  if (!p)
    return NG_OK;
  const uintptr_t a = (uintptr_t)p;
  ng_status st = NG_OK;
  pthread_mutex_lock(&watch_mu);
  for (int i = 0; i < WATCH_SLOTS; i++) {
    const uintptr_t lo = watches[i].lo;
    if (!lo || a < lo || a - lo >= watches[i].len)
      continue;
    struct stat sb;
    if (fstat(watches[i].fd, &sb) == 0 && (uint64_t)sb.st_size < (uint64_t)watches[i].len)
      st = ng__err(NG_ERR_IO,
                   "%s: the file shrank from %zu to %lld bytes while in use (truncated or "
                   "rewritten in place by another program); stopped before reading past its end. "
                   "Replace dataset files by writing a new file and renaming it, never in place",
                   watches[i].path, watches[i].len, (long long)sb.st_size);
    break;
  }
  pthread_mutex_unlock(&watch_mu);
  return st;
}
