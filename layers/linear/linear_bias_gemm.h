// The half-precision Linear forward with its bias in the GEMM's epilogue (cuBLASLt
// CUBLASLT_EPILOGUE_BIAS, layers/linear/linear_bias_gemm_cuda.cu). Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl::kernels {

// y (rows, out) = x (rows, in) w^T + b, every operand of the half type T (bf16 or fp16): the bias
// added to the float32 accumulator and each output rounded once. False (nothing launched) where
// cuBLASLt offers no algorithm for the problem (sizes or alignment); the caller then takes another
// path.
template <class T>
bool linear_forward_bias_gemm_cuda(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y);

}  // namespace minidl::kernels
