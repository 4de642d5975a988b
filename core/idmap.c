/* The id -> local index table: see idmap.h. */
#include "idmap.h"

#include <stdlib.h>

ng_status ng__idmap_reserve(ng_idmap *m, size_t nodes, const int64_t *ids, int32_t n,
                            const char *what) {
  const size_t need = nodes * 2;
  if (NG_LIKELY(need <= m->cap))
    return NG_OK;
  size_t cap = m->cap ? m->cap * 2 : 1024;
  while (cap < need)
    cap *= 2;
  ng_idmap_slot *t = ng__calloc(cap, sizeof *t, what);
  if (!t)
    return NG_ERR_NOMEM;
  free(m->slot);
  m->slot = t;
  m->cap = cap;
  /* Every stamp of the fresh slots is 0, which no generation in use is. */
  const size_t mask = cap - 1;
  for (int32_t i = 0; i < n; i++) {
    size_t h = ng__idmap_hash(ids[i], mask);
    while (t[h].stamp == m->gen)
      h = (h + 1) & mask;
    t[h] = (ng_idmap_slot){.key = ids[i], .val = i, .stamp = m->gen};
  }
  return NG_OK;
}

void ng__idmap_free(ng_idmap *m) {
  if (!m)
    return;
  free(m->slot);
  m->slot = NULL;
  m->cap = 0;
  m->gen = 0;
}
