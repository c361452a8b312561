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

LayerNorm::LayerNorm(const LayerNormSpec& spec) : Layer(layernorm_layer(), spec) {
  const Shape& shape = spec.normalized_shape;
  MINIDL_CHECK(!shape.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t d : shape) MINIDL_CHECK(d >= 1, "LayerNorm: normalized_shape dims must be >= 1, got ", shape_str(shape));
  if (spec.elementwise_affine) {
    weight = Tensor::full(shape, 1.f);
    bias = Tensor::zeros(shape);
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const Shape& shape = normalized_shape();
  const int64_t k = static_cast<int64_t>(shape.size());
  MINIDL_CHECK(x.defined() && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == shape, label(),
               ": expected input (..., ", shape_str(shape), "), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (feeds_half_gemm_ && autocast_active() && x.dtype() == DType::Float32)
    return layer_norm_to(x, autocast_dtype(), shape, weight, bias, spec().eps, spec().activation, spec().single_read);
  return layer_norm(x, shape, weight, bias, spec().eps, spec().activation, spec().single_read);
}

std::string LayerNorm::describe() const {
  std::string dims;
  for (int64_t d : normalized_shape()) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  return str("LayerNorm (", dims, ")", norm_activation_suffix(spec().activation));
}

const Fields<LayerNormSpec>& LayerNormSpec::fields() {
  using S = LayerNormSpec;
  static const Fields<S> f{
      with_single_read<S>(
          with_norm_activation<S>(
              {int_list("normalized_shape", &S::normalized_shape, {1}, "the trailing dims normalized together"),
               number("eps", &S::eps, 1e-5, kAtLeastZero, "added to the variance"),
               flag("elementwise_affine", &S::elementwise_affine, true, "learned scale and shift of normalized_shape")},
              &S::activation),
          &S::single_read),
      [](const S& s, const JsonArgs& args) { check_weight_size(args, s.normalized_shape); }};
  return f;
}

namespace {

LayerState layernorm_state(const LayerNormSpec& s) {
  const int64_t n = s.elementwise_affine ? shape_numel(s.normalized_shape) : 0;
  return {checked_mul(2, n, "LayerNorm state"), n, str("LayerNorm ", shape_str(s.normalized_shape))};
}

}  // namespace

const LayerDescriptor& layernorm_layer() {
  static const LayerDescriptor layer{
      "LayerNorm",
      "norm",
      "normalization over the trailing normalized_shape dims of each sample, as torch.nn.LayerNorm",
      layer_fields<LayerNorm>(),
      make_layer<LayerNorm>,
      {{"normalized_shape", {3, 4, 4}}},
      {2, 3, 4, 4},
      AutocastRule::Float32,
      true,
      layer_state<LayerNorm, layernorm_state>,
      {{{{"normalized_shape", {8}}}, {2, 5, 8}}}};
  return layer;
}

// layers/norm/norm_work.h over one statistic per normalized row.
std::optional<LayerWork> LayerNorm::work(const Tensor& x, const Tensor& y) const {
  return norm_work(x, y, x.numel() / std::max<int64_t>(1, shape_numel(normalized_shape())), weight, bias, true,
                   spec().activation);
}

}  // namespace minidl
