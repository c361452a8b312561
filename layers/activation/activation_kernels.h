// Launchers of the activation kernels (activation_cpu.cpp, activation_cuda.cu): plain C++, no
// Module and no JSON, so nvcc compiles only this with the kernels.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl {

enum class GeluApproximate { None, Tanh };  // "none": exact (erf) form; "tanh": the tanh formula

namespace kernels {
// n contiguous elements of T (float, bf16 or fp16), float32 arithmetic, each result rounded once
// to T; the CPU and CUDA launchers take the same arguments. Backward: dx from dy and the saved
// tensor (ReLU's output y, GELU's input x).
template <class T> void relu_forward_cpu(const T* x, T* y, int64_t n);
template <class T> void relu_backward_cpu(const T* dy, const T* y, T* dx, int64_t n);
template <class T> void gelu_forward_cpu(const T* x, T* y, int64_t n, GeluApproximate approximate);
template <class T> void gelu_backward_cpu(const T* dy, const T* x, T* dx, int64_t n, GeluApproximate approximate);
template <class T> void relu_forward_cuda(const T* x, T* y, int64_t n);
template <class T> void relu_backward_cuda(const T* dy, const T* y, T* dx, int64_t n);
template <class T> void gelu_forward_cuda(const T* x, T* y, int64_t n, GeluApproximate approximate);
template <class T> void gelu_backward_cuda(const T* dy, const T* x, T* dx, int64_t n, GeluApproximate approximate);
}  // namespace kernels

}  // namespace minidl
