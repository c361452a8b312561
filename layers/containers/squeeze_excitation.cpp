// The SqueezeExcitation module, its factory and descriptor; the gate's multiply is channel_gate.
#include "layers/containers/squeeze_excitation.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"
#include "layers/activation/activation.h"
#include "layers/activation/pointwise.h"
#include "layers/containers/layer_scale.h"
#include "layers/conv/conv2d.h"
#include "layers/pool/avg_pool.h"
#include "layers/registry.h"

namespace minidl {

SqueezeExcitation::SqueezeExcitation(int64_t input_channels, int64_t squeeze_channels)
    : input_channels_(input_channels), squeeze_channels_(squeeze_channels) {
  MINIDL_CHECK(input_channels >= 1 && squeeze_channels >= 1, "SqueezeExcitation: input_channels and ",
               "squeeze_channels must be >= 1, got ", input_channels, " and ", squeeze_channels);
  fc1_ = std::make_shared<Conv2d>(input_channels, squeeze_channels, 1);
  fc2_ = std::make_shared<Conv2d>(squeeze_channels, input_channels, 1);
  register_module("fc1", fc1_);
  register_module("fc2", fc2_);
}

Tensor SqueezeExcitation::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == input_channels_, label(), ": expected input (N, ",
               input_channels_, ", H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  const Tensor squeezed = adaptive_avg_pool2d(x, 1, 1);
  const Tensor gate = sigmoid((*fc2_)(relu((*fc1_)(squeezed))));
  return channel_gate(x, gate.to(DType::Float32));
}

std::string SqueezeExcitation::describe() const {
  return str("SqueezeExcitation ", input_channels_, "->", squeeze_channels_);
}

nlohmann::json SqueezeExcitation::to_json() const {
  return {{"type", "SqueezeExcitation"}, {"input_channels", input_channels_}, {"squeeze_channels", squeeze_channels_}};
}

namespace {

struct SqueezeExcitationSpec {
  int64_t input_channels, squeeze_channels;
};

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
SqueezeExcitationSpec read_squeeze_excitation(LayerArgs& args) {
  auto channels = [&](const char* key) {
    const int64_t v = args.get_int(key);
    MINIDL_CHECK(v >= 1 && v <= kMaxFeatures, args.key_path(key), ": must be in 1..", kMaxFeatures, ", got ", v);
    return v;
  };
  const SqueezeExcitationSpec s{channels("input_channels"), channels("squeeze_channels")};
  check_weight_size(args, {s.squeeze_channels, s.input_channels, 1, 1});
  args.finish();
  return s;
}

std::shared_ptr<Module> make_squeeze_excitation(LayerArgs& args) {
  const SqueezeExcitationSpec s = read_squeeze_excitation(args);
  return std::make_shared<SqueezeExcitation>(s.input_channels, s.squeeze_channels);
}

// fc1 (S x C weight, S biases) and fc2 (C x S, C).
LayerState squeeze_excitation_state(LayerArgs& args) {
  const SqueezeExcitationSpec s = read_squeeze_excitation(args);
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
      {required_key("input_channels", "int", "channels C of the input, >= 1"),
       required_key("squeeze_channels", "int", "channels of the squeezed gate (fc1's output), >= 1")},
      make_squeeze_excitation,
      {{"input_channels", 4}, {"squeeze_channels", 2}},
      {2, 4, 3, 3},
      AutocastRule::InputType,
      true,
      squeeze_excitation_state};
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
