/* Worker pool: chooses cores with hwloc (near the GPU's PCI device when it is known, physical
 * cores before hyperthreads), starts one thread per worker behind a gate, and lets each bind
 * itself to its core. */
#include "pool_impl.h"

#include "fault_impl.h"

#include <hwloc.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* More workers than this is certainly a mistake in the caller (a parsed negative or huge number),
 * not a machine. */
enum { NG_POOL_MAX_WORKERS = 1 << 16, NG_CPU_MAX = 1 << 20 };

enum { GATE_WAIT, GATE_GO, GATE_ABORT };

typedef struct {
  ng_pool *pool;
  int index;
} worker_arg;

struct ng_pool {
  hwloc_topology_t topo; /* machine_topo, shared */
  int n_workers;
  int *cores;           /* [n_workers] OS index of each worker's core */
  hwloc_bitmap_t *sets; /* [n_workers] the single-PU set each worker binds to */
  bool *bound;          /* [n_workers] written by worker w, read with atomics */
  hwloc_bitmap_t device_set;
  int device_core;
  bool bind, oversubscribed, near_pci;
  void (*fn)(void *ctx, int worker);
  void *ctx;
  pthread_t *threads;
  worker_arg *args;
  int started; /* threads created */
  int tried;   /* workers that have tried to bind (under gate_mu) */
  pthread_mutex_t gate_mu;
  pthread_cond_t gate_cv;
  int gate;
  char desc[512];
};

/* ---- parsing ---- */

