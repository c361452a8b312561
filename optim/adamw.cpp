#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/allocator.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"
#include "core/json_limits.h"
#include "optim/update_kernels.h"

namespace minidl {

namespace kernels {

void adamw_step_cpu(const AdamwTensor& t, const AdamwHyper& h, const float* skip) {
  if (skip && *skip != 0.f) return;
#pragma omp parallel for schedule(static) if (t.n > 65536)
  for (int64_t i = 0; i < t.n; ++i) adamw_update(t, h, i);
}

}  // namespace kernels

// PyTorch's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 1e-2).
const Fields<AdamwOptions>& AdamwOptions::fields() {
  using O = AdamwOptions;
  static const Fields<O> f{[] {
    Field<O> betas = custom_field<O>("betas", "floats", nlohmann::json::array({0.9, 0.999}), "each in [0, 1)",
                                     "the moments' decay rates [beta1, beta2]");
    betas.read = [](JsonArgs& a, const std::string& key, O& o) {
      o.beta1 = 0.9;
      o.beta2 = 0.999;
      if (!a.has(key)) return;
      const nlohmann::json& b = a.get_json(key);
      MINIDL_CHECK(b.is_array() && b.size() == 2 && b[0].is_number() && b[1].is_number(), a.key_path(key),
                   ": expected two numbers [beta1, beta2], got ", json_excerpt(b));
      o.beta1 = b[0].get<double>();
      o.beta2 = b[1].get<double>();
      MINIDL_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, a.key_path(key),
                   ": expected each in [0, 1), got [", o.beta1, ", ", o.beta2, "]");
    };
    betas.write = [](const O& o) { return std::optional<nlohmann::json>(nlohmann::json::array({o.beta1, o.beta2})); };
    return std::vector<Field<O>>{
        number("lr", &O::lr, 1e-3, kAtLeastZero, "the learning rate; the schedule's factor multiplies it"), betas,
        number("eps", &O::eps, 1e-8, {0, true, kUnbounded, false}, "added to the denominator"),
        number("weight_decay", &O::weight_decay, 1e-2, kAtLeastZero, "decoupled weight decay, as torch.optim.AdamW"),
        param_groups_field(&O::groups)};
  }()};
  return f;
}

AdamW::AdamW(std::vector<NamedParam> params, AdamwOptions options, const std::string& path)
    : GroupedOptimizer("AdamW", std::move(params), options.groups, options.weight_decay,
                       {"exp_avg", "exp_avg_sq"}, kernels::kAdamwScalars, path),
      options_(std::move(options)) {}

// As SGD::prepare: a row for every parameter; the bias corrections use the step count this
// update gives the parameter. Under a skip flag that count is the device's, so the device forms
// them (count_steps in apply()) from each parameter's group lr, uploaded here in double.
void AdamW::prepare(double lr) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Entry& e = entries_[i];
    count_step(i);
    const double group_lr = param_lr(i, lr);
    float* row = scalar_row(i);
    row[0] = static_cast<float>(1 - group_lr * e.weight_decay);
    if (skip_flag())
      group_lr_host_[i] = group_lr;
    else
      kernels::adamw_bias_corrections(group_lr, options_.beta1, options_.beta2, e.steps, row);
  }
  upload_scalars();
  if (skip_flag() && !params_.empty())
    copy_bytes_async(group_lr_.get(), params_device(), group_lr_host_.data(), Device::cpu(),
                     group_lr_host_.size() * sizeof(double));
}

void AdamW::apply() {
  const std::vector<size_t> active = params_with_grad();
  if (active.empty()) return;
  const Device device = params_device();
  kernels::StepCounts counts{};
  counts.adamw_table = mutable_scalar_table();
  counts.lr = static_cast<const double*>(group_lr_.get());
  counts.beta1 = options_.beta1;
  counts.beta2 = options_.beta2;
  count_steps(active, counts);
  const kernels::AdamwHyper hyper{static_cast<float>(1 - options_.beta1),
                                  static_cast<float>(options_.beta2),
                                  static_cast<float>(1 - options_.beta2),
                                  static_cast<float>(options_.eps)};
  std::vector<kernels::AdamwTensor> tensors;
  for (size_t i : active) {
    const Tensor& p = params_[i].tensor;
    const float* row = scalar_row(i);
    tensors.push_back({p.data<float>(), p.grad().data<float>(), entries_[i].slots[0].data<float>(),
                       entries_[i].slots[1].data<float>(), p.numel(), row[0], row[1], row[2],
                       static_cast<int32_t>(i)});
  }
  dispatch(
      device, "adamw_step",
      [&] {
        // From the table, as the kernel reads it: under a skip flag count_steps wrote its corrections there.
        for (kernels::AdamwTensor t : tensors) {
          kernels::load_scalars(t, scalar_table());
          kernels::adamw_step_cpu(t, hyper, skip_flag());
        }
      },
      [&] { kernels::adamw_step_cuda(tensors, hyper, scalar_table(), skip_flag()); });
}

void AdamW::set_skip_flag(const float* found_inf) {
  GroupedOptimizer::set_skip_flag(found_inf);
  group_lr_host_.assign(params_.size(), 0.0);
  if (!params_.empty()) group_lr_ = allocate(params_.size() * sizeof(double), params_device());
}

void AdamW::to(Device device) {
  GroupedOptimizer::to(device);
  if (group_lr_) group_lr_ = allocate(group_lr_host_.size() * sizeof(double), device);  // rewritten by each prepare()
}

nlohmann::json AdamW::to_json() const { return optimizer_json(adamw_optimizer(), options_); }

const OptimizerDescriptor& adamw_optimizer() {
  static const OptimizerDescriptor d =
      describe_optimizer<AdamW, AdamwOptions>("AdamW", "Adam with decoupled weight decay, as torch.optim.AdamW");
  return d;
}

}  // namespace minidl
