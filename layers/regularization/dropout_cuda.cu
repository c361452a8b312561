// The dropout map on the GPU: one element per thread in a grid-stride loop, the draw from
// dropout_draw.h (the CPU's formula), the step read from device memory (a graph replays each
// step's draws without re-capture).
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/half_types.h"
#include "layers/regularization/dropout_kernels.h"

namespace minidl::kernels {
namespace {

template <class T>
__global__ void dropout_kernel(DropoutDraw draw, const int64_t* __restrict__ step, const T* __restrict__ x,
                               T* __restrict__ y, int64_t n) {
  const int64_t s = *step;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    y[i] = from_float<T>(to_float(x[i]) * dropout_factor(draw, s, i));
}

}  // namespace

template <class T>
void dropout_cuda(const DropoutDraw& draw, const int64_t* step, const T* x, T* y, int64_t n) {
  if (n == 0) return;
  constexpr int kBlock = 256;
  dropout_kernel<T><<<cuda::grid_blocks(cuda::ceil_div(n, kBlock), kBlock), kBlock, 0, cuda::stream()>>>(draw, step, x,
                                                                                                       y, n);
  MINIDL_LAUNCH_CHECK();
}

#define MINIDL_DROPOUT_CUDA(T) \
  template void dropout_cuda<T>(const DropoutDraw&, const int64_t*, const T*, T*, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_DROPOUT_CUDA)

}  // namespace minidl::kernels
