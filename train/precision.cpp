#include "train/precision.h"

#include "core/error.h"

namespace minidl {

void check_precision(const std::string& precision, const std::string& memory_format) {
  MINIDL_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16",
               "precision: expected \"fp32\", \"bf16\" or \"fp16\", got \"", precision, "\"");
  MINIDL_CHECK(memory_format == "contiguous" || memory_format == "channels_last",
               "memory_format: expected \"contiguous\" or \"channels_last\", got \"", memory_format, "\"");
  MINIDL_CHECK(precision == "fp32", "precision: \"", precision,
               "\" is not supported yet: minidl trains in \"fp32\" only today (bfloat16 and float16 "
               "tensors, casts and safetensors I/O exist, the low-precision layers do not; see docs/precision.md)");
  MINIDL_CHECK(memory_format == "contiguous", "memory_format: \"", memory_format,
               "\" is not supported yet: minidl's layers take \"contiguous\" (NCHW) activations only today "
               "(see docs/precision.md)");
}

}  // namespace minidl
