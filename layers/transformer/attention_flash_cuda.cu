// Flash attention for long sequences in bfloat16/float16 (FlashAttention-2's algorithm on
// attention_tiles.cuh's mma.sync tiles), deterministic: no atomics, every sum in a fixed order.
//
// Forward: one CTA of four warps per (pair, block of 64 queries); each warp keeps its 16 query
// rows' output, running max m and sum l in registers and walks the key blocks (up to its own
// block when causal): S = Q K^T into registers, masked and scaled, the max and sum updated with
// the rescaling exp(m_old - m_new), and P (rounded to the storage type) times V added to the
// output. It writes O = acc / l and the row's log-sum-exp (float32, (pairs, T)) for the backward.
// Nothing of size T x T exists anywhere. The exponentials are base 2 (one ex2 each), only the
// blocks the mask cuts (the diagonal, the last partial one) test visibility per element, and with
// a causal mask the query blocks that see the most keys start first.
//
// Backward, three launches: delta = rowsum(dO * O) per query; then per (pair, block of 64 keys)
// the CTA walks the query blocks (from its own when causal) recomputing P^T = exp(scale K Q^T -
// lse) and dS^T = P^T (V dO^T - delta) in registers, adding P^T dO to dV and dS^T Q to dK; and per
// (pair, block of 64 queries) the same P and dS recomputed from the query side, adding dS K to
// dQ. Each output element is owned by one warp and summed in block order, so there are no atomic
// adds (FlashAttention-2 adds dQ atomically, whose order varies run to run); the price is the
// scores computed once more.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/allocator.h"
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

// Whether query `row` sees key `col` (both absolute token indices).
__device__ __forceinline__ bool visible(int row, int col, int T, bool causal) {
  return row < T && col < T && (!causal || col <= row);
}

// The absolute row and column of accumulator element (nt, e) of a warp's tile at (row0, col0).
__device__ __forceinline__ int tile_row(int row0, int e) { return row0 + ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int tile_col(int col0, int nt, int e) {
  return col0 + 8 * nt + 2 * ((threadIdx.x & 31) & 3) + (e & 1);
}

// Sums each of the two rows a lane holds over its quad (the four lanes sharing the rows).
__device__ __forceinline__ void quad_sum(float (&v)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    v[h] += __shfl_xor_sync(0xffffffffu, v[h], 1);
    v[h] += __shfl_xor_sync(0xffffffffu, v[h], 2);
  }
}

// From the scores S (in p) and dP (in ds) of a warp's tile: P = 2^(scale2 S - lse2) where visible
// (0 elsewhere; every element with kMasked false) and dS = P (dP - delta), each of lse2 (the
// log-sum-exp in base 2), delta and visibility given per element.
template <bool kMasked, class Visible, class Lse, class Delta>
__device__ __forceinline__ void probabilities_and_grads(float (&p)[8][4], float (&ds)[8][4], float scale2,
                                                        Visible visible_at, Lse lse_at, Delta delta_at) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      p[nt][e] = !kMasked || visible_at(nt, e) ? exp2f(p[nt][e] * scale2 - lse_at(nt, e)) : 0.f;
      ds[nt][e] = p[nt][e] * (ds[nt][e] - delta_at(nt, e));
    }
}

// The four 64-token tiles a backward block stages in shared memory, rows HD + kPad apart: two it
// keeps (its own block's) and two it reloads for each block it sums over.
template <class E, int HD>
struct BackwardTiles {
  __align__(16) E at[4][kBlockTokens * (HD + kPad)];
};

// The (sample, head) pair of a block (blockIdx.x) and where its Q rows start in the packed QKV
// rows (K at + D, V at + 2 D; rows 3 D apart).
template <class E>
struct BlockPair {
  int64_t pair, n, h;
  const E* base;
  __device__ BlockPair(const E* qkv, int T, int64_t D, int64_t heads, int head_dim)
      : pair(blockIdx.x), n(pair / heads), h(pair % heads), base(qkv + n * T * 3 * D + h * head_dim) {}
};

