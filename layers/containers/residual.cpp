#include "layers/containers/residual.h"

#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/containers/sequential.h"
#include "layers/registry.h"

namespace minidl {

Residual::Residual(std::vector<std::shared_ptr<Module>> body, std::vector<std::shared_ptr<Module>> shortcut)
    : body_(std::move(body)) {
  for (size_t i = 0; i < body_.size(); ++i) register_module(std::to_string(i), body_[i]);
  if (!shortcut.empty()) {
    shortcut_ = std::make_shared<Sequential>(std::move(shortcut));
    register_module("shortcut", shortcut_);
  }
}

Tensor Residual::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& layer : body_) y = (*layer)(y);
  const Tensor s = shortcut_ ? (*shortcut_)(x) : x;
  MINIDL_CHECK(y.shape() == s.shape(), "Residual '", path(), "': body output ", shape_str(y.shape()),
               " does not match ", shortcut_ ? "the shortcut's output " : "its input ", shape_str(s.shape()),
               shortcut_ ? "" : " (a body that changes the shape needs a \"shortcut\" projecting the input to it)");
  return add(s, y);
}

nlohmann::json Residual::to_json() const {
  nlohmann::json body = nlohmann::json::array();
  for (const auto& layer : body_) body.push_back(layer->to_json());
  nlohmann::json j = {{"type", "Residual"}, {"body", body}};
  if (shortcut_) j["shortcut"] = std::static_pointer_cast<Sequential>(shortcut_)->layers_json();
  return j;
}

namespace {

std::vector<std::shared_ptr<Module>> layer_list(LayerArgs& args, const std::string& key) {
  const nlohmann::json& list = args.get_json(key);
  const std::string path = args.key_path(key);
  MINIDL_CHECK(list.is_array() && !list.empty(), path, ": expected a non-empty list of layers");
  std::vector<std::shared_ptr<Module>> layers;
  for (size_t i = 0; i < list.size(); ++i) layers.push_back(build_layer(list[i], str(path, "[", i, "]")));
  return layers;
}

std::shared_ptr<Module> make_residual(LayerArgs& args) {
  std::vector<std::shared_ptr<Module>> body = layer_list(args, "body");
  std::vector<std::shared_ptr<Module>> shortcut;
  if (args.has("shortcut")) shortcut = layer_list(args, "shortcut");
  return std::make_shared<Residual>(std::move(body), std::move(shortcut));
}

}  // namespace

const LayerDescriptor& residual_layer() {
  static const LayerDescriptor layer{
      "Residual",
      "containers",
      "shortcut(x) + body(x); the body's layers are children 0, 1, ..., the shortcut's shortcut.0, ...",
      {required_key("body", "layers", "a non-empty list of layer specs"),
       derived_key("shortcut", "layers",
                   "a non-empty list of layer specs taking x to the body's output shape (a projection: a strided "
                   "1x1 Conv2d and a BatchNorm2d); the identity when left out")},
      make_residual,
      {{"body", {{{"type", "Linear"}, {"in_features", 3}, {"out_features", 4}}, {{"type", "ReLU"}}}},
       {"shortcut", {{{"type", "Linear"}, {"in_features", 3}, {"out_features", 4}, {"bias", false}}}}},
      {2, 3},
      AutocastRule::InputType,
      true,
      nullptr,
      {{{{"body",
          {{{"type", "Conv2d"}, {"in_channels", 3}, {"out_channels", 3}, {"kernel_size", 3}, {"padding", 1}},
           {{"type", "GELU"}}}}},
        {2, 3, 4, 4}}}};
  return layer;
}

// The residual's own work is the add of the shortcut's and the body's outputs (the children
// report theirs): one FLOP per element, two inputs read, one output written. Its backward hands
// dy to both branches as it is: no FLOPs, no bytes (the engine's sum of x's two gradients is
// autograd's).
std::optional<LayerWork> Residual::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.flops = static_cast<double>(y.numel());
  w.forward.bytes = shortcut_ ? 3 * work_bytes(y) : 2 * work_bytes(x) + work_bytes(y);
  return w;
}

}  // namespace minidl
