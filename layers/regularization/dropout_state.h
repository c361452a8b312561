// The seed and step a model's dropout draws belong to (Dropout, DropPath, attention dropout), and
// the device words the CUDA kernels read the step from. A trainer owns one per model, hands it to
// the model's modules once (set_dropout_state) and sets the step before each step's device work;
// a module no one handed a state draws with its thread's default state, which set_dropout_seed
// and set_dropout_step set (as torch's ops draw from the default generator unless given one):
// what a program with one model, and the tests, use.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "core/device.h"
#include "layers/module.h"
#include "layers/regularization/dropout_draw.h"

namespace minidl {

class DropoutState {
 public:
  explicit DropoutState(uint64_t seed = 0) : seed_(seed) {}
  DropoutState(const DropoutState&) = delete;
  DropoutState& operator=(const DropoutState&) = delete;

  void set_seed(uint64_t seed) { seed_ = seed; }
  uint64_t seed() const { return seed_; }
  // The step the next draws belong to. On a CUDA `device` it is also queued into this state's
  // device word `slot`, which the kernels read, so set it before capturing a graph and before each
  // replay (an eager draw queues the step itself when the word holds another). A step of several
  // micro-batches sets each micro-batch's step in a slot of its own (slot j for micro-batch j):
  // one graph then holds them all.
  void set_step(int64_t step, Device device = Device::cpu(), int slot = 0);
  int64_t step() const { return step_; }
  // The device word of the current slot (at a fixed address while this state lives, for graph
  // replays), with the current step queued into it.
  const int64_t* step_on(Device device);
  // The draw parameters of a layer with `salt` for this state's seed.
  DropoutDraw draw(float p, uint32_t salt, int64_t group) const;

 private:
  // A word is memory, not a setting: it holds the step last queued into it. Words are made on
  // first use and live as long as the state, so no two states (two models) share one.
  struct StepWord {
    std::shared_ptr<void> word;
    int64_t queued = -1;
  };
  static void queue(StepWord& w, int64_t step, Device device);
  uint64_t seed_;
  int64_t step_ = 0;
  int slot_ = 0;
  std::map<std::pair<int, int>, StepWord> words_;  // by (CUDA device index, slot)
};

// The calling thread's default state.
const std::shared_ptr<DropoutState>& default_dropout_state();
// The default state's seed and step (DropoutState::set_step).
void set_dropout_seed(uint64_t seed);
uint64_t dropout_seed();
void set_dropout_step(int64_t step, Device device = Device::cpu(), int slot = 0);
int64_t dropout_step();

// What a module that draws dropout masks holds: the state it draws with (the thread's default
// until one is handed to it).
class DrawsDropout {
 public:
  void set_dropout_state(std::shared_ptr<DropoutState> state) { dropout_state_ = std::move(state); }
  const std::shared_ptr<DropoutState>& dropout_state() const {
    return dropout_state_ ? dropout_state_ : default_dropout_state();
  }

 protected:
  ~DrawsDropout() = default;

 private:
  std::shared_ptr<DropoutState> dropout_state_;
};

// Hands `state` to every module of `model` (itself included) that draws dropout masks; returns
// how many.
int64_t set_dropout_state(Module& model, const std::shared_ptr<DropoutState>& state);

}  // namespace minidl