// Stages the key block from k0 (its K and V rows) for every warp of the block: waits until each
// warp is done with the previous block's, then until all of this one is in.
template <int HD, class E>
__device__ __forceinline__ void stage_keys(const E* base, int64_t D, int T, int k0, E* k, E* v) {
  __syncthreads();
  load_rows<HD>(base + D + k0 * 3 * D, 3 * D, T - k0, k);
  load_rows<HD>(base + 2 * D + k0 * 3 * D, 3 * D, T - k0, v);
  __syncthreads();
}

// Exponentials in base 2 (ex2 is one instruction, expf several): scores scaled by
// scale * log2(e), the running max in those units; the log-sum-exp is kept in natural units.
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// The query block of a CTA: with a causal mask the last blocks see the most keys, so they start
// first and the short ones fill the tail.
__device__ __forceinline__ int query_block(bool causal) {
  return causal ? static_cast<int>(gridDim.y - 1 - blockIdx.y) : static_cast<int>(blockIdx.y);
}

// Whether every query of the block at q0 sees every key of the block at k0: no masking needed.
__device__ __forceinline__ bool block_fully_visible(int q0, int k0, int T, bool causal) {
  return k0 + kBlockTokens <= T && q0 + kBlockTokens <= T && (!causal || k0 + kBlockTokens <= q0);
}

// f(std::false_type) where every query of the block pair sees every key (no per-element mask),
// f(std::true_type) where the mask or the sequence's end cuts it: the two compiled bodies.
template <class F>
__device__ __forceinline__ void with_mask(int q0, int k0, int T, bool causal, F&& f) {
  if (block_fully_visible(q0, k0, T, causal))
    f(std::false_type{});
  else
    f(std::true_type{});
}

// One key block of the forward's online softmax for the warp's 16 rows: scores masked (kMasked)
// and scaled, the max and sum updated with the rescaling 2^(m_old - m_new), and P (rounded to the
// storage type) times V added to the output.
template <bool kMasked, class E, int HD>
__device__ __forceinline__ void online_softmax_step(float (&s)[8][4], float (&m)[2], float (&l)[2],
                                                    float (&o)[HD / 8][4], const E* v, float scale2, int row0, int k0,
                                                    int T, bool causal) {
  // Every row sees key k0 (k0 <= its query, and k0 < T), so the new max is finite.
  float mb[2] = {m[0], m[1]};
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kMasked) {
        const int row = min(tile_row(row0, e), T - 1);  // padding rows repeat the last row's mask
        s[nt][e] = visible(row, tile_col(k0, nt, e), T, causal) ? s[nt][e] * scale2 : -INFINITY;
      } else {
        s[nt][e] *= scale2;
      }
      mb[e >> 1] = fmaxf(mb[e >> 1], s[nt][e]);
    }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    mb[hh] = fmaxf(mb[hh], __shfl_xor_sync(0xffffffffu, mb[hh], 1));
    mb[hh] = fmaxf(mb[hh], __shfl_xor_sync(0xffffffffu, mb[hh], 2));
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = kMasked && s[nt][e] == -INFINITY ? 0.f : exp2f(s[nt][e] - mb[e >> 1]);
      sum[e >> 1] += s[nt][e];
    }
  quad_sum(sum);
  float corr[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    corr[hh] = exp2f(m[hh] - mb[hh]);  // 0 on the first block (m = -inf)
    l[hh] = l[hh] * corr[hh] + sum[hh];
    m[hh] = mb[hh];
  }
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] *= corr[e >> 1];
  add_times_tokens<E, HD>(
      o, [&](int kb, uint32_t(&a)[4]) { accumulator_as_a<E>(a, s, kb); }, v, T - k0);
}

