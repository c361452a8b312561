// `minidl parity`: hands everything after its name to the parity driver's own parser
// (bench/parity.h), which scripts/parity calls with PyTorch's side beside it.
#include "apps/commands.h"
#include "bench/parity.h"

namespace minidl {

Command add_parity_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("parity", "run one layer or one training step for the PyTorch parity check");
  cmd->prefix_command();
  return {cmd, [cmd] { return parity_main(cmd->remaining()); }};
}

}  // namespace minidl
