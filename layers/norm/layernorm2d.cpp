// The LayerNorm2d module and its factory; the op is layer_norm_2d (layers/norm/norm.h).
#include "layers/norm/layernorm2d.h"

#include "core/checked_math.h"
#include "core/error.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_work.h"
#include "layers/registry.h"

namespace minidl {

LayerNorm2d::LayerNorm2d(const LayerNorm2dSpec& spec) : Layer(layernorm2d_layer(), spec) {
  MINIDL_CHECK(spec.num_channels >= 1, "LayerNorm2d: num_channels must be >= 1, got ", spec.num_channels);
  if (spec.affine) {
    weight = Tensor::full({spec.num_channels}, 1.f);
    bias = Tensor::zeros({spec.num_channels});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

Tensor LayerNorm2d::forward(const Tensor& x) {
  const int64_t c = spec().num_channels;
  MINIDL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == c, label(), ": expected input (N, ", c, ", H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return layer_norm_2d(x, weight, bias, spec().eps, spec().activation, spec().single_read);
}

std::string LayerNorm2d::describe() const {
  return str("LayerNorm2d ", spec().num_channels, norm_activation_suffix(spec().activation));
}

const Fields<LayerNorm2dSpec>& LayerNorm2dSpec::fields() {
  using S = LayerNorm2dSpec;
  static const Fields<S> f{with_single_read<S>(
      with_norm_activation<S>({integer("num_channels", &S::num_channels, kRequired, {1, kMaxFeatures}, "channels C"),
                               number("eps", &S::eps, 1e-6, kAtLeastZero, "added to the variance"),
                               flag("affine", &S::affine, true, "learned per-channel scale and shift")},
                              &S::activation),
      &S::single_read)};
  return f;
}

namespace {

LayerState layernorm2d_state(const LayerNorm2dSpec& s) {
  const int64_t n = s.affine ? s.num_channels : 0;
  return {checked_mul(2, n, "LayerNorm2d state"), n, str("LayerNorm2d ", s.num_channels)};
}

}  // namespace

const LayerDescriptor& layernorm2d_layer() {
  static const LayerDescriptor layer{
      "LayerNorm2d",
      "norm",
      "normalization over the channels of each pixel of (N, C, H, W), as ConvNeXt's LayerNorm and timm's LayerNorm2d",
      layer_fields<LayerNorm2d>(),
      make_layer<LayerNorm2d>,
      {{"num_channels", 3}},
      {2, 3, 4, 4},
      AutocastRule::InputType,
      true,
      layer_state<LayerNorm2d, layernorm2d_state>};
  return layer;
}

// layers/norm/norm_work.h over one statistic per pixel.
std::optional<LayerWork> LayerNorm2d::work(const Tensor& x, const Tensor& y) const {
  return norm_work(x, y, x.size(0) * x.size(2) * x.size(3), weight, bias, true, spec().activation);
}

}  // namespace minidl
