// `minidl export`: a run's (or a config's) model as ONNX (export/export_command.h does the work).
#include <memory>

#include "apps/commands.h"
#include "export/export_command.h"

namespace minidl {

Command add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand("export", "write a trained run's model as ONNX (eval mode, opset 17)");
  cmd->add_option("--run", o->run_dir, "run folder: its config.json and model.safetensors");
  cmd->add_option("--config", o->config_path, "or a config: its model as initialised (untrained)");
  cmd->add_option("--set", o->overrides, "override a config value (with --config): key.path=value");
  cmd->add_option("--onnx", o->onnx_path, "the ONNX file to write");
  cmd->add_option("--logits", o->logits_path,
                  "also write minidl's eval logits on the test set (with images, labels) to this safetensors file");
  cmd->add_option("--limit", o->limit, "--logits on the first N test images (default: all)");
  cmd->add_option("--device", o->device, "device for --logits: cpu, cuda or auto (default: the config's)");
  cmd->add_option("--data-dir", o->data_dir, "CIFAR-10 folder for --logits (default: the config's data.dir)");
  cmd->add_option("--examples", o->examples_dir,
                  "instead: every layer type's examples as ONNX models, with minidl's outputs, into this folder");
  return {cmd, [o] { return export_command(*o); }};
}

}  // namespace minidl
