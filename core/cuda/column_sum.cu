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

}  // namespace

void sum_partials_by_column(const float* partials, int64_t slices, int64_t cols, float* out) {
  constexpr int kThreads = 256;
  sum_partials_by_column_kernel<<<static_cast<unsigned>(ceil_div(cols, kThreads)), kThreads, 0, stream()>>>(
      partials, slices, cols, out);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::cuda
