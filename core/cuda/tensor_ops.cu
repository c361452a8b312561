// CUDA side of core/tensor_ops.h: fill and y = a*x + b*z (float32, bfloat16 or float16 storage,
// float32 arithmetic: core/cuda/elementwise.cuh). Grid-stride loops over a grid that fills the
// chip once; these are memory-bound, so the only goal is coalesced full-width access.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/cuda/elementwise.cuh"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/tensor_ops.h"

namespace minidl::kernels {

namespace {

__global__ void fill_kernel(float* __restrict__ y, float v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = v;
}

// __fmul_rn keeps a*x + b*z as two rounded products and a rounded sum (no FMA contraction), so
// the GPU gives the CPU's bits.
struct Axpby {
  float a, b;
  __device__ float operator()(float x, float z) const { return __fadd_rn(__fmul_rn(a, x), __fmul_rn(b, z)); }
};
struct Scale {
  float a;
  __device__ float operator()(float x) const { return __fmul_rn(a, x); }
};

constexpr int kBlock = 256;

int grid_for(int64_t n) { return cuda::grid_blocks(cuda::ceil_div(n, kBlock), kBlock); }

template <class H>
__global__ void add_float_and_half_kernel(float* __restrict__ y, const float* __restrict__ f,
                                          const H* __restrict__ h, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __fadd_rn(f[i], to_float(h[i]));
}

}  // namespace

void fill_cuda(float* y, float v, int64_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kBlock, 0, cuda::stream()>>>(y, v, n);
  MINIDL_LAUNCH_CHECK();
}

void axpby_cuda(DType dtype, void* y, float a, const void* x, float b, const void* z, int64_t n) {
  dispatch_dtype(dtype, "axpby", [&](auto tag) {
    using T = decltype(tag);
    if (z)
      cuda::launch_map2(static_cast<const T*>(x), static_cast<const T*>(z), static_cast<T*>(y), n, Axpby{a, b});
    else
      cuda::launch_map1(static_cast<const T*>(x), static_cast<T*>(y), n, Scale{a});
  });
}

void add_float_and_half_cuda(float* y, const float* f, DType h_dtype, const void* h, int64_t n) {
  if (n == 0) return;
  dispatch_dtype(h_dtype, "add_float_and_half", [&](auto tag) {
    using H = decltype(tag);
    add_float_and_half_kernel<H><<<grid_for(n), kBlock, 0, cuda::stream()>>>(y, f, static_cast<const H*>(h), n);
    MINIDL_LAUNCH_CHECK();
  });
}

}  // namespace minidl::kernels
