// Raw Linear launchers: y (rows, out) = x (rows, in) * w^T + b, w (out, in), all contiguous
// row-major float32. CPU: Eigen GEMMs over fixed row/column blocks (linear_cpu.cpp); CUDA: cuBLAS
// SGEMM in full fp32 plus our own bias kernels (linear_cuda.cu). Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl::kernels {

// b may be null.
void linear_forward_cpu(int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                        float* y);
// dx = dy * w
void linear_backward_data_cpu(int64_t rows, int64_t in, int64_t out, const float* dy, const float* w, float* dx);
// dw = dy^T * x
void linear_backward_weight_cpu(int64_t rows, int64_t in, int64_t out, const float* x, const float* dy, float* dw);
// db[j] = sum over rows of dy[:, j]
void linear_backward_bias_cpu(int64_t rows, int64_t out, const float* dy, float* db);
// c (m, n) = a (m, k) * b (k, n), row-major: a plain product over the same fixed row blocks, so
// its bits do not depend on the thread count either (Muon's Newton-Schulz iterations on the CPU).
void matmul_cpu(int64_t m, int64_t k, int64_t n, const float* a, const float* b, float* c);

void linear_forward_cuda(int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                         float* y);
void linear_backward_data_cuda(int64_t rows, int64_t in, int64_t out, const float* dy, const float* w, float* dx);
void linear_backward_weight_cuda(int64_t rows, int64_t in, int64_t out, const float* x, const float* dy, float* dw);
// Deterministic two-pass column sum (per-block partials, then a fixed-order finalize; no atomics).
void linear_backward_bias_cuda(int64_t rows, int64_t out, const float* dy, float* db);

// The same on CUDA with every operand of T = bf16 or fp16 (the CPU runs half Linear
// storage-rounded instead): cuBLAS GemmEx on tensor cores with float32 accumulation, each output
// rounded once to the half type. The forward adds b (may be null) to the float32 product before
// that rounding (in cuBLASLt's epilogue where it can: linear_bias_gemm.h); the bias gradient sums
// dy in float32 as the float32 launcher does. Overloads of the float32 launchers, so an op calls
// one name for every floating T.
template <class T>
void linear_forward_cuda(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y);
template <class T>
void linear_backward_data_cuda(int64_t rows, int64_t in, int64_t out, const T* dy, const T* w, T* dx);
template <class T>
void linear_backward_weight_cuda(int64_t rows, int64_t in, int64_t out, const T* x, const T* dy, T* dw);
template <class T> void linear_backward_bias_cuda(int64_t rows, int64_t out, const T* dy, T* db);

}  // namespace minidl::kernels
