// LayerNorm2d: normalization over the channels of each pixel of (N, C, H, W), with a weight and
// bias per channel: ConvNeXt's LayerNorm (data_format="channels_first") and timm's LayerNorm2d,
// whose names and defaults it takes. Native to channels-last activations (a pixel's channels are
// one row there); fused activations as the other normalization layers (norm_activation.h).
#pragma once
#include <string>

#include "layers/module.h"
#include "layers/norm/norm_math.h"

namespace minidl {

class LayerNorm2d : public Module {
 public:
  // weight 1, bias 0 (when affine), on the CPU, as timm.
  explicit LayerNorm2d(int64_t num_channels, double eps = 1e-6, bool affine = true,
                       norm::NormActivation activation = norm::NormActivation::None);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm2d"; }
  std::string describe() const override;  // "LayerNorm2d 96", "+GELU" ... when fused
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  Tensor weight;  // (C), or undefined
  Tensor bias;    // (C), or undefined

 private:
  int64_t num_channels_;
  double eps_;
  norm::NormActivation activation_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& layernorm2d_layer();

}  // namespace minidl
