// CUDA kernels of the pointwise activations (CPU references in pointwise_cpu.cpp, both from the
// formulas of activation_math.h): the elementwise maps of core/cuda/elementwise.cuh in float32,
// bfloat16 or float16 storage with float32 arithmetic, one read and one write per element.
#include <cstdint>

#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/cuda/elementwise.cuh"
#include "layers/activation/pointwise_kernels.h"

namespace minidl::kernels {

namespace {

template <Activation A>
struct Forward {
  __device__ float operator()(float x) const { return act::forward(A, x); }
};
template <Activation A>
struct Backward {  // (dy, saved)
  __device__ float operator()(float dy, float saved) const { return act::backward(A, dy, saved); }
};

}  // namespace

template <class T>
void pointwise_forward_cuda(Activation a, const T* x, T* y, int64_t n) {
  act::with_activation(a, [&](auto kind) { cuda::launch_map1(x, y, n, Forward<decltype(kind)::value>{}); });
}

template <class T>
void pointwise_backward_cuda(Activation a, const T* dy, const T* saved, T* dx, int64_t n) {
  act::with_activation(a, [&](auto kind) { cuda::launch_map2(dy, saved, dx, n, Backward<decltype(kind)::value>{}); });
}

#define MINIDL_POINTWISE_CUDA(T)                                              \
  template void pointwise_forward_cuda<T>(Activation, const T*, T*, int64_t); \
  template void pointwise_backward_cuda<T>(Activation, const T*, const T*, T*, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_POINTWISE_CUDA)

}  // namespace minidl::kernels
