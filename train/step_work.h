// The work (layers/work.h) of the training step's sections, which are not modules: the batch the
// loader emits, the loss and the gradient clipping (the optimizer's update counts itself:
// Optimizer::work). The trainer hands them to the profiler inside each section
// (StepObserver::add_work), as modules report theirs through Module::work.
#pragma once
#include <vector>

#include "data/loader.h"
#include "layers/work.h"

namespace minidl {

// The batch kernel: gathers uint8 pixels (one byte per element read), normalizes them (a
// subtract and a multiply per element; flips and crops move no extra bytes) and writes the
// images and labels.
LayerWork batch_work(const Batch& batch);

// Fused softmax cross-entropy (layers/loss/loss.h) and the count of correct predictions: per
// logit a max, a subtract, an exp, a sum, and the gradient (softmax - q) / N (2), 6 FLOPs, and the
// argmax's comparison, 1; the logits and labels read once, dlogits written in the logits' dtype.
// Backward: dlogits scaled by the incoming gradient, 1 FLOP per logit, read and written.
LayerWork cross_entropy_work(const Tensor& logits, const Tensor& labels);

// Gradient clipping by global norm (optim/grad_clip.h) of every parameter with a gradient: the
// gradients read for the sum of squares (a multiply-add per element, 2 FLOPs) and read and
// written for the multiply by the factor (1 FLOP).
LayerWork grad_clip_work(const std::vector<Tensor>& parameters);

}  // namespace minidl
