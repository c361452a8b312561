// Per-parameter rules from the config, selected by name pattern and owning module type exactly as
// optimizer parameter groups are (optim/param_groups.h: "match", "module_type"). Unlike groups,
// every rule applies to every parameter it matches, in list order; a rule that matches nothing is
// an error (a typo would otherwise change nothing).
//
// "init": applied once after the model is built and moved to its device, before the optimizer:
//   {"match": "0.weight", "type": "patch_whitening", "eps": 5e-4, "images": 5000}
//        a Conv2d weight (2d, c, kh, kw), d = c*kh*kw, set from the first `images` training images
//        (normalized, not augmented): layers/conv/patch_whitening.h
//   {"module_type": "Conv2d", "match": "weight", "type": "dirac"}  identity filters (core/init.h)
//   {"match": "bias", "type": "zeros"} / {"type": "ones"}          constants
//   {"module_type": "Linear", "type": "unit_std"}                   scaled to standard deviation 1
// "freeze": a parameter that does not train (no gradient, so no update, no weight decay and no
// momentum), from epoch `from_epoch` on (default 0: never trains; fractions allowed):
//   [{"match": "0.weight"}, {"module_type": "BatchNorm2d", "match": "weight"},
//    {"match": "0.bias", "from_epoch": 3}]
// Whether a parameter trains at global step s is a pure function of s: it is frozen when
// s >= ceil(from_epoch * steps_per_epoch).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/fields.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace minidl {

enum class InitType { PatchWhitening, Dirac, Zeros, Ones, UnitStd };
template <>
struct EnumNames<InitType> {
  static constexpr EnumName<InitType> values[] = {{InitType::PatchWhitening, "patch_whitening"},
                                                  {InitType::Dirac, "dirac"},
                                                  {InitType::Zeros, "zeros"},
                                                  {InitType::Ones, "ones"},
                                                  {InitType::UnitStd, "unit_std"}};
};

// One "init" rule: the parameters it selects ("match" and/or "module_type", as a parameter
// group's) and what they are set to; "eps" and "images" belong to patch_whitening only.
struct InitRule {
  std::string match, module_type;
  InitType type;
  double eps;
  int64_t images;
  static const Fields<InitRule>& fields();
};

// One "freeze" rule: the parameters it selects and the epoch they stop training at.
struct FreezeRule {
  std::string match, module_type;
  double from_epoch;
  static const Fields<FreezeRule>& fields();
};

// Training images for data-dependent inits: the first n, normalized, on the model's device.
using ImageSource = std::function<Tensor(int64_t n)>;

void apply_init_rules(const nlohmann::json& rules, const std::vector<NamedParam>& params, const ImageSource& images,
                      const std::string& path = "init");

class FreezeRules {
 public:
  FreezeRules() = default;
  FreezeRules(const nlohmann::json& rules, const std::vector<NamedParam>& params, int64_t steps_per_epoch,
              const std::string& path = "freeze");
  // Sets each ruled parameter's requires_grad for global step `step`; a parameter that stops
  // training also loses its gradient, so optimizers skip it from then on (PyTorch: requires_grad
  // False with grads set to None).
  void apply(int64_t step);
  // How many ruled parameters are frozen at `step`: steps with the same phase train the same
  // parameters (the phase only grows), so they run the same device work.
  int phase(int64_t step) const;
  // The elements of the ruled parameters frozen at `step`.
  int64_t frozen_elements(int64_t step) const;
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    Tensor tensor;
    int64_t from_step;  // frozen at steps >= from_step
  };
  std::vector<Entry> entries_;
};

}  // namespace minidl
