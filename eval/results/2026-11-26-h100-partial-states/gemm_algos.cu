// Exploration (session 8): for W4's step GEMM shapes, time cublasSgemm against every cuBLASLt
// algorithm without split-K, and say which give cublasSgemm's bits.
// nvcc -O2 -arch=sm_90 gemm_algos.cu -lcublasLt -lcublas -o gemm_algos
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>

#define CK(x)                                                                                      \
  do {                                                                                             \
    auto e_ = (x);                                                                                 \
    if ((int)e_ != 0) {                                                                            \
      fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)e_);                        \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

struct shape {
  const char *name;
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
  float beta;
  bool relu_bias;
};

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F> static float time_it(F f, int reps = 30) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; i++)
    f();
  std::vector<float> ms;
  for (int i = 0; i < reps; i++) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(ms);
}

__global__ void fill(float *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995;
    x ^= x >> 15;
    p[i] = ((x & 0xffffff) / 16777216.0f - 0.5f);
  }
}

int main(int argc, char **argv) {
  const int m0 = argc > 1 ? atoi(argv[1]) : 183000;
  const int m1 = argc > 2 ? atoi(argv[2]) : 20700;
  // Row-major as neargnn's gemm: C[m,n] = op(A)[m,k] op(B)[k,n].
  shape shapes[] = {
      {"L0 fwd half (relu+bias)", false, false, m0, 128, 128, 128, 128, 256, 0.f, true},
      {"L0 fwd half (plain)", false, false, m0, 128, 128, 128, 128, 256, 0.f, false},
      {"L0 bwd w", true, false, 128, 128, m0, 128, 256, 128, 0.f, false},
      {"L1 fwd half", false, false, m1, 128, 256, 256, 128, 256, 0.f, false},
      {"L1 bwd w", true, false, 256, 128, m1, 256, 256, 128, 0.f, false},
      {"L1 bwd x", false, true, m1, 256, 128, 256, 128, 256, 0.f, false},
      {"L1 bwd x (beta 1)", false, true, m1, 256, 128, 256, 128, 256, 1.f, false},
      {"L2 fwd half", false, false, 1024, 16, 256, 256, 16, 32, 0.f, false},
  };
  cublasHandle_t h;
  cublasLtHandle_t lt;
  CK(cublasCreate(&h));
  CK(cublasLtCreate(&lt));
  size_t ws_bytes = 64 << 20;
  void *ws;
  CK(cudaMalloc(&ws, ws_bytes));
  for (const shape &s : shapes) {
    // Sizes of the row-major operands.
    const size_t a_rows = s.ta ? s.k : s.m, b_rows = s.tb ? s.n : s.k;
    const size_t na = a_rows * s.lda, nb = b_rows * s.ldb, nc = (size_t)s.m * s.ldc;
    float *A, *B, *C0, *Cref, *C, *bias;
    CK(cudaMalloc(&A, na * 4));
    CK(cudaMalloc(&B, nb * 4));
    CK(cudaMalloc(&C0, nc * 4));
    CK(cudaMalloc(&Cref, nc * 4));
    CK(cudaMalloc(&C, nc * 4));
    CK(cudaMalloc(&bias, 4096 * 4));
    fill<<<1024, 256>>>(A, na, 1);
    fill<<<1024, 256>>>(B, nb, 2);
    fill<<<1024, 256>>>(C0, nc, 3);
    fill<<<16, 256>>>(bias, 4096, 4);
    const float alpha = 1.f, beta = s.beta;
    const cublasOperation_t opA = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N; // Lt's A = our B
    const cublasOperation_t opB = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    double flops = 2.0 * s.m * s.n * s.k;
    auto sg = [&](float *c) {
      CK(cublasSgemm(h, opA, opB, s.n, s.m, s.k, &alpha, B, s.ldb, A, s.lda, &beta, c, s.ldc));
    };
    // Reference: cublasSgemm (+ relu/bias by Lt epilogue only: for the relu_bias shape the
    // reference is the Lt first-heuristic result, as neargnn runs it).
    cublasLtMatmulDesc_t op;
    CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
    if (s.relu_bias) {
      cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, opA == CUBLAS_OP_N ? s.n : s.k,
                                  opA == CUBLAS_OP_N ? s.k : s.n, s.ldb));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, opB == CUBLAS_OP_N ? s.k : s.m,
                                  opB == CUBLAS_OP_N ? s.m : s.k, s.lda));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.n, s.m, s.ldc));
    auto run_lt = [&](const cublasLtMatmulAlgo_t *algo, float *c, size_t wsb) {
      return cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, c, lc, c, lc, algo, ws, wsb, 0);
    };
    float t_ref;
    const char *refname;
    cublasLtMatmulHeuristicResult_t res[64];
    int found = 0;
    for (int pass = 0; pass < 2; pass++) {
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      uint64_t wsb = pass == 0 ? 0 : ws_bytes;
      uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                              sizeof wsb));
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &red, sizeof red));
      found = 0;
      cublasStatus_t hs =
          cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 64, res, &found);
      cublasLtMatmulPreferenceDestroy(pref);
      if (hs != 0)
        found = 0;
      if (pass == 0) {
        // Reference bits.
        if (s.relu_bias) {
          if (!found) {
            printf("%s: no Lt algo\n", s.name);
            break;
          }
          cudaMemcpy(Cref, C0, nc * 4, cudaMemcpyDeviceToDevice);
          CK(run_lt(&res[0].algo, Cref, 0));
          t_ref = time_it([&] { run_lt(&res[0].algo, Cref, 0); });
          cudaMemcpy(Cref, C0, nc * 4, cudaMemcpyDeviceToDevice);
          CK(run_lt(&res[0].algo, Cref, 0));
          refname = "Lt heuristic #0";
        } else {
          cudaMemcpy(Cref, C0, nc * 4, cudaMemcpyDeviceToDevice);
          sg(Cref);
          t_ref = time_it([&] { sg(C); });
          cudaMemcpy(Cref, C0, nc * 4, cudaMemcpyDeviceToDevice);
          sg(Cref);
          refname = "cublasSgemm";
        }
        CK(cudaDeviceSynchronize());
        printf("\n== %s: m=%d n=%d k=%d ta=%d tb=%d beta=%g  ref %s %.4f ms %.1f TFLOP/s\n", s.name,
               s.m, s.n, s.k, s.ta, s.tb, s.beta, refname, t_ref, flops / t_ref / 1e9);
      }
      printf(" pass %d (workspace %s): %d algos\n", pass, pass ? "64MB" : "0", found);
      std::vector<float> hc(nc), hr(nc);
      CK(cudaMemcpy(hr.data(), Cref, nc * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < found; i++) {
        int id = 0, tile = 0, stages = 0, splitk = 0, swz = 0, custom = 0, inner = 0, cluster = 0;
        size_t w;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id,
                                             &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz,
                                             sizeof swz, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                             &custom, sizeof custom, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
                                             &inner, sizeof inner, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                             &cluster, sizeof cluster, &w);
        cudaMemcpy(C, C0, nc * 4, cudaMemcpyDeviceToDevice);
        cublasStatus_t st = run_lt(&res[i].algo, C, pass ? ws_bytes : 0);
        if (st != 0) {
          printf("  #%2d id %3d tile %3d stages %3d splitk %d: status %d\n", i, id, tile, stages,
                 splitk, (int)st);
          continue;
        }
        CK(cudaMemcpy(hc.data(), C, nc * 4, cudaMemcpyDeviceToHost));
        size_t diff = 0;
        for (size_t j = 0; j < nc; j++)
          diff += memcmp(&hc[j], &hr[j], 4) != 0;
        float t = time_it([&] { run_lt(&res[i].algo, C, pass ? ws_bytes : 0); });
        printf("  #%2d id %3d tile %3d stages %3d splitk %d swz %d custom %d inner %d cluster %d "
               "ws %zu: %.4f ms %.1f TFLOP/s (x%.2f) %s\n",
               i, id, tile, stages, splitk, swz, custom, inner, cluster, res[i].workspaceSize, t,
               flops / t / 1e9, t_ref / t, diff ? "BITS DIFFER" : "same bits");
        if (diff)
          printf("     differing elements %zu of %zu\n", diff, nc);
      }
    }
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C0);
    cudaFree(Cref);
    cudaFree(C);
    cudaFree(bias);
  }
  return 0;
}
