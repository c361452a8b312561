// The run config's numeric precision ("precision": "fp32" | "bf16" | "fp16") and activation
// layout ("memory_format": "contiguous" | "channels_last"), PyTorch autocast's and
// torch.channels_last's choices (docs/precision.md). "bf16" and "fp16" run the activations in
// that type with float32 statistics, loss, optimizer and master weights; "fp16" adds dynamic loss
// scaling (optim/grad_scaler.h). "channels_last" gives the model NHWC activations from its input
// on: convolutions, BatchNorm and the pools run NHWC kernels on the GPU, LayerNorm over (C, H, W)
// runs on the NHWC memory everywhere; the CPU (and GroupNorm anywhere) reorders around its NCHW
// kernels, the same values.
#pragma once
#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/tensor.h"

namespace minidl {

enum class Precision { Fp32, Bf16, Fp16 };

template <>
struct EnumNames<Precision> {
  static constexpr EnumName<Precision> values[] = {
      {Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"}};
};

// The config's names of the activation layouts (those of memory_format_name in core/tensor.h).
template <>
struct EnumNames<MemoryFormat> {
  static constexpr EnumName<MemoryFormat> values[] = {{MemoryFormat::Contiguous, "contiguous"},
                                                      {MemoryFormat::ChannelsLast, "channels_last"}};
};

// The dtype activations take under `precision` (float32, bfloat16 or float16).
DType activation_dtype(Precision precision);

}  // namespace minidl