static bool parse_uint(const char **p, long *out) {
  const char *s = *p;
  long v = 0;
  if (*s < '0' || *s > '9')
    return false;
  while (*s >= '0' && *s <= '9') {
    v = v * 10 + (*s - '0');
    if (v >= NG_CPU_MAX)
      return false;
    s++;
  }
  *p = s;
  *out = v;
  return true;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

ng_status ng__cpuset_parse(int **out, int *n, const char *list) {
  *out = NULL;
  *n = 0;
  if (!list || !*list)
    return ng__err(NG_ERR_INVALID_ARG, "cpuset: empty list; give OS cpu indices as \"0-3,8\"");
  /* Two passes: count the indices (bounded by NG_CPU_MAX per range), then fill. */
  size_t total = 0;
  for (int pass = 0; pass < 2; pass++) {
    const char *s = list;
    size_t k = 0;
    for (;;) {
      const char *item = s;
      long lo, hi;
      if (!parse_uint(&s, &lo))
        goto bad;
      hi = lo;
      if (*s == '-') {
        s++;
        if (!parse_uint(&s, &hi) || hi < lo)
          goto bad;
      }
      if (*s != ',' && *s != '\0')
        goto bad;
      for (long c = lo; c <= hi; c++) {
        if (pass == 1)
          (*out)[k] = (int)c;
        k++;
      }
      if (*s == '\0')
        break;
      s++;
      continue;
    bad:;
      size_t len = strcspn(item, ",");
      if (pass == 1) {
        free(*out);
        *out = NULL;
      }
      return ng__err(NG_ERR_INVALID_ARG,
                     "cpuset \"%s\": \"%.*s\" is not a cpu index or range; write OS cpu "
                     "indices as \"0-3,8,10-11\" (ranges ascending, below %d)",
                     list, (int)len, item, NG_CPU_MAX);
    }
    if (pass == 0) {
      total = k;
      *out = ng__malloc(total * sizeof **out, "cpuset list");
      if (!*out)
        return NG_ERR_NOMEM;
    }
  }
  qsort(*out, total, sizeof **out, cmp_int);
  size_t m = 0;
  for (size_t i = 0; i < total; i++)
    if (m == 0 || (*out)[m - 1] != (*out)[i])
      (*out)[m++] = (*out)[i];
  *n = (int)m;
  return NG_OK;
}

static bool parse_hex(const char **p, int max_digits, unsigned *out) {
  const char *s = *p;
  unsigned v = 0;
  int d = 0;
  for (;; s++, d++) {
    unsigned x;
    if (*s >= '0' && *s <= '9')
      x = (unsigned)(*s - '0');
    else if (*s >= 'a' && *s <= 'f')
      x = (unsigned)(*s - 'a' + 10);
    else if (*s >= 'A' && *s <= 'F')
      x = (unsigned)(*s - 'A' + 10);
    else
      break;
    if (d == max_digits)
      return false;
    v = v * 16 + x;
  }
  if (d == 0)
    return false;
  *p = s;
  *out = v;
  return true;
}

/* "[domain:]bus:dev.func" in hex, as CUDA ("0000:17:00.0") and nvidia-smi ("00000000:17:00.0")
 * print it. */
static ng_status parse_pci(const char *id, unsigned *domain, unsigned *bus, unsigned *dev,
                           unsigned *func) {
  const char *s = id;
  unsigned a = 0, b = 0;
  *domain = *bus = *dev = *func = 0;
  bool ok = parse_hex(&s, 8, &a) && *s++ == ':' && parse_hex(&s, 4, &b);
  if (ok && *s == ':') {
    s++;
    *domain = a;
    *bus = b;
    ok = parse_hex(&s, 2, dev);
  } else {
    *domain = 0;
    *bus = a;
    *dev = b;
  }
  ok = ok && *s++ == '.' && parse_hex(&s, 1, func) && *s == '\0';
  if (!ok || *bus > 0xff || *dev > 0x1f || *func > 7)
    return ng__err(NG_ERR_INVALID_ARG,
                   "PCI bus id \"%s\" is malformed; give it as CUDA prints it, e.g. "
                   "\"0000:17:00.0\" (nvidia-smi --query-gpu=pci.bus_id)",
                   id);
  return NG_OK;
}

/* ---- the cores a process may use ---- */

/* The affinity the process had when the first pool started. Later pools use it rather than the
 * current one: binding the device thread (often the main thread) to one core must not shrink the
 * next pool to that core. Never freed: one bitmap for the process's life. */
static pthread_mutex_t initial_mu = PTHREAD_MUTEX_INITIALIZER;
static hwloc_bitmap_t initial_affinity;

/* The machine's topology, loaded by the first pool and kept for the process's life like the
 * first affinity: loading it scans every PCI device (7 ms on a 2-core VM), and a runtime may
 * start several pools (after a failure or a load). Pools only read it, which hwloc allows from
 * several threads. */
static hwloc_topology_t machine_topo;

static ng_status machine_topology(hwloc_topology_t *out) {
  ng_status st = NG_OK;
  pthread_mutex_lock(&initial_mu);
  if (!machine_topo) {
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
      st = ng__err(NG_ERR_NOMEM, "hwloc: cannot initialise a topology");
      goto unlock;
    }
    /* GPUs, NICs and their bridges, so that a PCI id leads to the cores near it. */
    if (hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
        hwloc_topology_load(t) != 0) {
      st = ng__err_errno(NG_ERR_UNSUPPORTED, errno, "hwloc: cannot load the machine's topology");
      hwloc_topology_destroy(t);
      goto unlock;
    }
    machine_topo = t;
  }
  *out = machine_topo;
unlock:
  pthread_mutex_unlock(&initial_mu);
  return st;
}

static void *prefetch_main(void *arg) {
  (void)arg;
  hwloc_topology_t t;
  (void)machine_topology(&t);
  return NULL;
}

void ng__pool_prefetch(ng_pool_prefetch *p) {
  p->running = pthread_create(&p->thread, NULL, prefetch_main, NULL) == 0;
}

void ng__pool_prefetch_join(ng_pool_prefetch *p) {
  if (p->running)
    (void)pthread_join(p->thread, NULL);
  p->running = false;
}

