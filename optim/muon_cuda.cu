// CUDA Muon kernels. Newton-Schulz runs as cuBLAS SGEMMs in full fp32 (CUBLAS_DEFAULT_MATH, as
// Linear does: TF32 would change the iteration's rounding), or in bf16 on the tensor cores: GemmEx
// of bf16 iterates into a float32 product (beta = 0: with a bf16 C cuBLAS may split K and round
// every partial sum there, see linear_cuda.cu), then one elementwise pass adds the other term in
// float32 and rounds once to bf16. The Frobenius norms are summed in double in a fixed order
// (sum_squares) and applied on the device, so nothing syncs with the host and the whole update sits
// in a CUDA graph. cuBLAS is deterministic on one stream.
//
// Why bf16: the iteration's GEMMs have small outputs (a 256 x 2304 filter bank gives a 256 x 256
// X X^T, a few tiles of output for 302 MFLOP), so fp32 SGEMM leaves most SMs idle; airbench's
// Muon runs them in bf16, where each tile is an order of magnitude faster (docs/perf/airbench.md).
//
// Layout: a row-major (r, k) matrix X is the column-major (k, r) matrix X^T, so with Xc = X^T:
//   wide (r <= k):  A = X X^T = Xc^T Xc (r x r),   X' = a X + B X  <=>  Xc' = a Xc + Xc B
//   tall (r > k):   A = X^T X = Xc Xc^T (k x k),   X' = a X + X B  <=>  Xc' = a Xc + B Xc
// (A and B = b A + c A A are symmetric, so their layout does not matter).
#include <algorithm>
#include <memory>

#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/half_types.h"
#include "optim/muon_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;

// A set skip flag ends every thread before it writes (here and in apply_kernel); the
// Newton-Schulz iterate of a skipped step is then formed from unwritten scratch and dropped.
__global__ void momentum_kernel(const float* g, float* buf, float* u, int64_t n, float m, int nesterov,
                                const float* skip) {
  if (skip && *skip != 0.f) return;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    muon_momentum(g, buf, u, m, nesterov, i);
}

// The sum of x[i]^2 in double, in two launches: block b sums its chunk of kSumChunk elements (each
// thread a strided slice in index order, then a fixed tree) into partials[b], then one block sums
// the partials by the same tree. The chunks depend on n only, so the order, and the bits, are the
// same on every GPU. (One block for the whole tensor took 134 us for a 256 x 2304 filter bank on
// an H100, most of Muon's time per step: one SM's bandwidth.)
constexpr int64_t kSumChunk = 16384;

__device__ double block_sum(double s, double* part) {
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

__global__ void sum_squares_partial_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partials) {
  __shared__ double part[kReduceThreads];
  const int64_t begin = blockIdx.x * kSumChunk, end = min(n, begin + kSumChunk);
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  const double total = block_sum(s, part);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_partials_kernel(const double* __restrict__ partials, int64_t count, double* __restrict__ out) {
  __shared__ double part[kReduceThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  const double total = block_sum(s, part);
  if (threadIdx.x == 0) out[0] = total;
}

// out[0] = sum of x[i]^2; `partials` holds sum_squares_partials(n) doubles.
int64_t sum_squares_partials(int64_t n) { return std::max<int64_t>(1, (n + kSumChunk - 1) / kSumChunk); }
void sum_squares(const float* x, int64_t n, double* partials, double* out) {
  const int64_t blocks = sum_squares_partials(n);
  sum_squares_partial_kernel<<<static_cast<unsigned>(blocks), kReduceThreads, 0, cuda::stream()>>>(x, n, partials);
  MINIDL_LAUNCH_CHECK();
  sum_partials_kernel<<<1, kReduceThreads, 0, cuda::stream()>>>(partials, blocks, out);
  MINIDL_LAUNCH_CHECK();
}

// out = x / (sqrt(ss) + eps), the scale rounded to float once, as on the CPU; stored as T (float,
// or bf16: the float32 value rounded once).
template <class T>
__global__ void normalize_kernel(const float* __restrict__ x, T* __restrict__ out, int64_t n,
                                 const double* __restrict__ ss, float eps) {
  const float scale = static_cast<float>(1.0 / (sqrt(ss[0]) + eps));
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(x[i] * scale);
}

// p = p * (target / sqrt(ss)) - lr * x (no rescale when normalize is 0).
__global__ void apply_kernel(float* __restrict__ p, const float* __restrict__ x, int64_t n,
                             const double* __restrict__ ss, float target, int normalize, const float* __restrict__ lr_ptr,
                             const float* __restrict__ skip) {
  if (skip && *skip != 0.f) return;
  const float scale = normalize ? static_cast<float>(target / sqrt(ss[0])) : 1.f;
  const float lr = *lr_ptr;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = fmaf(-lr, x[i], p[i] * scale);
}

// out = bf16(alpha * p + beta * y): a float32 product plus the other term, rounded once. The
// multiplies and the add are kept apart (no fused multiply-add), as the CPU computes them.
// out may alias y.
__global__ void combine_bf16_kernel(const float* __restrict__ p, float alpha, const bf16* y, float beta, bf16* out,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = to_bf16(y ? __fadd_rn(__fmul_rn(alpha, p[i]), __fmul_rn(beta, to_float(y[i]))) : __fmul_rn(alpha, p[i]));
}

int grid_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads,
                                                                cuda::resident_blocks(kThreads))));
}

int as_int(int64_t v) {
  MINIDL_CHECK(v <= INT32_MAX, "Muon on CUDA: a dimension of ", v, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}

// C (m x n, col-major, ld m) = alpha op(A) op(B) + beta C, full fp32.
void sgemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c) {
  cublasHandle_t h = cuda::cublas();
  MINIDL_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MINIDL_CUDA_CHECK(cublasSgemm(h, ta, tb, as_int(m), as_int(n), as_int(k), &alpha, a, as_int(lda), b, as_int(ldb),
                                &beta, c, as_int(m)));
}