template <class E, int HD>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(int T, int64_t D, int64_t heads, float scale, bool causal, const E* __restrict__ qkv,
                         E* __restrict__ out, float* __restrict__ lse) {
  constexpr int kLd = HD + kPad;
  __shared__ __align__(16) E q[kBlockTokens * kLd];
  __shared__ __align__(16) E k[kBlockTokens * kLd];
  __shared__ __align__(16) E v[kBlockTokens * kLd];
  const BlockPair<E> b(qkv, T, D, heads, HD);
  const int64_t pair = b.pair, n = b.n, h = b.h;
  const E* base = b.base;
  const int q0 = query_block(causal) * kBlockTokens;
  load_rows<HD>(base + q0 * 3 * D, 3 * D, T - q0, q);
  const int r0 = 16 * (threadIdx.x >> 5), row0 = q0 + r0;
  float o[HD / 8][4];
  zero_tiles(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float scale2 = scale * kLog2e;
  const int key_end = causal ? min(T, q0 + kBlockTokens) : T;
  for (int k0 = 0; k0 < key_end; k0 += kBlockTokens) {
    stage_keys<HD>(base, D, T, k0, k, v);
    float s[8][4];
    scores<E, HD>(s, q, k, r0, T - k0);
    with_mask(q0, k0, T, causal, [&](auto masked) {
      online_softmax_step<decltype(masked)::value, E, HD>(s, m, l, o, v, scale2, row0, k0, T, causal);
    });
  }
  const float inv[2] = {1.f / l[0], 1.f / l[1]};
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] *= inv[e >> 1];
  store_block<HD>(o, 1.f, q, r0, T - q0, out + (n * T + q0) * D + h * HD, D);  // the warp's own Q rows stage it
  if ((threadIdx.x & 3) == 0)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = tile_row(row0, 2 * hh);
      if (row < T) lse[pair * T + row] = m[hh] * kLn2 + logf(l[hh]);
    }
}

// delta (pairs, T) = rowsum(dO * O) per query, one warp per row, the lanes' products in column
// order then the butterfly.
template <class E>
__global__ void flash_delta_kernel(int T, int64_t D, int64_t heads, int hd, int64_t rows, const E* __restrict__ out,
                                   const E* __restrict__ dout, float* __restrict__ delta) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const int64_t pair = r / T, i = r % T, n = pair / heads, h = pair % heads;
    const int64_t at = (n * T + i) * D + h * hd;
    float sum = 0.f;
    for (int c = lane; c < hd; c += 32) sum += to_float(dout[at + c]) * to_float(out[at + c]);
    sum = cuda::warp_sum(sum);
    if (lane == 0) delta[r] = sum;
  }
}

