// The minidl command: train, profile, repro, export, bench, parity. Every error reaches here as one
// message and a non-zero exit code.
#include <CLI/CLI.hpp>
#include <iostream>
#include <limits>
#include <new>
#include <stdexcept>

#include "apps/bench_command.h"
#include "bench/parity.h"
#include "export/export_command.h"
#include "train/profile_command.h"
#include "train/repro_command.h"
#include "train/trainer.h"
#include "core/error.h"
#include "core/json_limits.h"

namespace {

// Every message on one printable line of bounded length, whatever bytes a value it quotes held:
// the places that quote user input shorten and escape it themselves (core/json_limits.h); this
// catches any that do not, so a terminal never receives raw control bytes or megabytes of text.
std::string printable(const char* message) { return minidl::text_excerpt(message, 2000); }

// --config, --set and --device, which train, profile and repro take alike.
CLI::Option* add_config_options(CLI::App* cmd, std::string& config, std::vector<std::string>& overrides,
                                std::string& device) {
  CLI::Option* c = cmd->add_option("--config", config, "JSON config file");
  cmd->add_option("--set", overrides, "override a config value: key.path=value (repeatable)");
  cmd->add_option("--device", device, "cpu, cuda or auto (default: the config's)");
  return c;
}

}  // namespace

namespace minidl {
CLI::App* add_layers_command(CLI::App& app, bool& json);  // apps/layers_command.cpp
int layers_command(bool json);
}  // namespace minidl

int main(int argc, char** argv) {
  using namespace minidl;
  CLI::App app{"minidl: train CIFAR-10 from a JSON config on the CPU or an NVIDIA GPU"};
  app.require_subcommand(1);

  TrainOptions train;
  auto* train_cmd = app.add_subcommand("train", "train a config (or resume a run)");
  add_config_options(train_cmd, train.config_path, train.overrides, train.device);
  train_cmd->add_option("--output", train.output_dir, "run folder (default: the config's output.dir)");
  train_cmd->add_option("--resume", train.resume_dir, "continue the run in this folder from its checkpoint");
  train_cmd->add_flag("--overwrite", train.overwrite, "replace the run files in a non-empty output folder");
  train_cmd->add_flag("--restart", train.restart,
                      "with --resume: start the run again from its config.json (a run stopped before its first checkpoint)");
  train_cmd->add_option("--max-steps", train.max_steps, "stop after this many steps in total")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  train_cmd->add_flag("--profile", train.profile, "print a per-layer time breakdown of the first epoch");
  train_cmd->add_option("--dist", train.dist,
                        "communicator: auto (mpi or nccl under a launcher of several ranks, else single), single, "
                        "mpi, nccl (nccl runs a world of one without a launcher); docs/distributed.md")
      ->check(CLI::IsMember({"auto", "single", "mpi", "nccl"}));

  ProfileOptions prof;
  auto* prof_cmd = app.add_subcommand("profile", "per-layer time breakdown of training steps");
  add_config_options(prof_cmd, prof.config_path, prof.overrides, prof.device);
  prof_cmd->add_option("--steps", prof.steps, "measured steps (median over them)");
  prof_cmd->add_option("--warmup", prof.warmup, "warm-up steps before measuring");
  prof_cmd->add_option("--output", prof.output_dir, "folder for profile.json and trace.json");
  prof_cmd->add_option("--compare", prof.compare, "A.json B.json: two profiles side by side, B/A per row")
      ->expected(2);

  ReproOptions repro;
  auto* repro_cmd = app.add_subcommand("repro", "train twice in separate processes and compare the bits");
  add_config_options(repro_cmd, repro.config_path, repro.overrides, repro.device)->required();
  repro_cmd->add_option("--steps", repro.steps, "steps per run (0: the whole config)");
  repro_cmd->add_option("--set-b", repro.overrides_b,
                        "override for run B only, e.g. cuda_graph=false: graphed A against eager B (repeatable)");
  repro_cmd->add_option("--output", repro.output_dir, "folder for the two runs");

  ExportOptions exp;
  auto* export_cmd = app.add_subcommand("export", "write a trained run's model as ONNX (eval mode, opset 17)");
  export_cmd->add_option("--run", exp.run_dir, "run folder: its config.json and model.safetensors");
  export_cmd->add_option("--config", exp.config_path, "or a config: its model as initialised (untrained)");
  export_cmd->add_option("--set", exp.overrides, "override a config value (with --config): key.path=value");
  export_cmd->add_option("--onnx", exp.onnx_path, "the ONNX file to write")->required();
  export_cmd->add_option("--logits", exp.logits_path,
                         "also write minidl's eval logits on the test set (with images, labels) to this safetensors file");
  export_cmd->add_option("--limit", exp.limit, "--logits on the first N test images (default: all)");
  export_cmd->add_option("--device", exp.device, "device for --logits: cpu, cuda or auto (default: the config's)");
  export_cmd->add_option("--data-dir", exp.data_dir, "CIFAR-10 folder for --logits (default: the config's data.dir)");

  bool layers_json = false;
  auto* layers_cmd = add_layers_command(app, layers_json);

  const BenchCommand bench(app);

  // parity hands everything after its name to its own parser (scripts/parity drives it).
  auto* parity_cmd = app.add_subcommand("parity", "run one layer or one training step for the PyTorch parity check");
  parity_cmd->prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, as other command-line tools do; CLI11's own codes (100+) would read
    // as crashes. --help is a ParseError too, and exits 0.
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (*train_cmd) return train_command(train);
    if (*prof_cmd) return profile_command(prof);
    if (*repro_cmd) return repro_command(repro);
    if (*export_cmd) return export_command(exp);
    if (*layers_cmd) return layers_command(layers_json);
    if (bench.chosen()) return bench.run();
    if (*parity_cmd) return parity_main(parity_cmd->remaining());
  } catch (const Error& e) {
    std::cerr << "minidl: error: " << printable(e.what()) << std::endl;
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "minidl: error: out of memory (a size in the config or input is too large?)" << std::endl;
    return 1;
  } catch (const std::length_error& e) {
    std::cerr << "minidl: error: a size is too large (" << printable(e.what()) << ")" << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "minidl: unexpected error: " << printable(e.what()) << std::endl;
    return 1;
  }
  return 0;
}
