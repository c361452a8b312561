// The average pool op (one autograd node), AvgPool2d and AdaptiveAvgPool2d, their factories and
// descriptors.
#include "layers/pool/avg_pool.h"

#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/storage_rounding.h"
#include "layers/layer_fields.h"
#include "layers/pool/avg_pool_window.h"
#include "layers/pool/pool_args.h"
#include "layers/registry.h"

namespace minidl {

namespace {

void check_input(const Tensor& x, const std::string& what) {
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() == 4, what,
               ": expects a 4-d float32, bfloat16 or float16 input (N, C, H, W), got ", x.str());
}

// y = the pool of x into (OH, OW) windows of g, recorded for autograd.
Tensor pool(const Tensor& x, const AvgPool2dGeometry& g, int64_t OH, int64_t OW, const std::string& what) {
  // The CPU pools NCHW float32: a channels-last or half input is reordered or widened around it.
  if (!x.is_cuda() && x.is_channels_last()) return pool(x.contiguous(), g, OH, OW, what).to(MemoryFormat::ChannelsLast);
  if (!x.is_cuda() && holds_half(x)) return pool(as_float32(x), g, OH, OW, what).to(x.dtype());
  const kernels::AvgPool2dShape s{x.size(0), x.size(1), x.size(2), x.size(3), OH, OW};
  const DType t = x.dtype();
  const MemoryFormat format = x.memory_format();
  const bool nhwc = format == MemoryFormat::ChannelsLast;
  Tensor y = Tensor::empty({s.n, s.c, OH, OW}, t, x.device(), format);
  dispatch(
      x.device(), "avg_pool2d_forward",
      [&] { kernels::avg_pool2d_forward_cpu(x.data<float>(), y.data<float>(), s, g); },
      [&] {
        dispatch_dtype(t, "avg_pool2d", [&](auto tag) {
          using T = decltype(tag);
          kernels::avg_pool2d_forward_cuda(x.data<T>(), y.data<T>(), s, g, nhwc);
        });
      });
  if (autograd::needs_grad({x})) {
    const Shape in_shape = x.shape();
    autograd::record(y, "avg_pool2d", {x},
                     [in_shape, s, g, t, format, nhwc](const Tensor& dy_in) -> std::vector<Tensor> {
                       const Tensor dy = dy_in.to(t, format);
                       Tensor dx = Tensor::empty(in_shape, t, dy.device(), format);
                       dispatch(
                           dy.device(), "avg_pool2d_backward",
                           [&] { kernels::avg_pool2d_backward_cpu(dy.data<float>(), dx.data<float>(), s, g); },
                           [&] {
                             dispatch_dtype(t, "avg_pool2d", [&](auto tag) {
                               using T = decltype(tag);
                               kernels::avg_pool2d_backward_cuda(dy.data<T>(), dx.data<T>(), s, g, nhwc);
                             });
                           });
                       return {dx};
                     });
  }
  return y;
}

void check_geometry(const AvgPool2dGeometry& g, const std::string& what) {
  MINIDL_CHECK(g.kernel_h > 0 && g.kernel_w > 0, what, ".kernel_size: must be positive, got (", g.kernel_h, ", ",
               g.kernel_w, ")");
  MINIDL_CHECK(g.stride_h > 0 && g.stride_w > 0, what, ".stride: must be positive, got (", g.stride_h, ", ", g.stride_w,
               ")");
  MINIDL_CHECK(2 * g.pad_h <= g.kernel_h && 2 * g.pad_w <= g.kernel_w, what,
               ".padding: must be at most half the kernel size, got (", g.pad_h, ", ", g.pad_w, ") for kernel_size (",
               g.kernel_h, ", ", g.kernel_w, ")");
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, const AvgPool2dGeometry& g, const std::string& what) {
  check_input(x, what);
  check_geometry(g, what);
  const int64_t H = x.size(2), W = x.size(3);
  MINIDL_CHECK(H + 2 * g.pad_h >= g.kernel_h && W + 2 * g.pad_w >= g.kernel_w, what, ": input ", shape_str(x.shape()),
               " is smaller than kernel_size (", g.kernel_h, ", ", g.kernel_w, ") with padding (", g.pad_h, ", ",
               g.pad_w, ")");
  return pool(x, g, avg_pool::output_size(H, g.kernel_h, g.stride_h, g.pad_h, g.ceil_mode),
              avg_pool::output_size(W, g.kernel_w, g.stride_w, g.pad_w, g.ceil_mode), what);
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  check_input(x, "adaptive_avg_pool2d");
  MINIDL_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: output_size must be positive, got (", out_h, ", ", out_w,
               ")");
  MINIDL_CHECK(x.size(2) > 0 && x.size(3) > 0, "adaptive_avg_pool2d: empty planes in input ", shape_str(x.shape()));
  AvgPool2dGeometry g;
  g.adaptive = true;
  return pool(x, g, out_h, out_w, "adaptive_avg_pool2d");
}

std::string AvgPool2d::describe() const {
  return str("AvgPool2d(kernel_size=", pair_str(g_.kernel_h, g_.kernel_w),
             ", stride=", pair_str(g_.stride_h, g_.stride_w), ", padding=", pair_str(g_.pad_h, g_.pad_w),
             g_.ceil_mode ? ", ceil_mode=True" : "", g_.count_include_pad ? "" : ", count_include_pad=False", ")");
}

std::string AdaptiveAvgPool2d::describe() const {
  return str("AdaptiveAvgPool2d(output_size=", pair_str(out_h(), out_w()), ")");
}

namespace {

AvgPool2dGeometry geometry_of(const AvgPool2dSpec& s) {
  AvgPool2dGeometry g;
  g.kernel_h = s.kernel_size.h, g.kernel_w = s.kernel_size.w, g.stride_h = s.stride.h, g.stride_w = s.stride.w;
  g.pad_h = s.padding.h, g.pad_w = s.padding.w;
  g.ceil_mode = s.ceil_mode;
  g.count_include_pad = s.count_include_pad;
  return g;
}

Size2d stride_default(const AvgPool2dSpec& s) { return s.kernel_size; }

}  // namespace

AvgPool2d::AvgPool2d(const AvgPool2dSpec& spec) : Layer(avgpool2d_layer(), spec), g_(geometry_of(spec)) {
  check_geometry(g_, "AvgPool2d");
}

const Fields<AvgPool2dSpec>& AvgPool2dSpec::fields() {
  using S = AvgPool2dSpec;
  static const Fields<S> f{
      {size2d("kernel_size", &S::kernel_size, kRequired, {1, kMaxWindow}, "window (h, w): an int or a list of two"),
       derived(size2d("stride", &S::stride, kRequired, {1, kMaxWindow}, "step (h, w); defaults to kernel_size"),
               &S::stride, stride_default),
       size2d("padding", &S::padding, Size2d(0), {0, kMaxWindow},
              "implicit zero padding (h, w), at most half the window"),
       flag("ceil_mode", &S::ceil_mode, false, "rounds the output size up: a last, partial window where one fits"),
       flag("count_include_pad", &S::count_include_pad, true, "the padding counts in each window's divisor")},
      [](const S& s, const JsonArgs& args) { check_geometry(geometry_of(s), args.path()); }};
  return f;
}

const Fields<AdaptiveAvgPool2dSpec>& AdaptiveAvgPool2dSpec::fields() {
  using S = AdaptiveAvgPool2dSpec;
  static const Fields<S> f{
      {size2d("output_size", &S::output_size, kRequired, {1, kMaxWindow}, "(OH, OW): an int or a list of two")}};
  return f;
}

const LayerDescriptor& avgpool2d_layer() {
  static const LayerDescriptor layer{"AvgPool2d",
                                     "pool",
                                     "mean over windows of (N, C, H, W), as torch.nn.AvgPool2d",
                                     layer_fields<AvgPool2d>(),
                                     make_layer<AvgPool2d>,
                                     {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"count_include_pad", false}},
                                     {2, 3, 5, 5},
                                     AutocastRule::InputType};
  return layer;
}

