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
// Everything a step does lives on the device, as with PyTorch's capturable GradScaler: the scale
// the backward starts from, the flag, the rule, and the skip itself (the optimizer's kernels read
// the flag, Optimizer::set_skip_flag). No step waits for the host, so float16 steps run as CUDA
// graphs like the others; the host reads the scale only to log or checkpoint it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fields.h"
#include "core/tensor.h"

namespace minidl {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // The keys of "grad_scaler" (PyTorch GradScaler's defaults).
  static const Fields<GradScalerOptions>& fields();
  // The config's "grad_scaler" object (every key optional; unknown keys are errors); null, the
  // key left out, gives the defaults.
  static GradScalerOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const { return write_fields(fields(), *this); }
};

class GradScaler {
 public:
  GradScaler(GradScalerOptions options, Device device);

  // The gradient backward starts from: d(scale * loss)/d(loss), a one-element float32 tensor on the
  // device, copied from the scale in stream order (a replayed graph seeds with each step's scale).
  Tensor backward_seed() const;
  // Multiplies each gradient by 1/scale in place (float32, 1/scale rounded once from double, as
  // PyTorch) and raises the device flag when any held an inf or NaN. Only queues work.
  void unscale(const std::vector<Tensor>& grads);
  // After the step, on the device: on inf/NaN the scale backs off and the clean-step count
  // restarts, else the count grows and at growth_interval the scale grows (if the grown scale is
  // finite) and the count restarts. Only queues work.
  void update();
  // The flag of the last unscale (0 or 1) in device memory, for the optimizer's kernels.
  const float* found_inf_flag() const { return found_inf_.data<float>(); }

  // Host reads; each waits for the device.
  bool found_inf() const;
  float scale() const;
  int64_t growth_tracker() const;
  int64_t skipped_steps() const;
  const GradScalerOptions& options() const { return options_; }

  // {"scale": ..., "growth_tracker": ..., "skipped_steps": ...}; load_state checks every field.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  GradScalerOptions options_;
  Device device_;
  Tensor scale_;      // float32 [1]
  Tensor found_inf_;  // float32 [1], 0 or 1
  Tensor counts_;     // int32 [growth_tracker, skipped_steps]
};

}  // namespace minidl
