// Residual: y = shortcut(x) + body(x), the shortcut the identity unless the spec gives one (a
// projection: torchvision's ResNet "downsample", a strided 1x1 Conv2d and a BatchNorm2d, where a
// stage changes width or resolution). The body's layers are this module's children named "0",
// "1", ... (so a ResNet-9 residual's first conv is "3.0.weight"), the shortcut's are children of
// its child "shortcut" ("3.shortcut.0.weight"), and the add is recorded under this module.
#pragma once
#include <memory>
#include <vector>

#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& residual_layer();

struct ResidualSpec {
  std::vector<std::shared_ptr<Module>> body;
  std::vector<std::shared_ptr<Module>> shortcut;  // empty: the identity
  static const Fields<ResidualSpec>& fields();
};

class Residual : public Layer<ResidualSpec> {
 public:
  // An empty `shortcut` is the identity.
  explicit Residual(std::vector<std::shared_ptr<Module>> body, std::vector<std::shared_ptr<Module>> shortcut = {})
      : Residual(ResidualSpec{std::move(body), std::move(shortcut)}) {}
  explicit Residual(const ResidualSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  const std::vector<std::shared_ptr<Module>>& body() const { return spec().body; }
  const Module* shortcut() const { return shortcut_.get(); }

 private:
  std::shared_ptr<Module> shortcut_;  // a Sequential of the spec's shortcut, or null for the identity
};

}  // namespace minidl
