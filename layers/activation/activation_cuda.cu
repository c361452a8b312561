// CUDA kernels of ReLU and GELU (CPU references in activation_cpu.cpp, same formulas), in
// float32, bfloat16 or float16 storage with float32 arithmetic: the elementwise maps of
// core/cuda/elementwise.cuh (16-byte packs, one read and one write per element).
#include <cstdint>

#include "core/cast_kernels.h"
#include "core/cuda/elementwise.cuh"
#include "layers/activation/activation_kernels.h"

namespace minidl::kernels {

namespace {

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kTanhCoef = 0.044715f;

struct ReluForward {
  __device__ float operator()(float x) const { return x <= 0.f ? 0.f : x; }
};
struct ReluBackward {  // (dy, y): NaN outputs pass dy on, see activation.h
  __device__ float operator()(float dy, float y) const { return y <= 0.f ? 0.f : dy; }
};
struct GeluForward {
  bool tanh_form;
  __device__ float operator()(float x) const {
    if (tanh_form) return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
    return 0.5f * x * (1.f + erff(x * kSqrt1_2));
  }
};
struct GeluBackward {  // (dy, x)
  bool tanh_form;
  __device__ float operator()(float dy, float x) const {
    if (tanh_form) {
      const float t = tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x));
      const float dinner = kSqrt2OverPi * (1.f + 3.f * kTanhCoef * x * x);
      return dy * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * dinner);
    }
    const float cdf = 0.5f * (1.f + erff(x * kSqrt1_2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

// Runs op over n elements of `dtype` (activation_kernels.h: the pointers hold that type).
template <class Op>
void map1(DType dtype, const void* a, void* out, int64_t n, Op op) {
  visit_floating(dtype, "activation", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_map1(static_cast<const T*>(a), static_cast<T*>(out), n, op);
  });
}

template <class Op>
void map2(DType dtype, const void* a, const void* b, void* out, int64_t n, Op op) {
  visit_floating(dtype, "activation", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_map2(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, op);
  });
}

}  // namespace

void relu_forward_cuda(DType dtype, const void* x, void* y, int64_t n) { map1(dtype, x, y, n, ReluForward{}); }

void relu_backward_cuda(DType dtype, const void* dy, const void* y, void* dx, int64_t n) {
  map2(dtype, dy, y, dx, n, ReluBackward{});
}

void gelu_forward_cuda(DType dtype, const void* x, void* y, int64_t n, GeluApproximate approximate) {
  map1(dtype, x, y, n, GeluForward{approximate == GeluApproximate::Tanh});
}

void gelu_backward_cuda(DType dtype, const void* dy, const void* x, void* dx, int64_t n,
                        GeluApproximate approximate) {
  map2(dtype, dy, x, dx, n, GeluBackward{approximate == GeluApproximate::Tanh});
}

}  // namespace minidl::kernels
