// Optimizers, built from a config object whose "type" picks one of the table optimizer_types()
// (SGD, AdamW, Muon: each a descriptor with its keys and factory), and able to print their config
// back. Parameters come with their PyTorch names and the type of the module that owns them, so a
// config can put e.g. every normalization bias in a group of its own.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/fields.h"
#include "core/json_args.h"
#include "core/tensor.h"
#include "layers/work.h"

namespace minidl {

// Where a run is: the global step (0-based) the next update belongs to, the steps per epoch and
// the run's total steps. Per-group schedules and Muon's renormalization interval read it; a
// total of 0 means no one has said (an Optimizer used on its own, without set_position).
struct StepPosition {
  int64_t step = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
};

struct NamedParam {
  std::string name;         // "layer1.0.weight"
  Tensor tensor;            // the parameter (its grad() is read by step())
  std::string module_type;  // "Conv2d", "BatchNorm2d", ...
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter that has a gradient, at learning rate `lr` for the default
  // group (the trainer passes base_lr() times the schedule's factor; each group scales it by its
  // own lr_scale). Runs on the parameters' device. Not recorded by autograd.
  void step(double lr) {
    prepare(lr);
    apply();
  }
  // The host half of step(): the step counts of the parameters that have a gradient, and every
  // parameter's scalars for this step (its group's lr, weight decay, bias corrections), written to
  // a table on the parameters' device.
  virtual void prepare(double lr) = 0;
  // The device half: the update kernels, reading the table of the last prepare(). It only queues
  // work and changes no host state, so a CUDA graph can capture it once and replay it after each
  // later prepare() (train/step_graph.h).
  virtual void apply() = 0;
  // Float16 loss scaling (optim/grad_scaler.h): from now on apply()'s kernels read `found_inf`, a
  // float in the parameters' device memory, and where it is nonzero leave the parameters, their
  // state and their step counts as they are (GradScaler.step() not calling the optimizer). The
  // decision is the device's, so a step never waits for the host and a CUDA graph replays it.
  // Wrappers pass it to what they hold; Lookahead's averaging follows the training steps and still
  // takes its step on a skipped one. After to() another device's flag must be set again (the
  // step counts carry over).
  virtual void set_skip_flag(const float* found_inf) = 0;
  // The position of the next prepare() (the trainer sets it before each step). Wrappers pass it
  // to what they hold.
  virtual void set_position(const StepPosition& at) { position_ = at; }
  virtual double base_lr() const = 0;  // the config's "lr"
  // Zeroes every parameter's gradient in place (PyTorch's zero_grad(set_to_none=False)): the
  // gradient tensors stay defined, so the next backward sums into fresh tensors and the set of
  // parameters with a gradient is the same every step. Wrappers (Lookahead, Muon with its
  // optimizer for the rest) forward it to what they hold.
  virtual void zero_grad();
  // State tensors under stable names ("momentum_buffer.layer1.0.weight") plus scalar state;
  // load_state restores both exactly (bit-identical resume) and errors on any mismatch.
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() const = 0;
  virtual nlohmann::json state_scalars() const = 0;
  virtual void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                          const nlohmann::json& scalars) = 0;
  // Moves state to the parameters' device (call after the model moved).
  virtual void to(Device device) = 0;
  virtual nlohmann::json to_json() const = 0;
  // The FLOPs and bytes of one update of the parameters that have a gradient now, with the
  // zeroing of their gradients (layers/work.h; the profiler's optimizer row). nullopt: not counted.
  virtual std::optional<LayerWork> work() const { return std::nullopt; }

 protected:
  // The position set last; errors naming `what` (the feature that needs it) when none was set.
  const StepPosition& position(const char* what) const;

  std::vector<NamedParam> params_;
  StepPosition position_;
};

struct OptimizerDescriptor {
  std::string name;               // the config's "type": "SGD"
  std::string summary;            // one line
  std::vector<FieldInfo> fields;  // its keys besides "type"
  // Reads the keys after "type" (finishing `args`) and builds the optimizer of `params`; `path`
  // names the config object in errors.
  std::unique_ptr<Optimizer> (*make)(JsonArgs& args, std::vector<NamedParam> params, const std::string& path);
};

// Every optimizer type, in docs/config.md's order.
const std::vector<const OptimizerDescriptor*>& optimizer_types();

// Builds the optimizer `config` names by its "type" from its object at key path `path`; unknown
// keys, a type outside the table and values out of range are errors naming the key.
std::unique_ptr<Optimizer> make_optimizer(const nlohmann::json& config, std::vector<NamedParam> params,
                                          const std::string& path);

// {"type": d.name, every key of `options`}: an optimizer's to_json.
template <typename O>
nlohmann::json optimizer_json(const OptimizerDescriptor& d, const O& options) {
  nlohmann::json j = write_fields(O::fields(), options);
  j["type"] = d.name;
  return j;
}

// The descriptor of an optimizer Opt built as Opt(params, options, path) from options O read
// through O::fields().
template <typename Opt, typename O>
OptimizerDescriptor describe_optimizer(std::string name, std::string summary) {
  return {std::move(name), std::move(summary), field_infos(O::fields()),
          [](JsonArgs& args, std::vector<NamedParam> params, const std::string& path) -> std::unique_ptr<Optimizer> {
            return std::make_unique<Opt>(std::move(params), read_struct(O::fields(), args), path);
          }};
}

}  // namespace minidl
