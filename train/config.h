// The training config: one JSON file, checked strictly (an unknown key or a wrong type is an
// error naming its key path), overridable from the command line with --set key.path=value, and
// written back resolved (every default filled in) into the run folder.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace minidl {

// Bounds on the run's counts (far beyond any CIFAR-10 run) so step counts cannot overflow.
constexpr int64_t kMaxEpochs = 1000000;
constexpr int64_t kMaxBatchSize = 1000000;

struct TrainConfig {
  uint64_t seed = 0;
  bool deterministic = true;
  bool allow_tf32 = true;
  bool cuda_graph = true;   // on a GPU, replay each training and evaluation step as one CUDA graph
  bool norm_single_read = true;   // on a GPU, the single-read normalization kernels (core/settings.h)
  std::string precision = "fp32";             // "fp32", "bf16" or "fp16" (train/precision.h)
  std::string memory_format = "contiguous";   // "contiguous" (NCHW) or "channels_last" (NHWC)
  std::string device = "auto";
  double epochs = 1;        // may be fractional (9.9): the run takes ceil(epochs * steps per epoch) steps
  int64_t batch_size = 128;   // the global batch: all ranks' micro-batches of one optimizer step
  // Micro-batches per optimizer step on each rank: a rank trains on batch_size / (world size *
  // accumulate_steps) images at a time and the step sums the micro-batches' gradients in order,
  // so k accumulated micro-batches on one device give the bits of k ranks (docs/distributed.md).
  int64_t accumulate_steps = 1;
  nlohmann::json data = nlohmann::json::object();       // data/ options (parsed there)
  nlohmann::json model;                                  // {"layers": [...]}
  double label_smoothing = 0.0;
  nlohmann::json optimizer;                              // optim/ factory input
  nlohmann::json schedule = {{"type", "constant"}};      // optim/ factory input
  nlohmann::json init = nlohmann::json::array();         // parameter init rules (train/param_rules.h)
  nlohmann::json freeze = nlohmann::json::array();       // parameter freeze rules (train/param_rules.h)
  nlohmann::json lookahead;                              // null: off; else optim/lookahead.h options
  nlohmann::json grad_scaler;                            // null: defaults; fp16 only (optim/grad_scaler.h)
  double grad_clip = 0;                                  // > 0: clip gradients to this global norm (optim/grad_clip.h)
  std::string tta = "none";                              // data/tta.h: "none", "flip", "flip_translate", "airbench"
  int64_t eval_batch_size = 1000;
  std::string output_dir = "runs/run";
  bool progress = true;                                  // a progress bar on a terminal
  bool tensorboard = false;                              // log.tensorboard: event files in the run folder
  // "checkpoint": a checkpoint is written at the end of every epoch (before its evaluation), and
  // also every `every_steps` steps and every `every_minutes` minutes when those are > 0;
  // `keep` checkpoints are kept (train/checkpoint.h, write_run_checkpoint).
  int64_t checkpoint_every_steps = 0;
  double checkpoint_every_minutes = 0;
  int64_t checkpoint_keep = 1;

  // The config as JSON with every default filled in (what config.json in a run folder holds).
  nlohmann::json to_json() const;
};

// Reads a JSON config file (at most 16 MiB, nested at most 64 deep: core/json_limits.h) holding
// an object, naming the file and the parse error position on failure.
nlohmann::json read_json_file(const std::string& path);
// Applies "a.b.c=value" (value parsed as JSON, else taken as a string); list items by index
// ("model.layers.1.relu=true"). Errors name the override.
void apply_override(nlohmann::json& config, const std::string& assignment);
// Parses and checks a config object.
TrainConfig parse_train_config(const nlohmann::json& config);

}  // namespace minidl
