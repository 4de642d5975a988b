/* bfloat16 feature storage (ng_train_opts.precision NG_PRECISION_BF16): a bf16 value is the top
 * 16 bits of an IEEE fp32 value. Converting bf16 to fp32 is exact (the low 16 bits become 0), so
 * every path that reads a bf16 row and converts it at the read computes on the same fp32 values,
 * and the fp32 arithmetic after it (the operation order of cpu/kernels_impl.h) gives the same
 * bits whichever path read the row. fp32 to bf16 rounds to nearest, ties to even; NaN stays a
 * (quiet) NaN and infinities stay infinite. Plain C, also compiled by nvcc for the kernels. */
#ifndef NG_BF16_H
#define NG_BF16_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define NG_BF16_FN static inline __host__ __device__
#else
#define NG_BF16_FN static inline
#endif

/// The fp32 value of bf16 bits `h` (exact).
NG_BF16_FN float ng_bf16_to_f32(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/// `f` rounded to bf16, to nearest with ties to even. A NaN gives a quiet NaN of the same sign.
NG_BF16_FN uint16_t ng_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a NaN (rounding could make it inf) */
    return (uint16_t)((u >> 16) | 0x0040u);
  const uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

#endif /* NG_BF16_H */
