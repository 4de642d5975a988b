/* The built-in launcher of `neargnn train --ranks N` (docs/distributed.md): forks N copies of
 * this command on this host, each a rank of a data-parallel run that joins the others over
 * loopback TCP (the "env" communicator: NG_RANK, NG_RANKS, NG_DIST_ADDR). Rank 0 inherits the
 * listening socket the launcher opened, so no port can be taken in between. The launcher waits
 * for every rank; when one fails, it stops the others, and its exit status is the first
 * failure's. */
#include "cli.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

bool cli_launched_rank(void) {
  const char *r = getenv("NG_RANKS");
  return (r && *r) || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int cli_launch(const char *command, int argc, char **argv, int ranks) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, ranks) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &len) != 0) {
    fprintf(stderr, "neargnn %s: error: cannot open a loopback socket for the ranks: %s\n", command,
            strerror(errno));
    if (lfd >= 0)
      close(lfd);
    return CLI_EXIT_RUNTIME;
  }
  char addr[64], n[16], fd[16];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
  snprintf(n, sizeof n, "%d", ranks);
  snprintf(fd, sizeof fd, "%d", lfd);
  /* The ranks run this binary with the same arguments: `neargnn COMMAND ARGS...`. */
  char **args = calloc((size_t)argc + 2, sizeof *args);
  pid_t *pid = calloc((size_t)ranks, sizeof *pid);
  if (!args || !pid) {
    free(args);
    free(pid);
    close(lfd);
    fprintf(stderr, "neargnn %s: error: out of memory\n", command);
    return CLI_EXIT_RUNTIME;
  }
  args[0] = "neargnn";
  for (int i = 0; i < argc; i++)
    args[i + 1] = argv[i];
  /* Ctrl-C reaches every rank (one process group): the launcher waits for them. */
  struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_term;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGTERM, &ign, &old_term);
  fflush(stdout);
  fflush(stderr);
  int started = 0, rc = CLI_EXIT_OK;
  for (int r = 0; r < ranks; r++) {
    pid_t p = fork();
    if (p == 0) {
      sigaction(SIGINT, &old_int, NULL);
      sigaction(SIGTERM, &old_term, NULL);
      char rank[16];
      snprintf(rank, sizeof rank, "%d", r);
      setenv("NG_RANK", rank, 1);
      setenv("NG_RANKS", n, 1);
      setenv("NG_DIST_ADDR", addr, 1);
      if (r == 0)
        setenv("NG_DIST_LISTEN_FD", fd, 1);
      else
        close(lfd);
      execv("/proc/self/exe", args);
      fprintf(stderr, "neargnn %s: error: rank %d cannot start: %s\n", command, r, strerror(errno));
      _exit(CLI_EXIT_RUNTIME);
    }
    if (p < 0) {
      fprintf(stderr, "neargnn %s: error: cannot start rank %d: %s\n", command, r, strerror(errno));
      rc = CLI_EXIT_RUNTIME;
      break;
    }
    pid[r] = p;
    started++;
  }
  close(lfd);
  if (rc != CLI_EXIT_OK)
    for (int r = 0; r < started; r++)
      kill(pid[r], SIGTERM);
  for (int left = started; left > 0; left--) {
    int status = 0;
    pid_t p = wait(&status);
    if (p < 0) {
      if (errno == EINTR) {
        left++;
        continue;
      }
      break;
    }
    int r = 0;
    while (r < started && pid[r] != p)
      r++;
    if (r < started)
      pid[r] = 0; /* reaped: never signalled again */
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && rc == CLI_EXIT_OK) {
      rc = code;
      if (code != CLI_EXIT_INTERRUPTED)
        fprintf(stderr, "neargnn %s: rank %d failed (exit status %d); stopping the others\n",
                command, r, code);
      for (int k = 0; k < started; k++)
        if (pid[k] > 0)
          kill(pid[k], SIGTERM);
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  free(args);
  free(pid);
  return rc;
}