static ng_status usable_cpus(hwloc_topology_t topo, hwloc_bitmap_t out) {
  ng_status st = NG_OK;
  pthread_mutex_lock(&initial_mu);
  if (!initial_affinity) {
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    if (!b) {
      st = ng__err(NG_ERR_NOMEM, "out of memory allocating a cpu set");
      goto unlock;
    }
    /* Systems that cannot report an affinity impose none. */
    if (hwloc_get_cpubind(topo, b, HWLOC_CPUBIND_THREAD) != 0 || hwloc_bitmap_iszero(b))
      hwloc_bitmap_fill(b);
    initial_affinity = b;
  }
  if (hwloc_bitmap_and(out, hwloc_topology_get_allowed_cpuset(topo), initial_affinity) != 0)
    st = ng__err(NG_ERR_NOMEM, "out of memory computing the usable cpu set");
  else if (hwloc_bitmap_iszero(out))
    hwloc_bitmap_copy(out, hwloc_topology_get_allowed_cpuset(topo));
unlock:
  pthread_mutex_unlock(&initial_mu);
  return st;
}

/* The PUs of `chosen` ordered so that the first PU of every core comes before the second PU of
 * any core: physical cores first, hyperthreads after them. Writes weight(chosen) indices. */
static ng_status order_pus(hwloc_topology_t topo, hwloc_const_bitmap_t chosen, int **out,
                           int *n_out) {
  int n = hwloc_bitmap_weight(chosen);
  int *os = ng__malloc((size_t)n * sizeof *os, "core order");
  int *rank = ng__malloc((size_t)n * sizeof *rank, "core order");
  int *perm = ng__malloc((size_t)n * sizeof *perm, "core order");
  if (!os || !rank || !perm) {
    free(os);
    free(rank);
    free(perm);
    return NG_ERR_NOMEM;
  }
  int k = 0;
  hwloc_obj_t pu = NULL;
  while ((pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, pu)) != NULL && k < n) {
    if (!hwloc_bitmap_isset(chosen, pu->os_index))
      continue;
    /* Rank of this PU among the chosen PUs of its core, in logical order. */
    int r = 0;
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
    if (core) {
      hwloc_obj_t sib = NULL;
      while ((sib = hwloc_get_next_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU,
                                                             sib)) != NULL &&
             sib != pu)
        r += hwloc_bitmap_isset(chosen, sib->os_index);
    }
    os[k] = (int)pu->os_index;
    rank[k] = r;
    k++;
  }
  /* A stable counting pass per rank keeps the logical order of cores within a rank. */
  int m = 0;
  for (int r = 0; m < k; r++)
    for (int i = 0; i < k; i++)
      if (rank[i] == r)
        perm[m++] = os[i];
  free(os);
  free(rank);
  *out = perm;
  *n_out = k;
  return NG_OK;
}

/* ---- the share of the cores of one rank among several (docs/distributed.md) ---- */

ng_status ng__cpus_near(char *list, size_t cap, const char *pci_bus_id) {
  hwloc_topology_t topo;
  NG_CHECK(machine_topology(&topo));
  hwloc_bitmap_t usable = hwloc_bitmap_alloc(), near_set = hwloc_bitmap_alloc();
  ng_status st = NG_OK;
  if (!usable || !near_set) {
    st = ng__err(NG_ERR_NOMEM, "out of memory allocating cpu sets");
    goto done;
  }
  NG_CHECK_GOTO(st, usable_cpus(topo, usable), done);
  hwloc_bitmap_copy(near_set, usable);
  if (pci_bus_id && *pci_bus_id) {
    unsigned dom, bus, dev, fn;
    NG_CHECK_GOTO(st, parse_pci(pci_bus_id, &dom, &bus, &dev, &fn), done);
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topo, dom, bus, dev, fn);
    hwloc_obj_t near = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : NULL;
    if (near && near->cpuset && hwloc_bitmap_intersects(near->cpuset, usable))
      hwloc_bitmap_and(near_set, usable, near->cpuset);
  }
  if (hwloc_bitmap_list_snprintf(list, cap, near_set) >= (int)cap)
    st = ng__err(NG_ERR_UNSUPPORTED, "the cpu list near %s is longer than %zu characters",
                 pci_bus_id ? pci_bus_id : "the process", cap);
