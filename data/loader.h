// Batches for training and evaluation. Training: a fresh permutation every epoch (a pure function
// of seed and epoch), augmentation, full batches only (drop_last). Evaluation: the dataset in
// order, normalization only, the last partial batch kept. On a GPU the uint8 images live on the
// device and one kernel makes each float batch, so the host only uploads the epoch's order and,
// before each batch, a 64-byte cursor (kernels::BatchCursor). A batch is two halves: advance()
// (host: moves and uploads the cursor) and emit() (device: the batch kernel, reading the cursor),
// so a CUDA graph can capture emit() once and replay it after each advance().
//
//   Loader train(data, LoaderOptions::training(options, 512, seed), device);
//   for (int64_t e = 0; e < epochs; ++e) {
//     train.start_epoch(e);
//     Batch b;
//     while (train.next(b)) { ... b.images (B,C,H,W) float32, b.labels (B) int32 ... }
//   }
// A token set's samples are its windows (data/cifar10.h's Dataset): a batch is their inputs,
// int32 (B, T), and their targets, int32 (B, T), by the same order, cursor and micro-batches. A
// volume set's batch is its volumes, (B, C, D, H, W) in LoaderOptions' dtype and format (NDHWC
// where the format is channels-last), and their int32 (B, D, H, W) labels.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "data/cifar10.h"
#include "data/options.h"

namespace minidl {

struct LoaderOptions {
  int64_t batch_size = 512;
  bool shuffle = false;                  // a new order every epoch
  bool drop_last = false;                // skip the last partial batch
  uint64_t seed = 0;                     // shuffling and augmentation draws
  Normalization normalize;
  std::optional<AugmentOptions> augment;  // none: normalization only
  // The batch's storage: float32 NCHW, or the model's activation type and layout where its first
  // layer would convert the batch to them anyway (Trainer): the same values, one pass fewer.
  DType dtype = DType::Float32;
  MemoryFormat format = MemoryFormat::Contiguous;

  static LoaderOptions training(const DataOptions& data, int64_t batch_size, uint64_t seed);
  static LoaderOptions evaluation(const DataOptions& data, int64_t batch_size);
};

struct Batch {
  Tensor images;  // (B, C, H, W) of LoaderOptions' dtype and format, normalized, on the loader's device;
                  // a token set's input ids, int32 (B, T); volumes (B, C, D, H, W)
  Tensor labels;  // int32 (B); a token set's targets, int32 (B, T); a volume set's (B, D, H, W)
};

class Loader {
 public:
  Loader(const Dataset& data, LoaderOptions options, Device device);

  int64_t batches_per_epoch() const;
  int64_t dataset_size() const { return size_; }
  const LoaderOptions& options() const { return options_; }
  Device device() const { return device_; }

  // Rewinds to the first batch of `epoch` (0-based), which fixes its order and its draws.
  void start_epoch(int64_t epoch);
  // Rewinds to a pass over the images `indices` (dataset indices, taken in this order) with epoch
  // 0's draws: selective TTA's second pass. The next start_epoch() returns to the whole set.
  void start_subset(const std::vector<int32_t>& indices);
  // The next batch of the epoch (fresh tensors); false when the epoch is over. advance() and then
  // emit().
  bool next(Batch& out);
  // Moves the cursor to the next batch and queues its upload; false (and nothing queued) when the
  // epoch is over.
  bool advance();
  // Queues the batch the cursor points at (fresh tensors of the cursor's batch size).
  void emit(Batch& out) const;
  // Images in the batch advance() moved to (the last one of an evaluation may be short).
  int64_t current_batch_size() const { return current_batch_; }
  // Makes emit() queue `size` images from `offset` on inside the batch advance() moved to: a
  // micro-batch of a data-parallel step. Its images and draws are those the whole batch would
  // have there (both are keyed by the position in the epoch). Nothing is uploaded: the offset is
  // an argument of the batch kernel, the same at every step, so a CUDA graph may replay it.
  void select_micro_batch(int64_t offset, int64_t size);

 private:
  void check_images(const Dataset& data);
  void emit_tokens(Batch& out) const;
  void check_volumes(const Dataset& data);
  void emit_volumes(Batch& out) const;

  LoaderOptions options_;
  Device device_;
  int64_t size_;
  int channels_ = 0, height_ = 0, width_ = 0;  // the images' shape
  int64_t seq_len_ = 0;                        // a token set's: its windows hold seq_len_ + 1 tokens
  Shape volume_shape_;                         // a volume set's (0, C, D, H, W); empty otherwise
  Tensor images_;  // uint8 (N, C, H, W) on device_; a token set's int32 (N, T + 1) windows; float32 volumes
  Tensor labels_;  // int32 (N) on device_ (none for a token set); a volume set's (N, D, H, W)
  Tensor order_;   // int32 (N) on device_: this epoch's order, rewritten in place each epoch
  Tensor cursor_;  // one kernels::BatchCursor on device_, rewritten before each batch
  kernels::AugmentParams params_;
  int64_t epoch_ = -1;
  int64_t limit_ = 0;          // images in this pass: size_, or a subset's count
  bool reordered_ = false;     // order_ holds a subset (an unshuffled loader restores the identity)
  int64_t position_ = 0;       // where the next advance() starts
  int64_t current_batch_ = 0;  // size of the batch emit() queues
  int64_t micro_offset_ = 0;   // where it starts inside the cursor's batch
  int64_t batch_start_ = 0;    // position of the batch advance() moved to
  int64_t batch_size_ = 0;     // and its size
};

// The order of epoch `epoch`: Fisher-Yates where the swap partner of position i is drawn from
// philox(seed, kStreamShuffle, epoch << 32 | i). Same seed and epoch, same order, on any machine.
std::vector<int32_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

}  // namespace minidl
