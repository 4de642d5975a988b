/* The placement of a data-parallel run's hot tier: the rule (docs/distributed.md, "The feature
 * cache across GPUs") and the set-up of a partitioned tier over the communicator. */
#include "cache_place_impl.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The start-up probe of AUTO: bytes of each timed copy, and copies timed after one warm-up. */
#define PROBE_BYTES ((size_t)64 << 20)
#define PROBE_COPIES 3
/* Row entries the hit-rate scan reads at most (a fixed stride over the index array). */
#define SHARE_ENTRIES ((int64_t)16 << 20)

static double pct(double x) {
  return 100.0 * x;
}

/* The rule's first conditions, which H does not enter: whether a partitioned tier could be
 * made at all (otherwise the tier is replicated, or a partitioned one asked for is refused; *why
 * says which and why). ng__cache_open gathers H over the ranks only when it could. */
static bool partition_possible(const ng_cache_inputs *in, ng_cache_go *go, char *why, size_t cap) {
  const int R = in->ranks;
  *go = NG_CACHE_GO_REPLICATED;
  if (in->requested == NG_CACHE_REPLICATED) {
    snprintf(why, cap, "replicated was asked for");
    return false;
  }
  if (R < 2) {
    snprintf(why, cap, "one rank: there are no other GPUs to spread the hot rows over");
    return false;
  }
  if (!in->device) {
    snprintf(why, cap, "the backend's memory is the host's: every row is read where it lies");
    return false;
  }
  if (in->local_ranks != R || R > NG_MAX_PARTS) {
    if (in->local_ranks != R)
      snprintf(why, cap,
               "a partitioned cache needs every rank on one host (%d ranks, %d on this host)", R,
               in->local_ranks);
    else
      snprintf(why, cap, "a partitioned cache spans at most %d GPUs (%d ranks)", NG_MAX_PARTS, R);
    if (in->requested == NG_CACHE_PARTITIONED)
      *go = NG_CACHE_GO_REFUSE;
    return false;
  }
  return true;
}

ng_cache_go ng__cache_decide(const ng_cache_inputs *in, char *why, size_t cap) {
  const bool part = in->requested == NG_CACHE_PARTITIONED;
  const int R = in->ranks;
  ng_cache_go go;
  if (!partition_possible(in, &go, why, cap))
    return go;
  if (!part) { /* AUTO: condition 1, then condition 2 when the rates are known already */
    if (in->hot >= in->nodes) {
      snprintf(why, cap, "the whole table (%lld rows) fits one GPU's share (H = %lld rows)",
               (long long)in->nodes, (long long)in->hot);
      return NG_CACHE_GO_REPLICATED;
    }
    if (!in->shares_known || in->share_rh - in->share_h < NG_CACHE_MIN_GAIN) {
      snprintf(why, cap,
               "%d x H rows would hold %.1f%% of the row entries against %.1f%% for H: less "
               "than %.0f points more",
               R, pct(in->share_rh), pct(in->share_h), pct(NG_CACHE_MIN_GAIN));
      return NG_CACHE_GO_REPLICATED;
    }
    if (in->peer_gbs > 0.0 && in->h2d_gbs > 0.0 &&
        (!in->bench_p2p || !(in->peer_gbs > NG_CACHE_PEER_FACTOR * in->h2d_gbs))) {
      snprintf(why, cap,
               "peer copies (%.1f GB/s%s) are not faster than %.0f x host-to-device copies "
               "(%.1f GB/s)",
               in->peer_gbs, in->bench_p2p ? "" : ", through the host", NG_CACHE_PEER_FACTOR,
               in->h2d_gbs);
      return NG_CACHE_GO_REPLICATED;
    }
  }
  if (!in->peer_tried) {
    snprintf(why, cap, "set up the parts and open the peers'");
    return NG_CACHE_GO_TRY;
  }
  if (!in->peer_ok) {
    snprintf(why, cap,
             "the GPUs cannot read each other's memory peer-to-peer (CUDA IPC or peer access "
             "refused): falling back to replicated");
    return NG_CACHE_GO_REPLICATED;
  }
  if (part) {
    snprintf(why, cap, "partitioned was asked for: %d GPUs hold %d x H rows", R, R);
    return NG_CACHE_GO_PARTITIONED;
  }
  if (!(in->peer_gbs > 0.0 && in->h2d_gbs > 0.0)) {
    snprintf(why, cap, "measure the peer and host-to-device rates");
    return NG_CACHE_GO_MEASURE;
  }
  /* The rates are known here, and AUTO's condition 2 above held for them. */
  snprintf(why, cap,
           "%d x H rows hold %.1f%% of the row entries against %.1f%% for H, and peer copies "
           "(%.1f GB/s) beat %.0f x host-to-device copies (%.1f GB/s)",
           R, pct(in->share_rh), pct(in->share_h), in->peer_gbs, NG_CACHE_PEER_FACTOR, in->h2d_gbs);
  return NG_CACHE_GO_PARTITIONED;
}

