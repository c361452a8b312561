// Launchers of the dtype conversion behind Tensor::to(DType) (core/cast.cpp): n contiguous
// elements from `x` of dtype `from` to `y` of dtype `to`, both float32, bfloat16 or float16.
// Every element goes through float32 with one rounding (core/half_types.h), so bf16 <-> fp16 is
// correctly rounded too (widening to float32 is exact). CPU and CUDA give the same bits.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace minidl {

// Calls f(T{}) with T the storage type of a floating dtype (float, bf16, fp16); errors naming
// `what` for any other dtype.
template <class F>
void visit_floating(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); return;
    case DType::BFloat16: f(bf16{}); return;
    case DType::Float16: f(fp16{}); return;
    case DType::Int32:
    case DType::UInt8: break;
  }
  fail(str(what, ": ", dtype_name(t), " is not a floating dtype (float32, bfloat16 or float16)"));
}

namespace kernels {
void cast_cpu(const void* x, DType from, void* y, DType to, int64_t n);
void cast_cuda(const void* x, DType from, void* y, DType to, int64_t n);
}  // namespace kernels

}  // namespace minidl
