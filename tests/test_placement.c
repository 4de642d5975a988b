/* The NUMA placement rule (runtime/placement.c, docs/distributed.md "NUMA placement") on
 * hand-written topologies: one node; two nodes with room for a replica each; two nodes without
 * (partitioned by read rate, the cross-node reads and the link in the floor); a table that fits
 * nowhere; and the sysfs reader on a made-up tree. The table in docs/distributed.md is these
 * cases. */
#include "ng_test.h"

#include "placement_impl.h"

#include <math.h>
#include <stdio.h>
#include <sys/stat.h>

#define GB 1e9

/* Equal up to rounding, relative to the expected value. */
#define EXPECT_SAME(a, b) EXPECT_NEAR((a), (b), 1e-9 * fmax(1.0, fabs((double)(b))))

/* 4 ranks, 1 GB of cold reads per step over the host, a global batch of 1000 targets. */
static ng_place_in host(const ng_numa_node *nodes, int n_nodes, const int *rank_node,
                        double table_bytes) {
  return (ng_place_in){.n_nodes = n_nodes,
                       .nodes = nodes,
                       .n_ranks = 4,
                       .rank_node = rank_node,
                       .table_bytes = table_bytes,
                       .cold_bytes_per_step = 1 * GB,
                       .targets_per_step = 1000,
                       .link_gbs = 0};
}

static void test_one_node(void) {
  const ng_numa_node nodes[] = {{0, 500 * GB, 100}};
  const int ranks[] = {0, 0, 0, 0};
  ng_placement p;
  EXPECT_STATUS(ng__place(&p, &(ng_place_in){0}), NG_ERR_INVALID_ARG);
  ng_place_in in = host(nodes, 1, ranks, 200 * GB);
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_EQ_I(p.kind, NG_PLACE_ONE_NODE);
  EXPECT_TRUE(p.fits);
  EXPECT_SAME(p.table_bytes[0], 200 * GB);
  EXPECT_SAME(p.read_bytes[0], 1 * GB);
  EXPECT_SAME(p.cross_bytes, 0);
  /* 1 GB at 100 GB/s: 10 ms a step, 100 steps of 1000 targets a second. */
  EXPECT_SAME(p.step_s, 0.01);
  EXPECT_SAME(p.floor_targets_per_s, 100000);
  EXPECT_SAME(p.bw_share, 1);
  for (int r = 0; r < 4; r++)
    EXPECT_EQ_I(p.rank_node[r], 0);
  /* A read rate unknown: no floor, the rest the same. */
  const ng_numa_node unknown[] = {{0, 500 * GB, 0}};
  in.nodes = unknown;
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_SAME(p.floor_targets_per_s, 0);
  EXPECT_EQ_I(p.kind, NG_PLACE_ONE_NODE);
}

/* Two sockets, two GPUs on each: a 200 GB table fits each node's 300 GB. */
static void test_two_nodes_replicas(void) {
  const ng_numa_node nodes[] = {{0, 300 * GB, 100}, {1, 300 * GB, 100}};
  const int ranks[] = {0, 0, 1, 1};
  ng_placement p;
  ng_place_in in = host(nodes, 2, ranks, 200 * GB);
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_EQ_I(p.kind, NG_PLACE_REPLICA_PER_NODE);
  EXPECT_TRUE(p.fits);
  EXPECT_SAME(p.table_bytes[0], 200 * GB);
  EXPECT_SAME(p.table_bytes[1], 200 * GB);
  EXPECT_SAME(p.read_bytes[0], 0.5 * GB);
  EXPECT_SAME(p.read_bytes[1], 0.5 * GB);
  EXPECT_SAME(p.cross_bytes, 0);
  /* Each node reads half at 100 GB/s: 5 ms, twice one node's floor. */
  EXPECT_SAME(p.floor_targets_per_s, 200000);
  EXPECT_SAME(p.bw_share, 1);
  EXPECT_EQ_I(p.rank_node[1], 0);
  EXPECT_EQ_I(p.rank_node[2], 1);
  /* GPUs all on node 0: only node 0 needs the table, and reads it all. */
  const int all0[] = {0, 0, 0, 0};
  in.rank_node = all0;
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_EQ_I(p.kind, NG_PLACE_REPLICA_PER_NODE);
  EXPECT_SAME(p.table_bytes[1], 0);
  EXPECT_SAME(p.floor_targets_per_s, 100000);
  EXPECT_SAME(p.bw_share, 0.5);
  /* Nodes unknown: the ranks go to the nodes in turn. */
  const int none[] = {-1, -1, -1, -1};
  in.rank_node = none;
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_EQ_I(p.rank_node[0], 0);
  EXPECT_EQ_I(p.rank_node[1], 1);
  EXPECT_EQ_I(p.rank_node[2], 0);
  EXPECT_EQ_I(p.rank_node[3], 1);
  EXPECT_SAME(p.floor_targets_per_s, 200000);
  /* A rank on a node that is not one of them. */
  const int bad[] = {0, 0, 2, 1};
  in.rank_node = bad;
  EXPECT_STATUS(ng__place(&p, &in), NG_ERR_INVALID_ARG);
}

