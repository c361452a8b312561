#include "optim/grouped_optimizer.h"

#include <map>
#include <set>

#include "core/allocator.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

namespace kernels {

void count_steps_cpu(const StepCounts& c, const std::vector<int32_t>& slots) {
  for (int32_t slot : slots) count_step(c, slot);
}

}  // namespace kernels

GroupedOptimizer::GroupedOptimizer(std::string type, std::vector<NamedParam> params,
                                   std::vector<ParamGroup> groups, double weight_decay,
                                   std::vector<std::string> slot_names, int scalar_width,
                                   const std::string& path)
    : type_(std::move(type)), groups_(std::move(groups)), slot_names_(std::move(slot_names)),
      scalar_width_(scalar_width) {
  params_ = std::move(params);
  std::set<std::string> names;
  std::vector<bool> group_used(groups_.size(), false);
  for (const NamedParam& p : params_) {
    MINIDL_CHECK(p.tensor.defined() && p.tensor.dtype() == DType::Float32, type_, ": parameter '",
                 p.name, "' must be a float32 tensor");
    MINIDL_CHECK(names.insert(p.name).second, type_, ": parameter name '", p.name,
                 "' appears twice");
    Entry e;
    const int g = find_param_group(groups_, p);
    if (g >= 0) {
      group_used[g] = true;
      e.lr_scale = groups_[g].lr_scale;
      e.schedule = groups_[g].schedule.get();
      e.weight_decay = groups_[g].weight_decay.value_or(weight_decay);
    } else {
      e.weight_decay = weight_decay;
    }
    for (size_t s = 0; s < slot_names_.size(); ++s)
      e.slots.push_back(Tensor::zeros(p.tensor.shape(), DType::Float32, p.tensor.device()));
    entries_.push_back(std::move(e));
  }
  for (size_t g = 0; g < groups_.size(); ++g)
    MINIDL_CHECK(group_used[g], path, ".groups[", g, "] ", json_excerpt(groups_[g].to_json()),
                 " matches no parameter (or only parameters an earlier group took)");
  scalars_host_.assign(params_.size() * static_cast<size_t>(scalar_width_), 0.f);
  scalars_ = Tensor::zeros({static_cast<int64_t>(scalars_host_.size())}, DType::Float32,
                           params_.empty() ? Device::cpu() : params_[0].tensor.device());
}

double GroupedOptimizer::param_lr(size_t i, double lr) const {
  const Entry& e = entries_[i];
  if (!e.schedule) return lr * e.lr_scale;
  const StepPosition& at = position("a parameter group's \"schedule\"");
  return base_lr() * e.lr_scale * e.schedule->factor(at.step, at.steps_per_epoch, at.total_steps);
}

void GroupedOptimizer::upload_scalars() {
  copy_bytes_async(scalars_.raw_data(), scalars_.device(), scalars_host_.data(), Device::cpu(),
                   scalars_host_.size() * sizeof(float));
}

std::vector<size_t> GroupedOptimizer::params_with_grad() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].tensor;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    MINIDL_CHECK(g.dtype() == DType::Float32 && g.shape() == p.shape() && g.device() == p.device(),
                 type_, ": the gradient of '", params_[i].name, "' is ", g.str(),
                 ", expected the parameter's shape and device ", p.str());
    out.push_back(i);
  }
  return out;
}

void GroupedOptimizer::count_step(size_t i) {
  if (!skip_flag_ && params_[i].tensor.grad().defined()) ++entries_[i].steps;
}

void GroupedOptimizer::count_steps(const std::vector<size_t>& active, kernels::StepCounts counts) {
  if (!skip_flag_) return;
  counts.steps = steps_device_.data<int32_t>();
  counts.found_inf = skip_flag_;
  const std::vector<int32_t> slots(active.begin(), active.end());
  dispatch(
      steps_device_.device(), "count_steps", [&] { kernels::count_steps_cpu(counts, slots); },
      [&] { kernels::count_steps_cuda(counts, slots); });
}

void GroupedOptimizer::set_skip_flag(const float* found_inf) {
  MINIDL_CHECK(found_inf, type_, ": set_skip_flag needs a flag");
  // A flag set before (e.g. before a to()): its device counts are the current ones.
  if (skip_flag_) {
    const std::vector<int32_t> counts = steps_device_.values<int32_t>();
    for (size_t i = 0; i < entries_.size(); ++i) entries_[i].steps = counts[i];
  }
  std::vector<int32_t> steps;
  for (const Entry& e : entries_) {
    MINIDL_CHECK(e.steps <= INT32_MAX, type_, ": step count ", e.steps, " is beyond the device counter's range");
    steps.push_back(static_cast<int32_t>(e.steps));
  }
  steps_device_ = Tensor::from_vector(steps, {static_cast<int64_t>(steps.size())}, Device::cpu())
                      .to(params_.empty() ? Device::cpu() : params_[0].tensor.device());
  skip_flag_ = found_inf;
}

