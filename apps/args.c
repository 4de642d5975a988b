/* A small strict option parser shared by every subcommand: long options only (plus -h), typed
 * values with range checks, and usage errors that name the option and say what was expected. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define HELP_WIDTH 80      /* columns of the help text */
#define HELP_INDENT 24     /* column where option descriptions start */
#define SUGGEST_MAX 64     /* most candidates cli_suggest() is given at once */
#define SUGGEST_DIST 2     /* largest edit distance still worth a "did you mean" */
#define MAX_FRAC_DIGITS 18 /* fraction digits of "1.5M" that fit a uint64 scale */
#define NBSP '\1'          /* in help text: a space that print_wrapped() does not break at */

int cli_usage_error(const char *command, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, command ? "neargnn %s: " : "neargnn: ", command);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (command)
    fprintf(stderr, "\nsee 'neargnn %s --help'\n", command);
  else
    fputs("\nsee 'neargnn --help'\n", stderr);
  return CLI_EXIT_USAGE;
}

const char *const CLI_CHECK_FEATURES_NAMES[] = {"sample", "full", NULL};

/* The choices of an option over an enum of the library, in the enum's order, read once from its
 * name function (which names unknown values "?" or NULL): `first`, when not NULL, takes the place
 * of value 0's name. */
#define CLI_ENUM_CHOICES(fn, enum_t, first)                                                        \
  static const char *names[CLI_MAX_CHOICES + 1];                                                   \
  const char *name;                                                                                \
  if (!names[0])                                                                                   \
    for (int i = 0; i < CLI_MAX_CHOICES && (name = fn((enum_t)i)) && strcmp(name, "?"); i++)       \
      names[i] = i == 0 && (first) ? (first) : name;                                               \
  return names

const char *const *cli_model_names(void) {
  CLI_ENUM_CHOICES(ng_model_name, ng_model_kind, NULL);
}
const char *const *cli_mode_names(void) {
  CLI_ENUM_CHOICES(ng_mode_name, ng_mode, NULL);
}
const char *const *cli_transfer_names(void) {
  CLI_ENUM_CHOICES(ng_fetch_name, ng_fetch, "-");
}
const char *const *cli_link_decoder_names(void) {
  CLI_ENUM_CHOICES(ng_link_decoder_name, ng_link_decoder, NULL);
}
const char *const *cli_link_neg_names(void) {
  CLI_ENUM_CHOICES(ng_link_neg_name, ng_link_neg, NULL);
}
const char *const *cli_hetero_model_names(void) {
  CLI_ENUM_CHOICES(ng_hetero_model_name, ng_hetero_model_kind, NULL);
}
const char *const *cli_optimizer_names(void) {
  CLI_ENUM_CHOICES(ng_optimizer_name, ng_optimizer, NULL);
}
const char *const *cli_normalize_names(void) {
  CLI_ENUM_CHOICES(ng_normalize_name, ng_normalize, NULL);
}
const char *const *cli_cache_placement_names(void) {
  CLI_ENUM_CHOICES(ng_cache_placement_name, ng_cache_placement, NULL);
}
const char *const *cli_cold_fetch_names(void) {
  CLI_ENUM_CHOICES(ng_cold_fetch_name, ng_cold_fetch, NULL);
}

const char *const *cli_aggregator_names(void) {
  static const char *names[CLI_MAX_CHOICES + 1];
  if (!names[0]) {
    names[0] = "auto";
    for (int i = 0; i < CLI_MAX_CHOICES - 1 && ng_aggregator_builtin_name(i); i++)
      names[i + 1] = ng_aggregator_builtin_name(i);
  }
  return names;
}

ng_status cli_dataset_open(ng_dataset_t *out, const char *dir, int check) {
  ng_open_opts oo = NG_OPEN_OPTS_INIT;
  oo.check_features = check == 1;
  return ng_dataset_open(out, dir, &oo);
}

int cli_runtime_error(ng_status status) {
  return cli_runtime_error_detail(status, ng_last_error());
}

