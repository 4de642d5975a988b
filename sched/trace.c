/* The runtime's timeline: per-thread arrays of spans, appended without locks by the one thread
 * that owns a track, written out as Chrome trace-event JSON once the threads have stopped. */
#include "ctrl_impl.h"
#include "trace_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t t0, t1, iter;
  int32_t kind, arg;
} span;

typedef struct {
  span *v;
  int64_t n, cap, dropped;
  char name[64];
} trace_track;

struct ng_trace {
  int n_tracks;
  int64_t max_spans;
  trace_track *tracks;
};

static const char *const SPAN_NAMES[NG_SPAN_COUNT] = {
    "slot wait", "sample",  "fetch",     "ready wait", "take wait", "upload",
    "copy wait", "forward", "loss wait", "backward",   "control",   "start",
    "stop",      "epoch",   "prepare",   "feed wait",  "slot grow",
};

ng_status ng__trace_create(ng_trace **out, int tracks, int64_t max_spans) {
  *out = NULL;
  if (tracks < 1 || max_spans < 1)
    return ng__err(NG_ERR_INVALID_ARG, "trace: %d tracks of %lld spans; both must be >= 1", tracks,
                   (long long)max_spans);
  ng_trace *t = ng__calloc(1, sizeof *t, "the trace");
  if (!t)
    return NG_ERR_NOMEM;
  t->tracks = ng__calloc((size_t)tracks, sizeof *t->tracks, "the trace's tracks");
  if (!t->tracks) {
    free(t);
    return NG_ERR_NOMEM;
  }
  t->n_tracks = tracks;
  t->max_spans = max_spans;
  for (int i = 0; i < tracks; i++)
    snprintf(t->tracks[i].name, sizeof t->tracks[i].name, i == 0 ? "device thread" : "worker %d",
             i - 1);
  *out = t;
  return NG_OK;
}

void ng__trace_destroy(ng_trace *t) {
  if (!t)
    return;
  for (int i = 0; i < t->n_tracks; i++)
    free(t->tracks[i].v);
  free(t->tracks);
  free(t);
}

void ng__trace_name(ng_trace *t, int track, const char *name) {
  if (t && track >= 0 && track < t->n_tracks)
    snprintf(t->tracks[track].name, sizeof t->tracks[track].name, "%s", name);
}

void ng__trace_span(ng_trace *t, int track_no, ng_span_kind kind, int64_t iter, int arg, int64_t t0,
                    int64_t t1) {
  if (!t || track_no < 0 || track_no >= t->n_tracks)
    return;
  trace_track *k = &t->tracks[track_no];
  if (k->n == k->cap) {
    /* Grows by doubling up to the limit; a failed growth drops the span rather than failing the
     * run it observes. */
    const int64_t cap = NG_MIN(t->max_spans, NG_MAX((int64_t)1024, k->cap * 2));
    span *v = cap > k->cap ? realloc(k->v, (size_t)cap * sizeof *v) : NULL;
    if (!v) {
      k->dropped++;
      return;
    }
    k->v = v;
    k->cap = cap;
  }
  k->v[k->n++] = (span){t0, t1, iter, (int32_t)kind, arg};
}

void ng__trace_counts(const ng_trace *t, int64_t *recorded, int64_t *dropped) {
  *recorded = *dropped = 0;
  for (int i = 0; t && i < t->n_tracks; i++) {
    *recorded += t->tracks[i].n;
    *dropped += t->tracks[i].dropped;
  }
}

/* Writes a track name as a JSON string (names are ours: no quotes or control characters, but
 * escape anyway). */
static void put_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", (unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

ng_status ng__trace_write(const ng_trace *t, const char *path) {
  int64_t origin = INT64_MAX;
  for (int i = 0; i < t->n_tracks; i++)
    for (int64_t j = 0; j < t->tracks[i].n; j++)
      origin = NG_MIN(origin, t->tracks[i].v[j].t0);
  if (origin == INT64_MAX)
    origin = 0;
  char *tmp;
  NG_CHECK(ng__atomic_begin(&tmp, path));
  FILE *f = fopen(tmp, "wx");
  if (!f)
    return ng__atomic_end(tmp, path,
                          ng__err_errno(NG_ERR_IO, errno, "trace: cannot create \"%s\"", tmp));
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
  bool first = true;
  for (int i = 0; i < t->n_tracks; i++) {
    const trace_track *k = &t->tracks[i];
    if (k->n == 0)
      continue;
    fprintf(f, "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":",
            first ? "" : ",\n", i);
    put_json_string(f, k->name);
    fputs("}}", f);
    first = false;
    for (int64_t j = 0; j < k->n; j++) {
      const span *s = &k->v[j];
      fprintf(f, ",\n{\"ph\":\"X\",\"name\":\"%s\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
              SPAN_NAMES[s->kind], i, (double)(s->t0 - origin) * 1e-3,
              (double)(s->t1 - s->t0) * 1e-3);
      if (s->kind == NG_SPAN_START || s->kind == NG_SPAN_STOP || s->kind == NG_SPAN_EPOCH ||
          s->kind == NG_SPAN_PREPARE)
        fprintf(f, ",\"args\":{\"epoch\":%lld}", (long long)s->iter);
      else if (s->iter >= 0 && s->kind == NG_SPAN_FETCH)
        fprintf(f, ",\"args\":{\"iter\":%lld,\"group\":\"%s\"}", (long long)s->iter,
                s->arg == NG_GROUP_PARTIAL ? "partial" : "transfer");
      else if (s->iter >= 0 && s->kind == NG_SPAN_SAMPLE)
        fprintf(f, ",\"args\":{\"iter\":%lld,\"edges\":%d}", (long long)s->iter, s->arg);
      else if (s->iter >= 0)
        fprintf(f, ",\"args\":{\"iter\":%lld}", (long long)s->iter);
      fputc('}', f);
    }
  }
  fputs("\n]}\n", f);
  const bool ok = !ferror(f);
  ng_status st = NG_OK;
  if (fclose(f) != 0 || !ok)
    st = ng__err_errno(NG_ERR_IO, errno, "trace: cannot write \"%s\"", tmp);
  return ng__atomic_end(tmp, path, st);
}
