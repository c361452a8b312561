#include "layers/containers/scale.h"

#include "core/error.h"
#include "core/field_kinds.h"
#include "core/tensor_ops.h"
#include "layers/registry.h"

namespace minidl {

Tensor Scale::forward(const Tensor& x) { return mul(x, value()); }

std::string Scale::describe() const { return str("Scale(", value(), ")"); }

// The factor multiplies in float32: a double beyond its range would become infinity there.
const Fields<ScaleSpec>& ScaleSpec::fields() {
  static const Fields<ScaleSpec> f{{float32("value", &ScaleSpec::value, kRequired, "the factor")}};
  return f;
}

const LayerDescriptor& scale_layer() {
  static const LayerDescriptor layer{"Scale",
                                     "containers",
                                     "multiplies by a constant",
                                     layer_fields<Scale>(),
                                     make_layer<Scale>,
                                     {{"value", 0.5}},
                                     {2, 3},
                                     AutocastRule::InputType,
                                     true,
                                     nullptr,
                                     {{{{"value", -1.5}}, {2, 3, 3, 5}}}};
  return layer;
}

// One multiply per element each way; the backward needs nothing saved.
std::optional<LayerWork> Scale::work(const Tensor& x, const Tensor& y) const {
  return elementwise_work(x, y, 1, 1, Tensor());
}

}  // namespace minidl
