// Fused self-attention for short sequences in bfloat16/float16: one CTA per (sample, head) pair
// holds Q, K, V (and dO) of up to 64 tokens in shared memory and runs every product on the tensor
// cores (WMMA, float32 accumulation), the softmax on the float32 scores in between. Nothing of
// size T x T reaches global memory: the forward reads qkv and writes out, the backward recomputes
// the probabilities from Q and K (the same instructions, so the same bits) and writes dqkv. At a
// ViT's shapes (64 tokens, head size 64) this moves a third of the GEMM path's bytes.
//
// The numerics follow the GEMM path (attention_cuda.cu): float32 scores and softmax, the (dropped)
// probabilities and dS rounded to the storage type as operands of the products, dropout draws
// from dropout_draw.h at the same indices. Deterministic: no atomics, fixed reduction orders.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/transformer/attention_kernels.h"

namespace minidl::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kMaxTokens = 64;  // the padded row count Tp and the softmax's 2 values per lane
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

template <class E> struct WmmaType;
template <> struct WmmaType<bf16> { using type = __nv_bfloat16; };
template <> struct WmmaType<fp16> { using type = __half; };

// The shared-memory layout (elements): Tp x hd operand tiles, float32 scores (or an output tile),
// Tp x Tp storage-type probabilities. Every block starts on a multiple of 512 bytes (WMMA wants 32).
struct Tiles {
  int T, Tp, hd;
  int64_t D;
  __host__ __device__ int operand() const { return Tp * hd; }
  __host__ __device__ int square() const { return Tp * Tp; }
  // A float32 buffer that holds the scores (Tp x Tp) and later an output tile (Tp x hd).
  __host__ __device__ int stage() const { return Tp * (Tp > hd ? Tp : hd); }
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Rows [0, Tp) of a (T, hd) block of a row-major matrix with row stride `ld` into shared memory
// (rows >= T zero), 16 bytes at a time.
template <class E>
__device__ void load_rows(const E* __restrict__ src, int64_t ld, const Tiles& t, E* dst) {
  const int vec = t.hd / 8;
  for (int i = threadIdx.x; i < t.Tp * vec; i += kThreads) {
    const int r = i / vec, c = i % vec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < t.T) v = reinterpret_cast<const uint4*>(src + r * ld)[c];
    reinterpret_cast<uint4*>(dst + r * t.hd)[c] = v;
  }
}

// dst rows [0, T) of a row-major matrix with row stride `ld` = scale * the float32 (Tp, hd) tile.
template <class E>
__device__ void store_rows(const float* __restrict__ src, float scale, const Tiles& t, E* dst, int64_t ld) {
  for (int i = threadIdx.x; i < t.T * t.hd; i += kThreads) {
    const int r = i / t.hd, c = i % t.hd;
    dst[r * ld + c] = from_float<E>(src[i] * scale);
  }
}

// C (M x N, float32, row-major, ldc) = A B with 16 x 16 x 16 tiles spread over the warps.
// A is M x K (row-major with lda, or given transposed: col-major), B is K x N likewise.
template <class W, class LayoutA, class LayoutB>
__device__ void mma_tiles(int M, int N, int K, const W* a, int lda, const W* b, int ldb, float* c, int ldc) {
  const int warp = threadIdx.x / 32, tiles_n = N / 16;
  for (int tile = warp; tile < (M / 16) * tiles_n; tile += kWarps) {
    const int ti = tile / tiles_n, tj = tile % tiles_n;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.f);
    for (int kk = 0; kk < K; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, W, LayoutA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, W, LayoutB> fb;
      const W* pa = std::is_same<LayoutA, wmma::row_major>::value ? a + ti * 16 * lda + kk : a + kk * lda + ti * 16;
      const W* pb = std::is_same<LayoutB, wmma::row_major>::value ? b + kk * ldb + tj * 16 : b + tj * 16 * ldb + kk;
      wmma::load_matrix_sync(fa, pa, lda);
      wmma::load_matrix_sync(fb, pb, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + ti * 16 * ldc + tj * 16, acc, ldc, wmma::mem_row_major);
  }
}

