#include "layers/layer_descriptor.h"

#include "layers/layer.h"

namespace minidl {

std::vector<LayerExample> layer_examples(const LayerDescriptor& layer) {
  std::vector<LayerExample> out{{layer.example, layer.example_input}};
  out.insert(out.end(), layer.more_examples.begin(), layer.more_examples.end());
  for (LayerExample& e : out) {
    e.spec["type"] = layer.name;
    e.ids_below = layer.ids_below;
    e.before = layer.example_before;
  }
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

const Fields<NoKeys>& NoKeys::fields() {
  static const Fields<NoKeys> none;
  return none;
}

}  // namespace minidl
