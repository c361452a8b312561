// torch.optim.SGD with momentum (dampening 0), Nesterov and L2 weight decay added to the
// gradient, plus parameter groups (optim/param_groups.h). Config:
//   {"type": "SGD", "lr": 0.4, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4,
//    "groups": [...]}
#pragma once
#include <string>
#include <vector>

#include "optim/grouped_optimizer.h"

namespace minidl {

struct SgdOptions {
  double lr = 1e-3;  // PyTorch's default
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::vector<ParamGroup> groups;

  // The keys after "type".
  static const Fields<SgdOptions>& fields();
};

class SGD : public GroupedOptimizer {
 public:
  SGD(std::vector<NamedParam> params, SgdOptions options, const std::string& path = "optimizer");
  void prepare(double lr) override;
  void apply() override;
  double base_lr() const override { return options_.lr; }
  nlohmann::json to_json() const override;

 private:
  // The weight decay, momentum and step: a multiply-add each.
  double flops_per_element() const override { return 6; }
  SgdOptions options_;
};

// The optimizer type's descriptor, listed in optimizer_types() (optim/optimizer.cpp).
const OptimizerDescriptor& sgd_optimizer();

}  // namespace minidl
