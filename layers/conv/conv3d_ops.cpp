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
  dispatch_dtype(x.dtype(), "conv3d_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    dispatch(
        x.device(), "conv3d_forward",
        [&] {
          kernels::conv3d_forward_cpu(s, x.data<float>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr,
                                      y.data<float>());
        },
        [&] { kernels::conv3d_forward_cuda(s, channels_last(x), x.data<T>(), w.data<T>(), pb, y.data<T>()); });
  });
  return y;
}

Tensor backward_data(const Conv3dShape& s, const Tensor& dy, const Tensor& w) {
  Tensor dx = Tensor::empty({s.n, s.c, s.d, s.h, s.w}, dy.dtype(), dy.device(), dy.memory_format());
  dispatch_dtype(dy.dtype(), "conv3d_backward_data", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        dy.device(), "conv3d_backward_data",
        [&] { kernels::conv3d_backward_cpu(s, nullptr, w.data<float>(), dy.data<float>(), dx.data<float>(), nullptr); },
        [&] { kernels::conv3d_backward_data_cuda(s, channels_last(dy), dy.data<T>(), w.data<T>(), dx.data<T>()); });
  });
  return dx;
}

Tensor backward_filter(const Conv3dShape& s, const Tensor& x, const Tensor& dy, const Tensor& w) {
  Tensor dw = Tensor::empty_like(w);
  dispatch_dtype(x.dtype(), "conv3d_backward_filter", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        x.device(), "conv3d_backward_filter",
        [&] {
          kernels::conv3d_backward_cpu(s, x.data<float>(), w.data<float>(), dy.data<float>(), nullptr,
                                       dw.data<float>());
        },
        [&] { kernels::conv3d_backward_filter_cuda(s, channels_last(x), x.data<T>(), dy.data<T>(), dw.data<T>()); });
  });
  return dw;
}

void add_bias(Tensor& y, const Tensor& b) {
  dispatch_dtype(y.dtype(), "conv3d_bias", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        y.device(), "conv3d_bias",
        [&] { kernels::conv3d_add_bias_cpu(y.data<float>(), b.data<float>(), y.size(0), y.size(1), spatial(y)); },
        [&] {
          kernels::conv3d_add_bias_cuda(channels_last(y), y.data<T>(), b.data<T>(), y.size(0), y.size(1), spatial(y));
        });
  });
}

Tensor backward_bias(const Tensor& dy) {
  Tensor db = Tensor::empty({dy.size(1)}, dy.dtype(), dy.device());
  dispatch_dtype(dy.dtype(), "conv3d_backward_bias", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        dy.device(), "conv3d_backward_bias",
        [&] {
          kernels::conv3d_backward_bias_cpu(dy.data<float>(), db.data<float>(), dy.size(0), dy.size(1), spatial(dy));
        },
        [&] {
          kernels::conv3d_backward_bias_cuda(channels_last(dy), dy.data<T>(), db.data<T>(), dy.size(0), dy.size(1),
                                             spatial(dy));
        });
  });
  return db;
}

}  // namespace minidl::conv3d_detail
