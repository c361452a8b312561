// CUDA kernels of the language model's cross-entropy (loss_kernels.h), llm.c's fused classifier
// split at the autograd boundary. Forward: one block per row; each thread walks its strided
// columns once keeping an online (max, sum of exp) pair and the sum of logits (16 bytes at a time
// where every row starts 16-byte aligned, as GPT-2's padded vocabulary of 50304 does: one rescale
// per pack of 4 or 8 logits, and the loads at the memory system's widest), the block combines
// the threads' pairs in a fixed tree (warp butterflies, then the warps' results by warp 0), and
// writes the row's log-sum-exp and loss; the mean is loss_cuda.cu's fixed-order block sum. The
// logits are read once and nothing of their size is written. Backward: one block per row writes
// (exp(x - lse) - q) * g / rows in the logits' type, reading each logit once more. Float32
// arithmetic for every type, no atomics: the same bits every run.
#include <cmath>
#include <cstdint>

#include "core/cast_kernels.h"
#include "core/cuda/elementwise.cuh"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/loss/loss_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// (m, s) pairs: s = sum of exp(x - m). Combining two is exact up to rounding; a pair of
// (-inf, 0) is the empty set.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_combine(MaxSum v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = combine(v, other);
  }
  return v;
}

// Adds one logit to the thread's (max, sum) pair and logit sum. A NaN logit fails the comparison
// but still reaches s and sum_x, so the loss is NaN.
__device__ __forceinline__ void add_logit(MaxSum& p, float& sum_x, float v) {
  if (v > p.m) {
    p.s = p.s * expf(p.m - v) + 1.f;
    p.m = v;
  } else if (v != -INFINITY) {
    p.s += expf(v - p.m);
  }
  sum_x += v;
}

