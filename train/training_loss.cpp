#include "train/training_loss.h"

#include "core/tensor_ops.h"
#include "layers/loss/dice.h"
#include "layers/loss/loss.h"

namespace minidl {

Tensor training_loss(const TrainConfig& config, const Tensor& logits, const Tensor& labels) {
  const auto smoothing = static_cast<float>(config.label_smoothing);
  switch (config.loss_type) {
    case LossType::Dice:
      return dice_loss(logits, labels);
    case LossType::DiceCe:
      return add(dice_loss(logits, labels), cross_entropy(logits, labels, smoothing));
    case LossType::CrossEntropy:
      break;
  }
  return cross_entropy(logits, labels, smoothing);
}

}  // namespace minidl
