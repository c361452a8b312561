// `minidl config --doc`: the run config's reference (train/config_keys.h's table as Markdown, of
// which docs/config.md is a copy that a test keeps current).
#include <iostream>

#include "apps/commands.h"
#include "train/config_keys.h"

namespace minidl {

Command add_config_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("config", "the run config's keys: type, default, allowed values, meaning");
  cmd->add_flag("--doc", "print the reference as Markdown (what docs/config.md holds)")->required();
  return {cmd, [] {
            std::cout << config_reference_markdown();
            return 0;
          }};
}

}  // namespace minidl
