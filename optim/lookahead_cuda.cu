// GPU side of optim/lookahead_kernels.h: one grid-stride pass per averaged tensor.
#include <algorithm>

#include "core/cuda/runtime.h"
#include "optim/lookahead_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void lerp_kernel(float* __restrict__ avg, const float* __restrict__ x, const float* __restrict__ weight,
                            int64_t n) {
  const float w = *weight;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    lerp_update(avg, x, w, i);
}

}  // namespace

void lerp_cuda(float* avg, const float* x, const float* w, int64_t n) {
  if (n == 0) return;
  const int grid = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, cuda::resident_blocks(kThreads)));
  lerp_kernel<<<grid, kThreads, 0, cuda::stream()>>>(avg, x, w, n);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
