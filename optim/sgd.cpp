#include "optim/sgd.h"

#include "core/dispatch.h"
#include "core/error.h"
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

SgdOptions SgdOptions::read(JsonArgs& args) {
  SgdOptions o;
  o.lr = args.get_float("lr", o.lr);
  o.momentum = args.get_float("momentum", o.momentum);
  o.nesterov = args.get_bool("nesterov", o.nesterov);
  o.weight_decay = args.get_float("weight_decay", o.weight_decay);
  o.groups = read_param_groups(args);
  MINIDL_CHECK(o.lr >= 0, args.key_path("lr"), ": expected >= 0, got ", o.lr);
  MINIDL_CHECK(o.momentum >= 0 && o.momentum < 1, args.key_path("momentum"),
               ": expected 0 <= momentum < 1, got ", o.momentum);
  MINIDL_CHECK(!o.nesterov || o.momentum > 0, args.key_path("nesterov"),
               ": Nesterov momentum needs momentum > 0");
  MINIDL_CHECK(o.weight_decay >= 0, args.key_path("weight_decay"), ": expected >= 0, got ",
               o.weight_decay);
  return o;
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

nlohmann::json SGD::to_json() const {
  return {{"type", "SGD"},
          {"lr", options_.lr},
          {"momentum", options_.momentum},
          {"nesterov", options_.nesterov},
          {"weight_decay", options_.weight_decay},
          {"groups", groups_json()}};
}

}  // namespace minidl
