// Checkpoints: one safetensors file holding the model's state dict under its PyTorch names, the
// optimizer's state under "optimizer.<name>", and metadata (format, epoch, global step, the
// resolved config, the optimizer's scalar state). Written atomically (core/safetensors), so a
// crash mid-write keeps the last good checkpoint. model.safetensors beside it holds the weights
// alone, loadable by PyTorch (safetensors.torch.load_file + load_state_dict).
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
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
  // Inside an epoch only: whether the evaluation at this position is logged already. A checkpoint
  // at the last step of an epoch is written before the evaluation (false), so a run killed while
  // evaluating evaluates again on resume; true where a run ended part-way through an epoch
  // (--max-steps, a fractional epoch count) after evaluating.
  bool evaluated = false;
  // A float16 run's loss-scaler state (optim/grad_scaler.h), null otherwise.
  nlohmann::json grad_scaler;
  // The data's class names (index = label), metadata "classes"; null when not recorded.
  nlohmann::json classes;
  // Early stopping's and the best checkpoint's state after the last evaluation before this position
  // (train/model_selection.h), metadata "selection"; null when neither is on.
  nlohmann::json selection;
  // The ranks that trained it, metadata "world_size" (written above 1; absent: 1). With the
  // config's accumulate_steps it gives the micro-batches per step a resume must keep.
  int64_t world_size = 1;
  // The CRC-32 of the training data it trained on (Trainer::training_data_crc32), 8 hex digits,
  // metadata "data_crc32"; empty when not recorded. A resume with other data is refused.
  std::string data_crc32;
};

// The checkpoint of `model` and `optimizer` at `info`, written to `path` on the calling thread.
void save_checkpoint(const std::string& path, const Module& model, const Optimizer& optimizer,
                     const CheckpointInfo& info);
// "checkpoint.step-<N>.safetensors": a kept earlier checkpoint of a run.
bool is_kept_checkpoint_name(const std::string& name);

// The parts of a checkpoint, so a writer can take them on one thread and write them on another
// (train/checkpoint_writer.h). The tensors, in file order: the model's state dict, then the
// optimizer's state as "optimizer.<name>" (on their devices).
std::vector<std::pair<std::string, Tensor>> checkpoint_tensors(const Module& model, const Optimizer& optimizer);
// The metadata at `info`, without "tensors_crc32" (computed from the bytes as they are written)
// and "metadata_crc32".
std::map<std::string, std::string> checkpoint_metadata(const Optimizer& optimizer, const CheckpointInfo& info);
// The checkpoint file of `tensors` (host bytes in checkpoint_tensors' order) and `metadata`, with
// the CRC-32 of the tensors ("tensors_crc32": every header entry and its bytes) and of the other
// metadata entries ("metadata_crc32"), both checked on load where present. Touches no Tensor: safe
// on any thread.
void save_checkpoint_bytes(const std::string& path, const std::vector<TensorBytes>& tensors,
                           std::map<std::string, std::string> metadata);
// The run's checkpoint DIR/checkpoint.safetensors at global step `step`, written atomically: the
// one it replaces stays complete until the new one is. With keep > 1 the replaced one (at step
// `previous_step`, -1: none) stays as DIR/checkpoint.step-<previous_step>.safetensors, and the keep - 1
// newest of those are kept. Touches no Tensor, like save_checkpoint_bytes.
void write_run_checkpoint(const std::string& dir, const std::vector<TensorBytes>& tensors,
                          std::map<std::string, std::string> metadata, int64_t step, int64_t previous_step,
                          int64_t keep);

// Restores model and optimizer state (tensors land on their current device). Every problem
// (missing file, corrupt file, wrong format, metadata out of range or not an integer, a config
// that is not an object or nested too deep, a tensor missing or mis-shaped) is an Error naming
// the file, raised before anything is changed.
CheckpointInfo load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer);
// zlib's CRC-32 of host tensors in file order, each as its header entry (name, dtype, shape, data
// offsets) then its bytes, 8 hex digits: the checksum a checkpoint records as "tensors_crc32" and
// is checked against on load, so a flipped bit and a renamed or swapped tensor are both found. A
// CRC rather than a SHA-256: it catches every flipped bit and torn block a disk or a copy makes,
// and zlib computes it at gigabytes per second (our SHA-256 took seconds per checkpoint of a few
// hundred MB).
std::string tensors_crc32(const std::vector<std::pair<std::string, Tensor>>& host_tensors);
std::string tensors_crc32(const std::vector<TensorBytes>& tensors);

// model.safetensors: the weights alone, loadable by PyTorch, and protected as a checkpoint is: its
// metadata is "format": "pt" and "tensors_crc32". It records nothing of the config, so runs that
// end with the same weights write the same file.
std::map<std::string, std::string> weights_metadata(const std::vector<TensorBytes>& tensors);
// model.safetensors of `model`, written atomically on the calling thread, with `extra` metadata
// beside the weights' own (best.safetensors records the epoch and metric it was chosen by).
void save_weights(const std::string& path, const Module& model, const std::map<std::string, std::string>& extra = {});
// A weights file read back: statistics a run can produce, and its tensors' CRC-32 where the file
// records it (files written before carry none).
void check_weights(const SafeTensors& st, const std::string& path);
// A run's config.json against its checkpoint (whose metadata, config included, has a CRC-32 of
// its own): the model, data.format, data.image_size and data.normalize must be the checkpoint's,
// so an edited config.json is not silently exported with the run's weights. --resume --set
// epochs=N and accumulate_steps=K change neither.
void check_run_config(const nlohmann::json& config, const std::string& config_path,
                      const std::string& checkpoint_path);
// A CRC-32 as the files record it: 8 lowercase hex digits.
std::string crc_hex(uint32_t crc);
// Reads only the metadata (resolved config, epoch, step).
CheckpointInfo read_checkpoint_info(const std::string& path);

}  // namespace minidl