done:
  hwloc_bitmap_free(near_set);
  hwloc_bitmap_free(usable);
  return st;
}

ng_status ng__cpus_slice(char *out, size_t cap, const char *list, int k, int m) {
  if (m < 1 || k < 0 || k >= m)
    return ng__err(NG_ERR_INVALID_ARG, "cpu slice %d of %d", k, m);
  hwloc_topology_t topo;
  NG_CHECK(machine_topology(&topo));
  hwloc_bitmap_t set = hwloc_bitmap_alloc(), mine = hwloc_bitmap_alloc(),
                 pus = hwloc_bitmap_alloc();
  ng_status st = NG_OK;
  if (!set || !mine || !pus) {
    st = ng__err(NG_ERR_NOMEM, "out of memory allocating cpu sets");
    goto done;
  }
  if (hwloc_bitmap_list_sscanf(set, list) != 0) {
    st = ng__err(NG_ERR_INVALID_ARG, "cpu list \"%s\" is malformed", list);
    goto done;
  }
  /* Whole cores: core c (in logical order, among those with a PU in the list) goes to slice
   * floor(c * m / cores), so that two ranks never share a core's hyperthreads. */
  int cores = 0;
  hwloc_obj_t core = NULL;
  while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) != NULL)
    cores += hwloc_bitmap_intersects(core->cpuset, set);
  if (cores < m) { /* fewer cores than ranks (or no core objects): slices of PUs */
    int n = hwloc_bitmap_weight(set), i = 0, pu;
    hwloc_bitmap_foreach_begin(pu, set) {
      if ((int64_t)i * m / NG_MAX(n, 1) == k || n < m)
        hwloc_bitmap_set(mine, (unsigned)pu);
      i++;
    }
    hwloc_bitmap_foreach_end();
  } else {
    int c = 0;
    core = NULL;
    while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) != NULL) {
      if (!hwloc_bitmap_intersects(core->cpuset, set))
        continue;
      if ((int64_t)c * m / cores == k) {
        hwloc_bitmap_and(pus, core->cpuset, set);
        hwloc_bitmap_or(mine, mine, pus);
      }
      c++;
    }
  }
  if (hwloc_bitmap_list_snprintf(out, cap, mine) >= (int)cap)
    st = ng__err(NG_ERR_UNSUPPORTED, "a cpu list is longer than %zu characters", cap);
done:
  hwloc_bitmap_free(pus);
  hwloc_bitmap_free(mine);
  hwloc_bitmap_free(set);
  return st;
}

/* ---- threads ---- */

/* Binds the calling thread to `set`; false when the system (or an injected fault) refuses. */
static bool bind_thread(const ng_pool *p, hwloc_const_bitmap_t set) {
  if (ng__fault_pin_hit()) {
    errno = EPERM;
    return false;
  }
  return hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_THREAD) == 0;
}

/* A worker binds itself before it waits at the gate, so that the pool knows, before it starts
 * any work, which workers run unbound (its description says so). */
static void *worker_main(void *arg) {
  worker_arg *a = arg;
  ng_pool *p = a->pool;
  char name[16];
  snprintf(name, sizeof name, "ng-worker-%d", a->index);
  (void)pthread_setname_np(pthread_self(), name); /* as top -H and /proc list it */
  if (p->bind && bind_thread(p, p->sets[a->index]))
    __atomic_store_n(&p->bound[a->index], true, __ATOMIC_RELEASE);
  pthread_mutex_lock(&p->gate_mu);
  p->tried++;
  pthread_cond_broadcast(&p->gate_cv);
  while (p->gate == GATE_WAIT)
    pthread_cond_wait(&p->gate_cv, &p->gate_mu);
  int gate = p->gate;
  pthread_mutex_unlock(&p->gate_mu);
  if (gate == GATE_ABORT)
    return NULL;
  p->fn(p->ctx, a->index);
  return NULL;
}

