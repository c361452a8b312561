// The per-element formulas of the normalization layers, shared by the CPU path, the fast CUDA
// kernels and the oracle, so every implementation forms y, the fused ReLU's mask and dx from the
// same float operations. That matters for the fused ReLU: backward recomputes y from x and the
// saved statistics instead of storing it, and gets the same bits as the forward's y.
#pragma once
#include <cmath>

#include "core/host_device.h"

namespace minidl::norm {

// weight[f] * rstd, the factor that multiplies (x - mean); rstd alone when there is no weight.
MINIDL_HD float feature_scale(const float* weight, long long f, float rstd) {
  return weight ? weight[f] * rstd : rstd;
}

MINIDL_HD float feature_shift(const float* bias, long long f) { return bias ? bias[f] : 0.f; }

// y = (x - mean) * scale + shift with one rounding for the multiply-add. The centered form keeps
// its accuracy when |mean| >> std, where x * scale + (shift - mean * scale) would cancel.
MINIDL_HD float normalized(float x, float mean, float scale, float shift) { return fmaf(x - mean, scale, shift); }

// ReLU as a separate torch.relu would do it: NaN fails the comparison and passes through.
MINIDL_HD float relu_forward(float y) { return y <= 0.f ? 0.f : y; }

// ReLU's backward on its output y: dy passes unless y <= 0, so a NaN output keeps its gradient.
MINIDL_HD float relu_backward(float dy, float y) { return y <= 0.f ? 0.f : dy; }

// dx = g * scale + (x - mean) * k1 + k2, where g is dy after the ReLU mask and k1, k2 are the
// per-group terms of the backward through the statistics (0 when they were constants).
MINIDL_HD float input_grad(float g, float centered, float scale, float k1, float k2) {
  return fmaf(g, scale, fmaf(centered, k1, k2));
}

}  // namespace minidl::norm
