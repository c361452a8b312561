// Tensor-core tiles shared by the attention kernels (attention_fused_cuda.cu for up to 64 tokens,
// attention_flash_cuda.cu for longer sequences): blocks of 64 tokens held by four warps of 16
// rows, every product on mma.sync (m16n8k16, float32 accumulation), operands loaded from shared
// memory by ldmatrix (.trans where the stored layout is the transpose of the fragment's), rows
// padded by 8 elements so the eight rows of each 8 x 8 load fall on distinct banks. An m16n8
// accumulator pair has the layout of an m16k16 A operand, so scores become the next product's
// operand without leaving registers. Included by .cu files only.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half_types.h"

namespace minidl::kernels::attention_tiles {

constexpr int kBlockTokens = 64;  // tokens per block: four warps of 16 rows
constexpr int kWarps = kBlockTokens / 16;
constexpr int kThreads = 32 * kWarps;
constexpr int kPad = 8;  // elements of padding per shared-memory row

template <class P>
__device__ __forceinline__ uint32_t smem_address(const P* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses of matrix i, and
// lane l receives element (l / 4, 2 (l % 4) .. +1) of each (of its transpose with .trans).
template <class P>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const P* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}
template <class P>
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const P* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// c (16 x 8, float32) += a (16 x 16) b (16 x 8). Lane l = 4 g + t holds a as rows g, g + 8 and
// columns 2t, 2t + 1, 2t + 8, 2t + 9; b as rows 2t, 2t + 1, 2t + 8, 2t + 9 of column g; c as
// (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
template <class E>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<E, bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Operand fragments from shared memory (ld: the row stride in elements; lane = 8 i + row).
// A (m x k) at (m0, k0) stored as it is, [m][k].
template <class E>
__device__ __forceinline__ void load_a(uint32_t (&r)[4], const E* s, int ld, int m0, int k0) {
  const int lane = threadIdx.x & 31, i = lane >> 3, row = lane & 7;
  ldsm_x4(r, s + (m0 + (i & 1) * 8 + row) * ld + k0 + (i >> 1) * 8);
}
// A (m x k) at (m0, k0) stored transposed, [k][m].
template <class E>
__device__ __forceinline__ void load_a_trans(uint32_t (&r)[4], const E* s, int ld, int m0, int k0) {
  const int lane = threadIdx.x & 31, i = lane >> 3, row = lane & 7;
  ldsm_x4_trans(r, s + (k0 + (i >> 1) * 8 + row) * ld + m0 + (i & 1) * 8);
}
// B (k x n) for the two n-tiles at n0 and n0 + 8 (r[0..1] and r[2..3]), stored [n][k].
template <class E>
__device__ __forceinline__ void load_b(uint32_t (&r)[4], const E* s, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, i = lane >> 3, row = lane & 7;
  ldsm_x4(r, s + (n0 + (i >> 1) * 8 + row) * ld + k0 + (i & 1) * 8);
}
// The same, stored [k][n].
template <class E>
__device__ __forceinline__ void load_b_trans(uint32_t (&r)[4], const E* s, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, i = lane >> 3, row = lane & 7;
  ldsm_x4_trans(r, s + (k0 + (i & 1) * 8 + row) * ld + n0 + (i >> 1) * 8);
}

// Two values rounded to E, the first in the low half (the lower column of a fragment pair).
template <class E>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return static_cast<uint32_t>(from_float<E>(lo).bits) | static_cast<uint32_t>(from_float<E>(hi).bits) << 16;
}

// The A operand of columns 16 kb .. 16 kb + 15 of a 16 x 64 accumulator row block c[8][4].
template <class E>
__device__ __forceinline__ void accumulator_as_a(uint32_t (&a)[4], const float (&c)[8][4], int kb) {
  a[0] = pack<E>(c[2 * kb][0], c[2 * kb][1]);
  a[1] = pack<E>(c[2 * kb][2], c[2 * kb][3]);
  a[2] = pack<E>(c[2 * kb + 1][0], c[2 * kb + 1][1]);
  a[3] = pack<E>(c[2 * kb + 1][2], c[2 * kb + 1][3]);
}

// Rows [0, 64) of a (T, HD) block of a row-major matrix with row stride `ld` into shared memory
// with row stride HD + kPad, rows >= T zero, 16 bytes at a time.
template <int HD, class E>
__device__ void load_rows(const E* __restrict__ src, int64_t ld, int T, E* dst) {
  constexpr int kVec = HD / 8;
  for (int i = threadIdx.x; i < kBlockTokens * kVec; i += kThreads) {
    const int r = i / kVec, c = i % kVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < T) v = *reinterpret_cast<const uint4*>(src + r * ld + 8 * c);
    *reinterpret_cast<uint4*>(dst + r * (HD + kPad) + 8 * c) = v;
  }
}

