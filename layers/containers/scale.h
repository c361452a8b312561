// Scale: y = x * value, a fixed (not trained) multiplier, as at the end of ResNet-9 (0.125) and
// airbench (1/9) to temper the logits. PyTorch has no module for it (those nets write a lambda
// or a Mul module); here it is the layer type "Scale" with the key "value".
#pragma once
#include <string>

#include "layers/module.h"

namespace minidl {

class Scale : public Module {
 public:
  explicit Scale(float value) : value_(value) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Scale"; }
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  nlohmann::json to_json() const override { return {{"type", "Scale"}, {"value", value_}}; }
  float value() const { return value_; }

 private:
  float value_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& scale_layer();

}  // namespace minidl
