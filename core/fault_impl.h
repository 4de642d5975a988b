/* Fault injection for tests (docs/faults.md): hooks that make core's allocator, the backend
 * interface's memory ops and the worker pool's pinning fail on demand, so that every error path
 * can be exercised on the CPU. Off by default; an unarmed hook costs one atomic load (acquire).
 * Arm and disarm them while no training runs (the hooks' settings are not meant to change under
 * running threads; their counters are atomic, so threads that hit them may race freely). */
#ifndef NG_FAULT_IMPL_H
#define NG_FAULT_IMPL_H

#include "core_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Makes core's allocator (ng__malloc, ng__calloc, ng__host_reserve, ng__aligned_alloc,
/// ng__big_alloc) fail as if memory had run out: the `nth` allocation from now (1 = the next)
/// whose `what` contains `match` (NULL or "": any) fails with NG_ERR_NOMEM and its usual message
/// naming `what`, followed by " [injected]"; with `sticky`, every matching allocation after it
/// fails too. `match` is copied (at most 63 characters). nth <= 0 disarms.
void ng__fault_alloc(int64_t nth, const char *match, bool sticky);
/// Allocations failed by injection since the last ng__fault_alloc().
int64_t ng__fault_alloc_fired(void);
/// Whether core's allocator must fail this allocation of `what` (called by the allocator).
bool ng__fault_alloc_hit(const char *what);

/// The backend ops whose failures ng__fault_backend() injects.
typedef enum {
  NG_FAULT_ALLOC = 0,         ///< alloc: device memory (the hot tier, model buffers)
  NG_FAULT_HOST_ALLOC = 1,    ///< host_alloc: pinned staging memory
  NG_FAULT_HOST_REGISTER = 2, ///< host_register: page-locking the zero-copy feature rows
  NG_FAULT_SAMPLER_RUN = 3,   ///< sampler_run: the device sampler (bytes: 0 per call)
  NG_FAULT_BACKEND_OPS = 4
} ng_fault_op;

/// Makes the checked front (core/backend_check.c) refuse `op` on every backend with
/// NG_ERR_NOMEM, without calling the backend: the `nth` call from now (1 = the next; 0: no
/// such limit) and, with `sticky`, every call after it; and any call that would take the bytes
/// asked of `op` since this call above `max_bytes` (0: no limit; refused calls do not count,
/// frees are not subtracted). nth 0 and max_bytes 0 disarm `op`.
void ng__fault_backend(ng_fault_op op, int64_t nth, bool sticky, size_t max_bytes);
/// Calls of `op` refused by injection since the last ng__fault_backend() for it.
int64_t ng__fault_backend_fired(ng_fault_op op);
/// Whether the front must refuse this call of `op` for `bytes` (called by the front).
bool ng__fault_backend_hit(ng_fault_op op, size_t bytes);

/// When true, every attempt of the worker pool to pin a thread to a core (workers and the device
/// thread) fails as a container that forbids binding makes it fail (sched/pool.c).
void ng__fault_pin(bool refuse);
/// Whether pinning must fail (called by the pool).
bool ng__fault_pin_hit(void);

/// Disarms every hook.
void ng__fault_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* NG_FAULT_IMPL_H */
