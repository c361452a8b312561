#include "train/precision.h"

#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

void check_precision(const std::string& precision, const std::string& memory_format) {
  MINIDL_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16",
               "precision: expected \"fp32\", \"bf16\" or \"fp16\", got ", json_excerpt(precision));
  MINIDL_CHECK(memory_format == "contiguous" || memory_format == "channels_last",
               "memory_format: expected \"contiguous\" or \"channels_last\", got ", json_excerpt(memory_format));
}

DType activation_dtype(const std::string& precision) {
  if (precision == "bf16") return DType::BFloat16;
  if (precision == "fp16") return DType::Float16;
  MINIDL_CHECK(precision == "fp32", "precision: expected \"fp32\", \"bf16\" or \"fp16\", got ", json_excerpt(precision));
  return DType::Float32;
}

MemoryFormat activation_format(const std::string& memory_format) {
  if (memory_format == "channels_last") return MemoryFormat::ChannelsLast;
  MINIDL_CHECK(memory_format == "contiguous", "memory_format: expected \"contiguous\" or \"channels_last\", got \"",
               memory_format, "\"");
  return MemoryFormat::Contiguous;
}

}  // namespace minidl
