// CUDA kernels of the average pools (CPU reference in avg_pool_cpu.cpp, the windows of
// avg_pool_window.h): one thread per output (forward) or per input element (backward: a gather
// over the windows covering it, no atomics, so the same bits every run). NCHW: a thread per
// element with the width fastest; NHWC: the channel fastest, so a warp reads 32 neighbouring
// channels of one pixel. Values in float32, bfloat16 or float16, read widened, summed in float32
// and rounded once.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/half_types.h"
#include "layers/pool/avg_pool_kernels.h"
#include "layers/pool/avg_pool_window.h"
#include "layers/pool/pooling_index.cuh"

namespace minidl::kernels {

namespace {

// Element (n, c, h, w) of a (n, c, H, W) tensor in either order.
template <bool kNhwc>
__device__ __forceinline__ int64_t offset(int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H, int64_t W) {
  return kNhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

// Splits a flat thread index over (n, c, rows, cols) in memory order.
template <bool kNhwc>
__device__ __forceinline__ void split(int64_t i, int64_t C, int64_t rows, int64_t cols, int64_t& n, int64_t& c,
                                      int64_t& r, int64_t& q) {
  if (kNhwc) {
    c = i % C;
    i /= C;
    q = i % cols;
    i /= cols;
    r = i % rows;
    n = i / rows;
  } else {
    q = i % cols;
    i /= cols;
    r = i % rows;
    i /= rows;
    c = i % C;
    n = i / C;
  }
}

template <class T, bool kNhwc>
__global__ void avg_pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, const AvgPool2dShape s,
                                        const AvgPool2dGeometry g) {
  const int64_t total = s.n * s.c * s.OH * s.OW;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, c, oh, ow;
    split<kNhwc>(i, s.c, s.OH, s.OW, n, c, oh, ow);
    y[i] = from_float<T>(avg_pool::pool_one(
        oh, ow, s, g, [&](int64_t h, int64_t w) { return to_float(x[offset<kNhwc>(n, c, h, w, s.c, s.H, s.W)]); }));
  }
}

template <class T, bool kNhwc>
__global__ void avg_pool_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, const AvgPool2dShape s,
                                         const AvgPool2dGeometry g) {
  const int64_t total = s.n * s.c * s.H * s.W;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, c, h, w;
    split<kNhwc>(i, s.c, s.H, s.W, n, c, h, w);
    dx[i] = from_float<T>(avg_pool::gather_one(h, w, s, g, [&](int64_t oh, int64_t ow) {
      return to_float(dy[offset<kNhwc>(n, c, oh, ow, s.c, s.OH, s.OW)]);
    }));
  }
}

}  // namespace

template <class T>
void avg_pool2d_forward_cuda(const T* x, T* y, const AvgPool2dShape& s, const AvgPool2dGeometry& g,
                             bool channels_last) {
  const int64_t total = s.n * s.c * s.OH * s.OW;
  if (total == 0) return;
  if (channels_last)
    pool_index::launch(avg_pool_forward_kernel<T, true>, total, x, y, s, g);
  else
    pool_index::launch(avg_pool_forward_kernel<T, false>, total, x, y, s, g);
}

template <class T>
void avg_pool2d_backward_cuda(const T* dy, T* dx, const AvgPool2dShape& s, const AvgPool2dGeometry& g,
                              bool channels_last) {
  const int64_t total = s.n * s.c * s.H * s.W;
  if (total == 0) return;
  if (channels_last)
    pool_index::launch(avg_pool_backward_kernel<T, true>, total, dy, dx, s, g);
  else
    pool_index::launch(avg_pool_backward_kernel<T, false>, total, dy, dx, s, g);
}

#define MINIDL_AVG_POOL_CUDA(T)                                                                                  \
  template void avg_pool2d_forward_cuda<T>(const T*, T*, const AvgPool2dShape&, const AvgPool2dGeometry&, bool); \
  template void avg_pool2d_backward_cuda<T>(const T*, T*, const AvgPool2dShape&, const AvgPool2dGeometry&, bool);
MINIDL_FOR_FLOATING_TYPES(MINIDL_AVG_POOL_CUDA)

}  // namespace minidl::kernels
