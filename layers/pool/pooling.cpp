// MaxPool2d and global pool ops (one autograd node each), their modules and factories.
#include "layers/pool/pooling.h"

#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/storage_rounding.h"
#include "layers/layer_fields.h"
#include "layers/pool/pool_args.h"
#include "layers/registry.h"

namespace minidl {

namespace {

void check_geometry(const Pool2dGeometry& g, const std::string& what) {
  MINIDL_CHECK(g.kernel_h > 0 && g.kernel_w > 0, what, ": kernel_size must be positive, got (", g.kernel_h, ", ",
               g.kernel_w, ")");
  MINIDL_CHECK(g.stride_h > 0 && g.stride_w > 0, what, ": stride must be positive, got (", g.stride_h, ", ",
               g.stride_w, ")");
  MINIDL_CHECK(g.pad_h >= 0 && g.pad_w >= 0 && 2 * g.pad_h <= g.kernel_h && 2 * g.pad_w <= g.kernel_w, what,
               ": padding must be between 0 and half the kernel size, got (", g.pad_h, ", ", g.pad_w,
               ") for kernel_size (", g.kernel_h, ", ", g.kernel_w, ")");
}

// (N, C) planes of an NCHW input, after checking it.
int64_t planes_of(const Tensor& x, const char* what) {
  check_rank(x, 4, what);
  return x.size(0) * x.size(1);
}

// The output size (OH, OW) of max_pool2d on x, after checking both.
std::pair<int64_t, int64_t> pooled_size(const Tensor& x, const Pool2dGeometry& g) {
  check_geometry(g, "max_pool2d");
  const int64_t H = x.size(2), W = x.size(3);
  MINIDL_CHECK(H + 2 * g.pad_h >= g.kernel_h && W + 2 * g.pad_w >= g.kernel_w, "max_pool2d: input ",
               shape_str(x.shape()), " is smaller than the kernel (", g.kernel_h, ", ", g.kernel_w,
               ") with padding (", g.pad_h, ", ", g.pad_w, ")");
  return {(H + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1, (W + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1};
}

void check_floating_4d(const Tensor& x, const char* what) {
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() == 4, what,
               ": expects a 4-d float32, bfloat16 or float16 input (N, C, H, W), got ", x.str());
}

// Channels-last on CUDA: the NHWC kernels (pooling_nhwc_cuda.cu) in x's dtype; argmax is
// [N][OH][OW][C] like y.
Tensor max_pool2d_channels_last_cuda(const Tensor& x, const Pool2dGeometry& g) {
  check_floating_4d(x, "max_pool2d");
  const auto [OH, OW] = pooled_size(x, g);
  const DType t = x.dtype();
  const kernels::Pool2dNhwcShape s{x.size(0), x.size(1), x.size(2), x.size(3), OH, OW};
  Tensor y = Tensor::empty({s.n, s.c, OH, OW}, t, x.device(), MemoryFormat::ChannelsLast);
  const bool grad = autograd::needs_grad({x});
  const DType index = kernels::max_pool2d_argmax_dtype(g);
  Tensor argmax = grad ? Tensor::empty({s.n, OH, OW, s.c}, index, x.device()) : Tensor();
  dispatch_dtype(t, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    if (index == DType::UInt8)
      kernels::max_pool2d_nhwc_forward_cuda(x.data<T>(), y.data<T>(), grad ? argmax.data<uint8_t>() : nullptr, s, g);
    else
      kernels::max_pool2d_nhwc_forward_cuda(x.data<T>(), y.data<T>(), grad ? argmax.data<int32_t>() : nullptr, s, g);
  });
  if (grad) {
    const Shape in_shape = x.shape();
    autograd::record(y, "max_pool2d", {x}, [argmax, in_shape, s, g, t](const Tensor& dy_in) -> std::vector<Tensor> {
      const Tensor dy = dy_in.to(t, MemoryFormat::ChannelsLast);
      Tensor dx = Tensor::empty(in_shape, t, dy.device(), MemoryFormat::ChannelsLast);
      dispatch_dtype(t, "max_pool2d", [&](auto tag) {
        using T = decltype(tag);
        if (argmax.dtype() == DType::UInt8)
          kernels::max_pool2d_nhwc_backward_cuda(dy.data<T>(), argmax.data<uint8_t>(), dx.data<T>(), s, g);
        else
          kernels::max_pool2d_nhwc_backward_cuda(dy.data<T>(), argmax.data<int32_t>(), dx.data<T>(), s, g);
      });
      return {dx};
    });
  }
  return y;
}

Tensor global_avg_pool2d_channels_last_cuda(const Tensor& x) {
  check_floating_4d(x, "global_avg_pool2d");
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  MINIDL_CHECK(hw > 0, "global_avg_pool2d: empty planes in input ", shape_str(x.shape()));
  const DType t = x.dtype();
  Tensor y = Tensor::empty({n, c}, t, x.device());
  dispatch_dtype(t, "global_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::global_avg_pool2d_nhwc_forward_cuda(x.data<T>(), y.data<T>(), n, hw, c);
  });
  if (autograd::needs_grad({x})) {
    const Shape in_shape = x.shape();
    autograd::record(y, "global_avg_pool2d", {x}, [in_shape, n, hw, c, t](const Tensor& dy_in) -> std::vector<Tensor> {
      const Tensor dy = dy_in.to(t);
      Tensor dx = Tensor::empty(in_shape, t, dy.device(), MemoryFormat::ChannelsLast);
      dispatch_dtype(t, "global_avg_pool2d", [&](auto tag) {
        using T = decltype(tag);
        kernels::global_avg_pool2d_nhwc_backward_cuda(dy.data<T>(), dx.data<T>(), n, hw, c);
      });
      return {dx};
    });
  }
  return y;
}

Tensor global_max_pool2d_channels_last_cuda(const Tensor& x) {
  check_floating_4d(x, "global_max_pool2d");
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  MINIDL_CHECK(hw > 0, "global_max_pool2d: empty planes in input ", shape_str(x.shape()));
  const DType t = x.dtype();
  Tensor y = Tensor::empty({n, c}, t, x.device());
  const bool grad = autograd::needs_grad({x});
  Tensor argmax = grad ? Tensor::empty({n, c}, DType::Int32, x.device()) : Tensor();
  dispatch_dtype(t, "global_max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::global_max_pool2d_nhwc_forward_cuda(x.data<T>(), y.data<T>(), grad ? argmax.data<int32_t>() : nullptr, n,
                                                 hw, c);
  });
  if (grad) {
    const Shape in_shape = x.shape();
    autograd::record(y, "global_max_pool2d", {x}, [argmax, in_shape, n, hw, c, t](const Tensor& dy_in) -> std::vector<Tensor> {
      const Tensor dy = dy_in.to(t);
      Tensor dx = Tensor::empty(in_shape, t, dy.device(), MemoryFormat::ChannelsLast);
      dispatch_dtype(t, "global_max_pool2d", [&](auto tag) {
        using T = decltype(tag);
        kernels::global_max_pool2d_nhwc_backward_cuda(dy.data<T>(), argmax.data<int32_t>(), dx.data<T>(), n, hw, c);
      });
      return {dx};
    });
  }
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dGeometry& g) {
  if (x.defined() && x.is_channels_last())  // the CPU pools NCHW: reordered around it
    return dispatch(
        x.device(), "max_pool2d", [&] { return max_pool2d(x.contiguous(), g).to(MemoryFormat::ChannelsLast); },
        [&] { return max_pool2d_channels_last_cuda(x, g); });
  if (holds_half(x)) return max_pool2d(as_float32(x), g).to(x.dtype());
  const int64_t planes = planes_of(x, "max_pool2d");
  const auto [OH, OW] = pooled_size(x, g);
  const int64_t H = x.size(2), W = x.size(3);
  const kernels::Pool2dShape s{planes, H, W, OH, OW};
  Tensor y = Tensor::empty({x.size(0), x.size(1), OH, OW}, DType::Float32, x.device());
  const bool grad = autograd::needs_grad({x});
  const DType index = kernels::max_pool2d_argmax_dtype(g);
  Tensor argmax = grad ? Tensor::empty(y.shape(), index, x.device()) : Tensor();
  // `a` is a typed null when no backward will follow: the overload still follows the dtype.
  auto forward = [&](auto* a) {
    dispatch(
        x.device(), "max_pool2d_forward",
        [&] {
          kernels::max_pool2d_forward_cpu(x.data<float>(), y.data<float>(), a, s, g);
        },
        [&] {
          kernels::max_pool2d_forward_cuda(x.data<float>(), y.data<float>(), a, s, g);
        });
  };
  if (index == DType::UInt8)
    forward(grad ? argmax.data<uint8_t>() : static_cast<uint8_t*>(nullptr));
  else
    forward(grad ? argmax.data<int32_t>() : static_cast<int32_t*>(nullptr));
  if (grad) {
    const Shape in_shape = x.shape();
    autograd::record(y, "max_pool2d", {x}, [argmax, in_shape, s, g](const Tensor& dy) -> std::vector<Tensor> {
      Tensor dx = Tensor::empty(in_shape, DType::Float32, dy.device());
      auto backward = [&](const auto* a) {
        dispatch(
            dy.device(), "max_pool2d_backward",
            [&] {
              kernels::max_pool2d_backward_cpu(dy.data<float>(), a, dx.data<float>(), s, g);
            },
            [&] {
              kernels::max_pool2d_backward_cuda(dy.data<float>(), a, dx.data<float>(), s, g);
            });
      };
      if (argmax.dtype() == DType::UInt8)
        backward(argmax.data<uint8_t>());
      else
        backward(argmax.data<int32_t>());
      return {dx};
    });
  }
  return y;
}

