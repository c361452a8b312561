// GPU side of optim/grad_scaler_kernels.h: one grid-stride pass per gradient tensor.
#include <algorithm>

#include "core/cuda/runtime.h"
#include "optim/grad_scaler_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void unscale_kernel(float* __restrict__ g, float inv_scale, float* found_inf, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    unscale_update(g, inv_scale, found_inf, i);
}

}  // namespace

void unscale_cuda(float* g, float inv_scale, float* found_inf, int64_t n) {
  if (n == 0) return;
  const int grid = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, cuda::resident_blocks(kThreads)));
  unscale_kernel<<<grid, kThreads, 0, cuda::stream()>>>(g, inv_scale, found_inf, n);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
