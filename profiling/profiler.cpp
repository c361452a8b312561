#include "profiling/profiler.h"

#include <algorithm>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"

namespace minidl {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

int kind_rank(RowKind k) {
  switch (k) {
    case RowKind::Module: return 0;
    case RowKind::Section: return 1;
    case RowKind::Autograd: return 2;
    case RowKind::Other: return 3;
  }
  return 3;
}

// Nodes recorded inside a section carry this id instead of a module's (module ids are >= 0 and
// -1 means "no module"), so their backward is attributed back to the section: the loss's node
// runs in backward long after its section closed.
int section_module_id(int row) { return -2 - row; }
int row_of_section_module_id(int id) { return -2 - id; }

uint64_t module_key(autograd::ModuleTag module) {
  return static_cast<uint64_t>(module.generation) << 32 | static_cast<uint32_t>(module.id);
}

DeviceMemoryStats memory_stats(bool gpu) { return gpu ? device_memory_stats() : host_memory_stats(); }
void reset_memory_peak(bool gpu) { gpu ? reset_peak_device_memory() : reset_peak_host_memory(); }
void raise_memory_peak(bool gpu, double bytes) {
  const size_t b = static_cast<size_t>(bytes);
  gpu ? raise_peak_device_memory(b) : raise_peak_host_memory(b);
}

}  // namespace

Profiler::Profiler(Device device) : device_(device), gpu_(device.is_cuda()) {
  MINIDL_CHECK(!gpu_ || built_with_cuda(), "Profiler: device ", device.str(),
               " needs a minidl built with CUDA");
}

Profiler::~Profiler() { uninstall(); }

void Profiler::install(Module& model) {
  MINIDL_CHECK(!installed_ || model_ == &model, "Profiler::install: installed on another model; uninstall it first");
  if (installed_) return;
  MINIDL_CHECK(model.observer() == nullptr, "Profiler::install: ", model.label(),
               " is observed already (by another profiler); uninstall that first");
  model.set_observer(this);
  backward_scope_ = std::make_unique<autograd::BackwardObserverScope>(this);
  model_ = &model;
  installed_ = true;
}

void Profiler::uninstall() {
  if (!installed_) return;
  model_->set_observer(nullptr);
  backward_scope_.reset();
  model_ = nullptr;
  installed_ = false;
}

void Profiler::begin_step(bool measure) {
  MINIDL_CHECK(installed_, "Profiler::begin_step: install() the profiler first");
  MINIDL_CHECK(!in_step_, "Profiler::begin_step: the previous step was not ended (call end_step)");
  Clock::time_point t = Clock::now();
  boundaries_.clear();
  stack_.clear();
  frames_.clear();
  work_.assign(rows_.size(), RowWork{});
  held_peak_ = 0;
  in_step_ = true;
  measure_ = measure;
  in_backward_ = false;
  ++step_index_;
  add_boundary(t);
}

void Profiler::end_step() {
  MINIDL_CHECK(in_step_, "Profiler::end_step: no step is open (call begin_step first)");
  Clock::time_point t = Clock::now();
  if (!stack_.empty()) {
    const Frame& f = stack_.back();
    std::string open = rows_[f.row].name + (f.backward ? " backward" : "");
    cancel_step();
    fail(str("Profiler::end_step: '", open, "' is still open; end the step after every module call "
             "and section"));
  }
  in_step_ = false;
  add_boundary(t, /*last=*/true);
  raise_memory_peak(gpu_, held_peak_);
  const size_t n = boundaries_.size();
#ifdef MINIDL_WITH_CUDA
  if (gpu_) events_.read_ms(n, gpu_ms_);
#endif
  // Up to here, past the wait for the last event: comparable to an unprofiled step timed from its
  // start to a synchronize after it.
  const Clock::time_point done = Clock::now();
  if (!measure_) return;

  StepTimes s;
  s.rows.assign(rows_.size(), RowTimes{});
  for (size_t k = 0; k + 1 < n; ++k) {
    const Boundary& b = boundaries_[k];
    double host = ms_between(b.leave, boundaries_[k + 1].enter);
    double gpu = gpu_ ? gpu_ms_[k + 1] - gpu_ms_[k] : 0.0;
    RowTimes& r = s.rows[b.row];
    (b.backward ? r.bwd_host : r.fwd_host) += host;
    (b.backward ? r.bwd_gpu : r.fwd_gpu) += gpu;
  }
  for (const Boundary& b : boundaries_) s.overhead_ms += ms_between(b.enter, b.leave);
  for (const Frame& f : frames_) ++(f.backward ? s.rows[f.row].bwd_calls : s.rows[f.row].fwd_calls);
  s.gpu_ms = gpu_ ? gpu_ms_[n - 1] : 0.0;
  s.wall_ms = ms_between(boundaries_[0].enter, done);
  steps_.push_back(std::move(s));
  last_boundaries_ = boundaries_;
  last_frames_ = frames_;
  last_gpu_ms_ = gpu_ms_;
  last_work_ = work_;
}

