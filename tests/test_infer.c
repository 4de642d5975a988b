/* Layer-wise full-neighbour inference (runtime/infer.c): bit for bit what a full-neighbour
 * mini-batch forward of each node alone gives, for every node and for node subsets (their
 * receptive field only), with intermediate layers in memory or in memory-mapped temporary
 * files; and the public ng_trainer_embed against ng_trainer_predict and evaluate. */
#include "ng_test.h"
#include "ng_test_fetch.h"
#include "ng_test_graph.h"

#include "dataset_impl.h"
#include "infer_impl.h"
#include "ng_cpu.h"

#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Cora, converted on the first call and opened again on the next ones. */
static ng_dataset_t cora(void) {
  static bool converted = false;
  if (!converted) {
    converted = true;
    return ng_test_fetch_cora();
  }
  return ng_test_open_ok(ng_test_path("cora"));
}

/* A model on the CPU backend with random parameters (biases too), from `seed`. */
typedef struct {
  ng_backend *be;
  ng_model_exec ex;
} cpu_model;

static void model_open(cpu_model *cm, ng_model_t m, uint64_t seed) {
  EXPECT_OK(ng__backend_cpu_create(&cm->be, 0));
  EXPECT_OK(ng__exec_create(&cm->ex, m, cm->be, seed));
  ng_rng r;
  ng_rng_seed(&r, seed);
  for (int64_t i = 0; i < m->n_params; i++)
    cm->ex.params[i] = (ng_test_frand(&r) - 0.5f) * 0.5f;
}

static void model_close(cpu_model *cm) {
  ng__exec_destroy(&cm->ex);
  ng__backend_destroy(cm->be);
}

/* The reference: node v alone, its full `layer + 1`-hop neighbourhood sampled as one
 * mini-batch, each block's layer computed on the one below (the forward pass of a mini-batch,
 * without dropout), into out[dim]. */
static void reference_node(float *out, cpu_model *cm, const ng_csr *g, const float *features,
                           int layer, int64_t v) {
  const struct ng_model *m = cm->ex.model;
  ng_sampler_cfg cfg = {.graph = g, .n_layers = layer + 1};
  for (int l = 0; l <= layer; l++) {
    cfg.fanout[l] = -1;
    cfg.gcn_weights[l] = m->layers[l].ag.weighted || m->layers[l].ag.self_loop;
  }
  ng_sample_arena *arena = NULL;
  EXPECT_OK(ng__sample_arena_create(&arena));
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, arena, &cfg, &v, 1, 0));
  const ng_block *b0 = &mb.blocks[0];
  float *h = ng_test_xmalloc((size_t)b0->n_src * (size_t)m->in_dim * sizeof(float));
  for (int32_t i = 0; i < b0->n_src; i++)
    memcpy(h + (int64_t)i * m->in_dim, features + mb.node_ids[i] * m->in_dim,
           (size_t)m->in_dim * sizeof(float));
  for (int l = 0; l <= layer; l++) {
    const ng_block *b = &mb.blocks[l];
    float *o = ng_test_xmalloc((size_t)b->n_dst * (size_t)m->layers[l].out_dim * sizeof(float));
    EXPECT_OK(ng__exec_layer_eval(&cm->ex, l, b, h, o));
    free(h);
    h = o;
  }
  memcpy(out, h, (size_t)m->layers[layer].out_dim * sizeof(float));
  free(h);
  ng__sample_arena_destroy(arena);
}

static ng_infer_ctx ctx_of(cpu_model *cm, ng_dataset_t ds, int64_t chunk, int64_t host_bytes) {
  return (ng_infer_ctx){.ex = &cm->ex,
                        .graph = &ds->csr,
                        .features = ds->features,
                        .threads = 2,
                        .chunk = chunk,
                        .host_bytes = host_bytes,
                        .temp_dir = ng_test_tmpdir()};
}

/* Bit-compares `got` [n, dim] with the reference of each node (every `stride`-th checked). */
static void expect_reference(const float *got, cpu_model *cm, ng_dataset_t ds, int layer,
                             const int64_t *ids, int64_t n, int64_t stride) {
  const int64_t dim = cm->ex.model->layers[layer].out_dim;
  float *want = ng_test_xmalloc((size_t)dim * sizeof(float));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i += stride) {
    const int64_t v = ids ? ids[i] : i;
    reference_node(want, cm, &ds->csr, ds->features, layer, v);
    if (memcmp(want, got + i * dim, (size_t)dim * sizeof(float)) != 0 && bad++ < 3) {
      int64_t c = 0;
      while (c < dim && memcmp(&want[c], &got[i * dim + c], sizeof(float)) == 0)
        c++;
      ng_test_fail(__FILE__, __LINE__, "layer %d node %lld column %lld: %.9g, alone %.9g", layer,
                   (long long)v, (long long)c, got[i * dim + c], want[c]);
    }
  }
  EXPECT_EQ_I(bad, 0);
  free(want);
}

