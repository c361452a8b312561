// The work of one layer call, from its shapes: what the profiler divides its times by to give
// achieved TFLOP/s and GB/s and to place each layer on the roofline (profiling/profile_report.h).
//
// Conventions (docs/profiling.md): a multiply-add counts 2 FLOPs, a comparison, an exp or an erf
// 1; bytes are the minimum a perfect implementation moves: every distinct tensor the pass needs
// read once and every tensor it produces written once, in the dtypes the run uses (activations in
// the autocast dtype, float32 parameter gradients), whatever the layout. The backward counts
// only the gradients the step computes (no dx for a layer whose input needs none).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace minidl {

struct PassWork {
  double flops = 0;
  double bytes = 0;
};

struct LayerWork {
  PassWork forward, backward;
  double saved_bytes = 0;  // tensors the call keeps for its backward (autograd's saved tensors)
};

// Bytes of `numel` elements of `dtype`.
inline double work_bytes(int64_t numel, DType dtype) {
  return static_cast<double>(numel) * static_cast<double>(dtype_size(dtype));
}
inline double work_bytes(const Tensor& t) { return t.defined() ? work_bytes(t.numel(), t.dtype()) : 0.0; }

// An elementwise op y = f(x) of `fwd_flops` per element whose backward (when x needs a gradient)
// takes `bwd_flops` per element and reads dy plus `saved` (a tensor it kept: x or y, or none).
LayerWork elementwise_work(const Tensor& x, const Tensor& y, double fwd_flops, double bwd_flops,
                           const Tensor& saved);

// A layer whose every output element is a dot product of length `reduction` (Conv2d:
// Cin/groups*kh*kw; Linear: in_features) against `weight`, plus `bias` when defined: forward 2
// FLOPs per multiply-add and one add per output for the bias; x, the weight and bias (read in y's dtype,
// as the kernel reads them) and y moved. Backward: dW (and db) always, dx when x needs it, each
// GEMM as many FLOPs again; dy, x (and the weight for dx) read once, dx written in x's dtype, dW
// and db in float32 (the parameters' gradients). Saved for backward: x.
LayerWork gemm_layer_work(const Tensor& x, const Tensor& y, int64_t reduction, const Tensor& weight,
                          const Tensor& bias);

}  // namespace minidl
