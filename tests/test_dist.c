/* The data-parallel pieces below the trainer (docs/distributed.md): each rank's slice of a global
 * batch, the communicator's collectives over sockets with forked ranks (sums in rank order, the
 * same bits on every rank; broadcast, all-gather, local ranks by host; a rank that goes away),
 * the group of one rank, and the split of a host's cores between its ranks. The comparison
 * against one process is tests/cli_dist.sh (sockets) and cli_dist_mpi.sh (mpirun). */
#include "ng_test.h"

#include "comm_impl.h"
#include "pipeline_impl.h"
#include "pool_impl.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { SUITE_DEADLINE_S = 120 };

static void test_plan_slice(void) {
  const int64_t trains[] = {1, 7, 140, 1000};
  const int64_t batches[] = {1, 3, 64, 1000};
  for (size_t a = 0; a < NG_TEST_LEN(trains); a++)
    for (size_t b = 0; b < NG_TEST_LEN(batches); b++)
      for (int ranks = 1; ranks <= 4; ranks++) {
        ng_epoch_plan p = {.n_train = trains[a], .batch = batches[b], .ranks = ranks};
        const int64_t iters = (p.n_train + p.batch - 1) / p.batch;
        for (int64_t i = 0; i < iters; i++) {
          int64_t next = i * p.batch; /* the slices tile the global batch in rank order */
          const int64_t ni = NG_MIN(p.batch, p.n_train - i * p.batch);
          for (int r = 0; r < ranks; r++) {
            p.rank = r;
            int64_t begin;
            int32_t n;
            ng__plan_slice(&p, i, &begin, &n);
            /* The gradient all-reduce scales by the same share (sched/train_step.c). */
            const ng_grad_reduce g = {
                .rank = r, .ranks = ranks, .n_train = p.n_train, .batch = p.batch};
            int64_t g_ni, g_local;
            ng__grad_share(&g, i, &g_ni, &g_local);
            EXPECT_EQ_I(g_ni, ni);
            EXPECT_EQ_I(g_local, n);
            EXPECT_EQ_I(begin, next);
            EXPECT_TRUE(n >= ni / ranks && n <= ni / ranks + 1);
            next += n;
          }
          EXPECT_EQ_I(next, i * p.batch + ni);
        }
      }
}

