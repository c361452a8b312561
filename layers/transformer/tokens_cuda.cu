// CUDA kernels of the token-sequence ops: one thread per output element in grid-stride loops, each
// sum one thread's loop in index order (the CPU's order, so the bits match the reference).
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "layers/transformer/tokens_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kBlock = 256;

int grid_for(int64_t n) { return cuda::grid_blocks(cuda::ceil_div(n, kBlock), kBlock); }

#define MINIDL_GRID_STRIDE(i, n)                                                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n);                     \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void add_position_kernel(int64_t total, int64_t m, const float* __restrict__ x, const float* __restrict__ w,
                                    float* __restrict__ y) {
  MINIDL_GRID_STRIDE(i, total) y[i] = x[i] + w[i % m];
}

__global__ void prepend_token_kernel(int64_t n, int64_t t, int64_t d, const float* __restrict__ x,
                                     const float* __restrict__ cls, float* __restrict__ y) {
  MINIDL_GRID_STRIDE(e, n * (t + 1) * d) {
    const int64_t j = e % d, k = (e / d) % (t + 1), i = e / (d * (t + 1));
    y[e] = k == 0 ? cls[j] : x[(i * t + k - 1) * d + j];
  }
}

__global__ void drop_first_token_kernel(int64_t n, int64_t t, int64_t d, const float* __restrict__ dy,
                                        float* __restrict__ dx) {
  MINIDL_GRID_STRIDE(e, n * t * d) {
    const int64_t j = e % d, k = (e / d) % t, i = e / (d * t);
    dx[e] = dy[(i * (t + 1) + k + 1) * d + j];
  }
}

__global__ void first_token_sum_kernel(int64_t n, int64_t t, int64_t d, const float* __restrict__ dy,
                                       float* __restrict__ dcls) {
  MINIDL_GRID_STRIDE(j, d) {
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i) s += dy[i * (t + 1) * d + j];
    dcls[j] = s;
  }
}

__global__ void token_pool_kernel(bool mean, int64_t n, int64_t t, int64_t d, const float* __restrict__ x,
                                  float* __restrict__ y) {
  MINIDL_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, j = e % d;
    if (!mean) {
      y[e] = x[i * t * d + j];
      continue;
    }
    float s = 0.f;
    for (int64_t k = 0; k < t; ++k) s += x[(i * t + k) * d + j];
    y[e] = s / static_cast<float>(t);
  }
}

__global__ void token_pool_backward_kernel(bool mean, int64_t n, int64_t t, int64_t d, const float* __restrict__ dy,
                                           float* __restrict__ dx) {
  MINIDL_GRID_STRIDE(e, n * t * d) {
    const int64_t j = e % d, k = (e / d) % t, i = e / (d * t);
    dx[e] = mean ? dy[i * d + j] / static_cast<float>(t) : (k == 0 ? dy[i * d + j] : 0.f);
  }
}

#undef MINIDL_GRID_STRIDE

}  // namespace

void add_position_cuda(int64_t rows, int64_t m, const float* x, const float* w, float* y) {
  if (rows * m == 0) return;
  add_position_kernel<<<grid_for(rows * m), kBlock, 0, cuda::stream()>>>(rows * m, m, x, w, y);
  MINIDL_LAUNCH_CHECK();
}

void prepend_token_cuda(int64_t n, int64_t t, int64_t d, const float* x, const float* cls, float* y) {
  if (n * d == 0) return;
  prepend_token_kernel<<<grid_for(n * (t + 1) * d), kBlock, 0, cuda::stream()>>>(n, t, d, x, cls, y);
  MINIDL_LAUNCH_CHECK();
}

void prepend_token_backward_cuda(int64_t n, int64_t t, int64_t d, const float* dy, float* dx, float* dcls) {
  if (dx && n * t * d > 0) {
    drop_first_token_kernel<<<grid_for(n * t * d), kBlock, 0, cuda::stream()>>>(n, t, d, dy, dx);
    MINIDL_LAUNCH_CHECK();
  }
  if (dcls && d > 0) {
    first_token_sum_kernel<<<grid_for(d), kBlock, 0, cuda::stream()>>>(n, t, d, dy, dcls);
    MINIDL_LAUNCH_CHECK();
  }
}

void token_pool_cuda(bool mean, int64_t n, int64_t t, int64_t d, const float* x, float* y) {
  if (n * d == 0) return;
  token_pool_kernel<<<grid_for(n * d), kBlock, 0, cuda::stream()>>>(mean, n, t, d, x, y);
  MINIDL_LAUNCH_CHECK();
}

void token_pool_backward_cuda(bool mean, int64_t n, int64_t t, int64_t d, const float* dy, float* dx) {
  if (n * t * d == 0) return;
  token_pool_backward_kernel<<<grid_for(n * t * d), kBlock, 0, cuda::stream()>>>(mean, n, t, d, dy, dx);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
