// Residual: y = x + body(x). The body's layers are this module's children, named "0", "1", ...
// (so a ResNet-9 residual's first conv is "3.0.weight"), and the add is recorded under this module.
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
  static const Fields<ResidualSpec>& fields();
};

class Residual : public Layer<ResidualSpec> {
 public:
  explicit Residual(std::vector<std::shared_ptr<Module>> body) : Residual(ResidualSpec{std::move(body)}) {}
  explicit Residual(const ResidualSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

}  // namespace minidl
