// The device half of float16 training's dynamic loss scaling (optim/grad_scaler.h), shared by the
// CPU loops and the CUDA kernels so both devices give the same bits:
// - unscale: g *= 1/scale, and a flag raised when any g was inf or NaN before the multiply
//   (PyTorch's _amp_foreach_non_finite_check_and_unscale_). Every thread that sees a non-finite
//   value writes the same 1, so the flag is the same whatever order they run in: no atomics.
// - update: GradScaler's growth/backoff rule applied to the scale and counts in device memory
//   (PyTorch's _amp_update_scale_), so no step waits for the host to decide.
// 1/scale and the grown or backed-off scale are formed in double and rounded to float once, as
// PyTorch's host-side arithmetic does.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace minidl::kernels {

MINIDL_HD bool is_finite_float(float v) {
#if defined(__CUDA_ARCH__)
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}

// A scale whose reciprocal is finite and nonzero: normal, positive, finite (a subnormal or zero
// scale would make 1/scale infinite and the unscaled gradients inf or NaN unflagged).
MINIDL_HD bool usable_scale(float s) { return is_finite_float(s) && s >= FLT_MIN; }

MINIDL_HD float inverse_scale(float scale) { return static_cast<float>(1.0 / static_cast<double>(scale)); }

MINIDL_HD void unscale_update(float* g, float inv_scale, float* found_inf, int64_t i) {
  const float v = g[i];
  if (!is_finite_float(v)) *found_inf = 1.f;
  g[i] = v * inv_scale;
}

// The scaler's state in device memory: the scale (also the backward's seed), the flag unscale
// raises, and [growth_tracker, skipped_steps].
struct ScalerState {
  float* scale;
  const float* found_inf;
  int32_t* counts;
};

struct ScalerRule {
  double growth_factor;
  double backoff_factor;
  int32_t growth_interval;
};

// On inf/NaN the scale backs off (stopping at the smallest normal float, so 1/scale stays finite;
// PyTorch would go on into subnormals and zero) and the clean-step count restarts; else the count
// grows, and at growth_interval the scale grows (if the grown scale is finite) and the count
// restarts.
MINIDL_HD void update_scale(const ScalerState& s, const ScalerRule& r) {
  int32_t& tracker = s.counts[0];
  if (*s.found_inf != 0.f) {
    const float backed_off = static_cast<float>(static_cast<double>(*s.scale) * r.backoff_factor);
    if (usable_scale(backed_off)) *s.scale = backed_off;
    tracker = 0;
    if (s.counts[1] < INT32_MAX) ++s.counts[1];  // saturates: a count, never wrapped
    return;
  }
  if (++tracker < r.growth_interval) return;
  const float grown = static_cast<float>(static_cast<double>(*s.scale) * r.growth_factor);
  if (is_finite_float(grown)) *s.scale = grown;
  tracker = 0;
}

// One gradient tensor of an unscale.
struct UnscaleTensor {
  float* grad;
  int64_t n;
};

// found_inf and scale are in the memory of the gradients' device; found_inf is only ever set to 1
// here (the caller zeroes it). The CUDA version covers every tensor in as few launches as the
// kernel-argument limit allows.
void unscale_cpu(const std::vector<UnscaleTensor>& grads, const float* scale, float* found_inf);
void unscale_cuda(const std::vector<UnscaleTensor>& grads, const float* scale, float* found_inf);
void update_scale_cuda(const ScalerState& state, const ScalerRule& rule);

}  // namespace minidl::kernels
