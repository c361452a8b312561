// Sequential: runs its children in order; children are named "0", "1", ... as in PyTorch.
#pragma once
#include <memory>
#include <vector>

#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& sequential_layer();

struct SequentialSpec {
  std::vector<std::shared_ptr<Module>> layers;
  static const Fields<SequentialSpec>& fields();
};

class Sequential : public Layer<SequentialSpec> {
 public:
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers) : Sequential(SequentialSpec{std::move(layers)}) {}
  explicit Sequential(const SequentialSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  // The children as a JSON list of layer specs (a model's "layers").
  nlohmann::json layers_json() const { return to_json().at("layers"); }
  size_t size() const { return children().size(); }
};

}  // namespace minidl
