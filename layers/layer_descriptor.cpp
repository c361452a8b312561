#include "layers/layer_descriptor.h"

namespace minidl {

LayerKey required_key(std::string name, std::string type, std::string doc) {
  return {std::move(name), std::move(type), true, nullptr, std::move(doc)};
}

LayerKey default_key(std::string name, std::string type, nlohmann::json default_value, std::string doc) {
  return {std::move(name), std::move(type), false, std::move(default_value), std::move(doc)};
}

LayerKey derived_key(std::string name, std::string type, std::string doc) {
  return {std::move(name), std::move(type), false, nullptr, std::move(doc)};
}

std::vector<LayerExample> layer_examples(const LayerDescriptor& layer) {
  std::vector<LayerExample> out{{layer.example, layer.example_input}};
  out.insert(out.end(), layer.more_examples.begin(), layer.more_examples.end());
  for (LayerExample& e : out) e.spec["type"] = layer.name;
  return out;
}

const char* autocast_rule_name(AutocastRule rule) {
  switch (rule) {
    case AutocastRule::LowerPrecision: return "lower_precision";
    case AutocastRule::Float32: return "float32";
    case AutocastRule::InputType: return "input_type";
  }
  return "?";
}

}  // namespace minidl
