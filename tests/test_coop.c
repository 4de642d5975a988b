/* The cooperative cold fetch below the trainer (sched/coop.c, docs/distributed.md): the owner
 * rule and each rank's requests; the exchange of several simulated ranks run in one process
 * (every row a rank needs delivered to it exactly once with the table's values, every row the
 * host needs read once, by its owner, the counts matching); the communicator's all-to-all over
 * sockets with forked ranks (blocks of any size, empty ones included); and ng__coop_step over
 * sockets (the overlay gives the table's rows, and the host reads each cold row once). The
 * comparison of whole runs with and without cooperation is tests/cli_coop.sh. */
#include "ng_test.h"

#include "coop_impl.h"
#include "features_bf16_impl.h"
#include "rng.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { SUITE_DEADLINE_S = 120, NODES = 600, HOT = 100, DIM = 5, MAX_R = 4 };

/* A table whose every element differs, never zero. */
static float *make_table(void) {
  float *t = malloc((size_t)NODES * DIM * sizeof *t);
  for (int64_t g = 0; g < NODES; g++)
    for (int c = 0; c < DIM; c++)
      t[g * DIM + c] = 1.0f + (float)g + 0.125f * (float)c;
  return t;
}

/* Rank r's cold set of step `step`: distinct ids in [HOT, NODES), drawn from a window the ranks
 * share partly (so that they overlap), in no order; rank 1 of step 2 needs none. */
static int64_t cold_set(int64_t *out, int r, int ranks, int step) {
  if (r == 1 && step == 2)
    return 0;
  ng_rng g;
  ng_rng_seed(&g, (uint64_t)(1000 * step + 17 * r + ranks));
  uint8_t taken[NODES] = {0};
  const int64_t lo = HOT + 40 * r, span = 300;
  int64_t n = 0;
  for (int k = 0; k < 150; k++) {
    const int64_t id = lo + (int64_t)(ng_rng_next(&g) % (uint64_t)span);
    if (id < NODES && !taken[id]) {
      taken[id] = 1;
      out[n++] = id;
    }
  }
  return n;
}

static void test_bucket(void) {
  int64_t ids[NODES], out[NODES], counts[MAX_R];
  for (int ranks = 1; ranks <= MAX_R; ranks++) {
    const int64_t n = cold_set(ids, 0, ranks, 1);
    ng__coop_bucket(out, counts, ids, n, ranks);
    int64_t at = 0;
    for (int q = 0; q < ranks; q++) {
      int64_t want = 0;
      for (int64_t k = 0; k < n; k++)
        want += ng__coop_owner(ids[k], ranks) == q;
      EXPECT_EQ_I(counts[q], want);
      for (int64_t k = 0; k < counts[q]; k++) {
        EXPECT_EQ_I(ng__coop_owner(out[at + k], ranks), q);
        if (k > 0)
          EXPECT_TRUE(out[at + k - 1] < out[at + k]);
      }
      at += counts[q];
    }
    EXPECT_EQ_I(at, n);
  }
}

/* The exchange of `ranks` simulated ranks for one step, with the collectives replaced by the
 * transposes they perform. */
