/* The serving engine's admission and lanes: deadlines, admission by predicted wait, batching of
 * compatible requests, the lane threads that run the batches, the clock thread that answers
 * requests at their deadline, and cancellation. docs/serving-engine.md.
 *
 * A request's answer is its callback, always called without e->mu held: whoever answers it (a
 * lane at the end of its batch, the clock or a lane at its deadline, ng_engine_cancel) takes it
 * off the queue or the batch under e->mu, then calls the callback and frees it afterwards. */
#include "engine_state_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool compatible(const pending *a, const pending *b) {
  if (a->req->n_fanouts != b->req->n_fanouts)
    return false;
  if (a->req->n_fanouts == 0)
    return true;
  return memcmp(a->fanout, b->fanout, sizeof a->fanout) == 0;
}

/* The queue that serves request `p`: the hub lane's for hub requests. */
static queue *queue_of(ng_engine *e, const pending *p) {
  return &e->queues[p->hub ? Q_HUB : Q_MAIN];
}

/* Unlinks queued request `p` (its predecessor `prev` in queue `q`, NULL at the head) and takes it
 * off the queue's counts. Under e->mu. */
static void unlink_pending(queue *q, pending *p, pending *prev) {
  if (prev)
    prev->next = p->next;
  else
    q->head = p->next;
  if (q->tail == p)
    q->tail = prev;
  p->next = NULL;
  q->queued_nodes -= p->req->n;
  q->queued_work -= p->work;
}

/* Answers queued request `p` (its predecessor `prev` in queue `qu`), whose deadline passed before
 * it could start, as busy: it is never computed. Under e->mu: it leaves the queue for the list
 * *expired, whose callbacks `finish` calls later. */
static void expire(ng_engine *e, queue *qu, pending *p, pending *prev, double now,
                   pending **expired) {
  unlink_pending(qu, p, prev);
  p->next = *expired;
  *expired = p;
  p->st = NG_ERR_STATE;
  snprintf(p->err, sizeof p->err,
           "engine busy: the request waited %.1f ms and could not start before its deadline "
           "(timeout_ms %lld); retry later",
           (now - p->t_enq) / 1e3, (long long)p->timeout_ms);
  e->admitted--;
  e->stats.timed_out++;
}

/* Calls the callbacks of a list of answered requests (linked by `next`) and frees them. Without
 * e->mu: a callback may call into the engine. */
static void finish(pending *list) {
  while (list) {
    pending *p = list;
    list = p->next;
    p->done_fn(p->user, p->st, p->st == NG_OK ? "" : p->err);
    free(p->ends);
    free(p);
  }
}

/* The queue's measured cost after one of its lanes computed a batch of `work` units in `us`: an
 * EWMA of the cost per unit, weighted towards recent batches so that it follows the load. With
 * several workers each batch is timed on its own worker, concurrent batches included, so the
 * cost is a worker's and the queue drains `lanes` times as fast. Under e->mu. */
static void measure(const ng_engine *e, queue *q, int64_t work, double us) {
  if (e->cost_fixed || work <= 0)
    return;
  const double per = us / (double)work;
  q->us_per_work = q->us_per_work > 0.0 ? 0.8 * q->us_per_work + 0.2 * per : per;
}

/* The test hook's hold (ng__engine_test_hold_hub): a hub batch, once taken, waits here until the
 * test releases it. Under e->mu. */
static void hold_hub_batch(ng_engine *e) {
  if (!e->hold_hub)
    return;
  e->hub_held++;
  pthread_cond_broadcast(&e->done_cv);
  while (e->hold_hub)
    pthread_cond_wait(&e->done_cv, &e->mu);
  e->hub_held--;
}

/* A lane's thread: it forms batches from its queue and computes them on its own backend. The
 * main-lane workers share one queue and merge compatible ordinary requests; while one computes,
 * the next free one forms and builds the next batch. The hub lane runs each hub request alone
 * and at once (it does not wait max_delay_us). */
