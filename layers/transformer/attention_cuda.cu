// Self-attention on the GPU: the four products of each (sample, head) pair as cuBLAS batched
// GEMMs that read Q, K, V straight out of the packed projection and write O, dQ, dK, dV straight
// into their (N, T, ...) places (pointer arrays filled by a kernel, so nothing is reordered and
// a CUDA graph can hold the calls), and the row softmax forward and backward as our own kernels
// (one warp per row, fixed reduction order, no atomics: the same bits every run).
//
// Precision: float32 runs CUBLAS_COMPUTE_32F in the default math mode, full fp32 as Linear
// (PyTorch leaves TF32 off for matmuls); bfloat16/float16 run on tensor cores with float32
// accumulation. The scores S and their gradient dP are float32 scratch; P, the dropped P and dS
// are rounded to the storage type, the GEMMs' operand type (as PyTorch's math SDPA in bf16).
//
// cuBLAS is column-major: a row-major (r, c) matrix with row stride ld is the column-major
// (c, r) matrix with leading dimension ld, so each row-major C = A B is issued as C^T = B^T A^T.
#include <cmath>

#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/transformer/attention_kernels.h"

namespace minidl::kernels {
namespace {

int checked_int(int64_t v, const char* what) {
  MINIDL_CHECK(v <= INT32_MAX, "attention on CUDA: ", what, " = ", v, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::Float32 ? CUDA_R_32F : t == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_16F;
}

// Where one operand of pair b = n * heads + h starts: base + n * stride_n + h * stride_h (bytes).
struct Operand {
  const char* base;
  int64_t stride_n, stride_h;
};
constexpr int kMaxOperands = 10;
struct Operands {
  Operand op[kMaxOperands];
};

__global__ void fill_pointers_kernel(Operands ops, int count, int64_t pairs, int64_t heads, const char** out) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= pairs) return;
  const int64_t n = b / heads, h = b % heads;
  for (int i = 0; i < count; ++i) out[i * pairs + b] = ops.op[i].base + n * ops.op[i].stride_n + h * ops.op[i].stride_h;
}

// The pointer arrays of one call (byte addresses): array i is at arrays + i * pairs.
class PointerArrays {
 public:
  PointerArrays(const AttentionShape& s, const Operands& ops, int count)
      : pairs_(s.batch * s.heads), memory_(allocate(sizeof(const char*) * count * pairs_, Device::cuda())) {
    constexpr int kBlock = 256;
    fill_pointers_kernel<<<static_cast<unsigned>(cuda::ceil_div(pairs_, kBlock)), kBlock, 0, cuda::stream()>>>(
        ops, count, pairs_, s.heads, static_cast<const char**>(memory_.get()));
    MINIDL_LAUNCH_CHECK();
  }
  const char* const* operator[](int i) const { return static_cast<const char* const*>(memory_.get()) + i * pairs_; }

