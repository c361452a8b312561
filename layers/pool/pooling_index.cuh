// What the NCHW and NHWC pooling kernels (pooling_cuda.cu, pooling_nhwc_cuda.cu) share: cheap
// 32-bit index division, the windows that cover an input element, and the one-wave launch.
// Included only by those .cu files.
#pragma once
#include <cstdint>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace minidl::kernels::pool_index {

constexpr int kBlock = 256;  // threads per block of every pooling kernel

// n / d for 0 <= n < 2^31 by multiply-high (Granlund & Montgomery; as PyTorch's IntDivider): a
// 32-bit division by a runtime value costs ~20 instructions on the GPU, this one multiply and a
// shift (the divisor is fixed per launch).
struct FastDiv {
  uint32_t d, magic, shift;
  explicit FastDiv(uint32_t divisor) : d(divisor), magic(0), shift(0) {
    while (shift < 32 && (uint64_t{1} << shift) < divisor) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// [lo, hi): the windows along one axis whose span [o*s - pad, o*s - pad + k) covers input i.
__device__ __forceinline__ void covering_windows(int i, int k, int pad, int out, const FastDiv& s, int* lo, int* hi) {
  const int first = i + pad - k + 1;
  *lo = first <= 0 ? 0 : static_cast<int>(s.div(static_cast<uint32_t>(first) + s.d - 1));
  *hi = min(static_cast<int>(s.div(static_cast<uint32_t>(i + pad))) + 1, out);
}

// Blocks of kBlock threads for `threads` threads, at most as many as are resident at once at this
// kernel's own occupancy (its registers decide it; asked once per kernel), so the grid-stride
// loops run as one even wave.
template <class Kernel>
int grid_for(Kernel kernel, int64_t threads) {
  return cuda::clamp_grid(cuda::ceil_div(threads, kBlock), cuda::resident_blocks_of(kernel, kBlock));
}

template <class Kernel, class... Args>
void launch(Kernel kernel, int64_t threads, Args... args) {
  kernel<<<grid_for(kernel, threads), kBlock, 0, cuda::stream()>>>(args...);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels::pool_index
