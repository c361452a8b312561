#include "train/precision.h"

#include "core/error.h"

namespace minidl {

void check_precision(const std::string& precision, const std::string& memory_format) {
  MINIDL_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16",
               "precision: expected \"fp32\", \"bf16\" or \"fp16\", got \"", precision, "\"");
  MINIDL_CHECK(memory_format == "contiguous" || memory_format == "channels_last",
               "memory_format: expected \"contiguous\" or \"channels_last\", got \"", memory_format, "\"");
  MINIDL_CHECK(memory_format == "contiguous", "memory_format: \"", memory_format,
               "\" is not supported yet: minidl's layers take \"contiguous\" (NCHW) activations only today "
               "(see docs/precision.md)");
}

DType activation_dtype(const std::string& precision) {
  if (precision == "bf16") return DType::BFloat16;
  if (precision == "fp16") return DType::Float16;
  MINIDL_CHECK(precision == "fp32", "precision: expected \"fp32\", \"bf16\" or \"fp16\", got \"", precision, "\"");
  return DType::Float32;
}

}  // namespace minidl
