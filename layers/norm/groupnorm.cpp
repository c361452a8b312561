// The GroupNorm module and its factory; the op is group_norm (layers/norm/norm.h).
#include "layers/norm/groupnorm.h"

#include "core/checked_math.h"
#include "core/error.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_work.h"
#include "layers/registry.h"

namespace minidl {

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine,
                     norm::NormActivation activation)
    : num_groups_(num_groups), num_channels_(num_channels), eps_(eps), activation_(activation) {
  MINIDL_CHECK(num_groups >= 1 && num_channels >= 1 && num_channels % num_groups == 0,
               "GroupNorm: num_channels (", num_channels, ") must be a positive multiple of num_groups (", num_groups,
               ")");
  if (affine) {
    weight = Tensor::full({num_channels}, 1.f);
    bias = Tensor::zeros({num_channels});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == num_channels_,
               label(), ": expected input (N, ",
               num_channels_, ", *), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return group_norm(x, num_groups_, weight, bias, eps_, activation_);
}

std::string GroupNorm::describe() const {
  return str("GroupNorm ", num_groups_, "x", num_channels_, norm_activation_suffix(activation_));
}

nlohmann::json GroupNorm::to_json() const {
  nlohmann::json j = {{"type", "GroupNorm"}, {"num_groups", num_groups_}, {"num_channels", num_channels_},
                      {"eps", eps_},         {"affine", weight.defined()}};
  write_norm_activation(j, activation_);
  return j;
}

namespace {

struct GroupNormSpec {
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  norm::NormActivation activation;
};

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
GroupNormSpec read_groupnorm(LayerArgs& args) {
  const int64_t num_groups = args.get_int("num_groups");
  const int64_t num_channels = args.get_int("num_channels");
  MINIDL_CHECK(num_groups >= 1, args.key_path("num_groups"), ": must be >= 1, got ", num_groups);
  MINIDL_CHECK(num_channels >= 1 && num_channels % num_groups == 0, args.key_path("num_channels"),
               ": must be a positive multiple of num_groups (", num_groups, "), got ", num_channels);
  const double eps = args.get_float("eps", 1e-5);
  MINIDL_CHECK(eps >= 0, args.key_path("eps"), ": must be >= 0, got ", eps);
  const bool affine = args.get_bool("affine", true);
  const norm::NormActivation activation = read_norm_activation(args);
  args.finish();
  return {num_groups, num_channels, eps, affine, activation};
}

std::shared_ptr<Module> make_groupnorm(LayerArgs& args) {
  const GroupNormSpec s = read_groupnorm(args);
  return std::make_shared<GroupNorm>(s.num_groups, s.num_channels, s.eps, s.affine, s.activation);
}

LayerState groupnorm_state(LayerArgs& args) {
  const GroupNormSpec s = read_groupnorm(args);
  return {s.affine ? checked_mul(2, s.num_channels, "GroupNorm state") : 0, s.affine ? s.num_channels : 0,
          str("GroupNorm ", s.num_groups, "x", s.num_channels)};
}

}  // namespace

const LayerDescriptor& groupnorm_layer() {
  static const LayerDescriptor layer{
      "GroupNorm",
      "norm",
      "normalization over groups of channels of each sample, as torch.nn.GroupNorm",
      {required_key("num_groups", "int", "groups, >= 1"),
       required_key("num_channels", "int", "channels C, a positive multiple of num_groups"),
       default_key("eps", "float", 1e-5, "added to the variance, >= 0"),
       default_key("affine", "bool", true, "learned per-channel scale and shift"),
       norm_activation_key(norm::NormActivation::ReLU), norm_activation_key(norm::NormActivation::GELU),
       norm_activation_key(norm::NormActivation::SiLU), norm_activation_key(norm::NormActivation::Hardswish),
       norm_activation_key(norm::NormActivation::Sigmoid)},
      make_groupnorm,
      {{"num_groups", 2}, {"num_channels", 4}},
      {2, 4, 3, 3},
      AutocastRule::Float32,
      true,
      groupnorm_state,
      {{{{"num_groups", 3}, {"num_channels", 6}, {"relu", true}}, {2, 6, 3, 5}}}};
  return layer;
}

// layers/norm/norm_work.h over N * groups statistics.
std::optional<LayerWork> GroupNorm::work(const Tensor& x, const Tensor& y) const {
  return norm_work(x, y, x.size(0) * num_groups_, weight, bias, true, activation_);
}

}  // namespace minidl
