/* The bf16 feature table file (runtime/features_bf16.c) when several processes miss it at once,
 * as the ranks of one data-parallel run on one host do on their first bf16 run: every process
 * gets a valid table and the folder is left with one table and no temporary file. One case
 * fixes the order on every run (the second writer renames after the first one's table is in
 * place and it is mapped, through the writer's test hook); the other starts several processes
 * at once, several times, so that the writers also meet in the rename itself, where the second
 * finds the first's table appeared and maps it. */
#include "ng_test.h"
#include "ng_test_cora.h"

#include "bf16.h"
#include "dataset_impl.h"
#include "features_bf16_impl.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { SUITE_DEADLINE_S = 120, AT_ONCE = 4, ROUNDS = 6 };

static ng_dataset_t cora;
static char table_path[4096];

/* 0 when `t` holds the rounding of every feature (and is the file's mapping), else a number
 * saying which check failed. */
static int check_table(const ng_bf16_table *t, const struct ng_dataset *ds) {
  if (!t->rows || !t->map.map || t->owned)
    return 20;
  const size_t n = (size_t)ds->info.nodes * (size_t)ds->info.feature_dim;
  for (size_t i = 0; i < n; i++)
    if (t->rows[i] != ng_f32_to_bf16(ds->features[i]))
      return 21;
  return 0;
}

/* The folder holds the table and no temporary file of it. */
static void expect_one_table(void) {
  EXPECT_TRUE(ng_test_exists(table_path));
  DIR *d = opendir(ng_test_path("cora"));
  EXPECT_TRUE(d != NULL);
  if (!d)
    return;
  int temporaries = 0;
  for (struct dirent *e = readdir(d); e; e = readdir(d))
    temporaries += strncmp(e->d_name, NG_BF16_FEATURES_FILE NG_TMP_INFIX,
                           strlen(NG_BF16_FEATURES_FILE NG_TMP_INFIX)) == 0;
  closedir(d);
  EXPECT_EQ_I(temporaries, 0);
}

/* One process's open: 0 when it got a valid table that it `created` (or not, as asked; -1:
 * either), else the failed check's number. */
static int open_and_check(int created) {
  ng_bf16_table t;
  if (ng__bf16_table_open(&t, cora, cora->features, false, 1, NULL) != NG_OK) {
    fprintf(stderr, "pid %ld: %s\n", (long)getpid(), ng_last_error());
    return 10;
  }
  int rc = check_table(&t, cora);
  if (rc == 0 && created >= 0 && t.created != (created != 0))
    rc = 11;
  ng__bf16_table_close(&t);
  return rc;
}

static int go[2], done[2];

/* The parent's writer, between writing its temporary file and renaming it: the child writes
 * and renames the whole table now, so that the parent's rename comes second. */
static void let_the_other_write(const char *path) {
  (void)path;
  char b = 'g';
  if (write(go[1], &b, 1) != 1 || read(done[0], &b, 1) != 1)
    fprintf(stderr, "the other writer did not answer\n");
}

static void test_second_rename_maps_the_first(void) {
  remove(table_path);
  EXPECT_TRUE(pipe(go) == 0 && pipe(done) == 0);
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    char b;
    if (read(go[0], &b, 1) != 1)
      _exit(30);
    const int rc = open_and_check(1); /* it renames first: the table is its own */
    b = 'd';
    if (write(done[1], &b, 1) != 1)
      _exit(31);
    _exit(rc);
  }
  ng__bf16_before_rename = let_the_other_write;
  /* Its rename comes after the other's table is in place (and mapped by the other, whose
   * mapping stays valid whatever this rename does): it gets a valid table too. */
  EXPECT_EQ_I(open_and_check(-1), 0);
  ng__bf16_before_rename = NULL;
  int status = 0;
  EXPECT_TRUE(waitpid(pid, &status, 0) == pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ_I(WEXITSTATUS(status), 0);
  for (int k = 0; k < 2; k++) {
    close(go[k]);
    close(done[k]);
  }
  expect_one_table();
  /* Later opens map it. */
  EXPECT_EQ_I(open_and_check(0), 0);
}

static void test_processes_at_once(void) {
  for (int round = 0; round < ROUNDS; round++) {
    remove(table_path);
    int start[2];
    EXPECT_TRUE(pipe(start) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid[AT_ONCE];
    for (int k = 0; k < AT_ONCE; k++) {
      pid[k] = fork();
      if (pid[k] == 0) {
        close(start[1]);
        char b;
        if (read(start[0], &b, 1) != 1)
          _exit(30);
        _exit(open_and_check(-1));
      }
    }
    close(start[0]);
    /* Every process waits on the pipe; they start together. */
    const char all[AT_ONCE] = {0};
    EXPECT_TRUE(write(start[1], all, sizeof all) == (ssize_t)sizeof all);
    close(start[1]);
    for (int k = 0; k < AT_ONCE; k++) {
      int status = 0;
      EXPECT_TRUE(waitpid(pid[k], &status, 0) == pid[k]);
      EXPECT_TRUE(WIFEXITED(status));
      if (WEXITSTATUS(status) != 0)
        ng_test_fail(__FILE__, __LINE__, "process %d of round %d failed check %d", k, round,
                     WEXITSTATUS(status));
    }
    expect_one_table();
  }
}

int main(void) {
  alarm(SUITE_DEADLINE_S); /* a writer that never answers kills the suite */
  cora = ng_test_fetch_cora();
  snprintf(table_path, sizeof table_path, "%s/%s", ng_test_path("cora"), NG_BF16_FEATURES_FILE);
  RUN_TEST(test_second_rename_maps_the_first);
  RUN_TEST(test_processes_at_once);
  ng_dataset_close(cora);
  return ng_test_summary();
}
