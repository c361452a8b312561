// The minidl command: train, profile, repro, export, layers, config, bench, parity
// (apps/commands.h, one file each). Every error reaches here as one message and a non-zero exit code.
#include <CLI/CLI.hpp>
#include <iostream>
#include <new>
#include <stdexcept>

#include "apps/commands.h"
#include "core/error.h"
#include "core/json_limits.h"

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

}  // namespace minidl

int main(int argc, char** argv) {
  using namespace minidl;
  CLI::App app{"minidl: train CIFAR-10 from a JSON config on the CPU or an NVIDIA GPU"};
  app.require_subcommand(1);
  const Command commands[] = {add_train_command(app),  add_profile_command(app), add_repro_command(app),
                              add_export_command(app), add_layers_command(app),  add_config_command(app),
                              add_bench_command(app),  add_parity_command(app),  add_tokenize_command(app)};
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
