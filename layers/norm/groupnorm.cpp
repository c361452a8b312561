// The GroupNorm module and its spec; the op is group_norm (layers/norm/norm.h).
#include "layers/norm/groupnorm.h"

#include "core/checked_math.h"
#include "core/error.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_work.h"
#include "layers/registry.h"

namespace minidl {

GroupNorm::GroupNorm(const GroupNormSpec& spec) : Layer(groupnorm_layer(), spec) {
  const int64_t num_groups = spec.num_groups, num_channels = spec.num_channels;
  MINIDL_CHECK(num_groups >= 1 && num_channels >= 1 && num_channels % num_groups == 0,
               "GroupNorm: num_channels (", num_channels, ") must be a positive multiple of num_groups (", num_groups,
               ")");
  if (spec.affine) {
    weight = Tensor::full({num_channels}, 1.f);
    bias = Tensor::zeros({num_channels});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == num_channels(), label(), ": expected input (N, ",
               num_channels(), ", *), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return group_norm(x, num_groups(), weight, bias, spec().eps, spec().activation, spec().single_read);
}

std::string GroupNorm::describe() const {
  return str("GroupNorm ", num_groups(), "x", num_channels(), norm_activation_suffix(spec().activation));
}

const Fields<GroupNormSpec>& GroupNormSpec::fields() {
  using S = GroupNormSpec;
  static const Fields<S> f{
      with_single_read<S>(
          with_norm_activation<S>({integer("num_groups", &S::num_groups, kRequired, {1}, "groups"),
                                   integer("num_channels", &S::num_channels, kRequired, {1},
                                           "channels C, a positive multiple of num_groups"),
                                   number("eps", &S::eps, 1e-5, kAtLeastZero, "added to the variance"),
                                   flag("affine", &S::affine, true, "learned per-channel scale and shift")},
                                  &S::activation),
          &S::single_read),
      [](const S& s, const JsonArgs& args) {
        MINIDL_CHECK(s.num_channels % s.num_groups == 0, args.key_path("num_channels"),
                     ": must be a positive multiple of num_groups (", s.num_groups, "), got ", s.num_channels);
      }};
  return f;
}

namespace {

LayerState groupnorm_state(const GroupNormSpec& s) {
  return {s.affine ? checked_mul(2, s.num_channels, "GroupNorm state") : 0, s.affine ? s.num_channels : 0,
          str("GroupNorm ", s.num_groups, "x", s.num_channels)};
}

}  // namespace

const LayerDescriptor& groupnorm_layer() {
  static const LayerDescriptor layer{"GroupNorm",
                                     "norm",
                                     "normalization over groups of channels of each sample, as torch.nn.GroupNorm",
                                     layer_fields<GroupNorm>(),
                                     make_layer<GroupNorm>,
                                     {{"num_groups", 2}, {"num_channels", 4}},
                                     {2, 4, 3, 3},
                                     AutocastRule::Float32,
                                     true,
                                     layer_state<GroupNorm, groupnorm_state>,
                                     {{{{"num_groups", 3}, {"num_channels", 6}, {"relu", true}}, {2, 6, 3, 5}}}};
  return layer;
}

// layers/norm/norm_work.h over N * groups statistics.
std::optional<LayerWork> GroupNorm::work(const Tensor& x, const Tensor& y) const {
  return norm_work(x, y, x.size(0) * num_groups(), weight, bias, true, spec().activation);
}

}  // namespace minidl
