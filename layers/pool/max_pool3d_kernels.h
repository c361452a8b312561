// MaxPool3d's launchers (layers/pool/max_pool3d_cpu.cpp, max_pool3d_cuda.cu): x, y, dy, dx of
// `dtype` (float32, bfloat16, float16) in the shape's layout; idx (int32, y's shape and layout)
// holds each output's chosen spatial index. CPU and CUDA run the same per-element code
// (max_pool3d_math.h) and give the same bits.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "layers/pool/max_pool3d_math.h"

namespace minidl::kernels {
void max_pool3d_forward_cpu(const Pool3dShape& s, DType dtype, const void* x, void* y, int32_t* idx);
void max_pool3d_backward_cpu(const Pool3dShape& s, DType dtype, const void* dy, const int32_t* idx, void* dx);
void max_pool3d_forward_cuda(const Pool3dShape& s, DType dtype, const void* x, void* y, int32_t* idx);
void max_pool3d_backward_cuda(const Pool3dShape& s, DType dtype, const void* dy, const int32_t* idx, void* dx);
}  // namespace minidl::kernels
