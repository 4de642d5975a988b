/* The partitioned hot tier's host side (docs/distributed.md, "The feature cache across GPUs"):
 * the ownership map, the exchange record's layout, the placement rule with given inputs (and its
 * refusals: ranks on several hosts, no peer-to-peer access), the hit-rate scan, the bench_floor
 * reader, and on the CPU backend (which stands in for R GPUs, its parts plain memory) the input
 * layer of a partitioned store against a replicated one of the same hot set: the same bits.
 * tests/gpu_dist.sh runs the same comparison end to end on two GPUs. */
#include "ng_test.h"
#include "ng_test_graph.h"

#include "bf16.h"
#include "cache_place_impl.h"
#include "graph_impl.h"
#include "ng_cpu.h"
#include "sampler_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== the ownership map ==== */

static void test_ownership(void) {
  const int64_t hots[] = {0, 1, 2, 7, 10, 11, 1000, 1001};
  for (int R = 1; R <= 5; R++)
    for (size_t k = 0; k < NG_ARRAY_LEN(hots); k++) {
      const int64_t hot = hots[k];
      int64_t total = 0, lo = INT64_MAX, hi = 0;
      for (int p = 0; p < R; p++) {
        const int64_t n = ng__part_rows(hot, R, p);
        total += n;
        lo = NG_MIN(lo, n);
        hi = NG_MAX(hi, n);
      }
      EXPECT_EQ_I(total, hot);
      EXPECT_TRUE(hi - lo <= 1); /* balanced: parts differ by one row at most */
      /* Every row has one place, inside its part, and no two rows share one. */
      int64_t *seen = calloc((size_t)NG_MAX(hot, (int64_t)1) * (size_t)R, sizeof *seen);
      int bad = 0;
      for (int64_t g = 0; g < hot; g++) {
        const int p = ng__part_of(g, R);
        const int64_t row = ng__part_row(g, R);
        bad += p < 0 || p >= R || row < 0 || row >= ng__part_rows(hot, R, p);
        if (p >= 0 && p < R && row >= 0 && row < hot)
          bad += seen[row * R + p]++ != 0;
        bad += row * R + p != g; /* g mod R, g / R: the inverse is row * R + part */
      }
      EXPECT_EQ_I(bad, 0);
      free(seen);
    }
  /* Rows ordered by hotness: the first R rows (the hottest) land on R different parts. */
  for (int g = 0; g < 4; g++)
    EXPECT_EQ_I(ng__part_of(g, 4), g);
}

/* ==== the exchange record ==== */

static ng_part_msg sample_msg(int rank, int parts, int64_t hot) {
  ng_part_msg m;
  memset(&m, 0, sizeof m);
  m.ok = 1;
  m.rank = rank;
  m.parts = parts;
  m.hot = hot;
  m.part_rows = ng__part_rows(hot, parts, rank);
  snprintf(m.pci, sizeof m.pci, "0000:%02x:00.0", 0x17 + rank);
  for (int i = 0; i < NG_IPC_HANDLE_BYTES; i++)
    m.handle[i] = (unsigned char)(i * 7 + rank);
  return m;
}