/* The rank-order sum: ((1e8 + 1) + -1e8) + 1 is 1 in fp32, another order gives 0 or 2. */
static void test_sum_order(void) {
  const float parts[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  float out = -1.0f;
  ng__comm_sum(&out, parts, 4, 1, false);
  float want = 1e8f;
  want += 1.0f;
  want += -1e8f;
  want += 1.0f;
  EXPECT_TRUE(out == want);
  const double dparts[3] = {0.1, 0.2, 0.3};
  double dout = 0;
  ng__comm_sum(&dout, dparts, 3, 1, true);
  EXPECT_TRUE(dout == (0.1 + 0.2) + 0.3);
}

static void test_comm_one(void) {
  ng_comm_t c = NULL;
  unsetenv("NG_RANKS");
  EXPECT_OK(ng_comm_create(&c, "one"));
  EXPECT_EQ_I(ng_comm_size(c), 1);
  EXPECT_EQ_I(ng_comm_rank(c), 0);
  EXPECT_EQ_I(ng_comm_local_size(c), 1);
  EXPECT_STR(ng_comm_kind(c), "one");
  float x[3] = {1, 2, 3};
  EXPECT_OK(ng__comm_allreduce_f32(c, x, 3));
  EXPECT_TRUE(x[0] == 1 && x[1] == 2 && x[2] == 3);
  EXPECT_OK(ng__comm_barrier(c));
  EXPECT_STATUS(ng__comm_bcast(c, x, sizeof x, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("root 1");
  ng_comm_destroy(c);
  EXPECT_STATUS(ng_comm_create(&c, "carrier-pigeon"), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("carrier-pigeon");
  EXPECT_TRUE(c == NULL);
  EXPECT_EQ_I(ng_comm_size(NULL), -1);
  /* The socket group's variables, checked with their names. */
  setenv("NG_RANKS", "2", 1);
  setenv("NG_RANK", "2", 1);
  EXPECT_STATUS(ng_comm_create(&c, "auto"), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NG_RANK='2'");
  unsetenv("NG_RANKS");
  unsetenv("NG_RANK");
}

/* A listening loopback socket for rank 0 and its address. */
static int listen_loopback(char *addr, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  snprintf(addr, cap, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
  return fd;
}

enum { N_VALUES = 1000, RANKS = 3 };

static float value(int r, int i) {
  return (float)sin((double)(r * 7919 + i)) * (r == 1 ? 1e6f : 1.0f);
}

/* One rank of the collective test: exit status 0 when every check passed, else the number of
 * the first failed check. */
static int rank_main(int r, int lfd, const char *addr) {
  char s[32];
  snprintf(s, sizeof s, "%d", r);
  setenv("NG_RANK", s, 1);
  setenv("NG_RANKS", "3", 1);
  setenv("NG_DIST_ADDR", addr, 1);
  snprintf(s, sizeof s, "host%d", r / 2); /* ranks 0 and 1 on one host, rank 2 on another */
  setenv("NG_HOST_NAME", s, 1);
  if (r == 0) {
    snprintf(s, sizeof s, "%d", lfd);
    setenv("NG_DIST_LISTEN_FD", s, 1);
  } else {
    close(lfd);
  }
  ng_comm_t c = NULL;
  if (ng_comm_create(&c, "auto") != NG_OK) {
    fprintf(stderr, "rank %d: %s\n", r, ng_last_error());
    return 1;
  }
  if (ng_comm_rank(c) != r || ng_comm_size(c) != RANKS || strcmp(ng_comm_kind(c), "socket") != 0)
    return 2;
  if (ng_comm_local_rank(c) != (r == 1) || ng_comm_local_size(c) != (r < 2 ? 2 : 1))
    return 3;
  float x[N_VALUES], parts[RANKS * N_VALUES], want[N_VALUES];
  for (int k = 0; k < RANKS; k++)
    for (int i = 0; i < N_VALUES; i++)
      parts[k * N_VALUES + i] = value(k, i);
  ng__comm_sum(want, parts, RANKS, N_VALUES, false);
  for (int i = 0; i < N_VALUES; i++)
    x[i] = value(r, i);
  if (ng__comm_allreduce_f32(c, x, N_VALUES) != NG_OK || memcmp(x, want, sizeof x) != 0)
    return 4;
  double d[2] = {r + 0.5, 1.0};
  if (ng__comm_allreduce_f64(c, d, 2) != NG_OK || d[0] != 4.5 || d[1] != 3.0)
    return 5;
  char msg[16] = "";
  if (r == 2)
    snprintf(msg, sizeof msg, "from rank 2");
  if (ng__comm_bcast(c, msg, sizeof msg, 2) != NG_OK || strcmp(msg, "from rank 2") != 0)
    return 6;
  int32_t mine = 100 + r, all[RANKS] = {0};
  if (ng__comm_allgather(c, &mine, all, sizeof mine) != NG_OK || all[0] != 100 || all[1] != 101 ||
      all[2] != 102)
    return 7;
  if (ng__comm_barrier(c) != NG_OK)
    return 8;
  /* Rank 2 leaves: the next collective fails on the others, naming it. */
  if (r == 2) {
    ng_comm_destroy(c);
    return 0;
  }
  float y = 1.0f;
  if (ng__comm_allreduce_f32(c, &y, 1) != NG_ERR_IO)
    return 9;
  if (!strstr(ng_last_error(), "rank") || !strstr(ng_last_error(), "closed"))
    return r == 0 ? 10 : 0; /* rank 1 hears it from rank 0, which stops talking */
  ng_comm_destroy(c);
  return 0;
}

static void test_comm_socket(void) {
  char addr[64];
  int lfd = listen_loopback(addr, sizeof addr);
  EXPECT_TRUE(lfd >= 0);
  if (lfd < 0)
    return;
  fflush(stdout);
  fflush(stderr);
  pid_t pid[RANKS];
  for (int r = 0; r < RANKS; r++) {
    pid[r] = fork();
    if (pid[r] == 0)
      _exit(rank_main(r, lfd, addr));
  }
  close(lfd);
  for (int r = 0; r < RANKS; r++) {
    int status = 0;
    EXPECT_TRUE(waitpid(pid[r], &status, 0) == pid[r]);
    EXPECT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
      ng_test_fail(__FILE__, __LINE__, "rank %d failed check %d", r, WEXITSTATUS(status));
  }
}

/* A list of OS cpu indices as a bitmap of the first 1024. */
static void list_bits(const char *list, unsigned char *bits) {
  memset(bits, 0, 1024);
  int *ids = NULL, n = 0;
  if (!*list)
    return;
  EXPECT_OK(ng__cpuset_parse(&ids, &n, list));
  for (int i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < 1024)
      bits[ids[i]] = 1;
  free(ids);
}

static void test_cpus_slice(void) {
  char near[1024], slice[1024];
  EXPECT_OK(ng__cpus_near(near, sizeof near, NULL));
  EXPECT_TRUE(strlen(near) > 0);
  unsigned char all[1024], got[1024], seen[1024];
  list_bits(near, all);
  int n_all = 0;
  for (int i = 0; i < 1024; i++)
    n_all += all[i];
  for (int m = 1; m <= 3; m++) {
    memset(seen, 0, sizeof seen);
    for (int k = 0; k < m; k++) {
      EXPECT_OK(ng__cpus_slice(slice, sizeof slice, near, k, m));
      list_bits(slice, got);
      int n = 0;
      for (int i = 0; i < 1024; i++) {
        n += got[i];
        EXPECT_TRUE(!got[i] || all[i]);                 /* inside the list */
        EXPECT_TRUE(!(got[i] && seen[i]) || n_all < m); /* disjoint when there are enough */
        seen[i] |= got[i];
      }
      EXPECT_TRUE(n > 0);
    }
    EXPECT_TRUE(memcmp(seen, all, sizeof all) == 0); /* together: the whole list */
  }
  EXPECT_STATUS(ng__cpus_slice(slice, sizeof slice, near, 2, 2), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__cpus_slice(slice, sizeof slice, "0-x", 0, 1), NG_ERR_INVALID_ARG);
}

/* ---- the trainer through the public API: ranks as processes of this binary ---- */

enum { TRAIN_EPOCHS = 2, TRAIN_BATCH = 96 };

static ng_model_t small_model(int64_t in_dim, int32_t classes) {
  ng_model_t m = NULL;
  if (ng_model_create(&m, NG_MODEL_SAGE, in_dim) != NG_OK)
    return NULL;
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.fanout = 5;
  l0.out_dim = 16;
  l1.fanout = 8;
  l1.out_dim = classes;
  l1.activation = NG_ACT_NONE;
  if (ng_model_add_layer(m, &l0) != NG_OK || ng_model_add_layer(m, &l1) != NG_OK) {
    ng_model_destroy(m);
    return NULL;
  }
  return m;
}

/* Trains TRAIN_EPOCHS epochs on the dataset at `dir` as one rank of `comm` (NULL: alone), writes
 * the epoch losses to losses[] and the checkpoint to `ckpt`. */
static ng_status train_rank(const char *dir, ng_comm_t comm, double *losses, const char *ckpt) {
  ng_dataset_t ds = NULL;
  ng_model_t m = NULL;
  ng_trainer_t t = NULL;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  ng_status st = ng_dataset_open(&ds, dir, NULL);
  if (st == NG_OK)
    st = ng_dataset_info_get(&info, ds);
  if (st == NG_OK && !(m = small_model(info.feature_dim, info.classes)))
    st = NG_ERR_NOMEM;
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = TRAIN_BATCH;
  o.workers = 1;
  o.threads = 1;
  o.optimizer = NG_OPTIMIZER_SGD;
  o.lr = 0.2;
  o.seed = 11;
  o.comm = comm;
  if (st == NG_OK)
    st = ng_trainer_create(&t, ds, m, &o);
  for (int e = 0; st == NG_OK && e < TRAIN_EPOCHS; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    st = ng_trainer_epoch(&s, t);
    losses[e] = s.loss;
    if (st == NG_OK && s.ranks != (comm ? ng_comm_size(comm) : 1))
      st = ng__err(NG_ERR_STATE, "epoch stats report %d ranks", (int)s.ranks);
  }
  if (st == NG_OK && ckpt)
    st = ng_trainer_save(t, ckpt);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
  return st;
}

/* `test_dist --rank DIR R ADDR FD`: rank R of 2 (the parent set NG_* for it); writes its losses
 * to DIR/losses.R and its checkpoint to DIR/ckpt.R. */
static int rank_child(const char *dir, int r) {
  ng_comm_t comm = NULL;
  if (ng_comm_create(&comm, "env") != NG_OK) {
    fprintf(stderr, "rank %d: %s\n", r, ng_last_error());
    return 1;
  }
  char path[4096];
  double losses[TRAIN_EPOCHS];
  snprintf(path, sizeof path, "%s/ckpt.%d", dir, r);
  char data[4096];
  snprintf(data, sizeof data, "%s/data", dir);
  ng_status st = train_rank(data, comm, losses, path);
  ng_comm_destroy(comm);
  if (st != NG_OK) {
    fprintf(stderr, "rank %d: %s\n", r, ng_last_error());
    return 1;
  }
  snprintf(path, sizeof path, "%s/losses.%d", dir, r);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(losses, sizeof losses, 1, f) != 1)
    return 1;
  return fclose(f) != 0;
}

static bool same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  bool same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    same = ca == cb;
    if (ca == EOF || cb == EOF)
      break;
  }
  if (fa)
    fclose(fa);
  if (fb)
    fclose(fb);
  return same;
}

static void test_trainer_ranks(void) {
  const char *dir = ng_test_tmpdir();
  char data[4096], path[4096];
  snprintf(data, sizeof data, "%s/data", dir);
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.nodes = 3000;
  g.feature_dim = 16;
  g.classes = 4;
  g.train_frac = 0.2; /* 600 training nodes: 7 iterations of 96, the last of 24 */
  g.seed = 5;
  EXPECT_OK(ng_dataset_generate(data, &g));
  /* Alone, and as the one rank of a group of one: the same bits. */
  double alone[TRAIN_EPOCHS], one[TRAIN_EPOCHS];
  ng_comm_t c1 = NULL;
  EXPECT_OK(ng_comm_create(&c1, "one"));
  snprintf(path, sizeof path, "%s/ckpt.alone", dir);
  EXPECT_OK(train_rank(data, NULL, alone, path));
  EXPECT_OK(train_rank(data, c1, one, NULL));
  ng_comm_destroy(c1);
  for (int e = 0; e < TRAIN_EPOCHS; e++)
    EXPECT_TRUE(alone[e] == one[e]);
  /* Two ranks, each a fresh process of this binary. */
  char addr[64];
  int lfd = listen_loopback(addr, sizeof addr);
  EXPECT_TRUE(lfd >= 0);
  if (lfd < 0)
    return;
  fflush(stdout);
  fflush(stderr);
  pid_t pid[2];
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      char rank[16], fd[16];
      snprintf(rank, sizeof rank, "%d", r);
      snprintf(fd, sizeof fd, "%d", lfd);
      setenv("NG_RANK", rank, 1);
      setenv("NG_RANKS", "2", 1);
      setenv("NG_DIST_ADDR", addr, 1);
      if (r == 0)
        setenv("NG_DIST_LISTEN_FD", fd, 1);
      else
        close(lfd);
      execl("/proc/self/exe", "test_dist", "--rank", dir, rank, (char *)NULL);
      _exit(127);
    }
  }
  close(lfd);
  for (int r = 0; r < 2; r++) {
    int status = 0;
    EXPECT_TRUE(waitpid(pid[r], &status, 0) == pid[r]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  /* Every rank holds the same parameters, bit for bit, and reported the same losses... */
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s/ckpt.0", dir);
  snprintf(b, sizeof b, "%s/ckpt.1", dir);
  EXPECT_TRUE(same_file(a, b));
  double losses[2][TRAIN_EPOCHS];
  for (int r = 0; r < 2; r++) {
    snprintf(path, sizeof path, "%s/losses.%d", dir, r);
    FILE *f = fopen(path, "rb");
    EXPECT_TRUE(f && fread(losses[r], sizeof losses[r], 1, f) == 1);
    if (f)
      fclose(f);
  }
  /* ... which are one process's within fp32 rounding (the parameters: tests/cli_dist.sh). */
  for (int e = 0; e < TRAIN_EPOCHS; e++) {
    EXPECT_TRUE(losses[0][e] == losses[1][e]);
    EXPECT_NEAR(losses[0][e], alone[e], 1e-5 * alone[e]);
  }
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--rank") == 0)
    return rank_child(argv[2], atoi(argv[3]));
  alarm(SUITE_DEADLINE_S); /* a hung collective kills the suite instead of ctest waiting */
  RUN_TEST(test_plan_slice);
  RUN_TEST(test_sum_order);
  RUN_TEST(test_comm_one);
  RUN_TEST(test_comm_socket);
  RUN_TEST(test_cpus_slice);
  RUN_TEST(test_trainer_ranks);
  return ng_test_summary();
}
