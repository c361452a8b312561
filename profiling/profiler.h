// Per-layer profiler. While installed on a model it sees each of the model's module forwards
// (Module::set_observer), every backward node this thread runs (core/autograd.h
// BackwardObserverScope, attributed to the module that recorded the node) and the trainer's named
// sections ("data", "loss", "optimizer", "zero_grad": train/step_observer.h). Each of these hooks
// is a boundary; the time between two consecutive boundaries belongs to the innermost open module,
// node or section, so a parent's clock pauses while a child runs (exclusive time) and the rows of
// a step add up to the whole step.
//
// Two clocks per boundary: the host clock (std::chrono::steady_clock: time our C++ spends,
// mostly launching work) and, on CUDA, one event on minidl::cuda::stream() (time the GPU spends
// between the boundaries). Events are pooled and read once after the step, so timing never
// synchronizes inside a step. The profiler's own time in the hooks is left out of every row and
// reported separately. NVTX ranges named like the rows mirror the structure in Nsight Systems.
//
//   Profiler p(device); p.install(model);
//   for (...) { p.begin_step(measure);  { auto s = p.section("data"); ... }  ...  p.end_step(); }
//   p.uninstall(); ProfileReport r = p.report();   // medians over the measured steps
//
// The hooks hang on the model and on the installing thread, never on the process: two profilers
// on two models (in two threads) each see their own. Hot path when not installed: the observers
// are null, so Module::operator() and the backward engine pay one pointer test.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/autograd.h"
#include "core/device.h"
#include "layers/module.h"
#include "train/device_limits.h"
#include "train/step_observer.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/profiler_events.h"
#endif

namespace minidl {

enum class RowKind { Module, Section, Autograd, Other };

// One line of the report. Times are per step in milliseconds, the median over measured steps.
// Sections put their time in the forward columns, except the backward of nodes recorded inside
// them (the loss's), which goes to their backward columns.
struct ProfileRow {
  RowKind kind = RowKind::Other;
  std::string name;   // "3 Conv2d 64->128 k3" (module path + describe()), "loss", "autograd", "other"
  std::string path;   // module path ("" for the root module and for non-module rows)
  std::string type;   // module type_name(); "section", "autograd" or "other" otherwise
  int depth = 0;      // 0 for the root module and non-module rows, 1 + dots in the path otherwise
  int module_id = -1;
  double fwd_gpu_ms = 0, fwd_host_ms = 0, bwd_gpu_ms = 0, bwd_host_ms = 0;
  int64_t fwd_calls = 0, bwd_calls = 0;  // module calls / backward nodes per step (median)
  // Work per step (layers/work.h), from the last measured step: every module call of the row
  // reported it (Module::work) or, for a section, the trainer did (StepObserver::add_work). Unknown rows
  // show "-" rather than 0.
  bool work_known = false;
  PassWork fwd_work, bwd_work;
  double saved_bytes = 0;  // kept for backward by the row's calls (autograd's saved tensors)
  // Memory from the allocator's counters over the row's own intervals, last measured step:
  // net bytes its forward left allocated (its outputs and saved tensors) and the most it held
  // above its starting point at once (temporaries: workspaces such as cuDNN's).
  double fwd_kept_bytes = 0, fwd_temp_bytes = 0, bwd_temp_bytes = 0;