/* Waits until every started worker has tried to bind, and adds to the description how many
 * could not (they run unbound: the documented fallback, docs/scheduler.md). */
static void note_unbound(ng_pool *p) {
  if (!p->bind)
    return;
  pthread_mutex_lock(&p->gate_mu);
  while (p->tried < p->started)
    pthread_cond_wait(&p->gate_cv, &p->gate_mu);
  pthread_mutex_unlock(&p->gate_mu);
  int unbound = 0;
  for (int w = 0; w < p->n_workers; w++)
    unbound += !__atomic_load_n(&p->bound[w], __ATOMIC_ACQUIRE);
  if (unbound > 0) {
    size_t len = strlen(p->desc);
    snprintf(p->desc + len, sizeof p->desc - len, ", %d of %d worker%s unbound (binding refused)",
             unbound, p->n_workers, p->n_workers == 1 ? "" : "s");
  }
}

static void open_gate(ng_pool *p, int state) {
  pthread_mutex_lock(&p->gate_mu);
  p->gate = state;
  pthread_cond_broadcast(&p->gate_cv);
  pthread_mutex_unlock(&p->gate_mu);
}

static void pool_free(ng_pool *p) {
  if (!p)
    return;
  if (p->sets)
    for (int w = 0; w < p->n_workers; w++)
      hwloc_bitmap_free(p->sets[w]);
  hwloc_bitmap_free(p->device_set);
  pthread_cond_destroy(&p->gate_cv);
  pthread_mutex_destroy(&p->gate_mu);
  free(p->sets);
  free(p->cores);
  free(p->bound);
  free(p->threads);
  free(p->args);
  free(p);
}

static void describe(ng_pool *p, const char *pci_id, bool pci_found) {
  char list[256] = "";
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (set) {
    for (int w = 0; w < p->n_workers; w++)
      hwloc_bitmap_set(set, (unsigned)p->cores[w]);
    hwloc_bitmap_list_snprintf(list, sizeof list, set);
    hwloc_bitmap_free(set);
  }
  size_t cap = sizeof p->desc, len = 0;
#define ADD(...)                                                                                   \
  do {                                                                                             \
    int add_ = snprintf(p->desc + len, cap - len, __VA_ARGS__);                                    \
    if (add_ > 0)                                                                                  \
      len = NG_MIN(cap - 1, len + (size_t)add_);                                                   \
  } while (0)
  ADD("%d worker%s on core%s %s", p->n_workers, p->n_workers == 1 ? "" : "s",
      strpbrk(list, ",-") ? "s" : "", list);
  if (p->device_core >= 0)
    ADD(", device thread on core %d", p->device_core);
  if (pci_id && p->near_pci)
    ADD(", near PCI %s", pci_id);
  else if (pci_id && pci_found)
    ADD(", PCI %s is far from every usable core", pci_id);
  else if (pci_id)
    ADD(", PCI %s not found by hwloc", pci_id);
  if (p->oversubscribed)
    ADD(", oversubscribed");
  if (!p->bind)
    ADD(", unbound");
#undef ADD
}

