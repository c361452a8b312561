#include "layers/containers/residual.h"

#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/registry.h"

namespace minidl {

Residual::Residual(std::vector<std::shared_ptr<Module>> body) {
  for (size_t i = 0; i < body.size(); ++i) register_module(std::to_string(i), std::move(body[i]));
}

Tensor Residual::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& kv : children()) y = (*kv.second)(y);
  MINIDL_CHECK(y.shape() == x.shape(), "Residual '", path(), "': body output ", shape_str(y.shape()),
               " does not match its input ", shape_str(x.shape()));
  return add(x, y);
}

nlohmann::json Residual::to_json() const {
  nlohmann::json body = nlohmann::json::array();
  for (const auto& kv : children()) body.push_back(kv.second->to_json());
  return {{"type", "Residual"}, {"body", body}};
}

namespace {

std::shared_ptr<Module> make_residual(LayerArgs& args) {
  return std::make_shared<Residual>(build_layer_list(args, "body"));
}

}  // namespace

const LayerDescriptor& residual_layer() {
  static const LayerDescriptor layer{
      "Residual",
      "containers",
      "x + body(x); the body's layers are children 0, 1, ...",
      {required_key("body", "layers", "a non-empty list of layer specs")},
      make_residual,
      {{"body", {{{"type", "Linear"}, {"in_features", 3}, {"out_features", 3}}, {{"type", "ReLU"}}}}},
      {2, 3},
      AutocastRule::InputType};
  return layer;
}

// The residual's own work is the add of x and the body's output (the body's layers report theirs):
// one FLOP per element, two inputs read, one output written. Its backward hands dy to both
// branches as it is: no FLOPs, no bytes (the engine's sum of x's two gradients is autograd's).
std::optional<LayerWork> Residual::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.flops = static_cast<double>(y.numel());
  w.forward.bytes = 2 * work_bytes(x) + work_bytes(y);
  return w;
}

}  // namespace minidl
