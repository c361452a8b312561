// Residual: y = x + body(x). The body's layers are this module's children, named "0", "1", ...
// (so a ResNet-9 residual's first conv is "3.0.weight"), and the add is recorded under this module.
#pragma once
#include <memory>
#include <vector>

#include "layers/module.h"

namespace minidl {

class Residual : public Module {
 public:
  explicit Residual(std::vector<std::shared_ptr<Module>> body);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Residual"; }
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& residual_layer();

}  // namespace minidl
