/* The sample feed: see feed_impl.h. */
#include "feed_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SLOT_FREE, SLOT_READY, SLOT_FAILED } slot_state;

typedef struct {
  int64_t seq;  /* the position it holds (READY or FAILED) */
  int64_t next; /* the only position it may take next (FREE): its last one + slots */
  slot_state state;
  ng_minibatch mb;
  void *host; /* the blocks' host buffer (backend host memory, grown by sampler_run) */
  size_t host_cap;
  ng_status status; /* FAILED: why */
  char err[512];
} feed_slot;

/* What a feed thread needs to know: its feed and lane. */
typedef struct {
  struct ng_feed *f;
  int lane;
} feed_lane;

struct ng_feed {
  ng_feed_opts o;
  feed_slot *slot;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t *thread; /* [o.lanes] */
  feed_lane *lane;   /* [o.lanes] */
  int started;       /* threads started */
  bool stopping;
};

/* Waits until slot `k` is free for position `seq` (or the feed stops): false when stopping. A
 * slot takes its positions in order (k, k + slots, ...): a fast lane must not put a later
 * position in the slot before a slow lane has put the earlier one there, else the workers could
 * wait for the earlier one while no worker would ever take the later one. */
static bool wait_free(ng_feed *f, int k, int64_t seq) {
  pthread_mutex_lock(&f->mu);
  while (!f->stopping && !(f->slot[k].state == SLOT_FREE && f->slot[k].next == seq))
    pthread_cond_wait(&f->cv, &f->mu);
  const bool ok = !f->stopping;
  pthread_mutex_unlock(&f->mu);
  return ok;
}

static void *feed_main(void *arg) {
  const feed_lane *me = arg;
  ng_feed *f = me->f;
  char name[16];
  snprintf(name, sizeof name, "ng-sample-%d", me->lane);
  (void)pthread_setname_np(pthread_self(), name);
  for (int64_t seq = me->lane;; seq += f->o.lanes) {
    const int k = (int)(seq % f->o.slots);
    if (!wait_free(f, k, seq))
      return NULL;
    const int64_t *targets = NULL;
    int32_t n = 0;
    uint64_t seed = 0;
    if (!f->o.plan(f->o.plan_ctx, me->lane, seq, &targets, &n, &seed))
      return NULL;
    feed_slot *s = &f->slot[k];
    const int64_t t0 = ng__now_ns();
    ng_minibatch mb;
    const ng_status st = f->o.be->iface->sampler_run(f->o.be, f->o.sampler, me->lane, f->o.cfg,
                                                     targets, n, seed, &mb, &s->host, &s->host_cap);
    const int64_t t1 = ng__now_ns();
    int64_t edges = 0;
    for (int l = 0; st == NG_OK && l < mb.n_layers; l++)
      edges += mb.blocks[l].nnz;
    if (f->o.trace)
      ng__trace_span(f->o.trace, f->o.track + me->lane, NG_SPAN_SAMPLE, seq,
                     (int)NG_MIN(edges, (int64_t)INT32_MAX), t0, t1);
    pthread_mutex_lock(&f->mu);
    s->seq = seq;
    s->mb = mb;
    s->status = st;
    s->state = st == NG_OK ? SLOT_READY : SLOT_FAILED;
    if (st != NG_OK)
      snprintf(s->err, sizeof s->err, "%s", ng_last_error());
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (st != NG_OK)
      return NULL; /* the worker of that position reports it; later positions are never asked */
  }
}

ng_status ng__feed_start(ng_feed **out, const ng_feed_opts *o) {
  *out = NULL;
  if (!o->be || !o->sampler || !o->cfg || !o->plan || o->lanes < 1 || o->slots < o->lanes ||
      !o->be->iface->sampler_run)
    return ng__err(NG_ERR_INTERNAL, "sample feed: incomplete options");
  ng_feed *f = ng__calloc(1, sizeof *f, "the sample feed");
  if (!f)
    return NG_ERR_NOMEM;
  f->o = *o;
  f->slot = ng__calloc((size_t)o->slots, sizeof *f->slot, "the sample feed's slots");
  f->thread = ng__calloc((size_t)o->lanes, sizeof *f->thread, "the sample feed's threads");
  f->lane = ng__calloc((size_t)o->lanes, sizeof *f->lane, "the sample feed's lanes");
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  if (!f->slot || !f->thread || !f->lane) {
    ng__feed_stop(f);
    return NG_ERR_NOMEM;
  }
  for (int k = 0; k < o->slots; k++)
    f->slot[k].next = k;
  for (int k = 0; k < o->lanes; k++) {
    f->lane[k] = (feed_lane){f, k};
    const int rc = pthread_create(&f->thread[k], NULL, feed_main, &f->lane[k]);
    if (rc != 0) {
      ng__feed_stop(f);
      return ng__err(NG_ERR_NOMEM, "sample feed: cannot start its thread (%s)", strerror(rc));
    }
    f->started++;
  }
  *out = f;
  return NG_OK;
}

ng_status ng__feed_get(ng_feed *f, int64_t seq, ng_minibatch *mb) {
  feed_slot *s = &f->slot[seq % f->o.slots];
  pthread_mutex_lock(&f->mu);
  while (!f->stopping && !(s->state != SLOT_FREE && s->seq == seq))
    pthread_cond_wait(&f->cv, &f->mu);
  ng_status st = NG_OK;
  if (f->stopping)
    st = ng__err(NG_ERR_INTERRUPTED, "sample feed: stopping");
  else if (s->state == SLOT_FAILED)
    st = ng__err(s->status, "device sampler: %s", s->err);
  else
    *mb = s->mb;
  pthread_mutex_unlock(&f->mu);
  return st;
}

void ng__feed_release(ng_feed *f, int64_t seq) {
  feed_slot *s = &f->slot[seq % f->o.slots];
  pthread_mutex_lock(&f->mu);
  if (s->seq == seq && s->state != SLOT_FREE) {
    s->state = SLOT_FREE;
    s->next = seq + f->o.slots;
    pthread_cond_broadcast(&f->cv);
  }
  pthread_mutex_unlock(&f->mu);
}

void ng__feed_close(ng_feed *f) {
  if (!f)
    return;
  pthread_mutex_lock(&f->mu);
  f->stopping = true;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

void ng__feed_stop(ng_feed *f) {
  if (!f)
    return;
  ng__feed_close(f);
  for (int k = 0; k < f->started; k++)
    pthread_join(f->thread[k], NULL);
  for (int k = 0; f->slot && k < f->o.slots; k++)
    f->o.be->iface->host_free(f->o.be, f->slot[k].host);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f->slot);
  free(f->thread);
  free(f->lane);
  free(f);
}