/* Every node of Cora through a 2-layer GraphSAGE-mean model, chunk 500 (six chunks, the last
 * short): each node's logits bit for bit those of the node alone. */
static void test_cora_all_nodes_bitwise(void) {
  ng_dataset_t ds = cora();
  ng_model_t m = ng_test_cora_sage();
  cpu_model cm;
  model_open(&cm, m, 5);
  const int64_t nodes = ds->info.nodes, classes = 7;
  float *out = ng_test_xmalloc((size_t)nodes * classes * sizeof(float));
  for (int64_t i = 0; i < nodes * classes; i++)
    out[i] = NAN; /* poisoned */
  ng_infer_ctx c = ctx_of(&cm, ds, 500, NG_INFER_HOST_BYTES_DEFAULT);
  ng_infer_stats s;
  EXPECT_OK(ng__infer(out, &c, 1, NULL, nodes, &s));
  EXPECT_EQ_I(s.rows[0], nodes);
  EXPECT_EQ_I(s.rows[1], nodes);
  EXPECT_EQ_I(s.chunks, 2 * ((nodes + 499) / 500));
  EXPECT_EQ_I(s.file_bytes, 0);
  expect_reference(out, &cm, ds, 1, NULL, nodes, 7);
  /* The hidden layer (embeddings) too. */
  float *hid = ng_test_xmalloc((size_t)nodes * 16 * sizeof(float));
  EXPECT_OK(ng__infer(hid, &c, 0, NULL, nodes, NULL));
  expect_reference(hid, &cm, ds, 0, NULL, nodes, 13);
  /* Another chunk size and intermediate layers in a temporary file: the same bits. */
  float *again = ng_test_xmalloc((size_t)nodes * classes * sizeof(float));
  c = ctx_of(&cm, ds, 97, -1);
  EXPECT_OK(ng__infer(again, &c, 1, NULL, nodes, &s));
  EXPECT_TRUE(s.file_bytes > 0);
  EXPECT_TRUE(memcmp(out, again, (size_t)nodes * classes * sizeof(float)) == 0);
  /* The temporary file is gone. */
  DIR *d = opendir(ng_test_tmpdir());
  bool left = false;
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d))
    left |= strstr(e->d_name, "neargnn-infer") != NULL;
  if (d)
    closedir(d);
  EXPECT_TRUE(!left);
  free(out);
  free(hid);
  free(again);
  model_close(&cm);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* A generated power-law graph and a 3-layer model (GCN, and GraphSAGE with max): a few nodes,
 * unsorted with a repeat, need only their receptive field, and get the bits of the nodes alone
 * and of the same rows of an all-node run. */
