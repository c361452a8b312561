#include "layers/norm/norm_work.h"

#include "layers/norm/norm_activation.h"

namespace minidl {

LayerWork norm_work(const Tensor& x, const Tensor& y, int64_t stats, const Tensor& weight, const Tensor& bias,
                    bool batch_statistics, norm::NormActivation activation) {
  LayerWork w;
  const double n = static_cast<double>(x.numel());
  const double params = work_bytes(weight) + work_bytes(bias);
  const double stat_bytes = work_bytes(stats, DType::Float32);
  w.forward.flops = n * ((batch_statistics ? 5.0 : 2.0) + norm_activation_forward_flops(activation));
  // x read, y written, the affine parameters read, mean and rstd written.
  w.forward.bytes = work_bytes(x) + work_bytes(y) + params + 2 * stat_bytes;
  if (y.requires_grad()) {
    w.saved_bytes = work_bytes(x) + 2 * stat_bytes;
    w.backward.flops = n * (9.0 + norm_activation_backward_flops(activation));
    // dy, x, mean, rstd and the parameters read; dx and the parameters' float32 gradients written.
    w.backward.bytes = work_bytes(y) + w.saved_bytes + params + (x.requires_grad() ? work_bytes(x) : 0.0) +
                       work_bytes(weight.defined() ? weight.numel() : 0, DType::Float32) +
                       work_bytes(bias.defined() ? bias.numel() : 0, DType::Float32);
  }
  return w;
}

}  // namespace minidl
