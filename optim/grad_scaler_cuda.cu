// GPU side of optim/grad_scaler_kernels.h. The unscale covers up to kTensorsPerLaunch gradients
// per launch (a ResNet's ~30 gradients in one launch instead of one each: inside a CUDA graph the
// per-kernel cost is a microsecond or two, on the step's critical path); 1/scale is read from the
// device, so a replayed graph uses each step's scale. The rule is one thread: a few flops.
#include <algorithm>

#include "core/cuda/runtime.h"
#include "optim/grad_scaler_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kTensorsPerLaunch = 128;

struct UnscaleList {
  UnscaleTensor tensors[kTensorsPerLaunch];
  int count;
};
static_assert(sizeof(UnscaleList) <= 4096, "unscale tensor table too large");

// A grid-stride loop per tensor whose first block rotates with the tensor's position, so the
// many small tensors (biases, norm weights) spread over the grid.
__global__ void unscale_kernel(UnscaleList list, const float* __restrict__ scale, float* found_inf) {
  const float inv_scale = inverse_scale(*scale);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int k = 0; k < list.count; ++k) {
    const UnscaleTensor t = list.tensors[k];
    const int64_t block = (blockIdx.x + k) % gridDim.x;
    for (int64_t i = block * blockDim.x + threadIdx.x; i < t.n; i += stride)
      unscale_update(t.grad, inv_scale, found_inf, i);
  }
}

__global__ void update_scale_kernel(ScalerState state, ScalerRule rule) { update_scale(state, rule); }

}  // namespace

void unscale_cuda(const std::vector<UnscaleTensor>& grads, const float* scale, float* found_inf) {
  for (size_t first = 0; first < grads.size(); first += kTensorsPerLaunch) {
    UnscaleList list{};
    list.count = static_cast<int>(std::min<size_t>(kTensorsPerLaunch, grads.size() - first));
    int64_t largest = 0;
    for (int k = 0; k < list.count; ++k) {
      list.tensors[k] = grads[first + k];
      largest = std::max(largest, list.tensors[k].n);
    }
    if (largest == 0) continue;
    const int grid = static_cast<int>(std::min<int64_t>((largest + kThreads - 1) / kThreads,
                                                        cuda::resident_blocks(kThreads)));
    unscale_kernel<<<grid, kThreads, 0, cuda::stream()>>>(list, scale, found_inf);
    MINIDL_LAUNCH_CHECK();
  }
}

void update_scale_cuda(const ScalerState& state, const ScalerRule& rule) {
  update_scale_kernel<<<1, 1, 0, cuda::stream()>>>(state, rule);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