int cli_runtime_error_detail(ng_status status, const char *detail) {
  if (status == NG_ERR_INTERRUPTED) {
    fprintf(stderr, "neargnn: interrupted%s%s\n", *detail ? ": " : "", detail);
    return CLI_EXIT_INTERRUPTED;
  }
  fprintf(stderr, "neargnn: error: %s%s%s\n", ng_status_str(status), *detail ? ": " : "", detail);
  return CLI_EXIT_RUNTIME;
}

/* Levenshtein distance, capped: anything above `cap` is reported as cap + 1. */
static size_t edit_distance(const char *a, const char *b, size_t cap) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63)
    return cap + 1;
  if ((la > lb ? la - lb : lb - la) > cap)
    return cap + 1;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb] > cap ? cap + 1 : row[lb];
}

const char *cli_suggest(const char *word, const char *const *candidates, size_t n) {
  const char *best = NULL;
  size_t best_d = SUGGEST_DIST + 1;
  size_t wl = strlen(word);
  for (size_t i = 0; i < n; i++) {
    /* A prefix ("--check" for "--check-features") is as good a guess as one typo. */
    size_t d = (wl >= 3 && strncmp(candidates[i], word, wl) == 0)
                   ? 1
                   : edit_distance(word, candidates[i], SUGGEST_DIST);
    /* Very short words are close to everything; only suggest what differs by less than half. */
    if (d < best_d && d * 2 < wl + 1) {
      best = candidates[i];
      best_d = d;
    }
  }
  return best;
}

const cli_opt *cli_find_opt(const cli_spec *spec, const char *name) {
  for (size_t i = 0; i < spec->n_opts; i++)
    if (strcmp(spec->opts[i].name, name) == 0)
      return &spec->opts[i];
  return NULL;
}

/* ---- value parsing: each returns NULL on success or what was expected ---- */

/* Parses "123", "10M" or "1.5G" exactly: `mult` of the suffix times the decimal mantissa, which
 * must come out whole. `binary` selects K = 1024 (sizes in bytes) instead of k = 1000 (counts). */
static const char *parse_scaled(const char *s, bool binary, uint64_t *out) {
  const char *expected = binary ? "a size in bytes such as 4096, 512M or 2G (powers of 1024)"
                                : "a whole number such as 5000, 10M or 1.5G";
  const char *p = s;
  uint64_t whole = 0, frac = 0, frac_scale = 1;
  bool digits = false;
  for (; *p >= '0' && *p <= '9'; p++, digits = true)
    if (__builtin_mul_overflow(whole, 10, &whole) ||
        __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
      return "a number that fits in 64 bits";
  if (*p == '.') {
    int nd = 0;
    for (p++; *p >= '0' && *p <= '9'; p++, digits = true) {
      if (++nd > MAX_FRAC_DIGITS)
        return expected;
      frac = frac * 10 + (uint64_t)(*p - '0');
      frac_scale *= 10;
    }
  }
  if (!digits)
    return expected;
  uint64_t mult = 1;
  if (*p) {
    static const char units[] = "KMGT";
    const char *u = strchr(units, binary ? *p : (*p == 'k' ? 'K' : *p));
    if (!u && binary && *p >= 'a' && *p <= 'z')
      u = strchr(units, *p - 'a' + 'A');
    if (!u || !*u)
      return expected;
    for (const char *q = units; q <= u; q++)
      mult *= binary ? 1024 : 1000;
    p++;
    if (binary && (strcmp(p, "B") == 0 || strcmp(p, "iB") == 0))
      p += strlen(p);
    if (*p)
      return expected;
  }
  uint64_t v, part;
  if (__builtin_mul_overflow(whole, mult, &v) || __builtin_mul_overflow(frac, mult, &part) ||
      __builtin_add_overflow(v, part / frac_scale, &v))
    return "a number that fits in 64 bits";
  if (part % frac_scale != 0)
    return expected;
  *out = v;
  return NULL;
}

static const char *parse_int(const char *s, int64_t *out) {
  bool neg = s[0] == '-';
  uint64_t mag;
  const char *err = parse_scaled(s + neg, false, &mag);
  if (err)
    return err;
  if (mag > (uint64_t)INT64_MAX + neg)
    return "a number that fits in 64 bits";
  *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
  return NULL;
}

static const char *parse_float(const char *s, double *out) {
  /* strtod accepts leading blanks, hex floats, "inf" and "nan"; options want plain numbers. */
  if (!(*s == '-' || *s == '+' || *s == '.' || (*s >= '0' && *s <= '9')) || strpbrk(s, "xX"))
    return "a number such as 0.5 or 1e-3";
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end || end == s)
    return "a number such as 0.5 or 1e-3";
  if (errno == ERANGE || !isfinite(v))
    return "a finite number";
  *out = v;
  return NULL;
}

