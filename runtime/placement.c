/* NUMA placement of the cold rows; see placement_impl.h and docs/distributed.md. */
#include "placement_impl.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ng__place_kind_name(ng_place_kind k) {
  switch (k) {
  case NG_PLACE_ONE_NODE:
    return "one_node";
  case NG_PLACE_REPLICA_PER_NODE:
    return "replica_per_node";
  case NG_PLACE_PARTITIONED:
    return "partitioned";
  }
  return "?";
}

const char *ng_numa_placement_name(int32_t placement) {
  return placement >= NG_PLACE_ONE_NODE && placement <= NG_PLACE_PARTITIONED
             ? ng__place_kind_name((ng_place_kind)placement)
             : "?";
}

/* The share of the table each node holds when partitioned: in proportion to the nodes' read
 * rates (so that every node's part takes the same time to read), none holding more than its
 * free memory; what a full node cannot hold goes to the others, again by their rates. */
static bool partition_shares(double *share, const ng_place_in *in, const double *rate) {
  const int n = in->n_nodes;
  bool capped[NG_PLACE_MAX_NODES] = {false};
  double left = 1.0;
  for (int round = 0; round < n && left > 0.0; round++) {
    double w = 0.0;
    for (int k = 0; k < n; k++)
      if (!capped[k])
        w += rate[k];
    if (w <= 0.0)
      break;
    bool more = false;
    for (int k = 0; k < n; k++)
      if (!capped[k]) {
        share[k] = left * rate[k] / w;
        const double room = in->table_bytes > 0.0 ? in->nodes[k].free_bytes / in->table_bytes : 1.0;
        if (share[k] > room) {
          share[k] = room;
          capped[k] = true;
          more = true;
        }
      }
    if (!more)
      return true;
    left = 1.0;
    for (int k = 0; k < n; k++)
      if (capped[k])
        left -= share[k];
  }
  /* Every node full: the table does not fit. Its rows then sit where the OS puts them; the
   * figures take them as spread by free memory. */
  double free_sum = 0.0;
  for (int k = 0; k < n; k++)
    free_sum += in->nodes[k].free_bytes;
  for (int k = 0; k < n; k++)
    share[k] = free_sum > 0.0 ? in->nodes[k].free_bytes / free_sum : 1.0 / n;
  return false;
}

ng_status ng__place(ng_placement *out, const ng_place_in *in) {
  memset(out, 0, sizeof *out);
  const int n = in->n_nodes, R = in->n_ranks;
  if (n < 1 || n > NG_PLACE_MAX_NODES || !in->nodes)
    return ng__err(NG_ERR_INVALID_ARG, "placement: %d NUMA nodes (1 to %d)", n, NG_PLACE_MAX_NODES);
  if (R < 1 || R > NG_PLACE_MAX_RANKS)
    return ng__err(NG_ERR_INVALID_ARG, "placement: %d ranks (1 to %d)", R, NG_PLACE_MAX_RANKS);
  out->n_nodes = n;
  out->n_ranks = R;
  /* Each rank's workers on its GPU's node; ranks whose node is unknown in turn over the nodes. */
  int ranks_on[NG_PLACE_MAX_NODES] = {0}, unknown = 0;
  for (int r = 0; r < R; r++) {
    const int k = in->rank_node ? in->rank_node[r] : -1;
    if (k >= n)
      return ng__err(NG_ERR_INVALID_ARG, "placement: rank %d is on node index %d of %d", r, k, n);
    out->rank_node[r] = k >= 0 ? k : unknown++ % n;
    ranks_on[out->rank_node[r]]++;
  }
  /* Read rates: a node whose rate is unknown counts as 1 (the figures are then relative). */
  double rate[NG_PLACE_MAX_NODES], rate_sum = 0.0;
  bool known = true;
  for (int k = 0; k < n; k++) {
    known = known && in->nodes[k].dram_gbs > 0.0;
    rate[k] = in->nodes[k].dram_gbs > 0.0 ? in->nodes[k].dram_gbs : 1.0;
  }
  const double cold = in->cold_bytes_per_step, per_rank = cold / R;
  bool replicas = n > 1;
  for (int k = 0; k < n && replicas; k++)
    replicas = ranks_on[k] == 0 || in->nodes[k].free_bytes >= in->table_bytes;
  double share[NG_PLACE_MAX_NODES] = {0};
  if (n == 1) {
    out->kind = NG_PLACE_ONE_NODE;
    out->fits = in->nodes[0].free_bytes >= in->table_bytes;
    out->table_bytes[0] = in->table_bytes;
    out->read_bytes[0] = cold;
  } else if (replicas) {
    /* Every rank reads its share of the host's cold bytes from its own node's replica. */
    out->kind = NG_PLACE_REPLICA_PER_NODE;
    out->fits = true;
    for (int k = 0; k < n; k++) {
      out->table_bytes[k] = ranks_on[k] > 0 ? in->table_bytes : 0.0;
      out->read_bytes[k] = per_rank * ranks_on[k];
    }
  } else {
    /* Rows spread over the nodes by their shares: every rank reads share[k] of its bytes from
     * node k, and what is not on its own node crosses. */
    out->kind = NG_PLACE_PARTITIONED;
    out->fits = partition_shares(share, in, rate);
    for (int k = 0; k < n; k++) {
      out->table_bytes[k] = share[k] * in->table_bytes;
      out->read_bytes[k] = share[k] * cold;
      out->cross_bytes += per_rank * ranks_on[k] * (1.0 - share[k]);
    }
  }
  /* The floor: every node reads its bytes at its rate, at once; the link carries what crosses. */
  double step = 0.0;
  for (int k = 0; k < n; k++) {
    rate_sum += rate[k];
    step = NG_MAX(step, out->read_bytes[k] / (rate[k] * 1e9));
  }
  if (in->link_gbs > 0.0)
    step = NG_MAX(step, out->cross_bytes / (in->link_gbs * 1e9));
  out->step_s = step;
  out->floor_targets_per_s = known && step > 0.0 ? in->targets_per_step / step : 0.0;
  out->bw_share = step > 0.0 ? cold / (step * 1e9) / rate_sum : 1.0;
  return NG_OK;
}

