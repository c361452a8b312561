// The max_pool3d op (one autograd node keeping the chosen indices), the MaxPool3d module, its
// spec's rows and its descriptor.
#include "layers/pool/max_pool3d.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "layers/layer_fields.h"
#include "layers/pool/max_pool3d_kernels.h"
#include "layers/registry.h"

namespace minidl {
namespace {

void check_geometry(const std::string& who, Size3d k, Size3d s, Size3d p) {
  const int64_t ks[3] = {k.d, k.h, k.w}, ss[3] = {s.d, s.h, s.w}, ps[3] = {p.d, p.h, p.w};
  for (int i = 0; i < 3; ++i)
    MINIDL_CHECK(ks[i] >= 1 && ss[i] >= 1 && ps[i] >= 0 && 2 * ps[i] <= ks[i], who, ": kernel_size ", size3d_str(k),
                 ", stride ", size3d_str(s), " and padding ", size3d_str(p),
                 " must be >= 1, >= 1 and at most half the kernel");
}

}  // namespace

Tensor max_pool3d(const Tensor& x, Size3d k, Size3d st, Size3d pad) {
  check_floating_rank(x, 5, "max_pool3d input (N, C, D, H, W)");
  check_geometry("max_pool3d", k, st, pad);
  const bool last = x.is_channels_last_3d();
  const Pool3dShape s{x.size(0), x.size(1), x.size(2), x.size(3), x.size(4), k.d,   k.h, k.w,
                      st.d,      st.h,      st.w,      pad.d,     pad.h,     pad.w, last};
  MINIDL_CHECK(s.d + 2 * s.pd >= s.kd && s.h + 2 * s.ph >= s.kh && s.w + 2 * s.pw >= s.kw, "max_pool3d: input ",
               shape_str(x.shape()), " padded by ", size3d_str(pad), " is smaller than the kernel ", size3d_str(k));
  MINIDL_CHECK(s.d * s.h * s.w <= INT32_MAX, "max_pool3d: input ", shape_str(x.shape()),
               " has more than 2^31 positions per channel");
  const Shape out{s.n, s.c, s.od(), s.oh(), s.ow()};
  const MemoryFormat f = x.memory_format();
  Tensor y = Tensor::empty(out, x.dtype(), x.device(), f);
  Tensor idx = Tensor::empty(out, DType::Int32, x.device(), f);
  dispatch_dtype(x.dtype(), "max_pool3d", [&](auto tag) {
    using T = decltype(tag);
    dispatch(
        x.device(), "max_pool3d",
        [&] { kernels::max_pool3d_forward_cpu(s, x.data<T>(), y.data<T>(), idx.data<int32_t>()); },
        [&] { kernels::max_pool3d_forward_cuda(s, x.data<T>(), y.data<T>(), idx.data<int32_t>()); });
  });
  if (!autograd::needs_grad({x})) return y;
  autograd::record(y, "max_pool3d", {x}, [s, f, idx, dtype = x.dtype()](const Tensor& dy_in) -> std::vector<Tensor> {
    const Tensor dy = dy_in.to(dtype, f);
    Tensor dx = Tensor::empty({s.n, s.c, s.d, s.h, s.w}, dtype, dy.device(), f);
    dispatch_dtype(dtype, "max_pool3d_backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch(
          dy.device(), "max_pool3d_backward",
          [&] { kernels::max_pool3d_backward_cpu(s, dy.data<T>(), idx.data<int32_t>(), dx.data<T>()); },
          [&] { kernels::max_pool3d_backward_cuda(s, dy.data<T>(), idx.data<int32_t>(), dx.data<T>()); });
    });
    return {dx};
  });
  return y;
}

MaxPool3d::MaxPool3d(const MaxPool3dSpec& spec) : Layer(max_pool3d_layer(), spec) {
  check_geometry("MaxPool3d", spec.kernel_size, spec.stride, spec.padding);
}

Tensor MaxPool3d::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 5, label(), ": expected input (N, C, D, H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return max_pool3d(x, spec().kernel_size, spec().stride, spec().padding);
}

std::string MaxPool3d::describe() const {
  const MaxPool3dSpec& s = spec();
  std::string d = str("MaxPool3d k", size3d_str(s.kernel_size));
  if (!(s.stride == s.kernel_size)) d += str(" s", size3d_str(s.stride));
  if (!(s.padding == Size3d(0))) d += str(" p", size3d_str(s.padding));
  return d;
}

// Forward: one comparison per window tap, x read and y written (the int32 indices too); backward:
// dy and the indices read, dx written.
std::optional<LayerWork> MaxPool3d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  const double idx_bytes = 4.0 * static_cast<double>(y.numel());
  w.forward.flops = static_cast<double>(y.numel()) * static_cast<double>(spec().kernel_size.volume());
  w.forward.bytes = work_bytes(x) + work_bytes(y) + idx_bytes;
  w.saved_bytes = idx_bytes;
  if (y.requires_grad()) {
    w.backward.flops = static_cast<double>(y.numel());
    w.backward.bytes = work_bytes(y) + idx_bytes + (x.requires_grad() ? work_bytes(x) : 0.0);
  }
  return w;
}

namespace {

Size3d stride_default(const MaxPool3dSpec& s) { return s.kernel_size; }

}  // namespace

const Fields<MaxPool3dSpec>& MaxPool3dSpec::fields() {
  using S = MaxPool3dSpec;
  static const Fields<S> f{
      {size3d("kernel_size", &S::kernel_size, kRequired, {1, kMaxWindow},
              "window (d, h, w): an int or a list of three"),
       derived(size3d("stride", &S::stride, kRequired, {1, kMaxWindow}, "step (d, h, w); defaults to kernel_size"),
               &S::stride, stride_default),
       size3d("padding", &S::padding, Size3d(0), {0, kMaxWindow},
              "implicit -inf padding (d, h, w) on each side, at most half the window")},
      [](const S& s, const JsonArgs& args) {
        const Size3d k = s.kernel_size, p = s.padding;
        MINIDL_CHECK(2 * p.d <= k.d && 2 * p.h <= k.h && 2 * p.w <= k.w, args.key_path("padding"),
                     ": must be at most half of kernel_size (", size3d_str(k), "), got ", size3d_str(p));
      }};
  return f;
}

const LayerDescriptor& max_pool3d_layer() {
  static const LayerDescriptor layer{
      "MaxPool3d",
      "pool",
      "3-D max pooling over (N, C, D, H, W), as torch.nn.MaxPool3d",
      layer_fields<MaxPool3d>(),
      make_layer<MaxPool3d>,
      {{"kernel_size", 2}},
      {2, 2, 4, 4, 4},
      AutocastRule::InputType,
      false,
      nullptr,
      // Overlapping windows with padding, a rectangular kernel.
      {{{{"kernel_size", {3, 3, 2}}, {"stride", {2, 1, 2}}, {"padding", 1}}, {2, 3, 5, 4, 4}}}};
  return layer;
}

}  // namespace minidl
