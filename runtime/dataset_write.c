/* The atomic dataset writer: a temporary folder beside the destination, renamed on commit. */
#include "dataset_impl.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const NG_ARRAY_FILE[NG_ARR_COUNT_] = {
    [NG_ARR_INDPTR] = "indptr.npy",     [NG_ARR_INDICES] = "indices.npy",
    [NG_ARR_FEATURES] = "features.npy", [NG_ARR_LABELS] = "labels.npy",
    [NG_ARR_TRAIN] = "train_idx.npy",   [NG_ARR_VAL] = "val_idx.npy",
    [NG_ARR_TEST] = "test_idx.npy",     [NG_ARR_ORIG_ID] = "orig_id.npy",
};

ng_status ng__writer_begin(ng_dataset_writer *w, const char *dst_dir) {
  memset(w, 0, sizeof *w);
  if (!dst_dir || !*dst_dir)
    return ng__err(NG_ERR_INVALID_ARG, "no output folder given");
  struct stat st;
  /* lstat: a dangling symbolic link is there too, and would make the final rename fail. */
  if (lstat(dst_dir, &st) == 0)
    return ng__err(NG_ERR_EXISTS, "%s already exists; remove it or choose another output folder",
                   dst_dir);
  size_t n = strlen(dst_dir);
  while (n > 1 && dst_dir[n - 1] == '/')
    n--;
  w->dst_dir = strndup(dst_dir, n);
  bool exists;
  ng_status cst = w->dst_dir ? ng__dst_check(w->dst_dir, &exists) : NG_OK;
  if (cst != NG_OK) { /* the folder it goes into is missing (or not a folder) */
    free(w->dst_dir);
    w->dst_dir = NULL;
    return cst;
  }
  if (w->dst_dir) /* folders of writers killed before their rename go first */
    ng__tmp_sweep(w->dst_dir);
  w->tmp_dir = w->dst_dir ? ng__tmp_template(w->dst_dir) : NULL;
  if (!w->dst_dir || !w->tmp_dir) {
    ng__writer_abort(w);
    return ng__err(NG_ERR_NOMEM, "out of memory");
  }
  if (!mkdtemp(w->tmp_dir)) {
    int e = errno;
    free(w->tmp_dir);
    w->tmp_dir = NULL;
    ng__writer_abort(w);
    return ng__err_errno(NG_ERR_IO, e, "%s: cannot create a temporary folder beside it", dst_dir);
  }
  return NG_OK;
}

ng_status ng__writer_array(ng_npy **out, ng_dataset_writer *w, ng_array_id id, ng_dtype dtype,
                           int ndim, const int64_t *shape) {
  *out = NULL;
  if ((unsigned)id >= NG_ARR_COUNT_ || w->arrays[id].map)
    return ng__err(NG_ERR_INTERNAL, "dataset writer: array %d created twice", (int)id);
  char *path = ng__path_join(w->tmp_dir, NG_ARRAY_FILE[id]);
  if (!path)
    return NG_ERR_NOMEM;
  ng_status st = ng__npy_create(&w->arrays[id], path, dtype, ndim, shape);
  free(path);
  if (st == NG_OK)
    *out = &w->arrays[id];
  return st;
}

ng_status ng__writer_shrink(ng_dataset_writer *w, ng_array_id id, int64_t new_dim0) {
  char *path = ng__path_join(w->tmp_dir, NG_ARRAY_FILE[id]);
  if (!path)
    return NG_ERR_NOMEM;
  ng_status st = ng__npy_shrink(&w->arrays[id], path, new_dim0);
  free(path);
  return st;
}

/* A fresh random id as 32 hex digits. Every dataset written gets its own, even one derived from
 * another (reorder keeps the counts but changes the ids of the nodes), so that an update log
 * names the dataset it was written for (serve/delta.c). */
static ng_status random_id(char hex[2 * NG_DATASET_ID_BYTES + 1]) {
  uint8_t id[NG_DATASET_ID_BYTES];
  size_t got = 0;
  while (got < sizeof id) {
    ssize_t r = getrandom(id + got, sizeof id - got, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return ng__err_errno(NG_ERR_IO, r < 0 ? errno : EIO,
                           "dataset.json: cannot draw the dataset's random id (getrandom)");
    got += (size_t)r;
  }
  for (size_t i = 0; i < sizeof id; i++)
    snprintf(hex + 2 * i, 3, "%02x", id[i]);
  return NG_OK;
}

static ng_status write_json(const char *path, const ng_dataset_meta *meta) {
  const ng_dataset_info *in = &meta->info;
  char id[2 * NG_DATASET_ID_BYTES + 1];
  NG_CHECK(random_id(id));
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return ng__err(NG_ERR_NOMEM, "out of memory building dataset.json");
  cJSON_AddStringToObject(root, "format", NG_DATASET_FORMAT);
  cJSON_AddNumberToObject(root, "version", NG_DATASET_VERSION);
  cJSON_AddStringToObject(root, "name", in->name);
  cJSON_AddStringToObject(root, "id", id);
  cJSON_AddNumberToObject(root, "nodes", (double)in->nodes);
  cJSON_AddNumberToObject(root, "edges", (double)in->edges);
  cJSON_AddBoolToObject(root, "undirected", in->undirected != 0);
  cJSON_AddStringToObject(root, "index_dtype", in->index_bytes == 8 ? "int64" : "int32");
  cJSON_AddNumberToObject(root, "feature_dim", (double)in->feature_dim);
  cJSON_AddStringToObject(root, "feature_dtype", "float32");
  cJSON_AddNumberToObject(root, "classes", in->classes);
  cJSON *splits = cJSON_AddObjectToObject(root, "splits");
  if (splits) {
    cJSON_AddNumberToObject(splits, "train", (double)in->train);
    cJSON_AddNumberToObject(splits, "val", (double)in->val);
    cJSON_AddNumberToObject(splits, "test", (double)in->test);
  }
  cJSON_AddBoolToObject(root, "orig_ids", in->orig_ids != 0);
  cJSON_AddStringToObject(root, "source", meta->source);
  return ng__json_write(path, root);
}

ng_status ng__json_write(const char *path, cJSON *root) {
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text)
    return ng__err(NG_ERR_NOMEM, "out of memory printing dataset.json");
  ng_status st = NG_OK;
  FILE *f = fopen(path, "wx");
  if (!f) {
    st = ng__err_errno(NG_ERR_IO, errno, "%s", path);
  } else {
    size_t len = strlen(text);
    if (fwrite(text, 1, len, f) != len || fputc('\n', f) == EOF || fflush(f) != 0 ||
        fsync(fileno(f)) != 0)
      st = ng__err_errno(NG_ERR_IO, errno, "%s: write", path);
    if (fclose(f) != 0 && st == NG_OK)
      st = ng__err_errno(NG_ERR_IO, errno, "%s: close", path);
  }
  cJSON_free(text);
  return st;
}

