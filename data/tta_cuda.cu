// GPU side of data/tta.h: a pure gather, one thread per output element, so writes coalesce and
// the reads of a warp stay within one or two rows of the source plane.
#include <algorithm>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "data/tta.h"

namespace minidl::kernels {

namespace {

constexpr int kTtaBlock = 256;

__global__ void flip_translate_kernel(const float* __restrict__ in, float* __restrict__ out,
                                      int64_t total, int h, int w, bool flip, int dy, int dx) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int x = static_cast<int>(i % w);
    const int y = static_cast<int>((i / w) % h);
    const int64_t plane = i / (static_cast<int64_t>(h) * w);
    const int sy = reflect_index(y - dy, h);
    const int v = reflect_index(x - dx, w);
    out[i] = in[(plane * h + sy) * w + (flip ? w - 1 - v : v)];
  }
}

}  // namespace

void flip_translate_cuda(const float* in, float* out, int64_t planes, int h, int w, bool flip,
                         int dy, int dx) {
  const int64_t total = planes * h * w;
  if (total == 0) return;
  const int grid = cuda::grid_blocks(cuda::ceil_div(total, kTtaBlock), kTtaBlock);
  flip_translate_kernel<<<grid, kTtaBlock, 0, cuda::stream()>>>(in, out, total, h, w, flip, dy, dx);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
