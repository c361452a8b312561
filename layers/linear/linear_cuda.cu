// Linear on the GPU: the three GEMMs through cuBLAS SGEMM in full fp32 (GemmEx on tensor cores
// for bf16/fp16 operands, float32 accumulation), the bias add and the bias gradient as our own
// kernels.
//
// Full fp32: PyTorch leaves TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32 = False),
// so the handle's math mode is set to CUBLAS_DEFAULT_MATH before each call (the handle is shared;
// this keeps another user's mode from leaking into Linear). cuBLAS is deterministic on one stream.
//
// cuBLAS is column-major: a row-major (r, c) matrix is its column-major (c, r) transpose, so
// every row-major product C = A * B is issued as C^T = B^T * A^T with the operands swapped.
#include <algorithm>
#include <type_traits>

#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/dispatch.h"
#include "core/half_types.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/linear/linear_bias_gemm.h"
#include "layers/linear/linear_kernels.h"

namespace minidl::kernels {
namespace {

int checked_int(int64_t v, const char* what) {
  MINIDL_CHECK(v <= INT32_MAX, "linear on CUDA: ", what, " = ", v, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}

// C (m x n, col-major, ldc = m) = op(A) * op(B) with beta = 0.
void sgemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const float* a,
           int64_t lda, const float* b, int64_t ldb, float* c) {
  const float one = 1.f, zero = 0.f;
  cublasHandle_t h = cuda::cublas();
  MINIDL_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MINIDL_CUDA_CHECK(cublasSgemm(h, ta, tb, checked_int(m, "m"), checked_int(n, "n"), checked_int(k, "k"), &one, a,
                                checked_int(lda, "lda"), b, checked_int(ldb, "ldb"), &zero, c, checked_int(m, "ldc")));
}

template <class T>
cudaDataType_t cuda_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>);
  return std::is_same_v<T, float> ? CUDA_R_32F : std::is_same_v<T, bf16> ? CUDA_R_16BF : CUDA_R_16F;
}

// The same product with A and B of the half type T and C of type C (T, or float where the bias is
// still to be added), float32 accumulation (CUBLAS_COMPUTE_32F: no reduced-precision reductions,
// whatever the type). The default math mode lets GemmEx take the tensor cores.
//
// Why the bias is not the GEMM's addend (beta = 1 over a broadcast bias in the half output): with
// beta != 0 cuBLAS may split K and add the parts up in the output, so a half C rounds every
// partial sum; a sum that cancels to near zero then loses all its digits (measured on an H100: 0
// for -0.0019 in a 300 x 512 x 256 product).
template <class T, class C>
void gemm_half(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, C* c) {
  const float one = 1.f, zero = 0.f;
  cublasHandle_t h = cuda::cublas();
  MINIDL_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MINIDL_CUDA_CHECK(cublasGemmEx(h, ta, tb, checked_int(m, "m"), checked_int(n, "n"), checked_int(k, "k"), &one, a,
                                 cuda_type<T>(), checked_int(lda, "lda"), b, cuda_type<T>(), checked_int(ldb, "ldb"),
                                 &zero, c, cuda_type<C>(), checked_int(m, "ldc"), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
}

// y (rows, out) = round(p + b): the float32 product plus the bias, rounded once to the storage
// type, the bits of a float32 bias add followed by a cast in one pass. A block per row at a time
// (grid-stride over rows), its threads across the row: no division per element.
template <class T>
__global__ void add_bias_and_round_kernel(const float* __restrict__ p, const T* __restrict__ b, int64_t rows,
                                          int64_t out, T* __restrict__ y) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int64_t c = threadIdx.x; c < out; c += blockDim.x)
      y[r * out + c] = from_float<T>(p[r * out + c] + to_float(b[c]));
}

template <class T>
void add_bias_and_round(const float* p, const T* b, int64_t rows, int64_t out, T* y) {
  constexpr int kBlock = 256;
  add_bias_and_round_kernel<T><<<cuda::grid_blocks(rows, kBlock), kBlock, 0, cuda::stream()>>>(p, b, rows, out, y);
  MINIDL_LAUNCH_CHECK();
}

// Bias gradient, pass 1: column sums of dy (rows, out). A block is 32 columns wide (a warp reads
// 32 consecutive floats of a row) and kRowsPerBlock threads tall; block (cx, s) covers rows slice s,
// its thread rows stride through it, then the block adds its thread rows in a fixed order and
// writes one partial per column.
constexpr int kRowsPerBlock = 8;

template <class T>
__global__ void bias_grad_partials_kernel(const T* __restrict__ dy, int64_t rows, int64_t out, int64_t slices,
                                          float* __restrict__ partials) {
  const int64_t col = blockIdx.x * 32 + threadIdx.x, s = blockIdx.y;
  const int64_t per = (rows + slices - 1) / slices;
  const int64_t begin = s * per, end = min(rows, begin + per);
  float acc = 0.f;
  if (col < out)
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowsPerBlock) acc += to_float(dy[r * out + col]);
  __shared__ float sums[kRowsPerBlock][33];
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < out) {
    float total = 0.f;
    for (int i = 0; i < kRowsPerBlock; ++i) total += sums[i][threadIdx.x];
    partials[s * out + col] = total;
  }
}

