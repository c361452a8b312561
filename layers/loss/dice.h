// The soft Dice loss and the Dice metric of a segmentation: logits (N, C, *) over C classes at each
// voxel (any number of spatial dimensions, any memory format) and int32 labels (N, *).
//
// dice_loss is MONAI's DiceLoss(softmax=True, to_onehot_y=True, include_background=True,
// reduction="mean", smooth_nr=smooth_dr=smooth): p the softmax over the classes and t the one-hot
// label, for each (sample, class) Dice = (2 sum p t + smooth) / (sum p + sum t + smooth), and the
// loss 1 - the mean of Dice over samples and classes, a one-element float32 tensor. Like
// cross_entropy, the gradient is computed in the forward (the backward scales it) and the sums run
// in a fixed order in double: the same bits every run. Half logits are widened (float32 loss).
// A label out of range is an Error on the CPU, and makes the loss NaN on CUDA.
//
// dice_counts and DiceScores are the metric: the prediction is each voxel's argmax class, and per
// class Dice = 2 |pred and label| / (|pred| + |label|) over every voxel evaluated (nnU-Net's
// "global" Dice); classes that no voxel is labelled with are left out of the mean, as MONAI's
// DiceMetric(ignore_empty=True). Counts are integers: the same on every device.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace minidl {

Tensor dice_loss(const Tensor& logits, const Tensor& labels, float smooth = 1e-5f);

// int32 (C, 3) on the logits' device: per class, voxels predicted and labelled c, predicted c,
// labelled c. Without waiting.
Tensor dice_counts(const Tensor& logits, const Tensor& labels);

// The counts of dice_counts summed over batches (on the host, in int64).
class DiceScores {
 public:
  explicit DiceScores(int64_t classes);
  void add(const Tensor& counts);  // waits for a device tensor
  int64_t classes() const { return static_cast<int64_t>(target_.size()); }
  // Class c's Dice, NaN when no voxel is labelled c.
  double dice(int64_t c) const;
  // The mean Dice over classes first .. C - 1 that have a labelled voxel (first = 1: the foreground
  // classes, background 0 left out); NaN when none has.
  double mean(int64_t first = 1) const;

 private:
  std::vector<int64_t> intersection_, predicted_, target_;
};

}  // namespace minidl
