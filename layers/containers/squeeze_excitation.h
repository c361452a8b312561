// SqueezeExcitation: torchvision.ops.SqueezeExcitation (Hu et al.'s squeeze-and-excitation, as
// MobileNetV3 and EfficientNet use it): each sample's channels scaled by a gate computed from the
// sample itself, y = x * sigmoid(fc2(relu(fc1(mean over H, W of x)))), fc1 and fc2 1x1 Conv2d
// with biases (children "fc1", "fc2": torchvision's parameter names). The gate's multiply is
// channel_gate (layer_scale.h), on the CPU and CUDA in every dtype and layout.
#pragma once
#include <memory>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& squeeze_excitation_layer();

struct SqueezeExcitationSpec {
  int64_t input_channels, squeeze_channels;
  static const Fields<SqueezeExcitationSpec>& fields();
};

class SqueezeExcitation : public Layer<SqueezeExcitationSpec> {
 public:
  SqueezeExcitation(int64_t input_channels, int64_t squeeze_channels)
      : SqueezeExcitation(SqueezeExcitationSpec{input_channels, squeeze_channels}) {}
  explicit SqueezeExcitation(const SqueezeExcitationSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "SqueezeExcitation 96->24"
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  Module& fc1() const { return *fc1_; }
  Module& fc2() const { return *fc2_; }

 private:
  std::shared_ptr<Module> fc1_, fc2_;
};

}  // namespace minidl