Tensor global_avg_pool2d(const Tensor& x) {
  if (x.defined() && x.is_channels_last())
    return dispatch(
        x.device(), "global_avg_pool2d", [&] { return global_avg_pool2d(x.contiguous()); },
        [&] { return global_avg_pool2d_channels_last_cuda(x); });
  if (holds_half(x)) return global_avg_pool2d(as_float32(x)).to(x.dtype());
  const int64_t planes = planes_of(x, "global_avg_pool2d");
  const int64_t hw = x.size(2) * x.size(3);
  MINIDL_CHECK(hw > 0, "global_avg_pool2d: empty planes in input ", shape_str(x.shape()));
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, DType::Float32, x.device());
  dispatch(
      x.device(), "global_avg_pool2d_forward",
      [&] {
        kernels::global_avg_pool2d_forward_cpu(x.data<float>(), y.data<float>(), planes, hw);
      },
      [&] {
        kernels::global_avg_pool2d_forward_cuda(x.data<float>(), y.data<float>(), planes, hw);
      });
  if (autograd::needs_grad({x})) {
    const Shape in_shape = x.shape();
    autograd::record(y, "global_avg_pool2d", {x}, [in_shape, planes, hw](const Tensor& dy) -> std::vector<Tensor> {
      Tensor dx = Tensor::empty(in_shape, DType::Float32, dy.device());
      dispatch(
          dy.device(), "global_avg_pool2d_backward",
          [&] {
            kernels::global_avg_pool2d_backward_cpu(dy.data<float>(), dx.data<float>(), planes, hw);
          },
          [&] {
            kernels::global_avg_pool2d_backward_cuda(dy.data<float>(), dx.data<float>(), planes, hw);
          });
      return {dx};
    });
  }
  return y;
}