static void fsync_parent(const char *path) {
  char buf[PATH_MAX];
  ng__strlcpy(buf, path, sizeof buf);
  char *slash = strrchr(buf, '/');
  const char *dir = ".";
  if (slash) {
    *slash = '\0';
    dir = slash == buf ? "/" : buf;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

ng_status ng__writer_commit(ng_dataset_writer *w, const ng_dataset_meta *meta) {
  ng_status st = NG_OK;
  for (int i = 0; i < NG_ARR_COUNT_ && st == NG_OK; i++) {
    if (!w->arrays[i].map)
      continue;
    char *path = ng__path_join(w->tmp_dir, NG_ARRAY_FILE[i]);
    st = path ? ng__npy_sync(&w->arrays[i], path) : NG_ERR_NOMEM;
    free(path);
    ng__npy_close(&w->arrays[i]);
  }
  if (st == NG_OK) {
    char *json = ng__path_join(w->tmp_dir, "dataset.json");
    st = json ? write_json(json, meta) : NG_ERR_NOMEM;
    free(json);
  }
  if (st == NG_OK) {
    /* The folder must open before it is published: a converter that wrote something the open
     * refuses (a bug, or an input at a limit nobody thought of) leaves nothing behind. */
    ng_dataset_t ds = NULL;
    st = ng_dataset_open(&ds, w->tmp_dir, NULL);
    ng_dataset_close(ds);
    if (st != NG_OK)
      ng__err_prefix("%s: the dataset written fails its own check, so it was not kept", w->dst_dir);
  }
  if (st != NG_OK) {
    ng__writer_abort(w);
    return st;
  }
  return ng__writer_publish(w);
}

ng_status ng__writer_publish(ng_dataset_writer *w) {
  ng_status st = NG_OK;
  {
    /* mkdtemp made the folder private (0700); a finished dataset gets ordinary permissions. */
    mode_t mask = umask(0);
    umask(mask);
    if (chmod(w->tmp_dir, 0777 & ~mask) != 0)
      st = ng__err_errno(NG_ERR_IO, errno, "%s: chmod", w->tmp_dir);
  }
  if (st == NG_OK) {
    /* The folder's entries must be durable before the rename publishes it. */
    int fd = open(w->tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
      st = ng__err_errno(NG_ERR_IO, errno, "%s: fsync", w->tmp_dir);
    if (fd >= 0)
      close(fd);
  }
  if (st == NG_OK) {
    /* RENAME_NOREPLACE: a destination that appeared meanwhile, even an empty folder, is never
     * replaced. File systems without it fall back to rename(), which still refuses a non-empty
     * folder. */
    int rc = renameat2(AT_FDCWD, w->tmp_dir, AT_FDCWD, w->dst_dir, RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      struct stat sb;
      rc = stat(w->dst_dir, &sb) == 0 ? (errno = EEXIST, -1) : rename(w->tmp_dir, w->dst_dir);
    }
    if (rc != 0)
      st = ng__err_errno(errno == ENOTEMPTY || errno == EEXIST ? NG_ERR_EXISTS : NG_ERR_IO, errno,
                         "%s: cannot move the finished dataset into place", w->dst_dir);
    else
      fsync_parent(w->dst_dir);
  }
  if (st == NG_OK) {
    free(w->tmp_dir);
    w->tmp_dir = NULL; /* nothing left to remove */
  }
  ng__writer_abort(w);
  return st;
}

void ng__writer_abort(ng_dataset_writer *w) {
  if (!w)
    return;
  for (int i = 0; i < NG_ARR_COUNT_; i++)
    ng__npy_close(&w->arrays[i]);
  if (w->tmp_dir) /* the dataset's files, and a converted dataset's links/ split */
    (void)ng__remove_tree(w->tmp_dir);
  free(w->tmp_dir);
  free(w->dst_dir);
  memset(w, 0, sizeof *w);
}

ng_status ng__dataset_random_id(char hex[2 * NG_DATASET_ID_BYTES + 1]) {
  return random_id(hex);
}
