// GPU side of optim/update_kernels.h: one launch updates up to kTensorsPerLaunch parameter
// tensors (a multi-tensor apply, as in PyTorch's fused optimizers): a step of a ResNet costs a
// launch or two instead of one per tensor. The tensor table travels as a kernel argument (no
// host-to-device copy, no allocation), which is what bounds its size; the per-step scalars come
// from the optimizer's device table (update_kernels.h says why).
#include <algorithm>
#include <vector>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "optim/update_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int kUpdateBlock = 256;
constexpr int kTensorsPerLaunch = 64;

template <class T, class H>
struct TensorList {
  T tensors[kTensorsPerLaunch];
  H hyper;
  int count;
};
// The classic 4 KB kernel-parameter limit, which every supported driver accepts.
static_assert(sizeof(TensorList<SgdTensor, SgdHyper>) <= 4096, "SGD tensor table too large");
static_assert(sizeof(TensorList<AdamwTensor, AdamwHyper>) <= 4096, "AdamW tensor table too large");

__device__ __forceinline__ void update(const SgdTensor& t, const SgdHyper& h, int64_t i) {
  sgd_update(t, h, i);
}
__device__ __forceinline__ void update(const AdamwTensor& t, const AdamwHyper& h, int64_t i) {
  adamw_update(t, h, i);
}

// Each tensor is covered by a grid-stride loop over the whole grid. The starting block rotates
// with the tensor's position, so the many small tensors (biases, norm weights) land on
// different blocks instead of all queueing on block 0; each block's span stays contiguous, so
// accesses still coalesce. Every element is updated by exactly one thread: no races, no atomics.
// A set skip flag (float16 loss scaling found an inf or NaN) ends every thread before it writes.
template <class T, class H>
__global__ void multi_tensor_update_kernel(TensorList<T, H> list, const float* __restrict__ scalars,
                                           const float* __restrict__ skip) {
  if (skip && *skip != 0.f) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int k = 0; k < list.count; ++k) {
    T t = list.tensors[k];
    load_scalars(t, scalars);
    const int64_t block = (blockIdx.x + k) % gridDim.x;
    for (int64_t i = block * blockDim.x + threadIdx.x; i < t.n; i += stride)
      update(t, list.hyper, i);
  }
}

template <class T, class H>
void launch_multi_tensor(const std::vector<T>& tensors, const H& hyper, const float* scalars, const float* skip) {
  for (size_t first = 0; first < tensors.size(); first += kTensorsPerLaunch) {
    TensorList<T, H> list{};
    list.hyper = hyper;
    list.count = static_cast<int>(std::min<size_t>(kTensorsPerLaunch, tensors.size() - first));
    int64_t largest = 0;
    for (int k = 0; k < list.count; ++k) {
      list.tensors[k] = tensors[first + k];
      largest = std::max(largest, list.tensors[k].n);
    }
    if (largest == 0) continue;
    const int grid = cuda::grid_blocks(cuda::ceil_div(largest, kUpdateBlock), kUpdateBlock);
    multi_tensor_update_kernel<T, H><<<grid, kUpdateBlock, 0, cuda::stream()>>>(list, scalars, skip);
    MINIDL_LAUNCH_CHECK();
  }
}

constexpr int kCountsPerLaunch = 512;

struct SlotList {
  int32_t slots[kCountsPerLaunch];
  int count;
};
static_assert(sizeof(SlotList) + sizeof(StepCounts) <= 4096, "step-count slot table too large");

__global__ void count_steps_kernel(StepCounts c, SlotList list) {
  for (int k = threadIdx.x; k < list.count; k += blockDim.x) count_step(c, list.slots[k]);
}

}  // namespace

void sgd_step_cuda(const std::vector<SgdTensor>& tensors, const SgdHyper& h, const float* scalars, const float* skip) {
  launch_multi_tensor(tensors, h, scalars, skip);
}

void adamw_step_cuda(const std::vector<AdamwTensor>& tensors, const AdamwHyper& h, const float* scalars,
                     const float* skip) {
  launch_multi_tensor(tensors, h, scalars, skip);
}

void count_steps_cuda(const StepCounts& c, const std::vector<int32_t>& slots) {
  for (size_t first = 0; first < slots.size(); first += kCountsPerLaunch) {
    SlotList list{};
    list.count = static_cast<int>(std::min<size_t>(kCountsPerLaunch, slots.size() - first));
    std::copy(slots.begin() + first, slots.begin() + first + list.count, list.slots);
    count_steps_kernel<<<1, 128, 0, cuda::stream()>>>(c, list);
    MINIDL_LAUNCH_CHECK();
  }
}

}  // namespace minidl::kernels
