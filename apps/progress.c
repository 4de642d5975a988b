/* Progress of long operations on stderr (stdout stays parseable): one line redrawn in place on a
 * terminal, plain lines every few seconds otherwise (logs, CI), nothing for short operations.
 * Ctrl-C sets a flag that the callback hands to the library, which then stops cleanly. */
#include "cli.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

const char *const CLI_PROGRESS_MODES[] = {"auto", "plain", "none", NULL};

#define PROGRESS_DELAY 1.0    /* operations shorter than this (seconds) show no progress at all */
#define TTY_INTERVAL 0.2      /* seconds between redraws of the terminal line */
#define PLAIN_INTERVAL 5.0    /* seconds between plain lines: a log should not fill up with them */
#define DEFAULT_COLUMNS 80    /* terminal width when the terminal does not say */
#define MIN_RATE_SECONDS 0.05 /* a phase younger than this has no meaningful rate yet */

enum { STYLE_NONE, STYLE_TTY, STYLE_PLAIN };

static volatile sig_atomic_t g_interrupted;
static struct sigaction g_old_sigint;
/* Seconds before the first progress line: PROGRESS_DELAY, or NG_PROGRESS_DELAY (a number >= 0)
 * for tests that must know whether a run shows progress whatever the machine's speed. */
static double g_delay = PROGRESS_DELAY;

static double progress_delay(void) {
  const char *v = getenv("NG_PROGRESS_DELAY");
  if (!v || !*v)
    return PROGRESS_DELAY;
  char *end = NULL;
  double d = strtod(v, &end);
  return *end == '\0' && d >= 0.0 && d <= 1e9 ? d : PROGRESS_DELAY;
}

static void on_sigint(int sig) {
  if (g_interrupted) {
    /* A second Ctrl-C means the user will not wait for a clean stop: die as SIGINT would. */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_interrupted = 1;
}

void cli_progress_begin(cli_progress *p, const char *what, cli_progress_mode mode) {
  memset(p, 0, sizeof *p);
  p->what = what;
  p->start = p->phase_start = cli_now();
  g_delay = progress_delay();
  if (mode == CLI_PROGRESS_NONE) {
    p->style = STYLE_NONE;
  } else if (mode == CLI_PROGRESS_PLAIN) {
    p->style = STYLE_PLAIN;
  } else {
    const char *term = getenv("TERM");
    bool dumb = term && strcmp(term, "dumb") == 0;
    p->style = isatty(STDERR_FILENO) && !dumb ? STYLE_TTY : STYLE_PLAIN;
  }
  g_interrupted = 0;
  /* A shell without job control starts background jobs with SIGINT ignored so that Ctrl-C only
   * stops the foreground; keep it that way. SA_RESTART keeps the library's reads and writes
   * from failing with EINTR: the stop happens at the next progress call. */
  if (sigaction(SIGINT, NULL, &g_old_sigint) == 0 && g_old_sigint.sa_handler != SIG_IGN) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    p->handler_installed = sigaction(SIGINT, &sa, NULL) == 0;
  }
}

/* "edges 12.3M/27.0M (45%), 8.10M/s, ETA 2.0 s" */
static void format_line(const cli_progress *p, char *buf, size_t cap, double done, double total,
                        double now) {
  char d[16], t[16], r[16], eta[32];
  cli_fmt_count(d, sizeof d, done);
  double elapsed = now - p->phase_start;
  double rate = elapsed > MIN_RATE_SECONDS ? (done - p->phase_done0) / elapsed : 0.0;
  int n;
  if (total > 0) {
    cli_fmt_count(t, sizeof t, total);
    n = snprintf(buf, cap, "%s: %s %s/%s (%.0f%%)", p->what, p->phase, d, t,
                 100.0 * (done < total ? done : total) / total);
  } else {
    n = snprintf(buf, cap, "%s: %s %s", p->what, p->phase, d);
  }
  if (rate > 0 && n > 0 && (size_t)n < cap) {
    cli_fmt_count(r, sizeof r, rate);
    n += snprintf(buf + n, cap - (size_t)n, ", %s/s", r);
    if (total > done && (size_t)n < cap) {
      cli_fmt_duration(eta, sizeof eta, (total - done) / rate);
      snprintf(buf + n, cap - (size_t)n, ", ETA %s", eta);
    }
  }
}

static size_t terminal_columns(void) {
  struct winsize ws;
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return DEFAULT_COLUMNS;
}

int cli_progress_cb(void *ctx, const char *phase, double done, double total) {
  cli_progress *p = ctx;
  double now = cli_now();
  if (!phase)
    phase = "";
  if (strncmp(p->phase, phase, sizeof p->phase - 1) != 0) {
    /* The rate is measured from the phase's first report: when the phase began is unknown (work
     * before it may not report at all). */
    snprintf(p->phase, sizeof p->phase, "%s", phase);
    p->phase_start = now;
    p->phase_done0 = done;
  }
  if (g_interrupted)
    return 1;
  if (p->style == STYLE_NONE || now - p->start < g_delay)
    return 0;
  double interval = p->style == STYLE_TTY ? TTY_INTERVAL : PLAIN_INTERVAL;
  if (p->printed && now - p->last_draw < interval)
    return 0;
  p->last_draw = now;
  p->printed = true;
  char line[256];
  format_line(p, line, sizeof line, done, total, now);
  if (p->style == STYLE_PLAIN) {
    fprintf(stderr, "neargnn %s\n", line);
  } else {
    /* Never wrap: a wrapped line cannot be redrawn with \r. Pad over the previous line. */
    size_t cols = terminal_columns() - 1, len = strlen(line);
    if (len > cols)
      len = cols;
    size_t pad = p->drawn > len ? p->drawn - len : 0;
    fprintf(stderr, "\r%.*s%*s", (int)len, line, (int)pad, "");
    p->drawn = len;
  }
  fflush(stderr);
  return 0;
}

void cli_progress_clear(cli_progress *p) {
  if (p->style == STYLE_TTY && p->drawn) {
    fprintf(stderr, "\r%*s\r", (int)p->drawn, "");
    fflush(stderr);
  }
  p->drawn = 0;
}

bool cli_progress_interrupted(void) {
  return g_interrupted != 0;
}

void cli_progress_end(cli_progress *p, ng_status status) {
  if (p->style == STYLE_TTY && p->drawn) {
    fprintf(stderr, "\r%*s\r", (int)p->drawn, "");
  } else if (p->style == STYLE_PLAIN && p->printed) {
    char dur[32];
    cli_fmt_duration(dur, sizeof dur, cli_now() - p->start);
    const char *how = status == NG_OK                ? "done in"
                      : status == NG_ERR_INTERRUPTED ? "interrupted after"
                                                     : "failed after";
    fprintf(stderr, "neargnn %s: %s %s\n", p->what, how, dur);
  }
  fflush(stderr);
  if (p->handler_installed)
    sigaction(SIGINT, &g_old_sigint, NULL);
  p->handler_installed = false;
}
