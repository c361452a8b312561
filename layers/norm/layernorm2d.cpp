// The LayerNorm2d module and its factory; the op is layer_norm_2d (layers/norm/norm.h).
#include "layers/norm/layernorm2d.h"

#include "core/checked_math.h"
#include "core/error.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_work.h"
#include "layers/registry.h"

namespace minidl {

LayerNorm2d::LayerNorm2d(int64_t num_channels, double eps, bool affine, norm::NormActivation activation)
    : num_channels_(num_channels), eps_(eps), activation_(activation) {
  MINIDL_CHECK(num_channels >= 1, "LayerNorm2d: num_channels must be >= 1, got ", num_channels);
  if (affine) {
    weight = Tensor::full({num_channels}, 1.f);
    bias = Tensor::zeros({num_channels});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

Tensor LayerNorm2d::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == num_channels_, label(), ": expected input (N, ",
               num_channels_, ", H, W), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return layer_norm_2d(x, weight, bias, eps_, activation_);
}

std::string LayerNorm2d::describe() const {
  return str("LayerNorm2d ", num_channels_, norm_activation_suffix(activation_));
}

nlohmann::json LayerNorm2d::to_json() const {
  nlohmann::json j = {
      {"type", "LayerNorm2d"}, {"num_channels", num_channels_}, {"eps", eps_}, {"affine", weight.defined()}};
  write_norm_activation(j, activation_);
  return j;
}

namespace {

struct LayerNorm2dSpec {
  int64_t num_channels;
  double eps;
  bool affine;
  norm::NormActivation activation;
};

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
LayerNorm2dSpec read_layernorm2d(LayerArgs& args) {
  const int64_t num_channels = args.get_int("num_channels");
  MINIDL_CHECK(num_channels >= 1 && num_channels <= kMaxFeatures, args.key_path("num_channels"), ": must be in 1..",
               kMaxFeatures, ", got ", num_channels);
  const double eps = args.get_float("eps", 1e-6);
  MINIDL_CHECK(eps >= 0, args.key_path("eps"), ": must be >= 0, got ", eps);
  const bool affine = args.get_bool("affine", true);
  const norm::NormActivation activation = read_norm_activation(args);
  args.finish();
  return {num_channels, eps, affine, activation};
}

std::shared_ptr<Module> make_layernorm2d(LayerArgs& args) {
  const LayerNorm2dSpec s = read_layernorm2d(args);
  return std::make_shared<LayerNorm2d>(s.num_channels, s.eps, s.affine, s.activation);
}

LayerState layernorm2d_state(LayerArgs& args) {
  const LayerNorm2dSpec s = read_layernorm2d(args);
  const int64_t n = s.affine ? s.num_channels : 0;
  return {checked_mul(2, n, "LayerNorm2d state"), n, str("LayerNorm2d ", s.num_channels)};
}

}  // namespace

const LayerDescriptor& layernorm2d_layer() {
  static const LayerDescriptor layer{
      "LayerNorm2d",
      "norm",
      "normalization over the channels of each pixel of (N, C, H, W), as ConvNeXt's LayerNorm and timm's LayerNorm2d",
      {required_key("num_channels", "int", "channels C, >= 1"),
       default_key("eps", "float", 1e-6, "added to the variance, >= 0"),
       default_key("affine", "bool", true, "learned per-channel scale and shift"),
       norm_activation_key(norm::NormActivation::ReLU), norm_activation_key(norm::NormActivation::GELU),
       norm_activation_key(norm::NormActivation::SiLU), norm_activation_key(norm::NormActivation::Hardswish),
       norm_activation_key(norm::NormActivation::Sigmoid)},
      make_layernorm2d,
      {{"num_channels", 3}},
      {2, 3, 4, 4},
      AutocastRule::InputType,
      true,
      layernorm2d_state};
  return layer;
}

// layers/norm/norm_work.h over one statistic per pixel.
std::optional<LayerWork> LayerNorm2d::work(const Tensor& x, const Tensor& y) const {
  return norm_work(x, y, x.size(0) * x.size(2) * x.size(3), weight, bias, true, activation_);
}

}  // namespace minidl