// s (Tp x Tp, float32 scores Q K^T unscaled) -> p = softmax(scale * s) by rows in float32, in
// place, and pd = p * dropout factor in the storage type (rows and columns >= T zero).
template <class E>
__device__ void softmax_rows(float* s, E* pd, const Tiles& t, float scale, int64_t pair, bool drop,
                             const DropoutDraw& draw, int64_t step) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  for (int r = warp; r < t.Tp; r += kWarps) {
    float* row = s + r * t.Tp;
    float x[kMaxTokens / 32];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kMaxTokens / 32; ++k) {
      const int c = lane + 32 * k;
      x[k] = c < t.T && r < t.T ? row[c] * scale : -INFINITY;
      m = fmaxf(m, x[k]);
    }
    m = warp_max(m);
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxTokens / 32; ++k) {
      x[k] = x[k] == -INFINITY ? 0.f : expf(x[k] - m);
      sum += x[k];
    }
    sum = cuda::warp_sum(sum);
    const float inv = r < t.T ? 1.f / sum : 0.f;
#pragma unroll
    for (int k = 0; k < kMaxTokens / 32; ++k) {
      const int c = lane + 32 * k;
      if (c >= t.Tp) continue;
      const float p = x[k] * inv;
      row[c] = p;
      const float f = drop && c < t.T && r < t.T ? dropout_factor(draw, step, (pair * t.T + r) * t.T + c) : 1.f;
      pd[r * t.Tp + c] = from_float<E>(p * f);
    }
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) fused_forward_kernel(Tiles t, int64_t heads, float scale, bool drop,
                                                                 DropoutDraw draw, const int64_t* __restrict__ step,
                                                                 const E* __restrict__ qkv, E* __restrict__ out) {
  using W = typename WmmaType<E>::type;
  extern __shared__ __align__(128) unsigned char smem[];
  E* q = reinterpret_cast<E*>(smem);
  E* k = q + t.operand();
  E* v = k + t.operand();
  float* s = reinterpret_cast<float*>(v + t.operand());
  E* pd = reinterpret_cast<E*>(s + t.stage());
  const int64_t pair = blockIdx.x, n = pair / heads, h = pair % heads;
  const E* base = qkv + n * t.T * 3 * t.D + h * t.hd;
  load_rows(base, 3 * t.D, t, q);
  load_rows(base + t.D, 3 * t.D, t, k);
  load_rows(base + 2 * t.D, 3 * t.D, t, v);
  __syncthreads();
  const W *wq = reinterpret_cast<const W*>(q), *wk = reinterpret_cast<const W*>(k), *wv = reinterpret_cast<const W*>(v);
  mma_tiles<W, wmma::row_major, wmma::col_major>(t.Tp, t.Tp, t.hd, wq, t.hd, wk, t.hd, s, t.Tp);  // Q K^T
  __syncthreads();
  softmax_rows(s, pd, t, scale, pair, drop, draw, drop ? *step : 0);
  __syncthreads();
  // O = Pd V into the score buffer (free now), then out.
  mma_tiles<W, wmma::row_major, wmma::row_major>(t.Tp, t.hd, t.Tp, reinterpret_cast<const W*>(pd), t.Tp, wv, t.hd, s,
                                                 t.hd);
  __syncthreads();
  store_rows(s, 1.f, t, out + n * t.T * t.D + h * t.hd, t.D);
}

