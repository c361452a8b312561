// The SqueezeExcitation module, its factory and descriptor; the gate's multiply is channel_gate.
#include "layers/containers/squeeze_excitation.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "layers/activation/activation.h"
#include "layers/activation/pointwise.h"
#include "layers/containers/layer_scale.h"
#include "layers/conv/conv2d.h"
#include "layers/pool/avg_pool.h"
#include "layers/registry.h"

namespace minidl {

SqueezeExcitation::SqueezeExcitation(const SqueezeExcitationSpec& spec) : Layer(squeeze_excitation_layer(), spec) {
  MINIDL_CHECK(spec.input_channels >= 1 && spec.squeeze_channels >= 1, "SqueezeExcitation: input_channels and ",
               "squeeze_channels must be >= 1, got ", spec.input_channels, " and ", spec.squeeze_channels);
  fc1_ = std::make_shared<Conv2d>(spec.input_channels, spec.squeeze_channels, 1);
  fc2_ = std::make_shared<Conv2d>(spec.squeeze_channels, spec.input_channels, 1);
  register_module("fc1", fc1_);
  register_module("fc2", fc2_);
}

Tensor SqueezeExcitation::forward(const Tensor& x) {
  const int64_t c = spec().input_channels;
  MINIDL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == c, label(), ": expected input (N, ", c, ", H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  const Tensor squeezed = adaptive_avg_pool2d(x, 1, 1);
  const Tensor gate = sigmoid((*fc2_)(relu((*fc1_)(squeezed))));
  return channel_gate(x, gate.to(DType::Float32));
}

std::string SqueezeExcitation::describe() const {
  return str("SqueezeExcitation ", spec().input_channels, "->", spec().squeeze_channels);
}

const Fields<SqueezeExcitationSpec>& SqueezeExcitationSpec::fields() {
  using S = SqueezeExcitationSpec;
  static const Fields<S> f{
      {integer("input_channels", &S::input_channels, kRequired, {1, kMaxFeatures}, "channels C of the input"),
       integer("squeeze_channels", &S::squeeze_channels, kRequired, {1, kMaxFeatures},
               "channels of the squeezed gate (fc1's output)")},
      [](const S& s, const JsonArgs& args) {
        check_weight_size(args, {s.squeeze_channels, s.input_channels, 1, 1});
      }};
  return f;
}

namespace {

// fc1 (S x C weight, S biases) and fc2 (C x S, C).
LayerState squeeze_excitation_state(const SqueezeExcitationSpec& s) {
  const int64_t matrix = checked_mul(s.input_channels, s.squeeze_channels, "SqueezeExcitation state");
  return {2 * matrix + s.input_channels + s.squeeze_channels, matrix,
          str("SqueezeExcitation ", s.input_channels, "->", s.squeeze_channels)};
}

}  // namespace

const LayerDescriptor& squeeze_excitation_layer() {
  static const LayerDescriptor layer{
      "SqueezeExcitation",
      "containers",
      "x * sigmoid(fc2(relu(fc1(mean over H, W)))), as torchvision.ops.SqueezeExcitation",
      layer_fields<SqueezeExcitation>(),
      make_layer<SqueezeExcitation>,
      {{"input_channels", 4}, {"squeeze_channels", 2}},
      {2, 4, 3, 3},
      AutocastRule::InputType,
      true,
      layer_state<SqueezeExcitation, squeeze_excitation_state>};
  return layer;
}

// Its own work (fc1 and fc2 report theirs): the mean over H, W (one add per element), the ReLU
// and sigmoid on the (N, C) gate, and the gate's multiply (one per element); x read twice, y
// written. Backward: dx = dy * gate and the gate's gradient, a multiply-add, per element, then the
// mean's backward spreading the gradient back over x (one per element); dy and x read, dx written
// twice (the multiply's and the mean's, added by autograd), x saved.
std::optional<LayerWork> SqueezeExcitation::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  const double n = static_cast<double>(x.numel());
  w.forward.flops = 2 * n;
  w.forward.bytes = 2 * work_bytes(x) + work_bytes(y);
  if (y.requires_grad()) {
    w.saved_bytes = work_bytes(x);
    w.backward.flops = 4 * n;
    w.backward.bytes = work_bytes(y) + work_bytes(x) + (x.requires_grad() ? 2 * work_bytes(x) : 0.0);
  }
  return w;
}

}  // namespace minidl
