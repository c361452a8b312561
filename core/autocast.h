// PyTorch's torch.autocast for the ops minidl has. Inside an AutocastGuard(bf16 or fp16) scope:
//  - Conv2d and Linear run in that type: their input, weight and bias are cast to it (the weight's
//    gradient comes back to the float32 master through the cast);
//  - GroupNorm and LayerNorm run in float32 and return float32 (autocast's float32 list), as do
//    the loss and its softmax (cross-entropy always widens its logits); a pre-norm encoder layer's
//    LayerNorms return the half type, which their only reader, a projection, would cast to anyway
//    (LayerNorm::set_feeds_half_gemm: the same bits, one pass less);
//  - everything else (BatchNorm2d, activations, pools, Scale) runs in the type of its input, and
//    where two types meet (a residual add) float32 wins, as PyTorch's type promotion.
// Outside a scope (the default, float32) nothing is cast. The trainer opens the scope around the
// model's forward pass for precision "bf16"/"fp16" (train/precision.h); backward needs none, every
// recorded op already knows its types. The state is per thread.
#pragma once
#include "core/dtype.h"

namespace minidl {

// The current scope's type: BFloat16 or Float16 inside an AutocastGuard, Float32 outside.
DType autocast_dtype();
inline bool autocast_active() { return autocast_dtype() != DType::Float32; }

class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype);  // Float32: no autocast in the scope
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType previous_;
};

}  // namespace minidl