/* A 400 GB table and 300 GB free on each node: partitioned, by read rate. */
static void test_two_nodes_partitioned(void) {
  ng_numa_node nodes[] = {{0, 300 * GB, 100}, {1, 300 * GB, 100}};
  const int ranks[] = {0, 0, 1, 1};
  ng_placement p;
  ng_place_in in = host(nodes, 2, ranks, 400 * GB);
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_EQ_I(p.kind, NG_PLACE_PARTITIONED);
  EXPECT_TRUE(p.fits);
  EXPECT_SAME(p.table_bytes[0], 200 * GB);
  EXPECT_SAME(p.table_bytes[1], 200 * GB);
  EXPECT_SAME(p.read_bytes[0], 0.5 * GB);
  /* Every rank reads half its bytes across: 0.5 GB a step crosses. Without a link limit the
   * floor is both nodes' rate; over a 20 GB/s link, the link binds: 25 ms a step. */
  EXPECT_SAME(p.cross_bytes, 0.5 * GB);
  EXPECT_SAME(p.floor_targets_per_s, 200000);
  in.link_gbs = 20;
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_SAME(p.step_s, 0.025);
  EXPECT_SAME(p.floor_targets_per_s, 40000);
  EXPECT_SAME(p.bw_share, 0.2);
  /* Unequal rates: node 1 reads at 300 GB/s and would take 3/4 of the rows, which its 250 GB
   * cannot hold: it takes 250 GB, node 0 the other 150 GB. */
  in.link_gbs = 0;
  nodes[1] = (ng_numa_node){1, 250 * GB, 300};
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_EQ_I(p.kind, NG_PLACE_PARTITIONED);
  EXPECT_TRUE(p.fits);
  EXPECT_SAME(p.table_bytes[1], 250 * GB);
  EXPECT_SAME(p.table_bytes[0], 150 * GB);
  /* Node 0 reads 3/8 GB at 100 GB/s (3.75 ms), node 1 5/8 GB at 300 (2.08 ms). */
  EXPECT_SAME(p.step_s, 0.375 / 100);
  /* Room on neither: it does not fit; the rows spread by free memory. */
  nodes[0].free_bytes = 100 * GB;
  nodes[1].free_bytes = 100 * GB;
  EXPECT_OK(ng__place(&p, &in));
  EXPECT_EQ_I(p.kind, NG_PLACE_PARTITIONED);
  EXPECT_TRUE(!p.fits);
  EXPECT_SAME(p.table_bytes[0], 200 * GB);
}

static void write_text(const char *path, const char *text) {
  EXPECT_TRUE(ng_test_write_file(path, text, strlen(text)));
}

static void test_sysfs(void) {
  char root[2048], path[4096];
  snprintf(root, sizeof root, "%s", ng_test_path("node"));
  EXPECT_TRUE(mkdir(root, 0755) == 0);
  const int ids[] = {1, 0};
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/node%d", root, ids[k]);
    EXPECT_TRUE(mkdir(path, 0755) == 0);
    snprintf(path, sizeof path, "%s/node%d/meminfo", root, ids[k]);
    char text[256];
    snprintf(text, sizeof text,
             "Node %d MemTotal:       1000 kB\nNode %d MemFree:        %d kB\n"
             "Node %d FilePages:      %d kB\n",
             ids[k], ids[k], 100 + ids[k], ids[k], 10 * ids[k]);
    write_text(path, text);
  }
  snprintf(path, sizeof path, "%s/possible", root); /* not a node */
  write_text(path, "0-1\n");
  ng_numa_node nodes[4];
  int n = 0;
  EXPECT_OK(ng__numa_read(nodes, 4, &n, root));
  EXPECT_EQ_I(n, 2);
  EXPECT_EQ_I(nodes[0].id, 0);
  EXPECT_EQ_I(nodes[1].id, 1);
  EXPECT_SAME(nodes[0].free_bytes, 100 * 1024.0);
  EXPECT_SAME(nodes[1].free_bytes, (101 + 10) * 1024.0);
  /* A GPU's node from its PCI folder, CUDA's 8-digit domain and upper case taken. */
  snprintf(path, sizeof path, "%s/0000:1a:00.0", root);
  EXPECT_TRUE(mkdir(path, 0755) == 0);
  snprintf(path, sizeof path, "%s/0000:1a:00.0/numa_node", root);
  write_text(path, "1\n");
  EXPECT_EQ_I(ng__numa_of_pci("00000000:1A:00.0", root), 1);
  EXPECT_EQ_I(ng__numa_of_pci("0000:1b:00.0", root), -1);
  EXPECT_EQ_I(ng__numa_of_pci("", root), -1);
  /* This machine's own: at least one node. */
  EXPECT_OK(ng__numa_read(nodes, 4, &n, NULL));
  EXPECT_TRUE(n >= 1 && nodes[0].free_bytes > 0);
}

int main(void) {
  RUN_TEST(test_one_node);
  RUN_TEST(test_two_nodes_replicas);
  RUN_TEST(test_two_nodes_partitioned);
  RUN_TEST(test_sysfs);
  return ng_test_summary();
}
