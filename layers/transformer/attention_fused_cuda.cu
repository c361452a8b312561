// Fused self-attention for short sequences in bfloat16/float16: one CTA of four warps per
// (sample, head) pair, Q, K, V (and dO) of up to 64 tokens in shared memory, every product on the
// tensor cores with mma.sync (m16n8k16, float32 accumulation). Warp w owns query rows 16w..16w+15:
// its scores S = Q K^T stay in registers, the softmax runs on them there (a row lives in the four
// lanes of a quad: two shuffles reduce it), and the probabilities become the A operand of P V
// without leaving registers (an m16n8 accumulator pair has the m16k16 operand's layout). Nothing
// of size T x T reaches global memory: the forward reads qkv and writes out, the backward
// recomputes the probabilities from Q and K (the same instructions, so the same bits) and writes
// dqkv; only dS and the dropped P go through shared memory, transposed by ldmatrix, for the two
// products that sum over queries (dK, dV). At a ViT's shapes (64 tokens, head size 64) the GEMM
// path moves about three times the bytes and runs each product as thousands of tiny GEMMs.
//
// The tiles (ldmatrix loads, mma.sync, staging) are attention_tiles.cuh's. Outputs are staged
// through the warp's own rows of a free buffer and written with 16-byte stores.
//
// The numerics follow the GEMM path (attention_cuda.cu): float32 scores and softmax, the (dropped)
// probabilities and dS rounded to the storage type as operands of the products, dropout draws
// from dropout_draw.h at the same indices; dS = P (dP - sum P dP) takes the float32 P (the GEMM
// path reads back the rounded one). Deterministic: no atomics, fixed reduction orders.
// Causal attention masks the scores past each query's own column before the softmax (P = 0 there).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/transformer/attention_kernels.h"
#include "layers/transformer/attention_tiles.cuh"

