// The subcommands of `minidl`, one file each: each adds its options to the one CLI11 parser and
// returns what runs when the user chose it. The library does the work (train/run.h, profiling/, export/,
// bench/); these files only turn arguments into its calls.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace minidl {

struct Command {
  CLI::App* app;             // the subcommand, set when the command line chose it
  std::function<int()> run;  // its exit status
};

Command add_train_command(CLI::App& app);     // apps/train_command.cpp
Command add_profile_command(CLI::App& app);   // apps/profile_command.cpp
Command add_repro_command(CLI::App& app);     // apps/repro_command.cpp
Command add_export_command(CLI::App& app);    // apps/export_command.cpp
Command add_layers_command(CLI::App& app);    // apps/layers_command.cpp
Command add_config_command(CLI::App& app);    // apps/config_command.cpp
Command add_bench_command(CLI::App& app);     // apps/bench_command.cpp
Command add_parity_command(CLI::App& app);    // apps/parity_command.cpp
Command add_predict_command(CLI::App& app);   // apps/predict_command.cpp
Command add_eval_command(CLI::App& app);      // apps/eval_command.cpp
Command add_summary_command(CLI::App& app);   // apps/summary_command.cpp
Command add_tokenize_command(CLI::App& app);  // apps/tokenize_command.cpp
Command add_generate_command(CLI::App& app);  // apps/generate_command.cpp
// `minidl completion bash|zsh`: the shell completion script, generated from the parser itself
// (apps/completion_command.cpp), so it must be added after every other command.
Command add_completion_command(CLI::App& app);

// What `minidl --version` prints (apps/version.cpp).
std::string version_text();

// An integer option's check: a whole number in lo..hi, else "must be a whole number (lo..hi), got
// 1.5" or "must be >= 0, got -1" (apps/cli_checks.cpp).
CLI::Validator whole_number(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max());

// --config, --set and --device, which the commands that build a run from a config take alike.
CLI::Option* add_config_options(CLI::App* cmd, std::string& config, std::vector<std::string>& overrides,
                                std::string& device);

// --run (required), --weights and --device, which the commands that load a trained run take
// alike, and --tta, which those that classify images take.
void add_trained_run_options(CLI::App* cmd, std::string& run_dir, std::string& weights, std::string& device);
void add_trained_run_options(CLI::App* cmd, std::string& run_dir, std::string& weights, std::string& device,
                             std::string& tta);

}  // namespace minidl