/* The value of `key` (in kB) in a meminfo file's text, in bytes; 0 when absent. */
static double meminfo_bytes(const char *text, const char *key) {
  const char *p = strstr(text, key);
  if (!p)
    return 0.0;
  p += strlen(key);
  while (*p == ' ' || *p == ':')
    p++;
  return strtod(p, NULL) * 1024.0;
}

static bool read_text(char *buf, size_t cap, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return false;
  const size_t k = fread(buf, 1, cap - 1, f);
  buf[k] = '\0';
  fclose(f);
  return k > 0;
}

static int cmp_node(const void *a, const void *b) {
  const ng_numa_node *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

ng_status ng__numa_read(ng_numa_node *out, int cap, int *n, const char *root) {
  *n = 0;
  if (cap < 1)
    return ng__err(NG_ERR_INVALID_ARG, "placement: room for %d NUMA nodes", cap);
  const char *dir = root ? root : "/sys/devices/system/node";
  char buf[8192], path[4096];
  DIR *d = opendir(dir);
  for (struct dirent *e = d ? readdir(d) : NULL; e && *n < cap; e = readdir(d)) {
    int id = -1;
    char tail = 0;
    if (sscanf(e->d_name, "node%d%c", &id, &tail) != 1 || id < 0)
      continue;
    snprintf(path, sizeof path, "%s/%s/meminfo", dir, e->d_name);
    if (!read_text(buf, sizeof buf, path))
      continue;
    /* Free memory and the page cache, which the kernel gives back to a table that needs it. */
    out[(*n)++] =
        (ng_numa_node){id, meminfo_bytes(buf, "MemFree") + meminfo_bytes(buf, "FilePages"), 0.0};
  }
  if (d)
    closedir(d);
  if (*n > 0) {
    qsort(out, (size_t)*n, sizeof *out, cmp_node);
    return NG_OK;
  }
  /* No NUMA information (a kernel without it, a container hiding it): one node. */
  const bool ok = read_text(buf, sizeof buf, "/proc/meminfo");
  out[0] = (ng_numa_node){0, ok ? meminfo_bytes(buf, "MemAvailable") : 0.0, 0.0};
  *n = 1;
  return NG_OK;
}

int ng__numa_of_pci(const char *bus_id, const char *root) {
  if (!bus_id || !*bus_id)
    return -1;
  char path[4096], buf[64], low[64];
  /* CUDA writes the domain with 8 digits (00000000:1A:00.0), sysfs with 4, in lower case. */
  const char *colon = strchr(bus_id, ':');
  if (colon && colon - bus_id == 8)
    bus_id += 4;
  size_t k = 0;
  for (; bus_id[k] && k + 1 < sizeof low; k++)
    low[k] = (char)(bus_id[k] >= 'A' && bus_id[k] <= 'F' ? bus_id[k] - 'A' + 'a' : bus_id[k]);
  low[k] = '\0';
  snprintf(path, sizeof path, "%s/%s/numa_node", root ? root : "/sys/bus/pci/devices", low);
  if (!read_text(buf, sizeof buf, path))
    return -1;
  return atoi(buf) >= 0 ? atoi(buf) : -1;
}
