// CUDA kernels of ReLU and GELU (CPU references in activation_cpu.cpp, both from the formulas of
// activation_math.h), in float32, bfloat16 or float16 storage with float32 arithmetic: the
// elementwise maps of core/cuda/elementwise.cuh (16-byte packs, one read and one write per element).
#include <cstdint>

#include "core/cuda/elementwise.cuh"
#include "core/dispatch.h"
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

}  // namespace

template <class T>
void relu_forward_cuda(const T* x, T* y, int64_t n) {
  cuda::launch_map1(x, y, n, ReluForward{});
}

template <class T>
void relu_backward_cuda(const T* dy, const T* y, T* dx, int64_t n) {
  cuda::launch_map2(dy, y, dx, n, ReluBackward{});
}

template <class T>
void gelu_forward_cuda(const T* x, T* y, int64_t n, GeluApproximate approximate) {
  cuda::launch_map1(x, y, n, GeluForward{approximate == GeluApproximate::Tanh});
}

template <class T>
void gelu_backward_cuda(const T* dy, const T* x, T* dx, int64_t n, GeluApproximate approximate) {
  cuda::launch_map2(dy, x, dx, n, GeluBackward{approximate == GeluApproximate::Tanh});
}

#define MINIDL_ACTIVATION_CUDA(T)                                                                  \
  template void relu_forward_cuda<T>(const T*, T*, int64_t);                                       \
  template void relu_backward_cuda<T>(const T*, const T*, T*, int64_t);                            \
  template void gelu_forward_cuda<T>(const T*, T*, int64_t, GeluApproximate);                      \
  template void gelu_backward_cuda<T>(const T*, const T*, T*, int64_t, GeluApproximate);
MINIDL_FOR_FLOATING_TYPES(MINIDL_ACTIVATION_CUDA)

}  // namespace minidl::kernels
