// CUDA kernels of ReLU and GELU (CPU references in activation_cpu.cpp, same formulas).
// These are pure bandwidth: each element is read once and written once. The bulk moves as
// float4 (one 16-byte load/store per thread per step, the widest the memory system serves in one
// transaction) when every pointer is 16-byte aligned; the few leftover elements, or a misaligned
// view, go one float at a time. Grid-stride loops over a grid that fills the chip once.
#include <cstdint>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "layers/activation/activation_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int kBlock = 256;
constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kTanhCoef = 0.044715f;

struct ReluForward {
  __device__ float operator()(float x) const { return x <= 0.f ? 0.f : x; }
};
struct ReluBackward {  // (dy, y): NaN outputs pass dy on, see activation.h
  __device__ float operator()(float dy, float y) const { return y <= 0.f ? 0.f : dy; }
};
struct GeluForward {
  bool tanh_form;
  __device__ float operator()(float x) const {
    if (tanh_form) return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
    return 0.5f * x * (1.f + erff(x * kSqrt1_2));
  }
};
struct GeluBackward {  // (dy, x)
  bool tanh_form;
  __device__ float operator()(float dy, float x) const {
    if (tanh_form) {
      const float t = tanhf(kSqrt2OverPi * (x + kTanhCoef * x * x * x));
      const float dinner = kSqrt2OverPi * (1.f + 3.f * kTanhCoef * x * x);
      return dy * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * dinner);
    }
    const float cdf = 0.5f * (1.f + erff(x * kSqrt1_2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

// out[i] = op(a[i]); the first n4 float4s vectorized, elements [4*n4, n) as scalars.
template <class Op>
__global__ void map1_kernel(const float* __restrict__ a, float* __restrict__ out, int64_t n, int64_t n4, Op op) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(a)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
  }
  for (int64_t i = 4 * n4 + tid; i < n; i += stride) out[i] = op(a[i]);
}

// out[i] = op(a[i], b[i]), split as map1_kernel.
template <class Op>
__global__ void map2_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                            int64_t n, int64_t n4, Op op) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n4; i += stride) {
    const float4 u = reinterpret_cast<const float4*>(a)[i];
    const float4 v = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(op(u.x, v.x), op(u.y, v.y), op(u.z, v.z), op(u.w, v.w));
  }
  for (int64_t i = 4 * n4 + tid; i < n; i += stride) out[i] = op(a[i], b[i]);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks for `work` items per thread-slot, at least one, at most one resident wave.
int grid_for(int64_t work) { return cuda::grid_blocks(cuda::ceil_div(work, kBlock), kBlock); }

template <class Op>
void launch_map1(const float* a, float* out, int64_t n, Op op) {
  if (n == 0) return;
  const int64_t n4 = aligned16(a) && aligned16(out) ? n / 4 : 0;
  const int64_t work = n4 > n - 4 * n4 ? n4 : n - 4 * n4;
  map1_kernel<<<grid_for(work), kBlock, 0, cuda::stream()>>>(a, out, n, n4, op);
  MINIDL_LAUNCH_CHECK();
}

template <class Op>
void launch_map2(const float* a, const float* b, float* out, int64_t n, Op op) {
  if (n == 0) return;
  const int64_t n4 = aligned16(a) && aligned16(b) && aligned16(out) ? n / 4 : 0;
  const int64_t work = n4 > n - 4 * n4 ? n4 : n - 4 * n4;
  map2_kernel<<<grid_for(work), kBlock, 0, cuda::stream()>>>(a, b, out, n, n4, op);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace

void relu_forward_cuda(const float* x, float* y, int64_t n) { launch_map1(x, y, n, ReluForward{}); }

void relu_backward_cuda(const float* dy, const float* y, float* dx, int64_t n) {
  launch_map2(dy, y, dx, n, ReluBackward{});
}

void gelu_forward_cuda(const float* x, float* y, int64_t n, GeluApproximate approximate) {
  launch_map1(x, y, n, GeluForward{approximate == GeluApproximate::Tanh});
}

void gelu_backward_cuda(const float* dy, const float* x, float* dx, int64_t n, GeluApproximate approximate) {
  launch_map2(dy, x, dx, n, GeluBackward{approximate == GeluApproximate::Tanh});
}

}  // namespace minidl::kernels