  double gpu_ms() const { return fwd_gpu_ms + bwd_gpu_ms; }
  double host_ms() const { return fwd_host_ms + bwd_host_ms; }
};

// One complete event ("ph": "X") of the Chrome trace of the last measured step. Spans are
// inclusive (a module's span contains its children's), so a viewer shows the nesting.
struct TraceEvent {
  std::string name;      // row name, "+ backward" for nodes; "step" for the whole step
  std::string category;  // "step", "forward", "backward", "section", "autograd", "other"
  bool gpu = false;      // GPU track (stream time from events) or host track (steady_clock)
  double ts_us = 0;      // from the step's first boundary on the same track
  double dur_us = 0;
  std::string op;        // the autograd op of a backward node ("conv2d"), else empty
};

// One sample of the allocator's counter at a boundary of the last measured step: what was
// allocated then and the most allocated at once until the next boundary (a "C" track in trace.json).
struct MemorySample {
  double ts_us = 0;  // on the GPU track's clock on CUDA (allocations follow stream order), else host
  double allocated_bytes = 0;
  double peak_bytes = 0;
};

struct ProfileReport {
  Device device;
  bool gpu_timed = false;   // CUDA events were recorded (a CUDA device)
  int64_t measured_steps = 0;
  // Modules in first-call order (pre-order for a normal forward), then sections in first-use
  // order, then "autograd" (backward outside every node: the engine, gradient accumulation;
  // plus nodes recorded outside every module and section) and "other" (everything else in the
  // step outside every module and section).
  std::vector<ProfileRow> rows;
  ProfileRow total;           // the sum of rows, column by column
  double step_gpu_ms = 0;     // median stream time from the step's first to its last event
  double step_wall_ms = 0;    // median host wall time of the profiled step, hooks included
  double overhead_host_ms = 0;  // median host time per step spent inside the profiler's hooks
  std::vector<TraceEvent> trace;  // the last measured step
  // The allocator's counters over the last measured step (device memory on CUDA, host memory on
  // the CPU): allocated at its start, its peak and the row (and direction) that reached it.
  double step_start_bytes = 0, step_peak_bytes = 0;
  // Every module and section row that ran reported its work: the total's work is the step's.
  bool work_complete = true;
  // The dtype of the output of the call with the most forward FLOPs: what the step computes in,
  // the dtype whose peak rate is the compute roof.
  DType compute_dtype = DType::Float32;
  // The roofs (train/device_limits.h); the caller measures them (the report's rates need them to
  // give a fraction of the limit and a bound).
  std::optional<DeviceLimits> limits;
  std::string peak_row;
  bool peak_backward = false;
  std::vector<MemorySample> memory;
};

class Profiler final : public ForwardObserver, public autograd::BackwardObserver, public StepObserver {
 public:
  // Events are recorded when `device` is CUDA (an error in a build without CUDA).
  explicit Profiler(Device device);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Observes `model` (every module of it: Module::set_observer) and this thread's backward
  // passes, until uninstall(), which must run on the same thread. A model has one observer at a time.
  void install(Module& model);
  void uninstall();
  bool installed() const { return installed_; }

  // A step: hooks between begin_step and end_step are timed; outside a step they are ignored.
  // end_step waits for the step's last event and keeps the step's times when `measure` was set.
  void begin_step(bool measure = true);
  void end_step();
  // Ends the open step without keeping it and without waiting (the loader had no batch left, or
  // the step failed); does nothing outside a step.
  void cancel_step();
  // Forgets the measured steps so far (e.g. the warm-up).
  void discard();
  int64_t measured_steps() const { return static_cast<int64_t>(steps_.size()); }

  // A named section, open for the returned object's lifetime; nothing when made outside a step.
  StepSection section(const char* name) { return StepSection(this, name); }
  void open_section(const char* name) override;
  void close_section() override;
  // Adds `work` to the innermost open row of the step (a section's data, loss or update: what a
  // module reports by itself through Module::work). Outside a measured step it does nothing.
  void add_work(const LayerWork& work);
  // The same, computing the work only when it is kept, and outside the row's time (like a hook):
  // a section's count (walking the optimizer's state, say) does not inflate its own row.
  void add_work(const std::function<std::optional<LayerWork>()>& work) override;
  // Medians per row over the measured steps and the trace of the last one (errors when none).
  ProfileReport report() const;