void ng__cache_entry_shares(const ng_csr *g, int64_t h1, int64_t h2, int64_t max_entries,
                            double *s1, double *s2) {
  const int64_t nnz = g->nnz;
  const int64_t stride =
      max_entries > 0 && nnz > max_entries ? (nnz + max_entries - 1) / max_entries : 1;
  const int64_t n = nnz > 0 ? (nnz + stride - 1) / stride : 0;
  int64_t c1 = 0, c2 = 0;
#pragma omp parallel for schedule(static) reduction(+ : c1, c2) if (n > 65536)
  for (int64_t k = 0; k < n; k++) {
    const int64_t v = ng__csr_index(g, k * stride);
    c1 += v < h1;
    c2 += v < h2;
  }
  *s1 = n > 0 ? (double)c1 / (double)n : 0.0;
  *s2 = n > 0 ? (double)c2 / (double)n : 0.0;
}

/* ---- the exchange record ---- */

static void put(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void ng__part_msg_pack(unsigned char out[NG_PART_MSG_BYTES], const ng_part_msg *m) {
  memset(out, 0, NG_PART_MSG_BYTES);
  put(out, NG_PART_MSG_MAGIC, 4);
  put(out + 4, NG_PART_MSG_VERSION, 2);
  put(out + 6, m->ok ? 1 : 0, 2);
  put(out + 8, (uint32_t)m->rank, 4);
  put(out + 12, (uint32_t)m->parts, 4);
  put(out + 16, (uint64_t)m->hot, 8);
  put(out + 24, (uint64_t)m->part_rows, 8);
  memcpy(out + 32, m->pci, strnlen(m->pci, sizeof m->pci - 1));
  memcpy(out + 64, m->handle, NG_IPC_HANDLE_BYTES);
}

ng_status ng__part_msg_unpack(ng_part_msg *m, const unsigned char in[NG_PART_MSG_BYTES], int rank,
                              int parts, int64_t hot) {
  memset(m, 0, sizeof *m);
  const uint32_t magic = (uint32_t)get(in, 4);
  const unsigned version = (unsigned)get(in + 4, 2);
  if (magic != NG_PART_MSG_MAGIC || version != NG_PART_MSG_VERSION)
    return ng__err(NG_ERR_FORMAT,
                   "partitioned cache: rank %d's record has magic 0x%08x version %u, expected "
                   "0x%08x version %d (a rank of another neargnn build?)",
                   rank, magic, version, NG_PART_MSG_MAGIC, NG_PART_MSG_VERSION);
  m->ok = (int32_t)get(in + 6, 2);
  m->rank = (int32_t)(uint32_t)get(in + 8, 4);
  m->parts = (int32_t)(uint32_t)get(in + 12, 4);
  m->hot = (int64_t)get(in + 16, 8);
  m->part_rows = (int64_t)get(in + 24, 8);
  memcpy(m->pci, in + 32, sizeof m->pci - 1);
  memcpy(m->handle, in + 64, NG_IPC_HANDLE_BYTES);
  if (m->rank != rank)
    return ng__err(NG_ERR_FORMAT, "partitioned cache: record %d comes from rank %d", rank,
                   (int)m->rank);
  if (m->parts != parts)
    return ng__err(NG_ERR_FORMAT,
                   "partitioned cache: rank %d splits the hot set in %d parts, "
                   "this rank in %d",
                   rank, (int)m->parts, parts);
  if (m->hot != hot)
    return ng__err(NG_ERR_FORMAT,
                   "partitioned cache: rank %d's hot set is %lld rows, this "
                   "rank's %lld",
                   rank, (long long)m->hot, (long long)hot);
  if (m->ok && m->part_rows != ng__part_rows(hot, parts, rank))
    return ng__err(NG_ERR_FORMAT, "partitioned cache: rank %d holds %lld rows, expected %lld", rank,
                   (long long)m->part_rows, (long long)ng__part_rows(hot, parts, rank));
  return NG_OK;
}

/* ---- bench_floor's rates ---- */

ng_status ng_bench_rates_read(ng_bench_rates *out, const char *path) {
  if (!out || out->size < sizeof out->size || !path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_bench_rates_read: out (its size set with "
                                       "NG_BENCH_RATES_INIT) and a path are required");
  FILE *f = fopen(path, "rb");
  if (!f)
    return ng__err(NG_ERR_IO, "cache bench file '%s': cannot open it", path);
  char buf[65536];
  const size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  cJSON *doc = cJSON_ParseWithLength(buf, n);
  ng_bench_rates r = NG_BENCH_RATES_INIT;
  const cJSON *peer = cJSON_GetObjectItemCaseSensitive(doc, "peer_gbs");
  const cJSON *h2d = cJSON_GetObjectItemCaseSensitive(doc, "h2d_gbs");
  r.peer_gbs = cJSON_IsNumber(peer) ? peer->valuedouble : 0.0;
  r.h2d_gbs = cJSON_IsNumber(h2d) ? h2d->valuedouble : 0.0;
  r.peer_p2p = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "peer_p2p"));
  /* One entry per thread count: the most threads reading alone set the host's DRAM rate. */
  const cJSON *row = NULL;
  cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(doc, "threads")) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(row, "cpu_alone_gbs");
    if (cJSON_IsNumber(g) && g->valuedouble > r.dram_gbs)
      r.dram_gbs = g->valuedouble;
  }
  cJSON_Delete(doc);
  const size_t size = out->size; /* a caller's older, smaller struct gets its fields */
  memcpy(out, &r, NG_MIN(size, sizeof r));
  out->size = size;
  return NG_OK;
}

