/* Random test data shared by the suites: floats, aggregation blocks and CSR copies. */
#ifndef NG_TEST_GRAPH_H
#define NG_TEST_GRAPH_H

#include "ng_test.h"

#include "backend_impl.h"
#include "rng.h"
#include "graph_impl.h"

/// A float uniform in [-1, 1), never exactly 0 (tests must not run on zeros).
float ng_test_frand(ng_rng *r);
/// `n` floats from ng_test_frand() in a new array (free()).
float *ng_test_rand_floats(ng_rng *r, int64_t n);

/// A block built by the tests, owning its arrays; `b` points into them.
typedef struct {
  ng_block b;
  int32_t *indptr, *indices, *t_indptr, *t_dst, *t_eid;
  float *edge_w, *self_w;
} ng_test_block;

/// Completes a block whose row offsets the caller has put in `tb->indptr` (`n_dst` + 1 entries
/// from ng_test_xmalloc(); taken): random sources in [0, n_src) for each destination, distinct
/// unless `repeats`, edge and self weights in [0.1, 1]; with `force_dup`, the first destination
/// with two or more neighbours lists its first source again at its end. The transpose lists the
/// edges of each source in edge order. Free with ng_test_block_free().
void ng_test_block_fill(ng_test_block *tb, ng_rng *r, int32_t n_dst, int32_t n_src, bool repeats,
                        bool force_dup);
/// Frees the arrays of a block from ng_test_block_fill().
void ng_test_block_free(ng_test_block *tb);

/// Copies `g` (borrowed) into `out` with int64 indices when `wide`, else int32 ones, in arrays of
/// its own (free with ng__csr_free).
void ng_test_csr_copy(ng_csr *out, const ng_csr *g, bool wide);

/// Reads an edge list ("a b" a line, '#' lines and others without two numbers skipped) into a
/// new array (free()) of 2 * `*count` node ids, the two ends of each edge in turn; NULL when the
/// file cannot be opened.
int64_t *ng_test_read_edges(const char *path, int64_t *count);
/// Fills `indptr` (`nodes` + 1 entries) and `indices` (2 * `m`) with the undirected graph of the
/// `m` edges `ends` (from ng_test_read_edges): each edge in both rows, rows in edge order.
void ng_test_undirected_csr(int64_t *indptr, int32_t *indices, int64_t nodes, const int64_t *ends,
                            int64_t m);

/// sum_i r_i y_i in double (the scalar loss of gradient checks: r is a fixed random direction).
double ng_test_dot(const float *r, const float *y, int64_t n);
typedef double (*ng_test_loss_fn)(void *ctx);
/// Compares analytic[i] with the central difference of f at every element of x (step h),
/// failing when |fd - analytic| > atol + rtol * |analytic|; reports the first three misses.
void ng_test_gradcheck(const char *what, float *x, int64_t n, const float *analytic,
                       ng_test_loss_fn f, void *ctx, float h, double atol, double rtol);

/// A random graph of `n` nodes: row lengths uniform in [0, 20) (so some nodes are isolated), and
/// every node v with v % 97 == 5 a hub with n / 3 neighbours; rows hold distinct neighbours in a
/// random order (free with ng__csr_free).
void ng_test_random_graph(ng_csr *g, int64_t n, uint64_t seed);
/// `count` distinct targets drawn from [0, n) with a seed.
void ng_test_pick_targets(int64_t *out, int32_t count, int64_t n, uint64_t seed);
/// Checks that `be`'s device sampler gives the CPU sampler's blocks bit for bit (both index
/// widths, every branch of the draw, GCN weights, transposes, the full neighbourhood, a reused
/// host buffer) and refuses bad targets alike; *edges_per_s (may be NULL) gets its rate.
void ng_test_check_device_sampler(ng_backend *be, double *edges_per_s);

#endif /* NG_TEST_GRAPH_H */
