// The per-element formulas of the activations (ReLU, GELU, SiLU, Hardswish, Sigmoid), shared by
// the activation kernels (CPU and CUDA) and by the normalization kernels that fuse an activation,
// so a fused activation computes the float operations the separate layer would on the same input.
// The formulas are PyTorch's (aten/src/ATen/native/cpu/Activation.cpp); arithmetic in float32.
#pragma once
#include <math.h>

#include <type_traits>

#include "core/host_device.h"

namespace minidl {

// An activation a kernel applies elementwise: the layers SiLU, Hardswish and Sigmoid run through
// it, and a normalization layer fuses any of them into its own kernels (norm_math.h). GELU here
// is the exact (erf) form.
enum class Activation : unsigned char { None, ReLU, GELU, SiLU, Hardswish, Sigmoid };

}  // namespace minidl

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
// Sigmoid: exp(-x), + 1, 1 / that; backward on the output y: (1 - y) * y * dy. SiLU: x times the
// sigmoid; backward the sigmoid again, then (1 - s), x *, + 1, * s, * dy. Hardswish: + 3, max,
// min, * x, / 6; backward two comparisons, / 3, + 0.5, * dy.
constexpr double kSigmoidForwardFlops = 3, kSigmoidBackwardFlops = 3;
constexpr double kSiluForwardFlops = 4, kSiluBackwardFlops = 8;
constexpr double kHardswishForwardFlops = 5, kHardswishBackwardFlops = 5;

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

// Sigmoid as torch.sigmoid: 1 / (1 + exp(-x)).
MINIDL_HD float sigmoid_forward(float x) { return 1.f / (1.f + expf(-x)); }

// Its backward on its output y, PyTorch's sigmoid_backward: dy * (1 - y) * y.
MINIDL_HD float sigmoid_backward(float dy, float y) { return dy * (1.f - y) * y; }

// SiLU (swish) as torch.nn.functional.silu: x / (1 + exp(-x)).
MINIDL_HD float silu_forward(float x) { return x / (1.f + expf(-x)); }

// Its derivative on the input, PyTorch's silu_backward: s (1 + x (1 - s)), s = sigmoid(x).
MINIDL_HD float silu_backward(float dy, float x) {
  const float s = 1.f / (1.f + expf(-x));
  return dy * s * (1.f + x * (1.f - s));
}

// Hardswish as torch.nn.functional.hardswish: x * min(max(x + 3, 0), 6) / 6.
MINIDL_HD float hardswish_forward(float x) { return x * fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f; }

// Its derivative on the input, PyTorch's hardswish_backward: 0 below -3, x / 3 + 0.5 up to 3, 1
// above.
MINIDL_HD float hardswish_backward(float dy, float x) {
  return x < -3.f ? 0.f : x <= 3.f ? dy * (x / 3.f + 0.5f) : dy;
}

// The activation `a` of x.
MINIDL_HD float forward(Activation a, float x) {
  switch (a) {
    case Activation::ReLU: return relu_forward(x);
    case Activation::GELU: return gelu_forward(x);
    case Activation::SiLU: return silu_forward(x);
    case Activation::Hardswish: return hardswish_forward(x);
    case Activation::Sigmoid: return sigmoid_forward(x);
    case Activation::None: break;
  }
  return x;
}

// True where the backward reads the forward's output (ReLU, Sigmoid) rather than its input.
MINIDL_HD bool backward_reads_output(Activation a) { return a == Activation::ReLU || a == Activation::Sigmoid; }

// dy through `a`, from what the backward reads (backward_reads_output: y, else x).
MINIDL_HD float backward(Activation a, float dy, float saved) {
  switch (a) {
    case Activation::ReLU: return relu_backward(dy, saved);
    case Activation::GELU: return gelu_backward(dy, saved);
    case Activation::SiLU: return silu_backward(dy, saved);
    case Activation::Hardswish: return hardswish_backward(dy, saved);
    case Activation::Sigmoid: return sigmoid_backward(dy, saved);
    case Activation::None: break;
  }
  return dy;
}

// dy through `a` from its input x, whatever the backward reads: the output is recomputed with the
// forward's operations, so the result has the bits of backward() on the saved output.
MINIDL_HD float backward_from_input(Activation a, float dy, float x) {
  return a == Activation::Sigmoid ? sigmoid_backward(dy, sigmoid_forward(x)) : backward(a, dy, x);
}

// FLOPs per element of the forward and of the backward (the counts above).
MINIDL_HD double forward_flops(Activation a) {
  switch (a) {
    case Activation::ReLU: return kReluForwardFlops;
    case Activation::GELU: return kGeluForwardFlops;
    case Activation::SiLU: return kSiluForwardFlops;
    case Activation::Hardswish: return kHardswishForwardFlops;
    case Activation::Sigmoid: return kSigmoidForwardFlops;
    case Activation::None: break;
  }
  return 0;
}

MINIDL_HD double backward_flops(Activation a) {
  switch (a) {
    case Activation::ReLU: return kReluBackwardFlops;
    case Activation::GELU: return kGeluBackwardFlops;
    case Activation::SiLU: return kSiluBackwardFlops;
    case Activation::Hardswish: return kHardswishBackwardFlops;
    case Activation::Sigmoid: return kSigmoidBackwardFlops;
    case Activation::None: break;
  }
  return 0;
}

// Runs f(std::integral_constant<Activation, a>{}): a loop or kernel that takes the activation as
// a compile-time constant holds only its own formula, so without one or with ReLU it keeps the
// registers (GPU) and the vectorization (CPU) it has without the erf and exp of the others. Host
// code.
template <class F>
void with_activation(Activation a, F&& f) {
  switch (a) {
    case Activation::ReLU: return f(std::integral_constant<Activation, Activation::ReLU>{});
    case Activation::GELU: return f(std::integral_constant<Activation, Activation::GELU>{});
    case Activation::SiLU: return f(std::integral_constant<Activation, Activation::SiLU>{});
    case Activation::Hardswish: return f(std::integral_constant<Activation, Activation::Hardswish>{});
    case Activation::Sigmoid: return f(std::integral_constant<Activation, Activation::Sigmoid>{});
    case Activation::None: break;
  }
  f(std::integral_constant<Activation, Activation::None>{});
}

}  // namespace minidl::act