// The warp's 16 x HD accumulator block (rows r0.., times `scale`, rounded once) to dst rows
// r0.. < T (row stride ld), staged through the warp's rows of `stage` (row stride HD + kPad).
template <int HD, class E>
__device__ void store_block(const float (&c)[HD / 8][4], float scale, E* stage, int r0, int T, E* __restrict__ dst,
                            int64_t ld) {
  constexpr int kLd = HD + kPad, kVec = HD / 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  __syncwarp();  // earlier reads of these rows are done
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) {
    *reinterpret_cast<uint32_t*>(stage + (r0 + g) * kLd + 8 * nt + 2 * t) = pack<E>(c[nt][0] * scale, c[nt][1] * scale);
    *reinterpret_cast<uint32_t*>(stage + (r0 + g + 8) * kLd + 8 * nt + 2 * t) =
        pack<E>(c[nt][2] * scale, c[nt][3] * scale);
  }
  __syncwarp();
  for (int i = lane; i < 16 * kVec; i += 32) {
    const int r = r0 + i / kVec, v = i % kVec;
    if (r < T)
      *reinterpret_cast<uint4*>(dst + r * ld + 8 * v) = *reinterpret_cast<const uint4*>(stage + r * kLd + 8 * v);
  }
}

// Zeros a warp's accumulator tiles.
template <int NT>
__device__ __forceinline__ void zero_tiles(float (&c)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[nt][e] = 0.f;
}

// c (16 x 16 NB) += sum over the k-blocks kb < KB of A_kb B_kb, k-blocks outside, n-blocks inside:
// a_of(kb, a) loads A's 16 x 16 block kb, b_of(np, kb, b) B's block (kb, np). Blocks from
// `k_limit` (in k) or `n_limit` (in n) on are skipped: the tiles past the last token.
template <class E, int KB, int NB, class AOf, class BOf>
__device__ __forceinline__ void mma_blocks(float (&c)[2 * NB][4], AOf&& a_of, BOf&& b_of, int k_limit, int n_limit) {
#pragma unroll
  for (int kb = 0; kb < KB; ++kb) {
    if (16 * kb >= k_limit) break;
    uint32_t a[4];
    a_of(kb, a);
#pragma unroll
    for (int np = 0; np < NB; ++np) {
      if (16 * np >= n_limit) break;
      uint32_t b[4];
      b_of(np, kb, b);
      mma<E>(c[2 * np], a, b[0], b[1]);
      mma<E>(c[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// The warp's 16 x 64 scores Q K^T (rows r0..) over the key tiles that hold tokens.
template <class E, int HD>
__device__ __forceinline__ void scores(float (&s)[8][4], const E* q, const E* k, int r0, int T) {
  constexpr int kLd = HD + kPad;
  zero_tiles(s);
  mma_blocks<E, HD / 16, 4>(
      s, [&](int kk, uint32_t(&a)[4]) { load_a(a, q, kLd, r0, 16 * kk); },
      [&](int np, int kk, uint32_t(&b)[4]) { load_b(b, k, kLd, 16 * np, 16 * kk); }, HD, T);
}

// c (16 x HD) += A B, A the 16 x 64 row block given per k-block by `a_of(kb, a)`, B the 64 x HD
// matrix stored [k][n] in `b` (row stride HD + kPad), over the k-blocks that hold tokens.
template <class E, int HD, class AOf>
__device__ __forceinline__ void add_times_tokens(float (&c)[HD / 8][4], AOf&& a_of, const E* b, int T) {
  constexpr int kLd = HD + kPad;
  mma_blocks<E, 4, HD / 16>(
      c, a_of, [&](int np, int kb, uint32_t(&bf)[4]) { load_b_trans(bf, b, kLd, 16 * np, 16 * kb); }, T, HD);
}

// c (16 x HD) = A B, as add_times_tokens from zero.
template <class E, int HD, class AOf>
__device__ __forceinline__ void times_tokens(float (&c)[HD / 8][4], AOf&& a_of, const E* b, int T) {
  zero_tiles(c);
  add_times_tokens<E, HD>(c, a_of, b, T);
}

// Calls f(integral_constant<HD>) for a head size of 16, 32, 48 or 64.
template <class F>
void with_head_dim(int64_t head_dim, F&& f) {
  switch (head_dim) {
    case 16:
      f(std::integral_constant<int, 16>{});
      return;
    case 32:
      f(std::integral_constant<int, 32>{});
      return;
    case 48:
      f(std::integral_constant<int, 48>{});
      return;
    case 64:
      f(std::integral_constant<int, 64>{});
      return;
  }
  MINIDL_ASSERT(false);
}

// The 16-byte loads and stores need 16-byte aligned tensors.
template <class T>
bool aligned16(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace minidl::kernels::attention_tiles