void Profiler::cancel_step() {
  if (!in_step_) return;
  in_step_ = false;
  raise_memory_peak(gpu_, std::max(held_peak_, static_cast<double>(memory_stats(gpu_).peak_bytes)));
#ifdef MINIDL_WITH_CUDA
  for (size_t i = 0; i < stack_.size(); ++i) cuda::nvtx_pop();
#endif
  stack_.clear();
}

void Profiler::discard() {
  steps_.clear();
  last_boundaries_.clear();
  last_frames_.clear();
  last_gpu_ms_.clear();
  last_work_.clear();
}

void Profiler::open_section(const char* name) {
  if (!in_step_) {
    sections_.push_back(OpenSection{});
    return;
  }
  Clock::time_point t = Clock::now();
  in_backward_ = false;
  int row = section_row(name);
  sections_.push_back({row, autograd::current_module(), step_index_});
  autograd::set_current_module({section_module_id(row), 0});
  open_frame(row, false, -1, t);
}

void Profiler::close_section() {
  MINIDL_ASSERT(!sections_.empty());
  const OpenSection s = sections_.back();
  sections_.pop_back();
  if (s.row < 0) return;
  // The module id is restored even when the step already ended (or failed) inside the section,
  // so later nodes are not tagged with the section.
  autograd::set_current_module(s.previous_module);
  if (!in_step_ || s.step != step_index_) return;
  close_frame(s.row, false, Clock::now());
}

void Profiler::enter(const Module& m) {
  if (!in_step_) return;
  Clock::time_point t = Clock::now();
  in_backward_ = false;
  open_frame(module_row({m.id(), m.generation()}, &m), false, -1, t);
}

void Profiler::exit(const Module& m, const Tensor& input, const Tensor& output) {
  if (!in_step_) return;
  Clock::time_point t = Clock::now();
  // A module entered before begin_step has no frame to close.
  const auto found = row_of_module_.find(module_key({m.id(), m.generation()}));
  if (found == row_of_module_.end()) return;
  const int row = found->second;
  if (!close_frame(row, false, t) || !measure_) return;
  // Asked after the frame closed: the layer's arithmetic counts among the hooks' own time.
  const std::optional<LayerWork> w = m.work(input, output);
  if (!w) {
    row_work(row).unknown = true;
    return;
  }
  add_row_work(row, *w);
  if (w->forward.flops > compute_dtype_flops_) {
    compute_dtype_flops_ = w->forward.flops;
    compute_dtype_ = output.dtype();
  }
}

void Profiler::add_work(const LayerWork& work) {
  if (!in_step_ || !measure_ || stack_.empty()) return;
  add_row_work(stack_.back().row, work);
}

void Profiler::add_work(const std::function<std::optional<LayerWork>()>& work) {
  if (!in_step_ || !measure_ || stack_.empty()) return;
  const Clock::time_point t = Clock::now();
  const int row = stack_.back().row;
  if (const std::optional<LayerWork> w = work())
    add_row_work(row, *w);
  else
    row_work(row).unknown = true;
  // A boundary inside the row: its time goes on after the count, which is left out like a hook's.
  add_boundary(t);
}

Profiler::RowWork& Profiler::row_work(int row) {
  if (row >= static_cast<int>(work_.size())) work_.resize(rows_.size());
  return work_[row];
}

void Profiler::add_row_work(int row, const LayerWork& w) {
  RowWork& r = row_work(row);
  r.reported = true;
  r.fwd.flops += w.forward.flops;
  r.fwd.bytes += w.forward.bytes;
  r.bwd.flops += w.backward.flops;
  r.bwd.bytes += w.backward.bytes;
  r.saved += w.saved_bytes;
}

