// Tensor::to(DType): conversion between the floating dtypes, and int32 <-> float32 (launchers in
// core/cast_kernels.h).
#include "core/autograd.h"
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/tensor.h"

namespace minidl {

Tensor Tensor::to(DType dtype) const {
  MINIDL_CHECK(defined(), "to(", dtype_name(dtype), "): the tensor is undefined");
  if (dtype == this->dtype()) return *this;
  MINIDL_CHECK(castable(this->dtype(), dtype), "to(", dtype_name(dtype), ") of ", str(),
               ": minidl converts between float32, bfloat16 and float16, and between int32 and float32");
  Tensor y = empty(shape(), dtype, device(), memory_format());
  dispatch(
      device(), "to(dtype)",
      [&] { kernels::cast_cpu(raw_data(), this->dtype(), y.raw_data(), dtype, numel()); },
      [&] { kernels::cast_cuda(raw_data(), this->dtype(), y.raw_data(), dtype, numel()); });
  if (is_floating(dtype) && autograd::needs_grad({*this})) {
    const DType from = this->dtype();
    autograd::record(y, "to", {*this}, [from](const Tensor& g) -> std::vector<Tensor> { return {g.to(from)}; });
  }
  return y;
}

}  // namespace minidl
