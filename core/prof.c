/* The op profile (prof.h). */
#include "prof.h"

#include <stdio.h>
#include <string.h>

void ng__prof_init(ng_prof *p, ng_backend *be) {
  memset(p, 0, sizeof *p);
  p->open_row = -1;
  if (be && be->iface->event_record && be->iface->event_elapsed)
    p->be = be;
}

static bool timing(const ng_prof *p) {
  return p && p->be && p->active;
}

ng_status ng__prof_collect(ng_prof *p) {
  if (!p || !p->be || p->n_pending == 0)
    return NG_OK;
  /* An iteration whose backward pass never ran (an error, an interruption) would count as a
   * whole one with half its ops: it is dropped. */
  const int n = p->n_pending;
  p->n_pending = 0;
  if (!p->whole)
    return NG_OK;
  double ms[NG_BACKEND_EVENTS / 2];
  for (int i = 0; i < n; i++) /* all read before any is added: a failure adds nothing */
    NG_CHECK(p->be->iface->event_elapsed(p->be, p->pending[i].ev0, p->pending[i].ev1, &ms[i]));
  for (int i = 0; i < n; i++) {
    ng_op_time *r = &p->rows[p->pending[i].row];
    r->calls++;
    r->ms += ms[i];
    r->flops += p->pending[i].flops;
    r->bytes += p->pending[i].bytes;
  }
  p->iterations++;
  return NG_OK;
}

void ng__prof_finish(ng_prof *p) {
  if (!p || !p->be)
    return;
  p->active = false;
  p->whole = true;
}

ng_status ng__prof_start(ng_prof *p) {
  if (!p || !p->be)
    return NG_OK;
  NG_CHECK(ng__prof_collect(p));
  p->active = true;
  p->whole = false;
  p->next_event = 0;
  p->open_row = -1;
  return NG_OK;
}

void ng__prof_pause(ng_prof *p) {
  if (p)
    p->active = false;
}

void ng__prof_resume(ng_prof *p) {
  if (p && p->be)
    p->active = true;
}

ng_status ng__prof_begin(ng_prof *p) {
  if (!timing(p))
    return NG_OK;
  if (p->next_event + 2 > NG_BACKEND_EVENTS) /* prof.h's static bounds make this unreachable */
    return NG_OK;
  NG_CHECK(p->be->iface->event_record(p->be, p->next_event));
  p->open_row = p->next_event;
  p->next_event++;
  return NG_OK;
}

/* The row of (name, layer), added when it is new; -1 when the table is full. */
static int row_of(ng_prof *p, const char *name, int layer) {
  for (int i = 0; i < p->n_rows; i++)
    if (p->rows[i].layer == layer && strcmp(p->rows[i].name, name) == 0)
      return i;
  if (p->n_rows == NG_PROF_ROWS)
    return -1;
  ng_op_time *r = &p->rows[p->n_rows];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  r->layer = layer;
  return p->n_rows++;
}

ng_status ng__prof_end(ng_prof *p, const char *name, int layer, double flops, double bytes) {
  if (!timing(p) || p->open_row < 0)
    return NG_OK;
  const int ev0 = p->open_row;
  p->open_row = -1;
  NG_CHECK(p->be->iface->event_record(p->be, p->next_event));
  const int ev1 = p->next_event++;
  const int row = row_of(p, name, layer);
  if (row < 0) /* unreachable too: NG_PROF_ROWS covers the deepest model */
    return NG_OK;
  p->pending[p->n_pending].row = row;
  p->pending[p->n_pending].ev0 = ev0;
  p->pending[p->n_pending].ev1 = ev1;
  p->pending[p->n_pending].flops = flops;
  p->pending[p->n_pending].bytes = bytes;
  p->n_pending++;
  return NG_OK;
}
