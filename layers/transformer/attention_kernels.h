// Self-attention launchers over a packed projection: qkv (N, T, 3, H, hd) row-major, as
// nn.MultiheadAttention's in_proj makes it (q, k, v blocks of D = H * hd along the last dim),
// and out (N, T, H, hd) = the heads side by side, ready for out_proj. For each sample n and head h:
//   S = scale * Q K^T (T x T), P = softmax(S) by rows, Pd = P * dropout mask / (1 - p), O = Pd V.
// probs holds P and dropped Pd (N, H, T, T) for the backward (dropped == probs without dropout).
// CPU: float32 loops, parallel over (n, h); CUDA: cuBLAS batched GEMMs (float32 in full fp32 as
// Linear; bfloat16/float16 on tensor cores with float32 accumulation) and our own row-softmax
// kernels, forward and backward. Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "layers/regularization/dropout_draw.h"

namespace minidl::kernels {

struct AttentionShape {
  int64_t batch, tokens, heads, head_dim;
  bool causal = false;
  int64_t width() const { return heads * head_dim; }  // D
};

// drop: null for no dropout. step: the draw's step (CPU) or the device word holding it (CUDA).
void attention_forward_cpu(const AttentionShape& s, const DropoutDraw* drop, int64_t step, const float* qkv,
                           float* probs, float* dropped, float* out);
// dqkv (N, T, 3D) from dout (N, T, D).
void attention_backward_cpu(const AttentionShape& s, const DropoutDraw* drop, int64_t step, const float* qkv,
                            const float* probs, const float* dropped, const float* dout, float* dqkv);

// The same on CUDA, every tensor of T (float, bf16 or fp16). The scores and their gradients are
// float32 scratch; probs and dropped are rounded to T (the GEMMs read them in that type).
template <class T>
void attention_forward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const T* qkv,
                            T* probs, T* dropped, T* out);
template <class T>
void attention_backward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const T* qkv,
                             const T* probs, const T* dropped, const T* dout, T* dqkv);

// The fused kernels (attention_fused_cuda.cu): one CTA of four warps per (sample, head) on the
// tensor cores (mma.sync), scores and softmax in registers, nothing of size T x T in global memory,
// the backward recomputing the probabilities. They take bfloat16/float16 with at most 64 tokens, a
// head size of 16, 32, 48 or 64 and 16-byte aligned tensors (`fits` says, for each of the pointers
// a call passes). The op runs them wherever they fit: measured 2.4-3.7x faster than the GEMM path
// forward + backward (H200, bf16, batch 512, 6 heads: docs/transformer.md), 2.7x at a ViT's 64
// tokens of head size 64.
// fits: any floating T (false for float); the kernels: T = bf16 or fp16.
template <class T> bool attention_fused_cuda_fits(const AttentionShape& s, const T* tensor);
template <class T>
void attention_fused_forward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const T* qkv,
                                  T* out);
template <class T>
void attention_fused_backward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const T* qkv,
                                   const T* dout, T* dqkv);

// The flash kernels (attention_flash_cuda.cu) for longer sequences: bfloat16/float16 without
// attention dropout, head sizes 16, 32, 48 or 64, 16-byte aligned tensors, up to 4 M tokens; blocks of
// 64 queries and keys on the tensor cores, the softmax online, nothing of size T x T in memory.
// The forward writes lse (N * H * T floats: each query row's log-sum-exp) for the backward, which
// recomputes the probabilities from it; dqkv is written whole (no accumulation, no atomics).
// fits: any floating T (false for float); the kernels: T = bf16 or fp16.
template <class T> bool attention_flash_cuda_fits(const AttentionShape& s, const T* tensor);
template <class T>
void attention_flash_forward_cuda(const AttentionShape& s, const T* qkv, T* out, float* lse);
template <class T>
void attention_flash_backward_cuda(const AttentionShape& s, const T* qkv, const T* out, const T* dout, const float* lse,
                                   T* dqkv);

}  // namespace minidl::kernels
