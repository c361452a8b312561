// `minidl config --doc`: the run config's reference (train/config_keys.h's table as Markdown, of
// which docs/config.md is a copy that a test keeps current).
#include <CLI/CLI.hpp>
#include <iostream>

#include "train/config_keys.h"

namespace minidl {

CLI::App* add_config_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("config", "the run config's keys: type, default, allowed values, meaning");
  cmd->add_flag("--doc", "print the reference as Markdown (what docs/config.md holds)")->required();
  return cmd;
}

int config_command() {
  std::cout << config_reference_markdown();
  return 0;
}

}  // namespace minidl
