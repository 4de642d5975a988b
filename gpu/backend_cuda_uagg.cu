/* The gather-aggregate kernel template (agg_template.h, docs/aggregators.md) and the
 * aggregators that run through it: the built-ins' forward (sum, mean, GCN's weighted sum with
 * its self loop, max and min with their argbest), partial states (fp32 and bf16 tables), merge
 * and finalize, and every op of a user-defined aggregator. The built-ins are written here with
 * NG_AGGREGATOR_SOURCE, as a user writes one, and compiled into the template by nvcc at build time
 * (no NVRTC). A user aggregator's NG_AGGREGATOR_SOURCE text is compiled at run time with NVRTC
 * (loaded with dlopen, so that the library needs no NVRTC to build or to run the built-ins) behind
 * the same template text, into a CUBIN for this device, loaded with cudaLibraryLoadData (the
 * runtime API: no libcuda link) and cached for the process by its generated source. What stays in
 * the specialised kernels of backend_cuda_aggr.cu (the built-ins' backward), and why:
 * docs/aggregators.md. */
#include "backend_cuda_impl.h"

/* The functions of NG_AGGREGATOR_SOURCE are device functions here (neargnn.h's default is
 * static inline for the host). */
#undef NG_AGG_FN
#define NG_AGG_FN __device__ __forceinline__
#undef NG_AGG_ROW_FN
#define NG_AGG_ROW_FN __device__ inline
#include "agg_template.h"

#include <dlfcn.h>
#include <mutex>
#include <nvrtc.h>
#include <stdio.h>
#include <string>
#include <vector>

/* ---- built-in aggregators, defined as a user would ----
 * Their arithmetic is the CPU backend's (cpu/kernels_cpu.c): with --fmad=false every product
 * and sum rounds on its own, so the template gives the CPU's and the former hand-written
 * kernels' bits (tests/test_gpu_agg.c, test_builtin_bits). */

// clang-format off
namespace ng_builtin_sum {
NG_AGGREGATOR_SOURCE(source,
  NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) { s[0] = s[0] + w * x; }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = s[0] + t[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) { (void)n; return s[0]; })
}
namespace ng_builtin_mean {
NG_AGGREGATOR_SOURCE(source,
  NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) { s[0] = s[0] + w * x; }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = s[0] + t[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) { return s[0] / n; })
}
namespace ng_builtin_max {
NG_AGGREGATOR_SOURCE(source,
  NG_AGG_FN void agg_init(float *s) { s[0] = -__int_as_float(0x7f800000); }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) { (void)w; s[0] = x > s[0] ? x : s[0]; }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = t[0] > s[0] ? t[0] : s[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) { (void)n; return s[0]; }
  NG_AGG_FN float agg_grad(const float *s, float n, float x, float w, float y) {
    (void)s; (void)n; (void)w; return x == y ? 1.0f : 0.0f; })
}
namespace ng_builtin_min {
NG_AGGREGATOR_SOURCE(source,
  NG_AGG_FN void agg_init(float *s) { s[0] = __int_as_float(0x7f800000); }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) { (void)w; s[0] = x < s[0] ? x : s[0]; }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = t[0] < s[0] ? t[0] : s[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) { (void)n; return s[0]; }
  NG_AGG_FN float agg_grad(const float *s, float n, float x, float w, float y) {
    (void)s; (void)n; (void)w; return x == y ? 1.0f : 0.0f; })
}
// clang-format on

