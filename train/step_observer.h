// What a training step tells whoever watches it: the named sections of the step outside the model
// ("data", "loss", "optimizer") and the work done in them. The trainer calls these; the profiler
// (profiling/profiler.h) implements them, so train/ times nothing itself and depends on no profiler.
// The model's own forwards and backward nodes reach an observer through layers/module.h
// (Module::set_observer) and core/autograd.h (BackwardObserverScope).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "layers/module.h"

namespace minidl {

class RunLog;

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // A section opens here and closes at the matching close_section(); sections nest.
  virtual void open_section(const char* name) = 0;
  virtual void close_section() = 0;
  // Adds the work of the innermost open section, counted by `work` only when the observer keeps
  // it (layers/work.h; nullopt: not counted).
  virtual void add_work(const std::function<std::optional<LayerWork>()>& work) = 0;
};

// A named section of `observer`, open from construction to destruction; nothing when null.
class StepSection {
 public:
  StepSection() = default;
  StepSection(StepObserver* observer, const char* name) : observer_(observer) {
    if (observer_) observer_->open_section(name);
  }
  // May throw (a CUDA error surfacing as the section closes) so that it reaches the trainer's
  // error handling like any other.
  ~StepSection() noexcept(false) {
    if (observer_) observer_->close_section();
  }
  StepSection(const StepSection&) = delete;
  StepSection& operator=(const StepSection&) = delete;

 private:
  StepObserver* observer_ = nullptr;
};

// Watches the first steps of a run for `minidl train --profile`: the run brackets each step with
// before_step/after_step, hands active() (null for a step no one watches) to the step, and calls
// finish at the end of the epoch to print the table and write its files into the run folder.
class RunProfiler {
 public:
  virtual ~RunProfiler() = default;
  virtual void before_step() = 0;
  virtual StepObserver* active() = 0;
  virtual void after_step() = 0;
  // `graphed_ms`: the wall time of a graphed step to show beside the eager one, when measured.
  virtual void finish(RunLog& log, const std::string& dir, std::optional<double> graphed_ms) = 0;
};

// Makes the RunProfiler of a run's `model` on `device`: `warmup` steps profiled and dropped, then
// `measure` kept (profiling/step_profiler.h: step_profiler_factory).
using RunProfilerFactory =
    std::function<std::unique_ptr<RunProfiler>(Module& model, Device device, int64_t warmup, int64_t measure)>;

}  // namespace minidl
