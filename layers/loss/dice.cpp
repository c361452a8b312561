// The Dice loss (one autograd node, gradient computed in the forward) and the Dice counts.
#include "layers/loss/dice.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/storage_rounding.h"
#include "layers/loss/dice_kernels.h"
#include "layers/loss/loss.h"

namespace minidl {
namespace {

// The problem's sizes (n, classes, spatial) after checking the operands.
struct DiceShape {
  int64_t n, classes, spatial;
};

DiceShape check_inputs(const Tensor& logits, const Tensor& labels, const char* what) {
  MINIDL_CHECK(logits.defined() && logits.dtype() == DType::Float32 && logits.dim() >= 3, what,
               ": logits must be a float32 (N, C, *) tensor with a spatial dimension, got ",
               logits.defined() ? logits.str() : std::string("an undefined tensor"));
  MINIDL_CHECK(labels.defined() && labels.dtype() == DType::Int32, what, ": labels must be an int32 tensor, got ",
               labels.defined() ? labels.str() : std::string("an undefined tensor"));
  Shape want{logits.size(0)};
  want.insert(want.end(), logits.shape().begin() + 2, logits.shape().end());
  MINIDL_CHECK(labels.shape() == want, what, ": labels ", shape_str(labels.shape()), " do not match logits ",
               shape_str(logits.shape()), " (expected ", shape_str(want), ")");
  check_same_device(logits, labels, what);
  const int64_t n = logits.size(0), classes = logits.size(1);
  MINIDL_CHECK(n >= 1 && classes >= 2 && labels.numel() >= 1, what, ": logits ", shape_str(logits.shape()),
               " need a sample, two classes and a voxel");
  MINIDL_CHECK(labels.numel() <= std::numeric_limits<int32_t>::max(), what, ": ", labels.numel(),
               " voxels in one batch, more than 2^31");
  return {n, classes, labels.numel() / n};
}

void check_labels_cpu(const Tensor& labels, int64_t classes, const char* what) {
  const int32_t* l = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    MINIDL_CHECK(l[i] >= 0 && l[i] < classes, what, ": labels at flat index ", i, " = ", l[i], " is out of range for ",
                 classes, " classes");
}

}  // namespace

Tensor dice_loss(const Tensor& logits_in, const Tensor& labels_in, float smooth) {
  if (holds_half(logits_in)) return dice_loss(as_float32(logits_in), labels_in, smooth);
  MINIDL_CHECK(smooth >= 0.f && std::isfinite(smooth), "dice_loss: smooth must be a finite number >= 0, got ", smooth);
  // The kernels read NC(DHW): a channels-last input is reordered, and its gradient goes back
  // through the same reorder.
  const Tensor logits = logits_in.defined() ? logits_in.contiguous() : logits_in;
  const Tensor labels = labels_in.defined() ? labels_in.contiguous() : labels_in;
  const DiceShape s = check_inputs(logits, labels, "dice_loss");
  const bool grad = autograd::needs_grad({logits});
  Tensor loss = Tensor::empty({1}, DType::Float32, logits.device());
  Tensor dlogits = grad ? Tensor::empty_like(logits) : Tensor();
  float* d = grad ? dlogits.data<float>() : nullptr;
  dispatch(
      logits.device(), "dice_loss",
      [&] {
        check_labels_cpu(labels, s.classes, "dice_loss");
        kernels::dice_loss_cpu(logits.data<float>(), labels.data<int32_t>(), s.n, s.classes, s.spatial, smooth,
                               loss.data<float>(), d);
      },
      [&] {
        Tensor scratch =
            Tensor::empty({kernels::dice_scratch_floats(s.n, s.classes, s.spatial)}, DType::Float32, logits.device());
        kernels::dice_loss_cuda(logits.data<float>(), labels.data<int32_t>(), s.n, s.classes, s.spatial, smooth,
                                scratch.data<float>(), loss.data<float>(), d);
      });
  if (grad) record_loss_gradient(loss, "dice_loss", logits, dlogits);
  return loss;
}

Tensor dice_counts(const Tensor& logits_in, const Tensor& labels_in) {
  const Tensor logits = as_float32(logits_in).contiguous(), labels = labels_in.contiguous();
  const DiceShape s = check_inputs(logits, labels, "dice_counts");
  Tensor counts = Tensor::zeros({s.classes, 3}, DType::Int32, logits.device());
  dispatch(
      logits.device(), "dice_counts",
      [&] {
        kernels::dice_counts_cpu(logits.data<float>(), labels.data<int32_t>(), s.n, s.classes, s.spatial,
                                 counts.data<int32_t>());
      },
      [&] {
        kernels::dice_counts_cuda(logits.data<float>(), labels.data<int32_t>(), s.n, s.classes, s.spatial,
                                  counts.data<int32_t>());
      });
  return counts;
}

DiceScores::DiceScores(int64_t classes)
    : intersection_(static_cast<size_t>(classes)),
      predicted_(static_cast<size_t>(classes)),
      target_(static_cast<size_t>(classes)) {
  MINIDL_CHECK(classes >= 2, "DiceScores: classes must be >= 2, got ", classes);
}

void DiceScores::add(const Tensor& counts) {
  MINIDL_CHECK(counts.dtype() == DType::Int32 && counts.shape() == Shape({classes(), 3}),
               "DiceScores: expected int32 counts (", classes(), ", 3), got ", counts.str());
  const Tensor host = counts.to(Device::cpu());
  const int32_t* c = host.data<int32_t>();
  for (size_t k = 0; k < target_.size(); ++k) {
    intersection_[k] += c[3 * k];
    predicted_[k] += c[3 * k + 1];
    target_[k] += c[3 * k + 2];
  }
}

double DiceScores::dice(int64_t c) const {
  MINIDL_CHECK(c >= 0 && c < classes(), "DiceScores: class ", c, " is out of range for ", classes(), " classes");
  if (target_[c] == 0) return std::nan("");
  return 2.0 * static_cast<double>(intersection_[c]) / static_cast<double>(predicted_[c] + target_[c]);
}

double DiceScores::mean(int64_t first) const {
  double sum = 0;
  int64_t n = 0;
  for (int64_t c = first; c < classes(); ++c)
    if (target_[c] > 0) sum += dice(c), ++n;
  return n ? sum / static_cast<double>(n) : std::nan("");
}

}  // namespace minidl