static void test_record_layout(void) {
  const int64_t hot = 5000000001LL; /* beyond 32 bits */
  ng_part_msg m = sample_msg(1, 3, hot), back;
  unsigned char b[NG_PART_MSG_BYTES];
  ng__part_msg_pack(b, &m);
  /* The documented layout, byte by byte. */
  EXPECT_TRUE(memcmp(b, "ngpc", 4) == 0);
  EXPECT_EQ_I(b[4] | b[5] << 8, NG_PART_MSG_VERSION);
  EXPECT_EQ_I(b[6], 1);
  EXPECT_EQ_I(b[8], 1);
  EXPECT_EQ_I(b[12], 3);
  int64_t h = 0;
  for (int i = 7; i >= 0; i--)
    h = h << 8 | b[16 + i];
  EXPECT_EQ_I(h, hot);
  EXPECT_EQ_I(b[24], (unsigned char)m.part_rows);
  EXPECT_STR((const char *)b + 32, "0000:18:00.0");
  EXPECT_TRUE(memcmp(b + 64, m.handle, NG_IPC_HANDLE_BYTES) == 0);
  EXPECT_OK(ng__part_msg_unpack(&back, b, 1, 3, hot));
  EXPECT_EQ_I(back.ok, 1);
  EXPECT_EQ_I(back.part_rows, m.part_rows);
  EXPECT_STR(back.pci, m.pci);
  EXPECT_TRUE(memcmp(back.handle, m.handle, NG_IPC_HANDLE_BYTES) == 0);

  /* What does not match is refused, naming it. */
  EXPECT_STATUS(ng__part_msg_unpack(&back, b, 2, 3, hot), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("record 2 comes from rank 1");
  EXPECT_STATUS(ng__part_msg_unpack(&back, b, 1, 2, hot), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("in 3 parts");
  EXPECT_STATUS(ng__part_msg_unpack(&back, b, 1, 3, hot - 1), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("hot set is 5000000001 rows");
  m.part_rows++;
  ng__part_msg_pack(b, &m);
  EXPECT_STATUS(ng__part_msg_unpack(&back, b, 1, 3, hot), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("holds");
  m.ok = 0; /* a rank that failed says so; its row count is not checked */
  ng__part_msg_pack(b, &m);
  EXPECT_OK(ng__part_msg_unpack(&back, b, 1, 3, hot));
  EXPECT_EQ_I(back.ok, 0);
  b[0] ^= 0xff;
  EXPECT_STATUS(ng__part_msg_unpack(&back, b, 1, 3, hot), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("magic");
}

/* ==== the rule ==== */

static ng_cache_inputs inputs(ng_cache_placement req) {
  ng_cache_inputs in;
  memset(&in, 0, sizeof in);
  in.requested = req;
  in.ranks = in.local_ranks = 2;
  in.device = true;
  in.nodes = 1000000;
  in.hot = 100000;
  in.share_h = 0.30;
  in.share_rh = 0.41;
  in.shares_known = true;
  return in;
}

static ng_cache_go decide(const ng_cache_inputs *in, char *why) {
  return ng__cache_decide(in, why, 256);
}

static void test_rule(void) {
  char why[256];
  ng_cache_inputs in = inputs(NG_CACHE_REPLICATED);
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);

  /* Partitioned asked for: tried, then kept when the peers open, else replicated. */
  in = inputs(NG_CACHE_PARTITIONED);
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_TRY);
  in.peer_tried = true;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  EXPECT_TRUE(strstr(why, "peer-to-peer") && strstr(why, "falling back"));
  in.peer_ok = true;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_PARTITIONED);
  in.share_rh = in.share_h; /* asked for: kept whatever the gain */
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_PARTITIONED);

  /* Ranks on several hosts: refused when asked for, replicated under auto. */
  in = inputs(NG_CACHE_PARTITIONED);
  in.ranks = 4;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REFUSE);
  EXPECT_TRUE(strstr(why, "one host (4 ranks, 2 on this host)") != NULL);
  in.requested = NG_CACHE_AUTO;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  in = inputs(NG_CACHE_PARTITIONED);
  in.ranks = in.local_ranks = NG_MAX_PARTS + 1;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REFUSE);

  /* One rank, or the CPU backend: nothing to partition. */
  in = inputs(NG_CACHE_PARTITIONED);
  in.ranks = in.local_ranks = 1;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  in = inputs(NG_CACHE_AUTO);
  in.device = false;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);

  /* Auto, condition 1: the table fits one GPU, or R x H rows gain under 5 points. */
  in = inputs(NG_CACHE_AUTO);
  in.hot = in.nodes;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  EXPECT_TRUE(strstr(why, "fits one GPU") != NULL);
  in = inputs(NG_CACHE_AUTO);
  in.share_rh = in.share_h + 0.049;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  EXPECT_TRUE(strstr(why, "less than 5 points") != NULL);

  /* Condition 2 from measured rates: peer > 2 x H2D. */
  in = inputs(NG_CACHE_AUTO);
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_TRY);
  in.peer_tried = in.peer_ok = true;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_MEASURE);
  in.bench_p2p = true;
  in.h2d_gbs = 25.0;
  in.peer_gbs = 50.0; /* exactly 2x: not a clear win */
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  EXPECT_TRUE(strstr(why, "50.0 GB/s") && strstr(why, "25.0 GB/s"));
  in.peer_gbs = 150.0;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_PARTITIONED);
  EXPECT_TRUE(strstr(why, "41.0%") && strstr(why, "30.0%") && strstr(why, "150.0 GB/s"));

  /* Rates from a bench_floor file decide before anything is set up; copies through the host
   * (no P2P) never pay. */
  in = inputs(NG_CACHE_AUTO);
  in.peer_gbs = 300.0;
  in.h2d_gbs = 50.0;
  in.bench_p2p = false;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  EXPECT_TRUE(strstr(why, "through the host") != NULL);
  in.bench_p2p = true;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_TRY);
  in.peer_tried = true; /* P2P refused at set-up: replicated even with good rates */
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_REPLICATED);
  in.peer_ok = true;
  EXPECT_EQ_I(decide(&in, why), NG_CACHE_GO_PARTITIONED);
}

