#include "layers/containers/sequential.h"

#include "core/error.h"
#include "layers/layer_fields.h"
#include "layers/model_memory.h"
#include "layers/registry.h"

namespace minidl {

Sequential::Sequential(const SequentialSpec& spec) : Layer(sequential_layer(), spec) {
  for (size_t i = 0; i < spec.layers.size(); ++i) register_module(std::to_string(i), spec.layers[i]);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& kv : children()) y = (*kv.second)(y);
  return y;
}

std::shared_ptr<Module> build_sequential(const nlohmann::json& list, const std::string& path, Device device) {
  MINIDL_CHECK(list.is_array(), path, ": expected a list of layers, got ", list.type_name());
  const OutermostBuild outermost;
  if (outermost) check_model_fits(list, path, device);
  return std::make_shared<Sequential>(build_layers(list, path));
}

const Fields<SequentialSpec>& SequentialSpec::fields() {
  static const Fields<SequentialSpec> f{
      {layer_list("layers", &SequentialSpec::layers, false, "the layer specs, in order")}};
  return f;
}

const LayerDescriptor& sequential_layer() {
  static const LayerDescriptor layer{
      "Sequential",
      "containers",
      "its layers applied in order; children named 0, 1, ...",
      layer_fields<Sequential>(),
      make_layer<Sequential>,
      {{"layers", {{{"type", "Linear"}, {"in_features", 3}, {"out_features", 2}}, {{"type", "ReLU"}}}}},
      {2, 3},
      AutocastRule::InputType};
  return layer;
}

// Runs its children and does nothing itself.
std::optional<LayerWork> Sequential::work(const Tensor&, const Tensor&) const { return LayerWork(); }

}  // namespace minidl
