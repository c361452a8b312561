// The loss a run trains and evaluates with (loss.type, train/config.h): cross-entropy with the
// config's label smoothing, the Dice loss, or their sum (MONAI's DiceCELoss(lambda_dice=1,
// lambda_ce=1)). Logits and labels as the data gives them: (N, K) and (N) for images, (B, T, V)
// and (B, T) for tokens, (N, C, D, H, W) and (N, D, H, W) for volumes.
#pragma once
#include "core/tensor.h"
#include "train/config.h"

namespace minidl {

Tensor training_loss(const TrainConfig& config, const Tensor& logits, const Tensor& labels);

}  // namespace minidl
