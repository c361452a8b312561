#include "train/precision.h"

namespace minidl {

DType activation_dtype(Precision precision) {
  switch (precision) {
    case Precision::Bf16:
      return DType::BFloat16;
    case Precision::Fp16:
      return DType::Float16;
    case Precision::Fp32:
      break;
  }
  return DType::Float32;
}

Precision auto_precision(DeviceType type, int compute_capability) {
  return type == DeviceType::CUDA && compute_capability >= 80 ? Precision::Bf16 : Precision::Fp32;
}

MemoryFormat auto_memory_format(DeviceType type) {
  return type == DeviceType::CUDA ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

}  // namespace minidl