/* Writes "must be ..." describing the accepted range of a numeric option into buf. */
static void describe_range(const cli_opt *o, int64_t ilo, int64_t ihi, char *buf, size_t cap) {
  if (o->type == CLI_FLOAT) {
    if (isinf(o->fhi))
      snprintf(buf, cap, "a number %s %g", o->flo_open ? ">" : ">=", o->flo);
    else
      snprintf(buf, cap, "a number in %c%g, %g%c", o->flo_open ? '(' : '[', o->flo, o->fhi,
               o->fhi_open ? ')' : ']');
  } else if (ihi == INT64_MAX || (o->width == 4 && ihi == INT32_MAX)) {
    snprintf(buf, cap, "a whole number >= %" PRId64, ilo);
  } else {
    snprintf(buf, cap, "a whole number in [%" PRId64 ", %" PRId64 "]", ilo, ihi);
  }
}

/* Parses `value` for option `o` into its destination; returns CLI_CONTINUE or the exit status
 * of the usage error it printed. */
static int set_value(const cli_spec *spec, cli_opt *o, const char *value) {
  const char *cmd = spec->command;
  const char *err = NULL;
  char range[96];
  switch (o->type) {
  case CLI_FLAG:
    *(int *)o->dst = 1;
    return CLI_CONTINUE;
  case CLI_STRING:
    if (!*value)
      return cli_usage_error(cmd, "option --%s needs a non-empty %s", o->name, o->metavar);
    *(const char **)o->dst = value;
    return CLI_CONTINUE;
  case CLI_CHOICE: {
    for (int i = 0; o->choices[i]; i++)
      if (strcmp(o->choices[i], value) == 0) {
        *(int *)o->dst = i;
        return CLI_CONTINUE;
      }
    char list[256] = "";
    for (int i = 0; o->choices[i]; i++) {
      size_t len = strlen(list);
      snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", o->choices[i]);
    }
    return cli_usage_error(cmd, "option --%s: unknown value '%s' (expected one of: %s)", o->name,
                           value, list);
  }
  case CLI_INT:
  case CLI_BYTES: {
    int64_t v = 0;
    int64_t lo = o->ilo, hi = o->ihi;
    if (o->type == CLI_INT && o->width == 4) {
      lo = lo < INT32_MIN ? INT32_MIN : lo;
      hi = hi > INT32_MAX ? INT32_MAX : hi;
    }
    if (o->type == CLI_BYTES) {
      uint64_t u;
      err = parse_scaled(value, true, &u);
      if (!err && u > INT64_MAX)
        err = "a size that fits in 63 bits";
      v = (int64_t)u;
    } else {
      err = parse_int(value, &v);
    }
    if (err)
      break;
    if (v < lo || v > hi) {
      describe_range(o, lo, hi, range, sizeof range);
      return cli_usage_error(cmd, "option --%s: %s is out of range (expected %s)", o->name, value,
                             range);
    }
    if (o->type == CLI_INT && o->width == 4)
      *(int32_t *)o->dst = (int32_t)v;
    else
      *(int64_t *)o->dst = v;
    return CLI_CONTINUE;
  }
  case CLI_UINT64: {
    uint64_t u;
    err = parse_scaled(value, false, &u);
    if (err)
      break;
    *(uint64_t *)o->dst = u;
    return CLI_CONTINUE;
  }
  case CLI_FLOAT: {
    double v;
    err = parse_float(value, &v);
    if (err)
      break;
    if (v < o->flo || v > o->fhi || (o->flo_open && v == o->flo) || (o->fhi_open && v == o->fhi)) {
      describe_range(o, 0, 0, range, sizeof range);
      return cli_usage_error(cmd, "option --%s: %s is out of range (expected %s)", o->name, value,
                             range);
    }
    *(double *)o->dst = v;
    return CLI_CONTINUE;
  }
  }
  return cli_usage_error(cmd, "option --%s: '%s' is not valid (expected %s)", o->name, value,
                         err ? err : "a value");
}