Tensor global_max_pool2d(const Tensor& x) {
  if (x.defined() && x.is_channels_last())
    return dispatch(
        x.device(), "global_max_pool2d", [&] { return global_max_pool2d(x.contiguous()); },
        [&] { return global_max_pool2d_channels_last_cuda(x); });
  if (holds_half(x)) return global_max_pool2d(as_float32(x)).to(x.dtype());
  const int64_t planes = planes_of(x, "global_max_pool2d");
  const int64_t hw = x.size(2) * x.size(3);
  MINIDL_CHECK(hw > 0, "global_max_pool2d: empty planes in input ", shape_str(x.shape()));
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, DType::Float32, x.device());
  const bool grad = autograd::needs_grad({x});
  Tensor argmax = grad ? Tensor::empty(y.shape(), DType::Int32, x.device()) : Tensor();
  int32_t* a = grad ? argmax.data<int32_t>() : nullptr;
  dispatch(
      x.device(), "global_max_pool2d_forward",
      [&] {
        kernels::global_max_pool2d_forward_cpu(x.data<float>(), y.data<float>(), a, planes, hw);
      },
      [&] {
        kernels::global_max_pool2d_forward_cuda(x.data<float>(), y.data<float>(), a, planes, hw);
      });
  if (grad) {
    const Shape in_shape = x.shape();
    autograd::record(y, "global_max_pool2d", {x}, [argmax, in_shape, planes, hw](const Tensor& dy) -> std::vector<Tensor> {
      Tensor dx = Tensor::empty(in_shape, DType::Float32, dy.device());
      dispatch(
          dy.device(), "global_max_pool2d_backward",
          [&] {
            kernels::global_max_pool2d_backward_cpu(dy.data<float>(), argmax.data<int32_t>(), dx.data<float>(), planes, hw);
          },
          [&] {
            kernels::global_max_pool2d_backward_cuda(dy.data<float>(), argmax.data<int32_t>(), dx.data<float>(), planes, hw);
          });
      return {dx};
    });
  }
  return y;
}

