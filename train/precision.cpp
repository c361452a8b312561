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

}  // namespace minidl