template <class E>
__global__ void __launch_bounds__(kThreads) fused_backward_kernel(Tiles t, int64_t heads, float scale, bool drop,
                                                                  DropoutDraw draw, const int64_t* __restrict__ step,
                                                                  const E* __restrict__ qkv, const E* __restrict__ dout,
                                                                  E* __restrict__ dqkv) {
  using W = typename WmmaType<E>::type;
  extern __shared__ __align__(128) unsigned char smem[];
  E* q = reinterpret_cast<E*>(smem);
  E* k = q + t.operand();
  E* v = k + t.operand();
  E* dO = v + t.operand();
  float* p = reinterpret_cast<float*>(dO + t.operand());  // scores, then P
  float* g = p + t.square();                              // dPd, then the output tiles
  E* pd = reinterpret_cast<E*>(g + t.stage());
  E* ds = pd + t.square();
  const int64_t pair = blockIdx.x, n = pair / heads, h = pair % heads;
  const E* base = qkv + n * t.T * 3 * t.D + h * t.hd;
  load_rows(base, 3 * t.D, t, q);
  load_rows(base + t.D, 3 * t.D, t, k);
  load_rows(base + 2 * t.D, 3 * t.D, t, v);
  load_rows(dout + n * t.T * t.D + h * t.hd, t.D, t, dO);
  __syncthreads();
  const W *wq = reinterpret_cast<const W*>(q), *wk = reinterpret_cast<const W*>(k), *wv = reinterpret_cast<const W*>(v);
  const W* wdo = reinterpret_cast<const W*>(dO);
  mma_tiles<W, wmma::row_major, wmma::col_major>(t.Tp, t.Tp, t.hd, wq, t.hd, wk, t.hd, p, t.Tp);    // Q K^T
  mma_tiles<W, wmma::row_major, wmma::col_major>(t.Tp, t.Tp, t.hd, wdo, t.hd, wv, t.hd, g, t.Tp);   // dO V^T
  __syncthreads();
  const int64_t step_now = drop ? *step : 0;
  softmax_rows(p, pd, t, scale, pair, drop, draw, step_now);
  __syncthreads();
  // dS = P * (dP - sum_j P_j dP_j) with dP = dPd * dropout factor, by rows.
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  for (int r = warp; r < t.Tp; r += kWarps) {
    float dp[kMaxTokens / 32], pv[kMaxTokens / 32];
    float dot = 0.f;
#pragma unroll
    for (int kk = 0; kk < kMaxTokens / 32; ++kk) {
      const int c = lane + 32 * kk;
      const bool in = c < t.T && r < t.T;
      const float f = drop && in ? dropout_factor(draw, step_now, (pair * t.T + r) * t.T + c) : 1.f;
      dp[kk] = in ? g[r * t.Tp + c] * f : 0.f;
      pv[kk] = in ? p[r * t.Tp + c] : 0.f;
      dot += pv[kk] * dp[kk];
    }
    dot = cuda::warp_sum(dot);
#pragma unroll
    for (int kk = 0; kk < kMaxTokens / 32; ++kk) {
      const int c = lane + 32 * kk;
      if (c < t.Tp) ds[r * t.Tp + c] = from_float<E>(pv[kk] * (dp[kk] - dot));
    }
  }
  __syncthreads();
  E* dbase = dqkv + n * t.T * 3 * t.D + h * t.hd;
  const W *wpd = reinterpret_cast<const W*>(pd), *wds = reinterpret_cast<const W*>(ds);
  // dV = Pd^T dO.
  mma_tiles<W, wmma::col_major, wmma::row_major>(t.Tp, t.hd, t.Tp, wpd, t.Tp, wdo, t.hd, g, t.hd);
  __syncthreads();
  store_rows(g, 1.f, t, dbase + 2 * t.D, 3 * t.D);
  __syncthreads();
  // dQ = scale dS K.
  mma_tiles<W, wmma::row_major, wmma::row_major>(t.Tp, t.hd, t.Tp, wds, t.Tp, wk, t.hd, g, t.hd);
  __syncthreads();
  store_rows(g, scale, t, dbase, 3 * t.D);
  __syncthreads();
  // dK = scale dS^T Q.
  mma_tiles<W, wmma::col_major, wmma::row_major>(t.Tp, t.hd, t.Tp, wds, t.Tp, wq, t.hd, g, t.hd);
  __syncthreads();
  store_rows(g, scale, t, dbase + t.D, 3 * t.D);
}

