// The BatchNorm2d module and its factory; the op is batch_norm (layers/norm/norm.h).
#include "layers/norm/batchnorm2d.h"

#include "core/checked_math.h"
#include "core/error.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_activation.h"
#include "layers/norm/norm_work.h"
#include "layers/registry.h"

namespace minidl {

BatchNorm2d::BatchNorm2d(const LayerDescriptor& descriptor, const BatchNorm2dSpec& spec, int spatial_dims)
    : Layer(descriptor, spec), spatial_dims_(spatial_dims) {
  const int64_t num_features = spec.num_features;
  MINIDL_CHECK(num_features >= 1, descriptor.name, ": num_features must be >= 1, got ", num_features);
  MINIDL_CHECK(spec.momentum >= 0 && spec.momentum <= 1, descriptor.name, ": momentum must be in [0, 1], got ",
               spec.momentum);
  if (spec.weight) {
    weight = Tensor::full({num_features}, 1.f);
    register_parameter("weight", &weight);
  }
  if (spec.bias) {
    bias = Tensor::zeros({num_features});
    register_parameter("bias", &bias);
  }
  running_mean = Tensor::zeros({num_features});
  running_var = Tensor::full({num_features}, 1.f);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 2 + spatial_dims_ && x.size(1) == num_features(), label(),
               ": expected input (N, ", num_features(), spatial_dims_ == 3 ? ", D, H, W), got " : ", H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  const BatchNorm2dSpec& s = spec();
  if (s.sync && sync_group_ && is_training())
    return sync_batch_norm(x, running_mean, running_var, weight, bias, sync_group_, s.momentum, s.eps, s.activation,
                           s.single_read);
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), s.momentum, s.eps, s.activation,
                    s.single_read);
}

std::string BatchNorm2d::describe() const {
  return str(type_name(), " ", num_features(), norm_activation_suffix(activation()), sync() ? " sync" : "");
}

namespace {

bool affine_default(const BatchNorm2dSpec& s) { return s.affine; }

}  // namespace

// "affine" is written back while weight and bias agree, "weight" and "bias" when they differ;
// "sync" only when on, so configs without it keep their exact JSON.
const Fields<BatchNorm2dSpec>& BatchNorm2dSpec::fields() {
  using S = BatchNorm2dSpec;
  static const Fields<S> f{[] {
    Field<S> affine = flag("affine", &S::affine, true, "learned scale and shift");
    affine.write = [](const S& s) {
      return s.weight == s.bias ? std::optional<nlohmann::json>(s.weight) : std::nullopt;
    };
    Field<S> weight =
        derived(flag("weight", &S::weight, kRequired, "learned scale; defaults to affine"), &S::weight, affine_default);
    Field<S> bias =
        derived(flag("bias", &S::bias, kRequired, "learned shift; defaults to affine"), &S::bias, affine_default);
    for (Field<S>* one : {&weight, &bias}) {
      auto write = one->write;
      one->write = [write](const S& s) { return s.weight != s.bias ? write(s) : std::nullopt; };
    }
    std::vector<Field<S>> rows{integer("num_features", &S::num_features, kRequired, {1}, "channels C"),
                               number("eps", &S::eps, 1e-5, kAtLeastZero, "added to the variance"),
                               number("momentum", &S::momentum, 0.1, kUnitInterval, "running statistics' update rate"),
                               affine,
                               weight,
                               bias};
    for (Field<S>& r : norm_activation_fields(&S::activation)) rows.push_back(r);
    rows.push_back(written_when_set(flag("sync", &S::sync, false,
                                         "data parallel: training statistics over every rank's batch (SyncBatchNorm); "
                                         "no effect on one process")));
    return with_single_read(std::move(rows), &S::single_read);
  }()};
  return f;
}

namespace {

// weight and bias (when learned), running_mean and running_var: one value per channel each.
LayerState batchnorm2d_state(const BatchNorm2dSpec& s) {
  const int64_t tensors = 2 + (s.weight ? 1 : 0) + (s.bias ? 1 : 0);
  return {checked_mul(tensors, s.num_features, "BatchNorm2d state"), s.num_features,
          str("BatchNorm2d ", s.num_features)};
}

LayerState batchnorm3d_state(const BatchNorm2dSpec& s) {
  LayerState state = batchnorm2d_state(s);
  state.description = str("BatchNorm3d ", s.num_features);
  return state;
}

}  // namespace

const LayerDescriptor& batchnorm2d_layer() {
  static const LayerDescriptor layer{
      "BatchNorm2d",
      "norm",
      "batch normalization per channel of (N, C, H, W) with running statistics, as torch.nn.BatchNorm2d",
      layer_fields<BatchNorm2d>(),
      make_layer<BatchNorm2d>,
      {{"num_features", 3}},
      {2, 3, 4, 4},
      AutocastRule::InputType,
      true,
      layer_state<BatchNorm2d, batchnorm2d_state>,
      {{{{"num_features", 5}, {"relu", true}}, {3, 5, 4, 3}},
       {{{"num_features", 4}, {"gelu", true}, {"affine", false}}, {2, 4, 3, 5}}}};
  return layer;
}

const LayerDescriptor& batchnorm3d_layer() {
  static const LayerDescriptor layer{
      "BatchNorm3d",
      "norm",
      "batch normalization per channel of (N, C, D, H, W) with running statistics, as torch.nn.BatchNorm3d",
      layer_fields<BatchNorm3d>(),
      make_layer<BatchNorm3d>,
      {{"num_features", 3}},
      {2, 3, 2, 4, 4},
      AutocastRule::InputType,
      true,
      layer_state<BatchNorm3d, batchnorm3d_state>,
      {{{{"num_features", 4}, {"relu", true}, {"affine", false}}, {2, 4, 3, 2, 3}}}};
  return layer;
}

// layers/norm/norm_work.h over C channels; training also reads and writes the running statistics.
std::optional<LayerWork> BatchNorm2d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w = norm_work(x, y, num_features(), weight, bias, is_training(), activation());
  if (is_training()) w.forward.bytes += 2 * (work_bytes(running_mean) + work_bytes(running_var));
  return w;
}

}  // namespace minidl
