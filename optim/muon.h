// Muon (Keller Jordan, as in airbench94_muon): for every parameter with 4 dimensions (conv
// filters, viewed as (out_channels, in_channels * kh * kw) matrices), Nesterov momentum whose
// result is orthogonalized by a few Newton-Schulz iterations before the step; every other
// parameter goes to the optimizer named by "rest" (SGD, AdamW):
//   {"type": "Muon", "lr": 0.24, "momentum": 0.6, "nesterov": true, "ns_steps": 3,
//    "ns_coefficients": [3.4445, -4.7750, 2.0315], "ns_eps": 1e-7, "normalize_weights": true,
//    "ns_dtype": "float32", "rest": {"type": "SGD", "lr": 1.0, ...}}
// One step of a filter bank W with gradient G: buf = m buf + G; U = nesterov ? G + m buf : buf;
// W *= sqrt(out_channels) / ||W||_F (when normalize_weights); W -= lr NS(U). The iteration runs in
// float32, or with "ns_dtype": "bfloat16" in bf16 (on tensor cores on the GPU; airbench's Muon
// runs it in bf16 too, rounding after every op where this rounds each iterate once;
// optim/muon_kernels.h); everything else is float32. The schedule scales both: rest's lr moves
// by the same factor as Muon's.
// State: "momentum_buffer.<name>" for the filters, "rest.<...>" for the other optimizer's.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "optim/grouped_optimizer.h"
#include "optim/muon_kernels.h"

namespace minidl {

struct MuonOptions {
  double lr = 0.02;
  double momentum = 0.95;
  bool nesterov = true;
  kernels::NewtonSchulz ns;
  bool normalize_weights = false;
  // The optimizer of the parameters that are not 4-D filters, as its config object (built with
  // them by make_muon; null: none given).
  nlohmann::json rest;

  // The keys after "type".
  static const Fields<MuonOptions>& fields();
};

class Muon : public GroupedOptimizer {
 public:
  // `filters`: the 4-D parameters; `rest`: the optimizer of the others (may be null when none).
  Muon(std::vector<NamedParam> filters, MuonOptions options, std::unique_ptr<Optimizer> rest,
       const std::string& path = "optimizer");
  void prepare(double lr) override;
  void apply() override;
  double base_lr() const override { return options_.lr; }
  void zero_grad() override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  nlohmann::json state_scalars() const override;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors, const nlohmann::json& scalars) override;
  void to(Device device) override;
  void set_skip_flag(const float* found_inf) override;
  nlohmann::json to_json() const override;
  // The momentum, the Newton-Schulz iterations of each filter as a matrix and the update, plus the
  // rest optimizer's work.
  std::optional<LayerWork> work() const override;

 private:
  // The momentum (2, Nesterov 2 more), the update (2) and, normalizing, the weight norm (3).
  double flops_per_element() const override;
  MuonOptions options_;
  std::unique_ptr<Optimizer> rest_;
};

// The Muon factory: splits `params` into filters and the rest (built from config "rest").
// The optimizer type's descriptor, listed in optimizer_types() (optim/optimizer.cpp).
const OptimizerDescriptor& muon_optimizer();

}  // namespace minidl
