/* Online updates of the serving engine: group commit to the update log and snapshot
 * publication. docs/serving-engine.md, "Updates". */
#include "engine_state_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- updates: group commit ---- */

/* A caller of ng_engine_apply waiting for its update's group (on its own stack). */
typedef struct upd_waiter {
  const ng_graph_update *u;
  struct upd_waiter *next;
  ng_update_result res;
  ng_srv_resized resized; /* the rows whose length it changed (the cache's invalidation) */
  uint64_t version;       /* the snapshot's version with it applied */
  ng_status st;
  bool logged; /* it changed something, so it has a record in the group's write */
  bool done;   /* answered (under upd_mu) */
  char err[512];
} upd_waiter;

/* The leader's work on one group, without upd_mu: each update is validated and applied in
 * arrival order (exactly as if serialised) onto one private copy of the published snapshot, so a
 * group costs one copy of the delta and then what its updates touch; one that fails is answered
 * with its error and leaves the copy as it was. The records of those that changed something go
 * to the log in one write and one fdatasync; then the copy is published. */
static void commit_group(ng_engine *e, upd_waiter *group) {
  int n = 0, n_logged = 0;
  for (upd_waiter *w = group; w; w = w->next)
    n++;
  const ng_graph_update **logged = malloc((size_t)n * sizeof *logged);
  ng_srv_snap *base = ng__engine_snap_acquire(e), *cur = NULL;
  ng_status st = logged ? ng__srv_snap_fork(&cur, base) : NG_ERR_NOMEM;
  ng__srv_snap_unref(base);
  if (st != NG_OK) {
    for (upd_waiter *w = group; w; w = w->next) {
      w->st = NG_ERR_NOMEM;
      ng__strlcpy(w->err, "engine: out of memory for an update group", sizeof w->err);
    }
    free(logged);
    return;
  }
  const bool gcn0 = e->gcn[0];
  for (upd_waiter *w = group; w; w = w->next) {
    ng_srv_changes chg = {0};
    const int64_t first_new_id = cur->nodes;
    w->st = ng__srv_snap_apply_into(cur, w->u, &chg, e->ecache && gcn0 ? &w->resized : NULL);
    if (w->st != NG_OK) {
      ng__strlcpy(w->err, ng_last_error(), sizeof w->err);
      continue;
    }
    /* An update that changes nothing needs no record: replaying it would change nothing. */
    const bool changed =
        chg.added_nodes || chg.added_edges || chg.removed_edges || chg.updated_features;
    w->res = (ng_update_result){sizeof w->res,   first_new_id,      chg.added_nodes,
                                chg.added_edges, chg.removed_edges, chg.updated_features,
                                changed};
    w->version = cur->version;
    if (changed) {
      logged[n_logged++] = w->u;
      w->logged = true;
    }
  }
  st = ng__srv_log_append_group(&e->log, logged, n_logged, cur->dim);
  if (st != NG_OK) {
    /* Nothing of the group was acknowledged or published: every update that would have been
     * logged fails with the write's error (the log was cut back). */
    const char *why = ng_last_error();
    for (upd_waiter *w = group; w; w = w->next)
      if (w->logged) {
        w->st = st;
        ng__strlcpy(w->err, why, sizeof w->err);
      }
  } else if (n_logged > 0) {
    /* The cached layer-0 rows the group changes go before it is published, update by update in
     * the log's order (serve/ecache_impl.h). */
    for (upd_waiter *w = group; w; w = w->next)
      if (w->logged)
        ng__ecache_invalidate(e->ecache, w->u, &w->resized, w->version, gcn0);
    /* Publish: batches that start from now on see the group; running ones keep their snapshot. */
    pthread_mutex_lock(&e->snap_mu);
    ng_srv_snap *old = e->snap;
    e->snap = cur;
    cur = NULL;
    pthread_mutex_unlock(&e->snap_mu);
    ng__srv_snap_unref(old);
    pthread_mutex_lock(&e->mu);
    e->stats.updates += n_logged;
    e->stats.update_syncs++;
    pthread_mutex_unlock(&e->mu);
  }
  for (upd_waiter *w = group; w; w = w->next)
    free(w->resized.ids);
  ng__srv_snap_unref(cur);
  free(logged);
}

