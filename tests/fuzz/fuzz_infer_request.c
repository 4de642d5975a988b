/* libFuzzer target: arbitrary bytes as a KServe v2 infer request body
 * (ng__parse_infer_request, serve/http_json.c). The first byte picks the model's layer count
 * (0 to 8; 0 skips the checks that need it), the rest is the body. Beyond "no crash", it traps
 * when an accepted request breaks what the engine relies on, when a refused one leaves anything
 * behind or says nothing, and when the answer written for an accepted request is not JSON. */
#include "http_impl.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_accepted(const ng_http_infer *r, int32_t layers) {
  const ng_infer_request *q = &r->req;
  if (q->n < 1 || q->node_ids != r->ids || !r->ids)
    __builtin_trap();
  for (int64_t i = 0; i < q->n; i++)
    if (q->node_ids[i] < 0 || (double)q->node_ids[i] > NG_HTTP_MAX_EXACT_INT)
      __builtin_trap();
  if (q->outputs == 0 ||
      (q->outputs & ~(unsigned)(NG_OUT_LOGITS | NG_OUT_EMBEDDING | NG_OUT_CLASS)))
    __builtin_trap();
  if (q->n_fanouts < 0 || q->n_fanouts > NG_ENGINE_MAX_LAYERS ||
      (layers > 0 && q->n_fanouts != 0 && q->n_fanouts != layers))
    __builtin_trap();
  for (int l = 0; l < q->n_fanouts; l++)
    if (q->fanout[l] == 0 || q->fanout[l] < -1)
      __builtin_trap();
  if (q->embedding_layer < 0 || (layers > 0 && q->embedding_layer >= layers))
    __builtin_trap();
  if (r->id && strlen(r->id) > NG_HTTP_MAX_ID_LEN)
    __builtin_trap();
}

/* The answer to the request, on made-up outputs, must be JSON that names its id. */
static void check_answer(const ng_http_infer *r) {
  const int64_t n = r->req.n < 64 ? r->req.n : 64;
  float logits[64 * 2], emb[64];
  int64_t cls[64];
  for (int64_t i = 0; i < n; i++) {
    logits[2 * i] = (float)r->req.node_ids[i] * 0.5f;
    logits[2 * i + 1] = -1e30f;
    emb[i] = 1.0f / (float)(i + 1);
    cls[i] = i & 1;
  }
  ng_infer_result res = {
      .logits = logits, .embedding = emb, .cls = cls, .n = n, .classes = 2, .embedding_dim = 1};
  size_t len = 0;
  char *text = ng__infer_response_json(&len, "m", r->id, r->req.outputs, &res);
  if (!text)
    return; /* out of memory: nothing to check */
  cJSON *j = cJSON_ParseWithLength(text, len);
  if (!j || len != strlen(text))
    __builtin_trap();
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
  if (r->id && (!cJSON_IsString(id) || strcmp(id->valuestring, r->id) != 0))
    __builtin_trap();
  cJSON_Delete(j);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const int32_t layers = data[0] % (NG_ENGINE_MAX_LAYERS + 1);
  ng_http_infer r;
  memset(&r, 0xAB, sizeof r); /* poisoned: the parser must set every field */
  const ng_status st = ng__parse_infer_request(&r, (const char *)data + 1, size - 1, layers);
  if (st == NG_OK) {
    check_accepted(&r, layers);
    check_answer(&r);
  } else if (st != NG_ERR_INVALID_ARG && st != NG_ERR_NOMEM) {
    __builtin_trap();
  } else if (r.ids || r.id || r.req.n || !ng_last_error()[0]) {
    __builtin_trap();
  }
  ng__http_infer_clear(&r);
  return 0;
}
