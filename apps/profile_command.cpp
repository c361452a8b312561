// `minidl profile`: warm-up and measured steps under the profiler (profiling/step_profiler.h) on a
// run without a folder; on a GPU then as many steps replayed as CUDA graphs, timed the same way.
#include <chrono>
#include <filesystem>
#include <memory>

#include "apps/commands.h"
#include "core/error.h"
#include "profiling/profile_compare.h"
#include "profiling/step_profiler.h"
#include "train/run.h"
#include "train/run_folder.h"
#include "train/run_log.h"

namespace minidl {

namespace {

struct ProfileOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string device;
  int64_t steps = 20;
  int64_t warmup = 5;
  std::string output_dir;  // default: the config's output.dir + "-profile"
  std::vector<std::string> compare;  // two profile.json files: print them side by side instead
};

int profile_command(const ProfileOptions& options) {
  if (!options.compare.empty()) return profile_compare_command(options.compare.at(0), options.compare.at(1));
  MINIDL_CHECK(!options.config_path.empty(), "minidl profile: --config is required (or --compare A.json B.json)");
  PreparedConfig prepared = prepare_config(options.config_path, options.overrides, options.device);
  TrainConfig& config = prepared.config;
  const Device device = prepared.device;
  const std::string dir = options.output_dir.empty() ? config.output_dir + "-profile" : options.output_dir;
  // The folder gets log.txt, profile.json and trace.json: never those of a training run, and never
  // while another minidl process writes there.
  std::error_code ec;
  MINIDL_CHECK(!std::filesystem::exists(dir, ec) || std::filesystem::is_directory(dir, ec), "profile --output ", dir,
               ": exists and is not a folder");
  for (const char* run_file : {"config.json", "checkpoint.safetensors"})
    MINIDL_CHECK(!std::filesystem::exists(dir + "/" + run_file, ec), "profile --output ", dir,
                 ": is a training run's folder (it holds ", run_file, "); profile writes log.txt, profile.json and ",
                 "trace.json, which would mix with that run's: choose another --output");
  create_run_folder(dir);
  const RunFolderLock lock(dir);
  auto [train_set, test_set] = load_datasets(config);
  Run run(config, device, std::move(train_set), std::move(test_set));
  Trainer& trainer = run.trainer();
  RunLog log(dir);
  log.line(str("minidl profile: ", device.str(), ", ", options.warmup, " warm-up steps, ", options.steps,
               " measured steps, then ", options.steps, " unprofiled steps for the wall time",
               device.is_cuda() ? str(" and ", options.steps, " graphed ones") : std::string()));
  StepProfiler sp(trainer.model(), device, options.warmup, options.steps);
  trainer.set_cuda_graphs(false);
  while (!sp.done()) {
    sp.before_step();
    run.step(sp.active());
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
      run.step();
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

}  // namespace

Command add_profile_command(CLI::App& app) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand("profile", "per-layer time breakdown of training steps");
  add_config_options(cmd, o->config_path, o->overrides, o->device);
  cmd->add_option("--steps", o->steps, "measured steps (median over them)")->check(whole_number(1));
  cmd->add_option("--warmup", o->warmup, "warm-up steps before measuring")->check(whole_number(0));
  cmd->add_option("--output", o->output_dir, "folder for profile.json and trace.json");
  cmd->add_option("--compare", o->compare, "A.json B.json: two profiles side by side, B/A per row")->expected(2);
  return {cmd, [o] { return profile_command(*o); }};
}

}  // namespace minidl