 private:
  int64_t pairs_;
  std::shared_ptr<void> memory_;
};

// C_b (m x n, column-major, ldc) = alpha * op(A_b) op(B_b) for every pair b, A and B of `ab`,
// C of `c`, float32 accumulation.
void gemm(DType ab, DType c, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, float alpha,
          const char* const* a, int64_t lda, const char* const* b, int64_t ldb, const char* const* out, int64_t ldc,
          int64_t batch) {
  const float zero = 0.f;
  cublasHandle_t h = cuda::cublas();
  // cuBLAS takes the pointer arrays untyped, C's as writable: they convert here and nowhere else.
  const auto untyped = [](const char* const* p) { return reinterpret_cast<const void* const*>(p); };
  MINIDL_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MINIDL_CUDA_CHECK(cublasGemmBatchedEx(h, ta, tb, checked_int(m, "m"), checked_int(n, "n"), checked_int(k, "k"),
                                        &alpha, untyped(a), cuda_type(ab), checked_int(lda, "lda"), untyped(b),
                                        cuda_type(ab), checked_int(ldb, "ldb"), &zero,
                                        const_cast<void* const*>(untyped(out)), cuda_type(c), checked_int(ldc, "ldc"),
                                        checked_int(batch, "batch"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

constexpr int kSoftmaxBlock = 256;
constexpr int kWarpsPerBlock = kSoftmaxBlock / 32;

// P = softmax(S) by rows (S float32, scaled already), and Pd = P * dropout factor when drop.
// One warp per row; each lane strides through the row, the warp reduces by butterfly. Causal:
// row r is query r % cols, whose keys past it get P = 0 (the GEMM wrote scores there too).
template <class T>
__global__ void softmax_forward_kernel(const float* __restrict__ s, T* __restrict__ p, T* __restrict__ pd,
                                       int64_t rows, int64_t cols, bool causal, bool drop, DropoutDraw draw,
                                       const int64_t* __restrict__ step) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t step_now = drop ? *step : 0;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32; row < rows; row += warps) {
    const float* srow = s + row * cols;
    const int64_t seen = causal ? row % cols + 1 : cols;
    float m = -INFINITY;
    for (int64_t j = lane; j < seen; j += 32) m = fmaxf(m, srow[j]);
    m = warp_max(m);
    float sum = 0.f;
    for (int64_t j = lane; j < seen; j += 32) sum += expf(srow[j] - m);
    const float inv = 1.f / cuda::warp_sum(sum);
    for (int64_t j = lane; j < cols; j += 32) {
      const int64_t e = row * cols + j;
      const float v = j < seen ? expf(srow[j] - m) * inv : 0.f;
      p[e] = from_float<T>(v);
      if (drop) pd[e] = from_float<T>(v * dropout_factor(draw, step_now, e));
    }
  }
}

// dS = P * (dP - sum_j P_j dP_j) by rows, dP = dPd * dropout factor (the gradient reaching P
// through the dropped copy).
template <class T>
__global__ void softmax_backward_kernel(const float* __restrict__ dpd, const T* __restrict__ p, T* __restrict__ ds,
                                        int64_t rows, int64_t cols, bool drop, DropoutDraw draw,
                                        const int64_t* __restrict__ step) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t step_now = drop ? *step : 0;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32; row < rows; row += warps) {
    float dot = 0.f;
    for (int64_t j = lane; j < cols; j += 32) {
      const int64_t e = row * cols + j;
      const float g = drop ? dpd[e] * dropout_factor(draw, step_now, e) : dpd[e];
      dot += to_float(p[e]) * g;
    }
    dot = cuda::warp_sum(dot);
    for (int64_t j = lane; j < cols; j += 32) {
      const int64_t e = row * cols + j;
      const float g = drop ? dpd[e] * dropout_factor(draw, step_now, e) : dpd[e];
      const float pe = to_float(p[e]);
      ds[e] = from_float<T>(pe * (g - dot));
    }
  }
}

int softmax_grid(int64_t rows) { return cuda::grid_blocks(cuda::ceil_div(rows, kWarpsPerBlock), kSoftmaxBlock); }

float attention_scale(const AttentionShape& s) { return 1.f / std::sqrt(static_cast<float>(s.head_dim)); }

// The strides (bytes) of the operands: inside qkv (q at column 0, k at D, v at 2D), inside an
// (N, T, D) activation, and inside an (N, H, T, T) score-sized buffer.
struct Layout {
  int64_t es, T, D, H, hd;
  Layout(DType t, const AttentionShape& s)
      : es(static_cast<int64_t>(dtype_size(t))), T(s.tokens), D(s.width()), H(s.heads), hd(s.head_dim) {}
  template <class P>
  Operand packed(const P* qkv, int which) const {
    return {reinterpret_cast<const char*>(qkv) + which * D * es, T * 3 * D * es, hd * es};
  }
  template <class P>
  Operand act(const P* x) const {
    return {reinterpret_cast<const char*>(x), T * D * es, hd * es};
  }
  template <class P>  // P: float (S, dPd) or the storage type (P, Pd, dS)
  Operand scores(const P* x) const {
    constexpr int64_t elem = sizeof(P);
    return {reinterpret_cast<const char*>(x), H * T * T * elem, T * T * elem};
  }
};

}  // namespace

