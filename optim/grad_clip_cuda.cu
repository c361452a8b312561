// GPU side of optim/grad_clip_kernels.h: one block of kClipLanes threads per chunk writes the
// chunk's sum of squares, one block folds the chunk sums into the norm and the scale factor, and
// one block per chunk multiplies the gradients by it, read from device memory. Up to
// kTensorsPerLaunch gradients share a launch (their table travels as the kernel argument); the
// fold of lanes is the CPU's, in shared memory, so both devices give the same bits.
#include <algorithm>

#include "core/cuda/runtime.h"
#include "optim/grad_clip_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kTensorsPerLaunch = 128;

struct ClipList {
  ClipTensor tensors[kTensorsPerLaunch];
  int count;
};
static_assert(sizeof(ClipList) <= 4096, "clip tensor table too large");

// The tensor holding global chunk `chunk` (the last whose first chunk is at most it).
__device__ int find_tensor(const ClipList& list, int64_t chunk) {
  int lo = 0, hi = list.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (list.tensors[mid].first_chunk <= chunk) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__device__ float fold_lanes(float* lanes) {
  for (int w = kClipLanes / 2; w > 0; w /= 2) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < w) lanes[threadIdx.x] += lanes[threadIdx.x + w];
  }
  __syncthreads();
  return lanes[0];
}

__global__ void __launch_bounds__(kClipLanes) chunk_sums_kernel(ClipList list, float* partials) {
  __shared__ float lanes[kClipLanes];
  const int64_t chunk = list.tensors[0].first_chunk + blockIdx.x;
  const ClipTensor t = list.tensors[find_tensor(list, chunk)];
  lanes[threadIdx.x] = clip_lane_sum(t.grad, t.n, chunk - t.first_chunk, static_cast<int>(threadIdx.x));
  const float sum = fold_lanes(lanes);
  if (threadIdx.x == 0) partials[chunk] = sum;
}

__global__ void __launch_bounds__(kClipLanes) coef_kernel(const float* partials, int64_t count, float max_norm,
                                                           float* state) {
  __shared__ float lanes[kClipLanes];
  lanes[threadIdx.x] = clip_lane_total(partials, count, static_cast<int>(threadIdx.x));
  const float sum = fold_lanes(lanes);
  if (threadIdx.x == 0) state[1] = clip_coef(sum, max_norm, &state[0]);
}

__global__ void __launch_bounds__(kClipLanes) scale_kernel(ClipList list, const float* __restrict__ state) {
  const float coef = state[1];
  const int64_t chunk = list.tensors[0].first_chunk + blockIdx.x;
  const ClipTensor t = list.tensors[find_tensor(list, chunk)];
  const int64_t base = (chunk - t.first_chunk) * kClipChunk + threadIdx.x;
  for (int j = 0; j < kClipPerLane; ++j) {
    const int64_t i = base + static_cast<int64_t>(j) * kClipLanes;
    if (i < t.n) t.grad[i] *= coef;
  }
}

// Calls launch(list, chunks) for each run of up to kTensorsPerLaunch gradients with elements.
template <class Launch>
void for_each_list(const std::vector<ClipTensor>& grads, Launch launch) {
  ClipList list{};
  int64_t chunks = 0;
  auto flush = [&] {
    if (list.count > 0) launch(list, chunks);
    list = ClipList{};
    chunks = 0;
  };
  for (const ClipTensor& t : grads) {
    if (t.n == 0) continue;
    list.tensors[list.count++] = t;
    chunks += clip_chunks(t.n);
    if (list.count == kTensorsPerLaunch) flush();
  }
  flush();
}

}  // namespace

void clip_grad_norm_cuda(const std::vector<ClipTensor>& grads, float max_norm, float* partials, float* state) {
  int64_t count = 0;
  for (const ClipTensor& t : grads) count = std::max(count, t.first_chunk + clip_chunks(t.n));
  for_each_list(grads, [&](const ClipList& list, int64_t chunks) {
    chunk_sums_kernel<<<static_cast<unsigned>(chunks), kClipLanes, 0, cuda::stream()>>>(list, partials);
    MINIDL_LAUNCH_CHECK();
  });
  coef_kernel<<<1, kClipLanes, 0, cuda::stream()>>>(partials, count, max_norm, state);
  MINIDL_LAUNCH_CHECK();
  for_each_list(grads, [&](const ClipList& list, int64_t chunks) {
    scale_kernel<<<static_cast<unsigned>(chunks), kClipLanes, 0, cuda::stream()>>>(list, state);
    MINIDL_LAUNCH_CHECK();
  });
}

}  // namespace minidl::kernels
