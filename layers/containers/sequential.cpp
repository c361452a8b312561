#include "layers/containers/sequential.h"

#include "core/error.h"
#include "layers/model_memory.h"
#include "layers/registry.h"

namespace minidl {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (size_t i = 0; i < layers.size(); ++i) register_module(std::to_string(i), std::move(layers[i]));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& kv : children()) y = (*kv.second)(y);
  return y;
}

nlohmann::json Sequential::layers_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& kv : children()) list.push_back(kv.second->to_json());
  return list;
}

nlohmann::json Sequential::to_json() const { return {{"type", "Sequential"}, {"layers", layers_json()}}; }

std::shared_ptr<Module> build_sequential(const nlohmann::json& list, const std::string& path, Device device) {
  MINIDL_CHECK(list.is_array(), path, ": expected a list of layers, got ", list.type_name());
  const OutermostBuild outermost;
  if (outermost) check_model_fits(list, path, device);
  std::vector<std::shared_ptr<Module>> layers;
  for (size_t i = 0; i < list.size(); ++i) layers.push_back(build_layer(list[i], str(path, "[", i, "]")));
  return std::make_shared<Sequential>(std::move(layers));
}

namespace {

std::shared_ptr<Module> make_sequential(LayerArgs& args) {
  return build_sequential(args.get_json("layers"), args.key_path("layers"));
}

}  // namespace

const LayerDescriptor& sequential_layer() {
  static const LayerDescriptor layer{
      "Sequential",
      "containers",
      "its layers applied in order; children named 0, 1, ...",
      {required_key("layers", "layers", "the layer specs, in order")},
      make_sequential,
      {{"layers", {{{"type", "Linear"}, {"in_features", 3}, {"out_features", 2}}, {{"type", "ReLU"}}}}},
      {2, 3},
      AutocastRule::InputType};
  return layer;
}

// Runs its children and does nothing itself.
std::optional<LayerWork> Sequential::work(const Tensor&, const Tensor&) const { return LayerWork(); }

}  // namespace minidl