ng_status ng__cache_bench_read(const char *path, double *peer_gbs, double *h2d_gbs, bool *p2p) {
  ng_bench_rates r = NG_BENCH_RATES_INIT;
  NG_CHECK(ng_bench_rates_read(&r, path));
  if (!(r.peer_gbs > 0.0 && r.h2d_gbs > 0.0))
    return ng__err(NG_ERR_FORMAT,
                   "cache bench file '%s': no positive \"peer_gbs\" and \"h2d_gbs\" (write it "
                   "with bench_floor --json on a host with 2 GPUs or more)",
                   path);
  *peer_gbs = r.peer_gbs;
  *h2d_gbs = r.h2d_gbs;
  *p2p = r.peer_p2p != 0;
  return NG_OK;
}

/* ---- set-up ---- */

/* Times copies of `bytes` from `src` (a peer's part) and from pinned host memory into device
 * memory: GB/s of each. */
static ng_status probe(ng_backend *be, const void *peer_src, size_t peer_bytes, double *peer,
                       double *h2d) {
  void *dev = NULL, *host = NULL;
  ng_status s = be->iface->alloc(be, &dev, PROBE_BYTES);
  if (s == NG_OK)
    s = be->iface->host_alloc(be, &host, PROBE_BYTES);
  if (s == NG_OK)
    memset(host, 0, PROBE_BYTES);
  *peer = *h2d = 0.0;
  for (int k = 0; k <= PROBE_COPIES && s == NG_OK && peer_bytes > 0; k++) {
    const double t0 = ng__now();
    s = be->iface->copy_d2d(be, dev, peer_src, peer_bytes);
    if (s == NG_OK)
      s = be->iface->sync(be);
    if (k > 0) /* the first copy warms up */
      *peer += ng__now() - t0;
  }
  for (int k = 0; k <= PROBE_COPIES && s == NG_OK; k++) {
    const double t0 = ng__now();
    s = be->iface->copy_h2d(be, dev, host, PROBE_BYTES);
    if (k > 0)
      *h2d += ng__now() - t0;
  }
  be->iface->free(be, dev);
  be->iface->host_free(be, host);
  NG_CHECK(s);
  *peer = *peer > 0.0 ? (double)PROBE_COPIES * (double)peer_bytes / *peer / 1e9 : 0.0;
  *h2d = *h2d > 0.0 ? (double)PROBE_COPIES * (double)PROBE_BYTES / *h2d / 1e9 : 0.0;
  return NG_OK;
}