namespace ng_cuda {

/* An aggregator as the template takes it: the functions of namespace NS (and its agg_grad for
 * a non-linear one: NG__AGG_OPS_GRAD). */
#define NG__AGG_OPS(NAME, NS, STATE, EXTRA)                                                        \
  struct NAME {                                                                                    \
    enum { S = STATE };                                                                            \
    static __device__ __forceinline__ void init(float *s) { NS::agg_init(s); }                     \
    static __device__ __forceinline__ void acc(float *s, float x, float w) {                       \
      NS::agg_accumulate(s, x, w);                                                                 \
    }                                                                                              \
    static __device__ __forceinline__ void merge(float *s, const float *t) {                       \
      NS::agg_merge(s, t);                                                                         \
    }                                                                                              \
    static __device__ __forceinline__ float fin(const float *s, float n) {                         \
      return NS::agg_finalize(s, n);                                                               \
    }                                                                                              \
    EXTRA                                                                                          \
  };
#define NG__AGG_GRAD(NS)                                                                           \
  static __device__ __forceinline__ float grad(const float *s, float n, float x, float w,          \
                                               float y) {                                          \
    return NS::agg_grad(s, n, x, w, y);                                                            \
  }

NG__AGG_OPS(sum_ops, ng_builtin_sum, 1, )
NG__AGG_OPS(mean_ops, ng_builtin_mean, 1, )
/* Max and min are selection aggregators (agg_template.h, is_select: built-ins only): the first
 * neighbour starts the state, so a NaN there stays as on the CPU, and the forward can write
 * argbest. */
#define NG__AGG_SELECT enum { Select = 1 };
NG__AGG_OPS(max_ops, ng_builtin_max, 1, NG__AGG_SELECT NG__AGG_GRAD(ng_builtin_max))
NG__AGG_OPS(min_ops, ng_builtin_min, 1, NG__AGG_SELECT NG__AGG_GRAD(ng_builtin_min))

/* The launchable kernels of one aggregator: fwd[with input dropout][V == 4][log2 T] over fp32
 * rows, fwd16 over bf16 rows (built-in sum, max and min only, else null), fwd_arg[V == 4][log2
 * T] the forward with argbest (built-in max and min only, else null), finalize[V == 4]. */
struct agg_kernels {
  const void *fwd[2][2][4], *fwd16[2][2][4], *fwd_arg[2][4];
  const void *merge, *counts, *finalize[2], *bwd_dst, *bwd_src;
  int state;
};

template <class A, class E, bool D> void fwd_instances(const void *(&f)[2][4]) {
  f[0][0] = (const void *)ng_aggt::k_fwd<A, 1, 1, E, D>;
  f[0][1] = (const void *)ng_aggt::k_fwd<A, 1, 2, E, D>;
  f[0][2] = (const void *)ng_aggt::k_fwd<A, 1, 4, E, D>;
  f[0][3] = (const void *)ng_aggt::k_fwd<A, 1, 8, E, D>;
  f[1][0] = (const void *)ng_aggt::k_fwd<A, 4, 1, E, D>;
  f[1][1] = (const void *)ng_aggt::k_fwd<A, 4, 2, E, D>;
  f[1][2] = (const void *)ng_aggt::k_fwd<A, 4, 4, E, D>;
  f[1][3] = (const void *)ng_aggt::k_fwd<A, 4, 8, E, D>;
}

/* The build-time instances of the template for aggregator A (with bf16 rows when Bf16; with
 * the argbest forward for a selection aggregator). */
template <class A, bool Linear, bool Bf16> agg_kernels builtin_kernels() {
  agg_kernels k = {};
  fwd_instances<A, float, false>(k.fwd[0]);
  fwd_instances<A, float, true>(k.fwd[1]);
  if constexpr (Bf16) {
    fwd_instances<A, unsigned short, false>(k.fwd16[0]);
    fwd_instances<A, unsigned short, true>(k.fwd16[1]);
  }
  if constexpr (ng_aggt::is_select<A>::value) {
    k.fwd_arg[0][0] = (const void *)ng_aggt::k_fwd_arg<A, 1, 1>;
    k.fwd_arg[0][1] = (const void *)ng_aggt::k_fwd_arg<A, 1, 2>;
    k.fwd_arg[0][2] = (const void *)ng_aggt::k_fwd_arg<A, 1, 4>;
    k.fwd_arg[0][3] = (const void *)ng_aggt::k_fwd_arg<A, 1, 8>;
    k.fwd_arg[1][0] = (const void *)ng_aggt::k_fwd_arg<A, 4, 1>;
    k.fwd_arg[1][1] = (const void *)ng_aggt::k_fwd_arg<A, 4, 2>;
    k.fwd_arg[1][2] = (const void *)ng_aggt::k_fwd_arg<A, 4, 4>;
    k.fwd_arg[1][3] = (const void *)ng_aggt::k_fwd_arg<A, 4, 8>;
  }
  k.merge = (const void *)ng_aggt::k_merge<A>;
  k.counts = (const void *)ng_aggt::k_merge_counts<A>;
  k.finalize[0] = (const void *)ng_aggt::k_finalize<A, 1>;
  k.finalize[1] = (const void *)ng_aggt::k_finalize<A, 4>;
  k.bwd_dst = (const void *)ng_aggt::k_bwd_dst<A, Linear>;
  k.bwd_src = (const void *)ng_aggt::k_bwd_src<A>;
  k.state = A::S;
  return k;
}

/* The kernels of built-in `red` (MEAN: SUM with `mean`); the sum's include bf16 rows (the
 * partial state of sum and mean is the bare sum), and so do max's and min's. */
static const agg_kernels &builtin(ng_reduce red, bool mean) {
  static const agg_kernels sum = builtin_kernels<sum_ops, true, true>();
  static const agg_kernels avg = builtin_kernels<mean_ops, true, false>();
  static const agg_kernels max = builtin_kernels<max_ops, false, true>();
  static const agg_kernels min = builtin_kernels<min_ops, false, true>();
  return red == NG_REDUCE_MAX ? max : red == NG_REDUCE_MIN ? min : mean ? avg : sum;
}

/* ---- NVRTC, loaded on first use ---- */

struct nvrtc_api {
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcDestroyProgram) destroy;
  decltype(&nvrtcAddNameExpression) add_name;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetProgramLogSize) log_size;
  decltype(&nvrtcGetProgramLog) log;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcGetLoweredName) lowered;
  decltype(&nvrtcGetErrorString) error;
};

