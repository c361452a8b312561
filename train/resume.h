// What a resumed run may continue from, and with which settings: the checks `Run` makes on
// --resume and --restart before anything on disk changes (and again under the folder's lock).
#pragma once
#include <cstdint>
#include <string>

#include "train/checkpoint.h"
#include "train/config.h"

namespace minidl {

struct RunOptions;

// The run's checkpoint file in its folder.
constexpr const char* kCheckpointFile = "checkpoint.safetensors";

// The checkpoint --resume continues from; a folder without one is explained: a run killed before
// its first checkpoint is started again with --restart.
CheckpointInfo read_resume_checkpoint(const std::string& run_dir);

// --resume continues the run as it was configured; the settings it takes are a larger epoch
// count (--set epochs=N, to train longer) and accumulate_steps (--set accumulate_steps=K, for
// another number of ranks: check_micro_batches), besides --device. Anything else would silently
// make the resumed run differ from the one its logs describe, so it is refused. `*raised` tells
// whether the epoch count changed. Whether the run is finished needs its steps per epoch
// (check_resume_position).
TrainConfig resume_config(const RunOptions& o, const CheckpointInfo& info, const std::string& run_dir, bool* raised);

// --resume DIR --restart: the run's own config, as it was; nothing else may change.
TrainConfig restart_config(const RunOptions& o, const std::string& run_dir);

// A step's gradients are the ordered sum over its micro-batches (world size x accumulate_steps),
// so a resumed run keeps their number to keep its bits; on another number of ranks,
// accumulate_steps makes up the difference. A model with synchronized BatchNorm (sync_norm_layers
// > 0) normalizes over the batches of every rank, so it resumes at its own world size only.
void check_micro_batches(const CheckpointInfo& info, int64_t micro_batches, int world_size, int64_t sync_norm_layers,
                         const std::string& run_dir);

// The checkpoint's position must be a step of its epoch at this run's steps per epoch (inside an
// epoch it may be the epoch's end, written before the evaluation), and the partial epoch's sums
// must fit in the steps taken. A run at its last step with its evaluation logged is finished.
void check_resume_position(const CheckpointInfo& info, int64_t steps_per_epoch, int64_t total_steps,
                           int64_t batch_size, const std::string& run_dir, double epochs, bool epochs_set);

// The checkpoint records the CRC-32 of the training data it trained on (checkpoints written
// before it was recorded have none): other data now (images added, changed or removed) would go
// on training another run than the one its logs describe, so it is refused.
void check_resume_data(const CheckpointInfo& info, uint32_t data_crc32, int64_t images, const std::string& run_dir);

// The same position and config: the checkpoint did not change between two reads.
bool same_position(const CheckpointInfo& a, const CheckpointInfo& b);

}  // namespace minidl
