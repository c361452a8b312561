// The BatchNorm2d module and its factory; the op is batch_norm (layers/norm/norm.h).
#include "layers/norm/batchnorm2d.h"

#include "core/checked_math.h"
#include "core/error.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_work.h"
#include "layers/registry.h"

namespace minidl {

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum, bool weight, bool bias,
                         norm::NormActivation activation, bool sync, int spatial_dims)
    : num_features_(num_features),
      eps_(eps),
      momentum_(momentum),
      activation_(activation),
      sync_(sync),
      spatial_dims_(spatial_dims) {
  MINIDL_CHECK(spatial_dims == 2 || spatial_dims == 3, "BatchNorm: spatial_dims must be 2 or 3, got ", spatial_dims);
  MINIDL_CHECK(num_features >= 1, type_name(), ": num_features must be >= 1, got ", num_features);
  MINIDL_CHECK(momentum >= 0 && momentum <= 1, type_name(), ": momentum must be in [0, 1], got ", momentum);
  if (weight) {
    this->weight = Tensor::full({num_features}, 1.f);
    register_parameter("weight", &this->weight);
  }
  if (bias) {
    this->bias = Tensor::zeros({num_features});
    register_parameter("bias", &this->bias);
  }
  running_mean = Tensor::zeros({num_features});
  running_var = Tensor::full({num_features}, 1.f);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 2 + spatial_dims_ && x.size(1) == num_features_, label(), ": expected input (N, ",
               num_features_, spatial_dims_ == 3 ? ", D, H, W), got " : ", H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (sync_ && sync_group_ && is_training())
    return sync_batch_norm(x, running_mean, running_var, weight, bias, sync_group_, momentum_, eps_, activation_);
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum_, eps_, activation_);
}

std::string BatchNorm2d::describe() const {
  return str(type_name(), " ", num_features_, norm_activation_suffix(activation_), sync_ ? " sync" : "");
}

nlohmann::json BatchNorm2d::to_json() const {
  nlohmann::json j = {{"type", type_name()}, {"num_features", num_features_}, {"eps", eps_}, {"momentum", momentum_}};
  if (weight.defined() == bias.defined()) {
    j["affine"] = weight.defined();
  } else {
    j["weight"] = weight.defined();
    j["bias"] = bias.defined();
  }
  write_norm_activation(j, activation_);
  if (sync_) j["sync"] = true;  // only when on: configs without it keep their exact JSON
  return j;
}

namespace {

struct BatchNorm2dSpec {
  int64_t num_features;
  double eps, momentum;
  bool weight, bias;
  norm::NormActivation activation;
  bool sync;
};

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
BatchNorm2dSpec read_batchnorm2d(LayerArgs& args) {
  const int64_t num_features = args.get_int("num_features");
  MINIDL_CHECK(num_features >= 1, args.key_path("num_features"), ": must be >= 1, got ", num_features);
  const double eps = args.get_float("eps", 1e-5);
  MINIDL_CHECK(eps >= 0, args.key_path("eps"), ": must be >= 0, got ", eps);
  const double momentum = args.get_float("momentum", 0.1);
  MINIDL_CHECK(momentum >= 0 && momentum <= 1, args.key_path("momentum"), ": must be in [0, 1], got ", momentum);
  const bool affine = args.get_bool("affine", true);
  const bool weight = args.get_bool("weight", affine);
  const bool bias = args.get_bool("bias", affine);
  const norm::NormActivation activation = read_norm_activation(args);
  const bool sync = args.get_bool("sync", false);
  args.finish();
  return {num_features, eps, momentum, weight, bias, activation, sync};
}

std::shared_ptr<Module> make_batchnorm2d(LayerArgs& args) {
  const BatchNorm2dSpec s = read_batchnorm2d(args);
  return std::make_shared<BatchNorm2d>(s.num_features, s.eps, s.momentum, s.weight, s.bias, s.activation, s.sync);
}

std::shared_ptr<Module> make_batchnorm3d(LayerArgs& args) {
  const BatchNorm2dSpec s = read_batchnorm2d(args);
  return std::make_shared<BatchNorm2d>(s.num_features, s.eps, s.momentum, s.weight, s.bias, s.activation, s.sync, 3);
}

// weight and bias (when learned), running_mean and running_var: one value per channel each.
LayerState batchnorm2d_state(LayerArgs& args) {
  const BatchNorm2dSpec s = read_batchnorm2d(args);
  const int64_t tensors = 2 + (s.weight ? 1 : 0) + (s.bias ? 1 : 0);
  return {checked_mul(tensors, s.num_features, "BatchNorm2d state"), s.num_features,
          str("BatchNorm2d ", s.num_features)};
}

LayerState batchnorm3d_state(LayerArgs& args) {
  LayerState state = batchnorm2d_state(args);
  state.description.replace(0, 11, "BatchNorm3d");
  return state;
}

// The keys of BatchNorm2d and BatchNorm3d.
std::vector<LayerKey> batchnorm_keys() {
  return {required_key("num_features", "int", "channels C, >= 1"),
          default_key("eps", "float", 1e-5, "added to the variance, >= 0"),
          default_key("momentum", "float", 0.1, "running statistics' update rate, in [0, 1]"),
          default_key("affine", "bool", true, "learned scale and shift"),
          derived_key("weight", "bool", "learned scale; defaults to affine"),
          derived_key("bias", "bool", "learned shift; defaults to affine"),
          norm_relu_key(),
          norm_gelu_key(),
          default_key("sync", "bool", false,
                      "data parallel: training statistics over every rank's batch (SyncBatchNorm); no effect on one "
                      "process")};
}

}  // namespace

const LayerDescriptor& batchnorm2d_layer() {
  static const LayerDescriptor layer{
      "BatchNorm2d",
      "norm",
      "batch normalization per channel of (N, C, H, W) with running statistics, as torch.nn.BatchNorm2d",
      batchnorm_keys(),
      make_batchnorm2d,
      {{"num_features", 3}},
      {2, 3, 4, 4},
      AutocastRule::InputType,
      true,
      batchnorm2d_state};
  return layer;
}

const LayerDescriptor& batchnorm3d_layer() {
  static const LayerDescriptor layer{
      "BatchNorm3d",
      "norm",
      "batch normalization per channel of (N, C, D, H, W) with running statistics, as torch.nn.BatchNorm3d",
      batchnorm_keys(),
      make_batchnorm3d,
      {{"num_features", 3}},
      {2, 3, 2, 4, 4},
      AutocastRule::InputType,
      false,
      batchnorm3d_state};
  return layer;
}

// layers/norm/norm_work.h over C channels; training also reads and writes the running statistics.
std::optional<LayerWork> BatchNorm2d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w = norm_work(x, y, num_features_, weight, bias, is_training(), activation_);
  if (is_training()) w.forward.bytes += 2 * (work_bytes(running_mean) + work_bytes(running_var));
  return w;
}

}  // namespace minidl
