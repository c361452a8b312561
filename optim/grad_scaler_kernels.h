// The unscale of float16 training's dynamic loss scaling (optim/grad_scaler.h), shared by the CPU
// loop and the CUDA kernel so both devices give the same bits: g *= inv_scale, and a flag raised
// when any g was inf or NaN before the multiply (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_). Every thread that sees a non-finite value writes
// the same 1, so the flag is the same whatever order they run in: no atomics needed.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/philox.h"  // MINIDL_HD

namespace minidl::kernels {

MINIDL_HD bool is_finite_float(float v) {
#if defined(__CUDA_ARCH__)
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}

MINIDL_HD void unscale_update(float* g, float inv_scale, float* found_inf, int64_t i) {
  const float v = g[i];
  if (!is_finite_float(v)) *found_inf = 1.f;
  g[i] = v * inv_scale;
}

// found_inf is in the memory of g's device and is only ever set to 1 here (the caller zeroes it).
void unscale_cpu(float* g, float inv_scale, float* found_inf, int64_t n);
void unscale_cuda(float* g, float inv_scale, float* found_inf, int64_t n);

}  // namespace minidl::kernels
