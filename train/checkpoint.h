// Checkpoints: one safetensors file holding the model's state dict under its PyTorch names, the
// optimizer's state under "optimizer.<name>", and metadata (format, epoch, global step, the
// resolved config, the optimizer's scalar state). Written atomically (core/safetensors), so a
// crash mid-write keeps the last good checkpoint. model.safetensors beside it holds the weights
// alone, loadable by PyTorch (safetensors.torch.load_file + load_state_dict).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "layers/module.h"
#include "optim/optimizer.h"

namespace minidl {

struct CheckpointInfo {
  int64_t epoch = 0;   // epochs completed
  int64_t step = 0;    // global steps completed: past the end of `epoch` when written mid-epoch
  nlohmann::json config;
  // The epoch in progress (all 0 at an epoch end): images seen, correct predictions, the sum of
  // the step losses in step order and the seconds spent, so a run stopped mid-epoch (SIGINT,
  // SIGTERM) and resumed reports the same epoch metrics as one that was not stopped.
  int64_t epoch_seen = 0;
  int64_t epoch_correct = 0;
  double epoch_loss_sum = 0;
  double epoch_seconds = 0;
  // A float16 run's loss-scaler state (optim/grad_scaler.h), null otherwise.
  nlohmann::json grad_scaler;
  // The data's class names (index = label), metadata "classes"; null when not recorded.
  nlohmann::json classes;
};

void save_checkpoint(const std::string& path, const Module& model, const Optimizer& optimizer,
                     const CheckpointInfo& info);
// Restores model and optimizer state (tensors land on their current device). Every problem
// (missing file, corrupt file, wrong format, metadata out of range or not an integer, a config
// that is not an object or nested too deep, a tensor missing or mis-shaped) is an Error naming
// the file, raised before anything is changed.
CheckpointInfo load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer);
// Reads only the metadata (resolved config, epoch, step).
CheckpointInfo read_checkpoint_info(const std::string& path);

}  // namespace minidl
