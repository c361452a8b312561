// The few tensor ops the core itself needs (gradient sums, residual adds, scaling),
// each with a CPU and a CUDA implementation (core/tensor_ops.cpp, core/cuda/tensor_ops.cu).
#pragma once
#include "core/tensor.h"

namespace minidl {

Tensor add(const Tensor& a, const Tensor& b);      // a + b, same shape; differentiable
Tensor mul(const Tensor& x, float s);              // x * s; differentiable
void axpy_(Tensor& dst, float alpha, const Tensor& src);  // dst += alpha * src; not recorded

namespace kernels {
// Raw launchers used by the ops above (n contiguous elements: float32 on the CPU; float32,
// bfloat16 or float16 of `dtype` on CUDA, computed in float32).
void fill_cpu(float* y, float v, int64_t n);
void axpby_cpu(float* y, float a, const float* x, float b, const float* z, int64_t n);  // y = a*x + b*z
void fill_cuda(float* y, float v, int64_t n);
void axpby_cuda(DType dtype, void* y, float a, const void* x, float b, const void* z, int64_t n);
// y = f + h with h of the half type `h_dtype`, widened to float32 as it is read.
void add_float_and_half_cuda(float* y, const float* f, DType h_dtype, const void* h, int64_t n);
}  // namespace kernels

}  // namespace minidl
