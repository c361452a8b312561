#include "train/profile_command.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "train/profile_compare.h"
#include "train/profile_report.h"
#include "train/run_log.h"
#include "train/trainer.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/settings.h"

namespace minidl {

namespace {

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

StepProfiler::StepProfiler(Device device, int64_t warmup, int64_t measure)
    : device_(device), profiler_(device), warmup_(warmup), measure_(measure) {
  MINIDL_CHECK(measure >= 1 && warmup >= 0, "profile: need at least one measured step");
}

void StepProfiler::before_step() {
  if (step_ < warmup_ + measure_) {
    if (step_ == 0) profiler_.install();
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

ProfileSection StepProfiler::section(const char* name) {
  return phase_ == Phase::Profiled ? profiler_.section(name) : ProfileSection();
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
  report.limits = device_limits(device_, limits_dtype(device_, report.compute_dtype, compute_settings().allow_tf32),
                                default_limits_cache());
  log.line(format_profile_table(report, unprofiled, graphed_ms));
  write_profile_json(report, dir + "/profile.json", unprofiled, graphed_ms);
  write_chrome_trace(report, dir + "/trace.json");
  log.line(str("profile: wrote ", dir, "/profile.json and ", dir, "/trace.json (open in Perfetto or chrome://tracing)"));
}

int profile_command(const ProfileOptions& options) {
  if (!options.compare.empty()) return profile_compare_command(options.compare.at(0), options.compare.at(1));
  MINIDL_CHECK(!options.config_path.empty(), "minidl profile: --config is required (or --compare A.json B.json)");
  TrainConfig config = load_train_config(options.config_path, options.overrides, options.device, "");
  const std::string dir = options.output_dir.empty() ? config.output_dir + "-profile" : options.output_dir;
  std::filesystem::create_directories(dir);
  const Device device = setup_compute(config);
  Trainer trainer(config, device);
  RunLog log(dir);
  log.line(str("minidl profile: ", device.str(), ", ", options.warmup, " warm-up steps, ", options.steps,
               " measured steps, then ", options.steps, " unprofiled steps for the wall time",
               device.is_cuda() ? str(" and ", options.steps, " graphed ones") : std::string()));
  StepProfiler sp(device, options.warmup, options.steps);
  Loader& loader = trainer.train_loader();
  const std::shared_ptr<void> record = allocate_pinned(sizeof(Trainer::StepRecord));
  auto* rec = static_cast<Trainer::StepRecord*>(record.get());
  int64_t epoch = 0, step = 0;
  loader.start_epoch(epoch);
  auto train_step = [&](Profiler* profiler) {
    if (!trainer.train_step(step, rec, profiler)) {
      loader.start_epoch(++epoch);
      MINIDL_CHECK(trainer.train_step(step, rec, profiler), "profile: the training set gives no batch");
    }
    ++step;
  };
  trainer.set_cuda_graphs(false);
  while (!sp.done()) {
    sp.before_step();
    train_step(sp.active());
    sp.after_step();
  }
  std::optional<double> graphed_ms;
  if (device.is_cuda()) {
    // The graphed step, timed as the unprofiled eager ones; the first kGraphWarmupCalls calls (the
    // graph's eager warm-up and its capture) are not timed. With several kinds of step (lookahead)
    // a few timed steps may still be another kind's warm-up: the median keeps to the replays.
    constexpr int64_t kGraphWarmupCalls = 3;
    trainer.set_cuda_graphs(true);
    std::vector<double> ms;
    for (int64_t i = 0; i < kGraphWarmupCalls + options.steps; ++i) {
      synchronize(device);
      const auto t0 = std::chrono::steady_clock::now();
      train_step(nullptr);
      synchronize(device);
      if (i >= kGraphWarmupCalls)
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (trainer.steps_graphed()) graphed_ms = median(ms);
    log.line(str("profile: the profiled and the unprofiled steps ran eagerly (per-layer times need the layers' ",
                 "boundaries); then ", options.steps, " more steps ran as: ", trainer.step_mode()));
  } else {
    log.line("profile: every step ran eagerly (CUDA graphs need a GPU)");
  }
  sp.finish(log, dir, graphed_ms);
  return 0;
}

}  // namespace minidl
