/* The trainer's data-parallel side; see trainer_dist_impl.h and docs/distributed.md. */
#include "trainer_dist_impl.h"
#include "placement_impl.h"
#include "pool_impl.h"

#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ng_status ng__dist_setup(ng_grad_reduce *d, struct ng_comm *comm, ng_backend *be, int64_t n_train,
                         int64_t batch, int64_t n_params) {
  *d = (ng_grad_reduce){.rank = 0, .ranks = 1, .be = be, .n_train = n_train, .batch = batch};
  if (!comm)
    return NG_OK;
  NG_CHECK(ng__comm_check(comm));
  if (comm->size == 1)
    return NG_OK;
  d->comm = comm;
  d->rank = comm->rank;
  d->ranks = comm->size;
  const int64_t tail = n_train % batch;
  if (batch < d->ranks || (tail != 0 && tail < d->ranks))
    return ng__err(NG_ERR_INVALID_ARG,
                   "distributed: a global batch of %lld over %d training nodes leaves a batch of "
                   "%lld targets for %d ranks; every rank needs at least one target: give "
                   "--batch B with B >= ranks and (train %% B == 0 or train %% B >= ranks)",
                   (long long)batch, (int)n_train, (long long)(tail ? tail : batch), d->ranks);
  /* Every rank must run the same iterations over the same parameters. */
  double mine[3] = {(double)n_train, (double)batch, (double)n_params}, sum[3];
  memcpy(sum, mine, sizeof sum);
  NG_CHECK(ng__comm_allreduce_f64(comm, sum, 3));
  for (int k = 0; k < 3; k++)
    if (sum[k] != mine[k] * d->ranks)
      return ng__err(NG_ERR_INVALID_ARG,
                     "distributed: the ranks disagree on the %s (this rank: %.0f); start every "
                     "rank with the same dataset, model and --batch",
                     k == 0   ? "training split's size"
                     : k == 1 ? "global batch"
                              : "model's size",
                     mine[k]);
  if (be->iface->host_memory)
    return NG_OK;
  if (!be->iface->dist_init || !be->iface->allreduce)
    return ng__err(NG_ERR_UNSUPPORTED, "distributed: the %s backend cannot all-reduce its memory",
                   be->iface->name);
  /* Every rank learns whether every rank can use the device communicator (NCCL loads) and
   * whether rank 0 got an id, so that none waits in the communicator's set-up for a rank that
   * never comes. */
  unsigned char id[NG_DIST_ID_BYTES] = {0};
  ng_status st = be->iface->dist_id(be, d->rank == 0 ? id : NULL);
  char why[512] = "";
  if (st != NG_OK)
    snprintf(why, sizeof why, "%s", ng_last_error());
  double failed = st != NG_OK;
  NG_CHECK(ng__comm_allreduce_f64(comm, &failed, 1));
  if (st != NG_OK)
    return ng__err(st, "%s", why);
  if (failed > 0)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "distributed: %.0f other rank(s) could not set up the "
                   "device communicator (their messages say why)",
                   failed);
  NG_CHECK(ng__comm_bcast(comm, id, sizeof id, 0));
  NG_CHECK(be->iface->dist_init(be, id, d->rank, d->ranks));
  d->device = true;
  return NG_OK;
}

ng_status ng__dist_epoch_end(ng_grad_reduce *d, double *loss_sum, int64_t *correct, int64_t *edges,
                             double *allreduce_ms) {
  *allreduce_ms = 0.0;
  if (d->ranks <= 1)
    return NG_OK;
  double ms = d->wall_ms;
  int64_t count = d->count;
  if (d->device)
    NG_CHECK(d->be->iface->allreduce_time(d->be, &ms, &count));
  *allreduce_ms = count > 0 ? ms / (double)count : 0.0;
  d->wall_ms = 0.0;
  d->count = 0;
  /* Counts below 2^53 are exact in doubles. */
  double v[3] = {*loss_sum, (double)*correct, (double)*edges};
  NG_CHECK(ng__comm_allreduce_f64(d->comm, v, 3));
  *loss_sum = v[0];
  *correct = (int64_t)v[1];
  *edges = (int64_t)v[2];
  return NG_OK;
}

enum { LIST = 1024, HOST = 256 };

