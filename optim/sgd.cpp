#include "optim/sgd.h"

#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"
#include "optim/update_kernels.h"

namespace minidl {

namespace kernels {

void sgd_step_cpu(const SgdTensor& t, const SgdHyper& h, const float* skip) {
  if (skip && *skip != 0.f) return;
#pragma omp parallel for schedule(static) if (t.n > 65536)
  for (int64_t i = 0; i < t.n; ++i) sgd_update(t, h, i);
}

}  // namespace kernels

// PyTorch's defaults (lr 1e-3, no momentum, no weight decay).
const Fields<SgdOptions>& SgdOptions::fields() {
  using O = SgdOptions;
  static const Fields<O> f{
      {number("lr", &O::lr, 1e-3, kAtLeastZero, "the learning rate; the schedule's factor multiplies it"),
       number("momentum", &O::momentum, 0.0, {0, false, 1, true}, "momentum factor"),
       flag("nesterov", &O::nesterov, false, "Nesterov momentum (needs momentum > 0)"),
       number("weight_decay", &O::weight_decay, 0.0, kAtLeastZero,
              "L2 penalty added to the gradient, as torch.optim.SGD"),
       param_groups_field(&O::groups)},
      [](const O& o, const JsonArgs& args) {
        MINIDL_CHECK(!o.nesterov || o.momentum > 0, args.key_path("nesterov"),
                     ": Nesterov momentum needs momentum > 0");
      }};
  return f;
}

SGD::SGD(std::vector<NamedParam> params, SgdOptions options, const std::string& path)
    : GroupedOptimizer("SGD", std::move(params), options.groups, options.weight_decay,
                       options.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                             : std::vector<std::string>{},
                       kernels::kSgdScalars, path),
      options_(std::move(options)) {}

// Every parameter gets its row. The step count goes up for the parameters that have a gradient
// now: step() runs after the backward, and a graphed step's prepare() runs before the replay,
// when the gradients of the earlier steps are still defined (zero_grad zeroes them in place), so
// both count the same parameters that apply() updates.
void SGD::prepare(double lr) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Entry& e = entries_[i];
    float* row = scalar_row(i);
    row[0] = static_cast<float>(param_lr(i, lr));
    row[1] = static_cast<float>(e.weight_decay);
    count_step(i);
  }
  upload_scalars();
}

void SGD::apply() {
  const std::vector<size_t> active = params_with_grad();
  if (active.empty()) return;
  const Device device = params_device();
  count_steps(active, {});
  const kernels::SgdHyper hyper{static_cast<float>(options_.momentum), options_.nesterov ? 1 : 0};
  std::vector<kernels::SgdTensor> tensors;
  for (size_t i : active) {
    const Tensor& p = params_[i].tensor;
    const float* row = scalar_row(i);
    tensors.push_back({p.data<float>(), p.grad().data<float>(),
                       entries_[i].slots.empty() ? nullptr : entries_[i].slots[0].data<float>(), p.numel(),
                       row[0], row[1], static_cast<int32_t>(i)});
  }
  dispatch(
      device, "sgd_step",
      [&] { for (const kernels::SgdTensor& t : tensors) kernels::sgd_step_cpu(t, hyper, skip_flag()); },
      [&] { kernels::sgd_step_cuda(tensors, hyper, scalar_table(), skip_flag()); });
}

nlohmann::json SGD::to_json() const { return optimizer_json(sgd_optimizer(), options_); }

const OptimizerDescriptor& sgd_optimizer() {
  static const OptimizerDescriptor d =
      describe_optimizer<SGD, SgdOptions>("SGD", "stochastic gradient descent with momentum, as torch.optim.SGD");
  return d;
}

}  // namespace minidl