template <class E>
void attention_forward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const E* qkv,
                            E* probs, E* dropped, E* out) {
  constexpr DType dtype = DTypeOf<E>::value;
  const int64_t pairs = s.batch * s.heads, T = s.tokens, D = s.width();
  if (pairs == 0 || T == 0) return;
  const Layout l(dtype, s);
  auto scores = allocate(sizeof(float) * pairs * T * T, Device::cuda());
  const E* pv = drop ? dropped : probs;
  enum { Q, K, V, O, S, PV, kCount };
  Operands ops{};
  ops.op[Q] = l.packed(qkv, 0);
  ops.op[K] = l.packed(qkv, 1);
  ops.op[V] = l.packed(qkv, 2);
  ops.op[O] = l.act(out);
  ops.op[S] = l.scores(static_cast<const float*>(scores.get()));
  ops.op[PV] = l.scores(pv);
  const PointerArrays ptr(s, ops, kCount);
  // S^T = K Q^T (T x T per pair), scaled.
  gemm(dtype, DType::Float32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, s.head_dim, attention_scale(s), ptr[K], 3 * D, ptr[Q],
       3 * D, ptr[S], T, pairs);
  softmax_forward_kernel<E><<<softmax_grid(pairs * T), kSoftmaxBlock, 0, cuda::stream()>>>(
      static_cast<const float*>(scores.get()), probs, dropped, pairs * T, T, s.causal, drop != nullptr,
      drop ? *drop : DropoutDraw{}, step);
  MINIDL_LAUNCH_CHECK();
  // O^T = V^T Pd^T (hd x T per pair), written into the pair's columns of out.
  gemm(dtype, dtype, CUBLAS_OP_N, CUBLAS_OP_N, s.head_dim, T, T, 1.f, ptr[V], 3 * D, ptr[PV], T, ptr[O], D, pairs);
}

template <class E>
void attention_backward_cuda(const AttentionShape& s, const DropoutDraw* drop, const int64_t* step, const E* qkv,
                             const E* probs, const E* dropped, const E* dout, E* dqkv) {
  constexpr DType dtype = DTypeOf<E>::value;
  const int64_t pairs = s.batch * s.heads, T = s.tokens, D = s.width();
  if (pairs == 0 || T == 0) return;
  const Layout l(dtype, s);
  auto dpd = allocate(sizeof(float) * pairs * T * T, Device::cuda());
  auto ds = allocate(static_cast<size_t>(l.es * pairs * T * T), Device::cuda());
  enum { Q, K, V, DQ, DK, DV, DO, PV, DPD, DS, kCount };
  Operands ops{};
  ops.op[Q] = l.packed(qkv, 0);
  ops.op[K] = l.packed(qkv, 1);
  ops.op[V] = l.packed(qkv, 2);
  ops.op[DQ] = l.packed(dqkv, 0);
  ops.op[DK] = l.packed(dqkv, 1);
  ops.op[DV] = l.packed(dqkv, 2);
  ops.op[DO] = l.act(dout);
  ops.op[PV] = l.scores(drop ? dropped : probs);
  ops.op[DPD] = l.scores(static_cast<const float*>(dpd.get()));
  ops.op[DS] = l.scores(static_cast<const E*>(ds.get()));
  const PointerArrays ptr(s, ops, kCount);
  const int64_t hd = s.head_dim;
  const float scale = attention_scale(s);
  // dPd^T = V dO^T (T x T per pair).
  gemm(dtype, DType::Float32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, 1.f, ptr[V], 3 * D, ptr[DO], D, ptr[DPD], T, pairs);
  // dV^T = dO^T Pd (hd x T).
  gemm(dtype, dtype, CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, 1.f, ptr[DO], D, ptr[PV], T, ptr[DV], 3 * D, pairs);
  softmax_backward_kernel<E><<<softmax_grid(pairs * T), kSoftmaxBlock, 0, cuda::stream()>>>(
      static_cast<const float*>(dpd.get()), probs, static_cast<E*>(ds.get()), pairs * T, T, drop != nullptr,
      drop ? *drop : DropoutDraw{}, step);
  MINIDL_LAUNCH_CHECK();
  // dQ^T = scale K^T dS^T, dK^T = scale Q^T dS (hd x T each).
  gemm(dtype, dtype, CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, scale, ptr[K], 3 * D, ptr[DS], T, ptr[DQ], 3 * D, pairs);
  gemm(dtype, dtype, CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, scale, ptr[Q], 3 * D, ptr[DS], T, ptr[DK], 3 * D, pairs);
}

#define MINIDL_ATTENTION_CUDA(E)                                                                           \
  template void attention_forward_cuda<E>(const AttentionShape&, const DropoutDraw*, const int64_t*, const E*, E*, \
                                          E*, E*);                                                                 \
  template void attention_backward_cuda<E>(const AttentionShape&, const DropoutDraw*, const int64_t*, const E*,    \
                                           const E*, const E*, const E*, E*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_ATTENTION_CUDA)

}  // namespace minidl::kernels