ng_status ng__dist_cpuset(char *out, size_t cap, struct ng_comm *comm, ng_backend *be) {
  char pci[64] = "";
  if (be->iface->pci_bus_id && be->iface->pci_bus_id(be, pci, sizeof pci) != NG_OK)
    pci[0] = 0;
  /* Every rank's host and nearest cores: the ranks of one host with the same nearest cores
   * share them. */
  struct {
    char host[HOST];
    char near[LIST];
  } me = {{0}, {0}};
  const char *forced = getenv("NG_HOST_NAME");
  if (forced && *forced)
    snprintf(me.host, sizeof me.host, "%s", forced);
  else if (gethostname(me.host, sizeof me.host - 1) != 0)
    snprintf(me.host, sizeof me.host, "?");
  NG_CHECK(ng__cpus_near(me.near, sizeof me.near, pci));
  char *all = ng__malloc((size_t)comm->size * sizeof me, "the ranks' core lists");
  if (!all)
    return NG_ERR_NOMEM;
  ng_status st = ng__comm_allgather(comm, &me, all, sizeof me);
  int k = 0, m = 0;
  for (int r = 0; st == NG_OK && r < comm->size; r++) {
    const char *h = all + (size_t)r * sizeof me;
    if (strncmp(h, me.host, HOST) != 0 || strncmp(h + HOST, me.near, LIST) != 0)
      continue;
    if (r == comm->rank)
      k = m;
    m++;
  }
  free(all);
  NG_CHECK(st);
  return ng__cpus_slice(out, cap, me.near, k, NG_MAX(m, 1));
}

int ng__dist_threads(struct ng_comm *comm) {
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const int local = comm && comm->local_size > 0 ? comm->local_size : 1;
  return NG_MAX(1, cores / local);
}

ng_status ng__dist_coop_create(ng_coop **out, const ng_grad_reduce *d, ng_cold_fetch want,
                               ng_mode mode, const ng_fetch_cfg *fetch, float input_dropout,
                               int *workers, int user_workers) {
  *out = NULL;
  if ((unsigned)want > NG_COLD_FETCH_COOPERATIVE)
    return ng__err(NG_ERR_INVALID_ARG, "ng_train_opts.cold_fetch: unknown mode %d", (int)want);
  const bool exchange = want == NG_COLD_FETCH_COOPERATIVE && d->ranks > 1;
  if (exchange && input_dropout != 0.0f)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "the cooperative cold fetch does not exchange input dropout's rows yet "
                   "(input dropout %g); train without it or with --cold-fetch own",
                   (double)input_dropout);
  if (exchange && fetch->hot_gather)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "--cold-fetch cooperative with a partitioned hot tier is not built yet; use "
                   "--cache-placement replicated");
  /* The exchanged rows reach the fetch through a row overlay, which the host reads (the
   * device reads no overlaid row itself), in iterations produced in order (inline). */
  if (exchange && (mode == NG_MODE_HYBRID || mode == NG_MODE_HYBRID_STATIC ||
                   mode == NG_MODE_ZEROCOPY || fetch->self_zcopy))
    return ng__err(NG_ERR_UNSUPPORTED,
                   "--cold-fetch cooperative runs the host work inline, its rows read by the "
                   "host, so far; mode %s %s: use --mode partial or baseline with it, or "
                   "--cold-fetch own",
                   ng_mode_name(mode),
                   mode == NG_MODE_HYBRID || mode == NG_MODE_HYBRID_STATIC
                       ? "splits worker threads"
                       : "has the device read cold rows from host memory");
  if (exchange && user_workers == 0)
    *workers = -1;
  const bool b16 = fetch->features_bf16 != NULL;
  return ng__coop_create(out, d->ranks > 1 ? d->comm : NULL, exchange, fetch->hot,
                         exchange && !b16 ? fetch->features : NULL,
                         exchange && b16 ? fetch->features_bf16 : NULL, fetch->nodes, fetch->dim);
}

/* The NUMA placement rule on this host (runtime/placement_impl.h) into out's placement fields:
 * rank 0's reading of the nodes (every rank then applies the rule to the same figures), each
 * rank's GPU's node, the table's bytes and the cold bytes the ranks read per step. Collective
 * with several ranks. */
