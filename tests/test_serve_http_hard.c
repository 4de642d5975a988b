/* The HTTP front against hostile and slow clients (serve/http.c, serve/http_json.c): ids that
 * are not plain integer literals, ambiguous body framing, slow headers and bodies, the
 * per-client connection cap, the slots reserved for health checks, and body lengths declared
 * and not sent. Raw sockets, so that each case is sent byte for byte as a client would.
 *
 * TEST-ONLY FAKE ENGINE: as in test_serve_http.c, the engine functions that http.c calls are
 * defined below (the linker takes them before the library's), so that the server's connection
 * handling is tested apart from the real engine. Waits are bounded generously and assertions
 * are on outcomes (closed or answered, and the metrics counting why), not on timing. */
#include "core_impl.h"
#include "http_impl.h"
#include "ng_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the fake engine (test only): every id below `nodes` is answered, class = id % 4 ---- */

struct ng_engine {
  atomic_llong nodes;
};

void ng_engine_info_get(ng_engine_info *out, const ng_engine *e) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "fake");
  out->nodes = atomic_load(&((ng_engine *)e)->nodes);
  out->feature_dim = 2;
  out->classes = 4;
  out->layers = 2;
  out->layer_dim[0] = 3;
  out->layer_dim[1] = 4;
  out->ready = 1;
}

ng_status ng_engine_infer(ng_engine *e, const ng_infer_request *req, ng_infer_result *res) {
  memset(res, 0, sizeof *res);
  for (int64_t i = 0; i < req->n; i++)
    if (req->node_ids[i] < 0 || req->node_ids[i] >= atomic_load(&e->nodes))
      return ng__err(NG_ERR_INVALID_ARG, "node id %" PRId64 " is unknown", req->node_ids[i]);
  res->n = req->n;
  res->classes = 4;
  res->cls = malloc((size_t)req->n * sizeof *res->cls);
  if (!res->cls)
    return ng__err(NG_ERR_NOMEM, "fake engine: no memory");
  for (int64_t i = 0; i < req->n; i++)
    res->cls[i] = req->node_ids[i] % 4;
  res->batch_nodes = req->n;
  return NG_OK;
}

void ng_infer_result_free(ng_infer_result *r) {
  free(r->logits);
  free(r->embedding);
  free(r->cls);
  r->logits = r->embedding = NULL;
  r->cls = NULL;
}

ng_status ng_engine_update(ng_engine *e, const ng_graph_update *u, int64_t *first_new_id) {
  if (first_new_id)
    *first_new_id = atomic_load(&e->nodes);
  atomic_fetch_add(&e->nodes, u->add_nodes);
  return NG_OK;
}

void ng_engine_stats_get(ng_engine_stats *out, const ng_engine *e) {
  (void)e;
  memset(out, 0, sizeof *out);
}

/* ---- ids are plain integer literals ---- */

#define INFER_IDS(ids, n)                                                                          \
  "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[" #n "],\"data\":[" ids   \
  "]}],\"outputs\":[{\"name\":\"class\"}]}"

static void test_ids_plain_integers(void) {
  static const struct {
    const char *body, *message;
  } bad_infer[] = {
      {INFER_IDS("1.0", 1), "data[0] is not a node id"},
      {INFER_IDS("1e3", 1), "data[0] is not a node id"},
      {INFER_IDS("2, -0", 2), "data[1] is not a node id"},
      {INFER_IDS("3, 4, 1E0", 3), "data[2] is not a node id"},
      {INFER_IDS("5, 10.00", 2), "data[1] is not a node id"},
      {INFER_IDS("7, 1", 1.0), "shape [n] with n >= 1"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad_infer); i++) {
    ng_http_infer r;
    EXPECT_STATUS(ng__parse_infer_request(&r, bad_infer[i].body, strlen(bad_infer[i].body), 2),
                  NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS(bad_infer[i].message);
  }
  /* Plain literals are ids; a string holding digits or -0 elsewhere changes nothing. */
  const char *good = "{\"id\":\"-0 1.0\",\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\","
                     "\"shape\":[4],\"data\":[0, 17, 1000, 9007199254740992]}],"
                     "\"parameters\":{\"x\":[1.5, -0, {\"y\":1e3}],\"seed\":3}}";
  ng_http_infer r;
  EXPECT_OK(ng__parse_infer_request(&r, good, strlen(good), 2));
  EXPECT_EQ_I(r.req.n, 4);
  if (r.req.n == 4) {
    EXPECT_EQ_I(r.ids[1], 17);
    EXPECT_EQ_I(r.ids[2], 1000);
    EXPECT_EQ_I(r.ids[3], 9007199254740992LL);
  }
  EXPECT_EQ_I(r.req.seed, 3);
  ng__http_infer_clear(&r);

  static const struct {
    const char *body, *message;
  } bad_update[] = {
      {"{\"add_edges\":[[1, 2], [1.0, 2]]}", "add_edges[1] is not a pair"},
      {"{\"remove_edges\":[[1, 2e0]]}", "remove_edges[0] is not a pair"},
      {"{\"update_features\":{\"ids\":[4, -0],\"values\":[[1, 2], [3, 4]]}}",
       "update_features.ids[1] is not a node id"},
      {"{\"update_features\":{\"ids\":[1e1],\"values\":[1, 2]}}",
       "update_features.ids[0] is not a node id"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad_update); i++) {
    ng_http_update u;
    EXPECT_STATUS(ng__parse_graph_update(&u, bad_update[i].body, strlen(bad_update[i].body), 2),
                  NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS(bad_update[i].message);
  }
  /* Feature values are floats and may be written any way. */
  const char *update = "{\"add_nodes\":{\"features\":[[1.0, -0]]},\"add_edges\":[[3, 10]],"
                       "\"update_features\":{\"ids\":[2],\"values\":[[1e3, 2.5]]}}";
  ng_http_update u;
  EXPECT_OK(ng__parse_graph_update(&u, update, strlen(update), 2));
  EXPECT_EQ_I(u.u.n_add_edges, 1);
  EXPECT_EQ_I(u.u.n_feature_rows, 1);
  if (u.u.n_feature_rows == 1) {
    EXPECT_EQ_I(u.u.feature_ids[0], 2);
    EXPECT_NEAR(u.u.feature_values[0], 1000.0, 0);
  }
  ng__http_update_clear(&u);
}

int main(void) {
  RUN_TEST(test_ids_plain_integers);
  return ng_test_summary();
}
