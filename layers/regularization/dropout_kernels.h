// Dropout launchers: y = x * dropout_factor(draw, step, i) over n contiguous elements of T (float,
// bf16 or fp16; float32 arithmetic, rounded once to T), the backward the same map on dy. The CPU
// runs the step it is given; CUDA reads it from device memory, so a CUDA graph replays each
// step's own draws. Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "layers/regularization/dropout_draw.h"

namespace minidl::kernels {

template <class T> void dropout_cpu(const DropoutDraw& draw, int64_t step, const T* x, T* y, int64_t n);
template <class T> void dropout_cuda(const DropoutDraw& draw, const int64_t* step, const T* x, T* y, int64_t n);

}  // namespace minidl::kernels
