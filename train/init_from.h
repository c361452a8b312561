// "init_from": a new run starts from trained weights (fine-tuning), loaded by name as PyTorch's
// load_state_dict does, from a minidl run folder or any safetensors file with PyTorch state-dict
// names (a PyTorch twin's weights: scripts/torch/model_from_json.py).
//   "init_from": {"path": "runs/cifar10", "skip": ["8.*"], "map": {"module": ""}, "strict": true}
// The model is built and initialized from the seed first (and by the "init" rules); each model
// tensor whose name the file holds then takes the file's values. "skip" patterns (optimizer groups'
// "match": a dotted suffix, or a glob with * and ? over the whole name) name model tensors that
// keep their initialization (a new head). "map" renames the file's tensors first: a name equal to
// a key, or starting with the key and a dot, has that prefix replaced ("module": "" drops
// DistributedDataParallel's "module." prefix). A shape that differs is always an error naming the
// tensor, unless skipped; "strict" (PyTorch's default, true) also refuses model tensors the file
// lacks and file tensors the model lacks. PyTorch's BatchNorm counters (num_batches_tracked, which
// minidl does not keep) are ignored. A file sharing no tensor with the model is refused.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace minidl {

class Module;

struct InitFromOptions {
  std::string path;  // "": off; a run folder (its model.safetensors) or a .safetensors file
  std::vector<std::string> skip;
  std::vector<std::pair<std::string, std::string>> map;  // file name prefix -> model name prefix
  bool strict = true;

  bool enabled() const { return !path.empty(); }
};

// What loading did, for the run log.
struct InitFromReport {
  std::string file;                 // the safetensors file read
  std::vector<std::string> loaded;  // model tensors that took the file's values
  int64_t loaded_values = 0;
  std::vector<std::string> skipped;  // model tensors kept as initialized by "skip"
  std::vector<std::string> fresh;    // model tensors the file lacks (strict false): as initialized
  std::vector<std::string> unused;   // file tensors no model tensor took (strict false), skip's included
  int64_t counters = 0;              // PyTorch's num_batches_tracked, ignored
};

// Copies the file's tensors into `model` (on any device) by the rules above; errors name the key
// (`key`.path, `key`.skip, ...), the file and the tensor.
InitFromReport load_init_from(Module& model, const InitFromOptions& options, const std::string& key = "init_from");

// The file a path names: the path itself, or a run folder's model.safetensors.
std::string init_from_file(const std::string& path, const std::string& key = "init_from");

// The log's lines: what was loaded, skipped and left new, and the model's trainable and frozen
// parameter counts at the first step.
std::vector<std::string> init_from_lines(const InitFromReport& report, int64_t trainable, int64_t frozen);

}  // namespace minidl
