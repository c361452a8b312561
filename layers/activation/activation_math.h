// The per-element formulas of ReLU and GELU, shared by the activation kernels (CPU and CUDA) and
// by the normalization kernels that fuse an activation, so a fused activation computes the float
// operations the separate layer would on the same input. The formulas are PyTorch's
// (aten/src/ATen/native/cpu/Activation.cpp); arithmetic in float32.
#pragma once
#include <math.h>

#include "core/host_device.h"

namespace minidl::act {

constexpr float kSqrt1_2 = 0.70710678118654752440f;      // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1/sqrt(2*pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kTanhCoef = 0.044715f;

// Operations per element the profiler counts for these formulas, erf, tanh and exp as one each:
// ReLU one comparison, backward one select; GELU x/sqrt 2, erf, + 1, * x, * 0.5, backward the cdf
// again plus the density (x * x, * -0.5, exp, * 1/sqrt(2 pi)) and x * pdf + cdf, times dy.
constexpr double kReluForwardFlops = 1, kReluBackwardFlops = 1;
constexpr double kGeluForwardFlops = 5, kGeluBackwardFlops = 9;

// ReLU as torch.relu: NaN fails the comparison and passes through.
MINIDL_HD float relu_forward(float x) { return x <= 0.f ? 0.f : x; }

// ReLU's backward on its output or its input (the same sign): dy passes unless y <= 0, so a NaN
// keeps its gradient.
MINIDL_HD float relu_backward(float dy, float y) { return y <= 0.f ? 0.f : dy; }

// GELU, exact form: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
MINIDL_HD float gelu_forward(float x) { return 0.5f * x * (1.f + erff(x * kSqrt1_2)); }

// Its derivative on the input x: Phi(x) + x phi(x), phi the standard normal density.
MINIDL_HD float gelu_backward(float dy, float x) {
  const float cdf = 0.5f * (1.f + erff(x * kSqrt1_2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
MINIDL_HD float gelu_tanh_forward(float x) {
  return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
}

// Its derivative: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
MINIDL_HD float gelu_tanh_backward(float dy, float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x));
  const float dinner = kSqrt2OverPi * (1.f + 3.f * kTanhCoef * x * x);
  return dy * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * dinner);
}

}  // namespace minidl::act
