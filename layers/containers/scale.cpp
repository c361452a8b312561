#include "layers/containers/scale.h"

#include <cmath>

#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/registry.h"

namespace minidl {

Tensor Scale::forward(const Tensor& x) { return mul(x, value_); }

std::string Scale::describe() const { return str("Scale(", value_, ")"); }

std::shared_ptr<Module> make_scale(LayerArgs& args) {
  const double value = args.get_float("value");
  MINIDL_CHECK(std::isfinite(value), args.key_path("value"), ": expected a finite number, got ", value);
  args.finish();
  return std::make_shared<Scale>(static_cast<float>(value));
}

// One multiply per element each way; the backward needs nothing saved.
std::optional<LayerWork> Scale::work(const Tensor& x, const Tensor& y) const {
  return elementwise_work(x, y, 1, 1, Tensor());
}

}  // namespace minidl
