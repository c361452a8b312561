// Gradient clipping by global norm, PyTorch's torch.nn.utils.clip_grad_norm_(parameters,
// max_norm) with norm_type 2: the 2-norm of all gradients together; when it exceeds max_norm,
// every gradient is multiplied by max_norm / (norm + 1e-6), else left as it is (multiplied by
// exactly 1). Transformers train with it (ViT recipes clip at 1.0).
//
// The norm is float32, summed in one fixed order on the CPU and the GPU alike
// (optim/grad_clip_kernels.h): the same gradients give the same bits every run, on either device.
// Everything runs on the gradients' device, the scale factor included, so a step never waits for
// the host and a CUDA graph replays the clip. With float16 loss scaling, clip after unscaling (the
// trainer does): the norm is then that of the true gradients, and a step whose gradients hold an
// inf or NaN is skipped by the optimizer anyway.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace minidl {

class GradClipper {
 public:
  // `params` are every parameter whose gradient may be clipped (their sizes fix the scratch
  // space, allocated here and never during a step); max_norm > 0 and finite.
  GradClipper(double max_norm, const std::vector<Tensor>& params, Device device);

  // Clips float32 gradients on the clipper's device in place; only queues work.
  void clip(const std::vector<Tensor>& grads);
  // The norm of the gradients before the last clip (a host read: waits for the device).
  float total_norm() const;
  double max_norm() const { return max_norm_; }

 private:
  double max_norm_;
  Device device_;
  int64_t max_chunks_ = 0;
  Tensor partials_;  // float32, one per chunk
  Tensor state_;     // float32 [norm, coef]
};

}  // namespace minidl