// C (m x n, col-major, ld m, float32) = op(A) op(B) with bf16 A and B, float32 accumulation on
// the tensor cores.
void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const bf16* a,
               int64_t lda, const bf16* b, int64_t ldb, float* c) {
  const float one = 1.f, zero = 0.f;
  cublasHandle_t h = cuda::cublas();
  MINIDL_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MINIDL_CUDA_CHECK(cublasGemmEx(h, ta, tb, as_int(m), as_int(n), as_int(k), &one, a, CUDA_R_16BF, as_int(lda), b,
                                 CUDA_R_16BF, as_int(ldb), &zero, c, CUDA_R_32F, as_int(m), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
}

// x = g / (||g||_F + eps) as T, the norm summed in scratch of its own.
template <class T>
void normalize(const float* g, T* x, int64_t n, float eps) {
  std::shared_ptr<void> ss_buf = allocate((1 + sum_squares_partials(n)) * sizeof(double), Device::cuda());
  double* ss = static_cast<double*>(ss_buf.get());
  sum_squares(g, n, ss + 1, ss);
  normalize_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(g, x, n, ss, eps);
  MINIDL_LAUNCH_CHECK();
}

void combine(const float* p, float alpha, const bf16* y, float beta, bf16* out, int64_t n) {
  combine_bf16_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(p, alpha, y, beta, out, n);
  MINIDL_LAUNCH_CHECK();
}

// The bf16 iteration (see the top of the file): the layout is the float32 one's.
void newton_schulz_bf16_cuda(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  const int64_t n = rows * cols, s = std::min(rows, cols);
  const bool tall = rows > cols;
  // Scratch: [product (float32, n or s * s)], [X | A | B (bf16)].
  std::shared_ptr<void> product_buf = allocate(static_cast<size_t>(std::max(n, s * s)) * sizeof(float), Device::cuda());
  std::shared_ptr<void> iterates = allocate(static_cast<size_t>(n + 2 * s * s) * sizeof(bf16), Device::cuda());
  float* P = static_cast<float*>(product_buf.get());
  bf16* x = static_cast<bf16*>(iterates.get());
  bf16* A = x + n;
  bf16* B = A + s * s;
  normalize(g, x, n, ns.eps);
  const int64_t k = cols, r = rows;  // Xc is (k x r) column-major, ld k
  for (int step = 0; step < ns.steps; ++step) {
    if (!tall)
      gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, r, r, k, x, k, x, k, P);
    else
      gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, k, k, r, x, k, x, k, P);
    combine(P, 1.f, nullptr, 0.f, A, s * s);
    gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, A, s, A, s, P);
    combine(P, ns.c, A, ns.b, B, s * s);
    if (!tall)
      gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, k, r, r, x, k, B, r, P);
    else
      gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, k, r, k, B, k, x, k, P);
    combine(P, 1.f, x, ns.a, x, n);
  }
  cast_cuda(x, DType::BFloat16, out, DType::Float32, n);
}

void copy_async(float* dst, const float* src, int64_t n) {
  MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                    cuda::stream()));
}

}  // namespace

void muon_momentum_cuda(const float* g, float* buf, float* u, int64_t n, float momentum, int nesterov,
                        const float* skip) {
  momentum_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(g, buf, u, n, momentum, nesterov, skip);
  MINIDL_LAUNCH_CHECK();
}

void newton_schulz_cuda(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  if (ns.bf16) return newton_schulz_bf16_cuda(g, out, rows, cols, ns);
  const int64_t n = rows * cols, s = std::min(rows, cols);
  const bool tall = rows > cols;
  // Scratch from the stream-ordered caching allocator: [A | B | X'].
  const size_t floats = static_cast<size_t>(2 * s * s + n);
  std::shared_ptr<void> scratch = allocate(floats * sizeof(float), Device::cuda());
  float* A = static_cast<float*>(scratch.get());
  float* B = A + s * s;
  float* x = out;
  float* next = B + s * s;
  normalize(g, x, n, ns.eps);
  const int64_t k = cols, r = rows;  // Xc is (k x r) column-major, ld k
  for (int step = 0; step < ns.steps; ++step) {
    if (!tall)
      sgemm(CUBLAS_OP_T, CUBLAS_OP_N, r, r, k, 1.f, x, k, x, k, 0.f, A);
    else
      sgemm(CUBLAS_OP_N, CUBLAS_OP_T, k, k, r, 1.f, x, k, x, k, 0.f, A);
    copy_async(B, A, s * s);
    sgemm(CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, ns.c, A, s, A, s, ns.b, B);
    copy_async(next, x, n);
    if (!tall)
      sgemm(CUBLAS_OP_N, CUBLAS_OP_N, k, r, r, 1.f, x, k, B, r, ns.a, next);
    else
      sgemm(CUBLAS_OP_N, CUBLAS_OP_N, k, r, k, 1.f, B, k, x, k, ns.a, next);
    std::swap(x, next);
  }
  if (x != out) copy_async(out, x, n);
}

void muon_apply_cuda(float* p, const float* x, int64_t n, float target_norm, int normalize, const float* lr,
                     const float* skip) {
  std::shared_ptr<void> ss_buf = allocate((1 + sum_squares_partials(n)) * sizeof(double), Device::cuda());
  double* ss = static_cast<double*>(ss_buf.get());
  if (normalize) sum_squares(p, n, ss + 1, ss);
  apply_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(p, x, n, ss, target_norm, normalize, lr, skip);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