// Adds a pack of logits: the pair is rescaled once, to the pack's max (fmaxf skips a NaN, which
// then reaches s through its own exp).
template <int K>
__device__ __forceinline__ void add_pack(MaxSum& p, float& sum_x, const float (&v)[K]) {
  float m = p.m;
#pragma unroll
  for (int j = 0; j < K; ++j) m = fmaxf(m, v[j]);
  if (m > p.m) {
    p.s *= expf(p.m - m);
    p.m = m;
  }
#pragma unroll
  for (int j = 0; j < K; ++j) {
    if (v[j] != -INFINITY) p.s += expf(v[j] - p.m);
    sum_x += v[j];
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads)
    token_loss_forward_kernel(const E* __restrict__ logits, const int32_t* __restrict__ labels, int64_t classes,
                              bool packed, float eps, float* __restrict__ row_lse, float* __restrict__ row_loss) {
  __shared__ MaxSum warp_pairs[kWarps];
  __shared__ float warp_sums[kWarps];
  const int64_t row = blockIdx.x;
  const E* x = logits + row * classes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  MaxSum p{-INFINITY, 0.f};
  float sum_x = 0.f;
  if (packed) {
    constexpr int K = cuda::Pack<E>::kN;
    const auto* packs = reinterpret_cast<const cuda::Pack<E>*>(x);
    for (int64_t c = threadIdx.x; c < classes / K; c += kThreads) {
      const cuda::Pack<E> u = packs[c];
      float v[K];
#pragma unroll
      for (int j = 0; j < K; ++j) v[j] = to_float(u.v[j]);
      add_pack(p, sum_x, v);
    }
  } else {
    for (int64_t k = threadIdx.x; k < classes; k += kThreads) add_logit(p, sum_x, to_float(x[k]));
  }
  p = warp_combine(p);
  sum_x = cuda::warp_sum(sum_x);
  if (lane == 0) {
    warp_pairs[warp] = p;
    warp_sums[warp] = sum_x;
  }
  __syncthreads();
  if (warp != 0) return;
  p = lane < kWarps ? warp_pairs[lane] : MaxSum{-INFINITY, 0.f};
  sum_x = lane < kWarps ? warp_sums[lane] : 0.f;
  p = warp_combine(p);
  sum_x = cuda::warp_sum(sum_x);
  if (lane == 0) {
    const int label = labels[row];
    const bool bad = label < 0 || label >= classes;
    const float lse = p.m + logf(p.s);
    const float x_label = bad ? NAN : to_float(x[label]);
    row_lse[row] = lse;
    row_loss[row] = (1.f - eps) * (lse - x_label) + eps * (lse - sum_x / static_cast<float>(classes));
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads)
    token_loss_backward_kernel(const E* __restrict__ logits, const int32_t* __restrict__ labels,
                               const float* __restrict__ row_lse, int64_t rows, int64_t classes, bool packed, float eps,
                               const float* __restrict__ g, E* __restrict__ dlogits) {
  const int64_t row = blockIdx.x;
  const E* x = logits + row * classes;
  E* d = dlogits + row * classes;
  const int label = labels[row];
  const bool bad = label < 0 || label >= classes;
  const float lse = row_lse[row], scale = __ldg(g) / static_cast<float>(rows);
  const float smooth = eps / static_cast<float>(classes);
  const auto grad = [&](int64_t k, float v) {
    const float q = k == label ? smooth + (1.f - eps) : smooth;
    return from_float<E>(bad ? NAN : (expf(v - lse) - q) * scale);
  };
  if (packed) {
    constexpr int K = cuda::Pack<E>::kN;
    for (int64_t c = threadIdx.x; c < classes / K; c += kThreads) {
      const cuda::Pack<E> u = reinterpret_cast<const cuda::Pack<E>*>(x)[c];
      cuda::Pack<E> r;
#pragma unroll
      for (int j = 0; j < K; ++j) r.v[j] = grad(c * K + j, to_float(u.v[j]));
      reinterpret_cast<cuda::Pack<E>*>(d)[c] = r;
    }
  } else {
    for (int64_t k = threadIdx.x; k < classes; k += kThreads) d[k] = grad(k, to_float(x[k]));
  }
}

void check_rows(int64_t rows, int64_t classes) {
  MINIDL_CHECK(rows <= INT32_MAX && classes <= INT32_MAX, "cross_entropy (CUDA): ", rows, " rows of ", classes,
               " classes exceed the 32-bit grid");
}

}  // namespace

template <class E>
void token_cross_entropy_forward_cuda(const E* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                      float label_smoothing, float* row_lse, float* row_loss, float* loss) {
  check_rows(rows, classes);
  token_loss_forward_kernel<E><<<static_cast<unsigned>(rows), kThreads, 0, cuda::stream()>>>(
      logits, labels, classes, cuda::packed_rows(logits, classes), label_smoothing, row_lse, row_loss);
  MINIDL_LAUNCH_CHECK();
  cross_entropy_mean_cuda(row_loss, labels, rows, classes, loss);
}

template <class E>
void token_cross_entropy_backward_cuda(const E* logits, const int32_t* labels, const float* row_lse, int64_t rows,
                                       int64_t classes, float label_smoothing, const float* g, E* dlogits) {
  check_rows(rows, classes);
  token_loss_backward_kernel<E><<<static_cast<unsigned>(rows), kThreads, 0, cuda::stream()>>>(
      logits, labels, row_lse, rows, classes, cuda::packed_rows(logits, classes) && cuda::aligned16(dlogits),
      label_smoothing, g, dlogits);
  MINIDL_LAUNCH_CHECK();
}

#define MINIDL_TOKEN_LOSS_CUDA(E)                                                                                      \
  template void token_cross_entropy_forward_cuda<E>(const E*, const int32_t*, int64_t, int64_t, float, float*, float*, \
                                                    float*);                                                           \
  template void token_cross_entropy_backward_cuda<E>(const E*, const int32_t*, const float*, int64_t, int64_t, float,  \
                                                     const float*, E*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_TOKEN_LOSS_CUDA)

}  // namespace minidl::kernels