static ng_status open_replicated(ng_store *st, ng_backend *be, const void *table, size_t elem,
                                 int64_t nodes, int64_t dim, int64_t hot, ng_fetch mode,
                                 bool read_only) {
  if (elem == sizeof(uint16_t))
    return ng__store_open_bf16(st, be, table, nodes, dim, hot, mode, read_only);
  return ng__store_open(st, be, table, nodes, dim, hot, mode, read_only);
}

/* Closes a partitioned set-up on every rank: the peers' parts first, then (after every rank
 * closed its view of them) the own part. */
static void close_parts(ng_store *st, struct ng_comm *comm) {
  for (int p = 0; p < NG_MAX_PARTS; p++)
    if (st->part_opened[p] && st->be->iface->ipc_close) {
      st->be->iface->ipc_close(st->be, st->part_opened[p]);
      st->part_opened[p] = NULL;
    }
  (void)ng__comm_barrier(comm);
  ng__store_close(st);
}

/* Sets part `rank` of a tier of `hot` rows over `R` parts up, exchanges the parts and opens the
 * peers' (collective). *peer_ok: every rank opened every peer's part; false leaves nothing
 * open. Errors are those of the communicator only: a rank that cannot set its part up says so
 * in its record, and every rank then falls back. */
static ng_status try_parts(ng_store *st, bool *peer_ok, char *note, size_t note_cap,
                           struct ng_comm *comm, ng_backend *be, const void *table, size_t elem,
                           int64_t nodes, int64_t dim, int64_t hot, ng_fetch mode, bool read_only) {
  const int R = comm->size, rank = comm->rank;
  if (R > NG_MAX_PARTS) /* the rule refuses it first; every rank alike */
    return ng__err(NG_ERR_INTERNAL, "a partitioned cache over %d ranks (at most %d)", R,
                   NG_MAX_PARTS);
  ng_part_msg m;
  memset(&m, 0, sizeof m);
  m.rank = rank;
  m.parts = R;
  m.hot = hot;
  m.part_rows = ng__part_rows(hot, R, rank);
  ng_status s = ng__store_open_part(st, be, table, elem, nodes, dim, hot, R, rank, mode, read_only);
  if (s == NG_OK)
    s = ng__store_part_export(st, m.handle);
  if (s == NG_OK && be->iface->pci_bus_id &&
      be->iface->pci_bus_id(be, m.pci, sizeof m.pci) != NG_OK)
    m.pci[0] = '\0';
  m.ok = s == NG_OK;
  if (s != NG_OK) {
    snprintf(note, note_cap, "rank %d: %s", rank, ng_last_error());
    ng__store_close(st);
  }
  unsigned char mine[NG_PART_MSG_BYTES];
  ng__part_msg_pack(mine, &m);
  /* On the stack (R <= NG_MAX_PARTS, every rank alike): no allocation can fail between two
   * collectives, where one rank leaving would leave the others waiting. */
  unsigned char all[NG_MAX_PARTS * NG_PART_MSG_BYTES];
  s = ng__comm_allgather(comm, mine, all, NG_PART_MSG_BYTES);
  int32_t ok = m.ok;
  void *ptrs[NG_MAX_PARTS] = {NULL};
  for (int p = 0; p < R && s == NG_OK; p++) {
    ng_part_msg pm;
    s = ng__part_msg_unpack(&pm, all + (size_t)p * NG_PART_MSG_BYTES, p, R, hot);
    if (s != NG_OK)
      break;
    if (!pm.ok) {
      if (ok)
        snprintf(note, note_cap, "rank %d could not set its part up", p);
      ok = 0;
    }
    if (p == rank || !ok || !pm.ok)
      continue;
    const ng_status e = be->iface->ipc_open(be, pm.handle, pm.pci, &ptrs[p]);
    if (e != NG_OK) {
      snprintf(note, note_cap, "rank %d: %s", rank, ng_last_error());
      ok = 0;
    }
  }
  /* Whatever was opened goes with the store (or is closed below). */
  if (m.ok)
    ng__store_part_attach(st, ptrs, true);
  else
    for (int p = 0; p < R; p++)
      if (ptrs[p])
        be->iface->ipc_close(be, ptrs[p]);
  NG_CHECK(s);
  int32_t oks[NG_MAX_PARTS];
  s = ng__comm_allgather(comm, &ok, oks, sizeof ok);
  *peer_ok = s == NG_OK;
  for (int p = 0; p < R && s == NG_OK; p++)
    if (!oks[p]) {
      if (ok)
        snprintf(note, note_cap, "rank %d could not open its peers' parts", p);
      *peer_ok = false;
    }
  NG_CHECK(s);
  if (!*peer_ok) { /* every rank takes the barrier of close_parts */
    if (m.ok)
      close_parts(st, comm);
    else
      NG_CHECK(ng__comm_barrier(comm));
  }
  return NG_OK;
}