Device GroupedOptimizer::params_device() const {
  MINIDL_CHECK(!params_.empty(), type_, ": no parameters");
  const Device d = params_[0].tensor.device();
  for (const NamedParam& p : params_)
    MINIDL_CHECK(p.tensor.device() == d, type_, ": parameters are on several devices ('",
                 params_[0].name, "' on ", d.str(), ", '", p.name, "' on ", p.tensor.device().str(), ")");
  return d;
}

std::optional<LayerWork> GroupedOptimizer::work() const {
  LayerWork w;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].tensor;
    if (!p.grad().defined()) continue;
    w.forward.bytes += 2 * work_bytes(p) + 2 * work_bytes(p.grad());
    for (const Tensor& slot : entries_[i].slots) w.forward.bytes += 2 * work_bytes(slot);
    w.forward.flops += flops_per_element() * static_cast<double>(p.numel());
  }
  return w;
}

std::vector<std::pair<std::string, Tensor>> GroupedOptimizer::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t s = 0; s < slot_names_.size(); ++s)
    for (size_t i = 0; i < params_.size(); ++i)
      out.emplace_back(slot_names_[s] + "." + params_[i].name, entries_[i].slots[s]);
  return out;
}

nlohmann::json GroupedOptimizer::state_scalars() const {
  std::vector<int64_t> counts;
  for (const Entry& e : entries_) counts.push_back(e.steps);
  if (skip_flag_) {
    const std::vector<int32_t> device_counts = steps_device_.values<int32_t>();
    counts.assign(device_counts.begin(), device_counts.end());
  }
  nlohmann::json steps = nlohmann::json::object();
  for (size_t i = 0; i < params_.size(); ++i) steps[params_[i].name] = counts[i];
  return {{"type", type_}, {"steps", steps}};
}

void GroupedOptimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const nlohmann::json& scalars) {
  MINIDL_CHECK(scalars.is_object() && scalars.value("type", "") == type_, type_,
               ": the saved optimizer state is not ", type_, " state: ", json_excerpt(scalars));
  const nlohmann::json& steps = scalars.at("steps");
  MINIDL_CHECK(steps.is_object() && steps.size() == params_.size(), type_, ": the saved state has ",
               steps.size(), " parameters, this optimizer has ", params_.size());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].name] = i;
  std::vector<int64_t> new_steps(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = steps.find(params_[i].name);
    MINIDL_CHECK(it != steps.end() && it->is_number_integer() && it->get<int64_t>() >= 0, type_,
                 ": the saved state has no step count for parameter '", params_[i].name, "'");
    MINIDL_CHECK(!skip_flag_ || it->get<int64_t>() <= INT32_MAX, type_, ": step count ", it->get<int64_t>(),
                 " of parameter '", params_[i].name, "' is beyond the device counter's range");
    new_steps[i] = it->get<int64_t>();
  }
  MINIDL_CHECK(tensors.size() == slot_names_.size() * params_.size(), type_, ": the saved state has ",
               tensors.size(), " tensors, expected ", slot_names_.size() * params_.size());
  // Check everything before changing anything, so a bad checkpoint leaves the state untouched.
  std::vector<std::vector<const Tensor*>> found(params_.size(),
                                                std::vector<const Tensor*>(slot_names_.size()));
  for (const auto& [name, t] : tensors) {
    size_t slot = slot_names_.size();
    for (size_t s = 0; s < slot_names_.size(); ++s)
      if (name.rfind(slot_names_[s] + ".", 0) == 0) slot = s;
    MINIDL_CHECK(slot < slot_names_.size(), type_, ": unexpected state tensor '", name, "'");
    auto it = index.find(name.substr(slot_names_[slot].size() + 1));
    MINIDL_CHECK(it != index.end(), type_, ": state tensor '", name, "' names no parameter");
    const Tensor& p = params_[it->second].tensor;
    MINIDL_CHECK(t.defined() && t.dtype() == DType::Float32 && t.shape() == p.shape(), type_,
                 ": state tensor '", name, "' is ", t.defined() ? t.str() : std::string("undefined"),
                 ", expected shape ", shape_str(p.shape()));
    MINIDL_CHECK(found[it->second][slot] == nullptr, type_, ": state tensor '", name, "' appears twice");
    found[it->second][slot] = &t;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    for (size_t s = 0; s < slot_names_.size(); ++s) entries_[i].slots[s].copy_(*found[i][s]);
    entries_[i].steps = new_steps[i];
  }
  if (skip_flag_) {
    const std::vector<int32_t> counts(new_steps.begin(), new_steps.end());
    steps_device_.copy_(Tensor::from_vector(counts, {static_cast<int64_t>(counts.size())}, Device::cpu()));
  }
}

void GroupedOptimizer::to(Device device) {
  for (const NamedParam& p : params_)
    MINIDL_CHECK(p.tensor.device() == device, type_, ": to(", device.str(), ") but parameter '", p.name,
                 "' is on ", p.tensor.device().str(),
                 " (the optimizer updates the tensors it was built with: move the model first, "
                 "then build the optimizer)");
  for (Entry& e : entries_)
    for (Tensor& s : e.slots) s = s.to(device);
  scalars_ = scalars_.to(device);
  if (skip_flag_) steps_device_ = steps_device_.to(device);
}

}  // namespace minidl

