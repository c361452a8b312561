// Dynamic loss scaling for float16 training, with PyTorch torch.amp.GradScaler's semantics:
// backward starts from the scale instead of 1 (so small float16 gradients stay above float16's
// underflow), the float32 gradients are multiplied by 1/scale before the update, and a step whose
// gradients hold an inf or NaN is skipped. The scale backs off (x backoff_factor) on such a step
// and grows (x growth_factor) after growth_interval clean steps in a row. bfloat16 needs none: it
// has float32's exponent range.
//
// Deterministic: the scale is a float32 updated by the same rule every run, and the inf/NaN flag
// does not depend on thread order (optim/grad_scaler_kernels.h). Its state (scale, clean-step
// count, skipped steps) is saved in checkpoints, so a resumed run continues bit for bit.
//
// The skip decision is made on the host, after one read of the flag per step, as PyTorch's
// GradScaler.step() does; that read is why float16 steps run eagerly, not as CUDA graphs.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // The config's "grad_scaler" object (every key optional; unknown keys are errors); null, the
  // key left out, gives the defaults.
  static GradScalerOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const;
};

class GradScaler {
 public:
  GradScaler(GradScalerOptions options, Device device);

  // The gradient backward starts from: d(scale * loss)/d(loss), the scale as a one-element float32
  // tensor on the device.
  Tensor backward_seed() const;
  // Multiplies each gradient by 1/scale in place (float32, 1/scale rounded once from double, as
  // PyTorch) and returns whether any held an inf or NaN. Waits for the device.
  bool unscale(const std::vector<Tensor>& grads);
  // After the step: on inf/NaN the scale backs off and the clean-step count restarts, else the count
  // grows and at growth_interval the scale grows (if the grown scale is finite) and the count restarts.
  void update(bool found_inf);

  float scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  const GradScalerOptions& options() const { return options_; }

  // {"scale": ..., "growth_tracker": ..., "skipped_steps": ...}; load_state checks every field.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  GradScalerOptions options_;
  Device device_;
  float scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  Tensor found_inf_;                 // the flag (0 or 1) on the device
  std::shared_ptr<void> found_host_;  // pinned copy of it
};

}  // namespace minidl
