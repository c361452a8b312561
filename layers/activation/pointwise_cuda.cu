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

void pointwise_forward_cuda(Activation a, DType dtype, const void* x, void* y, int64_t n) {
  dispatch_dtype(dtype, "pointwise activation", [&](auto tag) {
    using T = decltype(tag);
    act::with_activation(a, [&](auto kind) {
      cuda::launch_map1(static_cast<const T*>(x), static_cast<T*>(y), n, Forward<decltype(kind)::value>{});
    });
  });
}

void pointwise_backward_cuda(Activation a, DType dtype, const void* dy, const void* saved, void* dx, int64_t n) {
  dispatch_dtype(dtype, "pointwise activation", [&](auto tag) {
    using T = decltype(tag);
    act::with_activation(a, [&](auto kind) {
      cuda::launch_map2(static_cast<const T*>(dy), static_cast<const T*>(saved), static_cast<T*>(dx), n,
                        Backward<decltype(kind)::value>{});
    });
  });
}

}  // namespace minidl::kernels
