// The two switches from a tensor to the kernel that runs it, the one place each is written:
//  - dispatch(): the CPU or the CUDA implementation, by where the data lives; the one place that
//    knows whether this minidl was built with CUDA. In a CPU-only build, asking for CUDA is a
//    clear error, never a silently skipped kernel.
//  - dispatch_dtype(): the storage type T of a floating dtype (float, bf16, fp16), for the typed
//    launchers (mlx's dispatch_float_types): CPU and CUDA launchers take the same typed pointers.
//
//   dispatch_dtype(x.dtype(), "relu", [&](auto tag) {
//     using T = decltype(tag);
//     dispatch(x.device(), "relu",
//              [&] { kernels::relu_forward_cpu(x.data<T>(), y.data<T>(), n); },
//              [&] { kernels::relu_forward_cuda(x.data<T>(), y.data<T>(), n); });
//   });
//
// The CUDA launchers are declared in every build (the *_kernels.h headers); in a CPU-only build the
// CUDA lambda is never called, so nothing refers to their missing definitions.
#pragma once
#include <utility>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace minidl {

template <class Cpu, class Cuda>
decltype(auto) dispatch(Device device, const char* op, Cpu&& cpu, Cuda&& cuda) {
  if (!device.is_cuda()) return std::forward<Cpu>(cpu)();
#ifdef MINIDL_WITH_CUDA
  (void)op;
  return std::forward<Cuda>(cuda)();
#else
  (void)cuda;
  fail(str(op, " on ", device.str(), " needs CUDA but this minidl was built without CUDA"));
#endif
}

// X(float) X(bf16) X(fp16): one explicit instantiation of a typed launcher per type dispatch_dtype
// picks (MINIDL_FOR_HALF_TYPES: the two 16-bit ones, for launchers that take only those).
#define MINIDL_FOR_FLOATING_TYPES(X) X(float) X(bf16) X(fp16)
#define MINIDL_FOR_HALF_TYPES(X) X(bf16) X(fp16)

// f(T{}) with T the storage type of `dtype` (float, bf16 or fp16); any other dtype is an error
// naming `op`.
template <class F>
decltype(auto) dispatch_dtype(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::BFloat16: return f(bf16{});
    case DType::Float16: return f(fp16{});
    case DType::Int32:
    case DType::UInt8: break;
  }
  fail(str(op, ": ", dtype_name(dtype), " is not a floating dtype (float32, bfloat16 or float16)"));
}

}  // namespace minidl