ng_status ng_engine_apply(ng_engine *e, const ng_graph_update *u, ng_update_result *out) {
  NG_CHECK(ng__engine_check(e));
  if (out && out->size < sizeof out->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_update_result.size is %zu; initialise it with "
                   "NG_UPDATE_RESULT_INIT",
                   out->size);
  if (!e->has_log)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "engine: updates need a log (ng_engine_opts.log_path) to be durable");
  if (!u)
    return ng__err(NG_ERR_INVALID_ARG, "ng_engine_apply: the update is NULL");
  upd_waiter me = {.u = u};
  pthread_mutex_lock(&e->upd_mu);
  if (e->upd_tail)
    e->upd_tail->next = &me;
  else
    e->upd_head = &me;
  e->upd_tail = &me;
  e->upd_queued++;
  /* Only a leader held by a test counts arrivals; followers wait for their group's end, so an
   * arrival wakes nobody else (a broadcast per arrival would wake every waiting updater). */
  if (e->group_hold > 0)
    pthread_cond_broadcast(&e->upd_cv);
  /* Updates that arrive while a leader commits wait for it, then form the next group: the first
   * of them to wake leads it. */
  while (!me.done && e->leading)
    pthread_cond_wait(&e->upd_cv, &e->upd_mu);
  if (!me.done) {
    e->leading = true;
    while (e->group_hold > 0 && e->upd_queued < e->group_hold)
      pthread_cond_wait(&e->upd_cv, &e->upd_mu);
    e->group_hold = 0;
    upd_waiter *group = e->upd_head;
    e->upd_head = e->upd_tail = NULL;
    e->upd_queued = 0;
    pthread_mutex_unlock(&e->upd_mu);
    commit_group(e, group);
    pthread_mutex_lock(&e->upd_mu);
    e->log_records = (int64_t)e->log.seq;
    for (upd_waiter *w = group, *next; w; w = next) {
      next = w->next; /* a follower's waiter is gone once it sees done */
      w->done = true;
    }
    e->leading = false;
    pthread_cond_broadcast(&e->upd_cv);
  }
  pthread_mutex_unlock(&e->upd_mu);
  if (me.st != NG_OK)
    return ng__err(me.st, "%s", me.err);
  if (out)
    memcpy((char *)out + sizeof me.res.size, (char *)&me.res + sizeof me.res.size,
           NG_MIN(out->size, sizeof me.res) - sizeof me.res.size);
  return NG_OK;
}

void ng__engine_test_group_hold(ng_engine *e, int k) {
  pthread_mutex_lock(&e->upd_mu);
  e->group_hold = k;
  pthread_mutex_unlock(&e->upd_mu);
}

int ng__engine_test_updates_queued(ng_engine *e) {
  pthread_mutex_lock(&e->upd_mu);
  const int n = e->upd_queued;
  pthread_mutex_unlock(&e->upd_mu);
  return n;
}

void ng__engine_test_fail_append(ng_engine *e) {
  pthread_mutex_lock(&e->upd_mu);
  e->log.test_fail_next = true; /* read by the next leader, after it took upd_mu */
  pthread_mutex_unlock(&e->upd_mu);
}

ng_status ng_engine_update(ng_engine *e, const ng_graph_update *u, int64_t *first_new_id) {
  ng_update_result r = NG_UPDATE_RESULT_INIT;
  NG_CHECK(ng_engine_apply(e, u, &r));
  if (first_new_id)
    *first_new_id = r.first_new_id;
  return NG_OK;
}

ng_status ng_engine_log_info_get(ng_engine_log_info *out, const ng_engine *e) {
  if (!out || out->size < sizeof out->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_engine_log_info_get: out is NULL or without its size; initialise it with "
                   "NG_ENGINE_LOG_INFO_INIT");
  NG_CHECK(ng__engine_check(e));
  if (!e->has_log)
    return ng__err(NG_ERR_UNSUPPORTED, "engine: no update log (ng_engine_opts.log_path)");
  ng_engine_log_info i = NG_ENGINE_LOG_INFO_INIT;
  ng_engine *me = (ng_engine *)e;
  pthread_mutex_lock(&me->upd_mu); /* the record count moves with updates */
  i.records = e->log_records;
  pthread_mutex_unlock(&me->upd_mu);
  i.replayed = e->log_rep.replayed;
  i.cut_offset = e->log_rep.cut_offset;
  i.cut_bytes = e->log_rep.cut_bytes;
  if (e->log_rep.cut_why)
    ng__strlcpy(i.cut_what, e->log_rep.cut_why, sizeof i.cut_what);
  i.migrated = e->log_rep.migrated;
  memcpy((char *)out + sizeof i.size, (char *)&i + sizeof i.size,
         NG_MIN(out->size, sizeof i) - sizeof i.size);
  return NG_OK;
}
