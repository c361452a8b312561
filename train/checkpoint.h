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
  int64_t step = 0;    // global steps completed
  nlohmann::json config;
};

void save_checkpoint(const std::string& path, const Module& model, const Optimizer& optimizer,
                     const CheckpointInfo& info);
// Restores model and optimizer state (tensors land on their current device). Every problem
// (missing file, corrupt file, wrong format, a tensor missing or mis-shaped) is an Error naming
// the file.
CheckpointInfo load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer);
// Reads only the metadata (resolved config, epoch, step).
CheckpointInfo read_checkpoint_info(const std::string& path);

}  // namespace minidl
