/* The id -> local index table: see idmap.h. */
#include "idmap.h"

#include <stdlib.h>

ng_status ng__idmap_reserve(ng_idmap *m, size_t nodes, const int64_t *ids, int32_t n,
                            const char *what) {
  const size_t need = nodes * 2;
  if (NG_LIKELY(need <= m->used))
    return NG_OK;
  size_t used = m->used ? m->used * 2 : 1024;
  while (used < need)
    used *= 2;
  if (used > m->cap) {
    ng_idmap_slot *t = ng__calloc(used, sizeof *t, what);
    if (!t)
      return NG_ERR_NOMEM;
    free(m->slot);
    m->slot = t;
    m->cap = used;
    /* Every stamp of the fresh slots is 0, which no generation in use is. */
  } else {
    /* A window that ng__idmap_restart shrank grows within the allocation: a new generation
     * empties it, and the ids go back in at the new size. */
    ng__idmap_clear(m);
  }
  m->used = used;
  ng_idmap_slot *t = m->slot;
  const size_t mask = used - 1;
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
  m->used = 0;
  m->gen = 0;
}