static std::mutex g_mu;         // guards everything below
static nvrtc_api g_nvrtc;       // valid when g_nvrtc_state == 1
static int g_nvrtc_state;       // 0: not tried, 1: loaded, -1: absent
static std::string g_nvrtc_why; // why it is absent
struct compiled {
  std::string key; // the architecture and the generated source
  cudaLibrary_t lib;
  agg_kernels k;
};
static std::vector<compiled *> g_cache; // kept for the process (modules are small)

/* Loads NVRTC (CUDA 13's soname first); false with g_nvrtc_why set when it is absent. */
static bool nvrtc_load() {
  if (g_nvrtc_state)
    return g_nvrtc_state > 0;
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  void *h = nullptr;
  for (const char *n : names)
    if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL)))
      break;
#ifdef NG_CUDA_LIBDIR
  if (!h) /* the toolkit neargnn was built with, when its folder is not on the loader's path */
    h = dlopen(NG_CUDA_LIBDIR "/libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
#endif
  if (!h) {
    const char *e = dlerror();
    g_nvrtc_why = std::string("NVRTC (libnvrtc.so.13) could not be loaded: ") + (e ? e : "?") +
                  "; install the CUDA toolkit's NVRTC or put its folder on LD_LIBRARY_PATH";
    g_nvrtc_state = -1;
    return false;
  }
#define NG_NVRTC_SYM(field, sym)                                                                   \
  g_nvrtc.field = reinterpret_cast<decltype(g_nvrtc.field)>(dlsym(h, #sym));                       \
  if (!g_nvrtc.field) {                                                                            \
    g_nvrtc_why = "NVRTC lacks " #sym;                                                             \
    g_nvrtc_state = -1;                                                                            \
    return false;                                                                                  \
  }
  NG_NVRTC_SYM(create, nvrtcCreateProgram)
  NG_NVRTC_SYM(destroy, nvrtcDestroyProgram)
  NG_NVRTC_SYM(add_name, nvrtcAddNameExpression)
  NG_NVRTC_SYM(compile, nvrtcCompileProgram)
  NG_NVRTC_SYM(log_size, nvrtcGetProgramLogSize)
  NG_NVRTC_SYM(log, nvrtcGetProgramLog)
  NG_NVRTC_SYM(cubin_size, nvrtcGetCUBINSize)
  NG_NVRTC_SYM(cubin, nvrtcGetCUBIN)
  NG_NVRTC_SYM(lowered, nvrtcGetLoweredName)
  NG_NVRTC_SYM(error, nvrtcGetErrorString)
#undef NG_NVRTC_SYM
  g_nvrtc_state = 1;
  return true;
}

/* The program NVRTC compiles for `u`: the user's functions in a namespace, the ops struct, the
 * random numbers of core/rng.h, the template. */
static std::string program_source(const ng_aggregator_def *u) {
  std::string s = "#define NG_AGG_FN __device__ __forceinline__\n"
                  "#define INFINITY __int_as_float(0x7f800000)\n"
                  "#define NAN __int_as_float(0x7fffffff)\n"
                  "namespace ng_user {\n";
  s += u->source;
  char ops[1024];
  snprintf(ops, sizeof ops,
           "\n}\nstruct ng_user_ops {\n enum { S = %d };\n"
           " static __device__ __forceinline__ void init(float *s) { ng_user::agg_init(s); }\n"
           " static __device__ __forceinline__ void acc(float *s, float x, float w) {"
           " ng_user::agg_accumulate(s, x, w); }\n"
           " static __device__ __forceinline__ void merge(float *s, const float *t) {"
           " ng_user::agg_merge(s, t); }\n"
           " static __device__ __forceinline__ float fin(const float *s, float n) {"
           " return ng_user::agg_finalize(s, n); }\n"
           "%s};\n",
           (int)u->state_size,
           u->linear
               ? ""
               : " static __device__ __forceinline__ float grad(const float *s, float n,"
                 " float x, float w, float y) { return ng_user::agg_grad(s, n, x, w, y); }\n");
  s += ops;
  /* core/rng.h's shared part, which the template's input dropout calls (ng_dropout_keep), in the
   * template's namespace: NVRTC has no <stdint.h>, and the names stay out of the user's way. */
  s += "namespace ng_aggt {\n"
       "typedef unsigned long long uint64_t;\n"
       "typedef unsigned int uint32_t;\n"
       "#define NG_RNG_FN static __device__ __forceinline__\n";
  s += ng__rng_src;
  s += "\n}\n";
  s += ng__agg_template_src;
  s += "\n";
  return s;
}

static ng_status nvrtc_fail(const char *what, nvrtcResult r) {
  return ng__err(NG_ERR_CUDA, "user aggregator: %s failed: %s", what, g_nvrtc.error(r));
}

/* Compiles `src` for `arch` ("sm_90") and loads it: the kernels of `u` into *out. */
static ng_status compile(const ng_aggregator_def *u, const std::string &src, const char *arch,
                         compiled *out) {
  std::vector<std::string> names;
  const char *ops = "ng_user_ops";
  char buf[160];
  for (const char *drop : {"false", "true"})
    for (int v : {1, 4})
      for (int t : {1, 2, 4, 8}) {
        snprintf(buf, sizeof buf, "ng_aggt::k_fwd<%s, %d, %d, float, %s>", ops, v, t, drop);
        names.push_back(buf);
      }
  for (const char *k : {"k_merge", "k_merge_counts", "k_bwd_src"}) {
    snprintf(buf, sizeof buf, "ng_aggt::%s<%s>", k, ops);
    names.push_back(buf);
  }
  for (int v : {1, 4}) {
    snprintf(buf, sizeof buf, "ng_aggt::k_finalize<%s, %d>", ops, v);
    names.push_back(buf);
  }
  snprintf(buf, sizeof buf, "ng_aggt::k_bwd_dst<%s, %s>", ops, u->linear ? "true" : "false");
  names.push_back(buf);

  nvrtcProgram prog;
  nvrtcResult r = g_nvrtc.create(&prog, src.c_str(), u->name, 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return nvrtc_fail("nvrtcCreateProgram", r);
  for (const std::string &n : names)
    g_nvrtc.add_name(prog, n.c_str());
  std::string arch_opt = std::string("--gpu-architecture=") + arch;
  /* No fused multiply-adds: the additions and products round as on the CPU. */
  const char *opts[] = {arch_opt.c_str(), "--std=c++17", "--fmad=false"};
  r = g_nvrtc.compile(prog, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    g_nvrtc.log_size(prog, &n);
    std::string log(n, '\0');
    if (n)
      g_nvrtc.log(prog, &log[0]);
    if (log.size() > 1500)
      log.resize(1500);
    g_nvrtc.destroy(&prog);
    return ng__err(NG_ERR_INVALID_ARG,
                   "user aggregator \"%s\": its source does not compile for the GPU (NVRTC): %s",
                   u->name, log.c_str());
  }
  size_t bytes = 0;
  g_nvrtc.cubin_size(prog, &bytes);
  std::vector<char> cubin(bytes);
  g_nvrtc.cubin(prog, cubin.data());
  std::vector<std::string> lowered;
  for (const std::string &n : names) {
    const char *low = nullptr;
    r = g_nvrtc.lowered(prog, n.c_str(), &low);
    if (r != NVRTC_SUCCESS) {
      g_nvrtc.destroy(&prog);
      return nvrtc_fail("nvrtcGetLoweredName", r);
    }
    lowered.push_back(low);
  }
  g_nvrtc.destroy(&prog);
  CU_CHECK("user aggregator",
           cudaLibraryLoadData(&out->lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t k[22];
  for (size_t i = 0; i < lowered.size(); i++)
    CU_CHECK("user aggregator", cudaLibraryGetKernel(&k[i], out->lib, lowered[i].c_str()));
  out->k = agg_kernels{};
  for (int i = 0; i < 16; i++)
    out->k.fwd[i / 8][i / 4 % 2][i % 4] = (const void *)k[i];
  out->k.merge = (const void *)k[16];
  out->k.counts = (const void *)k[17];
  out->k.bwd_src = (const void *)k[18];
  out->k.finalize[0] = (const void *)k[19];
  out->k.finalize[1] = (const void *)k[20];
  out->k.bwd_dst = (const void *)k[21];
  out->k.state = u->state_size;
  return NG_OK;
}

/* The kernels of `ag`'s user aggregator on `be`'s device, compiled on first use. */
static ng_status kernels_of(ng_backend *be, const ng_aggr *ag, const agg_kernels **out) {
  const ng_aggregator_def *u = ag->user;
  if (!u->source)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "user aggregator \"%s\" has no source (ng_aggregator_def.source), so it runs "
                   "on the CPU only; define it with NG_AGGREGATOR_SOURCE and set .source",
                   u->name);
  int major = 0, minor = 0;
  CU_CHECK("user aggregator",
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx_of(be)->device));
  CU_CHECK("user aggregator",
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx_of(be)->device));
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
  const std::string src = program_source(u);
  std::string key = std::string(arch) + "\n" + src;
  std::lock_guard<std::mutex> lock(g_mu);
  for (compiled *c : g_cache)
    if (c->key == key) {
      *out = &c->k;
      return NG_OK;
    }
  if (!nvrtc_load())
    return ng__err(NG_ERR_UNSUPPORTED, "user aggregator \"%s\" on the GPU: %s", u->name,
                   g_nvrtc_why.c_str());
  compiled *c = new compiled();
  c->key = key;
  const ng_status st = compile(u, src, arch, c);
  if (st != NG_OK) {
    delete c;
    return st;
  }
  g_cache.push_back(c);
  *out = &c->k;
  return NG_OK;
}

/* ---- launches ---- */

static int floor_pow2(int x) {
  int p = 1;
  while (p * 2 <= x)
    p *= 2;
  return p;
}

/* The block as the template reads it; `self`: with GCN's self-loop weights. */
static ng_aggt::blk blk_of(const ng_aggr *ag, const ng_block *b, bool self) {
  return ng_aggt::blk{b->indptr, b->indices, ag->weighted ? b->edge_w : nullptr,
                      self ? b->self_w : nullptr, b->n_dst};
}

/* The forward (out, with the self loop when `self`, and argbest when `arg`: max and min) or
 * partial state (state, count) over a block with kernels `k`, rows of type E (fp32, or bf16 for
 * the built-in sum, max and min). */
template <class E>
static ng_status launch_fwd(ng_backend *be, const char *op, const agg_kernels &k, const ng_aggr *ag,
                            const ng_block *blk, const E *src, int64_t dim, float *out, bool self,
                            float *state, int32_t *count, int32_t *arg = nullptr) {
  if (blk->n_dst == 0 || (out && dim == 0)) /* (a partial state's counts are written at dim 0) */
    return NG_OK;
  const bool v4 = dim % 4 == 0 && aligned_v4(src) && (!out || aligned16(out)) &&
                  (!state || aligned16(state)) && (!arg || aligned16(arg));
  const int v = v4 ? 4 : 1;
  /* Chunks as the gathers take them (chunks_per_warp: a whole row up to 8), while a thread's
   * S x V x T state floats fit in 32 registers. */
  int t = NG_MIN(chunks_per_warp(dim, v), floor_pow2(NG_MAX(1, 32 / (k.state * v))));
  const int ti = t == 8 ? 3 : t == 4 ? 2 : t == 2 ? 1 : 0;
  const bool drop = ag->drop_p > 0.0f;
  dim3 grid = grid_rows_chunks(blk->n_dst, dim, v, t);
  ng_aggt::blk b = blk_of(ag, blk, self);
  long long d64 = dim;
  if (arg) { /* max and min with argbest: fp32 rows, no dropout (aggr_fwd takes none) */
    const void *fn = std::is_same<E, float>::value && !drop ? k.fwd_arg[v4][ti] : nullptr;
    if (!fn)
      return ng__err(NG_ERR_UNSUPPORTED,
                     "%s: argbest is written only by max and min over fp32 rows without dropout",
                     op);
    void *args[] = {&b, (void *)&src, &d64, &out, &arg};
    CU_CHECK(op, cudaLaunchKernel(fn, grid, dim3(kThreads), args, 0, ctx_of(be)->stream));
    return NG_OK;
  }
  const void *fn = std::is_same<E, float>::value ? k.fwd[drop][v4][ti] : k.fwd16[drop][v4][ti];
  if (!fn)
    return ng__err(NG_ERR_UNSUPPORTED, "%s: a user-defined aggregator reads fp32 tables only", op);
  ng_aggt::drop dr = {ag->drop_key, ng_dropout_threshold(ag->drop_p), 1.0f / (1.0f - ag->drop_p)};
  void *args[] = {&b, (void *)&src, &d64, &dr, &out, &state, &count};
  CU_CHECK(op, cudaLaunchKernel(fn, grid, dim3(kThreads), args, 0, ctx_of(be)->stream));
  return NG_OK;
}

/* The kernels of `ag`: the built-in's (`partial`: a partial state's bare sum for sum and mean),
 * or the user aggregator's, compiled on first use. */
static ng_status kernels_for(ng_backend *be, const ng_aggr *ag, bool partial,
                             const agg_kernels **out) {
  if (ag->user)
    return kernels_of(be, ag, out);
  *out = &builtin(ag->reduce, ag->mean && !partial);
  return NG_OK;
}

ng_status cuda_tmpl_fwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk, const float *src,
                        int64_t dim, float *dst, int32_t *argbest) {
  NG_CHECK(use(be, "aggr_fwd"));
  const agg_kernels *k;
  NG_CHECK(kernels_for(be, ag, false, &k));
  /* argbest is max's and min's (the sum family has none to write). */
  int32_t *arg = !ag->user && ag->reduce != NG_REDUCE_SUM ? argbest : nullptr;
  return launch_fwd(be, "aggr_fwd", *k, ag, blk, src, dim, dst, ag->self_loop, nullptr, nullptr,
                    arg);
}

template <class E>
static ng_status tmpl_partial(ng_backend *be, const char *op, const ng_aggr *ag,
                              const ng_block *blk, const E *src, ng_pstate *state) {
  NG_CHECK(use(be, op));
  const agg_kernels *k;
  NG_CHECK(kernels_for(be, ag, true, &k));
  /* The bare reduction: MEAN divides and the self loop is added when the merged state is
   * finalized. */
  return launch_fwd(be, op, *k, ag, blk, src, state->dim, nullptr, false, state->val, state->count);
}

ng_status cuda_tmpl_partial(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                            const float *src, ng_pstate *state) {
  return tmpl_partial(be, "aggr_partial", ag, blk, src, state);
}

ng_status cuda_tmpl_partial_bf16(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                 const uint16_t *src, ng_pstate *state) {
  return tmpl_partial(be, "aggr_partial_bf16", ag, blk, src, state);
}

ng_status cuda_tmpl_merge(ng_backend *be, const ng_aggr *ag, ng_pstate *acc,
                          const ng_pstate *other) {
  NG_CHECK(use(be, "pstate_merge"));
  const agg_kernels *k;
  NG_CHECK(kernels_for(be, ag, true, &k));
  cudaStream_t s = ctx_of(be)->stream;
  long long nd = acc->n_dst, dim = acc->dim;
  if (nd * dim > 0) {
    void *args[] = {&acc->val, (void *)&acc->count, (void *)&other->val, (void *)&other->count, &nd,
                    &dim};
    CU_CHECK("pstate_merge",
             cudaLaunchKernel(k->merge, dim3(grid_1d(nd * dim)), dim3(kThreads), args, 0, s));
  }
  if (nd > 0) {
    void *cargs[] = {&acc->count, (void *)&other->count, &nd};
    CU_CHECK("pstate_merge",
             cudaLaunchKernel(k->counts, dim3(grid_1d(nd)), dim3(kThreads), cargs, 0, s));
  }
  return NG_OK;
}

ng_status cuda_tmpl_finalize(ng_backend *be, const ng_aggr *ag, const ng_pstate *state,
                             float *dst) {
  NG_CHECK(use(be, "pstate_finalize"));
  const agg_kernels *k;
  NG_CHECK(kernels_for(be, ag, false, &k));
  long long nd = state->n_dst, dim = state->dim;
  if (nd * dim == 0)
    return NG_OK;
  const bool v4 = dim % 4 == 0 && aligned16(state->val) && aligned16(dst);
  const unsigned blocks =
      (unsigned)NG_MIN((nd + kWarpsPerBlock - 1) / kWarpsPerBlock, (long long)kMaxGridX);
  void *args[] = {(void *)&state->val, (void *)&state->count, &nd, &dim, &dst};
  CU_CHECK("pstate_finalize", cudaLaunchKernel(k->finalize[v4], dim3(blocks), dim3(kThreads), args,
                                               0, ctx_of(be)->stream));
  return NG_OK;
}

ng_status cuda_aggr_user_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                             const float *src, const float *grad_dst, int64_t dim, float *work,
                             float *grad_src) {
  NG_CHECK(use(be, "aggr_user_bwd"));
  const agg_kernels *k;
  NG_CHECK(kernels_of(be, ag, &k));
  cudaStream_t s = ctx_of(be)->stream;
  ng_aggt::blk b = blk_of(ag, blk, false);
  long long d64 = dim, ns = blk->n_src;
  if ((long long)blk->n_dst * d64 > 0) {
    void *args[] = {&b, (void *)&src, (void *)&grad_dst, &d64, &work};
    CU_CHECK("aggr_user_bwd", cudaLaunchKernel(k->bwd_dst, dim3(grid_1d(blk->n_dst * dim)),
                                               dim3(kThreads), args, 0, s));
  }
  void *sargs[] = {(void *)&blk->t_indptr, (void *)&blk->t_eid, &work, &ns, &d64, &grad_src};
  CU_CHECK("aggr_user_bwd",
           cudaLaunchKernel(k->bwd_src, dim3(grid_1d(ns * d64)), dim3(kThreads), sargs, 0, s));
  return NG_OK;
}

} // namespace ng_cuda

