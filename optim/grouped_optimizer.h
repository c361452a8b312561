// What SGD and AdamW share: each parameter's group settings (lr scale, weight decay), its step
// count, and its state tensors ("slots": momentum_buffer; exp_avg, exp_avg_sq), allocated at
// construction on the parameters' device. State is saved under "<slot>.<parameter name>", the
// step counts as scalars, and restored exactly. It also keeps the table of per-step scalars that
// prepare() fills and apply() reads (one row of `scalar_width` floats per parameter). Under a skip
// flag (Optimizer::set_skip_flag) the step counts move to the device, where the flag is.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "optim/param_groups.h"
#include "optim/update_kernels.h"

namespace minidl {

class GroupedOptimizer : public Optimizer {
 public:
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  nlohmann::json state_scalars() const override;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const nlohmann::json& scalars) override;
  void to(Device device) override;
  void set_skip_flag(const float* found_inf) override;
  // Each parameter with a gradient: it, its gradient and its state read, it and its state
  // written, the gradient zeroed; flops_per_element() FLOPs an element.
  std::optional<LayerWork> work() const override;

 protected:
  struct Entry {
    double lr_scale = 1.0;
    double weight_decay = 0.0;
    const LrSchedule* schedule = nullptr;  // the group's own (groups_ holds it), or null
    int64_t steps = 0;          // updates this parameter has had (on the host; see steps_device_)
    std::vector<Tensor> slots;  // one per slot name, zeros at first
  };

  // `path` is the config path, for errors (e.g. a group that matches no parameter).
  GroupedOptimizer(std::string type, std::vector<NamedParam> params, std::vector<ParamGroup> groups,
                   double weight_decay, std::vector<std::string> slot_names, int scalar_width,
                   const std::string& path);

  // Parameter i's lr this step: lr * lr_scale, or with its group's own schedule base_lr() *
  // lr_scale * that schedule's factor at the position set last.
  double param_lr(size_t i, double lr) const;
  // Row `i` of the host copy of the scalar table.
  float* scalar_row(size_t i) { return scalars_host_.data() + i * static_cast<size_t>(scalar_width_); }
  // Queues the copy of the host table to the device table (prepare() ends with it).
  void upload_scalars();
  // The device table, for the CUDA kernels (the host table on the CPU).
  const float* scalar_table() const { return scalars_.data<float>(); }
  float* mutable_scalar_table() { return scalars_.data<float>(); }

  // Indices of the parameters that have a gradient now, after checking it fits the parameter.
  std::vector<size_t> params_with_grad() const;
  // prepare()'s count of this step for parameter i, where it has a gradient; a no-op under a skip
  // flag, where apply() counts on the device (count_steps) once the flag is known.
  void count_step(size_t i);
  // Under a skip flag, apply()'s first launch: the device counts of `active` go up by one unless
  // the flag is set; `counts` carries the AdamW fields of kernels::StepCounts (the rest is filled
  // in here). Without a flag, nothing.
  void count_steps(const std::vector<size_t>& active, kernels::StepCounts counts);
  const float* skip_flag() const { return skip_flag_; }
  // The device all parameters live on (errors when they are spread over devices).
  Device params_device() const;
  // The update's FLOPs per parameter element (a multiply-add is 2).
  virtual double flops_per_element() const = 0;

  std::string type_;
  std::vector<ParamGroup> groups_;
  std::vector<Entry> entries_;  // parallel to params_
  std::vector<std::string> slot_names_;

 private:
  int scalar_width_;
  std::vector<float> scalars_host_;
  Tensor scalars_;
  const float* skip_flag_ = nullptr;
  Tensor steps_device_;  // int32, one per parameter, under a skip flag (the counts live here then)
};

}  // namespace minidl