std::string MaxPool2d::describe() const {
  return str("MaxPool2d(kernel_size=", pair_str(g_.kernel_h, g_.kernel_w),
             ", stride=", pair_str(g_.stride_h, g_.stride_w), ", padding=", pair_str(g_.pad_h, g_.pad_w), ")");
}

namespace {

Pool2dGeometry geometry(const MaxPool2dSpec& s) {
  return {s.kernel_size.h, s.kernel_size.w, s.stride.h, s.stride.w, s.padding.h, s.padding.w};
}

Size2d stride_default(const MaxPool2dSpec& s) { return s.kernel_size; }

}  // namespace

MaxPool2d::MaxPool2d(const MaxPool2dSpec& spec) : Layer(maxpool2d_layer(), spec), g_(geometry(spec)) {
  check_geometry(g_, "MaxPool2d");
}

const Fields<MaxPool2dSpec>& MaxPool2dSpec::fields() {
  using S = MaxPool2dSpec;
  static const Fields<S> f{
      {size2d("kernel_size", &S::kernel_size, kRequired, {1, kMaxWindow}, "window (h, w): an int or a list of two"),
       derived(size2d("stride", &S::stride, kRequired, {1, kMaxWindow}, "step (h, w); defaults to kernel_size"),
               &S::stride, stride_default),
       size2d("padding", &S::padding, Size2d(0), {0, kMaxWindow},
              "implicit -inf padding (h, w), at most half the window")},
      [](const S& s, const JsonArgs& args) { check_geometry(geometry(s), args.path()); }};
  return f;
}

const LayerDescriptor& maxpool2d_layer() {
  static const LayerDescriptor layer{"MaxPool2d",
                                     "pool",
                                     "max over windows of (N, C, H, W), as torch.nn.MaxPool2d",
                                     layer_fields<MaxPool2d>(),
                                     make_layer<MaxPool2d>,
                                     {{"kernel_size", 2}},
                                     {2, 3, 4, 4},
                                     AutocastRule::InputType,
                                     true,
                                     nullptr,
                                     {{{{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}, {2, 3, 7, 6}}}};
  return layer;
}

const LayerDescriptor& global_avg_pool2d_layer() {
  static const LayerDescriptor layer{"GlobalAvgPool2d",
                                     "pool",
                                     "mean over H and W: (N, C, H, W) -> (N, C)",
                                     {},
                                     make_layer<GlobalAvgPool2d>,
                                     nlohmann::json::object(),
                                     {2, 3, 4, 4},
                                     AutocastRule::InputType};
  return layer;
}

const LayerDescriptor& global_max_pool2d_layer() {
  static const LayerDescriptor layer{"GlobalMaxPool2d",
                                     "pool",
                                     "max over H and W: (N, C, H, W) -> (N, C)",
                                     {},
                                     make_layer<GlobalMaxPool2d>,
                                     nlohmann::json::object(),
                                     {2, 3, 4, 4},
                                     AutocastRule::InputType};
  return layer;
}

// kh*kw - 1 comparisons per output; backward scatters dy through the saved argmax (no FLOPs),
// writing every element of dx once.
std::optional<LayerWork> MaxPool2d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.flops = static_cast<double>(y.numel()) * static_cast<double>(g_.kernel_h * g_.kernel_w - 1);
  const double argmax = y.requires_grad() ? work_bytes(y.numel(), kernels::max_pool2d_argmax_dtype(g_)) : 0.0;
  w.forward.bytes = work_bytes(x) + work_bytes(y) + argmax;
  if (y.requires_grad()) {
    w.saved_bytes = argmax;
    w.backward.bytes = work_bytes(y) + argmax + work_bytes(x);
  }
  return w;
}

// H*W - 1 adds and one scale per output; backward one scale per input element.
std::optional<LayerWork> GlobalAvgPool2d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.flops = static_cast<double>(x.numel());
  w.forward.bytes = work_bytes(x) + work_bytes(y);
  if (y.requires_grad()) {
    w.backward.flops = static_cast<double>(x.numel());
    w.backward.bytes = work_bytes(y) + work_bytes(x);
  }
  return w;
}

// H*W - 1 comparisons per output; backward as MaxPool2d's, through an int32 argmax per output.
std::optional<LayerWork> GlobalMaxPool2d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.flops = static_cast<double>(x.numel() - y.numel());
  const double argmax = y.requires_grad() ? work_bytes(y.numel(), DType::Int32) : 0.0;
  w.forward.bytes = work_bytes(x) + work_bytes(y) + argmax;
  if (y.requires_grad()) {
    w.saved_bytes = argmax;
    w.backward.bytes = work_bytes(y) + argmax + work_bytes(x);
  }
  return w;
}

}  // namespace minidl
