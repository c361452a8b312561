// MaxPool3d as torch.nn.MaxPool3d (kernel_size, stride, padding; no dilation or ceil_mode) over
// (N, C, D, H, W) in NCDHW or channels_last_3d, float32, bfloat16 or float16, CPU and CUDA with
// the same bits (max_pool3d_math.h).
#pragma once
#include "core/tensor.h"
#include "layers/conv/conv3d.h"
#include "layers/module.h"

namespace minidl {

// (N, C, D, H, W) -> (N, C, (D + 2*pd - kd)/sd + 1, ...), in x's dtype and memory format;
// differentiable (each input's gradient sums the outputs that chose it).
Tensor max_pool3d(const Tensor& x, Size3d kernel_size, Size3d stride, Size3d padding = 0);

class MaxPool3d : public Module {
 public:
  MaxPool3d(Size3d kernel_size, Size3d stride, Size3d padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool3d"; }
  std::string describe() const override;  // "MaxPool3d k2", "MaxPool3d k3 s2 p1"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

 private:
  Size3d kernel_, stride_, padding_;
};

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& max_pool3d_layer();

}  // namespace minidl
