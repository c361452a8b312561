// The raw 3-D convolution directions on tensors, dispatched to the CPU or CUDA launchers.
#include "layers/conv/conv3d_ops.h"

#include "core/dispatch.h"
#include "core/error.h"

namespace minidl::conv3d_detail {
namespace {

bool channels_last(const Tensor& t) { return t.is_channels_last_3d(); }
int64_t spatial(const Tensor& t) { return t.numel() / (t.size(0) * t.size(1)); }

}  // namespace

void check_dtypes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  MINIDL_CHECK(x.defined() && weight.defined(), op, ": input and weight must be defined");
  const DType t = x.dtype();
  MINIDL_CHECK(is_floating(t), op, ": expects a float32, bfloat16 or float16 input, got ", x.str());
  MINIDL_CHECK(weight.dtype() == t && (!bias.defined() || bias.dtype() == t), op, ": a ", dtype_name(t),
               " input needs a weight and bias of that dtype, got ", weight.str(),
               bias.defined() ? " and " + bias.str() : std::string());
}

bool native(const Tensor& x) {
  const bool contiguous = x.memory_format() == MemoryFormat::Contiguous;
  return x.is_cuda() ? !(contiguous && is_half(x.dtype())) : contiguous && x.dtype() == DType::Float32;
}

Tensor forward(const Conv3dShape& s, const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = Tensor::empty({s.n, s.o, s.od(), s.oh(), s.ow()}, x.dtype(), x.device(), x.memory_format());
  const void* pb = b.defined() ? b.raw_data() : nullptr;
  dispatch(
      x.device(), "conv3d_forward",
      [&] {
        kernels::conv3d_forward_cpu(s, x.data<float>(), w.data<float>(), static_cast<const float*>(pb),
                                    y.data<float>());
      },
      [&] {
        kernels::conv3d_forward_cuda(s, x.dtype(), channels_last(x), x.raw_data(), w.raw_data(), pb, y.raw_data());
      });
  return y;
}

Tensor backward_data(const Conv3dShape& s, const Tensor& dy, const Tensor& w) {
  Tensor dx = Tensor::empty({s.n, s.c, s.d, s.h, s.w}, dy.dtype(), dy.device(), dy.memory_format());
  dispatch(
      dy.device(), "conv3d_backward_data",
      [&] { kernels::conv3d_backward_cpu(s, nullptr, w.data<float>(), dy.data<float>(), dx.data<float>(), nullptr); },
      [&] {
        kernels::conv3d_backward_data_cuda(s, dy.dtype(), channels_last(dy), dy.raw_data(), w.raw_data(),
                                           dx.raw_data());
      });
  return dx;
}

Tensor backward_filter(const Conv3dShape& s, const Tensor& x, const Tensor& dy, const Tensor& w) {
  Tensor dw = Tensor::empty_like(w);
  dispatch(
      x.device(), "conv3d_backward_filter",
      [&] {
        kernels::conv3d_backward_cpu(s, x.data<float>(), w.data<float>(), dy.data<float>(), nullptr, dw.data<float>());
      },
      [&] {
        kernels::conv3d_backward_filter_cuda(s, x.dtype(), channels_last(x), x.raw_data(), dy.raw_data(),
                                             dw.raw_data());
      });
  return dw;
}

void add_bias(Tensor& y, const Tensor& b) {
  dispatch(
      y.device(), "conv3d_bias",
      [&] { kernels::conv3d_add_bias_cpu(y.data<float>(), b.data<float>(), y.size(0), y.size(1), spatial(y)); },
      [&] {
        kernels::conv3d_add_bias_cuda(y.dtype(), channels_last(y), y.raw_data(), b.raw_data(), y.size(0), y.size(1),
                                      spatial(y));
      });
}

Tensor backward_bias(const Tensor& dy) {
  Tensor db = Tensor::empty({dy.size(1)}, dy.dtype(), dy.device());
  dispatch(
      dy.device(), "conv3d_backward_bias",
      [&] {
        kernels::conv3d_backward_bias_cpu(dy.data<float>(), db.data<float>(), dy.size(0), dy.size(1), spatial(dy));
      },
      [&] {
        kernels::conv3d_backward_bias_cuda(dy.dtype(), channels_last(dy), dy.raw_data(), db.raw_data(), dy.size(0),
                                           dy.size(1), spatial(dy));
      });
  return db;
}

}  // namespace minidl::conv3d_detail
