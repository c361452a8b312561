// `minidl train`: a run in its folder (train/run.h), from a config or resumed.
#include <memory>

#include "apps/commands.h"
#include "profiling/step_profiler.h"
#include "train/run.h"

namespace minidl {

Command add_train_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  o->profiler = step_profiler_factory();
  CLI::App* cmd = app.add_subcommand("train", "train a config (or resume a run)");
  add_config_options(cmd, o->config_path, o->overrides, o->device);
  cmd->add_option("--output", o->output_dir, "run folder (default: the config's output.dir)");
  cmd->add_option("--resume", o->resume_dir, "continue the run in this folder from its checkpoint");
  cmd->add_flag("--overwrite", o->overwrite, "replace the run files in a non-empty output folder");
  cmd->add_flag("--restart", o->restart,
                "with --resume: start the run again from its config.json (a run stopped before its first checkpoint)");
  // 0 is refused rather than read as "no limit" (RunOptions' internal meaning): leaving the option
  // out says that.
  cmd->add_option("--max-steps", o->max_steps,
                  "stop after this many global steps in total (>= 1; leave it out for no limit)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v == "0" ? std::string("0 steps would train nothing; leave --max-steps out for no limit") : "";
          },
          "INT >= 1"))
      ->check(whole_number(1));
  cmd->add_flag("--profile", o->profile, "print a per-layer time breakdown of the first epoch");
  cmd->add_option("--dist", o->dist,
                  "communicator: auto (mpi or nccl under a launcher of several ranks, else single), single, "
                  "mpi, nccl (nccl runs a world of one without a launcher); docs/distributed.md")
      ->check(CLI::IsMember({"auto", "single", "mpi", "nccl"}));
  cmd->add_option("--dist-timeout", o->dist_timeout,
                  "seconds a rank waits in a collective for the others before the job ends, naming the rank "
                  "that did not arrive; docs/distributed.md")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 604800.0));
  // Neither a config nor a run to resume is a usage error (exit 2), found once the options parsed.
  cmd->final_callback([o] {
    if (o->config_path.empty() && o->resume_dir.empty())
      throw CLI::RequiredError("train: --config FILE (or --resume RUN_DIR)");
  });
  return {cmd, [o] { return run_training(*o); }};
}

}  // namespace minidl
