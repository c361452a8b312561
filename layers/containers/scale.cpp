#include "layers/containers/scale.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/registry.h"

namespace minidl {

Tensor Scale::forward(const Tensor& x) { return mul(x, value_); }

std::string Scale::describe() const { return str("Scale(", value_, ")"); }

namespace {

std::shared_ptr<Module> make_scale(LayerArgs& args) {
  const double value = args.get_float("value");
  // The factor multiplies in float32: a double beyond its range would become infinity there.
  MINIDL_CHECK(std::isfinite(value) && std::abs(value) <= std::numeric_limits<float>::max(), args.key_path("value"),
               ": expected a finite float32 number (|value| <= 3.4e38), got ", value);
  args.finish();
  return std::make_shared<Scale>(static_cast<float>(value));
}

}  // namespace

const LayerDescriptor& scale_layer() {
  static const LayerDescriptor layer{"Scale",
                                     "containers",
                                     "multiplies by a constant",
                                     {required_key("value", "float", "the factor, finite")},
                                     make_scale,
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