/* ---- benchmark and parity hooks (gpu/ng_cuda.h) ---- */

/* The template's kernels of built-in `name` ("sum", "mean", "max", "min"), or NULL. */
static const ng_cuda::agg_kernels *builtin_named(const char *name) {
  using namespace ng_cuda;
  if (!name)
    return nullptr;
  const bool mean = !strcmp(name, "mean"), max = !strcmp(name, "max"), min = !strcmp(name, "min");
  if (!mean && !max && !min && strcmp(name, "sum") != 0)
    return nullptr;
  return &builtin(max ? NG_REDUCE_MAX : min ? NG_REDUCE_MIN : NG_REDUCE_SUM, mean);
}

extern "C" ng_status ng__cuda_template_builtin_fwd(ng_backend *be, const char *name,
                                                   const ng_aggr *ag, const ng_block *blk,
                                                   const float *src, int64_t dim, float *dst) {
  using namespace ng_cuda;
  const agg_kernels *k = builtin_named(name);
  if (!k)
    return ng__err(NG_ERR_INVALID_ARG,
                   "template built-in \"%s\": not one of sum, mean, max, min (gcn is sum with "
                   "GCN weights and add_self_loop)",
                   name ? name : "(null)");
  NG_CHECK(use(be, "template fwd"));
  NG_CHECK(launch_fwd(be, "template fwd", *k, ag, blk, src, dim, dst, false, nullptr, nullptr));
  LAUNCH_CHECK("template fwd");
  return NG_OK;
}