namespace minidl::kernels {
namespace {

using namespace attention_tiles;

constexpr int kMaxTokens = kBlockTokens;     // one block; shorter sequences are zero-padded
constexpr int kScoreLd = kMaxTokens + kPad;  // row stride of the T x T buffers (dS, dropped P)

// s (the warp's 16 x 64 scores Q K^T of query rows r0.., unscaled) -> p = softmax(scale * s) by
// rows, in place, over the T valid columns (the rest 0); causal: over columns up to the row's own
// (column 0 always, so no row is empty). Each row's max and sum: the lane's 16 values in column
// order, then the quad's butterfly.
__device__ __forceinline__ void softmax_rows(float (&s)[8][4], int T, int r0, bool causal, float scale) {
  const int g = (threadIdx.x & 31) >> 2, t = (threadIdx.x & 31) & 3;
  float m[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = 8 * nt + 2 * t + (e & 1), row = r0 + g + 8 * (e >> 1);
      s[nt][e] = col < T && (!causal || col <= row) ? s[nt][e] * scale : -INFINITY;
      m[e >> 1] = fmaxf(m[e >> 1], s[nt][e]);
    }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = s[nt][e] == -INFINITY ? 0.f : expf(s[nt][e] - m[e >> 1]);
      sum[e >> 1] += s[nt][e];
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
    sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
    sum[h] = 1.f / sum[h];
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] *= sum[e >> 1];
}

// The dropout factor of score (row, col) of `pair` (1 without dropout, 0 outside the T x T block).
__device__ __forceinline__ float drop_factor(bool drop, const DropoutDraw& draw, int64_t step, int64_t pair, int T,
                                             int row, int col) {
  if (row >= T || col >= T) return 0.f;
  return drop ? dropout_factor(draw, step, (pair * T + row) * T + col) : 1.f;
}

template <class E, int HD>
__global__ void __launch_bounds__(kThreads) fused_forward_kernel(int T, int64_t D, int64_t heads, float scale, bool causal,
                                                                 bool drop,
                                                                 DropoutDraw draw, const int64_t* __restrict__ step,
                                                                 const E* __restrict__ qkv, E* __restrict__ out) {
  constexpr int kLd = HD + kPad;
  __shared__ __align__(16) E q[kMaxTokens * kLd];
  __shared__ __align__(16) E k[kMaxTokens * kLd];
  __shared__ __align__(16) E v[kMaxTokens * kLd];
  const int64_t pair = blockIdx.x, n = pair / heads, h = pair % heads;
  const E* base = qkv + n * T * 3 * D + h * HD;
  load_rows<HD>(base, 3 * D, T, q);
  load_rows<HD>(base + D, 3 * D, T, k);
  load_rows<HD>(base + 2 * D, 3 * D, T, v);
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, r0 = 16 * (threadIdx.x >> 5);
  if (r0 >= T) return;  // no query rows here (after the block's only barrier)
  float p[8][4];
  scores<E, HD>(p, q, k, r0, T);
  softmax_rows(p, T, r0, causal, scale);
  const int64_t step_now = drop ? *step : 0;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      p[nt][e] *= drop_factor(drop, draw, step_now, pair, T, r0 + g + 8 * (e >> 1), 8 * nt + 2 * t + (e & 1));
  float o[HD / 8][4];
  times_tokens<E, HD>(o, [&](int kb, uint32_t(&a)[4]) { accumulator_as_a<E>(a, p, kb); }, v, T);
  store_block<HD>(o, 1.f, q, r0, T, out + n * T * D + h * HD, D);  // the warp's Q rows are free now
}

template <class E, int HD>
__global__ void __launch_bounds__(kThreads) fused_backward_kernel(int T, int64_t D, int64_t heads, float scale, bool causal,
                                                                  bool drop,
                                                                  DropoutDraw draw, const int64_t* __restrict__ step,
                                                                  const E* __restrict__ qkv, const E* __restrict__ dout,
                                                                  E* __restrict__ dqkv) {
  constexpr int kLd = HD + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  E* q = reinterpret_cast<E*>(smem);
  E* k = q + kMaxTokens * kLd;
  E* v = k + kMaxTokens * kLd;
  E* dO = v + kMaxTokens * kLd;
  E* ds_s = dO + kMaxTokens * kLd;         // dS, [query][key]
  E* pd_s = ds_s + kMaxTokens * kScoreLd;  // the dropped P, [query][key]
  const int64_t pair = blockIdx.x, n = pair / heads, h = pair % heads;
  const E* base = qkv + n * T * 3 * D + h * HD;
  load_rows<HD>(base, 3 * D, T, q);
  load_rows<HD>(base + D, 3 * D, T, k);
  load_rows<HD>(base + 2 * D, 3 * D, T, v);
  load_rows<HD>(dout + n * T * D + h * HD, D, T, dO);
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, r0 = 16 * (threadIdx.x >> 5);
  // The warp's query rows r0.. (and below its key rows r0..) hold tokens; the products over
  // queries read only the row blocks below T, which the warps that hold tokens write.
  const bool holds_tokens = r0 < T;
  float p[8][4], ds[8][4];
  if (holds_tokens) {
    scores<E, HD>(p, q, k, r0, T);
    softmax_rows(p, T, r0, causal, scale);
    scores<E, HD>(ds, dO, v, r0, T);  // dPd = dO V^T, the gradient reaching the dropped P
    // dP = dPd * dropout factor; dS = P * (dP - sum_j P_j dP_j), the dot summed as the softmax's sums.
    const int64_t step_now = drop ? *step : 0;
    float dot[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      float f[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = r0 + g + 8 * (e >> 1);
        f[e] = drop_factor(drop, draw, step_now, pair, T, row, 8 * nt + 2 * t + (e & 1));
        if (row >= T) p[nt][e] = 0.f;  // padding rows take no part in dK and dV
        ds[nt][e] *= f[e];
        dot[e >> 1] += p[nt][e] * ds[nt][e];
      }
      const int at = (r0 + g) * kScoreLd + 8 * nt + 2 * t;
      *reinterpret_cast<uint32_t*>(pd_s + at) = pack<E>(p[nt][0] * f[0], p[nt][1] * f[1]);
      *reinterpret_cast<uint32_t*>(pd_s + at + 8 * kScoreLd) = pack<E>(p[nt][2] * f[2], p[nt][3] * f[3]);
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      dot[hh] += __shfl_xor_sync(0xffffffffu, dot[hh], 1);
      dot[hh] += __shfl_xor_sync(0xffffffffu, dot[hh], 2);
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[nt][e] = p[nt][e] * (ds[nt][e] - dot[e >> 1]);
      const int at = (r0 + g) * kScoreLd + 8 * nt + 2 * t;
      *reinterpret_cast<uint32_t*>(ds_s + at) = pack<E>(ds[nt][0], ds[nt][1]);
      *reinterpret_cast<uint32_t*>(ds_s + at + 8 * kScoreLd) = pack<E>(ds[nt][2], ds[nt][3]);
    }
  }
  __syncthreads();  // dS and the dropped P complete; V no longer read (its rows stage the outputs)
  if (!holds_tokens) return;
  E* dbase = dqkv + n * T * 3 * D + h * HD;
  float c[HD / 8][4];
  // dQ = scale dS K (the warp's query rows), dS from registers.
  times_tokens<E, HD>(c, [&](int kb, uint32_t(&a)[4]) { accumulator_as_a<E>(a, ds, kb); }, k, T);
  store_block<HD>(c, scale, v, r0, T, dbase, 3 * D);
  // dK = scale dS^T Q and dV = Pd^T dO (the warp's key rows), the transposes loaded by ldmatrix.
  times_tokens<E, HD>(c, [&](int kb, uint32_t(&a)[4]) { load_a_trans(a, ds_s, kScoreLd, r0, 16 * kb); }, q, T);
  store_block<HD>(c, scale, v, r0, T, dbase + D, 3 * D);
  times_tokens<E, HD>(c, [&](int kb, uint32_t(&a)[4]) { load_a_trans(a, pd_s, kScoreLd, r0, 16 * kb); }, dO, T);
  store_block<HD>(c, 1.f, v, r0, T, dbase + 2 * D, 3 * D);
}

template <int HD>
constexpr size_t backward_smem() {
  return sizeof(uint16_t) * (4 * kMaxTokens * (HD + kPad) + 2 * kMaxTokens * kScoreLd);
}


}  // namespace