static void test_subset_receptive_field(void) {
  const char *dir = ng_test_path("gen");
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.nodes = 6000;
  g.avg_degree = 4;
  g.feature_dim = 24;
  g.classes = 5;
  g.seed = 3;
  EXPECT_OK(ng_dataset_generate(dir, &g));
  ng_dataset_t ds = ng_test_open_ok(dir);
  const int64_t nodes = ds->info.nodes;
  for (int kind = 0; kind < 2; kind++) {
    ng_model_t m = NULL;
    EXPECT_OK(ng_model_create(&m, kind ? NG_MODEL_SAGE : NG_MODEL_GCN, 24));
    for (int l = 0; l < 3; l++) {
      ng_layer_opts lo = NG_LAYER_OPTS_INIT;
      lo.out_dim = l == 2 ? 5 : 12;
      lo.activation = l == 2 ? NG_ACT_NONE : NG_ACT_RELU;
      lo.aggregator = kind ? NG_AGGREGATOR_MAX : NG_AGGREGATOR_GCN;
      EXPECT_OK(ng_model_add_layer(m, &lo));
    }
    cpu_model cm;
    model_open(&cm, m, 11 + (uint64_t)kind);
    const int64_t ids[] = {4321, 17, 5999, 17, 0, 2500};
    const int64_t n = (int64_t)NG_ARRAY_LEN(ids);
    float sub[6 * 5];
    ng_infer_ctx c = ctx_of(&cm, ds, 64, -1);
    ng_infer_stats s;
    EXPECT_OK(ng__infer(sub, &c, 2, ids, n, &s));
    EXPECT_EQ_I(s.rows[2], 5); /* distinct targets */
    EXPECT_TRUE(s.rows[1] > s.rows[2] && s.rows[1] < nodes);
    EXPECT_TRUE(s.rows[0] >= s.rows[1]);
    expect_reference(sub, &cm, ds, 2, ids, n, 1);
    float *all = ng_test_xmalloc((size_t)nodes * 5 * sizeof(float));
    c = ctx_of(&cm, ds, 1000, NG_INFER_HOST_BYTES_DEFAULT);
    EXPECT_OK(ng__infer(all, &c, 2, NULL, nodes, &s));
    EXPECT_EQ_I(s.rows[0], nodes);
    for (int64_t i = 0; i < n; i++)
      EXPECT_TRUE(memcmp(&sub[i * 5], &all[ids[i] * 5], 5 * sizeof(float)) == 0);
    expect_reference(all, &cm, ds, 2, NULL, nodes, 211);
    /* Targets sorted and distinct (link evaluation's): the last layer writes the caller's rows
     * in place, with no temporary file for its output, and the bits are the same. */
    const int64_t sorted_ids[] = {0, 17, 2500, 4321, 5999};
    float sub2[5 * 5];
    ng_infer_stats s_sorted, s_any;
    c = ctx_of(&cm, ds, 64, -1);
    EXPECT_OK(ng__infer(sub2, &c, 2, sorted_ids, 5, &s_sorted));
    EXPECT_OK(ng__infer(sub, &c, 2, ids, n, &s_any));
    EXPECT_TRUE(s_sorted.file_bytes < s_any.file_bytes);
    for (int64_t i = 0; i < 5; i++)
      EXPECT_TRUE(memcmp(&sub2[i * 5], &all[sorted_ids[i] * 5], 5 * sizeof(float)) == 0);
    /* Out-of-range ids are refused. */
    const int64_t badid = nodes;
    EXPECT_STATUS(ng__infer(sub, &c, 2, &badid, 1, NULL), NG_ERR_INVALID_ARG);
    free(all);
    model_close(&cm);
    ng_model_destroy(m);
  }
  ng_dataset_close(ds);
}

/* The producers (several chunks sampled and gathered at once, by any number of threads) never
 * change a bit: a generated graph through 3-layer GraphSAGE-mean (the in-place path) and GAT
 * (the gather path), every node and a subset, for thread counts 1, 2 and 4, producer counts 1
 * to 5 and several chunk sizes. The device paths run too, on the CPU backend whose ops stand in
 * for a GPU's: staged blocks and rows, the cold input rows uploaded once, intermediate layers
 * resident in "device" memory (all of them, or as many as a small budget holds, the others in
 * host memory or a file): the same bits as the in-place path and as each node alone. */
