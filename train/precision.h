// The run config's numeric precision ("precision": "fp32" | "bf16" | "fp16") and activation
// layout ("memory_format": "contiguous" | "channels_last"), PyTorch autocast's and
// torch.channels_last's choices (docs/precision.md). "bf16" and "fp16" run the activations in
// that type with float32 statistics, loss, optimizer and master weights; "fp16" adds dynamic loss
// scaling (optim/grad_scaler.h). "channels_last" is refused when the config is read: the NHWC
// kernels do not exist yet.
#pragma once
#include <string>

#include "core/dtype.h"

namespace minidl {

// Errors naming the key for a value outside the choices, or one minidl cannot run yet.
void check_precision(const std::string& precision, const std::string& memory_format);

// The dtype activations take under `precision` (float32, bfloat16 or float16).
DType activation_dtype(const std::string& precision);

}  // namespace minidl
