// Launchers of the pointwise activations SiLU, Hardswish and Sigmoid (pointwise_cpu.cpp,
// pointwise_cuda.cu), any Activation of activation_math.h: plain C++, no Module and no JSON.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "layers/activation/activation_math.h"

namespace minidl::kernels {
// Over n contiguous floats (CPU) or elements of T (CUDA: float, bf16 or fp16, float32
// arithmetic). Backward: dx from dy and `saved`, the forward's output where
// act::backward_reads_output(a) (Sigmoid), else its input.
void pointwise_forward_cpu(Activation a, const float* x, float* y, int64_t n);
void pointwise_backward_cpu(Activation a, const float* dy, const float* saved, float* dx, int64_t n);
template <class T>
void pointwise_forward_cuda(Activation a, const T* x, T* y, int64_t n);
template <class T>
void pointwise_backward_cuda(Activation a, const T* dy, const T* saved, T* dx, int64_t n);
}  // namespace minidl::kernels