void Profiler::before_node(const autograd::Node& node) {
  if (!in_step_) return;
  Clock::time_point t = Clock::now();
  // The gap that ends at the first node is the engine's prologue (ordering the tape, seeding the
  // gradient): autograd's, not the trainer's.
  if (stack_.empty() && !boundaries_.empty() && boundaries_.back().row == other_row_) {
    boundaries_.back().row = untracked_row(RowKind::Autograd);
    boundaries_.back().backward = true;
  }
  in_backward_ = true;
  open_frame(node_row(node.module), true, op_index(node.name), t);
}

void Profiler::after_node(const autograd::Node& node) {
  if (!in_step_) return;
  Clock::time_point t = Clock::now();
  close_frame(node_row(node.module), true, t);
}

void Profiler::open_frame(int row, bool backward, int op, Clock::time_point t) {
  Frame f;
  f.row = row;
  f.backward = backward;
  f.open = boundaries_.size();
  f.op = op;
  stack_.push_back(f);
#ifdef MINIDL_WITH_CUDA
  cuda::nvtx_push(backward ? bwd_labels_[row].c_str() : fwd_labels_[row].c_str());
#endif
  add_boundary(t);
}

bool Profiler::close_frame(int row, bool backward, Clock::time_point t) {
  if (stack_.empty() || stack_.back().row != row || stack_.back().backward != backward) return false;
  Frame f = stack_.back();
  stack_.pop_back();
  f.close = boundaries_.size();
  frames_.push_back(f);
#ifdef MINIDL_WITH_CUDA
  cuda::nvtx_pop();
#endif
  add_boundary(t);
  return true;
}

void Profiler::add_boundary(Clock::time_point enter, bool last) {
  Boundary b;
  b.enter = enter;
  if (!last) {
    if (!stack_.empty()) {
      b.row = stack_.back().row;
      b.backward = stack_.back().backward;
    } else if (in_backward_) {
      b.row = untracked_row(RowKind::Autograd);
      b.backward = true;
    } else {
      b.row = untracked_row(RowKind::Other);
    }
  }
  // The allocator's books are kept on the host in the order work is queued, which is the order
  // the stream runs it in: the interval that ends here held `peak` at most.
  const DeviceMemoryStats m = memory_stats(gpu_);
  b.allocated = static_cast<double>(m.current_bytes);
  b.peak = static_cast<double>(m.peak_bytes);
  held_peak_ = std::max(held_peak_, b.peak);
  reset_memory_peak(gpu_);
#ifdef MINIDL_WITH_CUDA
  if (gpu_) events_.record(boundaries_.size());
#endif
  boundaries_.push_back(b);
  boundaries_.back().leave = Clock::now();
}

int Profiler::add_row(ProfileRow row) {
  fwd_labels_.push_back(row.name);
  bwd_labels_.push_back(row.name + " backward");
  rows_.push_back(std::move(row));
  return static_cast<int>(rows_.size()) - 1;
}

int Profiler::module_row(autograd::ModuleTag module, const Module* m) {
  MINIDL_ASSERT(module.id >= 0);
  const uint64_t key = module_key(module);
  const auto found = row_of_module_.find(key);
  if (found != row_of_module_.end()) return found->second;
  ProfileRow r;
  r.kind = RowKind::Module;
  r.module_id = module.id;
  if (m) {
    r.path = m->path();
    r.type = m->type_name();
    std::string d = m->describe();
    r.name = r.path.empty() ? d : r.path + " " + d;
    r.depth = r.path.empty() ? 0 : 1 + static_cast<int>(std::count(r.path.begin(), r.path.end(), '.'));
  } else {
    r.type = "?";
    r.name = str("module #", module.id);
  }
  int row = add_row(std::move(r));
  row_of_module_[key] = row;
  return row;
}