static int unknown_option(const cli_spec *spec, const char *arg, size_t name_len) {
  const char *names[SUGGEST_MAX];
  size_t n = 0;
  for (size_t i = 0; i < spec->n_opts && n < SUGGEST_MAX; i++)
    names[n++] = spec->opts[i].name;
  char word[64];
  snprintf(word, sizeof word, "%.*s", (int)(name_len < 63 ? name_len : 63), arg + 2);
  const char *guess = arg[0] == '-' && arg[1] == '-' ? cli_suggest(word, names, n) : NULL;
  if (guess)
    return cli_usage_error(spec->command, "unknown option '%.*s'; did you mean '--%s'?",
                           (int)(name_len + 2), arg, guess);
  return cli_usage_error(spec->command, "unknown option '%.*s'", (int)(name_len + 2), arg);
}

int cli_parse(cli_spec *spec, int argc, char **argv) {
  spec->n_pos = 0;
  for (size_t i = 0; i < spec->n_opts; i++)
    spec->opts[i].seen = false;
  bool options_done = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!options_done && strcmp(arg, "--") == 0) {
      options_done = true;
      continue;
    }
    if (!options_done && (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)) {
      cli_print_help(spec, stdout);
      return CLI_EXIT_OK;
    }
    if (options_done || arg[0] != '-' || arg[1] == '\0') {
      if (spec->n_pos >= spec->max_positional || spec->n_pos >= CLI_MAX_POSITIONAL)
        return cli_usage_error(spec->command, "unexpected argument '%s'", arg);
      spec->pos[spec->n_pos++] = arg;
      continue;
    }
    if (arg[1] != '-')
      return cli_usage_error(spec->command, "unknown option '%s' (options are long: --name)", arg);
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
    cli_opt *o = NULL;
    for (size_t k = 0; k < spec->n_opts && !o; k++)
      if (strlen(spec->opts[k].name) == name_len &&
          strncmp(spec->opts[k].name, name, name_len) == 0)
        o = &spec->opts[k];
    if (!o)
      return unknown_option(spec, arg, name_len);
    if (o->seen)
      return cli_usage_error(spec->command, "option --%s given more than once", o->name);
    o->seen = true;
    const char *value = NULL;
    if (o->type == CLI_FLAG) {
      if (eq)
        return cli_usage_error(spec->command, "option --%s takes no value", o->name);
    } else if (eq) {
      value = eq + 1;
    } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
      value = argv[++i];
    } else {
      return cli_usage_error(spec->command, "option --%s needs a value (%s)", o->name, o->metavar);
    }
    int rc = set_value(spec, o, value);
    if (rc != CLI_CONTINUE)
      return rc;
  }
  for (size_t i = 0; i < spec->n_opts; i++)
    if (spec->opts[i].required && !spec->opts[i].seen)
      return cli_usage_error(spec->command, "missing required option --%s %s", spec->opts[i].name,
                             spec->opts[i].metavar);
  if (spec->n_pos < spec->min_positional)
    return cli_usage_error(spec->command, "missing argument %s", spec->positional);
  return CLI_CONTINUE;
}

/* ---- help ---- */

/* Prints `text` word-wrapped to HELP_WIDTH, continuation lines indented by `indent`; the first
 * line starts at column `col`. A newline in `text` starts a new line; NBSP prints as a space
 * where no line may break. */
