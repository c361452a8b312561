// MaxPool3d on the GPU: one thread per element (grid-stride), the per-element code the CPU runs
// (max_pool3d_math.h).
#include "core/cuda/kernel_helpers.cuh"
#include "core/dispatch.h"
#include "layers/pool/max_pool3d_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void forward_kernel(Pool3dShape s, const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ idx,
                               int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    pool3d::forward_at(s, x, y, idx, i);
}

template <class T>
__global__ void backward_kernel(Pool3dShape s, const T* __restrict__ dy, const int32_t* __restrict__ idx,
                                T* __restrict__ dx, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    pool3d::backward_at(s, dy, idx, dx, i);
}

}  // namespace

template <class T>
void max_pool3d_forward_cuda(const Pool3dShape& s, const T* x, T* y, int32_t* idx) {
  const int64_t total = s.n * s.c * s.od() * s.oh() * s.ow();
  if (total == 0) return;
  forward_kernel<T><<<cuda::grid_blocks(cuda::ceil_div(total, kThreads), kThreads), kThreads, 0, cuda::stream()>>>(
      s, x, y, idx, total);
  MINIDL_LAUNCH_CHECK();
}

template <class T>
void max_pool3d_backward_cuda(const Pool3dShape& s, const T* dy, const int32_t* idx, T* dx) {
  const int64_t total = s.n * s.c * s.d * s.h * s.w;
  if (total == 0) return;
  backward_kernel<T><<<cuda::grid_blocks(cuda::ceil_div(total, kThreads), kThreads), kThreads, 0, cuda::stream()>>>(
      s, dy, idx, dx, total);
  MINIDL_LAUNCH_CHECK();
}

#define MINIDL_MAX_POOL3D_CUDA(T)                                                       \
  template void max_pool3d_forward_cuda<T>(const Pool3dShape&, const T*, T*, int32_t*); \
  template void max_pool3d_backward_cuda<T>(const Pool3dShape&, const T*, const int32_t*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_MAX_POOL3D_CUDA)

}  // namespace minidl::kernels