ng_status ng__cache_open(ng_store *st, ng_cache_info *info, struct ng_comm *comm, ng_backend *be,
                         const ng_csr *g, const void *table, size_t elem, int64_t nodes,
                         int64_t dim, int64_t hot, ng_fetch mode, bool read_only,
                         ng_cache_placement requested, const char *bench_json) {
  const double t0 = ng__now();
  memset(info, 0, sizeof *info);
  if ((unsigned)requested > NG_CACHE_AUTO)
    return ng__err(NG_ERR_INVALID_ARG,
                   "unknown cache placement %d (replicated, partitioned or "
                   "auto)",
                   (int)requested);
  ng_cache_inputs in;
  memset(&in, 0, sizeof in);
  in.requested = requested;
  in.ranks = comm ? comm->size : 1;
  in.local_ranks = comm ? comm->local_size : 1;
  in.device = !be->iface->host_memory && be->iface->gather_parts && be->iface->ipc_open &&
              be->iface->ipc_export;
  in.nodes = nodes;
  in.hot = hot;
  ng_status s = NG_OK;
  const int R = in.ranks;
  int64_t ht = hot; /* the hot set of a partitioned tier */
  /* More ranks than parts, or ranks on several hosts, are refused or replicated by the rule
   * whatever H is. */
  char why[sizeof info->why] = "", note[200] = "";
  ng_cache_go go;
  if (partition_possible(&in, &go, why, sizeof why)) {
    /* Every rank decides from the same H: the smallest (free memory differs a little). On the
     * stack: no allocation may fail on one rank between collectives. */
    int64_t hs[NG_MAX_PARTS];
    s = ng__comm_allgather(comm, &hot, hs, sizeof hot);
    for (int r = 0; r < R && s == NG_OK; r++)
      in.hot = NG_MIN(in.hot, hs[r]);
    NG_CHECK(s);
    ht = in.hot > nodes / R ? nodes : in.hot * R;
    if (requested == NG_CACHE_AUTO && in.hot < nodes) {
      ng__cache_entry_shares(g, in.hot, ht, SHARE_ENTRIES, &in.share_h, &in.share_rh);
      in.shares_known = true;
      if (bench_json)
        NG_CHECK(ng__cache_bench_read(bench_json, &in.peer_gbs, &in.h2d_gbs, &in.bench_p2p));
    }
  }
  go = ng__cache_decide(&in, why, sizeof why);
  for (;;) {
    if (go == NG_CACHE_GO_REFUSE)
      return ng__err(NG_ERR_UNSUPPORTED, "cache placement %s: %s",
                     ng_cache_placement_name(requested), why);
    if (go == NG_CACHE_GO_TRY) {
      NG_CHECK(try_parts(st, &in.peer_ok, note, sizeof note, comm, be, table, elem, nodes, dim, ht,
                         mode, read_only));
      in.peer_tried = true;
    } else if (go == NG_CACHE_GO_MEASURE) {
      double r[2] = {0.0, 0.0};
      const int peer = (comm->rank + 1) % R;
      const size_t row = (size_t)dim * elem;
      const size_t bytes = NG_MIN(PROBE_BYTES, (size_t)ng__part_rows(ht, R, peer) * row);
      if (probe(be, st->part_ptr[peer], bytes, &r[0], &r[1]) != NG_OK) {
        snprintf(note, sizeof note, "rank %d: %s", comm->rank, ng_last_error());
        r[0] = r[1] = 0.0; /* every rank still takes the allgather below */
      }
      double all[2 * NG_MAX_PARTS]; /* no allocation between collectives (try_parts) */
      s = ng__comm_allgather(comm, r, all, sizeof r);
      /* The slowest peer link against the fastest host link: the rule's worst case. */
      in.peer_gbs = all[0];
      in.h2d_gbs = all[1];
      for (int k = 1; k < R; k++) {
        in.peer_gbs = NG_MIN(in.peer_gbs, all[2 * k]);
        in.h2d_gbs = NG_MAX(in.h2d_gbs, all[2 * k + 1]);
      }
      in.bench_p2p = true;
      NG_CHECK(s);
      if (!(in.peer_gbs > 0.0 && in.h2d_gbs > 0.0)) {
        snprintf(why, sizeof why, "the peer and host-to-device rates could not be measured");
        close_parts(st, comm);
        go = NG_CACHE_GO_REPLICATED;
        break;
      }
    } else {
      break;
    }
    go = ng__cache_decide(&in, why, sizeof why);
    if (go == NG_CACHE_GO_REPLICATED && in.peer_ok)
      close_parts(st, comm); /* measured and found slower */
  }
  if (go == NG_CACHE_GO_PARTITIONED) {
    info->placement = NG_CACHE_PARTITIONED;
    info->parts = R;
    info->hot_rows = ht;
    info->gpu_rows = st->part_rows;
  } else {
    NG_CHECK(open_replicated(st, be, table, elem, nodes, dim, hot, mode, read_only));
    info->placement = NG_CACHE_REPLICATED;
    info->parts = 1;
    info->hot_rows = hot;
    info->gpu_rows = be->iface->host_memory ? 0 : hot;
    if (note[0] && strlen(why) + 3 < sizeof why) {
      strncat(why, " (", sizeof why - strlen(why) - 1);
      strncat(why, note, sizeof why - strlen(why) - 2);
      strncat(why, ")", sizeof why - strlen(why) - 1);
    }
  }
  info->peer_gbs = in.peer_gbs;
  info->h2d_gbs = in.h2d_gbs;
  snprintf(info->why, sizeof info->why, "%s", why);
  info->probe_s = ng__now() - t0 - st->upload_s - st->register_s;
  if (info->probe_s < 0.0)
    info->probe_s = 0.0;
  return NG_OK;
}