Tiles tiles_of(const AttentionShape& s) {
  return {static_cast<int>(s.tokens), static_cast<int>((s.tokens + 15) / 16 * 16), static_cast<int>(s.head_dim),
          s.width()};
}

size_t forward_smem(const Tiles& t, size_t es) { return es * (3 * t.operand() + t.square()) + 4 * t.stage(); }
size_t backward_smem(const Tiles& t, size_t es) {
  return es * (4 * t.operand() + 2 * t.square()) + 4 * (t.square() + t.stage());
}

// Lets a kernel take more than the default 48 KiB of dynamic shared memory (once per kernel).
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  MINIDL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

bool attention_fused_cuda_fits(DType dtype, const AttentionShape& s, const void* qkv) {
  return is_half(dtype) && reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && s.tokens >= 1 && s.tokens <= kMaxTokens && s.head_dim % 16 == 0 && s.head_dim >= 16 &&
         s.head_dim <= 64 && s.batch * s.heads <= INT32_MAX;
}

void attention_fused_forward_cuda(DType dtype, const AttentionShape& s, const DropoutDraw* drop, const int64_t* step,
                                  const void* qkv, void* out) {
  MINIDL_CHECK(attention_fused_cuda_fits(dtype, s, qkv), "attention: the fused kernel does not take ",
               dtype_name(dtype), " with ", s.tokens, " tokens of head size ", s.head_dim);
  const int64_t pairs = s.batch * s.heads;
  if (pairs == 0) return;
  const Tiles t = tiles_of(s);
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  const size_t smem = forward_smem(t, 2);
  auto launch = [&](auto tag) {
    using E = decltype(tag);
    static bool configured = false;
    if (!configured) allow_smem(fused_forward_kernel<E>, forward_smem({kMaxTokens, kMaxTokens, 64, 0}, 2));
    configured = true;
    fused_forward_kernel<E><<<static_cast<unsigned>(pairs), kThreads, smem, cuda::stream()>>>(
        t, s.heads, scale, drop != nullptr, drop ? *drop : DropoutDraw{}, step, static_cast<const E*>(qkv),
        static_cast<E*>(out));
    MINIDL_LAUNCH_CHECK();
  };
  if (dtype == DType::BFloat16) launch(bf16{});
  else launch(fp16{});
}

void attention_fused_backward_cuda(DType dtype, const AttentionShape& s, const DropoutDraw* drop, const int64_t* step,
                                   const void* qkv, const void* dout, void* dqkv) {
  MINIDL_CHECK(attention_fused_cuda_fits(dtype, s, qkv) && attention_fused_cuda_fits(dtype, s, dout) &&
                   attention_fused_cuda_fits(dtype, s, dqkv),
               "attention: the fused kernel does not take ", dtype_name(dtype), " with ", s.tokens,
               " tokens of head size ", s.head_dim);
  const int64_t pairs = s.batch * s.heads;
  if (pairs == 0) return;
  const Tiles t = tiles_of(s);
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  const size_t smem = backward_smem(t, 2);
  auto launch = [&](auto tag) {
    using E = decltype(tag);
    static bool configured = false;
    if (!configured) allow_smem(fused_backward_kernel<E>, backward_smem({kMaxTokens, kMaxTokens, 64, 0}, 2));
    configured = true;
    fused_backward_kernel<E><<<static_cast<unsigned>(pairs), kThreads, smem, cuda::stream()>>>(
        t, s.heads, scale, drop != nullptr, drop ? *drop : DropoutDraw{}, step, static_cast<const E*>(qkv),
        static_cast<const E*>(dout), static_cast<E*>(dqkv));
    MINIDL_LAUNCH_CHECK();
  };
  if (dtype == DType::BFloat16) launch(bf16{});
  else launch(fp16{});
}

}  // namespace minidl::kernels
