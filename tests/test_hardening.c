/* Hostile inputs a user can give by mistake or on purpose (issue 37): outputs that are not
 * regular files, folders that do not exist, ids at the edge of int64, non-finite features and
 * outputs, files that shrink under a mapping, and malformed dataset.json. */
#include "core_impl.h"
#include "dataset_impl.h"
#include "ng_test.h"
#include "npy_impl.h"
#include "safetensors_impl.h"

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- atomic writes ---- */

static int64_t count_entries(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
  FILE *p = popen(cmd, "r");
  long n = -1;
  if (p) {
    if (fscanf(p, "%ld", &n) != 1)
      n = -1;
    pclose(p);
  }
  return n;
}

/* Every writer of a file refuses what is not a regular file at its destination, says what it
 * is, and leaves it (and its folder) as it was. */
static void expect_refused(const char *dst, const char *kind) {
  const char payload[] = "new content\n";
  const int64_t shape[1] = {3};
  const int32_t vals[3] = {1, 2, 3};
  const float w[2] = {1.0f, 2.0f};
  ng_st_tensor t = {
      .name = "w", .dtype = NG_DTYPE_F32, .ndim = 1, .shape = {2}, .data = w, .nbytes = sizeof w};
  const int64_t before = count_entries(ng_test_tmpdir());
  EXPECT_STATUS(ng_file_write(dst, payload, sizeof payload - 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS(kind);
  EXPECT_STATUS(ng_npy_save(dst, 0, NG_INT32, 1, shape, vals), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS(kind);
  EXPECT_STATUS(ng__st_write(dst, &t, 1, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS(kind);
  EXPECT_EQ_I(count_entries(ng_test_tmpdir()), before); /* no temporary left */
}

static void test_atomic_refuses_irregular(void) {
  const char *fifo = strdup(ng_test_path("out.fifo"));
  EXPECT_EQ_I(mkfifo(fifo, 0600), 0);
  expect_refused(fifo, "is a FIFO");
  struct stat st;
  EXPECT_TRUE(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));

  /* A link to a regular file: refused, and neither the link nor its target changes. */
  const char *target = strdup(ng_test_path("target.txt"));
  const char *link = strdup(ng_test_path("out.link"));
  EXPECT_TRUE(ng_test_write_file(target, "old", 3));
  EXPECT_EQ_I(symlink(target, link), 0);
  expect_refused(link, "is a symbolic link");
  EXPECT_TRUE(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  char *text = ng_test_read_file(target, NULL);
  EXPECT_STR(text ? text : "", "old");
  free(text);
  /* A dangling link is a link too. */
  const char *dangling = strdup(ng_test_path("dangling.link"));
  EXPECT_EQ_I(symlink(ng_test_path("nowhere"), dangling), 0);
  expect_refused(dangling, "is a symbolic link");
  EXPECT_TRUE(!ng_test_exists(ng_test_path("nowhere")));

  const char *dir = strdup(ng_test_path("out.dir"));
  EXPECT_EQ_I(mkdir(dir, 0700), 0);
  expect_refused(dir, "is a folder");

  const char *sock = strdup(ng_test_path("out.sock"));
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  ng__strlcpy(sa.sun_path, sock, sizeof sa.sun_path);
  if (fd >= 0 && strlen(sock) < sizeof sa.sun_path &&
      bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
    expect_refused(sock, "is a socket");
  if (fd >= 0)
    close(fd);
  free((void *)fifo);
  free((void *)target);
  free((void *)link);
  free((void *)dangling);
  free((void *)dir);
  free((void *)sock);
}

static void test_atomic_replaces_regular(void) {
  const char *dst = strdup(ng_test_path("regular.txt"));
  EXPECT_TRUE(ng_test_write_file(dst, "old content", 11));
  EXPECT_OK(ng_file_write(dst, "new", 3));
  size_t len = 0;
  char *text = ng_test_read_file(dst, &len);
  EXPECT_STR(text ? text : "", "new");
  free(text);
  struct stat st;
  EXPECT_TRUE(stat(dst, &st) == 0 && (st.st_mode & 0777) == 0644);
  free((void *)dst);
}

static void test_missing_folder(void) {
  const char *dst = strdup(ng_test_path("no-such-folder/out.json"));
  EXPECT_STATUS(ng_file_write(dst, "x", 1), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("no-such-folder does not exist");
  EXPECT_ERR_HAS("mkdir -p");
  /* A dataset folder inside a missing folder: the same message, nothing created. */
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_PLANETOID;
  const char *out = strdup(ng_test_path("data/cora"));
  EXPECT_STATUS(ng_dataset_convert(out, src, &co), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("data does not exist");
  EXPECT_TRUE(!ng_test_exists(ng_test_path("data")));
  free((void *)dst);
  free((void *)out);
}

/* ---- conversions ---- */

/* The largest id the docs accept, 2^63-1: converted, opened, kept as the original id. */
static void test_snap_int64_max(void) {
  const char *src = strdup(ng_test_path("max.txt"));
  const char text[] = "0 5\n5 9223372036854775807\n9223372036854775807 0\n";
  EXPECT_TRUE(ng_test_write_file(src, text, sizeof text - 1));
  const char *dst = strdup(ng_test_path("max"));
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dst, NULL));
  const int64_t *orig = NULL;
  if (ds)
    EXPECT_OK(ng_dataset_orig_ids(&orig, ds));
  if (orig) {
    EXPECT_EQ_I(ds->info.nodes, 3);
    EXPECT_EQ_I(orig[0], 0);
    EXPECT_EQ_I(orig[1], 5);
    EXPECT_EQ_I(orig[2], INT64_MAX);
  }
  ng_dataset_close(ds);
  free((void *)src);
  free((void *)dst);
}

/* A conversion that fails, at any step, leaves nothing at the output path or beside it. */
static void test_failed_conversion_leaves_nothing(void) {
  const char *dir = strdup(ng_test_path("convfail"));
  EXPECT_EQ_I(mkdir(dir, 0700), 0);
  char src[4200], dst[4200];
  snprintf(src, sizeof src, "%s/edges.txt", dir);
  snprintf(dst, sizeof dst, "%s/out", dir);
  /* An id past int64: refused on the second pass's line. */
  const char text[] = "0 1\n1 2\n2 9223372036854775808\n";
  EXPECT_TRUE(ng_test_write_file(src, text, sizeof text - 1));
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("edges.txt:3");
  EXPECT_EQ_I(count_entries(dir), 1); /* edges.txt only */
  free((void *)dir);
}

/* A writer whose arrays the open would refuse (here an edge to a node that does not exist, as a
 * converter bug would write) publishes nothing: the folder is checked before its rename. */
static void test_writer_checks_before_publishing(void) {
  const char *dir = strdup(ng_test_path("badwrite"));
  EXPECT_EQ_I(mkdir(dir, 0700), 0);
  char dst[4200];
  snprintf(dst, sizeof dst, "%s/out", dir);
  ng_dataset_writer w;
  EXPECT_OK(ng__writer_begin(&w, dst));
  ng_npy *ptr = NULL, *idx = NULL;
  const int64_t nptr = 3, nidx = 1;
  EXPECT_OK(ng__writer_array(&ptr, &w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, &nptr));
  EXPECT_OK(ng__writer_array(&idx, &w, NG_ARR_INDICES, NG_DTYPE_I32, 1, &nidx));
  if (!ptr || !idx) {
    ng__writer_abort(&w);
    return;
  }
  const int64_t indptr[3] = {0, 1, 1};
  memcpy(ptr->data, indptr, sizeof indptr);
  ((int32_t *)idx->data)[0] = 5; /* node 5 of 2 */
  ng_dataset_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.info = (ng_dataset_info)NG_DATASET_INFO_INIT;
  ng__strlcpy(meta.info.name, "bad", sizeof meta.info.name);
  meta.info.nodes = 2;
  meta.info.edges = 1;
  meta.info.index_bytes = 4;
  EXPECT_STATUS(ng__writer_commit(&w, &meta), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("fails its own check, so it was not kept");
  EXPECT_ERR_HAS("indices.npy");
  EXPECT_EQ_I(count_entries(dir), 0);
  free((void *)dir);
}

/* ---- non-finite features and outputs ---- */

/* A generated dataset of 10000 nodes (more than the 4098 rows open samples) with a NaN at
 * features[row, 3]; returns the folder (static buffer). */
static const char *nan_dataset(const char *name, int64_t row) {
  static char dir[4200];
  snprintf(dir, sizeof dir, "%s", ng_test_path(name));
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.nodes = 10000;
  g.avg_degree = 4;
  g.feature_dim = 8;
  g.classes = 3;
  g.seed = 5;
  EXPECT_OK(ng_dataset_generate(dir, &g));
  char path[4300];
  snprintf(path, sizeof path, "%s/features.npy", dir);
  size_t len = 0;
  unsigned char *npy = ng_test_read_file(path, &len);
  if (!npy)
    return dir;
  const size_t off = 10 + (size_t)(npy[8] | npy[9] << 8); /* .npy version 1 header */
  const float nan = NAN;
  memcpy(npy + off + ((size_t)row * 8 + 3) * sizeof(float), &nan, sizeof nan);
  EXPECT_TRUE(ng_test_write_file(path, npy, len));
  free(npy);
  return dir;
}

static void test_check_features_full(void) {
  /* Row 1 falls between the sampled rows 0 and 2 (10000 rows, 4098 samples). */
  const char *dir = nan_dataset("nan1", 1);
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL)); /* the sample misses it */
  ng_dataset_close(ds);
  ds = NULL;
  ng_open_opts oo = NG_OPEN_OPTS_INIT;
  oo.check_features = 1;
  EXPECT_STATUS(ng_dataset_open(&ds, dir, &oo), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("features[1, 3] is NaN");
  ng_dataset_close(ds);
}

/* Inference whose output is not finite is an error naming the nodes, not class 0 or a NaN loss. */
static void test_nonfinite_output(void) {
  const int64_t row = 1;
  const char *dir = nan_dataset("nan2", row);
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  if (!ds)
    return;
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 8));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.out_dim = 8;
  l1.out_dim = 3;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.threads = 2;
  o.workers = -1;
  o.temp_dir = ng_test_tmpdir();
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, ds, m, &o));
  if (t) {
    int32_t *cls = ng_test_xmalloc(10000 * sizeof *cls);
    EXPECT_STATUS(ng_trainer_predict(cls, t), NG_ERR_NONFINITE);
    EXPECT_ERR_HAS("NaN or infinite for node(s) 1");
    free(cls);
    /* The node itself, through the subset path. */
    const int64_t nodes[2] = {0, row};
    float logits[6];
    EXPECT_STATUS(ng_trainer_predict_nodes(logits, NULL, t, nodes, 2), NG_ERR_NONFINITE);
    EXPECT_ERR_HAS("node(s) 1");
    /* Evaluation over every split: the node's receptive field is in at least one of them. */
    int failed = 0;
    for (int s = 0; s < 3; s++) {
      double acc = 0, loss = 0;
      const ng_status st = ng_trainer_evaluate(&acc, &loss, t, (ng_split)s);
      EXPECT_TRUE(st == NG_OK || st == NG_ERR_NONFINITE);
      EXPECT_TRUE(st != NG_OK || isfinite(loss));
      failed += st == NG_ERR_NONFINITE;
    }
    EXPECT_TRUE(failed > 0);
  }
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* ---- files that shrink under a run ---- */

static void test_truncated_features(void) {
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_PLANETOID;
  const char *dir = strdup(ng_test_path("cora-trunc"));
  EXPECT_OK(ng_dataset_convert(dir, src, &co));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, ds ? ds->info.feature_dim : 1));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.out_dim = 8;
  l0.fanout = 5;
  l1.out_dim = ds ? ds->info.classes : 1;
  l1.fanout = 5;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.threads = 2;
  o.batch = 512;
  o.features_memory = NG_FEATURES_MAPPED; /* the trainer reads the file's mapping */
  o.temp_dir = ng_test_tmpdir();
  ng_trainer_t t = NULL;
  if (ds)
    EXPECT_OK(ng_trainer_create(&t, ds, m, &o));
  if (t) {
    char path[4200];
    snprintf(path, sizeof path, "%s/features.npy", dir);
    struct stat sb;
    EXPECT_EQ_I(stat(path, &sb), 0);
    EXPECT_EQ_I(truncate(path, sb.st_size / 2), 0);
    int32_t *cls = ng_test_xmalloc((size_t)ds->info.nodes * sizeof *cls);
    EXPECT_STATUS(ng_trainer_predict(cls, t), NG_ERR_IO);
    EXPECT_ERR_HAS("features.npy: the file shrank from");
    free(cls);
    ng_epoch_stats es = NG_EPOCH_STATS_INIT;
    EXPECT_STATUS(ng_trainer_epoch(&es, t), NG_ERR_IO);
    EXPECT_ERR_HAS("features.npy: the file shrank from");
  }
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
  free((void *)dir);
}

/* A read past the end of a watched file that shrank between the check and the read: the process
 * still ends with SIGBUS, after a line naming the file (in a child process). */
static void test_sigbus_names_file(void) {
  const char *path = strdup(ng_test_path("bus.npy"));
  const int64_t shape[1] = {1 << 16};
  int32_t *vals = ng_test_xmalloc((size_t)shape[0] * sizeof *vals);
  memset(vals, 1, (size_t)shape[0] * sizeof *vals);
  EXPECT_OK(ng_npy_save(path, 0, NG_INT32, 1, shape, vals));
  free(vals);
  int pipefd[2];
  EXPECT_EQ_I(pipe(pipefd), 0);
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], STDERR_FILENO);
    ng_npy a;
    if (ng__npy_map(&a, path, false) != NG_OK || truncate(path, 64) != 0)
      _exit(3);
    volatile const int32_t *p = a.data;
    int32_t sum = 0;
    for (int64_t i = 0; i < shape[0]; i += 1024)
      sum += p[i];
    _exit(sum == 0 ? 4 : 5); /* not reached: the read past the end raised SIGBUS */
  }
  close(pipefd[1]);
  char out[1024] = "";
  size_t got = 0;
  ssize_t r;
  while (got + 1 < sizeof out && (r = read(pipefd[0], out + got, sizeof out - 1 - got)) > 0)
    got += (size_t)r;
  out[got] = '\0';
  close(pipefd[0]);
  int status = 0;
  EXPECT_EQ_I(waitpid(pid, &status, 0), pid);
  /* Killed by SIGBUS; or, under a sanitizer, by its SIGBUS handler (which ours chains to) with
   * its own failing status, never by reaching the child's exits. */
  EXPECT_TRUE(WIFSIGNALED(status) ? WTERMSIG(status) == SIGBUS
                                  : WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
                                        (WEXITSTATUS(status) < 3 || WEXITSTATUS(status) > 5));
  EXPECT_TRUE(strstr(out, "bus.npy shrank while mapped") != NULL);
  if (!strstr(out, "bus.npy shrank while mapped"))
    fprintf(stderr, "child's stderr: %s\n", out);
  free((void *)path);
}

