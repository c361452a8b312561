// CUDA side of core/tensor_ops.h: fill and y = a*x + b*z. Grid-stride loops over a grid that
// fills the chip once; these are memory-bound, so the only goal is coalesced full-width access.
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
__global__ void axpby_kernel(float* y, float a, const float* x, float b, const float* z, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float ax = __fmul_rn(a, x[i]);
    y[i] = z ? __fadd_rn(ax, __fmul_rn(b, z[i])) : ax;
  }
}

constexpr int kBlock = 256;

int grid_for(int64_t n) { return cuda::grid_blocks(cuda::ceil_div(n, kBlock), kBlock); }

}  // namespace

void fill_cuda(float* y, float v, int64_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kBlock, 0, cuda::stream()>>>(y, v, n);
  MINIDL_LAUNCH_CHECK();
}

void axpby_cuda(float* y, float a, const float* x, float b, const float* z, int64_t n) {
  if (n == 0) return;
  axpby_kernel<<<grid_for(n), kBlock, 0, cuda::stream()>>>(y, a, x, b, z, n);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
