// `minidl summary`: a config's model layer by layer (train/model_summary.h).
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "train/model_summary.h"
#include "train/trainer.h"

namespace minidl {

namespace {

struct SummaryOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string device;
  int64_t batch_size = 0;
  bool json = false;
};

int summary_command(const SummaryOptions& o) {
  const PreparedConfig p = prepare_config(o.config_path, o.overrides, o.device);
  const ModelSummary s = summarize_model(p.config, p.device, o.batch_size);
  if (o.json)
    std::cout << summary_json(s).dump(2) << std::endl;
  else
    std::cout << "minidl summary: " << o.config_path << "\n" << summary_text(s) << std::flush;
  return 0;
}

}  // namespace

Command add_summary_command(CLI::App& app) {
  auto o = std::make_shared<SummaryOptions>();
  CLI::App* cmd = app.add_subcommand(
      "summary", "a config's model layer by layer: output shapes, parameters, FLOPs, activation memory");
  add_config_options(cmd, o->config_path, o->overrides, o->device)->required();
  cmd->add_option("--batch-size", o->batch_size, "the batch the counts are for (default: the config's batch_size)");
  cmd->add_flag("--json", o->json, "print JSON instead of the table");
  return {cmd, [o] { return summary_command(*o); }};
}

}  // namespace minidl
