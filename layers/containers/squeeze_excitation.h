// SqueezeExcitation: torchvision.ops.SqueezeExcitation (Hu et al.'s squeeze-and-excitation, as
// MobileNetV3 and EfficientNet use it): each sample's channels scaled by a gate computed from the
// sample itself, y = x * sigmoid(fc2(relu(fc1(mean over H, W of x)))), fc1 and fc2 1x1 Conv2d
// with biases (children "fc1", "fc2": torchvision's parameter names). The gate's multiply is
// channel_gate (layer_scale.h), on the CPU and CUDA in every dtype and layout.
#pragma once
#include <memory>
#include <string>

#include "layers/module.h"

namespace minidl {

class SqueezeExcitation : public Module {
 public:
  SqueezeExcitation(int64_t input_channels, int64_t squeeze_channels);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SqueezeExcitation"; }
  std::string describe() const override;  // "SqueezeExcitation 96->24"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  Module& fc1() const { return *fc1_; }
  Module& fc2() const { return *fc2_; }

 private:
  int64_t input_channels_, squeeze_channels_;
  std::shared_ptr<Module> fc1_, fc2_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& squeeze_excitation_layer();

}  // namespace minidl
