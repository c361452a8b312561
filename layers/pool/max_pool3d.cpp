// The max_pool3d op (one autograd node keeping the chosen indices), the MaxPool3d module and its
// factory.
#include "layers/pool/max_pool3d.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
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
  dispatch(
      x.device(), "max_pool3d",
      [&] { kernels::max_pool3d_forward_cpu(s, x.dtype(), x.raw_data(), y.raw_data(), idx.data<int32_t>()); },
      [&] { kernels::max_pool3d_forward_cuda(s, x.dtype(), x.raw_data(), y.raw_data(), idx.data<int32_t>()); });
  if (!autograd::needs_grad({x})) return y;
  autograd::record(y, "max_pool3d", {x}, [s, f, idx, dtype = x.dtype()](const Tensor& dy_in) -> std::vector<Tensor> {
    const Tensor dy = dy_in.to(dtype, f);
    Tensor dx = Tensor::empty({s.n, s.c, s.d, s.h, s.w}, dtype, dy.device(), f);
    dispatch(
        dy.device(), "max_pool3d_backward",
        [&] { kernels::max_pool3d_backward_cpu(s, dtype, dy.raw_data(), idx.data<int32_t>(), dx.raw_data()); },
        [&] { kernels::max_pool3d_backward_cuda(s, dtype, dy.raw_data(), idx.data<int32_t>(), dx.raw_data()); });
    return {dx};
  });
  return y;
}

MaxPool3d::MaxPool3d(Size3d kernel_size, Size3d stride, Size3d padding)
    : kernel_(kernel_size), stride_(stride), padding_(padding) {
  check_geometry("MaxPool3d", kernel_, stride_, padding_);
}

Tensor MaxPool3d::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 5, label(), ": expected input (N, C, D, H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return max_pool3d(x, kernel_, stride_, padding_);
}

std::string MaxPool3d::describe() const {
  std::string d = str("MaxPool3d k", size3d_str(kernel_));
  if (!(stride_ == kernel_)) d += str(" s", size3d_str(stride_));
  if (!(padding_ == Size3d(0))) d += str(" p", size3d_str(padding_));
  return d;
}

nlohmann::json MaxPool3d::to_json() const {
  return {{"type", "MaxPool3d"},
          {"kernel_size", size3d_json(kernel_)},
          {"stride", size3d_json(stride_)},
          {"padding", size3d_json(padding_)}};
}

// Forward: one comparison per window tap, x read and y written (the int32 indices too); backward:
// dy and the indices read, dx written.
std::optional<LayerWork> MaxPool3d::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  const double idx_bytes = 4.0 * static_cast<double>(y.numel());
  w.forward.flops = static_cast<double>(y.numel()) * static_cast<double>(kernel_.d * kernel_.h * kernel_.w);
  w.forward.bytes = work_bytes(x) + work_bytes(y) + idx_bytes;
  w.saved_bytes = idx_bytes;
  if (y.requires_grad()) {
    w.backward.flops = static_cast<double>(y.numel());
    w.backward.bytes = work_bytes(y) + idx_bytes + (x.requires_grad() ? work_bytes(x) : 0.0);
  }
  return w;
}

namespace {

struct MaxPool3dSpec {
  Size3d kernel, stride, padding;
};

MaxPool3dSpec read_max_pool3d(LayerArgs& args) {
  const Size3d kernel = get_size3d(args, "kernel_size", std::nullopt, 1);
  const Size3d stride = get_size3d(args, "stride", kernel, 1);
  const Size3d padding = get_size3d(args, "padding", 0, 0);
  MINIDL_CHECK(2 * padding.d <= kernel.d && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w,
               args.key_path("padding"), ": must be at most half of kernel_size (", size3d_str(kernel), "), got ",
               size3d_str(padding));
  args.finish();
  return {kernel, stride, padding};
}

std::shared_ptr<Module> make_max_pool3d(LayerArgs& args) {
  const MaxPool3dSpec s = read_max_pool3d(args);
  return std::make_shared<MaxPool3d>(s.kernel, s.stride, s.padding);
}

}  // namespace

const LayerDescriptor& max_pool3d_layer() {
  static const LayerDescriptor layer{
      "MaxPool3d",
      "pool",
      "3-D max pooling over (N, C, D, H, W), as torch.nn.MaxPool3d",
      {required_key("kernel_size", "ints", "window (d, h, w): an int or a list of three, 1..65536"),
       derived_key("stride", "ints", "stride (d, h, w); defaults to kernel_size"),
       default_key("padding", "ints", 0, "implicit -inf padding on each side, at most half the kernel")},
      make_max_pool3d,
      {{"kernel_size", 2}},
      {2, 2, 4, 4, 4},
      AutocastRule::InputType,
      false};
  return layer;
}

}  // namespace minidl
