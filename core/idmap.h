/* An open-addressing table from global node ids to local indices [0, n): the local index of a
 * node is the order in which the table first saw it, and the table appends each new id to the
 * caller's id list, so that ids[local] = global. This is how a mini-batch, a receptive field or
 * a batch of requests numbers its nodes (cpu/sampler.c).
 *
 * Linear probing over a power-of-two array of slots, kept at most half full. A slot is occupied
 * iff its stamp equals the table's generation, so ng__idmap_clear() empties the table in O(1);
 * the slots are cleared for real only when the generation wraps around. The hash folds the high
 * half of a multiplicative hash down, so that runs of consecutive ids (common in rows and in
 * renumbered graphs) spread over the table. Neither the hash nor the probe order shows in the
 * result: the local indices depend only on the order of the ids added.
 *
 * A hot loop takes a view (ng__idmap_view: the slots, the mask and the generation, in registers)
 * after the last ng__idmap_reserve() and adds through it. */
#ifndef NG_IDMAP_H
#define NG_IDMAP_H

#include "core_impl.h"

#include <string.h>

typedef struct {
  int64_t key;
  int32_t val;
  uint32_t stamp;
} ng_idmap_slot;

/// The table. Zero-initialized it is empty and holds no memory; ng__idmap_clear() starts each
/// use, ng__idmap_reserve() makes room before adding, ng__idmap_free() releases it.
typedef struct {
  ng_idmap_slot *slot;
  size_t cap; ///< slots allocated, a power of two (0 before the first ng__idmap_reserve)
  /// Slots in use, a power of two <= cap: ids hash and probe within them. cap unless
  /// ng__idmap_restart shrank the window, which the next reserve grows back to what it needs.
  size_t used;
  uint32_t gen; ///< the stamp of occupied slots; 0 only before the first ng__idmap_clear
} ng_idmap;

/// What ng__idmap_add() reads, copied out of the table so that stores to the id list do not make
/// the compiler reload it. Valid until the next ng__idmap_reserve() or ng__idmap_clear().
typedef struct {
  ng_idmap_slot *slot;
  size_t mask;
  uint32_t gen;
} ng_idmap_view;

/// The home slot of `key` in a table of mask + 1 slots (also a hash for other tables of ids).
static inline size_t ng__idmap_hash(int64_t key, size_t mask) {
  uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ULL;
  return (size_t)(h ^ (h >> 32)) & mask;
}

/// Empties the table (a new generation); call it before the first use too.
static inline void ng__idmap_clear(ng_idmap *m) {
  if (NG_UNLIKELY(++m->gen == 0)) {
    if (m->slot)
      memset(m->slot, 0, m->cap * sizeof *m->slot);
    m->gen = 1;
  }
}

/// Empties the table, as ng__idmap_clear, and shrinks the slots in use to none, so that the next
/// use works within the slots it reserves, not within the whole allocation, which stays: a small
/// use after a large one then probes a working set of its own size (serving's receptive fields,
/// whose sizes vary by orders of magnitude from one request to the next). ng__idmap_reserve
/// before adding.
static inline void ng__idmap_restart(ng_idmap *m) {
  ng__idmap_clear(m);
  m->used = 0;
}

/// Makes room for `nodes` distinct ids in all at load <= 1/2 (the allocation never shrinks).
/// Growing re-inserts the `n` ids added since the last clear, ids[0, n) (ids[i] has local index
/// i). NG_ERR_NOMEM names `what`.
ng_status ng__idmap_reserve(ng_idmap *m, size_t nodes, const int64_t *ids, int32_t n,
                            const char *what);

/// Frees the slots; the table is then as zero-initialized. NULL accepted.
void ng__idmap_free(ng_idmap *m);

/// The bytes the table holds.
static inline size_t ng__idmap_bytes(const ng_idmap *m) {
  return m->cap * sizeof(ng_idmap_slot);
}

static inline ng_idmap_view ng__idmap_view(const ng_idmap *m) {
  return (ng_idmap_view){m->slot, m->used - 1, m->gen};
}

/// The local index of `key`; a new key gets index *n, is written to ids[*n] and *n grows by
/// one. The table must have room (ng__idmap_reserve) for *n + 1 ids.
static inline int32_t ng__idmap_add(ng_idmap_view v, int64_t key, int64_t *ids, int32_t *n) {
  size_t h = ng__idmap_hash(key, v.mask);
  for (;;) {
    ng_idmap_slot *s = &v.slot[h];
    if (s->stamp != v.gen) {
      const int32_t id = (*n)++;
      *s = (ng_idmap_slot){.key = key, .val = id, .stamp = v.gen};
      ids[id] = key;
      return id;
    }
    if (s->key == key)
      return s->val;
    h = (h + 1) & v.mask;
  }
}

/// The local index of `key`, or -1 when the table does not hold it.
static inline int32_t ng__idmap_find(ng_idmap_view v, int64_t key) {
  if (!v.slot)
    return -1;
  for (size_t h = ng__idmap_hash(key, v.mask);; h = (h + 1) & v.mask) {
    const ng_idmap_slot *s = &v.slot[h];
    if (s->stamp != v.gen)
      return -1;
    if (s->key == key)
      return s->val;
  }
}

/// Asks for the home slot of `key` in the cache, ahead of its ng__idmap_add().
static inline void ng__idmap_prefetch(ng_idmap_view v, int64_t key) {
  __builtin_prefetch(&v.slot[ng__idmap_hash(key, v.mask)]);
}

#endif /* NG_IDMAP_H */