// The backward's second and third launches, one kernel in two modes. kKeys: dK and dV of one block
// of 64 keys, warp w owning key rows 16w.. and summing over the query blocks; else dQ of one block
// of 64 queries, warp w owning query rows 16w.. and summing over the key blocks. Each block writes
// only its own rows, so every sum keeps one order.
template <class E, int HD, bool kKeys>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(int T, int64_t D, int64_t heads, float scale, bool causal, const E* __restrict__ qkv,
                          const E* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                          E* __restrict__ dqkv) {
  __shared__ BackwardTiles<E, HD> tiles;
  const BlockPair<E> b(qkv, T, D, heads, HD);
  const int64_t pair = b.pair, n = b.n, h = b.h;
  const E* base = b.base;
  const float scale2 = scale * kLog2e;
  const int r0 = 16 * (threadIdx.x >> 5), block0 = (kKeys ? blockIdx.y : query_block(causal)) * kBlockTokens;
  if constexpr (kKeys) {
    __shared__ float lse_s[kBlockTokens], delta_s[kBlockTokens];
    E *k = tiles.at[0], *v = tiles.at[1], *q = tiles.at[2], *dO = tiles.at[3];
    const int k0 = block0;
    load_rows<HD>(base + D + k0 * 3 * D, 3 * D, T - k0, k);
    load_rows<HD>(base + 2 * D + k0 * 3 * D, 3 * D, T - k0, v);
    const int key0 = k0 + r0;
    float dk[HD / 8][4], dv[HD / 8][4];
    zero_tiles(dk);
    zero_tiles(dv);
    for (int q0 = causal ? k0 : 0; q0 < T; q0 += kBlockTokens) {
      __syncthreads();  // every warp is done with the previous Q and dO
      load_rows<HD>(base + q0 * 3 * D, 3 * D, T - q0, q);
      load_rows<HD>(dout + (n * T + q0) * D + h * HD, D, T - q0, dO);
      for (int i = threadIdx.x; i < kBlockTokens; i += kThreads) {
        lse_s[i] = q0 + i < T ? lse[pair * T + q0 + i] * kLog2e : 0.f;
        delta_s[i] = q0 + i < T ? delta[pair * T + q0 + i] : 0.f;
      }
      __syncthreads();
      float p[8][4], ds[8][4];  // P^T and dS^T: rows keys, columns queries
      scores<E, HD>(p, k, q, r0, T - q0);
      scores<E, HD>(ds, v, dO, r0, T - q0);  // dP^T = V dO^T
      with_mask(q0, k0, T, causal, [&](auto masked) {
        probabilities_and_grads<decltype(masked)::value>(
            p, ds, scale2,
            [&](int nt, int e) { return visible(q0 + tile_col(0, nt, e), tile_row(key0, e), T, causal); },
            [&](int nt, int e) { return lse_s[tile_col(0, nt, e)]; },
            [&](int nt, int e) { return delta_s[tile_col(0, nt, e)]; });
      });
      add_times_tokens<E, HD>(
          dv, [&](int kb, uint32_t(&a)[4]) { accumulator_as_a<E>(a, p, kb); }, dO, T - q0);
      add_times_tokens<E, HD>(
          dk, [&](int kb, uint32_t(&a)[4]) { accumulator_as_a<E>(a, ds, kb); }, q, T - q0);
    }
    // The warp's own rows of K and V stage its outputs (no other warp reads them).
    E* dbase = dqkv + (n * T + k0) * 3 * D + h * HD;
    store_block<HD>(dk, scale, k, r0, T - k0, dbase + D, 3 * D);
    store_block<HD>(dv, 1.f, v, r0, T - k0, dbase + 2 * D, 3 * D);
  } else {
    E *q = tiles.at[0], *dO = tiles.at[1], *k = tiles.at[2], *v = tiles.at[3];
    const int q0 = block0;
    load_rows<HD>(base + q0 * 3 * D, 3 * D, T - q0, q);
    load_rows<HD>(dout + (n * T + q0) * D + h * HD, D, T - q0, dO);
    const int row0 = q0 + r0;
    float row_lse[2], row_delta[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = tile_row(row0, 2 * hh);
      row_lse[hh] = row < T ? lse[pair * T + row] * kLog2e : 0.f;
      row_delta[hh] = row < T ? delta[pair * T + row] : 0.f;
    }
    float dq[HD / 8][4];
    zero_tiles(dq);
    const int key_end = causal ? min(T, q0 + kBlockTokens) : T;
    for (int k0 = 0; k0 < key_end; k0 += kBlockTokens) {
      stage_keys<HD>(base, D, T, k0, k, v);
      float p[8][4], ds[8][4];
      scores<E, HD>(p, q, k, r0, T - k0);
      scores<E, HD>(ds, dO, v, r0, T - k0);  // dP = dO V^T
      with_mask(q0, k0, T, causal, [&](auto masked) {
        probabilities_and_grads<decltype(masked)::value>(
            p, ds, scale2, [&](int nt, int e) { return visible(tile_row(row0, e), tile_col(k0, nt, e), T, causal); },
            [&](int, int e) { return row_lse[e >> 1]; }, [&](int, int e) { return row_delta[e >> 1]; });
      });
      add_times_tokens<E, HD>(
          dq, [&](int kb, uint32_t(&a)[4]) { accumulator_as_a<E>(a, ds, kb); }, k, T - k0);
    }
    store_block<HD>(dq, scale, q, r0, T - q0, dqkv + (n * T + q0) * 3 * D + h * HD, 3 * D);
  }
}

