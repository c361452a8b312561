// CUDA kernels of ReLU and GELU (CPU references in activation_cpu.cpp, both from the formulas of
// activation_math.h), in float32, bfloat16 or float16 storage with float32 arithmetic: the
// elementwise maps of core/cuda/elementwise.cuh (16-byte packs, one read and one write per element).
#include <cstdint>

#include "core/cast_kernels.h"
#include "core/cuda/elementwise.cuh"
#include "layers/activation/activation_kernels.h"
#include "layers/activation/activation_math.h"

namespace minidl::kernels {

namespace {

struct ReluForward {
  __device__ float operator()(float x) const { return act::relu_forward(x); }
};
struct ReluBackward {  // (dy, y): NaN outputs pass dy on, see activation.h
  __device__ float operator()(float dy, float y) const { return act::relu_backward(dy, y); }
};
struct GeluForward {
  bool tanh_form;
  __device__ float operator()(float x) const { return tanh_form ? act::gelu_tanh_forward(x) : act::gelu_forward(x); }
};
struct GeluBackward {  // (dy, x)
  bool tanh_form;
  __device__ float operator()(float dy, float x) const {
    return tanh_form ? act::gelu_tanh_backward(dy, x) : act::gelu_backward(dy, x);
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
