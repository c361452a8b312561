// LayerScale2d: y = x * gamma, gamma a learned factor per channel of (N, C, H, W) (CaiT's and
// ConvNeXt's layer scale, at the end of a residual body; timm's LayerScale2d, whose names and
// defaults it takes: the parameter "gamma", initialized to init_values). Any dtype of x (gamma
// float32, the product in float32 rounded once), contiguous or channels_last, CPU kernels in
// layer_scale_cpu.cpp and CUDA kernels in layer_scale_cuda.cu.
#pragma once
#include <string>

#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

// x (N, C, H, W), gamma (C) float32; differentiable in both.
Tensor layer_scale_2d(const Tensor& x, const Tensor& gamma);
// x (N, C, H, W) times gate (N, C, 1, 1) float32, each sample's channels by their own factor (the
// squeeze-excitation gate); differentiable in both. CPU kernels and CUDA kernels as layer_scale_2d's.
Tensor channel_gate(const Tensor& x, const Tensor& gate);

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& layer_scale_2d_layer();

struct LayerScale2dSpec {
  int64_t dim;
  double init_values;  // within float32's range
  static const Fields<LayerScale2dSpec>& fields();
};

class LayerScale2d : public Layer<LayerScale2dSpec> {
 public:
  LayerScale2d(int64_t dim, double init_values) : LayerScale2d(LayerScale2dSpec{dim, init_values}) {}
  explicit LayerScale2d(const LayerScale2dSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  Tensor gamma;  // (dim)
};

}  // namespace minidl