dim3 flash_grid(const AttentionShape& s) {
  return dim3(static_cast<unsigned>(s.batch * s.heads), static_cast<unsigned>(cuda::ceil_div(s.tokens, kBlockTokens)));
}

template <class E>
void check_flash(const AttentionShape& s, std::initializer_list<const E*> tensors) {
  bool ok = true;
  for (const E* p : tensors) ok = ok && attention_flash_cuda_fits(s, p);
  MINIDL_CHECK(ok, "attention: the flash kernels do not take ", dtype_name(DTypeOf<E>::value), " with ", s.tokens,
               " tokens of head size ", s.head_dim);
}

}  // namespace

template <class T>
bool attention_flash_cuda_fits(const AttentionShape& s, const T* tensor) {
  return !std::is_same_v<T, float> && aligned16(tensor) && s.tokens >= 1 && s.tokens <= int64_t{65535} * kBlockTokens &&
         s.head_dim % 16 == 0 && s.head_dim >= 16 && s.head_dim <= 64 && s.batch * s.heads <= INT32_MAX;
}

template <class E>
void attention_flash_forward_cuda(const AttentionShape& s, const E* qkv, E* out, float* lse) {
  check_flash<E>(s, {qkv, out});
  if (s.batch * s.heads == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  with_head_dim(s.head_dim, [&](auto hd) {
    flash_forward_kernel<E, decltype(hd)::value><<<flash_grid(s), kThreads, 0, cuda::stream()>>>(
        static_cast<int>(s.tokens), s.width(), s.heads, scale, s.causal, qkv, out, lse);
    MINIDL_LAUNCH_CHECK();
  });
}

template <class E>
void attention_flash_backward_cuda(const AttentionShape& s, const E* qkv, const E* out, const E* dout, const float* lse,
                                   E* dqkv) {
  check_flash<E>(s, {qkv, out, dout, dqkv});
  const int64_t rows = s.batch * s.heads * s.tokens;
  if (rows == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  auto delta = allocate(sizeof(float) * rows, Device::cuda());
  float* d = static_cast<float*>(delta.get());
  with_head_dim(s.head_dim, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    constexpr int kDeltaBlock = 256;
    flash_delta_kernel<E>
        <<<cuda::grid_blocks(cuda::ceil_div(rows, kDeltaBlock / 32), kDeltaBlock), kDeltaBlock, 0, cuda::stream()>>>(
            static_cast<int>(s.tokens), s.width(), s.heads, HD, rows, out, dout, d);
    MINIDL_LAUNCH_CHECK();
    flash_backward_kernel<E, HD, true><<<flash_grid(s), kThreads, 0, cuda::stream()>>>(
        static_cast<int>(s.tokens), s.width(), s.heads, scale, s.causal, qkv, dout, lse, d, dqkv);
    MINIDL_LAUNCH_CHECK();
    flash_backward_kernel<E, HD, false><<<flash_grid(s), kThreads, 0, cuda::stream()>>>(
        static_cast<int>(s.tokens), s.width(), s.heads, scale, s.causal, qkv, dout, lse, d, dqkv);
    MINIDL_LAUNCH_CHECK();
  });
}

template bool attention_flash_cuda_fits<float>(const AttentionShape&, const float*);
#define MINIDL_ATTENTION_FLASH_CUDA(E)                                                        \
  template bool attention_flash_cuda_fits<E>(const AttentionShape&, const E*);                \
  template void attention_flash_forward_cuda<E>(const AttentionShape&, const E*, E*, float*); \
  template void attention_flash_backward_cuda<E>(const AttentionShape&, const E*, const E*, const E*, const float*, E*);
MINIDL_FOR_HALF_TYPES(MINIDL_ATTENTION_FLASH_CUDA)

}  // namespace minidl::kernels
