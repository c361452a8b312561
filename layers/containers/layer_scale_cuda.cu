// CUDA kernels of the per-channel scale (CPU reference in layer_scale_cpu.cpp). The forward goes
// row by row (scale_kernel). The backward is one pass over dy and x that writes dx and leaves
// dgamma's partial sums, with no atomics: blocks of 32 channels x 8 rows each take a fixed chunk
// of a factor's rows (and the inner positions), adding in float32 one partial per (chunk, factor);
// a second kernel adds each factor's partials in chunk order. Channels-last (inner 1) reads are
// coalesced: a warp reads 32 neighbouring channels of a row.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/half_types.h"
#include "layers/containers/layer_scale_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int kTileC = 32, kTileR = 8;
constexpr int64_t kMaxChunks = 512;    // partial sums per factor, at most
constexpr int64_t kRowsPerChunk = 64;  // rows a chunk adds, at least (fewer chunks for small inputs)

// The (sample, outer) rows one factor's gradient sums: one sample's, or every sample's.
__host__ __device__ int64_t rows_per_factor(const ChannelScaleShape& s) {
  return s.per_sample ? s.outer : s.samples * s.outer;
}

int64_t chunks_of(const ChannelScaleShape& s) {
  const int64_t c = (rows_per_factor(s) + kRowsPerChunk - 1) / kRowsPerChunk;
  return c < kMaxChunks ? c : kMaxChunks;
}

// The tensor as rows of one length: channels-last rows of C channels (the channel is the column),
// NCHW planes of H*W elements (the channel is the row's). A block per row at a time, its threads
// along the row: no division per element, reads and writes coalesced.
template <class T>
__global__ void scale_kernel(const T* __restrict__ x, const float* __restrict__ gamma, T* __restrict__ y,
                             const ChannelScaleShape s) {
  const bool channel_rows = s.inner > 1;
  const int64_t rows = s.samples * s.outer * (channel_rows ? s.channels : 1);
  const int64_t length = channel_rows ? s.inner : s.channels;
  const int64_t per_sample_rows = s.outer * (channel_rows ? s.channels : 1);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = s.per_sample ? r / per_sample_rows * s.channels : 0;
    const float row_gamma = channel_rows ? gamma[base + r % s.channels] : 0.f;
    const T* xr = x + r * length;
    T* yr = y + r * length;
    for (int64_t j = threadIdx.x; j < length; j += blockDim.x)
      yr[j] = from_float<T>(to_float(xr[j]) * (channel_rows ? row_gamma : gamma[base + j]));
  }
}

// Block (channel tile, chunk, factor group): thread (tx, ty) goes over rows ty, ty + 8, ... of the
// chunk for channel tile * 32 + tx, writing dx = dy * gamma and adding dy * x; the 8 row sums are
// then added in ty order. The factor group is the sample (per_sample) or the one group of all
// samples. One pass: dy and x read once, dx written once.
template <class T>
__global__ void backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ gamma,
                                T* __restrict__ dx, float* __restrict__ partial, const ChannelScaleShape s,
                                int64_t chunks) {
  __shared__ float sums[kTileR][kTileC];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kTileC) + threadIdx.x;
  const int64_t chunk = blockIdx.y, group = blockIdx.z;
  const int64_t rows = rows_per_factor(s), first = group * rows;
  const int64_t begin = first + chunk * rows / chunks, end = first + (chunk + 1) * rows / chunks;
  float sum = 0.f;
  if (c < s.channels) {
    const float g = gamma[(s.per_sample ? group * s.channels : 0) + c];
    for (int64_t q = begin + threadIdx.y; q < end; q += kTileR) {
      const int64_t base = (q * s.channels + c) * s.inner;
      for (int64_t k = 0; k < s.inner; ++k) {
        const float d = to_float(dy[base + k]);
        dx[base + k] = from_float<T>(d * g);
        sum += d * to_float(x[base + k]);
      }
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < s.channels) {
    float total = 0.f;
    for (int r = 0; r < kTileR; ++r) total += sums[r][threadIdx.x];
    partial[(group * chunks + chunk) * s.channels + c] = total;
  }
}

// dgamma[f] = the factor's partials added in chunk order.
__global__ void finish_kernel(const float* __restrict__ partial, float* __restrict__ dgamma, int64_t factors,
                              int64_t channels, int64_t chunks) {
  const int64_t f = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (f >= factors) return;
  const float* p = partial + f / channels * chunks * channels + f % channels;
  float total = 0.f;
  for (int64_t k = 0; k < chunks; ++k) total += p[k * channels];
  dgamma[f] = total;
}

}  // namespace

int64_t channel_scale_partials(const ChannelScaleShape& s) {
  return (s.per_sample ? s.samples : 1) * chunks_of(s) * s.channels;
}

template <class T>
void channel_scale_forward_cuda(const T* x, const float* gamma, T* y, const ChannelScaleShape& s) {
  if (s.samples * s.outer * s.channels * s.inner == 0) return;
  const bool channel_rows = s.inner > 1;
  const int64_t rows = s.samples * s.outer * (channel_rows ? s.channels : 1);
  const int64_t length = channel_rows ? s.inner : s.channels;
  const int block = length >= 256 ? 256 : length >= 128 ? 128 : length >= 64 ? 64 : 32;
  scale_kernel<T><<<cuda::grid_blocks(rows, block), block, 0, cuda::stream()>>>(x, gamma, y, s);
  MINIDL_LAUNCH_CHECK();
}

template <class T>
void channel_scale_backward_cuda(const T* dy, const T* x, const float* gamma, T* dx, float* dgamma, float* partial,
                                 const ChannelScaleShape& s) {
  const int64_t chunks = chunks_of(s), groups = s.per_sample ? s.samples : 1;
  const int64_t factors = groups * s.channels;
  if (factors == 0) return;
  if (chunks > 0 && s.inner > 0) {
    const dim3 grid(static_cast<unsigned>(cuda::ceil_div(s.channels, kTileC)), static_cast<unsigned>(chunks),
                    static_cast<unsigned>(groups));
    backward_kernel<T><<<grid, dim3(kTileC, kTileR), 0, cuda::stream()>>>(dy, x, gamma, dx, partial, s, chunks);
    MINIDL_LAUNCH_CHECK();
  }
  constexpr int kBlock = 256;
  finish_kernel<<<static_cast<unsigned>(cuda::ceil_div(factors, kBlock)), kBlock, 0, cuda::stream()>>>(
      partial, dgamma, factors, s.channels, chunks);
  MINIDL_LAUNCH_CHECK();
}

#define MINIDL_CHANNEL_SCALE_CUDA(T)                                                                 \
  template void channel_scale_forward_cuda<T>(const T*, const float*, T*, const ChannelScaleShape&); \
  template void channel_scale_backward_cuda<T>(const T*, const T*, const float*, T*, float*, float*, \
                                               const ChannelScaleShape&);
MINIDL_FOR_FLOATING_TYPES(MINIDL_CHANNEL_SCALE_CUDA)

}  // namespace minidl::kernels
