// The run config's numeric precision ("precision": "fp32" | "bf16" | "fp16") and activation
// layout ("memory_format": "contiguous" | "channels_last"), PyTorch autocast's and
// torch.channels_last's choices (docs/precision.md). "bf16" and "fp16" run the activations in
// that type with float32 statistics, loss, optimizer and master weights; "fp16" adds dynamic loss
// scaling (optim/grad_scaler.h). "channels_last" gives the model NHWC activations from its input
// on: convolutions, BatchNorm and the pools run NHWC kernels on the GPU, LayerNorm over (C, H, W)
// runs on the NHWC memory everywhere; the CPU (and GroupNorm anywhere) reorders around its NCHW
// kernels, the same values.
#pragma once
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace minidl {

// Errors naming the key for a value outside the choices.
void check_precision(const std::string& precision, const std::string& memory_format);

// The dtype activations take under `precision` (float32, bfloat16 or float16).
DType activation_dtype(const std::string& precision);

// The layout of the activations under `memory_format`.
MemoryFormat activation_format(const std::string& memory_format);

}  // namespace minidl