extern "C" ng_status ng__cuda_template_occupancy(const char *name, bool bf16, bool drop,
                                                 bool argbest, int *blocks_per_sm, int *registers,
                                                 int *spill_bytes) {
  using namespace ng_cuda;
  const agg_kernels *k = builtin_named(name);
  /* The instance, where the built-in has one (the argbest forward has no bf16 or dropout form). */
  const void *fn = !k        ? nullptr
                   : argbest ? (bf16 || drop ? nullptr : k->fwd_arg[1][3])
                   : bf16    ? k->fwd16[drop][1][3]
                             : k->fwd[drop][1][3];
  if (!fn)
    return ng__err(NG_ERR_INVALID_ARG,
                   "template occupancy: \"%s\"%s%s%s is not a built-in instance (sum, mean, max, "
                   "min; bf16 rows: sum, max, min; argbest: max and min, fp32 rows, no dropout)",
                   name ? name : "(null)", bf16 ? " with bf16 rows" : "",
                   drop ? " with dropout" : "", argbest ? " with argbest" : "");
  cudaFuncAttributes attr;
  CU_CHECK("template occupancy", cudaFuncGetAttributes(&attr, fn));
  CU_CHECK("template occupancy",
           cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, fn, kThreads, 0));
  *registers = attr.numRegs;
  *spill_bytes = (int)attr.localSizeBytes;
  return NG_OK;
}

extern "C" const char *ng__cuda_builtin_agg_source(const char *name) {
  return !strcmp(name, "sum")    ? ng_builtin_sum::source
         : !strcmp(name, "mean") ? ng_builtin_mean::source
         : !strcmp(name, "max")  ? ng_builtin_max::source
         : !strcmp(name, "min")  ? ng_builtin_min::source
                                 : nullptr;
}
