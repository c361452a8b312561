// What many kernels share: grid sizing from the device, ceil_div, warp reductions, the bias add
// of Conv2d and Linear, and the fixed-order sum of per-slice partials that the deterministic
// reductions (bias gradients) end with. Included only by .cu files.
#pragma once
#include <cstdint>

#include "core/cuda/runtime.h"

namespace minidl::cuda {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A grid of `needed` blocks, at least one and at most `cap` (one resident wave: the kernels
// stride over the rest).
inline int clamp_grid(int64_t needed, int64_t cap) {
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}
// Blocks of `block_size` threads for `needed` blocks of work, at most one resident wave of the
// chip at full occupancy (resident_blocks).
inline int grid_blocks(int64_t needed, int block_size) { return clamp_grid(needed, resident_blocks(block_size)); }

// Butterfly sums over the warp: every lane ends with the sum (lane 0's is bit-identical to a
// shfl_down tree's, since for lane 0 each step adds the same partner).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// out[j] = partials[0 * cols + j] + partials[1 * cols + j] + ... over `slices` rows, added in
// slice order: the second pass of a deterministic column reduction (no atomics, same bits every
// run).
void sum_partials_by_column(const float* partials, int64_t slices, int64_t cols, float* out);

// y += b[channel] over y viewed as (outer, channels, inner): Conv2d's NCHW output (inner = H*W)
// and Linear's (rows, out) (inner = 1). One add per element, so the bits are those of y + b.
void add_channel_bias(float* y, const float* b, int64_t outer, int64_t channels, int64_t inner);

}  // namespace minidl::cuda