void *ng__engine_lane_main(void *arg) {
  lane *ln = arg;
  ng_engine *e = ln->e;
  queue *qu = ln->q;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while ((!qu->head || e->paused) && !e->stopping)
      pthread_cond_wait(&e->work_cv, &e->mu);
    if (!qu->head)
      break; /* stopping, and every request of this queue is taken */
    /* Wait for others to join the oldest request, up to max_delay_us or a full batch. A hub
     * request runs alone and starts at once. */
    const double delay_end = qu->head->t_enq + (double)e->o.max_delay_us;
    while (!e->stopping && !e->paused && qu->head && !qu->head->hub &&
           qu->queued_nodes < e->o.max_batch && qu->queued_work < e->o.max_batch_work &&
           now_us() < delay_end)
      wait_until(&e->work_cv, &e->mu, NG_MIN(delay_end, qu->head->deadline_us));
    if (!qu->head || (e->paused && !e->stopping))
      continue; /* the head left (its deadline passed, or another worker took it), or a test
                 * paused the lanes */
    /* Take the oldest request, then every later compatible one that fits; requests whose
     * deadline has passed are answered busy instead, never computed. */
    int n = 0;
    int64_t nodes = 0, work = 0;
    pending *p = qu->head, *prev = NULL, *expired = NULL;
    const pending *first = NULL;
    const double now = now_us();
    while (p && n < MAX_BATCH_REQUESTS) {
      pending *next = p->next;
      if (now >= p->deadline_us) {
        expire(e, qu, p, prev, now, &expired);
        p = next;
        continue;
      }
      const bool take =
          !first || (!first->hub && !p->hub && compatible(first, p) &&
                     nodes + p->req->n <= e->o.max_batch && work + p->work <= e->o.max_batch_work);
      if (take) {
        unlink_pending(qu, p, prev);
        p->taken = true;
        e->stats.computed++;
        ln->batch[n++] = p;
        nodes += p->req->n;
        work += p->work;
        if (!first)
          first = p;
      } else {
        prev = p;
      }
      if (first && (first->hub || nodes >= e->o.max_batch || work >= e->o.max_batch_work))
        break;
      p = next;
    }
    ln->n_batch = n;
    if (n == 0) {
      pthread_mutex_unlock(&e->mu);
      finish(expired);
      pthread_mutex_lock(&e->mu);
      continue;
    }
    qu->running_work += work;
    /* What is left may make another batch: a free worker of this queue forms it now. */
    if (qu->head && qu->lanes > 1)
      pthread_cond_broadcast(&e->work_cv);
    if (first->hub)
      hold_hub_batch(e);
    pthread_mutex_unlock(&e->mu);
    finish(expired);

    const double t0 = now_us();
    batch_rows rows = {0, 0};
    ng_status st = ng__engine_run_batch(ln, ln->batch, n, t0, &rows);
    char msg[512] = "";
    if (st != NG_OK)
      snprintf(msg, sizeof msg, "%s", ng_last_error());
    const double t1 = now_us();

    pthread_mutex_lock(&e->mu);
    qu->running_work -= work;
    if (st == NG_OK)
      measure(e, qu, work, t1 - t0);
    e->stats.batches++;
    e->stats.batch_nodes += nodes;
    e->stats.hot_rows += rows.hot_rows;
    e->stats.cold_rows += rows.cold_rows;
    pending *answered = NULL;
    for (int i = n - 1; i >= 0; i--) {
      pending *q = ln->batch[i];
      if (st != NG_OK) {
        ng_infer_result_free(q->res);
        q->st = st;
        snprintf(q->err, sizeof q->err, "%s", msg);
      }
      if (q->cancelled) { /* computed; the answer has no one to go to */
        ng_infer_result_free(q->res);
        q->st = NG_ERR_INTERRUPTED;
        snprintf(q->err, sizeof q->err, "request cancelled while its batch computed");
        e->stats.cancelled++;
      }
      q->next = answered;
      answered = q;
    }
    ln->n_batch = 0;
    e->admitted -= n;
    pthread_mutex_unlock(&e->mu);
    finish(answered);
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* The clock thread: it answers every queued request busy at its deadline, even while every lane
 * is computing (a lane only looks at its queue between batches), so that a refusal comes when
 * the deadline passes, not a batch later. It sleeps until the earliest deadline of the queued
 * requests; admission wakes it for an earlier one. */
void *ng__engine_clock_main(void *arg) {
  ng_engine *e = arg;
  pthread_mutex_lock(&e->mu);
  while (!e->clock_stop) {
    const double now = now_us();
    double next = INFINITY;
    pending *expired = NULL;
    for (int k = 0; k < N_QUEUES; k++) {
      queue *qu = &e->queues[k];
      pending *prev = NULL;
      for (pending *p = qu->head; p;) {
        pending *nx = p->next;
        if (now >= p->deadline_us) {
          expire(e, qu, p, prev, now, &expired);
        } else {
          next = NG_MIN(next, p->deadline_us);
          prev = p;
        }
        p = nx;
      }
    }
    if (expired) {
      pthread_cond_broadcast(&e->work_cv); /* a lane may be waiting on a head that left */
      pthread_mutex_unlock(&e->mu);
      finish(expired);
      pthread_mutex_lock(&e->mu);
      continue;
    }
    e->clock_until = next;
    if (next == INFINITY)
      pthread_cond_wait(&e->clock_cv, &e->mu);
    else
      wait_until(&e->clock_cv, &e->mu, next);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

void ng__engine_test_pause(ng_engine *e, bool paused) {
  pthread_mutex_lock(&e->mu);
  e->paused = paused;
  pthread_cond_broadcast(&e->work_cv);
  pthread_mutex_unlock(&e->mu);
}

void ng__engine_test_cost(ng_engine *e, double us_per_work) {
  pthread_mutex_lock(&e->mu);
  for (int k = 0; k < N_QUEUES; k++)
    e->queues[k].us_per_work = us_per_work;
  e->cost_fixed = us_per_work > 0.0;
  pthread_mutex_unlock(&e->mu);
}

void ng__engine_test_hold_hub(ng_engine *e, bool hold) {
  pthread_mutex_lock(&e->mu);
  e->hold_hub = hold;
  pthread_cond_broadcast(&e->done_cv);
  pthread_mutex_unlock(&e->mu);
}

bool ng__engine_test_hub_held(ng_engine *e, double timeout_s) {
  pthread_mutex_lock(&e->mu);
  const double until = now_us() + timeout_s * 1e6;
  while (e->hub_held == 0 && now_us() < until)
    wait_until(&e->done_cv, &e->mu, until);
  const bool held = e->hub_held > 0;
  pthread_mutex_unlock(&e->mu);
  return held;
}

/* ---- the API ---- */

static int i64_cmp(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* A pair request (r->dst_ids): checks what only pairs need, then makes p->own, the node request
 * of the pairs' ends (sorted, each once), which the rest of the engine batches and computes as
 * any node request; the scores are formed when its batch answers (engine_forward.c). */
static ng_status pair_request(ng_engine *e, const ng_infer_request *r, pending *p) {
  if (!e->link.present)
    return ng__err(NG_ERR_INVALID_ARG,
                   "pair scores (dst_ids) need a link-prediction checkpoint (train --task link "
                   "--checkpoint); this engine serves a node-classification model");
  if (r->n < 1 || r->n > e->o.max_request_nodes || !r->node_ids)
    return ng__err(NG_ERR_INVALID_ARG, "request has %lld pairs; send 1 to %lld (max_request_nodes)",
                   (long long)r->n, (long long)e->o.max_request_nodes);
  if (r->outputs & ~(unsigned)NG_OUT_SCORE)
    return ng__err(NG_ERR_INVALID_ARG,
                   "request outputs 0x%x: a pair request (dst_ids) answers \"score\" alone (8)",
                   r->outputs);
  p->ends = malloc(2 * (size_t)r->n * sizeof *p->ends);
  if (!p->ends)
    return ng__err(NG_ERR_NOMEM, "out of memory for a request of %lld pairs", (long long)r->n);
  memcpy(p->ends, r->node_ids, (size_t)r->n * sizeof *p->ends);
  memcpy(p->ends + r->n, r->dst_ids, (size_t)r->n * sizeof *p->ends);
  qsort(p->ends, 2 * (size_t)r->n, sizeof *p->ends, i64_cmp);
  int64_t m = 0;
  for (int64_t i = 0; i < 2 * r->n; i++)
    if (m == 0 || p->ends[m - 1] != p->ends[i])
      p->ends[m++] = p->ends[i];
  p->own = *r;
  p->own.node_ids = p->ends;
  p->own.n = m;
  p->own.outputs = NG_OUT_LOGITS; /* the last layer's rows: the embeddings */
  p->own.dst_ids = NULL;
  p->pairs_req = r;
  return NG_OK;
}

/* Checks a request against the engine and the current node count. */
static ng_status check_request(ng_engine *e, const ng_infer_request *r, pending *p) {
  const struct ng_model *m = &e->model;
  if (!r)
    return ng__err(NG_ERR_INVALID_ARG, "request is NULL");
  if ((r->outputs & NG_OUT_SCORE) && !r->dst_ids)
    return ng__err(NG_ERR_INVALID_ARG,
                   "request asks for \"score\" without pairs: give dst_ids (the pairs' "
                   "destinations) beside node_ids (their sources)");
  if (r->dst_ids) {
    /* Both ends' ids are checked here, to name the array and the pair of a bad one. */
    ng_status st = pair_request(e, r, p);
    if (st != NG_OK)
      return st;
    ng_srv_snap *s = ng__engine_snap_acquire(e);
    for (int64_t j = 0; j < 2 * r->n && st == NG_OK; j++) {
      const int64_t v = j < r->n ? r->node_ids[j] : r->dst_ids[j - r->n];
      if (v < 0 || v >= s->nodes)
        st = ng__err(NG_ERR_INVALID_ARG, "%s[%lld] = %lld is not a node (0 .. %lld)",
                     j < r->n ? "src_ids" : "dst_ids", (long long)(j < r->n ? j : j - r->n),
                     (long long)v, (long long)s->nodes - 1);
    }
    ng__srv_snap_unref(s);
    if (st != NG_OK)
      return st;
    r = &p->own;
  }
  /* A pair request's own node request is valid by construction (pair_request). */
  if (!p->pairs_req && (r->n < 1 || r->n > e->o.max_request_nodes || !r->node_ids))
    return ng__err(NG_ERR_INVALID_ARG,
                   "request has %lld node ids; send 1 to %lld (max_request_nodes)", (long long)r->n,
                   (long long)e->o.max_request_nodes);
  if (r->outputs & ~(unsigned)(NG_OUT_LOGITS | NG_OUT_EMBEDDING | NG_OUT_CLASS))
    return ng__err(NG_ERR_INVALID_ARG,
                   "request outputs 0x%x: unknown bits (logits 1, embedding 2, class 4; score 8 "
                   "with dst_ids)",
                   r->outputs);
  p->emb_layer = r->embedding_layer >= 0 ? r->embedding_layer : NG_MAX(0, m->n_layers - 2);
  if ((r->outputs & NG_OUT_EMBEDDING) && p->emb_layer >= m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG,
                   "embedding_layer %d does not exist: the model has layers 0 .. %d",
                   (int)r->embedding_layer, m->n_layers - 1);
  if (r->n_fanouts != 0 && r->n_fanouts != m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG,
                   "request gives %d fanouts; give one per layer (%d) or none (full "
                   "neighbourhood)",
                   (int)r->n_fanouts, m->n_layers);
  for (int l = 0; l < m->n_layers; l++) {
    p->fanout[l] = r->n_fanouts ? r->fanout[l] : -1;
    if (p->fanout[l] == 0 || p->fanout[l] < -1)
      return ng__err(NG_ERR_INVALID_ARG, "fanout %d of layer %d: use a positive count or -1 (all)",
                     (int)p->fanout[l], l);
  }
  if (r->timeout_ms < 0 || r->timeout_ms > NG_ENGINE_MAX_TIMEOUT_MS)
    return ng__err(NG_ERR_INVALID_ARG,
                   "timeout_ms %lld: give 1 to %d ms, or 0 for the engine's default (%lld ms)",
                   (long long)r->timeout_ms, NG_ENGINE_MAX_TIMEOUT_MS,
                   (long long)e->o.request_timeout_ms);
  p->timeout_ms = r->timeout_ms ? r->timeout_ms : e->o.request_timeout_ms;
  ng_srv_snap *s = ng__engine_snap_acquire(e);
  ng_status st = NG_OK;
  /* A pair request's ends were checked above, naming their array (node counts only grow). */
  for (int64_t j = 0; !p->pairs_req && j < r->n; j++) {
    if (r->node_ids[j] < 0 || r->node_ids[j] >= s->nodes) {
      st = ng__err(NG_ERR_INVALID_ARG, "node_ids[%lld] = %lld is not a node (0 .. %lld)",
                   (long long)j, (long long)r->node_ids[j], (long long)s->nodes - 1);
      break;
    }
  }
  if (st == NG_OK) {
    const int64_t edges =
        ng__srv_field_estimate(s, m->n_layers, p->fanout, r->node_ids, r->n, e->hub_edges);
    p->hub = edges > e->hub_edges;
    p->work = edges + r->n;
  }
  ng__srv_snap_unref(s);
  return st;
}

ng_status ng_engine_submit(ng_engine *e, const ng_infer_request *req, ng_infer_result *res,
                           ng_infer_done_fn done, void *user, ng_infer_ticket *ticket) {
  NG_CHECK(ng__engine_check(e));
  if (ticket)
    *ticket = 0;
  if (!res || !done)
    return ng__err(NG_ERR_INVALID_ARG, "ng_engine_submit: %s is NULL", res ? "done" : "result");
  memset(res, 0, sizeof *res);
  pending *p = ng__calloc(1, sizeof *p, "a request's queue entry");
  if (!p)
    return NG_ERR_NOMEM;
  ng_status st = check_request(e, req, p);
  if (st != NG_OK) {
    free(p->ends);
    free(p);
    return st;
  }
  p->req = p->pairs_req ? &p->own : req;
  p->res = res;
  p->done_fn = done;
  p->user = user;
  p->t_enq = now_us();
  p->deadline_us = p->t_enq + (double)p->timeout_ms * 1e3;
  pthread_mutex_lock(&e->mu);
  queue *qu = queue_of(e, p);
  /* Admission by predicted wait: the work queued and computing ahead of this request at the
   * measured cost, shared by the queue's workers. Refused at once when it would start after its
   * deadline: answering busy now costs the client nothing, computing it late would cost the
   * requests behind it. */
  const double wait_us =
      (double)(qu->queued_work + qu->running_work) * qu->us_per_work / (double)qu->lanes;
  if (e->stopping) {
    st = ng__err(NG_ERR_STATE, "engine is draining: no new requests");
  } else if (e->admitted >= e->o.queue_cap) {
    e->stats.rejected_busy++;
    st = ng__err(NG_ERR_STATE, "engine busy: %d requests admitted and not answered (queue_cap)",
                 e->o.queue_cap);
  } else if (p->t_enq + wait_us > p->deadline_us) {
    e->stats.rejected_deadline++;
    st = ng__err(NG_ERR_STATE,
                 "engine busy: the predicted wait, %.1f ms, passes the request's deadline "
                 "(timeout_ms %lld); retry later",
                 wait_us / 1e3, (long long)p->timeout_ms);
  }
  if (st != NG_OK) {
    pthread_mutex_unlock(&e->mu);
    free(p->ends);
    free(p);
    return st;
  }
  p->ticket = ++e->next_ticket;
  if (ticket)
    *ticket = p->ticket;
  e->admitted++;
  e->stats.requests++;
  e->stats.request_nodes += p->req->n;
  e->stats.hub_requests += p->hub;
  qu->queued_nodes += p->req->n;
  qu->queued_work += p->work;
  if (qu->tail)
    qu->tail->next = p;
  else
    qu->head = p;
  qu->tail = p;
  pthread_cond_broadcast(&e->work_cv); /* every lane waits on it */
  if (p->deadline_us < e->clock_until) {
    e->clock_until = p->deadline_us;
    pthread_cond_signal(&e->clock_cv);
  }
  pthread_mutex_unlock(&e->mu);
  return NG_OK;
}

ng_status ng_engine_cancel(ng_engine *e, ng_infer_ticket ticket) {
  NG_CHECK(ng__engine_check(e));
  pthread_mutex_lock(&e->mu);
  for (int k = 0; k < N_QUEUES; k++) {
    queue *qu = &e->queues[k];
    pending *prev = NULL;
    for (pending *p = qu->head; p; prev = p, p = p->next) {
      if (p->ticket != ticket)
        continue;
      unlink_pending(qu, p, prev);
      p->st = NG_ERR_INTERRUPTED;
      snprintf(p->err, sizeof p->err, "request cancelled while queued; it was not computed");
      e->admitted--;
      e->stats.cancelled++;
      pthread_cond_broadcast(&e->work_cv); /* a lane may be waiting on this head */
      pthread_mutex_unlock(&e->mu);
      finish(p);
      return NG_OK;
    }
  }
  for (int k = 0; k < e->n_lanes; k++) {
    lane *ln = &e->lanes[k];
    for (int i = 0; i < ln->n_batch; i++) {
      if (ln->batch[i]->ticket != ticket)
        continue;
      ln->batch[i]->cancelled = true;
      pthread_mutex_unlock(&e->mu);
      return NG_OK;
    }
  }
  pthread_mutex_unlock(&e->mu);
  return ng__err(NG_ERR_NOT_FOUND,
                 "ticket %llu: no such request queued or computing (answered already?)",
                 (unsigned long long)ticket);
}

/* ng_engine_infer's wait for its own request's callback. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  ng_status st;
  char err[512];
} sync_call;

static void sync_done(void *user, ng_status st, const char *message) {
  sync_call *c = user;
  pthread_mutex_lock(&c->mu);
  c->st = st;
  snprintf(c->err, sizeof c->err, "%s", message);
  c->done = true;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

ng_status ng_engine_infer(ng_engine *e, const ng_infer_request *req, ng_infer_result *res) {
  sync_call c = {.done = false};
  pthread_mutex_init(&c.mu, NULL);
  pthread_cond_init(&c.cv, NULL);
  ng_status st = ng_engine_submit(e, req, res, sync_done, &c, NULL);
  if (st == NG_OK) {
    pthread_mutex_lock(&c.mu);
    while (!c.done)
      pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    st = c.st;
  }
  pthread_cond_destroy(&c.cv);
  pthread_mutex_destroy(&c.mu);
  if (st != NG_OK && c.done)
    return ng__err(st, "%s", c.err);
  return st;
}
