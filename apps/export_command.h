// `minidl export`: a trained run (or a config's freshly initialised model) as an ONNX file, and
// optionally minidl's own eval-mode logits on the CIFAR-10 test set beside it, for comparing an
// ONNX runtime's outputs with minidl's (scripts/onnx_eval.py, scripts/gpu/onnx_check.sh); or, with
// --examples, every layer type's examples as models of their own with minidl's outputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl {

struct ExportOptions {
  std::string run_dir;                 // --run: its config.json and model.safetensors (final weights)
  std::string config_path;             // --config: the model as initialised from the config's seed
  std::vector<std::string> overrides;  // --set key.path=value (with --config)
  std::string onnx_path;               // --onnx: the file to write
  std::string logits_path;             // --logits: safetensors with images, labels, logits
  int64_t limit = 0;                   // --limit: the first N test images for --logits (0: all)
  std::string device;                  // --device for --logits ("" = the config's)
  std::string data_dir;                // --data-dir: the CIFAR-10 folder (default: the config's)
  std::string examples_dir;            // --examples: every layer type's examples instead (onnx_examples.h)
};

// Returns the process exit code; every problem is an Error naming what is wrong.
int export_command(const ExportOptions& options);

}  // namespace minidl