  // Hooks (called by Module::operator() and the backward engine).
  void enter(const Module& m) override;
  void exit(const Module& m, const Tensor& input, const Tensor& output) override;
  void before_node(const autograd::Node& node) override;
  void after_node(const autograd::Node& node) override;

 private:
  using Clock = std::chrono::steady_clock;

  struct Boundary {
    Clock::time_point enter;  // host clock when the hook started: ends the previous interval
    Clock::time_point leave;  // when it finished: starts the next one
    int row = -1;             // owner of the interval that starts here (-1 after the last)
    bool backward = false;    // which column of the owner
    double allocated = 0;     // the allocator's bytes in use at the boundary
    double peak = 0;          // the most in use during the interval that ends here
  };
  struct Frame {               // an open (on the stack) or closed module call, node or section
    int row = -1;
    bool backward = false;
    size_t open = 0, close = 0;  // boundary indices
    int op = -1;                 // index into op_names_ for nodes
  };
  struct RowTimes {
    double fwd_gpu = 0, fwd_host = 0, bwd_gpu = 0, bwd_host = 0;
    int64_t fwd_calls = 0, bwd_calls = 0;
  };
  struct RowWork {
    bool reported = false, unknown = false;
    PassWork fwd, bwd;
    double saved = 0;
  };
  struct StepTimes {
    std::vector<RowTimes> rows;  // indexed like rows_ (rows made later are absent)
    double gpu_ms = 0, wall_ms = 0, overhead_ms = 0;
  };

  // An open section: its row (-1 when opened outside a step), the module id it replaced and its step.
  struct OpenSection {
    int row = -1;
    autograd::ModuleTag previous_module;
    int64_t step = -1;
  };
  void open_frame(int row, bool backward, int op, Clock::time_point t);
  bool close_frame(int row, bool backward, Clock::time_point t);
  void add_boundary(Clock::time_point enter, bool last = false);
  int module_row(autograd::ModuleTag module, const Module* m);
  int node_row(autograd::ModuleTag module);
  int section_row(const char* name);
  int untracked_row(RowKind kind);
  int add_row(ProfileRow row);
  RowWork& row_work(int row);
  void add_row_work(int row, const LayerWork& w);
  int op_index(const std::string& name);
  std::vector<TraceEvent> build_trace() const;

  Device device_;
  bool gpu_ = false;
  bool installed_ = false;
  Module* model_ = nullptr;  // the installed model
  std::unique_ptr<autograd::BackwardObserverScope> backward_scope_;
  std::vector<OpenSection> sections_;  // open sections, innermost last
  bool in_step_ = false;
  bool measure_ = false;
  bool in_backward_ = false;  // a node ran since the last module call or section: gaps are autograd's
  int64_t step_index_ = 0;

  std::vector<ProfileRow> rows_;  // names only; times live in steps_
  std::vector<std::string> fwd_labels_, bwd_labels_;  // NVTX names, built once per row
  // Module (id and generation: a module built later may take a destroyed one's id) -> row.
  std::unordered_map<uint64_t, int> row_of_module_;
  int autograd_row_ = -1, other_row_ = -1;
  std::vector<std::string> op_names_;

  std::vector<Boundary> boundaries_;
  std::vector<Frame> stack_, frames_;
  std::vector<double> gpu_ms_;  // event times of the current step
  std::vector<RowWork> work_;   // work of the current step, by row
  double held_peak_ = 0;  // the allocator's peak since the step began (restored at its end)
  DType compute_dtype_ = DType::Float32;
  double compute_dtype_flops_ = -1;  // forward FLOPs of the call compute_dtype_ was taken from

  std::vector<StepTimes> steps_;
  // The last measured step, for the trace.
  std::vector<Boundary> last_boundaries_;
  std::vector<Frame> last_frames_;
  std::vector<double> last_gpu_ms_;
  std::vector<RowWork> last_work_;

#ifdef MINIDL_WITH_CUDA
  cuda::TimingEvents events_;
#endif
};

}  // namespace minidl
