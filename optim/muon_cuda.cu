// CUDA Muon kernels. Newton-Schulz runs as cuBLAS SGEMMs in full fp32 (CUBLAS_DEFAULT_MATH, as
// Linear does: TF32 would change the iteration's rounding), with the Frobenius norms summed in
// double by one block in a fixed order and applied on the device, so nothing syncs with the host
// and the whole update could sit in a CUDA graph. cuBLAS is deterministic on one stream.
//
// Layout: a row-major (r, k) matrix X is the column-major (k, r) matrix X^T, so with Xc = X^T:
//   wide (r <= k):  A = X X^T = Xc^T Xc (r x r),   X' = a X + B X  <=>  Xc' = a Xc + Xc B
//   tall (r > k):   A = X^T X = Xc Xc^T (k x k),   X' = a X + X B  <=>  Xc' = a Xc + B Xc
// (A and B = b A + c A A are symmetric, so their layout does not matter).
#include <algorithm>
#include <memory>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
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

// out[0] = sum of x[i]^2 in double: each thread a strided slice in index order, then a fixed tree.
__global__ void sum_squares_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ out) {
  __shared__ double part[kReduceThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

// out = x / (sqrt(ss) + eps), the scale rounded to float once, as on the CPU.
__global__ void normalize_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n,
                                 const double* __restrict__ ss, float eps) {
  const float scale = static_cast<float>(1.0 / (sqrt(ss[0]) + eps));
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = x[i] * scale;
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
  const int64_t n = rows * cols, s = std::min(rows, cols);
  const bool tall = rows > cols;
  // Scratch from the stream-ordered caching allocator: [ss | A | B | X'].
  const size_t floats = static_cast<size_t>(2 * s * s + n);
  std::shared_ptr<void> ss_buf = allocate(sizeof(double), Device::cuda());
  std::shared_ptr<void> scratch = allocate(floats * sizeof(float), Device::cuda());
  double* ss = static_cast<double*>(ss_buf.get());
  float* A = static_cast<float*>(scratch.get());
  float* B = A + s * s;
  float* x = out;
  float* next = B + s * s;
  sum_squares_kernel<<<1, kReduceThreads, 0, cuda::stream()>>>(g, n, ss);
  MINIDL_LAUNCH_CHECK();
  normalize_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(g, x, n, ss, ns.eps);
  MINIDL_LAUNCH_CHECK();
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
  std::shared_ptr<void> ss_buf = allocate(sizeof(double), Device::cuda());
  double* ss = static_cast<double*>(ss_buf.get());
  if (normalize) {
    sum_squares_kernel<<<1, kReduceThreads, 0, cuda::stream()>>>(p, n, ss);
    MINIDL_LAUNCH_CHECK();
  }
  apply_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(p, x, n, ss, target_norm, normalize, lr, skip);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
