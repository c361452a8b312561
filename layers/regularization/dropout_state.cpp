#include "layers/regularization/dropout_state.h"

#include "core/allocator.h"
#include "core/error.h"
#include "layers/module_visit.h"

namespace minidl {

void DropoutState::queue(StepWord& w, int64_t step, Device device) {
  if (!w.word) w.word = allocate(sizeof(int64_t), device);
  copy_bytes_async(w.word.get(), device, &step, Device::cpu(), sizeof(int64_t));
  w.queued = step;
}

void DropoutState::set_step(int64_t step, Device device, int slot) {
  MINIDL_CHECK(step >= 0 && step < (int64_t{1} << 32), "dropout: step ", step, " outside [0, 2^32)");
  MINIDL_CHECK(slot >= 0, "dropout: negative step slot ", slot);
  step_ = step;
  slot_ = slot;
  if (!device.is_cuda()) return;
  // A word that holds the step already is not queued again: inside a graph capture an upload
  // would fail it, and the trainer queues every micro-batch's step before the capture.
  StepWord& w = words_[{device.index, slot}];
  if (w.queued != step) queue(w, step, device);
}

// An upload inside a graph capture fails the capture (core/cuda: no uploads there), so the step
// runs eagerly with the right step rather than replaying a stale one; the trainer sets the step
// before every capture and replay, so it never comes to that.
const int64_t* DropoutState::step_on(Device device) {
  StepWord& w = words_[{device.index, slot_}];
  if (!w.word || w.queued != step_) queue(w, step_, device);
  return static_cast<const int64_t*>(w.word.get());
}

DropoutDraw DropoutState::draw(float p, uint32_t salt, int64_t group) const {
  DropoutDraw d;
  d.seed = seed_;
  d.stream = kStreamDropout | (static_cast<uint64_t>(salt) << 32);
  d.p = p;
  d.group = group;
  return d;
}

const std::shared_ptr<DropoutState>& default_dropout_state() {
  thread_local const std::shared_ptr<DropoutState> state = std::make_shared<DropoutState>();
  return state;
}

void set_dropout_seed(uint64_t seed) { default_dropout_state()->set_seed(seed); }
uint64_t dropout_seed() { return default_dropout_state()->seed(); }
void set_dropout_step(int64_t step, Device device, int slot) { default_dropout_state()->set_step(step, device, slot); }
int64_t dropout_step() { return default_dropout_state()->step(); }

int64_t set_dropout_state(Module& model, const std::shared_ptr<DropoutState>& state) {
  return for_each_module_of<DrawsDropout>(model, [&](DrawsDropout& d) { d.set_dropout_state(state); });
}

}  // namespace minidl