/* Chooses every worker's core and the device core. */
static ng_status place(ng_pool *p, const ng_pool_opts *o) {
  ng_status st = NG_OK;
  hwloc_bitmap_t usable = hwloc_bitmap_alloc(), base = hwloc_bitmap_alloc(),
                 chosen = hwloc_bitmap_alloc();
  int *listed = NULL, n_listed = 0, *order = NULL, n_order = 0;
  char pci_norm[32] = "";
  bool pci_found = false;
  if (!usable || !base || !chosen) {
    st = ng__err(NG_ERR_NOMEM, "out of memory allocating cpu sets");
    goto done;
  }
  NG_CHECK_GOTO(st, usable_cpus(p->topo, usable), done);

  if (o->cpuset && *o->cpuset) {
    NG_CHECK_GOTO(st, ng__cpuset_parse(&listed, &n_listed, o->cpuset), done);
    for (int i = 0; i < n_listed; i++) {
      if (!hwloc_bitmap_isset(usable, (unsigned)listed[i])) {
        char avail[256];
        hwloc_bitmap_list_snprintf(avail, sizeof avail, usable);
        st = ng__err(NG_ERR_INVALID_ARG,
                     "cpuset \"%s\": cpu %d is not usable by this process (usable: %s); list "
                     "only those",
                     o->cpuset, listed[i], avail);
        goto done;
      }
      hwloc_bitmap_set(base, (unsigned)listed[i]);
    }
  } else {
    hwloc_bitmap_copy(base, usable);
  }
  hwloc_bitmap_copy(chosen, base);

  if (o->pci_bus_id && *o->pci_bus_id) {
    unsigned dom, bus, dev, fn;
    NG_CHECK_GOTO(st, parse_pci(o->pci_bus_id, &dom, &bus, &dev, &fn), done);
    snprintf(pci_norm, sizeof pci_norm, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(p->topo, dom, bus, dev, fn);
    hwloc_obj_t near = pci ? hwloc_get_non_io_ancestor_obj(p->topo, pci) : NULL;
    pci_found = pci != NULL;
    if (near && near->cpuset && hwloc_bitmap_intersects(near->cpuset, base)) {
      hwloc_bitmap_and(chosen, base, near->cpuset);
      p->near_pci = true;
    }
  }

  NG_CHECK_GOTO(st, order_pus(p->topo, chosen, &order, &n_order), done);
  if (n_order == 0) {
    st = ng__err(NG_ERR_INVALID_ARG, "cpuset \"%s\": no usable core to run workers on",
                 o->cpuset ? o->cpuset : "");
    goto done;
  }
  int first_worker = 0;
  p->device_core = -1;
  if (o->reserve_device_core) {
    p->device_core = order[0];
    /* With one core the device thread and the workers have to share it. */
    first_worker = n_order > 1 ? 1 : 0;
    p->oversubscribed = n_order == 1;
  }
  int n_list = n_order - first_worker;
  p->n_workers = o->workers > 0 ? o->workers : n_list;
  p->oversubscribed = p->oversubscribed || p->n_workers > n_list;

  p->cores = ng__calloc((size_t)p->n_workers, sizeof *p->cores, "worker cores");
  p->sets = ng__calloc((size_t)p->n_workers, sizeof *p->sets, "worker cpu sets");
  p->bound = ng__calloc((size_t)p->n_workers, sizeof *p->bound, "worker binding flags");
  if (!p->cores || !p->sets || !p->bound) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int w = 0; w < p->n_workers; w++) {
    p->cores[w] = order[first_worker + w % n_list];
    p->sets[w] = hwloc_bitmap_alloc();
    if (!p->sets[w] || hwloc_bitmap_only(p->sets[w], (unsigned)p->cores[w]) != 0) {
      st = ng__err(NG_ERR_NOMEM, "out of memory allocating a cpu set");
      goto done;
    }
  }
  if (p->device_core >= 0) {
    p->device_set = hwloc_bitmap_alloc();
    if (!p->device_set || hwloc_bitmap_only(p->device_set, (unsigned)p->device_core) != 0) {
      st = ng__err(NG_ERR_NOMEM, "out of memory allocating a cpu set");
      goto done;
    }
  }
  describe(p, *pci_norm ? pci_norm : NULL, pci_found);
done:
  free(order);
  free(listed);
  hwloc_bitmap_free(chosen);
  hwloc_bitmap_free(base);
  hwloc_bitmap_free(usable);
  return st;
}

