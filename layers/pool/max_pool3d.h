// MaxPool3d as torch.nn.MaxPool3d (kernel_size, stride, padding; no dilation or ceil_mode) over
// (N, C, D, H, W) in NCDHW or channels_last_3d, float32, bfloat16 or float16, CPU and CUDA with
// the same bits (max_pool3d_math.h).
#pragma once
#include "core/fields.h"
#include "core/tensor.h"
#include "layers/layer.h"
#include "layers/size3d.h"

namespace minidl {

// (N, C, D, H, W) -> (N, C, (D + 2*pd - kd)/sd + 1, ...), in x's dtype and memory format;
// differentiable (each input's gradient sums the outputs that chose it).
Tensor max_pool3d(const Tensor& x, Size3d kernel_size, Size3d stride, Size3d padding = 0);

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& max_pool3d_layer();

struct MaxPool3dSpec {
  Size3d kernel_size, stride, padding;
  static const Fields<MaxPool3dSpec>& fields();
};

class MaxPool3d : public Layer<MaxPool3dSpec> {
 public:
  MaxPool3d(Size3d kernel_size, Size3d stride, Size3d padding = 0)
      : MaxPool3d(MaxPool3dSpec{kernel_size, stride, padding}) {}
  explicit MaxPool3d(const MaxPool3dSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "MaxPool3d k2", "MaxPool3d k3 s2 p1"
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

}  // namespace minidl