static ng_status dist_placement(ng_cold_fetch_stats *out, const ng_grad_reduce *d,
                                const ng_fetch_cfg *fetch, int64_t batch) {
  struct {
    int32_t n;
    ng_numa_node nodes[NG_PLACE_MAX_NODES];
  } host;
  memset(&host, 0, sizeof host);
  int n = 0;
  NG_CHECK(ng__numa_read(host.nodes, NG_PLACE_MAX_NODES, &n, NULL));
  host.n = n;
  if (d->ranks > 1)
    NG_CHECK(ng__comm_bcast(d->comm, &host, sizeof host, 0));
  /* This rank's GPU's node, as an index into the nodes (-1: unknown, a CPU run). */
  char pci[64] = "";
  if (d->be && d->be->iface->pci_bus_id &&
      d->be->iface->pci_bus_id(d->be, pci, sizeof pci) != NG_OK)
    pci[0] = 0;
  const int node = ng__numa_of_pci(pci, NULL);
  int32_t mine = -1;
  for (int k = 0; k < host.n; k++)
    if (host.nodes[k].id == node)
      mine = k;
  const int R = NG_MIN(d->ranks, NG_PLACE_MAX_RANKS);
  int32_t *all = ng__malloc((size_t)d->ranks * sizeof *all, "the ranks' NUMA nodes");
  if (!all)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  if (d->ranks > 1)
    st = ng__comm_allgather(d->comm, &mine, all, sizeof mine);
  else
    all[0] = mine;
  int rank_node[NG_PLACE_MAX_RANKS];
  for (int r = 0; r < R; r++)
    rank_node[r] = all[r];
  free(all);
  NG_CHECK(st);
  const double elem = fetch->features_bf16 ? (double)sizeof(uint16_t) : (double)sizeof(float);
  const ng_place_in in = {.n_nodes = host.n,
                          .nodes = host.nodes,
                          .n_ranks = R,
                          .rank_node = rank_node,
                          .table_bytes = (double)fetch->nodes * (double)fetch->dim * elem,
                          .cold_bytes_per_step = out->rows_read_per_step * (double)out->row_bytes,
                          .targets_per_step = (double)batch,
                          .link_gbs = 0.0};
  ng_placement *p = ng__malloc(sizeof *p, "the placement");
  if (!p)
    return NG_ERR_NOMEM;
  st = ng__place(p, &in);
  if (st == NG_OK) {
    out->numa_nodes = host.n;
    out->placement = (int32_t)p->kind;
    const int k = p->rank_node[NG_MIN(d->rank, R - 1)];
    out->rank_node = host.nodes[k].id;
    out->placement_bw_share = p->bw_share;
  }
  free(p);
  return st;
}

ng_status ng__dist_coop_epoch(ng_cold_fetch_stats *out, ng_coop *co, const ng_grad_reduce *d,
                              const ng_fetch_cfg *fetch, int64_t batch) {
  const size_t size = out->size;
  *out = (ng_cold_fetch_stats)NG_COLD_FETCH_STATS_INIT;
  out->size = size;
  if (!co)
    return NG_OK;
  /* The run's totals, not the epoch's: with worker threads, iterations of the next epoch are
   * made (and counted) before this one ends, and a run's totals hold each iteration once. */
  ng_coop_stats cs;
  ng__coop_stats(co, &cs, false);
  /* Counts below 2^53 are exact in doubles; every rank ran the same iterations. */
  double v[3] = {(double)cs.rows_needed, (double)cs.rows_read, (double)cs.rows_sent};
  if (d->ranks > 1)
    NG_CHECK(ng__comm_allreduce_f64(d->comm, v, 3));
  out->mode = ng__coop_exchanges(co) ? NG_COLD_FETCH_COOPERATIVE : NG_COLD_FETCH_OWN;
  out->ranks = d->ranks;
  out->steps = cs.steps;
  const double steps = (double)NG_MAX(cs.steps, (int64_t)1);
  out->rows_needed_per_step = v[0] / steps;
  out->rows_read_per_step = v[1] / steps;
  out->rows_sent_per_step = v[2] / steps;
  out->row_bytes = fetch->dim * (int64_t)(fetch->features_bf16 ? sizeof(uint16_t) : sizeof(float));
  out->bytes_per_target =
      out->rows_read_per_step * (double)out->row_bytes / (double)NG_MAX(batch, (int64_t)1);
  return dist_placement(out, d, fetch, batch);
}