/* ---- messages ---- */

/* A safetensors header whose length leaves the data section misaligned names the tensor's byte
 * in the file, not "data offset 0". */
static void test_misaligned_header_names_offset(void) {
  const char json[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  const size_t hlen = sizeof json - 1; /* 54: the data starts at byte 62 */
  unsigned char *buf = ng_test_xmalloc(8 + hlen + 4);
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(buf + 8, json, hlen);
  memset(buf + 8 + hlen, 0, 4);
  ng_st_file f;
  EXPECT_STATUS(ng__st_parse(&f, buf, 8 + hlen + 4, "m.safetensors"), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("tensor 'w' starts at byte 62 of the file (data offset 0 after a 54-byte header)");
  free(buf);
}

/* What a path is, when it is not what was expected: a FIFO is named as one. */
static void test_fifo_named(void) {
  const char *fifo = strdup(ng_test_path("ds.fifo"));
  EXPECT_EQ_I(mkfifo(fifo, 0600), 0);
  ng_dataset_t ds = NULL;
  EXPECT_STATUS(ng_dataset_open(&ds, fifo, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("is a FIFO (named pipe), not a folder");
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  EXPECT_STATUS(ng_dataset_convert(ng_test_path("fifo-out"), fifo, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("is a FIFO (named pipe); the snap format reads an edge-list file");
  o.format = NG_FORMAT_PLANETOID;
  EXPECT_STATUS(ng_dataset_convert(ng_test_path("fifo-out"), fifo, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("is a FIFO (named pipe); the planetoid format reads a folder");
  /* A FIFO in place of an array of a dataset folder. */
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  const char *dir = strdup(ng_test_path("cora-fifo"));
  EXPECT_OK(ng_dataset_convert(dir, src, &o));
  char path[4200];
  snprintf(path, sizeof path, "%s/labels.npy", dir);
  EXPECT_EQ_I(unlink(path), 0);
  EXPECT_EQ_I(mkfifo(path, 0600), 0);
  EXPECT_STATUS(ng_dataset_open(&ds, dir, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("labels.npy: is a FIFO (named pipe), not a regular file");
  free((void *)fifo);
  free((void *)dir);
}

/* ---- dataset.json ---- */

/* Cora's folder with dataset.json rewritten by `edit` (a sed expression); returns the folder. */
static const char *cora_json(const char *name, const char *edit) {
  static char dir[4200];
  snprintf(dir, sizeof dir, "%s", ng_test_path(name));
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_PLANETOID;
  EXPECT_OK(ng_dataset_convert(dir, src, &co));
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "sed -i '%s' '%s/dataset.json'", edit, dir);
  EXPECT_EQ_I(system(cmd), 0);
  return dir;
}

static void expect_json_refused(const char *name, const char *edit, const char *needle) {
  const char *dir = cora_json(name, edit);
  ng_dataset_t ds = NULL;
  EXPECT_STATUS(ng_dataset_open(&ds, dir, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(needle);
  ng_dataset_close(ds);
}

static void test_json_strict(void) {
  expect_json_refused("j_exp", "s/\"nodes\":\t2708/\"nodes\": 2.708e3/",
                      "\"nodes\" is 2.708e3; it must be an integer written in plain digits");
  expect_json_refused("j_dup", "s/\"nodes\":\t2708,/\"nodes\": 2708, \"nodes\": 2709,/",
                      "key \"nodes\" appears twice");
  expect_json_refused("j_trail", "$ s/}/} trailing/", "unexpected text after the JSON object");
  expect_json_refused("j_nulesc", "s/\"name\":\t\"cora\"/\"name\": \"co\\\\u0000ra\"/",
                      "the escape \\u0000");
  /* 2^53 + 1 is named as written, not as the double it rounds to. */
  expect_json_refused("j_big", "s/\"edges\":\t[0-9]*/\"edges\": 9007199254740993/",
                      "\"edges\" is 9007199254740993; it must be an integer of at most 2^53");
  expect_json_refused("j_split", "s/\"val\":\t500/\"val\": 5e2/", "\"splits.val\" is 5e2");
  /* A NUL byte inside a string. */
  const char *dir = cora_json("j_nul", "s/\"name\":\t\"cora\"/\"name\": \"coXra\"/");
  char path[4300];
  snprintf(path, sizeof path, "%s/dataset.json", dir);
  size_t len = 0;
  char *text = ng_test_read_file(path, &len);
  char *x = text ? strstr(text, "coXra") : NULL;
  if (x) {
    x[2] = '\0';
    EXPECT_TRUE(ng_test_write_file(path, text, len));
  }
  free(text);
  ng_dataset_t ds = NULL;
  EXPECT_STATUS(ng_dataset_open(&ds, dir, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("is a NUL byte");

  /* 65536 classes beside Cora's 7: a 65536-wide output layer; up to 2 x 7 + 8 are accepted. */
  expect_json_refused("j_classes", "s/\"classes\":\t7/\"classes\": 65536/",
                      "\"classes\" is 65536 but the largest label in labels.npy is 6");
  dir = cora_json("j_classes22", "s/\"classes\":\t7/\"classes\": 22/");
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_dataset_close(ds);
  ds = NULL;
  expect_json_refused("j_classes23", "s/\"classes\":\t7/\"classes\": 23/", "set \"classes\" to 7");
}

/* --device cuda where it cannot run says why and what to use instead. */
static void test_no_gpu_message(void) {
  int count = 0;
  char desc[256];
  if (ng_has_cuda() && (ng_cuda_devices(&count, desc, sizeof desc) != NG_OK || count > 0))
    return; /* a GPU is there: nothing to refuse */
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_PLANETOID;
  const char *dir = strdup(ng_test_path("cora-cuda"));
  EXPECT_OK(ng_dataset_convert(dir, src, &co));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, ds ? ds->info.feature_dim : 1));
  ng_layer_opts l = NG_LAYER_OPTS_INIT;
  l.out_dim = 7;
  l.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.device = "cuda";
  ng_trainer_t t = NULL;
  if (ds)
    EXPECT_STATUS(ng_trainer_create(&t, ds, m, &o), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS(ng_has_cuda() ? "no CUDA device (no GPU, or no NVIDIA driver loaded); use "
                                 "--device cpu"
                               : "this build of neargnn has no CUDA backend");
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
  free((void *)dir);
}

int main(void) {
  RUN_TEST(test_atomic_refuses_irregular);
  RUN_TEST(test_atomic_replaces_regular);
  RUN_TEST(test_missing_folder);
  RUN_TEST(test_snap_int64_max);
  RUN_TEST(test_failed_conversion_leaves_nothing);
  RUN_TEST(test_writer_checks_before_publishing);
  RUN_TEST(test_check_features_full);
  RUN_TEST(test_nonfinite_output);
  RUN_TEST(test_truncated_features);
  RUN_TEST(test_sigbus_names_file);
  RUN_TEST(test_misaligned_header_names_offset);
  RUN_TEST(test_fifo_named);
  RUN_TEST(test_json_strict);
  RUN_TEST(test_no_gpu_message);
  return ng_test_summary();
}
