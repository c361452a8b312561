#include "optim/optimizer.h"

#include "core/error.h"
#include "core/json_limits.h"
#include "core/json_args.h"
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

std::unique_ptr<Optimizer> make_optimizer(const nlohmann::json& config, std::vector<NamedParam> params,
                                          const std::string& path) {
  MINIDL_CHECK(config.is_object(), path, ": expected an object with \"type\" (\"SGD\", \"AdamW\" or \"Muon\"), got ",
               json_excerpt(config));
  JsonArgs args(config, path);
  const std::string type = args.get_string("type", "");
  std::unique_ptr<Optimizer> opt;
  if (type == "SGD") {
    SgdOptions o = SgdOptions::read(args);
    args.finish();
    opt = std::make_unique<SGD>(std::move(params), std::move(o), path);
  } else if (type == "AdamW") {
    AdamwOptions o = AdamwOptions::read(args);
    args.finish();
    opt = std::make_unique<AdamW>(std::move(params), std::move(o), path);
  } else if (type == "Muon") {
    opt = make_muon(args, std::move(params), path);
  } else {
    fail(str(args.key_path("type"), ": unknown optimizer \"", type, "\" (expected \"SGD\", \"AdamW\" or \"Muon\")"));
  }
  return opt;
}

}  // namespace minidl
