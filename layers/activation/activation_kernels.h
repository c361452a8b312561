// Launchers of the activation kernels (activation_cpu.cpp, activation_cuda.cu): plain C++, no
// Module and no JSON, so nvcc compiles only this with the kernels.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl {

enum class GeluApproximate { None, Tanh };  // "none": exact (erf) form; "tanh": the tanh formula

namespace kernels {
// Raw launchers over n contiguous floats (CPU) or elements of `dtype` (CUDA: float32, bfloat16
// or float16, float32 arithmetic). Backward: dx from dy and the saved tensor (ReLU's output y,
// GELU's input x).
void relu_forward_cpu(const float* x, float* y, int64_t n);
void relu_backward_cpu(const float* dy, const float* y, float* dx, int64_t n);
void gelu_forward_cpu(const float* x, float* y, int64_t n, GeluApproximate approximate);
void gelu_backward_cpu(const float* dy, const float* x, float* dx, int64_t n, GeluApproximate approximate);
void relu_forward_cuda(DType dtype, const void* x, void* y, int64_t n);
void relu_backward_cuda(DType dtype, const void* dy, const void* y, void* dx, int64_t n);
void gelu_forward_cuda(DType dtype, const void* x, void* y, int64_t n, GeluApproximate approximate);
void gelu_backward_cuda(DType dtype, const void* dy, const void* x, void* dx, int64_t n, GeluApproximate approximate);
}  // namespace kernels

}  // namespace minidl