static void simulate(int ranks, int step, const float *table, int64_t *saved) {
  static int64_t cold[MAX_R][NODES], req[MAX_R][NODES], asked[MAX_R][MAX_R * NODES];
  static float answers[MAX_R][MAX_R * NODES * DIM], rows[MAX_R][NODES * DIM];
  int64_t n[MAX_R], n_out[MAX_R][MAX_R], n_asked[MAX_R] = {0}, n_read[MAX_R];
  ng_coop_serve_buf buf[MAX_R];
  memset(buf, 0, sizeof buf);
  for (int r = 0; r < ranks; r++) {
    n[r] = cold_set(cold[r], r, ranks, step);
    ng__coop_bucket(req[r], n_out[r], cold[r], n[r], ranks);
  }
  /* The all-to-all of the ids: owner q gets rank 0's block for q, then rank 1's, ... */
  for (int q = 0; q < ranks; q++)
    for (int r = 0; r < ranks; r++) {
      int64_t at = 0;
      for (int k = 0; k < q; k++)
        at += n_out[r][k];
      memcpy(asked[q] + n_asked[q], req[r] + at, (size_t)n_out[r][q] * sizeof(int64_t));
      n_asked[q] += n_out[r][q];
    }
  for (int q = 0; q < ranks; q++) {
    for (int k = 0; k < DIM * MAX_R * NODES; k++)
      answers[q][k] = -7.0f; /* poison: every answer must be written */
    EXPECT_OK(ng__coop_serve(answers[q], &n_read[q], asked[q], n_asked[q], table,
                             DIM * sizeof(float), &buf[q]));
  }
  /* The all-to-all of the rows: rank r gets owner 0's answers to it, then owner 1's, ... */
  for (int r = 0; r < ranks; r++) {
    int64_t got = 0;
    for (int q = 0; q < ranks; q++) {
      int64_t at = 0;
      for (int k = 0; k < r; k++)
        at += n_out[k][q];
      memcpy(rows[r] + got * DIM, answers[q] + at * DIM, (size_t)n_out[r][q] * DIM * sizeof(float));
      got += n_out[r][q];
    }
    EXPECT_EQ_I(got, n[r]);
  }
  /* Every row a rank needs reached it exactly once, with the table's values. */
  uint8_t need_any[NODES] = {0};
  for (int r = 0; r < ranks; r++) {
    int delivered[NODES] = {0};
    for (int64_t k = 0; k < n[r]; k++) {
      const int64_t g = req[r][k];
      delivered[g]++;
      if (memcmp(rows[r] + k * DIM, table + g * DIM, DIM * sizeof(float)) != 0)
        ng_test_fail(__FILE__, __LINE__, "%d ranks, step %d: rank %d got a wrong row %lld", ranks,
                     step, r, (long long)g);
    }
    for (int64_t k = 0; k < n[r]; k++) {
      EXPECT_EQ_I(delivered[cold[r][k]], 1);
      need_any[cold[r][k]] = 1;
    }
    int64_t total = 0;
    for (int g = 0; g < NODES; g++)
      total += delivered[g];
    EXPECT_EQ_I(total, n[r]);
  }
  /* Each row the host needs was read once, by its owner: the owners' reads are the union. */
  int64_t uni = 0, reads = 0;
  for (int g = 0; g < NODES; g++)
    uni += need_any[g];
  for (int q = 0; q < ranks; q++) {
    reads += n_read[q];
    for (int64_t k = 0; k < n_read[q]; k++) {
      EXPECT_EQ_I(ng__coop_owner(buf[q].uniq[k], ranks), q);
      EXPECT_TRUE(need_any[buf[q].uniq[k]]);
      if (k > 0)
        EXPECT_TRUE(buf[q].uniq[k - 1] < buf[q].uniq[k]);
    }
  }
  EXPECT_EQ_I(reads, uni);
  /* The host saves one read for every rank past the first that needs a row. */
  int needers[NODES] = {0};
  int64_t alone = 0, extra = 0;
  for (int r = 0; r < ranks; r++) {
    alone += n[r];
    for (int64_t k = 0; k < n[r]; k++)
      needers[cold[r][k]]++;
  }
  for (int g = 0; g < NODES; g++)
    extra += needers[g] > 1 ? needers[g] - 1 : 0;
  EXPECT_EQ_I(alone - reads, extra);
  *saved += extra;
  for (int q = 0; q < ranks; q++)
    ng__coop_serve_free(&buf[q]);
}

static void test_simulated_ranks(void) {
  float *table = make_table();
  for (int ranks = 1; ranks <= MAX_R; ranks++) {
    int64_t saved = 0;
    for (int step = 1; step <= 3; step++)
      simulate(ranks, step, table, &saved);
    /* One rank has no one to share with; several overlap (their windows do). */
    if (ranks == 1)
      EXPECT_EQ_I(saved, 0);
    else
      EXPECT_TRUE(saved > 0);
  }
  free(table);
}

/* ---- over sockets, with forked ranks ---- */

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

enum { SOCK_RANKS = 3 };

/* The bytes rank p sends rank q in the all-to-all check: (p + 2q) * 37 bytes, none from rank 2
 * to rank 0. */
static size_t a2a_bytes(int p, int q) {
  return p == 2 && q == 0 ? 0 : (size_t)(p + 2 * q) * 37;
}

static unsigned char a2a_byte(int p, int q, size_t i) {
  return (unsigned char)(p * 31 + q * 7 + i * 13 + 1);
}

