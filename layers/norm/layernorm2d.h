// LayerNorm2d: normalization over the channels of each pixel of (N, C, H, W), with a weight and
// bias per channel: ConvNeXt's LayerNorm (data_format="channels_first") and timm's LayerNorm2d,
// whose names and defaults it takes. Native to channels-last activations (a pixel's channels are
// one row there); fused activations as the other normalization layers (norm_activation.h).
#pragma once
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/norm/norm_math.h"
#include "layers/norm/norm_path.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& layernorm2d_layer();

struct LayerNorm2dSpec {
  int64_t num_channels;
  double eps;
  bool affine;
  norm::NormActivation activation;
  bool single_read = true;  // layers/norm/norm_path.h
  static const Fields<LayerNorm2dSpec>& fields();
};

class LayerNorm2d : public Layer<LayerNorm2dSpec>, public NormLayer {
 public:
  void set_single_read(bool on) override { mutable_spec().single_read = on; }
  // weight 1, bias 0 (when affine), on the CPU, as timm.
  explicit LayerNorm2d(int64_t num_channels, double eps = 1e-6, bool affine = true,
                       norm::NormActivation activation = norm::NormActivation::None)
      : LayerNorm2d(LayerNorm2dSpec{num_channels, eps, affine, activation}) {}
  explicit LayerNorm2d(const LayerNorm2dSpec& spec);

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "LayerNorm2d 96", "+GELU" ... when fused
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  Tensor weight;  // (C), or undefined
  Tensor bias;    // (C), or undefined
};

}  // namespace minidl