// db = the column sums of dy (rows, out) of storage type T, float32 partials over fixed row
// slices, then a fixed-order finalize (cuda::sum_partials_by_column).
template <class T>
void bias_grad(int64_t rows, int64_t out, const T* dy, float* db) {
  const int64_t col_blocks = (out + 31) / 32;
  // Fill every resident slot once, but give each slice at least a block's height of rows.
  const int64_t by_device = std::max<int64_t>(1, cuda::resident_blocks(32 * kRowsPerBlock) / col_blocks);
  const int64_t by_size = std::max<int64_t>(1, (rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const int64_t slices = std::min<int64_t>({by_device, by_size, 65535});
  auto partials = allocate(sizeof(float) * slices * out, Device::cuda());
  float* part = static_cast<float*>(partials.get());
  bias_grad_partials_kernel<T><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(slices)),
                                 dim3(32, kRowsPerBlock), 0, cuda::stream()>>>(dy, rows, out, slices, part);
  MINIDL_LAUNCH_CHECK();
  cuda::sum_partials_by_column(part, slices, out, db);
}

// A float32 buffer of n elements on the device, for a product or a sum still to be rounded.
std::shared_ptr<void> float_scratch(int64_t n) { return allocate(sizeof(float) * n, Device::cuda()); }

}  // namespace

void linear_forward_cuda(int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                         float* y) {
  if (rows == 0) return;
  // y^T (out x rows) = W (out x in) * x^T: w is W^T column-major (ld in), x is x^T (ld in).
  sgemm(CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, w, in, x, in, y);
  if (b) cuda::add_channel_bias(y, b, rows, out, 1);
}

void linear_backward_data_cuda(int64_t rows, int64_t in, int64_t out, const float* dy, const float* w, float* dx) {
  if (rows == 0) return;
  // dx^T (in x rows) = W^T (in x out) * dy^T: w is W^T column-major (ld in), dy is dy^T (ld out).
  sgemm(CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, w, in, dy, out, dx);
}

void linear_backward_weight_cuda(int64_t rows, int64_t in, int64_t out, const float* x, const float* dy, float* dw) {
  if (rows == 0) {
    MINIDL_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * in * out, cuda::stream()));
    return;
  }
  // dW^T (in x out) = x^T (in x rows) * dy (rows x out): x is x^T (ld in), dy is dy^T (ld out).
  sgemm(CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, x, in, dy, out, dw);
}

void linear_backward_bias_cuda(int64_t rows, int64_t out, const float* dy, float* db) { bias_grad(rows, out, dy, db); }

// The half launchers: the float32 linear's operand order (see above), in the half type.
template <class T>
void linear_forward_cuda(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y) {
  if (rows == 0) return;
  if (!b) {
    gemm_half(CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, w, in, x, in, y);
    return;
  }
  // The bias joins the float32 product and the sum is rounded once: in the GEMM's epilogue where
  // cuBLASLt has an algorithm for the shape, else in one pass over a float32 product.
  if (linear_forward_bias_gemm_cuda(rows, in, out, x, w, b, y)) return;
  auto product = float_scratch(rows * out);
  float* p = static_cast<float*>(product.get());
  gemm_half(CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, w, in, x, in, p);
  add_bias_and_round(p, b, rows, out, y);
}

template <class T>
void linear_backward_data_cuda(int64_t rows, int64_t in, int64_t out, const T* dy, const T* w, T* dx) {
  if (rows == 0) return;
  gemm_half(CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, w, in, dy, out, dx);
}

template <class T>
void linear_backward_weight_cuda(int64_t rows, int64_t in, int64_t out, const T* x, const T* dy, T* dw) {
  if (rows == 0) {
    MINIDL_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(T) * in * out, cuda::stream()));
    return;
  }
  gemm_half(CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, x, in, dy, out, dw);
}

template <class T>
void linear_backward_bias_cuda(int64_t rows, int64_t out, const T* dy, T* db) {
  auto sums = float_scratch(out);
  float* s = static_cast<float*>(sums.get());
  bias_grad(rows, out, dy, s);
  cast_cuda(s, DType::Float32, db, DTypeOf<T>::value, out);
}

#define MINIDL_LINEAR_HALF_CUDA(T)                                                                      \
  template void linear_forward_cuda<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*);    \
  template void linear_backward_data_cuda<T>(int64_t, int64_t, int64_t, const T*, const T*, T*);        \
  template void linear_backward_weight_cuda<T>(int64_t, int64_t, int64_t, const T*, const T*, T*);      \
  template void linear_backward_bias_cuda<T>(int64_t, int64_t, const T*, T*);
MINIDL_FOR_HALF_TYPES(MINIDL_LINEAR_HALF_CUDA)

}  // namespace minidl::kernels