static void test_threads_and_device_paths(void) {
  const char *dir = ng_test_path("gen-threads");
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.nodes = 5000;
  g.avg_degree = 6;
  g.feature_dim = 20;
  g.classes = 4;
  g.seed = 9;
  EXPECT_OK(ng_dataset_generate(dir, &g));
  ng_dataset_t ds = ng_test_open_ok(dir);
  const int64_t nodes = ds->info.nodes, classes = 4, hidden = 16;
  const int64_t ids[] = {4999, 12, 2500, 12, 700};
  const int64_t n_ids = (int64_t)NG_ARRAY_LEN(ids);
  for (int kind = 0; kind < 2; kind++) {
    ng_model_t m = NULL;
    EXPECT_OK(ng_model_create(&m, kind ? NG_MODEL_GAT : NG_MODEL_SAGE, 20));
    for (int l = 0; l < 3; l++) {
      ng_layer_opts lo = NG_LAYER_OPTS_INIT;
      lo.out_dim = l == 2 ? classes : hidden;
      lo.activation = l == 2 ? NG_ACT_NONE : NG_ACT_RELU;
      lo.aggregator = kind ? NG_AGGREGATOR_SUM : NG_AGGREGATOR_MEAN;
      if (kind) {
        lo.heads = l == 2 ? 1 : 2;
        lo.combine = l == 2 ? NG_HEADS_MEAN : NG_HEADS_CONCAT;
      }
      EXPECT_OK(ng_model_add_layer(m, &lo));
    }
    cpu_model cm;
    model_open(&cm, m, 21 + (uint64_t)kind);
    const size_t bytes = (size_t)nodes * (size_t)classes * sizeof(float);
    float *want = ng_test_xmalloc(bytes), *got = ng_test_xmalloc(bytes);
    ng_infer_ctx c = ctx_of(&cm, ds, 512, NG_INFER_HOST_BYTES_DEFAULT);
    c.threads = 1;
    c.producers = 1;
    ng_infer_stats s;
    EXPECT_OK(ng__infer(want, &c, 2, NULL, nodes, &s));
    EXPECT_EQ_I(s.producers, 1);
    expect_reference(want, &cm, ds, 2, NULL, nodes, 397);
    float sub_want[5 * 4], sub[5 * 4];
    for (int64_t i = 0; i < n_ids; i++)
      memcpy(&sub_want[i * classes], &want[ids[i] * classes], (size_t)classes * sizeof(float));
    /* threads, producers, chunk, device paths, device bytes (0: all resident), host bytes */
    const struct {
      int threads, producers;
      int64_t chunk;
      bool dev;
      int64_t dev_bytes, host_bytes;
    } cases[] = {
        {2, 3, 97, false, 0, NG_INFER_HOST_BYTES_DEFAULT},
        {4, 5, 333, false, 0, -1},
        {1, 4, 4096, false, 0, NG_INFER_HOST_BYTES_DEFAULT},
        {2, 2, 250, true, -1, NG_INFER_HOST_BYTES_DEFAULT}, /* staged rows, host layers */
        {4, 5, 97, true, 0, NG_INFER_HOST_BYTES_DEFAULT},   /* every layer resident */
        {2, 3, 700, true, nodes * hidden * 4 + 1, -1}, /* layer 0 resident, layer 1 in a file */
    };
    for (size_t k = 0; k < NG_ARRAY_LEN(cases); k++) {
      for (int64_t i = 0; i < nodes * classes; i++)
        got[i] = NAN; /* poisoned */
      c = ctx_of(&cm, ds, cases[k].chunk, cases[k].host_bytes);
      c.threads = cases[k].threads;
      c.producers = cases[k].producers;
      c.device_paths = cases[k].dev;
      c.device_bytes = cases[k].dev_bytes;
      EXPECT_OK(ng__infer(got, &c, 2, NULL, nodes, &s));
      EXPECT_EQ_I(s.producers, cases[k].producers);
      EXPECT_EQ_I(s.slots, cases[k].producers + 2);
      EXPECT_EQ_I(s.chunks, 3 * ((nodes + cases[k].chunk - 1) / cases[k].chunk));
      for (int l = 0; l < 3; l++)
        EXPECT_TRUE(s.layer_s[l] >= s.device_s[l] && s.host_s[l] > 0.0);
      if (cases[k].dev && cases[k].dev_bytes == 0) /* the cold rows and both hidden layers */
        EXPECT_EQ_I(s.device_bytes, nodes * 20 * 4 + 2 * nodes * hidden * 4);
      else if (cases[k].dev && cases[k].dev_bytes > 0) /* layer 0's output alone, no upload */
        EXPECT_EQ_I(s.device_bytes, nodes * hidden * 4);
      else
        EXPECT_EQ_I(s.device_bytes, 0);
      if (memcmp(want, got, bytes) != 0)
        ng_test_fail(__FILE__, __LINE__, "%s case %zu: bits differ from threads 1, producers 1",
                     kind ? "gat" : "sage", k);
      for (int64_t i = 0; i < n_ids * classes; i++)
        sub[i] = NAN;
      EXPECT_OK(ng__infer(sub, &c, 2, ids, n_ids, &s));
      EXPECT_TRUE(memcmp(sub, sub_want, sizeof sub) == 0);
    }
    free(want);
    free(got);
    model_close(&cm);
    ng_model_destroy(m);
  }
  ng_dataset_close(ds);
}

/* Chunk 0 (the default): per layer, large chunks where the device reads the layer's input rows
 * itself (the cold rows uploaded, the previous layer resident), small ones on the host paths or
 * without device memory; the bits are those of fixed small chunks on the host paths. */