ng_status ng__pool_start(ng_pool **out, const ng_pool_opts *o, void (*fn)(void *ctx, int worker),
                         void *ctx) {
  *out = NULL;
  if (!o || o->size < sizeof *o || !fn)
    return ng__err(NG_ERR_INVALID_ARG, "worker pool: options (NG_POOL_OPTS_INIT) and a worker "
                                       "function are required");
  if (o->workers < 0 || o->workers > NG_POOL_MAX_WORKERS)
    return ng__err(NG_ERR_INVALID_ARG,
                   "worker pool: %d workers is out of range; give 0 (one per core) to %d",
                   o->workers, NG_POOL_MAX_WORKERS);
  ng_pool *p = ng__calloc(1, sizeof *p, "worker pool");
  if (!p)
    return NG_ERR_NOMEM;
  pthread_mutex_init(&p->gate_mu, NULL);
  pthread_cond_init(&p->gate_cv, NULL);
  p->gate = GATE_WAIT;
  p->bind = o->bind;
  p->fn = fn;
  p->ctx = ctx;
  p->device_core = -1;

  ng_status st = NG_OK;
  NG_CHECK_GOTO(st, machine_topology(&p->topo), fail);
  NG_CHECK_GOTO(st, place(p, o), fail);

  p->threads = ng__calloc((size_t)p->n_workers, sizeof *p->threads, "worker threads");
  p->args = ng__calloc((size_t)p->n_workers, sizeof *p->args, "worker threads");
  if (!p->threads || !p->args) {
    st = NG_ERR_NOMEM;
    goto fail;
  }
  /* Workers block asynchronous signals, so that a handler for SIGINT runs on the caller's
   * threads rather than interrupting a worker in the middle of an iteration. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (int w = 0; w < p->n_workers; w++) {
    p->args[w] = (worker_arg){p, w};
    int rc = pthread_create(&p->threads[w], NULL, worker_main, &p->args[w]);
    if (rc != 0) {
      st = ng__err_errno(NG_ERR_NOMEM, rc,
                         "worker pool: cannot start worker thread %d of %d (use fewer workers)", w,
                         p->n_workers);
      break;
    }
    p->started++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (st != NG_OK) {
    open_gate(p, GATE_ABORT);
    goto fail;
  }
  note_unbound(p);
  /* Set before the gate opens, so that a worker may read the pool through its context. */
  *out = p;
  open_gate(p, GATE_GO);
  return NG_OK;
fail:
  for (int w = 0; w < p->started; w++)
    pthread_join(p->threads[w], NULL);
  pool_free(p);
  return st;
}

void ng__pool_join(ng_pool *p) {
  if (!p)
    return;
  for (int w = 0; w < p->started; w++)
    pthread_join(p->threads[w], NULL);
  pool_free(p);
}

int ng__pool_workers(const ng_pool *p) {
  return p->n_workers;
}

int ng__pool_core(const ng_pool *p, int w) {
  return w >= 0 && w < p->n_workers ? p->cores[w] : -1;
}

bool ng__pool_bound(const ng_pool *p, int w) {
  return w >= 0 && w < p->n_workers && __atomic_load_n(&p->bound[w], __ATOMIC_ACQUIRE);
}

int ng__pool_device_core(const ng_pool *p) {
  return p->device_core;
}

bool ng__pool_oversubscribed(const ng_pool *p) {
  return p->oversubscribed;
}

bool ng__pool_near_pci(const ng_pool *p) {
  return p->near_pci;
}

ng_status ng__pool_bind_device_thread(const ng_pool *p) {
  if (!p->bind || p->device_core < 0)
    return NG_OK;
  if (!bind_thread(p, p->device_set))
    return ng__err_errno(NG_ERR_UNSUPPORTED, errno,
                         "cannot bind the device thread to core %d (the container or the "
                         "scheduler forbids it); it runs unbound",
                         p->device_core);
  return NG_OK;
}

const char *ng__pool_describe(const ng_pool *p) {
  return p->desc;
}
