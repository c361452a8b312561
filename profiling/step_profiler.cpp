#include "profiling/step_profiler.h"

#include <algorithm>

#include "core/error.h"
#include "core/settings.h"
#include "profiling/profile_report.h"
#include "train/run_log.h"

namespace minidl {

double median(std::vector<double> v) {
  MINIDL_CHECK(!v.empty(), "median of no values");
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

StepProfiler::StepProfiler(Module& model, Device device, int64_t warmup, int64_t measure)
    : model_(model), device_(device), profiler_(device), warmup_(warmup), measure_(measure) {
  MINIDL_CHECK(measure >= 1 && warmup >= 0, "profile: need at least one measured step");
}

void StepProfiler::before_step() {
  if (step_ < warmup_ + measure_) {
    if (step_ == 0) profiler_.install(model_);
    phase_ = Phase::Profiled;
    profiler_.begin_step(step_ >= warmup_);
  } else if (step_ < warmup_ + 2 * measure_) {
    phase_ = Phase::Timed;
    synchronize(device_);
    t0_ = std::chrono::steady_clock::now();
  } else {
    phase_ = Phase::Off;
  }
}

void StepProfiler::after_step() {
  if (phase_ == Phase::Profiled) {
    profiler_.end_step();
    if (step_ + 1 == warmup_ + measure_) profiler_.uninstall();
  } else if (phase_ == Phase::Timed) {
    synchronize(device_);
    unprofiled_ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
  }
  phase_ = Phase::Off;
  ++step_;
}

void StepProfiler::finish(RunLog& log, const std::string& dir, std::optional<double> graphed_ms) {
  if (profiler_.installed()) profiler_.uninstall();
  if (profiler_.measured_steps() == 0) {
    log.line("profile: the epoch was too short to measure any step");
    return;
  }
  std::optional<double> unprofiled;
  if (!unprofiled_ms_.empty()) unprofiled = median(unprofiled_ms_);
  ProfileReport report = profiler_.report();
  double fastest = 0;  // the highest rate a pass reached: a cached roof below it is stale
  for (const ProfileRow& row : report.rows)
    for (const bool backward : {false, true}) fastest = std::max(fastest, pass_roofline(report, row, backward).tflops);
  report.limits = device_limits(device_, limits_dtype(device_, report.compute_dtype, compute_settings().allow_tf32),
                                default_limits_cache(), fastest);
  log.line(format_profile_table(report, unprofiled, graphed_ms));
  write_profile_json(report, dir + "/profile.json", unprofiled, graphed_ms);
  write_chrome_trace(report, dir + "/trace.json");
  log.line(str("profile: wrote ", dir, "/profile.json and ", dir, "/trace.json (open in Perfetto or chrome://tracing)"));
}

RunProfilerFactory step_profiler_factory() {
  return [](Module& model, Device device, int64_t warmup, int64_t measure) -> std::unique_ptr<RunProfiler> {
    return std::make_unique<StepProfiler>(model, device, warmup, measure);
  };
}

}  // namespace minidl