const LayerDescriptor& adaptive_avgpool2d_layer() {
  static const LayerDescriptor layer{
      "AdaptiveAvgPool2d",
      "pool",
      "mean over the windows that split H and W into output_size, as torch.nn.AdaptiveAvgPool2d",
      layer_fields<AdaptiveAvgPool2d>(),
      make_layer<AdaptiveAvgPool2d>,
      {{"output_size", 1}},
      {2, 3, 5, 7},
      AutocastRule::InputType,
      true,
      nullptr,
      // Overlapping windows of uneven sizes; ONNX has no adaptive pool beyond GlobalAveragePool.
      {{{{"output_size", {2, 3}}}, {2, 3, 5, 7}, false}}};
  return layer;
}

// Forward: the window's cells added and one divide per output; backward: one divide and one add
// per (output, covered input) pair, as many. Nothing saved.
namespace {

LayerWork avg_work(const Tensor& x, const Tensor& y, double cells) {
  LayerWork w;
  w.forward.flops = static_cast<double>(y.numel()) * cells;
  w.forward.bytes = work_bytes(x) + work_bytes(y);
  if (y.requires_grad()) {
    w.backward.flops = w.forward.flops;
    w.backward.bytes = work_bytes(y) + work_bytes(x);
  }
  return w;
}

}  // namespace

std::optional<LayerWork> AvgPool2d::work(const Tensor& x, const Tensor& y) const {
  return avg_work(x, y, static_cast<double>(g_.kernel_h * g_.kernel_w));
}

// An adaptive window spans at most ceil(H / OH) x ceil(W / OW) cells; counted as the mean,
// H W / (OH OW).
std::optional<LayerWork> AdaptiveAvgPool2d::work(const Tensor& x, const Tensor& y) const {
  return avg_work(x, y, static_cast<double>(x.size(2) * x.size(3)) / static_cast<double>(out_h() * out_w()));
}

}  // namespace minidl
