// The run config's numeric precision ("precision": "auto" | "fp32" | "bf16" | "fp16") and
// activation layout ("memory_format": "auto" | "contiguous" | "channels_last"), PyTorch autocast's
// and torch.channels_last's choices (docs/precision.md). "bf16" and "fp16" run the activations in
// that type with float32 statistics, loss, optimizer and master weights; "fp16" adds dynamic loss
// scaling (optim/grad_scaler.h). "channels_last" gives the model NHWC activations from its input
// on: convolutions, BatchNorm and the pools run NHWC kernels on the GPU, LayerNorm over (C, H, W)
// runs on the NHWC memory everywhere; the CPU (and GroupNorm anywhere) reorders around its NCHW
// kernels, the same values. "auto", the default of both, is chosen for the run's device once it is
// known (auto_precision, auto_memory_format below).
#pragma once
#include "core/device.h"
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

// What "auto" means on a device of this type and compute capability (major * 10 + minor; not
// read for the CPU): bf16 on a GPU with bfloat16 tensor cores (compute capability 8.0 and later),
// where it is the fast path at float32's range; fp32 on older GPUs and on the CPU, whose bf16 runs
// through float32 kernels with roundings added (no faster, further from float32).
Precision auto_precision(DeviceType type, int compute_capability);
// channels_last on a GPU (cuDNN's NHWC convolutions, minidl's NHWC BatchNorm and pools); contiguous
// on the CPU, whose kernels are NCHW and would reorder around every layer.
MemoryFormat auto_memory_format(DeviceType type);

// The dtype activations take under `precision` (float32, bfloat16 or float16).
DType activation_dtype(Precision precision);

}  // namespace minidl
