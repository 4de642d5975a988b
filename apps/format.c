/* Human-readable numbers for progress lines and summaries. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double start_time;

/* The process's start in cli_now()'s clock: /proc/self/stat's start time (clock ticks since
 * boot, field 22) shifted by how long ago that was, so that loading the program and its
 * libraries counts too; the first call's time where /proc cannot tell. */
double cli_start_time(void) {
  if (start_time > 0)
    return start_time;
  start_time = cli_now();
  FILE *f = fopen("/proc/self/stat", "r");
  char buf[1024];
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  unsigned long long ticks = 0;
  struct timespec boot;
  long hz = sysconf(_SC_CLK_TCK);
  if (p && hz > 0 && clock_gettime(CLOCK_BOOTTIME, &boot) == 0 &&
      sscanf(p + 1,
             " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &ticks) == 1) {
    const double since_boot = (double)boot.tv_sec + 1e-9 * (double)boot.tv_nsec;
    const double age = since_boot - (double)ticks / (double)hz;
    if (age >= 0 && age < 3600)
      start_time -= age;
  }
  return start_time;
}

/* Scales `v` by `base` until it is below `base` and prints it with about 3 significant digits
 * and the unit of that power. */
static void fmt_scaled(char *buf, size_t cap, double v, double base, const char *const *units,
                       int n_units, const char *sep) {
  int u = 0;
  while (fabs(v) >= base && u + 1 < n_units) {
    v /= base;
    u++;
  }
  if (u == 0)
    snprintf(buf, cap, "%.0f%s%s", v, units[0][0] ? sep : "", units[0]);
  else if (fabs(v) < 9.995)
    snprintf(buf, cap, "%.2f%s%s", v, sep, units[u]);
  else if (fabs(v) < 99.95)
    snprintf(buf, cap, "%.1f%s%s", v, sep, units[u]);
  else
    snprintf(buf, cap, "%.0f%s%s", v, sep, units[u]);
}

void cli_fmt_bytes(char *buf, size_t cap, double bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  fmt_scaled(buf, cap, bytes, 1024.0, units, (int)(sizeof units / sizeof units[0]), " ");
}

void cli_fmt_count(char *buf, size_t cap, double count) {
  static const char *const units[] = {"", "k", "M", "G", "T", "P"};
  fmt_scaled(buf, cap, count, 1000.0, units, (int)(sizeof units / sizeof units[0]), "");
}

void cli_fmt_duration(char *buf, size_t cap, double seconds) {
  if (!(seconds >= 0) || seconds > 1e9) {
    snprintf(buf, cap, "?");
    return;
  }
  if (seconds < 10) {
    snprintf(buf, cap, "%.1f s", seconds);
    return;
  }
  long s = lround(seconds);
  if (s < 60)
    snprintf(buf, cap, "%ld s", s);
  else if (s < 3600)
    snprintf(buf, cap, "%ld min %02ld s", s / 60, s % 60);
  else
    snprintf(buf, cap, "%ld h %02ld min", s / 3600, (s % 3600) / 60);
}
