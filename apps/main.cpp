// The minidl command: train, predict, eval, summary, profile, repro, export, layers, config, bench,
// parity, tokenize, generate, completion (apps/commands.h, one file each). Every error reaches here
// as one message and a non-zero exit code.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <new>
#include <stdexcept>

#include "apps/commands.h"
#include "apps/host_heap.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/spelling.h"
#include "data/tta.h"

namespace minidl {

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

void add_trained_run_options(CLI::App* cmd, std::string& run_dir, std::string& weights, std::string& device) {
  cmd->add_option("--run", run_dir, "the run folder: its config.json, model.safetensors (and classes.json)")
      ->required();
  cmd->add_option("--weights", weights,
                  "another weights file of the run's model, or best: its best.safetensors (default: its "
                  "model.safetensors, the last epoch's)");
  cmd->add_option("--device", device, "cpu, cuda or auto (default: the run's)");
}

void add_trained_run_options(CLI::App* cmd, std::string& run_dir, std::string& weights, std::string& device,
                             std::string& tta) {
  add_trained_run_options(cmd, run_dir, weights, device);
  cmd->add_option("--tta", tta, "test-time augmentation (default: the run's eval.tta)")
      ->check(CLI::IsMember(enum_names<TtaMode>()));
}

}  // namespace minidl

int main(int argc, char** argv) {
  using namespace minidl;
  keep_freed_host_memory();
  CLI::App app{"minidl: train image classifiers from a JSON config on the CPU or an NVIDIA GPU"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", [] { return version_text(); },
      "print the version, git commit, build flags and "
      "CUDA, cuDNN, NCCL and MPI versions");
  const Command commands[] = {add_train_command(app),    add_predict_command(app),   add_eval_command(app),
                              add_summary_command(app),  add_profile_command(app),   add_repro_command(app),
                              add_export_command(app),   add_layers_command(app),    add_config_command(app),
                              add_bench_command(app),    add_parity_command(app),    add_tokenize_command(app),
                              add_generate_command(app), add_completion_command(app)};
  if (argc < 2) {
    std::cerr << app.help() << std::endl;
    return 2;
  }
  // A first word that is no option and no command is a mistyped command: CLI11 alone would say
  // only that a command is required.
  if (argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const Command& command : commands) names.push_back(command.app->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      std::cerr << "minidl: error: unknown command '" << printable(argv[1]) << "'" << did_you_mean(argv[1], names)
                << "; the commands are " << list << " (minidl --help)" << std::endl;
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, as other command-line tools do; CLI11's own codes (100+) would read
    // as crashes. --help is a ParseError too, and exits 0.
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    for (const Command& command : commands)
      if (*command.app) return command.run();
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