/* One rank: 0 when every check passed, else the number of the first that failed. */
static int rank_main(int r, int lfd, const char *addr) {
  char s[32];
  snprintf(s, sizeof s, "%d", r);
  setenv("NG_RANK", s, 1);
  snprintf(s, sizeof s, "%d", SOCK_RANKS);
  setenv("NG_RANKS", s, 1);
  setenv("NG_DIST_ADDR", addr, 1);
  setenv("NG_HOST_NAME", "one-host", 1);
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
  /* All-to-all of uneven blocks. */
  size_t sb[SOCK_RANKS], rb[SOCK_RANKS], st = 0, rt = 0;
  for (int q = 0; q < SOCK_RANKS; q++) {
    sb[q] = a2a_bytes(r, q);
    rb[q] = a2a_bytes(q, r);
    st += sb[q];
    rt += rb[q];
  }
  unsigned char *snd = malloc(st + 1), *rcv = malloc(rt + 1);
  size_t at = 0;
  for (int q = 0; q < SOCK_RANKS; q++)
    for (size_t i = 0; i < sb[q]; i++)
      snd[at++] = a2a_byte(r, q, i);
  memset(rcv, 0xee, rt + 1);
  if (ng__comm_alltoallv(c, snd, sb, rcv, rb) != NG_OK) {
    fprintf(stderr, "rank %d: %s\n", r, ng_last_error());
    return 2;
  }
  at = 0;
  for (int p = 0; p < SOCK_RANKS; p++)
    for (size_t i = 0; i < rb[p]; i++)
      if (rcv[at++] != a2a_byte(p, r, i))
        return 3;
  if (rcv[rt] != 0xee)
    return 4;
  /* Sizes that disagree: rank 1 expects a byte more from rank 2 than rank 2 sends, then rank 2
   * expects a byte less from itself than it sends itself. Every rank gets the error, naming
   * the pair, and the ranks stay in step: the collectives after it work (below). */
  for (int bad = 0; bad < 2; bad++) {
    size_t rb_bad[SOCK_RANKS];
    memcpy(rb_bad, rb, sizeof rb);
    if (bad == 0 && r == 1)
      rb_bad[2]++;
    if (bad == 1 && r == 2)
      rb_bad[2]--;
    if (ng__comm_alltoallv(c, snd, sb, rcv, rb_bad) != NG_ERR_INVALID_ARG)
      return 13;
    const char *want = bad == 0 ? "rank 2 sends 148 bytes to rank 1, which expects 149"
                                : "rank 2 sends 222 bytes to rank 2, which expects 221";
    if (!strstr(ng_last_error(), want)) {
      fprintf(stderr, "rank %d: \"%s\" lacks \"%s\"\n", r, ng_last_error(), want);
      return 14;
    }
  }
  free(snd);
  free(rcv);
  int64_t mine[SOCK_RANKS], theirs[SOCK_RANKS];
  for (int q = 0; q < SOCK_RANKS; q++)
    mine[q] = 100 * r + q;
  if (ng__comm_alltoall(c, mine, theirs, sizeof(int64_t)) != NG_OK)
    return 5;
  for (int p = 0; p < SOCK_RANKS; p++)
    if (theirs[p] != 100 * p + r)
      return 6;
  /* Cooperative steps: the overlay holds this rank's cold rows with the table's values, and
   * the host reads each distinct cold row once. */
  float *table = make_table();
  uint16_t *table16 = malloc((size_t)NODES * DIM * sizeof *table16);
  ng__bf16_convert(table16, table, (size_t)NODES * DIM, 1);
  /* fp32 rows, then bf16 rows (the owners send them as they are, half the bytes). */
  for (int b16 = 0; b16 < 2; b16++) {
    ng_coop *co = NULL;
    if (ng__coop_create(&co, c, true, HOT, b16 ? NULL : table, b16 ? table16 : NULL, NODES, DIM) !=
        NG_OK) {
      fprintf(stderr, "rank %d: %s\n", r, ng_last_error());
      return 7;
    }
    for (int step = 1; step <= 3; step++) {
      int64_t ids[NODES + 20];
      /* A few hot nodes first (the destinations of a mini-batch are often hot), then cold. */
      int64_t n = 0;
      for (int k = 0; k < 20; k++)
        ids[n++] = (int64_t)(k * 5 + r);
      const int64_t n_cold = cold_set(ids + n, r, SOCK_RANKS, step);
      n += n_cold;
      ng_minibatch mb;
      memset(&mb, 0, sizeof mb);
      mb.n_layers = 1;
      mb.blocks[0].n_src = (int32_t)n;
      mb.node_ids = ids;
      ng_row_overlay ovl;
      if (ng__coop_step(co, &mb, &ovl) != NG_OK) {
        fprintf(stderr, "rank %d: %s\n", r, ng_last_error());
        return 8;
      }
      if (b16 ? ovl.row || !ovl.row16 : !ovl.row || ovl.row16)
        return 15;
      for (int64_t k = 0; k < n; k++) {
        const void *row =
            b16 ? (const void *)ovl.row16(ovl.ctx, ids[k]) : (const void *)ovl.row(ovl.ctx, ids[k]);
        const void *want =
            b16 ? (const void *)(table16 + ids[k] * DIM) : (const void *)(table + ids[k] * DIM);
        if (ids[k] < HOT ? row != NULL : !row || memcmp(row, want, DIM * (b16 ? 2 : 4)) != 0)
          return 9;
      }
      /* A cold row this rank did not ask for is not in its overlay (the table's stays). */
      uint8_t mine_now[NODES] = {0};
      for (int64_t k = 20; k < n; k++)
        mine_now[ids[k]] = 1;
      for (int64_t g = HOT; g < NODES; g++)
        if (!mine_now[g] &&
            (b16 ? (const void *)ovl.row16(ovl.ctx, g) : (const void *)ovl.row(ovl.ctx, g)) != NULL)
          return 10;
      ng_coop_stats cs;
      ng__coop_stats(co, &cs, true);
      /* The union over the ranks, from the same generator. */
      uint8_t any[NODES] = {0};
      int64_t uni = 0, alone = 0, tmp[NODES];
      for (int p = 0; p < SOCK_RANKS; p++) {
        const int64_t m = cold_set(tmp, p, SOCK_RANKS, step);
        alone += m;
        for (int64_t k = 0; k < m; k++)
          if (!any[tmp[k]]) {
            any[tmp[k]] = 1;
            uni++;
          }
      }
      double v[3] = {(double)cs.rows_read, (double)cs.rows_needed, (double)cs.steps};
      if (ng__comm_allreduce_f64(c, v, 3) != NG_OK)
        return 11;
      if (cs.steps != 1 || cs.rows_needed != n_cold || v[0] != (double)uni ||
          v[1] != (double)alone || !(uni < alone))
        return 12;
    }
    ng__coop_destroy(co);
  }
  free(table);
  free(table16);
  ng_comm_destroy(c);
  return 0;
}

