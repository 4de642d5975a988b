/* Fault injection hooks (fault_impl.h, docs/faults.md). Each hook is armed by a flag that the
 * hot path reads first (acquire, a plain load on x86), so that an unarmed hook costs one load; the
 * counters behind it are atomic because worker threads allocate concurrently. */
#include "fault_impl.h"

#include <stdatomic.h>
#include <string.h>

typedef struct {
  atomic_bool armed;
  atomic_int_least64_t left;  /* matching calls until the one that fails (1: the next) */
  atomic_int_least64_t fired; /* failures injected */
  atomic_size_t used;         /* bytes granted since arming (backend ops) */
  bool counting;              /* nth > 0 was given */
  bool sticky;
  size_t max_bytes;
} fault;

static fault alloc_fault;
static char alloc_match[64];
static fault backend_fault[NG_FAULT_BACKEND_OPS];
static atomic_bool pin_fault;

static void arm(fault *f, int64_t nth, bool sticky, size_t max_bytes) {
  atomic_store(&f->armed, false);
  f->counting = nth > 0;
  f->sticky = sticky;
  f->max_bytes = max_bytes;
  atomic_store(&f->left, nth);
  atomic_store(&f->fired, 0);
  atomic_store(&f->used, 0);
  atomic_store(&f->armed, nth > 0 || max_bytes > 0);
}

/* Counts one matching call and says whether it fails. Calls past the nth drive `left` below 0
 * (one per call, so it never wraps in practice); they fail when the fault is sticky. */
static bool hit(fault *f, size_t bytes) {
  if (NG_LIKELY(!atomic_load_explicit(&f->armed, memory_order_acquire)))
    return false;
  bool fail = false;
  if (f->counting) {
    const int64_t left = atomic_fetch_sub(&f->left, 1);
    fail = left == 1 || (left < 1 && f->sticky);
  }
  if (!fail && f->max_bytes > 0) {
    const size_t used = atomic_fetch_add(&f->used, bytes) + bytes;
    if (used > f->max_bytes || used < bytes) {
      atomic_fetch_sub(&f->used, bytes);
      fail = true;
    }
  }
  if (fail)
    atomic_fetch_add(&f->fired, 1);
  return fail;
}

void ng__fault_alloc(int64_t nth, const char *match, bool sticky) {
  atomic_store(&alloc_fault.armed, false);
  ng__strlcpy(alloc_match, match ? match : "", sizeof alloc_match);
  arm(&alloc_fault, nth, sticky, 0);
}

int64_t ng__fault_alloc_fired(void) {
  return atomic_load(&alloc_fault.fired);
}

bool ng__fault_alloc_hit(const char *what) {
  if (NG_LIKELY(!atomic_load_explicit(&alloc_fault.armed, memory_order_acquire)))
    return false;
  if (alloc_match[0] && (!what || !strstr(what, alloc_match)))
    return false;
  return hit(&alloc_fault, 0);
}

void ng__fault_backend(ng_fault_op op, int64_t nth, bool sticky, size_t max_bytes) {
  if ((unsigned)op < NG_FAULT_BACKEND_OPS)
    arm(&backend_fault[op], nth, sticky, max_bytes);
}

int64_t ng__fault_backend_fired(ng_fault_op op) {
  return (unsigned)op < NG_FAULT_BACKEND_OPS ? atomic_load(&backend_fault[op].fired) : 0;
}

bool ng__fault_backend_hit(ng_fault_op op, size_t bytes) {
  return hit(&backend_fault[op], bytes);
}

void ng__fault_pin(bool refuse) {
  atomic_store(&pin_fault, refuse);
}

bool ng__fault_pin_hit(void) {
  return atomic_load_explicit(&pin_fault, memory_order_acquire);
}

void ng__fault_reset(void) {
  ng__fault_alloc(0, NULL, false);
  for (int op = 0; op < NG_FAULT_BACKEND_OPS; op++)
    ng__fault_backend((ng_fault_op)op, 0, false, 0);
  ng__fault_pin(false);
}
