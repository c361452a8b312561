#include "layers/work.h"

namespace minidl {

LayerWork elementwise_work(const Tensor& x, const Tensor& y, double fwd_flops, double bwd_flops,
                           const Tensor& saved) {
  LayerWork w;
  const double n = static_cast<double>(y.numel());
  w.forward.flops = fwd_flops * n;
  w.forward.bytes = work_bytes(x) + work_bytes(y);
  if (x.requires_grad()) {
    // dy read, the saved tensor read, dx written (dy and dx have y's and x's dtypes).
    w.backward.flops = bwd_flops * n;
    w.backward.bytes = work_bytes(y) + work_bytes(saved) + work_bytes(x);
    w.saved_bytes = work_bytes(saved);
  }
  return w;
}

LayerWork gemm_layer_work(const Tensor& x, const Tensor& y, int64_t reduction, const Tensor& weight,
                          const Tensor& bias) {
  const double macs = static_cast<double>(y.numel()) * static_cast<double>(reduction);
  const double bias_adds = bias.defined() ? static_cast<double>(y.numel()) : 0.0;
  const DType t = y.dtype();
  const int64_t bias_n = bias.defined() ? bias.numel() : 0;
  LayerWork w;
  w.forward.flops = 2 * macs + bias_adds;
  w.forward.bytes = work_bytes(x) + work_bytes(weight.numel(), t) + work_bytes(bias_n, t) + work_bytes(y);
  if (y.requires_grad()) {
    const bool dx = x.requires_grad();
    w.saved_bytes = work_bytes(x);
    w.backward.flops = (dx ? 4 : 2) * macs + bias_adds;
    w.backward.bytes = work_bytes(y) + work_bytes(x) + (dx ? work_bytes(weight.numel(), t) + work_bytes(x) : 0.0) +
                       work_bytes(weight.numel(), DType::Float32) + work_bytes(bias_n, DType::Float32);
  }
  return w;
}

}  // namespace minidl
