/* The CUDA backend's link-prediction op: the dot decoder's pair scores (pair_dot), with its
 * kernel. The rules of the whole backend are in backend_cuda_impl.h. */
#include "backend_cuda_impl.h"

#include <stdint.h>

namespace ng_cuda {

/* ---- kernel ---- */

/* One thread per pair (a grid with fewer threads than pairs strides over them): its sum runs in
 * column order from +0, each product and each add rounded apart (__fmul_rn / __fadd_rn, which
 * nvcc never contracts into an FMA), which are ng__link_score's operations in its order on the
 * CPU, so the score is its bits. A pair's sum is one chain of dependent adds whatever the
 * threads do, so a thread per pair loses nothing to a warp per pair, and needs no shuffles.
 *
 * Sizes: i and the grid stride are int64 (n may pass 2^31 pairs); a row's offset is
 * (int64_t)u[i] * dim, so a table of 16 M rows of 256 floats (2^32 floats, 16 GiB) is addressed
 * without overflow (rows < 2^31 and dim < 2^32 keep it below 2^63). The caller keeps u[i], v[i]
 * within h's rows (backend_impl.h); the front cannot read device memory to check them.
 *
 * Vec4: when dim is a multiple of 4 and h is 16-byte aligned, every row starts 16-byte aligned
 * and a row is read as float4s, whose four columns are still added in order (x, y, z, w). Each
 * thread reads its own two rows: a warp's load touches 32 rows' sectors, and the next three
 * columns of each row come from the same sector in L1, so DRAM traffic stays about the rows'
 * bytes. */
template <bool kVec4>
__global__ void k_pair_dot(float *__restrict__ out, const float *__restrict__ h,
                           const int32_t *__restrict__ u, const int32_t *__restrict__ v, int64_t n,
                           int64_t dim) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float *a = h + (int64_t)u[i] * dim, *b = h + (int64_t)v[i] * dim;
    float acc = 0.0f;
    if (kVec4) {
      const float4 *a4 = reinterpret_cast<const float4 *>(a);
      const float4 *b4 = reinterpret_cast<const float4 *>(b);
      for (int64_t c = 0; c < dim / 4; c++) {
        const float4 x = __ldg(a4 + c), y = __ldg(b4 + c);
        acc = __fadd_rn(acc, __fmul_rn(x.x, y.x));
        acc = __fadd_rn(acc, __fmul_rn(x.y, y.y));
        acc = __fadd_rn(acc, __fmul_rn(x.z, y.z));
        acc = __fadd_rn(acc, __fmul_rn(x.w, y.w));
      }
    } else {
      for (int64_t c = 0; c < dim; c++)
        acc = __fadd_rn(acc, __fmul_rn(__ldg(a + c), __ldg(b + c)));
    }
    out[i] = acc;
  }
}

/* ---- op ---- */

/* The grid is grid_1d(n): at most kMaxGridX (2^20) blocks of kThreads, within CUDA's x limit
 * (2^31 - 1); beyond 2^28 pairs the threads stride. n >= 1 and dim >= 1 (the front). */
ng_status cuda_pair_dot(ng_backend *be, float *out, const float *h, const int32_t *u,
                        const int32_t *v, int64_t n, int64_t dim) {
  NG_CHECK(use(be, "pair_dot"));
  cudaStream_t s = ctx_of(be)->stream;
  if (dim % 4 == 0 && reinterpret_cast<uintptr_t>(h) % 16 == 0)
    k_pair_dot<true><<<grid_1d(n), kThreads, 0, s>>>(out, h, u, v, n, dim);
  else
    k_pair_dot<false><<<grid_1d(n), kThreads, 0, s>>>(out, h, u, v, n, dim);
  LAUNCH_CHECK("pair_dot");
  return NG_OK;
}

} // namespace ng_cuda
