#include "optim/lookahead.h"

#include <cmath>

#include "core/allocator.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"
#include "optim/lookahead_kernels.h"

namespace minidl {

namespace {

// avg = lerp(avg, x, w), elementwise, on the tensors' device; w (= 1 - rho) is read from `weight`,
// a one-element tensor on the same device, when the work runs.
void blend_(Tensor& avg, const Tensor& x, const Tensor& weight) {
  const int64_t n = avg.numel();
  dispatch(
      avg.device(), "lookahead",
      [&] { kernels::lerp_cpu(avg.data<float>(), x.data<float>(), weight.data<float>(), n); },
      [&] { kernels::lerp_cuda(avg.data<float>(), x.data<float>(), weight.data<float>(), n); });
}

}  // namespace

namespace kernels {

void lerp_cpu(float* avg, const float* x, const float* w, int64_t n) {
  const float weight = *w;
  for (int64_t i = 0; i < n; ++i) lerp_update(avg, x, weight, i);
}

}  // namespace kernels

const Fields<LookaheadOptions>& LookaheadOptions::fields() {
  using O = LookaheadOptions;
  static const Fields<O> f{
      {number("start_epochs", &O::start_epochs, 0.0, kAtLeastZero, "epochs before the averaging starts"),
       integer("every_n_steps", &O::every_n_steps, 1, {1}, "steps between two updates of the average"),
       number("decay_base", &O::decay_base, 0.95, kUnitInterval,
              "the average keeps decay_base^every_n_steps * (s / total)^decay_pow of itself at update s"),
       number("decay_pow", &O::decay_pow, 3.0, kAtLeastZero, "see decay_base")}};
  return f;
}

LookaheadOptions LookaheadOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", j.dump());
  JsonArgs args(j, path);
  return read_struct(fields(), args);
}

double LookaheadOptions::decay(int64_t s, int64_t total_steps) const {
  return std::pow(decay_base, static_cast<double>(every_n_steps)) *
         std::pow(static_cast<double>(s) / static_cast<double>(total_steps), decay_pow);
}

Lookahead::Lookahead(std::unique_ptr<Optimizer> inner, std::vector<std::pair<std::string, Tensor>> averaged,
                     LookaheadOptions options, int64_t steps_per_epoch, int64_t total_steps)
    : inner_(std::move(inner)),
      model_(std::move(averaged)),
      options_(options),
      steps_per_epoch_(steps_per_epoch),
      total_steps_(total_steps) {
  MINIDL_CHECK(steps_per_epoch_ > 0 && total_steps_ > 0, "lookahead: needs positive step counts");
  MINIDL_CHECK(!model_.empty(), "lookahead: the model has no float32 tensor to average");
  for (const auto& [name, t] : model_) {
    MINIDL_CHECK(t.defined() && t.dtype() == DType::Float32, "lookahead: '", name, "' is not a float32 tensor");
    average_.push_back(Tensor::zeros(t.shape(), DType::Float32, t.device()));
  }
  blend_weight_ = Tensor::zeros({1}, DType::Float32, model_.front().second.device());
}

Lookahead::Action Lookahead::action_for(int64_t s) const {
  const int64_t epoch = (s - 1) / steps_per_epoch_;
  Action a;
  bool started = started_;
  if (static_cast<double>(epoch) >= options_.start_epochs && s % options_.every_n_steps == 0) {
    a.take = !started;
    a.blend = started;
    a.rho = static_cast<float>(options_.decay(s, total_steps_));
    started = true;
  }
  a.copy_back = a.blend || (started && (s % steps_per_epoch_ == 0 || s == total_steps_));
  return a;
}

int Lookahead::next_kind() const {
  const Action a = action_for(steps_ + 1);
  return (a.take ? 1 : 0) | (a.blend ? 2 : 0) | (a.copy_back ? 4 : 0);
}

// The host decides what this step does (a pure function of the step count); apply() does it.
void Lookahead::prepare(double lr) {
  inner_->prepare(lr);
  prepare_average();
}

void Lookahead::apply() {
  inner_->apply();
  apply_average();
}

void Lookahead::prepare_average() {
  action_ = action_for(++steps_);
  started_ = started_ || action_.take || action_.blend;
  if (action_.blend) {
    const float w = 1.f - action_.rho;
    copy_bytes_async(blend_weight_.raw_data(), blend_weight_.device(), &w, Device::cpu(), sizeof(float));
  }
}

void Lookahead::apply_average() {
  for (size_t i = 0; i < model_.size(); ++i) {
    if (action_.take) average_[i].copy_(model_[i].second);
    if (action_.blend) blend_(average_[i], model_[i].second, blend_weight_);
    if (action_.copy_back) model_[i].second.copy_(average_[i]);
  }
}

std::vector<std::pair<std::string, Tensor>> Lookahead::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out = inner_->state_tensors();
  for (size_t i = 0; i < model_.size(); ++i) out.emplace_back(kStatePrefix + model_[i].first, average_[i]);
  return out;
}

nlohmann::json Lookahead::state_scalars() const {
  return {{"type", "Lookahead"}, {"steps", steps_}, {"started", started_}, {"inner", inner_->state_scalars()}};
}

void Lookahead::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors, const nlohmann::json& scalars) {
  MINIDL_CHECK(scalars.is_object() && scalars.value("type", "") == "Lookahead" && scalars.contains("inner") &&
                   scalars.contains("steps") && scalars["steps"].is_number_integer() && scalars.contains("started") &&
                   scalars["started"].is_boolean(),
               "lookahead: the saved optimizer state has no lookahead average (was the run made without "
               "\"lookahead\"?): ", scalars.dump());
  std::vector<std::pair<std::string, Tensor>> inner;
  std::vector<const Tensor*> found(model_.size(), nullptr);
  for (const auto& [name, t] : tensors) {
    if (name.rfind(kStatePrefix, 0) != 0) {
      inner.emplace_back(name, t);
      continue;
    }
    const std::string target = name.substr(std::string(kStatePrefix).size());
    size_t i = 0;
    while (i < model_.size() && model_[i].first != target) ++i;
    MINIDL_CHECK(i < model_.size(), "lookahead: state tensor '", name, "' names no model tensor");
    MINIDL_CHECK(t.defined() && t.dtype() == DType::Float32 && t.shape() == model_[i].second.shape(),
                 "lookahead: state tensor '", name, "' does not have the shape ", shape_str(model_[i].second.shape()));
    found[i] = &t;
  }
  for (size_t i = 0; i < model_.size(); ++i)
    MINIDL_CHECK(found[i], "lookahead: the saved state has no average of '", model_[i].first, "'");
  inner_->load_state(inner, scalars["inner"]);
  for (size_t i = 0; i < model_.size(); ++i) average_[i].copy_(*found[i]);
  steps_ = scalars["steps"].get<int64_t>();
  started_ = scalars["started"].get<bool>();
}

void Lookahead::to(Device device) {
  inner_->to(device);
  for (Tensor& a : average_) a = a.to(device);
  blend_weight_ = blend_weight_.to(device);
}

}  // namespace minidl
