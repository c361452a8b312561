#include "optim/optimizer.h"

#include "core/error.h"
#include "core/json_args.h"
#include "core/json_limits.h"
#include "core/type_table.h"
#include "optim/adamw.h"
#include "optim/muon.h"
#include "optim/sgd.h"

namespace minidl {

const StepPosition& Optimizer::position(const char* what) const {
  MINIDL_CHECK(position_.total_steps > 0 && position_.steps_per_epoch > 0, what,
               " needs the run's position: call set_position() before each step (the trainer does)");
  return position_;
}

void Optimizer::zero_grad() {
  for (NamedParam& p : params_) {
    Tensor g = p.tensor.grad();
    if (g.defined()) g.zero_();
  }
}

const std::vector<const OptimizerDescriptor*>& optimizer_types() {
  static const std::vector<const OptimizerDescriptor*> table = {&sgd_optimizer(), &adamw_optimizer(),
                                                                &muon_optimizer()};
  return table;
}

std::unique_ptr<Optimizer> make_optimizer(const nlohmann::json& config, std::vector<NamedParam> params,
                                          const std::string& path) {
  MINIDL_CHECK(config.is_object(), path, ": expected an object with \"type\" (", type_choices(optimizer_types()),
               "), got ", json_excerpt(config));
  JsonArgs args(config, path);
  return read_type(optimizer_types(), args, "optimizer").make(args, std::move(params), path);
}

}  // namespace minidl
