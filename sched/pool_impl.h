/* The worker pool of the hybrid runtime (sched/pool.c, docs/scheduler.md): pinned worker
 * threads placed with hwloc near the device, the device thread's core, and the cpu lists a
 * data-parallel run's ranks share. Not installed. Its waits are on condition variables (never
 * spins), and a closed pool wakes all its waiters, so a failure anywhere stops the pipeline
 * promptly. */
#ifndef NG_POOL_IMPL_H
#define NG_POOL_IMPL_H

#include "core_impl.h"

#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Placement of a pool. Strings are borrowed for the duration of ng__pool_start() only.
typedef struct {
  size_t size; ///< sizeof(ng_pool_opts)
  /// Worker threads to start; 0 means one per usable core, minus the device core when reserved.
  int workers;
  /// OS cpu indices the pool may use, as "0-3,8,10-11"; NULL or "" means every core this process
  /// may run on (cgroup limits and the affinity the process started with, e.g. from taskset).
  const char *cpuset;
  /// PCI id of the GPU the pool feeds ("0000:17:00.0", "00000000:17:00.0" or "17:00.0"); when
  /// hwloc finds it, the pool keeps to the cores of its package/NUMA node. NULL for none.
  const char *pci_bus_id;
  /// Keep the first chosen core for the device thread (ng__pool_bind_device_thread()).
  bool reserve_device_core;
  /// Bind each worker (and the device thread) to its core. Failure to bind is recorded, not fatal.
  bool bind;
} ng_pool_opts;

#define NG_POOL_OPTS_INIT                                                                          \
  { sizeof(ng_pool_opts), 0, NULL, NULL, true, true }

typedef struct ng_pool ng_pool;

/// Chooses cores and starts `o->workers` threads; worker w binds itself to its core (when
/// `o->bind`) and then calls `fn(ctx, w)` once. Worker cores are distinct while there are enough
/// cores, physical cores before their hyperthreads; with more workers than cores they wrap around
/// and ng__pool_oversubscribed() says so. `*out` is set before any worker calls `fn`, so `fn` may
/// reach the pool through `ctx`. `ctx` is borrowed until ng__pool_join(). Returns
/// NG_ERR_INVALID_ARG for a malformed or unusable cpuset or PCI id or a negative worker count,
/// NG_ERR_UNSUPPORTED when hwloc cannot read the machine, or NG_ERR_NOMEM, also when a thread
/// cannot be created (no worker has called `fn` then: threads wait behind a gate that opens only
/// once all of them exist).
/// The cores this process may use that are nearest PCI device `pci_bus_id` (its NUMA node or
/// package, as hwloc sees it; all usable cores when it is NULL, "" or not found), as a list
/// ("0-15,32-47") of at most `cap` characters.
ng_status ng__cpus_near(char *list, size_t cap, const char *pci_bus_id);
/// Slice `k` of `m` of the cpu list `list`, by whole cores in logical order (PUs when the list
/// has fewer cores than slices), as a list: how the ranks of one host split their cores.
ng_status ng__cpus_slice(char *out, size_t cap, const char *list, int k, int m);

ng_status ng__pool_start(ng_pool **out, const ng_pool_opts *o, void (*fn)(void *ctx, int worker),
                         void *ctx);
/// Loads the machine's topology, which the process's first ng__pool_start would (40-60 ms on
/// the H100 machine: hwloc scans every PCI device), on a thread of its own while the caller
/// sets other things up; ng__pool_prefetch_join waits for it (and accepts a prefetch that never
/// started). Best effort: a failure is left for ng__pool_start to report.
typedef struct {
  pthread_t thread;
  bool running;
} ng_pool_prefetch;
void ng__pool_prefetch(ng_pool_prefetch *p);
void ng__pool_prefetch_join(ng_pool_prefetch *p);
/// Waits for every worker's `fn` to return and frees the pool (accepts NULL). The pool's other
/// accessors must not be called afterwards.
void ng__pool_join(ng_pool *p);
/// Number of worker threads.
int ng__pool_workers(const ng_pool *p);
/// OS index of worker w's core, or -1 when w is out of range.
int ng__pool_core(const ng_pool *p, int w);
/// Whether worker w bound itself to its core. False while it has not tried yet, when binding is
/// off, or when the system refused (containers may forbid it).
bool ng__pool_bound(const ng_pool *p, int w);
/// OS index of the core reserved for the device thread, or -1 when none is reserved.
int ng__pool_device_core(const ng_pool *p);
/// Whether some worker shares its core with another worker or with the device thread.
bool ng__pool_oversubscribed(const ng_pool *p);
/// Whether the pool's cores were chosen near the PCI device of ng_pool_opts::pci_bus_id.
bool ng__pool_near_pci(const ng_pool *p);
/// Binds the calling thread to the device core. Returns NG_OK doing nothing when the pool does
/// not bind or reserves no core, NG_ERR_UNSUPPORTED (with the system's reason) when the system
/// refuses; callers may carry on unbound after that error.
ng_status ng__pool_bind_device_thread(const ng_pool *p);
/// One line for logs, e.g. "15 workers on cores 1-15, device thread on core 0, near PCI
/// 0000:17:00.0". Owned by the pool.
const char *ng__pool_describe(const ng_pool *p);

/// Parses a cpu list such as "0-3,8,10-11" into a sorted array of distinct OS indices in
/// `*out` (malloc'd, caller frees) of `*n` entries. NG_ERR_INVALID_ARG names the offending part.
ng_status ng__cpuset_parse(int **out, int *n, const char *list);

#ifdef __cplusplus
}
#endif

#endif /* NG_POOL_IMPL_H */