static void print_wrapped(FILE *out, const char *text, int col, int indent) {
  const char *p = text;
  int line_start = col;
  while (*p) {
    if (*p == '\n') {
      fprintf(out, "\n%*s", indent, "");
      col = line_start = indent;
      p++;
      continue;
    }
    const char *word_end = p;
    while (*word_end && *word_end != ' ' && *word_end != '\n')
      word_end++;
    int len = (int)(word_end - p);
    if (col > line_start && col + 1 + len > HELP_WIDTH) {
      fprintf(out, "\n%*s", indent, "");
      col = line_start = indent;
    } else if (col > line_start) {
      fputc(' ', out);
      col++;
    }
    for (int k = 0; k < len; k++)
      fputc(p[k] == NBSP ? ' ' : p[k], out);
    col += len;
    p = word_end;
    while (*p == ' ')
      p++;
  }
  fputc('\n', out);
}

/* The default of an option as the help shows it, or "" for none. */
static void describe_default(const cli_opt *o, char *buf, size_t cap) {
  buf[0] = '\0';
  if (o->default_text) {
    snprintf(buf, cap, "%s", o->default_text);
    return;
  }
  switch (o->type) {
  case CLI_FLAG:
    break;
  case CLI_STRING:
    if (*(const char *const *)o->dst)
      snprintf(buf, cap, "%s", *(const char *const *)o->dst);
    break;
  case CLI_CHOICE:
    snprintf(buf, cap, "%s", o->choices[*(const int *)o->dst]);
    break;
  case CLI_INT:
    if (o->width == 4)
      snprintf(buf, cap, "%" PRId32, *(const int32_t *)o->dst);
    else
      snprintf(buf, cap, "%" PRId64, *(const int64_t *)o->dst);
    break;
  case CLI_BYTES:
    snprintf(buf, cap, "%" PRId64, *(const int64_t *)o->dst);
    break;
  case CLI_UINT64:
    snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)o->dst);
    break;
  case CLI_FLOAT:
    snprintf(buf, cap, "%g", *(const double *)o->dst);
    break;
  }
}

/* "a, b or c": the help of a choice option that has none of its own. */
static const char *choice_list(char *buf, size_t cap, const char *const *choices) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; choices && choices[i] && len < cap; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s",
                     i == 0           ? ""
                     : choices[i + 1] ? ", "
                                      : " or ",
                     choices[i]);
    len += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

void cli_print_help(const cli_spec *spec, FILE *out) {
  fprintf(out, "usage: neargnn %s %s\n\n", spec->command, spec->synopsis);
  print_wrapped(out, spec->about, 0, 0);
  fputs("\noptions:\n", out);
  for (size_t i = 0; i < spec->n_opts; i++) {
    const cli_opt *o = &spec->opts[i];
    char left[64], def[128], text[512];
    snprintf(left, sizeof left, "  --%s%s%s", o->name, o->metavar ? " " : "",
             o->metavar ? o->metavar : "");
    describe_default(o, def, sizeof def);
    char choices[256];
    const char *help = o->help ? o->help : choice_list(choices, sizeof choices, o->choices);
    for (char *c = def; *c; c++)
      *c = *c == ' ' ? NBSP : *c; /* keep "(default: ...)" on one line */
    if (o->required)
      snprintf(text, sizeof text, "%s (required)", help);
    else if (def[0])
      snprintf(text, sizeof text, "%s (default:%c%s)", help, NBSP, def);
    else
      snprintf(text, sizeof text, "%s", help);
    int col = fprintf(out, "%s", left);
    if (col >= HELP_INDENT) {
      fputc('\n', out);
      col = 0;
    }
    fprintf(out, "%*s", HELP_INDENT - col, "");
    print_wrapped(out, text, HELP_INDENT, HELP_INDENT);
  }
  fprintf(out, "  -h, --help%*s", HELP_INDENT - 12, "");
  print_wrapped(out, "show this help and exit", HELP_INDENT, HELP_INDENT);
  if (spec->notes) {
    fputc('\n', out);
    print_wrapped(out, spec->notes, 0, 0);
  }
  fputs(strchr(spec->example, '\n') ? "\nexamples:\n" : "\nexample:\n", out);
  for (const char *line = spec->example; *line;) {
    size_t len = strcspn(line, "\n");
    fprintf(out, "  %.*s\n", (int)len, line);
    line += len + (line[len] == '\n');
  }
}
