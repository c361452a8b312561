// The bias of a channels-last Conv2d (conv2d_kernels.h): y viewed as [rows][channels], rows =
// N*OH*OW, so a channel's values are a column with stride `channels`.
//  - add: one thread per element, y = T(float(y) + float(b[c])) (cuDNN's legacy forward has no
//    bias epilogue; the sum is rounded once more, as an unfused PyTorch `conv(x) + b` is);
//  - gradient: a deterministic column reduction. Block (32 columns x 8 row lanes) sums one slice
//    of rows for 32 consecutive channels (a warp reads one row's run of channels, contiguous), the
//    8 lanes combine in shared memory in a fixed order, one partial per (slice, channel); then
//    cuda::sum_partials_by_column adds the slices in order. No atomics: the same bits every run.
#include <algorithm>
#include <type_traits>

#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/error.h"
#include "layers/conv/conv2d_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int kCols = 32;
constexpr int kRowLanes = 8;

template <class T>
__global__ void add_bias_nhwc_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t total, int64_t channels) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(to_float(y[i]) + to_float(b[i % channels]));
}

template <class T>
__global__ void bias_grad_nhwc_partials_kernel(const T* __restrict__ dy, int64_t rows, int64_t channels,
                                               int64_t rows_per_slice, float* __restrict__ partials) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kCols) + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_slice, r1 = min(rows, r0 + rows_per_slice);
  float acc = 0.f;
  if (c < channels)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += to_float(dy[r * channels + c]);
  __shared__ float lanes[kRowLanes][kCols];
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float sum = 0.f;
    for (int l = 0; l < kRowLanes; ++l) sum += lanes[l][threadIdx.x];
    partials[blockIdx.y * channels + c] = sum;
  }
}

}  // namespace

template <class T>
void conv2d_nhwc_add_bias_cuda(T* y, const T* b, int64_t rows, int64_t channels) {
  constexpr int kThreads = 256;
  const int64_t total = rows * channels;
  if (total == 0) return;
  add_bias_nhwc_kernel<T>
      <<<cuda::grid_blocks(cuda::ceil_div(total, kThreads), kThreads), kThreads, 0, cuda::stream()>>>(y, b, total,
                                                                                                      channels);
  MINIDL_LAUNCH_CHECK();
}

template <class T>
void conv2d_nhwc_backward_bias_cuda(const T* dy, T* db, int64_t rows, int64_t channels) {
  const int64_t col_blocks = cuda::ceil_div(channels, kCols);
  // One wave of blocks, but no slice shorter than 8 rows per lane.
  const int64_t by_device = std::max<int64_t>(1, cuda::resident_blocks(kCols * kRowLanes) / col_blocks);
  const int64_t by_size = std::max<int64_t>(1, rows / (8 * kRowLanes));
  const int64_t slices = std::min<int64_t>({by_device, by_size, 65535});
  const int64_t rows_per_slice = cuda::ceil_div(std::max<int64_t>(rows, 1), slices);
  auto partials = allocate(sizeof(float) * slices * channels, Device::cuda());
  auto sums = allocate(sizeof(float) * channels, Device::cuda());
  float* part = static_cast<float*>(partials.get());
  float* out = static_cast<float*>(sums.get());
  if constexpr (std::is_same_v<T, float>) out = db;
  bias_grad_nhwc_partials_kernel<T>
      <<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(slices)), dim3(kCols, kRowLanes), 0,
         cuda::stream()>>>(dy, rows, channels, rows_per_slice, part);
  MINIDL_LAUNCH_CHECK();
  cuda::sum_partials_by_column(part, slices, channels, out);
  if constexpr (!std::is_same_v<T, float>) cast_cuda(out, DType::Float32, db, DTypeOf<T>::value, channels);
}

#define MINIDL_NHWC_BIAS_CUDA(T)                                              \
  template void conv2d_nhwc_add_bias_cuda<T>(T*, const T*, int64_t, int64_t); \
  template void conv2d_nhwc_backward_bias_cuda<T>(const T*, T*, int64_t, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_NHWC_BIAS_CUDA)

}  // namespace minidl::kernels
