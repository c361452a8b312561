// The storage-rounded way of running an op on bfloat16/float16 tensors where no kernel of its own
// reads them (on the CPU all but the activations and dropout; on the GPU the ops without a half
// kernel): the op runs in float32 on float32 copies of its half inputs, and its result is rounded
// back to the half type.
// A kernel that reads half, computes in float32 and writes half has the same rounding points (the
// widening is exact, the output is rounded once), so this is the reference such kernels are tested
// against, and the way every low-precision config also runs on a CPU-only machine. Both casts are
// autograd ops (Tensor::to), so the gradient comes back the same way: rounded to the half type
// where the activation was half, as PyTorch autocast's gradients are (docs/precision.md).
#pragma once
#include "core/tensor.h"

namespace minidl {

// t as float32: t itself when it is float32 or undefined, else a float32 copy.
inline Tensor as_float32(const Tensor& t) { return t.defined() ? t.to(DType::Float32) : t; }

// A parameter in the dtype of the activation x it meets (autocast casts a Conv2d's or Linear's
// float32 weight to the half type of its input each step; the gradient flows back to the float32
// master through the cast). Undefined stays undefined.
inline Tensor in_dtype_of(const Tensor& param, const Tensor& x) {
  return param.defined() ? param.to(x.dtype()) : param;
}

// True for a defined bfloat16 or float16 tensor.
inline bool holds_half(const Tensor& t) { return t.defined() && is_half(t.dtype()); }

}  // namespace minidl