static void test_socket_ranks(void) {
  char addr[64];
  int lfd = listen_loopback(addr, sizeof addr);
  EXPECT_TRUE(lfd >= 0);
  if (lfd < 0)
    return;
  fflush(stdout);
  fflush(stderr);
  pid_t pid[SOCK_RANKS];
  for (int r = 0; r < SOCK_RANKS; r++) {
    pid[r] = fork();
    if (pid[r] == 0)
      _exit(rank_main(r, lfd, addr));
  }
  close(lfd);
  for (int r = 0; r < SOCK_RANKS; r++) {
    int status = 0;
    EXPECT_TRUE(waitpid(pid[r], &status, 0) == pid[r]);
    EXPECT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
      ng_test_fail(__FILE__, __LINE__, "rank %d failed check %d", r, WEXITSTATUS(status));
  }
}

/* Cooperation needs every rank on one host, and an fp32 table. */
static void test_refusals(void) {
  ng_coop *co = NULL;
  EXPECT_STATUS(ng__coop_create(&co, NULL, true, HOT, NULL, NULL, NODES, DIM), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(co == NULL);
  /* Counting only, one process: every cold row is read by the rank itself. */
  EXPECT_OK(ng__coop_create(&co, NULL, false, HOT, NULL, NULL, NODES, DIM));
  int64_t ids[] = {3, 150, 99, 100, 599};
  ng_minibatch mb;
  memset(&mb, 0, sizeof mb);
  mb.n_layers = 1;
  mb.blocks[0].n_src = 5;
  mb.node_ids = ids;
  ng_row_overlay ovl;
  EXPECT_OK(ng__coop_step(co, &mb, &ovl));
  EXPECT_TRUE(ovl.row == NULL);
  EXPECT_TRUE(!ng__coop_exchanges(co));
  ng_coop_stats cs;
  ng__coop_stats(co, &cs, true);
  EXPECT_EQ_I(cs.steps, 1);
  EXPECT_EQ_I(cs.rows_needed, 3);
  EXPECT_EQ_I(cs.rows_read, 3);
  ng__coop_stats(co, &cs, true);
  EXPECT_EQ_I(cs.steps, 0);
  ng__coop_destroy(co);
}

int main(void) {
  alarm(SUITE_DEADLINE_S); /* a hung collective kills the suite instead of ctest waiting */
  RUN_TEST(test_bucket);
  RUN_TEST(test_simulated_ranks);
  RUN_TEST(test_socket_ranks);
  RUN_TEST(test_refusals);
  return ng_test_summary();
}
