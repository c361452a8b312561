// Residual: y = shortcut(x) + body(x), the shortcut the identity unless the spec gives one (a
// projection: torchvision's ResNet "downsample", a strided 1x1 Conv2d and a BatchNorm2d, where a
// stage changes width or resolution). The body's layers are this module's children named "0",
// "1", ... (so a ResNet-9 residual's first conv is "3.0.weight"), the shortcut's are children of
// its child "shortcut" ("3.shortcut.0.weight"), and the add is recorded under this module.
#pragma once
#include <memory>
#include <vector>

#include "layers/module.h"

namespace minidl {

class Residual : public Module {
 public:
  // An empty `shortcut` is the identity.
  explicit Residual(std::vector<std::shared_ptr<Module>> body, std::vector<std::shared_ptr<Module>> shortcut = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Residual"; }
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  const std::vector<std::shared_ptr<Module>>& body() const { return body_; }
  const Module* shortcut() const { return shortcut_.get(); }

 private:
  std::vector<std::shared_ptr<Module>> body_;
  std::shared_ptr<Module> shortcut_;  // a Sequential, or null for the identity
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& residual_layer();

}  // namespace minidl