static void test_auto_chunk(void) {
  const char *dir = ng_test_path("gen-auto-chunk");
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.nodes = 20000;
  g.avg_degree = 5;
  g.feature_dim = 12;
  g.classes = 4;
  g.seed = 4;
  EXPECT_OK(ng_dataset_generate(dir, &g));
  ng_dataset_t ds = ng_test_open_ok(dir);
  const int64_t nodes = ds->info.nodes, classes = 4;
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 12));
  for (int l = 0; l < 3; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    lo.out_dim = l == 2 ? classes : 8;
    lo.activation = l == 2 ? NG_ACT_NONE : NG_ACT_RELU;
    EXPECT_OK(ng_model_add_layer(m, &lo));
  }
  cpu_model cm;
  model_open(&cm, m, 5);
  const size_t bytes = (size_t)nodes * (size_t)classes * sizeof(float);
  float *want = ng_test_xmalloc(bytes), *got = ng_test_xmalloc(bytes);
  const int threads0 = omp_get_max_threads();
  ng_infer_ctx c = ctx_of(&cm, ds, 700, NG_INFER_HOST_BYTES_DEFAULT);
  ng_infer_stats s;
  EXPECT_OK(ng__infer(want, &c, 2, NULL, nodes, &s));
  expect_reference(want, &cm, ds, 2, NULL, nodes, 1999);
  /* device paths, device bytes, the chunk expected per layer: with one producer, 20000 nodes
   * take 8192 (at least two chunks a producer and its queue), else 4096 */
  const struct {
    bool dev;
    int64_t dev_bytes, chunk;
  } cases[] = {
      {false, 0, NG_INFER_CHUNK_SMALL},    /* host paths: in place */
      {true, -1, NG_INFER_CHUNK_SMALL},    /* device paths, every row staged by the host */
      {true, 0, 2 * NG_INFER_CHUNK_SMALL}, /* the cold rows uploaded, both hidden layers resident */
  };
  for (size_t k = 0; k < NG_ARRAY_LEN(cases); k++) {
    for (int64_t i = 0; i < nodes * classes; i++)
      got[i] = NAN;
    c = ctx_of(&cm, ds, 0, NG_INFER_HOST_BYTES_DEFAULT);
    c.producers = 1;
    c.device_paths = cases[k].dev;
    c.device_bytes = cases[k].dev_bytes;
    EXPECT_OK(ng__infer(got, &c, 2, NULL, nodes, &s));
    for (int l = 0; l < 3; l++)
      EXPECT_EQ_I(s.chunk[l], cases[k].chunk);
    EXPECT_EQ_I(s.chunks, 3 * ((nodes + cases[k].chunk - 1) / cases[k].chunk));
    if (memcmp(want, got, bytes) != 0)
      ng_test_fail(__FILE__, __LINE__, "case %zu: bits differ from chunks of 700", k);
  }
  /* The CPU backend's team adapted per chunk (probes with two threads and with one): the bits
   * stay. Chunks of 97: several probe cycles a layer. */
  c = ctx_of(&cm, ds, 97, NG_INFER_HOST_BYTES_DEFAULT);
  c.adapt_threads = true;
  for (int64_t i = 0; i < nodes * classes; i++)
    got[i] = NAN;
  EXPECT_OK(ng__infer(got, &c, 2, NULL, nodes, &s));
  EXPECT_TRUE(memcmp(want, got, bytes) == 0);
  EXPECT_EQ_I(omp_get_max_threads(), threads0); /* restored */
  /* A given chunk is kept whatever the paths. */
  c = ctx_of(&cm, ds, 3000, NG_INFER_HOST_BYTES_DEFAULT);
  c.device_paths = true;
  EXPECT_OK(ng__infer(got, &c, 2, NULL, nodes, &s));
  EXPECT_EQ_I(s.chunk[0], 3000);
  EXPECT_EQ_I(s.chunk[2], 3000);
  EXPECT_TRUE(memcmp(want, got, bytes) == 0);
  free(want);
  free(got);
  model_close(&cm);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* The public API: embed's logits are predict's argmax, a subset equals the rows of every node,
 * evaluation's accuracy agrees with the argmax of embed on the split. */
