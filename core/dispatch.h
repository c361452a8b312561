// Runs the CPU or the CUDA implementation of an op by where its data lives: the one place that
// knows whether this minidl was built with CUDA. In a CPU-only build, asking for CUDA is a clear
// error, never a silently skipped kernel.
//
//   dispatch(x.device(), "relu",
//            [&] { kernels::relu_forward_cpu(x.data<float>(), y.data<float>(), n); },
//            [&] { kernels::relu_forward_cuda(x.dtype(), x.raw_data(), y.raw_data(), n); });
//
// The CUDA launchers are declared in every build (the *_kernels.h headers); in a CPU-only build the
// CUDA lambda is never called, so nothing refers to their missing definitions.
#pragma once
#include <utility>

#include "core/device.h"
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

}  // namespace minidl
