// Zero-padding of channels-last rows to more channels (conv2d_kernels.h,
// conv2d_nhwc_pad_channels_cuda): how a half convolution with 24 input channels reaches cuDNN's
// NHWC kernels for 32 (conv2d_cuda.cu says why). One thread per 16 bytes of the output, so the
// stores are whole, coalesced 16-byte vectors; the loads are 16-byte vectors too where the input's
// rows allow it (c a multiple of 8 values, a 16-byte-aligned input).
#include <cstdint>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/conv/conv2d_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kPadThreads = 256;
constexpr int kChunk = 8;  // half values per 16 bytes

template <class T>
__global__ void __launch_bounds__(kPadThreads)
    pad_channels_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int c, int cp, bool vector_in) {
  const int per_row = cp / kChunk;
  const int64_t chunks = rows * per_row;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < chunks;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / per_row;
    const int j = static_cast<int>(e - r * per_row) * kChunk;
    alignas(16) T v[kChunk];
    if (vector_in && j + kChunk <= c) {
      *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(in + r * c + j);
    } else {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) v[k] = j + k < c ? in[r * c + j + k] : from_float<T>(0.f);
    }
    *reinterpret_cast<uint4*>(out + r * cp + j) = *reinterpret_cast<const uint4*>(v);
  }
}

}  // namespace

template <class T>
void conv2d_nhwc_pad_channels_cuda(const T* in, T* out, int64_t rows, int64_t c, int64_t cp) {
  MINIDL_CHECK(cp % kChunk == 0 && c <= cp && reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "conv2d channel padding: bfloat16/float16 rows to a multiple of 8 channels on a 16-byte-aligned "
               "output, got ",
               dtype_name(DTypeOf<T>::value), " ", c, " -> ", cp);
  if (rows == 0) return;
  const bool vector_in = c % kChunk == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const int64_t chunks = rows * (cp / kChunk);
  const int grid = cuda::grid_blocks((chunks + kPadThreads - 1) / kPadThreads, kPadThreads);
  pad_channels_kernel<T>
      <<<grid, kPadThreads, 0, cuda::stream()>>>(in, out, rows, static_cast<int>(c), static_cast<int>(cp), vector_in);
  MINIDL_LAUNCH_CHECK();
}

#define MINIDL_PAD_CHANNELS_CUDA(T) \
  template void conv2d_nhwc_pad_channels_cuda<T>(const T*, T*, int64_t, int64_t, int64_t);
MINIDL_FOR_HALF_TYPES(MINIDL_PAD_CHANNELS_CUDA)

}  // namespace minidl::kernels