static void test_trainer_embed(void) {
  ng_dataset_t ds = cora();
  ng_model_t m = ng_test_cora_sage();
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 256;
  o.seed = 3;
  o.threads = 2;
  o.eval_chunk = 300;
  o.temp_dir = ng_test_tmpdir();
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, ds, m, &o));
  ng_epoch_stats es = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&es, t));
  const int64_t nodes = ds->info.nodes;
  int64_t dim = 0;
  EXPECT_OK(ng_trainer_embed_dim(&dim, t, -1));
  EXPECT_EQ_I(dim, 7);
  EXPECT_OK(ng_trainer_embed_dim(&dim, t, 0));
  EXPECT_EQ_I(dim, 16);
  EXPECT_STATUS(ng_trainer_embed_dim(&dim, t, 2), NG_ERR_INVALID_ARG);
  float *logits = ng_test_xmalloc((size_t)nodes * 7 * sizeof(float));
  EXPECT_OK(ng_trainer_embed(logits, t, NULL, 0, NULL));
  /* Evaluation infers the split's receptive field only: the same accuracy as the argmax. */
  double acc = -1;
  EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_TEST));
  int32_t *pred = ng_test_xmalloc((size_t)nodes * sizeof(int32_t));
  EXPECT_OK(ng_trainer_predict(pred, t));
  int64_t agree = 0, correct = 0;
  for (int64_t v = 0; v < nodes; v++) {
    int32_t best = 0;
    for (int c = 1; c < 7; c++)
      if (logits[v * 7 + c] > logits[v * 7 + best])
        best = c;
    agree += best == pred[v];
  }
  EXPECT_EQ_I(agree, nodes);
  for (int64_t i = 0; i < ds->info.test; i++)
    correct += pred[ds->split[NG_SPLIT_TEST][i]] == ds->labels[ds->split[NG_SPLIT_TEST][i]];
  EXPECT_TRUE(fabs(acc - (double)correct / (double)ds->info.test) < 1e-12);
  /* A subset, through a temporary file, with the progress callback's phase. */
  const int64_t ids[] = {2707, 5, 1000};
  float sub[3 * 16];
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  io.layer = 0;
  io.host_bytes = -1;
  EXPECT_OK(ng_trainer_embed(sub, t, ids, 3, &io));
  float *hid = ng_test_xmalloc((size_t)nodes * 16 * sizeof(float));
  io.host_bytes = 0;
  io.chunk = 1000;
  EXPECT_OK(ng_trainer_embed(hid, t, NULL, 0, &io));
  for (int i = 0; i < 3; i++)
    EXPECT_TRUE(memcmp(&sub[i * 16], &hid[ids[i] * 16], 16 * sizeof(float)) == 0);
  io.layer = 5;
  EXPECT_STATUS(ng_trainer_embed(sub, t, ids, 3, &io), NG_ERR_INVALID_ARG);
  free(logits);
  free(pred);
  free(hid);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* The estimate adds up, grows with the workers and refuses a limit below it before allocating. */
static void test_memory_estimate(void) {
  ng_dataset_t ds = cora();
  ng_model_t m = ng_test_cora_sage();
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.workers = 1;
  ng_memory_estimate e1 = NG_MEMORY_ESTIMATE_INIT, e4 = NG_MEMORY_ESTIMATE_INIT;
  EXPECT_OK(ng_trainer_estimate_memory(&e1, ds, m, &o));
  EXPECT_EQ_I(e1.features, ds->info.nodes * 1433 * 4);
  EXPECT_EQ_I(e1.host_total, e1.features + e1.topology + e1.staging + e1.inference + e1.allowance);
  EXPECT_EQ_I(e1.workers, 1);
  EXPECT_TRUE(e1.package_bytes > 0 && e1.staging > e1.package_bytes);
  o.workers = 4;
  EXPECT_OK(ng_trainer_estimate_memory(&e4, ds, m, &o));
  EXPECT_TRUE(e4.staging > e1.staging);
  o.max_host_memory = e4.host_total - 1;
  ng_trainer_t t = NULL;
  EXPECT_STATUS(ng_trainer_create(&t, ds, m, &o), NG_ERR_NOMEM);
  EXPECT_ERR_HAS("--max-host-memory");
  EXPECT_TRUE(t == NULL);
  o.max_host_memory = e4.host_total;
  EXPECT_OK(ng_trainer_create(&t, ds, m, &o));
  EXPECT_EQ_I(ng_trainer_features_copied(t), 0); /* the default reads the mapping in place */
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

int main(void) {
  RUN_TEST(test_cora_all_nodes_bitwise);
  RUN_TEST(test_subset_receptive_field);
  RUN_TEST(test_threads_and_device_paths);
  RUN_TEST(test_auto_chunk);
  RUN_TEST(test_trainer_embed);
  RUN_TEST(test_memory_estimate);
  return ng_test_summary();
}
