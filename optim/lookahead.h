// Lookahead weight averaging as airbench does it (arXiv 2404.00498): an exponential moving
// average of the model's float tensors (parameters and BatchNorm running statistics) that is
// also copied back into the model, so training continues from the average. Wraps any optimizer:
//   "lookahead": {"start_epochs": 3, "every_n_steps": 5, "decay_base": 0.95, "decay_pow": 3}
// After update s (1-based count of steps), in an epoch >= start_epochs and with s a multiple of
// every_n_steps: the first time the average is set to the model; later
//   rho = decay_base^every_n_steps * (s / total_steps)^decay_pow,
//   avg = lerp(avg, model, 1 - rho),  model = avg
// (little averaging early, strong at the end). At every epoch end (s a multiple of the steps per
// epoch, or s = total_steps) the model is set to the average once more. Every decision is a pure
// function of s, made in prepare(); apply() queues the work, reading 1 - rho from device memory
// that prepare() writes. So the steps come in a few kinds (next_kind()) that differ in their
// device work, and a CUDA graph of one kind replays for every step of that kind. The average and
// s are optimizer state, saved in checkpoints ("lookahead.<name>"), so a resumed run continues
// bit for bit.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/fields.h"
#include "optim/optimizer.h"

namespace minidl {

struct LookaheadOptions {
  double start_epochs = 0;
  int64_t every_n_steps = 1;
  double decay_base = 0.95;
  double decay_pow = 3;

  // The keys of "lookahead".
  static const Fields<LookaheadOptions>& fields();
  static LookaheadOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const { return write_fields(fields(), *this); }
  // The decay after update s (1-based) of total_steps.
  double decay(int64_t s, int64_t total_steps) const;
};

class Lookahead : public Optimizer {
 public:
  // The names state_tensors() gives the averages: this prefix, then the averaged tensor's name.
  static constexpr const char* kStatePrefix = "lookahead.";

  // `averaged`: the model tensors to average (float32, on the parameters' device).
  Lookahead(std::unique_ptr<Optimizer> inner, std::vector<std::pair<std::string, Tensor>> averaged,
            LookaheadOptions options, int64_t steps_per_epoch, int64_t total_steps);

  void prepare(double lr) override;
  void apply() override;
  // The inner optimizer skips on the flag; the averaging of every step (take, blend, copy back)
  // runs whatever it says.
  void set_skip_flag(const float* found_inf) override { inner_->set_skip_flag(found_inf); }
  void set_position(const StepPosition& at) override {
    Optimizer::set_position(at);
    inner_->set_position(at);
  }
  double base_lr() const override { return inner_->base_lr(); }
  void zero_grad() override { inner_->zero_grad(); }
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  nlohmann::json state_scalars() const override;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors, const nlohmann::json& scalars) override;
  void to(Device device) override;
  nlohmann::json to_json() const override { return inner_->to_json(); }
  // The inner optimizer's: the averaging runs once every few steps, not per step, and is left out.
  std::optional<LayerWork> work() const override { return inner_->work(); }
  const LookaheadOptions& options() const { return options_; }
  // The kind of the next step's device work (what the next prepare() will decide): a bit each for
  // taking the average, blending into it and copying it back; 0 for a plain update.
  int next_kind() const;

 private:
  std::unique_ptr<Optimizer> inner_;
  std::vector<std::pair<std::string, Tensor>> model_;    // the model's tensors
  std::vector<Tensor> average_;                          // parallel to model_
  LookaheadOptions options_;
  int64_t steps_per_epoch_, total_steps_;
  int64_t steps_ = 0;    // training steps so far (skipped updates included)
  bool started_ = false;  // the average has been taken
  // What apply() does after the inner update, set by prepare(): take the average, blend the model
  // into it, copy it back into the model.
  void prepare_average();  // the host half of this step's averaging
  void apply_average();    // its device half
  struct Action {
    bool take = false, blend = false, copy_back = false;
    float rho = 0;
  };
  Action action_;
  Action action_for(int64_t s) const;  // what update s (1-based) does, given started_ before it
  Tensor blend_weight_;                // [1] on the device: 1 - rho of the step prepared last
};

}  // namespace minidl
