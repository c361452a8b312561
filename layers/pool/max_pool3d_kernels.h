// MaxPool3d's launchers (layers/pool/max_pool3d_cpu.cpp, max_pool3d_cuda.cu): x, y, dy, dx of T
// (float, bf16, fp16) in the shape's layout; idx (int32, y's shape and layout) holds each output's
// chosen spatial index. CPU and CUDA run the same per-element code (max_pool3d_math.h) and give
// the same bits.
#pragma once
#include <cstdint>

#include "layers/pool/max_pool3d_math.h"

namespace minidl::kernels {
template <class T>
void max_pool3d_forward_cpu(const Pool3dShape& s, const T* x, T* y, int32_t* idx);
template <class T>
void max_pool3d_backward_cpu(const Pool3dShape& s, const T* dy, const int32_t* idx, T* dx);
template <class T>
void max_pool3d_forward_cuda(const Pool3dShape& s, const T* x, T* y, int32_t* idx);
template <class T>
void max_pool3d_backward_cuda(const Pool3dShape& s, const T* dy, const int32_t* idx, T* dx);
}  // namespace minidl::kernels
