// CPU kernels of ReLU and GELU: plain loops over contiguous floats, split across threads in
// fixed chunks (each element's result depends only on its own inputs, so any split gives the
// same bits). The formulas are PyTorch's (aten/src/ATen/native/cpu/Activation.cpp).
#include <cmath>

#include "layers/activation/activation_kernels.h"

namespace minidl::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save
constexpr float kSqrt1_2 = 0.70710678118654752440f;       // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;    // 1/sqrt(2*pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;   // sqrt(2/pi)
constexpr float kTanhCoef = 0.044715f;
}  // namespace

void relu_forward_cpu(const float* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] <= 0.f ? 0.f : x[i];
}

void relu_backward_cpu(const float* dy, const float* y, float* dx, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] <= 0.f ? 0.f : dy[i];
}

// none: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
// tanh: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward_cpu(const float* x, float* y, int64_t n, GeluApproximate approximate) {
  if (approximate == GeluApproximate::Tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float inner = kSqrt2OverPi * (v + kTanhCoef * v * v * v);
      y[i] = 0.5f * v * (1.f + std::tanh(inner));
    }
  } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      y[i] = 0.5f * v * (1.f + std::erf(v * kSqrt1_2));
    }
  }
}

// none: dy/dx = Phi(x) + x phi(x), phi the standard normal density.
// tanh: dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
void gelu_backward_cpu(const float* dy, const float* x, float* dx, int64_t n, GeluApproximate approximate) {
  if (approximate == GeluApproximate::Tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float t = std::tanh(kSqrt2OverPi * (v + kTanhCoef * v * v * v));
      const float dinner = kSqrt2OverPi * (1.f + 3.f * kTanhCoef * v * v);
      dx[i] = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * dinner);
    }
  } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float cdf = 0.5f * (1.f + std::erf(v * kSqrt1_2));
      const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
      dx[i] = dy[i] * (cdf + v * pdf);
    }
  }
}

}  // namespace minidl::kernels