/* ==== the hit-rate scan and the bench file ==== */

static void test_entry_shares(void) {
  /* Rows: 0 -> {0, 1, 2, 3}, 1 -> {0, 4}, 2 -> {5}, 3 -> {}, 4 -> {0, 0}: 9 entries. */
  int64_t indptr[] = {0, 4, 6, 7, 7, 9};
  int32_t idx[] = {0, 1, 2, 3, 0, 4, 5, 0, 0};
  ng_csr g = {6, 9, indptr, idx, NULL};
  double a = 0, b = 0;
  ng__cache_entry_shares(&g, 1, 3, 0, &a, &b);
  EXPECT_NEAR(a, 4.0 / 9.0, 1e-12);            /* entries < 1: the four 0s */
  EXPECT_NEAR(b, 6.0 / 9.0, 1e-12);            /* entries < 3 */
  ng__cache_entry_shares(&g, 1, 3, 3, &a, &b); /* stride 3: entries 0, 3, 6 = {0, 3, 5} */
  EXPECT_NEAR(a, 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(b, 1.0 / 3.0, 1e-12);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  EXPECT_TRUE(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static void test_bench_file(void) {
  double peer = 0, h2d = 0;
  bool p2p = false;
  const char *path = ng_test_path("floor.json");
  write_file(path, "{\n  \"device\": \"NVIDIA H100\",\n  \"h2d_gbs\": 52.5,\n  \"peer_gbs\": "
                   "310.25,\n  \"peer_p2p\": true,\n  \"gpu_zcopy_gbs\": 49\n}\n");
  EXPECT_OK(ng__cache_bench_read(path, &peer, &h2d, &p2p));
  EXPECT_NEAR(peer, 310.25, 0);
  EXPECT_NEAR(h2d, 52.5, 0);
  EXPECT_TRUE(p2p);
  write_file(path, "{\"h2d_gbs\": 25, \"peer_gbs\": 20, \"peer_p2p\": false, \"x\": true}");
  EXPECT_OK(ng__cache_bench_read(path, &peer, &h2d, &p2p));
  EXPECT_TRUE(!p2p);
  write_file(path, "{\"h2d_gbs\": 25, \"peer_gbs\": null}"); /* one GPU: no peer rate */
  EXPECT_STATUS(ng__cache_bench_read(path, &peer, &h2d, &p2p), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("peer_gbs");
  EXPECT_STATUS(ng__cache_bench_read(ng_test_path("missing.json"), &peer, &h2d, &p2p), NG_ERR_IO);
  EXPECT_ERR_HAS("missing.json");
  /* The public reader (train's scaling floor reads the DRAM rate through it): the largest
   * cpu_alone_gbs over the thread counts, 0 for what the file lacks. */
  path = ng_test_path("floor.json"); /* the missing file's name reused the buffer */
  write_file(path, "{\"h2d_gbs\": 25, \"threads\": [{\"threads\": 1, \"cpu_alone_gbs\": 5.5},"
                   " {\"threads\": 4, \"cpu_alone_gbs\": 20.25}, {\"threads\": 8, "
                   "\"cpu_alone_gbs\": 19}]}");
  ng_bench_rates r = NG_BENCH_RATES_INIT;
  EXPECT_OK(ng_bench_rates_read(&r, path));
  EXPECT_NEAR(r.dram_gbs, 20.25, 0);
  EXPECT_NEAR(r.h2d_gbs, 25, 0);
  EXPECT_NEAR(r.peer_gbs, 0, 0);
  EXPECT_TRUE(r.peer_p2p == 0);
  EXPECT_TRUE(r.size == sizeof r);
  /* An older caller's smaller struct gets only its own fields. */
  struct {
    ng_bench_rates r;
    double guard;
  } old = {.r = NG_BENCH_RATES_INIT, .guard = -7.0};
  old.r.size = offsetof(ng_bench_rates, dram_gbs);
  old.r.dram_gbs = -3.0;
  EXPECT_OK(ng_bench_rates_read(&old.r, path));
  EXPECT_NEAR(old.r.h2d_gbs, 25, 0);
  EXPECT_NEAR(old.r.dram_gbs, -3.0, 0);
  EXPECT_NEAR(old.guard, -7.0, 0);
  write_file(path, "not json");
  r = (ng_bench_rates)NG_BENCH_RATES_INIT;
  EXPECT_OK(ng_bench_rates_read(&r, path));
  EXPECT_NEAR(r.dram_gbs, 0, 0);
  r.size = 0;
  EXPECT_STATUS(ng_bench_rates_read(&r, path), NG_ERR_INVALID_ARG);
  r.size = sizeof r;
  EXPECT_STATUS(ng_bench_rates_read(&r, ng_test_path("absent.json")), NG_ERR_IO);
  EXPECT_ERR_HAS("absent.json");
}

/* ==== the input layer: partitioned against replicated, same hot set ==== */

typedef struct {
  void *p;
  size_t cap;
  size_t asked; /* the last plan's bytes */
} host_buf;

/* Plans the package of `mb`, makes `b` hold it and fills it there, as the pipeline does with a
 * staging slot. */
static ng_status fetch_into(ng_fetch_pkg *pkg, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                            float drop_p, uint64_t key, ng_fetch_scratch *sc, host_buf *b) {
  ng_fetch_plan plan;
  NG_CHECK(ng__fetch_plan(&plan, cfg, mb, drop_p, sc));
  b->asked = plan.bytes;
  if (plan.bytes > b->cap) {
    free(b->p);
    b->p = aligned_alloc(64, (plan.bytes + 63) & ~(size_t)63);
    b->cap = b->p ? plan.bytes : 0;
    if (!b->p)
      return NG_ERR_NOMEM;
  }
  return ng__fetch_fill(pkg, &plan, cfg, mb, key, sc, b->p);
}

enum { NODES = 3000, DIM = 24, TARGETS = 200 };

/* The input layer's aggregation and self rows of `mb` through store `st` (CPU backend: the
 * package is its own device view). */
static void input_of(ng_store *st, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                     const ng_aggr *ag, float drop_p, uint64_t key, float *agg, float *self,
                     int64_t *n_hot_rows) {
  ng_fetch_scratch sc;
  memset(&sc, 0, sizeof sc);
  host_buf buf = {NULL, 0, 0};
  ng_fetch_pkg pkg;
  EXPECT_OK(fetch_into(&pkg, cfg, mb, drop_p, key, &sc, &buf));
  *n_hot_rows = pkg.n_hot_rows;
  /* The plan alone (the runtime sizes its staging slots by it) gives the same bytes again, and
   * the package fits them, in every strategy, precision, dropout and hot list. */
  ng_fetch_plan dry;
  ng_fetch_scratch dry_sc;
  memset(&dry_sc, 0, sizeof dry_sc);
  EXPECT_OK(ng__fetch_plan(&dry, cfg, mb, drop_p, &dry_sc));
  ng__fetch_scratch_free(&dry_sc);
  EXPECT_TRUE(dry.bytes == buf.asked && dry.bytes >= pkg.bytes && dry.bytes > 0);
  if (cfg->hot_gather) { /* the list: each hot local node once, in local order */
    int64_t k = 0, bad = 0;
    for (int32_t s = 0; s < mb->blocks[0].n_src; s++)
      if (mb->node_ids[s] < cfg->hot)
        bad += k >= pkg.n_hot_rows || pkg.hot_ids[k++] != mb->node_ids[s];
    EXPECT_EQ_I(bad, 0);
    EXPECT_EQ_I(k, pkg.n_hot_rows);
  } else {
    EXPECT_TRUE(pkg.hot_ids == NULL && pkg.n_hot_rows == 0);
  }
  const float *a = NULL, *s = NULL;
  EXPECT_OK(ng__store_input(st, ag, &pkg, drop_p, key, -1, &a, &s));
  const size_t bytes = (size_t)pkg.n_dst * DIM * sizeof(float);
  if (a && s) {
    memcpy(agg, a, bytes);
    memcpy(self, s, bytes);
  }
  free(buf.p);
  ng__fetch_scratch_free(&sc);
}

typedef struct {
  const char *name;
  ng_aggr ag;
  bool gcn;
  float drop_p;
} agg_case;

static void test_input_bits(void) {
  ng_backend *be = NULL;
  EXPECT_OK(ng__backend_cpu_create(&be, 2));
  if (!be)
    return;
  ng_csr g;
  ng_test_random_graph(&g, NODES, 11);
  ng_rng r;
  ng_rng_seed(&r, 5);
  float *x = ng_test_rand_floats(&r, (int64_t)NODES * DIM);
  uint16_t *x16 = malloc((size_t)NODES * DIM * sizeof *x16);
  for (int64_t i = 0; i < (int64_t)NODES * DIM; i++)
    x16[i] = ng_f32_to_bf16(x[i]);
  int32_t *labels = calloc(NODES, sizeof *labels);
  int64_t targets[TARGETS];
  ng_test_pick_targets(targets, TARGETS, NODES, 3);
  ng_sample_arena *arena = NULL;
  EXPECT_OK(ng__sample_arena_create(&arena));
  const agg_case cases[] = {
      {"mean, dropout 0.5", {.reduce = NG_REDUCE_SUM, .mean = true}, false, 0.5f},
      {"gcn, dropout 0.3",
       {.reduce = NG_REDUCE_SUM, .weighted = true, .self_loop = true},
       true,
       0.3f},
      {"max", {.reduce = NG_REDUCE_MAX}, false, 0.0f},
  };
  const ng_fetch modes[] = {NG_FETCH_BATCH, NG_FETCH_PARTIAL};
  const int64_t hots[] = {0, 1, 500, NODES}; /* the hot set R x H */
  const int counts[] = {2, 3};
  const size_t out_bytes = (size_t)TARGETS * DIM * sizeof(float);
  float *ref_a = malloc(out_bytes), *ref_s = malloc(out_bytes);
  float *got_a = malloc(out_bytes), *got_s = malloc(out_bytes);
  int compared = 0;
  for (size_t c = 0; c < NG_ARRAY_LEN(cases) && arena; c++) {
    ng_sampler_cfg sc = {.graph = &g, .n_layers = 1, .fanout = {6}, .gcn_weights = {cases[c].gcn}};
    ng_minibatch mb;
    EXPECT_OK(ng__sample(&mb, arena, &sc, targets, TARGETS, 77));
    for (int bf = 0; bf < 2; bf++)
      for (size_t m = 0; m < NG_ARRAY_LEN(modes); m++)
        for (size_t h = 0; h < NG_ARRAY_LEN(hots); h++) {
          const int64_t hot = hots[h];
          ng_fetch_cfg cfg = {.mode = modes[m],
                              .hot = hot,
                              .features = x,
                              .features_bf16 = bf ? x16 : NULL,
                              .nodes = NODES,
                              .dim = DIM,
                              .ag = cases[c].ag,
                              .threads = 1,
                              .kernels = ng__cpu_kernels(ng__cpu_isa_best()),
                              .labels = labels};
          ng_store rep;
          if (bf)
            EXPECT_OK(ng__store_open_bf16(&rep, be, x16, NODES, DIM, hot, NG_FETCH_BATCH, false));
          else
            EXPECT_OK(ng__store_open(&rep, be, x, NODES, DIM, hot, NG_FETCH_BATCH, false));
          const uint64_t key = 0x5eed + c;
          int64_t n_rep = -1;
          input_of(&rep, &cfg, &mb, &cases[c].ag, cases[c].drop_p, key, ref_a, ref_s, &n_rep);
          ng__store_close(&rep);
          for (size_t k = 0; k < NG_ARRAY_LEN(counts); k++) {
            const int R = counts[k];
            ng_store parts[3];
            void *ptrs[NG_MAX_PARTS] = {NULL};
            for (int p = 0; p < R; p++) {
              EXPECT_OK(ng__store_open_part(&parts[p], be, bf ? (const void *)x16 : (const void *)x,
                                            bf ? 2 : 4, NODES, DIM, hot, R, p, NG_FETCH_BATCH,
                                            false));
              ptrs[p] = parts[p].cache_owned;
              EXPECT_EQ_I(parts[p].part_rows, ng__part_rows(hot, R, p));
            }
            /* Part p holds rows p, p + R, ...: its row i is table row i * R + p. */
            const size_t elem = bf ? 2 : 4;
            int wrong = 0;
            for (int p = 0; p < R; p++)
              for (int64_t i = 0; i < parts[p].part_rows; i++)
                wrong += memcmp((const char *)ptrs[p] + (size_t)i * DIM * elem,
                                (bf ? (const char *)x16 : (const char *)x) +
                                    (size_t)(i * R + p) * DIM * elem,
                                DIM * elem) != 0;
            EXPECT_EQ_I(wrong, 0);
            for (int p = 0; p < R; p++) { /* every rank's view gives the same bits */
              ng__store_part_attach(&parts[p], ptrs, false);
              ng_fetch_cfg pc = cfg;
              pc.hot_gather = true;
              int64_t n_hot = -1;
              memset(got_a, 0xff, out_bytes);
              input_of(&parts[p], &pc, &mb, &cases[c].ag, cases[c].drop_p, key, got_a, got_s,
                       &n_hot);
              const bool same =
                  memcmp(got_a, ref_a, out_bytes) == 0 && memcmp(got_s, ref_s, out_bytes) == 0;
              if (!same)
                ng_test_fail(__FILE__, __LINE__,
                             "%s, %s, %s, hot %lld, %d parts (view of part %d): the input layer "
                             "differs from the replicated store's",
                             cases[c].name, ng_fetch_name(modes[m]), bf ? "bf16" : "fp32",
                             (long long)hot, R, p);
              compared++;
            }
            for (int p = 0; p < R; p++)
              ng__store_close(&parts[p]);
          }
        }
  }
  EXPECT_EQ_I(compared, 3 * 2 * 2 * 4 * 5);
  /* A partitioned store refuses packages without the list, and parts left unattached. */
  ng_store lone;
  EXPECT_OK(ng__store_open_part(&lone, be, x, 4, NODES, DIM, 100, 2, 0, NG_FETCH_BATCH, false));
  {
    ng_sampler_cfg sc = {.graph = &g, .n_layers = 1, .fanout = {6}};
    ng_minibatch mb;
    EXPECT_OK(ng__sample(&mb, arena, &sc, targets, TARGETS, 77));
    ng_fetch_cfg cfg = {.mode = NG_FETCH_BATCH,
                        .hot = 100,
                        .features = x,
                        .nodes = NODES,
                        .dim = DIM,
                        .ag = cases[0].ag,
                        .threads = 1,
                        .kernels = ng__cpu_kernels(ng__cpu_isa_best()),
                        .labels = labels,
                        .hot_gather = true};
    ng_fetch_scratch scr;
    memset(&scr, 0, sizeof scr);
    host_buf buf = {NULL, 0, 0};
    ng_fetch_pkg pkg;
    EXPECT_OK(fetch_into(&pkg, &cfg, &mb, 0.0f, 0, &scr, &buf));
    const float *a, *s;
    EXPECT_STATUS(ng__store_input(&lone, &cases[0].ag, &pkg, 0.0f, 0, -1, &a, &s), NG_ERR_STATE);
    EXPECT_ERR_HAS("part 1 of the hot tier is not attached");
    free(buf.p);
    ng__fetch_scratch_free(&scr);
  }
  ng__store_close(&lone);
  EXPECT_STATUS(ng__store_open_part(&lone, be, x, 4, NODES, DIM, 100, 2, 2, NG_FETCH_BATCH, false),
                NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("part 2 of 2 parts");
  free(ref_a);
  free(ref_s);
  free(got_a);
  free(got_s);
  ng__sample_arena_destroy(arena);
  free(labels);
  free(x16);
  free(x);
  ng__csr_free(&g);
  ng__backend_destroy(be);
}

/* PARTIAL's package holds the host's partial states only when the host reduces a cold edge:
 * with every row hot it is BATCH's layout, byte for byte the same size, with no state, and the
 * input layer's bits are BATCH's; with cold rows every host destination has its state. */
static void test_partial_states(void) {
  ng_backend *be = NULL;
  EXPECT_OK(ng__backend_cpu_create(&be, 1));
  if (!be)
    return;
  ng_csr g;
  ng_test_random_graph(&g, NODES, 13);
  ng_rng r;
  ng_rng_seed(&r, 9);
  float *x = ng_test_rand_floats(&r, (int64_t)NODES * DIM);
  int32_t *labels = calloc(NODES, sizeof *labels);
  int64_t targets[TARGETS];
  ng_test_pick_targets(targets, TARGETS, NODES, 4);
  ng_sample_arena *arena = NULL;
  EXPECT_OK(ng__sample_arena_create(&arena));
  const ng_aggr ag = {.reduce = NG_REDUCE_SUM, .mean = true};
  ng_sampler_cfg sc = {.graph = &g, .n_layers = 1, .fanout = {6}};
  ng_minibatch mb;
  if (arena)
    EXPECT_OK(ng__sample(&mb, arena, &sc, targets, TARGETS, 31));
  const int64_t hots[] = {NODES, 500, 0};
  const size_t out_bytes = (size_t)TARGETS * DIM * sizeof(float);
  float *a[2], *sf[2];
  for (int k = 0; k < 2; k++) {
    a[k] = malloc(out_bytes);
    sf[k] = malloc(out_bytes);
  }
  for (size_t h = 0; h < NG_ARRAY_LEN(hots) && arena; h++) {
    const ng_fetch modes[2] = {NG_FETCH_PARTIAL, NG_FETCH_BATCH};
    ng_fetch_pkg pkg[2];
    host_buf buf[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    ng_fetch_scratch scr[2];
    memset(scr, 0, sizeof scr);
    ng_store st;
    EXPECT_OK(ng__store_open(&st, be, x, NODES, DIM, hots[h], NG_FETCH_BATCH, false));
    for (int k = 0; k < 2; k++) {
      const ng_fetch_cfg cfg = {.mode = modes[k],
                                .hot = hots[h],
                                .features = x,
                                .nodes = NODES,
                                .dim = DIM,
                                .ag = ag,
                                .threads = 1,
                                .kernels = ng__cpu_kernels(ng__cpu_isa_best()),
                                .labels = labels};
      EXPECT_OK(fetch_into(&pkg[k], &cfg, &mb, 0.0f, 0, &scr[k], &buf[k]));
      const float *pa = NULL, *ps = NULL;
      EXPECT_OK(ng__store_input(&st, &ag, &pkg[k], 0.0f, 0, -1, &pa, &ps));
      if (pa && ps) {
        memcpy(a[k], pa, out_bytes);
        memcpy(sf[k], ps, out_bytes);
      }
    }
    const ng_fetch_pkg *p = &pkg[0];
    if (hots[h] == NODES) {
      EXPECT_TRUE(p->cold.nnz == 0 && p->cold_state.val == NULL && p->cold_state.count == NULL);
      EXPECT_EQ_I(p->cold_state.n_dst, 0);
      EXPECT_EQ_I((int64_t)p->bytes, (int64_t)pkg[1].bytes);
      EXPECT_TRUE(memcmp(a[0], a[1], out_bytes) == 0 && memcmp(sf[0], sf[1], out_bytes) == 0);
    } else {
      EXPECT_TRUE(p->cold.nnz > 0 && p->cold_state.val != NULL && p->cold_state.count != NULL);
      EXPECT_EQ_I(p->cold_state.n_dst, p->n_dst);
      EXPECT_TRUE(p->bytes >= (size_t)p->n_dst * (DIM + 1) * sizeof(float)); /* the states */
    }
    ng__store_close(&st);
    for (int k = 0; k < 2; k++) {
      free(buf[k].p);
      ng__fetch_scratch_free(&scr[k]);
    }
  }
  for (int k = 0; k < 2; k++) {
    free(a[k]);
    free(sf[k]);
  }
  ng__sample_arena_destroy(arena);
  free(labels);
  free(x);
  ng__csr_free(&g);
  ng__backend_destroy(be);
}

int main(void) {
  RUN_TEST(test_ownership);
  RUN_TEST(test_record_layout);
  RUN_TEST(test_rule);
  RUN_TEST(test_entry_shares);
  RUN_TEST(test_bench_file);
  RUN_TEST(test_input_bits);
  RUN_TEST(test_partial_states);
  return ng_test_summary();
}
