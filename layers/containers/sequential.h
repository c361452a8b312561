// Sequential: runs its children in order; children are named "0", "1", ... as in PyTorch.
#pragma once
#include <memory>
#include <vector>

#include "layers/module.h"

namespace minidl {

class Sequential : public Module {
 public:
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  // The children as a JSON list of layer specs (what Residual prints for its body).
  nlohmann::json layers_json() const;
  size_t size() const { return children().size(); }
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& sequential_layer();

}  // namespace minidl
