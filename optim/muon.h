// Muon (Keller Jordan, as in airbench94_muon): for every parameter with 4 dimensions (conv
// filters, viewed as (out_channels, in_channels * kh * kw) matrices), Nesterov momentum whose
// result is orthogonalized by a few Newton-Schulz iterations before the step; every other
// parameter goes to the optimizer named by "rest" (SGD, AdamW):
//   {"type": "Muon", "lr": 0.24, "momentum": 0.6, "nesterov": true, "ns_steps": 3,
//    "ns_coefficients": [3.4445, -4.7750, 2.0315], "ns_eps": 1e-7, "normalize_weights": true,
//    "ns_dtype": "float32", "weight_decay": 0, "normalize_interval": 1, "ns_batching": "by_shape",
//    "rest": {"type": "SGD", "lr": 1.0, ...}}
// One step of a filter bank W with gradient G: buf = m buf + G; U = nesterov ? G + m buf : buf;
// W *= sqrt(out_channels) / ||W||_F (when normalize_weights, on the steps the interval picks);
// W *= 1 - lr * weight_decay (decoupled, as torch.optim.Muon); W -= lr NS(U).
// "normalize_interval": n renormalizes every n-th step; [a, b] at an interval that grows with the
// run: at the c-th step (c = global step + 1) of T, when c - (the last renormalized step, 0 at
// first) >= a + floor((b - a) * (c / T)) (the CIFAR-10 speedrun record's [2, 17]). It needs
// normalize_weights, and [a, b] the run's length (Optimizer::set_position).
// "ns_batching": "by_shape" iterates the banks of each shape together; "padded" zero-pads every
// bank to one shape (the most rows, the most columns rounded up to 16) and iterates all of them
// in one batch: fewer launches for more FLOPs (the zero rows and columns stay zero, so the result
// is the same up to the GEMMs' summation order). The CPU runs each bank unpadded. The iteration runs in
// float32, or with "ns_dtype": "bfloat16" in bf16 (on tensor cores on the GPU; airbench's Muon
// runs it in bf16 too, rounding after every op where this rounds each iterate once;
// optim/muon_kernels.h); everything else is float32. The schedule scales both: rest's lr moves
// by the same factor as Muon's.
// State: "momentum_buffer.<name>" for the filters, "rest.<...>" for the other optimizer's.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "optim/grouped_optimizer.h"
#include "optim/muon_kernels.h"

namespace minidl {

// How the Newton-Schulz iterations batch the filter banks (the header's comment says more).
enum class NsBatching { ByShape, Padded };
template <>
struct EnumNames<NsBatching> {
  static constexpr EnumName<NsBatching> values[] = {{NsBatching::ByShape, "by_shape"}, {NsBatching::Padded, "padded"}};
};

struct MuonOptions {
  double lr = 0.02;
  double momentum = 0.95;
  bool nesterov = true;
  kernels::NewtonSchulz ns;
  bool normalize_weights = false;
  double weight_decay = 0;
  int64_t normalize_interval[2] = {1, 1};  // from [0] at the start to [1] at the end of the run
  NsBatching ns_batching = NsBatching::ByShape;
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
  void set_position(const StepPosition& at) override;
  nlohmann::json to_json() const override;
  // The momentum, the Newton-Schulz iterations of each filter as a matrix and the update, plus the
  // rest optimizer's work.
  std::optional<LayerWork> work() const override;
  // Whether the step at `position_` renormalizes the weights (normalize_interval).
  bool renormalizes();

 private:
  // The momentum (2, Nesterov 2 more), the update (2), the weight decay (1, when set) and,
  // normalizing, the weight norm (3).
  double flops_per_element() const override;
  MuonOptions options_;
  std::unique_ptr<Optimizer> rest_;
  // The renormalization schedule walked so far: its last step count and renormalized step.
  int64_t walked_ = 0, last_renormalized_ = 0;
};

// The Muon factory: splits `params` into filters and the rest (built from config "rest").
// The optimizer type's descriptor, listed in optimizer_types() (optim/optimizer.cpp).
const OptimizerDescriptor& muon_optimizer();

}  // namespace minidl
