// The run config's numeric precision ("precision": "fp32" | "bf16" | "fp16") and activation
// layout ("memory_format": "contiguous" | "channels_last"), PyTorch autocast's and
// torch.channels_last's choices. The bfloat16 and float16 tensors exist (core/dtype.h), the
// low-precision and NHWC ops do not yet, so today every value other than fp32 and contiguous is
// refused when the config is read, with a message naming the key (docs/precision.md).
#pragma once
#include <string>

namespace minidl {

// Errors naming the key for a value outside the choices, or one minidl cannot run yet.
void check_precision(const std::string& precision, const std::string& memory_format);

}  // namespace minidl
