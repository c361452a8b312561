// The LayerNorm module and its factory; the op is layer_norm (layers/norm/norm.h).
#include "layers/norm/layernorm.h"

#include <algorithm>

#include "core/autocast.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_work.h"
#include "layers/registry.h"

namespace minidl {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine,
                     norm::NormActivation activation)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps), activation_(activation) {
  MINIDL_CHECK(!normalized_shape_.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t d : normalized_shape_)
    MINIDL_CHECK(d >= 1, "LayerNorm: normalized_shape dims must be >= 1, got ", shape_str(normalized_shape_));
  if (elementwise_affine) {
    weight = Tensor::full(normalized_shape_, 1.f);
    bias = Tensor::zeros(normalized_shape_);
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const int64_t k = static_cast<int64_t>(normalized_shape_.size());
  MINIDL_CHECK(x.defined() && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape_,
               label(), ": expected input (..., ",
               shape_str(normalized_shape_), "), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (feeds_half_gemm_ && autocast_active() && x.dtype() == DType::Float32)
    return layer_norm_to(x, autocast_dtype(), normalized_shape_, weight, bias, eps_, activation_);
  return layer_norm(x, normalized_shape_, weight, bias, eps_, activation_);
}

std::string LayerNorm::describe() const {
  std::string dims;
  for (int64_t d : normalized_shape_) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  return str("LayerNorm (", dims, ")", norm_activation_suffix(activation_));
}

nlohmann::json LayerNorm::to_json() const {
  nlohmann::json j = {{"type", "LayerNorm"},
                      {"normalized_shape", normalized_shape_},
                      {"eps", eps_},
                      {"elementwise_affine", weight.defined()}};
  write_norm_activation(j, activation_);
  return j;
}

namespace {

struct LayerNormSpec {
  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  norm::NormActivation activation;
};

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
LayerNormSpec read_layernorm(LayerArgs& args) {
  const Shape normalized_shape = args.get_ints("normalized_shape");
  for (int64_t d : normalized_shape)
    MINIDL_CHECK(d >= 1, args.key_path("normalized_shape"), ": dims must be >= 1, got ", shape_str(normalized_shape));
  const double eps = args.get_float("eps", 1e-5);
  MINIDL_CHECK(eps >= 0, args.key_path("eps"), ": must be >= 0, got ", eps);
  const bool elementwise_affine = args.get_bool("elementwise_affine", true);
  const norm::NormActivation activation = read_norm_activation(args);
  args.finish();
  return {normalized_shape, eps, elementwise_affine, activation};
}

std::shared_ptr<Module> make_layernorm(LayerArgs& args) {
  const LayerNormSpec s = read_layernorm(args);
  return std::make_shared<LayerNorm>(s.normalized_shape, s.eps, s.elementwise_affine, s.activation);
}

LayerState layernorm_state(LayerArgs& args) {
  const LayerNormSpec s = read_layernorm(args);
  const int64_t n = s.elementwise_affine ? shape_numel(s.normalized_shape) : 0;
  return {checked_mul(2, n, "LayerNorm state"), n, str("LayerNorm ", shape_str(s.normalized_shape))};
}

}  // namespace

const LayerDescriptor& layernorm_layer() {
  static const LayerDescriptor layer{
      "LayerNorm",
      "norm",
      "normalization over the trailing normalized_shape dims of each sample, as torch.nn.LayerNorm",
      {required_key("normalized_shape", "ints", "the trailing dims normalized together, each >= 1"),
       default_key("eps", "float", 1e-5, "added to the variance, >= 0"),
       default_key("elementwise_affine", "bool", true, "learned scale and shift of normalized_shape"),
       norm_activation_key(norm::NormActivation::ReLU), norm_activation_key(norm::NormActivation::GELU),
       norm_activation_key(norm::NormActivation::SiLU), norm_activation_key(norm::NormActivation::Hardswish),
       norm_activation_key(norm::NormActivation::Sigmoid)},
      make_layernorm,
      {{"normalized_shape", {3, 4, 4}}},
      {2, 3, 4, 4},
      AutocastRule::Float32,
      true,
      layernorm_state,
      {{{{"normalized_shape", {8}}}, {2, 5, 8}}}};
  return layer;
}

// layers/norm/norm_work.h over one statistic per normalized row.
std::optional<LayerWork> LayerNorm::work(const Tensor& x, const Tensor& y) const {
  return norm_work(x, y, x.numel() / std::max<int64_t>(1, shape_numel(normalized_shape_)), weight, bias, true,
                   activation_);
}

}  // namespace minidl
