// The kernels Conv2d and Linear share around their bias: the broadcast add of the forward pass
// and the fixed-order second pass of the bias gradient.
#include "core/cuda/kernel_helpers.cuh"

namespace minidl::cuda {

namespace {

// A thread per column: consecutive threads read consecutive columns of each slice (coalesced).
__global__ void sum_partials_by_column_kernel(const float* __restrict__ partials, int64_t slices, int64_t cols,
                                              float* __restrict__ out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  float total = 0.f;
  for (int64_t s = 0; s < slices; ++s) total += partials[s * cols + j];
  out[j] = total;
}

// Our own kernel rather than cudnnAddTensor, which in cuDNN 9 may allocate scratch memory of its
// own inside a CUDA graph capture (docs/perf/cuda_graph.md).
__global__ void add_channel_bias_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t total,
                                        int64_t channels, int64_t inner) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += b[(i / inner) % channels];
}

}  // namespace

void add_channel_bias(float* y, const float* b, int64_t outer, int64_t channels, int64_t inner) {
  constexpr int kThreads = 256;
  const int64_t total = outer * channels * inner;
  add_channel_bias_kernel<<<static_cast<unsigned>(grid_blocks(ceil_div(total, kThreads), kThreads)), kThreads, 0,
                            stream()>>>(y, b, total, channels, inner);
  MINIDL_LAUNCH_CHECK();
}

void sum_partials_by_column(const float* partials, int64_t slices, int64_t cols, float* out) {
  constexpr int kThreads = 256;
  sum_partials_by_column_kernel<<<static_cast<unsigned>(ceil_div(cols, kThreads)), kThreads, 0, stream()>>>(
      partials, slices, cols, out);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::cuda
