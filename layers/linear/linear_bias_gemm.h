// The half-precision Linear forward with its bias in the GEMM's epilogue (cuBLASLt
// CUBLASLT_EPILOGUE_BIAS, layers/linear/linear_bias_gemm_cuda.cu). Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl::kernels {

// y (rows, out) = x (rows, in) w^T + b, every operand of the half `dtype`: the bias added to the
// float32 accumulator and each output rounded once. False (nothing launched) where cuBLASLt offers
// no algorithm for the problem (sizes or alignment); the caller then takes another path.
bool linear_forward_bias_gemm_cuda(DType dtype, int64_t rows, int64_t in, int64_t out, const void* x, const void* w,
                                   const void* b, void* y);

}  // namespace minidl::kernels