int Profiler::node_row(autograd::ModuleTag module) {
  if (module.id >= 0) {
    const auto found = row_of_module_.find(module_key(module));
    if (found != row_of_module_.end()) return found->second;
    // The module alive under the id now, unless it is a later one than the node's (which died).
    const Module* m = module_by_id(module.id);
    if (m && m->generation() != module.generation) m = nullptr;
    // A model this profiler does not observe ran its backward on this thread: not a row of ours.
    if (m && m->observer() != this) return untracked_row(RowKind::Autograd);
    return module_row(module, m);
  }
  int section = row_of_section_module_id(module.id);
  if (module.id <= -2 && section < static_cast<int>(rows_.size()) &&
      rows_[section].kind == RowKind::Section)
    return section;
  return untracked_row(RowKind::Autograd);
}

int Profiler::section_row(const char* name) {
  for (size_t i = 0; i < rows_.size(); ++i)
    if (rows_[i].kind == RowKind::Section && rows_[i].name == name) return static_cast<int>(i);
  ProfileRow r;
  r.kind = RowKind::Section;
  r.name = name;
  r.type = "section";
  return add_row(std::move(r));
}

int Profiler::untracked_row(RowKind kind) {
  int& cached = kind == RowKind::Autograd ? autograd_row_ : other_row_;
  if (cached < 0) {
    ProfileRow r;
    r.kind = kind;
    r.name = kind == RowKind::Autograd ? "autograd" : "other";
    r.type = r.name;
    cached = add_row(std::move(r));
  }
  return cached;
}

int Profiler::op_index(const std::string& name) {
  for (size_t i = 0; i < op_names_.size(); ++i)
    if (op_names_[i] == name) return static_cast<int>(i);
  op_names_.push_back(name);
  return static_cast<int>(op_names_.size()) - 1;
}

ProfileReport Profiler::report() const {
  MINIDL_CHECK(!steps_.empty(), "Profiler::report: no measured steps (every step so far was "
                                "begin_step(false) or discarded)");
  ProfileReport r;
  r.device = device_;
  r.gpu_timed = gpu_;
  r.measured_steps = static_cast<int64_t>(steps_.size());
  r.compute_dtype = compute_dtype_;

  std::vector<int> order(rows_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return kind_rank(rows_[a].kind) < kind_rank(rows_[b].kind);
  });

  // Memory over the rows' own intervals of the last measured step.
  struct RowMemory {
    double kept = 0, fwd_temp = 0, bwd_temp = 0;
  };
  std::vector<RowMemory> memory(rows_.size());
  const std::vector<Boundary>& b = last_boundaries_;
  for (size_t k = 0; k + 1 < b.size(); ++k) {
    RowMemory& m = memory[b[k].row];
    const double temp = std::max(0.0, b[k + 1].peak - b[k].allocated);
    if (b[k].backward) {
      m.bwd_temp = std::max(m.bwd_temp, temp);
    } else {
      m.kept += b[k + 1].allocated - b[k].allocated;
      m.fwd_temp = std::max(m.fwd_temp, temp);
    }
    if (b[k + 1].peak > r.step_peak_bytes) {
      r.step_peak_bytes = b[k + 1].peak;
      r.peak_row = rows_[b[k].row].name;
      r.peak_backward = b[k].backward;
    }
  }
  if (!b.empty()) r.step_start_bytes = b[0].allocated;
  for (size_t k = 0; k < b.size(); ++k) {
    MemorySample sample;
    sample.ts_us = gpu_ ? 1000.0 * last_gpu_ms_[k]
                        : std::chrono::duration<double, std::micro>(b[k].leave - b[0].leave).count();
    sample.allocated_bytes = b[k].allocated;
    sample.peak_bytes = k + 1 < b.size() ? b[k + 1].peak : b[k].allocated;
    r.memory.push_back(sample);
  }

  r.total.name = "total";
  r.total.type = "total";
  r.total.work_known = true;
  for (int i : order) {
    std::vector<double> fg, fh, bg, bh, fc, bc;
    for (const StepTimes& s : steps_) {
      RowTimes t = i < static_cast<int>(s.rows.size()) ? s.rows[i] : RowTimes{};
      fg.push_back(t.fwd_gpu);
      fh.push_back(t.fwd_host);
      bg.push_back(t.bwd_gpu);
      bh.push_back(t.bwd_host);
      fc.push_back(static_cast<double>(t.fwd_calls));
      bc.push_back(static_cast<double>(t.bwd_calls));
    }
    ProfileRow row = rows_[i];
    if (i < static_cast<int>(last_work_.size())) {
      const RowWork& w = last_work_[i];
      row.work_known = w.reported && !w.unknown;
      if (row.work_known) {
        row.fwd_work = w.fwd;
        row.bwd_work = w.bwd;
        row.saved_bytes = w.saved;
      }
    }
    if (i < static_cast<int>(memory.size())) {
      row.fwd_kept_bytes = memory[i].kept;
      row.fwd_temp_bytes = memory[i].fwd_temp;
      row.bwd_temp_bytes = memory[i].bwd_temp;
    }
    row.fwd_gpu_ms = median(fg);
    row.fwd_host_ms = median(fh);
    row.bwd_gpu_ms = median(bg);
    row.bwd_host_ms = median(bh);
    row.fwd_calls = static_cast<int64_t>(median(fc) + 0.5);
    row.bwd_calls = static_cast<int64_t>(median(bc) + 0.5);
    r.total.fwd_gpu_ms += row.fwd_gpu_ms;
    r.total.fwd_host_ms += row.fwd_host_ms;
    r.total.bwd_gpu_ms += row.bwd_gpu_ms;
    r.total.bwd_host_ms += row.bwd_host_ms;
    r.total.fwd_calls += row.fwd_calls;
    r.total.bwd_calls += row.bwd_calls;
    // The engine's and the trainer's untracked time ("autograd", "other") does no counted work.
    if ((row.kind == RowKind::Module || row.kind == RowKind::Section) && !row.work_known &&
        (row.fwd_calls > 0 || row.bwd_calls > 0))
      r.work_complete = false;
    r.total.fwd_work.flops += row.fwd_work.flops;
    r.total.fwd_work.bytes += row.fwd_work.bytes;
    r.total.bwd_work.flops += row.bwd_work.flops;
    r.total.bwd_work.bytes += row.bwd_work.bytes;
    r.total.saved_bytes += row.saved_bytes;
    r.total.fwd_kept_bytes += row.fwd_kept_bytes;
    r.rows.push_back(std::move(row));
  }

  std::vector<double> gpu, wall, overhead;
  for (const StepTimes& s : steps_) {
    gpu.push_back(s.gpu_ms);
    wall.push_back(s.wall_ms);
    overhead.push_back(s.overhead_ms);
  }
  r.step_gpu_ms = median(gpu);
  r.step_wall_ms = median(wall);
  r.overhead_host_ms = median(overhead);
  r.trace = build_trace();
  return r;
}