template <class T>
bool attention_fused_cuda_fits(const AttentionShape& s, const T* tensor) {
  return !std::is_same_v<T, float> && aligned16(tensor) && s.tokens >= 1 && s.tokens <= kMaxTokens && s.head_dim % 16 == 0 &&
         s.head_dim >= 16 && s.head_dim <= 64 && s.batch * s.heads <= INT32_MAX;
}

template <class E>
void attention_fused_forward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const E* qkv,
                                  E* out) {
  MINIDL_CHECK(attention_fused_cuda_fits(s, qkv) && attention_fused_cuda_fits(s, out),
               "attention: the fused kernel does not take ", dtype_name(DTypeOf<E>::value), " with ", s.tokens,
               " tokens of head size ", s.head_dim);
  const int64_t pairs = s.batch * s.heads;
  if (pairs == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  with_head_dim(s.head_dim, [&](auto hd) {
    fused_forward_kernel<E, decltype(hd)::value><<<static_cast<unsigned>(pairs), kThreads, 0, cuda::stream()>>>(
        static_cast<int>(s.tokens), s.width(), s.heads, scale, s.causal, drop != nullptr, drop ? *drop : DropoutDraw{}, step,
        qkv, out);
    MINIDL_LAUNCH_CHECK();
  });
}

template <class E>
void attention_fused_backward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const E* qkv,
                                   const E* dout, E* dqkv) {
  MINIDL_CHECK(attention_fused_cuda_fits(s, qkv) && attention_fused_cuda_fits(s, dout) &&
                   attention_fused_cuda_fits(s, dqkv),
               "attention: the fused kernel does not take ", dtype_name(DTypeOf<E>::value), " with ", s.tokens,
               " tokens of head size ", s.head_dim);
  const int64_t pairs = s.batch * s.heads;
  if (pairs == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  with_head_dim(s.head_dim, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    constexpr size_t smem = backward_smem<HD>();
    // More than the default 48 KiB of dynamic shared memory at head size 64: allowed once per kernel.
    static const bool allowed = [] {
      MINIDL_CUDA_CHECK(cudaFuncSetAttribute(fused_backward_kernel<E, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)));
      return true;
    }();
    (void)allowed;
    fused_backward_kernel<E, HD><<<static_cast<unsigned>(pairs), kThreads, smem, cuda::stream()>>>(
        static_cast<int>(s.tokens), s.width(), s.heads, scale, s.causal, drop != nullptr, drop ? *drop : DropoutDraw{}, step,
        qkv, dout, dqkv);
    MINIDL_LAUNCH_CHECK();
  });
}

template bool attention_fused_cuda_fits<float>(const AttentionShape&, const float*);
#define MINIDL_ATTENTION_FUSED_CUDA(E)                                                                           \
  template bool attention_fused_cuda_fits<E>(const AttentionShape&, const E*);                                  \
  template void attention_fused_forward_cuda<E>(const AttentionShape&, const DropoutDraw*, const int64_t*,      \
                                                const E*, E*);                                                  \
  template void attention_fused_backward_cuda<E>(const AttentionShape&, const DropoutDraw*, const int64_t*,     \
                                                 const E*, const E*, E*);
MINIDL_FOR_HALF_TYPES(MINIDL_ATTENTION_FUSED_CUDA)

}  // namespace minidl::kernels
