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

// Mean and biased variance of a group of m elements from the sums s1 = sum d, s2 = sum d*d of its
// shifted values d = x - k (k one sample of the group), in float64.
struct Moments {
  double mean, var;
};
MINIDL_HD Moments shifted_moments(double s1, double s2, float k, double m) {
  const double dm = s1 / m;
  double var = s2 / m - dm * dm;
  if (var < 0) var = 0;  // rounding only; a NaN stays NaN
  return {k + dm, var};
}

MINIDL_HD float inverse_std(double var, double eps) { return static_cast<float>(1.0 / sqrt(var + eps)); }

// PyTorch's running-statistics update: r = (1 - momentum) r + momentum * batch value, the
// variance taken unbiased (var * m / (m - 1)). The multiply-add is written out: it is the
// contraction the GPU's three-launch finalize has always had (nvcc's -fmad), whichever kernel
// inlines this, so the running statistics keep their bits.
MINIDL_HD void update_running(float& running_mean, float& running_var, const Moments& s, double m,
                                   double momentum) {
  const double unbiased = m > 1 ? s.var * m / (m - 1) : s.var;
  running_mean = static_cast<float>(fma(1 - momentum, static_cast<double>(running_mean), momentum * s.mean));
  running_var = static_cast<float>(fma(1 - momentum, static_cast<double>(running_var), momentum * unbiased));
}

// k1, k2 of input_grad for a group of m elements, rstd its saved inverse std, from
// BatchNorm: sa = sum g, sb = sum g*(x - mean), w the channel's weight (1 without one);
// GroupNorm/LayerNorm: sa = sum w*g, sb = sum w*g*(x - mean) per element, w = 1.
// Both 0 when the statistics were constants.
MINIDL_HD void statistics_grad(double rstd, double w, double sa, double sb, double m, bool training, float& k1,
                                    float& k2) {
  k1 = training ? static_cast<float>(-rstd * rstd * rstd * w * sb / m) : 0.f;
  k2 = training ? static_cast<float>(-rstd * w * sa / m) : 0.f;
}

}  // namespace minidl::norm
