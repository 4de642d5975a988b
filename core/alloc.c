/* Allocation helpers that report failures through ng_last_error(). */
#include "core_impl.h"
#include "fault_impl.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { NG_ALIGN = 64 };

/* What an injected failure (fault_impl.h) appends to the usual message. */
#define INJECTED(injected) ((injected) ? " [injected]" : "")

void *ng__malloc(size_t bytes, const char *what) {
  const bool injected = ng__fault_alloc_hit(what);
  void *p = injected ? NULL : malloc(bytes ? bytes : 1);
  if (!p)
    ng__err(NG_ERR_NOMEM, "out of memory allocating %zu bytes for %s%s", bytes, what,
            INJECTED(injected));
  return p;
}

void *ng__calloc(size_t count, size_t elem_bytes, const char *what) {
  const bool injected = ng__fault_alloc_hit(what);
  void *p = injected ? NULL : calloc(count ? count : 1, elem_bytes ? elem_bytes : 1);
  if (!p)
    ng__err(NG_ERR_NOMEM, "out of memory allocating %zu x %zu bytes for %s%s", count, elem_bytes,
            what, INJECTED(injected));
  return p;
}

ng_status ng__host_reserve(void **p, size_t *cap, size_t bytes, const char *what) {
  if (bytes <= *cap)
    return NG_OK;
  const size_t want = NG_MAX(bytes, *cap + *cap / 2);
  const bool injected = ng__fault_alloc_hit(what);
  void *q = injected ? NULL : realloc(*p, want);
  if (!q)
    return ng__err(NG_ERR_NOMEM, "out of memory growing %s to %zu bytes%s", what, want,
                   INJECTED(injected));
  *p = q;
  *cap = want;
  return NG_OK;
}

void *ng__aligned_alloc(size_t bytes, const char *what) {
  size_t rounded = (bytes + NG_ALIGN - 1) / NG_ALIGN * NG_ALIGN;
  if (rounded < bytes || rounded == 0)
    rounded = NG_ALIGN;
  const bool injected = ng__fault_alloc_hit(what);
  void *p = injected ? NULL : aligned_alloc(NG_ALIGN, rounded);
  if (!p)
    ng__err(NG_ERR_NOMEM, "out of memory allocating %zu aligned bytes for %s%s", bytes, what,
            INJECTED(injected));
  return p;
}

void ng__aligned_free(void *ptr) {
  free(ptr);
}

void *ng__big_alloc(size_t bytes, const char *what) {
  if (bytes == 0)
    bytes = 1;
  const bool injected = ng__fault_alloc_hit(what);
  void *p = injected
                ? MAP_FAILED
                : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    ng__err(NG_ERR_NOMEM, "out of memory mapping %zu bytes for %s%s", bytes, what,
            INJECTED(injected));
    return NULL;
  }
#ifdef MADV_HUGEPAGE
  (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

void ng__drop_pages(const void *p, size_t bytes) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t lo = ((uintptr_t)p + page - 1) / page * page;
  const uintptr_t hi = ((uintptr_t)p + bytes) / page * page;
  if (hi > lo)
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void ng__big_free(void *ptr, size_t bytes) {
  if (ptr)
    munmap(ptr, bytes ? bytes : 1);
}

int64_t ng__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double ng__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ng__progress_init(ng_progress *p, ng_progress_fn fn, void *ctx) {
  p->fn = fn;
  p->ctx = ctx;
  p->last = 0.0;
  p->interval = 0.25;
}

ng_status ng__progress(ng_progress *p, const char *phase, double done, double total, bool force) {
  if (!p || !p->fn)
    return NG_OK;
  double now = ng__now();
  if (!force && now - p->last < p->interval)
    return NG_OK;
  p->last = now;
  if (p->fn(p->ctx, phase, done, total) != 0)
    return ng__err(NG_ERR_INTERRUPTED, "%s: stopped by the caller", phase);
  return NG_OK;
}
