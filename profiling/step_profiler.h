// The profile of consecutive training steps, for `minidl profile` and `minidl train --profile`:
// warm-up steps, then measured steps under the profiler (profiling/profiler.h), then as many
// unprofiled steps timed on their own (a synchronize before and after each) so the table shows
// the profiler's own cost beside the real step time.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "profiling/profiler.h"
#include "train/step_observer.h"

namespace minidl {

class RunLog;

// The median of step timings (the upper one of an even count).
double median(std::vector<double> v);

// Drives a Profiler on `model` over consecutive training steps: steps [0, warmup) are profiled
// but not kept, [warmup, warmup + measure) are kept, the next `measure` are timed unprofiled, and
// later steps run untouched. The caller brackets each step with before_step/after_step and passes
// active() to the trainer.
class StepProfiler final : public RunProfiler {
 public:
  StepProfiler(Module& model, Device device, int64_t warmup, int64_t measure);
  void before_step() override;
  void after_step() override;
  StepObserver* active() override { return phase_ == Phase::Profiled ? &profiler_ : nullptr; }
  bool done() const { return step_ >= warmup_ + 2 * measure_; }
  // Prints the table and writes profile.json and trace.json into `dir`; `graphed_ms`: the wall
  // time of a graphed step, timed the same way, to show beside the eager one.
  void finish(RunLog& log, const std::string& dir, std::optional<double> graphed_ms) override;

 private:
  enum class Phase { Profiled, Timed, Off };
  Module& model_;
  Device device_;
  Profiler profiler_;
  int64_t warmup_, measure_;
  int64_t step_ = 0;
  Phase phase_ = Phase::Off;
  std::chrono::steady_clock::time_point t0_;
  std::vector<double> unprofiled_ms_;
};

// What `minidl train --profile` hands its run (RunOptions::profiler): a StepProfiler per run.
RunProfilerFactory step_profiler_factory();

}  // namespace minidl
