#include "layers/layer_descriptor.h"

#include "layers/layer.h"

namespace minidl {

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
