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

}  // namespace minidl
