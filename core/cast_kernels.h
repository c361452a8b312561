// Launchers of the dtype conversion behind Tensor::to(DType) (core/cast.cpp): n contiguous
// elements from `x` of dtype `from` to `y` of dtype `to`, both float32, bfloat16 or float16, or
// int32 <-> float32. Every floating element goes through float32 with one rounding
// (core/half_types.h), so bf16 <-> fp16 is correctly rounded too (widening to float32 is exact).
// int32 -> float32 rounds to nearest even, float32 -> int32 truncates toward zero (C++'s and
// PyTorch's conversions; a NaN or a value outside int32's range is undefined there too, and the
// CPU and CUDA give different results for them). Otherwise CPU and CUDA give the same bits.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace minidl {

// Whether to(dtype) converts `from` to `to`: between floating dtypes, or int32 <-> float32.
inline bool castable(DType from, DType to) {
  if (is_floating(from) && is_floating(to)) return true;
  return (from == DType::Int32 && to == DType::Float32) || (from == DType::Float32 && to == DType::Int32);
}

namespace kernels {
void cast_cpu(const void* x, DType from, void* y, DType to, int64_t n);
void cast_cuda(const void* x, DType from, void* y, DType to, int64_t n);
}  // namespace kernels

}  // namespace minidl
