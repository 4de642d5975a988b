/* libFuzzer target: arbitrary bytes as the body of a graph update (ng__parse_graph_update,
 * serve/http_json.c). The first byte picks the feature width (1 to 8), the rest is the body.
 * Beyond "no crash", it traps when an accepted update breaks what the engine relies on (counts,
 * ids, finite features, arrays inside the one buffer) and when a refusal leaves anything behind
 * or says nothing. */
#include "http_impl.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ids(const int64_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || (double)ids[i] > NG_HTTP_MAX_EXACT_INT)
      __builtin_trap();
}

static void check_rows(const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(v[i]))
      __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const int64_t dim = 1 + data[0] % 8;
  ng_http_update u;
  memset(&u, 0xAB, sizeof u);
  const ng_status st = ng__parse_graph_update(&u, (const char *)data + 1, size - 1, dim);
  if (st == NG_OK) {
    const ng_graph_update *g = &u.u;
    if (g->add_nodes < 0 || g->n_add_edges < 0 || g->n_remove_edges < 0 || g->n_feature_rows < 0)
      __builtin_trap();
    /* Every value took a byte of the body at least. */
    if ((g->add_nodes + g->n_feature_rows) * dim + 2 * (g->n_add_edges + g->n_remove_edges) >
        (int64_t)size)
      __builtin_trap();
    check_ids(g->add_src, g->n_add_edges);
    check_ids(g->add_dst, g->n_add_edges);
    check_ids(g->remove_src, g->n_remove_edges);
    check_ids(g->remove_dst, g->n_remove_edges);
    check_ids(g->feature_ids, g->n_feature_rows);
    if (g->add_nodes)
      check_rows(g->add_features, g->add_nodes * dim);
    if (g->n_feature_rows)
      check_rows(g->feature_values, g->n_feature_rows * dim);
    size_t len = 0;
    const ng_update_result r = {
        sizeof r, 7, g->add_nodes, g->n_add_edges, g->n_remove_edges, g->n_feature_rows, 1};
    char *text = ng__update_response_json(&len, "m", u.id, &r, 8);
    if (text && len != strlen(text))
      __builtin_trap();
    free(text);
  } else if (st != NG_ERR_INVALID_ARG && st != NG_ERR_NOMEM) {
    __builtin_trap();
  } else if (u.buf || u.id || !ng_last_error()[0]) {
    __builtin_trap();
  }
  ng__http_update_clear(&u);
  return 0;
}