std::vector<TraceEvent> Profiler::build_trace() const {
  const std::vector<Boundary>& b = last_boundaries_;
  const size_t n = b.size();
  std::vector<TraceEvent> events;
  if (n < 2) return events;
  auto host_us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - b[0].leave).count();
  };
  // A span opens when its opening hook has finished and closes when its closing hook starts, so
  // the profiler's own time lies between spans, as it lies outside the rows.
  auto span = [&](const std::string& name, const char* category, size_t open, size_t close,
                  const std::string& op) {
    TraceEvent e;
    e.name = name;
    e.category = category;
    e.op = op;
    e.ts_us = host_us(b[open].leave);
    e.dur_us = host_us(b[close].enter) - e.ts_us;
    events.push_back(e);
    if (gpu_) {
      e.gpu = true;
      e.ts_us = 1000.0 * last_gpu_ms_[open];
      e.dur_us = 1000.0 * (last_gpu_ms_[close] - last_gpu_ms_[open]);
      events.push_back(e);
    }
  };
  span("step", "step", 0, n - 1, "");
  for (const Frame& f : last_frames_) {
    const ProfileRow& row = rows_[f.row];
    const char* category = f.backward ? "backward" : row.kind == RowKind::Section ? "section" : "forward";
    span(f.backward ? bwd_labels_[f.row] : fwd_labels_[f.row], category, f.open, f.close,
         f.op >= 0 ? op_names_[f.op] : "");
  }
  for (size_t k = 0; k + 1 < n; ++k) {
    const ProfileRow& row = rows_[b[k].row];
    if (row.kind == RowKind::Autograd || row.kind == RowKind::Other)
      span(row.name, row.kind == RowKind::Autograd ? "autograd" : "other", k, k + 1, "");
  }
  return events;
}

}  // namespace minidl
