// Dropout launchers: y = x * dropout_factor(draw, step, i) over n contiguous elements (the
// backward is the same map on dy). CPU: float32; CUDA: float32, bfloat16 or float16 storage with
// float32 arithmetic, the step read from device memory so a CUDA graph replays each step's own
// draws. Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "layers/regularization/dropout_draw.h"

namespace minidl::kernels {

void dropout_cpu(const DropoutDraw& draw, int64_t step, const float* x, float* y, int64_t n);
void dropout_cuda(DType dtype, const DropoutDraw& draw, const int64_t* step, const void* x, void* y, int64_t n);

}  // namespace minidl::kernels
