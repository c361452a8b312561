#include "layers/containers/residual.h"

#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/containers/sequential.h"
#include "layers/layer_fields.h"
#include "layers/registry.h"

namespace minidl {

Residual::Residual(const ResidualSpec& spec) : Layer(residual_layer(), spec) {
  for (size_t i = 0; i < spec.body.size(); ++i) register_module(std::to_string(i), spec.body[i]);
  if (!spec.shortcut.empty()) {
    shortcut_ = std::make_shared<Sequential>(spec.shortcut);
    register_module("shortcut", shortcut_);
  }
}

Tensor Residual::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& layer : spec().body) y = (*layer)(y);
  const Tensor s = shortcut_ ? (*shortcut_)(x) : x;
  MINIDL_CHECK(y.shape() == s.shape(), "Residual '", path(), "': body output ", shape_str(y.shape()),
               " does not match ", shortcut_ ? "the shortcut's output " : "its input ", shape_str(s.shape()),
               shortcut_ ? "" : " (a body that changes the shape needs a \"shortcut\" projecting the input to it)");
  return add(s, y);
}

namespace {

// "shortcut": a list of layer specs as "body", left out for the identity (and then not written).
Field<ResidualSpec> shortcut_field() {
  Field<ResidualSpec> f = layer_list("shortcut", &ResidualSpec::shortcut, true,
                                     "a non-empty list of layer specs taking x to the body's output shape (a "
                                     "projection: a strided 1x1 Conv2d and a BatchNorm2d); the identity when left out");
  f.required = false;
  auto read = f.read;
  f.read = [read](JsonArgs& a, const std::string& key, ResidualSpec& s) {
    s.shortcut.clear();
    if (a.has(key)) read(a, key, s);
  };
  auto write = f.write;
  f.write = [write](const ResidualSpec& s) { return s.shortcut.empty() ? std::optional<nlohmann::json>() : write(s); };
  return f;
}

}  // namespace

const Fields<ResidualSpec>& ResidualSpec::fields() {
  static const Fields<ResidualSpec> f{
      {layer_list("body", &ResidualSpec::body, true, "a non-empty list of layer specs"), shortcut_field()}};
  return f;
}

const LayerDescriptor& residual_layer() {
  static const LayerDescriptor layer{
      "Residual",
      "containers",
      "shortcut(x) + body(x); the body's layers are children 0, 1, ..., the shortcut's shortcut.0, ...",
      layer_fields<Residual>(),
      make_layer<Residual>,
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
