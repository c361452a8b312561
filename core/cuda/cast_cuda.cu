// CUDA side of core/cast_kernels.h: a grid-stride loop running the host's conversion code
// (core/half_types.h), so every element gets the CPU's bits. Memory-bound: coalesced access is
// all that matters here.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/cuda/kernel_helpers.cuh"

namespace minidl::kernels {

namespace {

template <class From, class To>
__global__ void cast_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = from_float<To>(to_float(x[i]));
}

template <class From, class To>
__global__ void convert_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = static_cast<To>(x[i]);
}

constexpr int kBlock = 256;

}  // namespace

void cast_cuda(const void* x, DType from, void* y, DType to, int64_t n) {
  if (n == 0) return;
  const int grid = cuda::grid_blocks(cuda::ceil_div(n, kBlock), kBlock);
  if (from == DType::Int32 || to == DType::Int32) {
    MINIDL_CHECK(castable(from, to), "cast: ", dtype_name(from), " to ", dtype_name(to), " is not a conversion");
    if (from == DType::Int32)
      convert_kernel<<<grid, kBlock, 0, cuda::stream()>>>(static_cast<const int32_t*>(x), static_cast<float*>(y), n);
    else
      convert_kernel<<<grid, kBlock, 0, cuda::stream()>>>(static_cast<const float*>(x), static_cast<int32_t*>(y), n);
    MINIDL_LAUNCH_CHECK();
    return;
  }
  dispatch_dtype(from, "cast", [&](auto a) {
    dispatch_dtype(to, "cast", [&](auto b) {
      using From = decltype(a);
      using To = decltype(b);
      cast_kernel<From, To><<<grid, kBlock, 0, cuda::stream()>>>(static_cast<const From*>(x), static_cast<To*>(y), n);
      MINIDL_LAUNCH_CHECK();
    });
  });
}

}  // namespace minidl::kernels
