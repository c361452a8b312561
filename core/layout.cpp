// Tensor::to(DType, MemoryFormat): reordering between NCHW and NHWC, fused with a dtype
// conversion (launchers in core/layout_kernels.h), and its autograd node.
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/layout_kernels.h"
#include "core/tensor.h"

namespace minidl {

Tensor Tensor::to(DType dtype, MemoryFormat format) const {
  MINIDL_CHECK(defined(), "to(", memory_format_name(format), "): the tensor is undefined");
  const MemoryFormat from_format = memory_format();
  if (format == from_format) return to(dtype);
  const MemoryFormat target = format == MemoryFormat::Contiguous ? from_format : format;
  MINIDL_CHECK(dim() == (target == MemoryFormat::ChannelsLast3d ? 5 : 4), "to(", memory_format_name(format), ") of ",
               str(), ": needs a ", target == MemoryFormat::ChannelsLast3d ? "5-d (N, C, D, H, W)" : "4-d (N, C, H, W)",
               " tensor");
  MINIDL_CHECK(is_floating(this->dtype()) && is_floating(dtype), "to(", memory_format_name(format), ") of ", str(),
               ": minidl reorders float32, bfloat16 and float16 tensors only");
  Tensor y = empty(shape(), dtype, device(), format);
  // NCHW -> NHWC transposes each image's [C][H*W] matrix, NHWC -> NCHW its [H*W][C]; a volume's
  // [C][D*H*W] likewise.
  const int64_t n = size(0), c = size(1), hw = numel() == 0 ? 0 : numel() / (n * c);
  const bool to_last = format != MemoryFormat::Contiguous;
  const int64_t rows = to_last ? c : hw;
  const int64_t cols = to_last ? hw : c;
  dispatch(
      device(), "to(memory_format)",
      [&] { kernels::transpose_cast_cpu(raw_data(), this->dtype(), y.raw_data(), dtype, n, rows, cols); },
      [&] { kernels::transpose_cast_cuda(raw_data(), this->dtype(), y.raw_data(), dtype, n, rows, cols); });
  if (autograd::needs_grad({*this})) {
    const DType from_dtype = this->dtype();
    autograd::record(y, "to", {*this}, [from_dtype, from_format](const Tensor& g) -> std::vector<Tensor> {
      return {g.to(from_dtype, from_format)};
    });
  }
  return y;
}

}  // namespace minidl
