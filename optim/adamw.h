// torch.optim.AdamW: Adam with bias correction and decoupled weight decay (p *= 1 - lr * wd),
// plus parameter groups (optim/param_groups.h). Config:
//   {"type": "AdamW", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01,
//    "groups": [...]}
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "optim/grouped_optimizer.h"

namespace minidl {

struct AdamwOptions {
  double lr = 1e-3;  // PyTorch's defaults
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  std::vector<ParamGroup> groups;

  // The keys after "type".
  static const Fields<AdamwOptions>& fields();
};

class AdamW : public GroupedOptimizer {
 public:
  AdamW(std::vector<NamedParam> params, AdamwOptions options, const std::string& path = "optimizer");
  void prepare(double lr) override;
  void apply() override;
  double base_lr() const override { return options_.lr; }
  nlohmann::json to_json() const override;
  void set_skip_flag(const float* found_inf) override;
  void to(Device device) override;

 private:
  // Two moments 4, the bias-corrected denominator with a sqrt 4, decay and step 6.
  double flops_per_element() const override { return 14; }
  AdamwOptions options_;
  // Under a skip flag: each parameter's group lr of this step, on the host and on the device.
  std::vector<double> group_lr_host_;
  std::shared_ptr<void> group_lr_;
};

// The optimizer type's descriptor, listed in optimizer_types() (optim/optimizer.cpp).
const OptimizerDescriptor& adamw_optimizer();

}  // namespace minidl
