#include "layers/containers/skip_connection.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "layers/containers/cat_kernels.h"
#include "layers/layer_fields.h"
#include "layers/registry.h"

namespace minidl {
namespace {

// The copy of `part` (channels [c0, c0 + part's channels) of `whole`) into `whole` (to_whole) or
// out of it: rows and widths of the layout (cat_kernels.h).
void copy_part(const Tensor& whole, const Tensor& part, int64_t c0, bool to_whole) {
  const int64_t n = whole.size(0), spatial = whole.numel() / std::max<int64_t>(n * whole.size(1), 1);
  const bool last = is_channels_last_format(whole.memory_format());
  const int64_t rows = last ? n * spatial : n;
  const int64_t whole_row = last ? whole.size(1) : whole.size(1) * spatial;
  const int64_t part_row = last ? part.size(1) : part.size(1) * spatial;
  const int64_t offset = last ? c0 : c0 * spatial;
  if (rows == 0 || part_row == 0) return;
  dispatch_dtype(whole.dtype(), "cat_channels", [&](auto tag) {
    using T = decltype(tag);
    T* w = whole.data<T>() + offset;
    T* p = part.data<T>();
    dispatch(
        whole.device(), "cat_channels",
        [&] {
          to_whole ? kernels::copy_rows_cpu(w, whole_row, p, part_row, part_row, rows)
                   : kernels::copy_rows_cpu(p, part_row, w, whole_row, part_row, rows);
        },
        [&] {
          to_whole ? kernels::copy_rows_cuda(w, whole_row, p, part_row, part_row, rows)
                   : kernels::copy_rows_cuda(p, part_row, w, whole_row, part_row, rows);
        });
  });
}

}  // namespace

Tensor cat_channels(const Tensor& a, const Tensor& b) {
  MINIDL_CHECK(a.defined() && b.defined(), "cat_channels: both tensors must be defined");
  MINIDL_CHECK(a.dim() >= 2 && a.dim() == b.dim(), "cat_channels: expected two (N, C, *) tensors of one rank, got ",
               shape_str(a.shape()), " and ", shape_str(b.shape()));
  bool same = a.size(0) == b.size(0);
  for (int64_t d = 2; d < a.dim(); ++d) same = same && a.size(d) == b.size(d);
  MINIDL_CHECK(same, "cat_channels: ", shape_str(a.shape()), " and ", shape_str(b.shape()),
               " differ in a dimension other than the channels");
  MINIDL_CHECK(a.dtype() == b.dtype() && a.memory_format() == b.memory_format(), "cat_channels: ", a.str(), " and ",
               b.str(), " differ in dtype or memory format");
  check_same_device(a, b, "cat_channels inputs");
  Shape shape = a.shape();
  shape[1] = a.size(1) + b.size(1);
  const MemoryFormat f = a.memory_format();
  Tensor y = Tensor::empty(shape, a.dtype(), a.device(), f);
  copy_part(y, a, 0, true);
  copy_part(y, b, a.size(1), true);
  if (!autograd::needs_grad({a, b})) return y;
  const Shape sa = a.shape(), sb = b.shape();
  const int64_t ca = a.size(1);
  autograd::record(y, "cat_channels", {a, b}, [sa, sb, ca, f, dtype = a.dtype()](const Tensor& dy_in) {
    const Tensor dy = dy_in.to(dtype, f);
    Tensor da = Tensor::empty(sa, dtype, dy.device(), f), db = Tensor::empty(sb, dtype, dy.device(), f);
    copy_part(dy, da, 0, false);
    copy_part(dy, db, ca, false);
    return std::vector<Tensor>{da, db};
  });
  return y;
}

SkipConnection::SkipConnection(const SkipConnectionSpec& spec) : Layer(skip_connection_layer(), spec) {
  for (size_t i = 0; i < spec.body.size(); ++i) register_module(std::to_string(i), spec.body[i]);
}

Tensor SkipConnection::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& layer : spec().body) y = (*layer)(y);
  bool same = y.dim() == x.dim() && y.size(0) == x.size(0);
  for (int64_t d = 2; same && d < x.dim(); ++d) same = y.size(d) == x.size(d);
  MINIDL_CHECK(same, "SkipConnection '", path(), "': body output ", shape_str(y.shape()), " does not match its input ",
               shape_str(x.shape()), " outside the channels");
  // Under autocast the body may hand back another dtype (a float32 norm, a half conv): the skip
  // is joined in the body's, as torch.cat promotes only within one autocast region's types.
  const Tensor skip =
      x.dtype() == y.dtype() && x.memory_format() == y.memory_format() ? x : x.to(y.dtype(), y.memory_format());
  return cat_channels(skip, y);
}

// Its own work is the copy of x and the body's output into y; backward the copy back.
std::optional<LayerWork> SkipConnection::work(const Tensor&, const Tensor& y) const {
  LayerWork w;
  w.forward.bytes = 2 * work_bytes(y);
  if (y.requires_grad()) w.backward.bytes = 2 * work_bytes(y);
  return w;
}

const Fields<SkipConnectionSpec>& SkipConnectionSpec::fields() {
  static const Fields<SkipConnectionSpec> f{
      {layer_list("body", &SkipConnectionSpec::body, true, "a non-empty list of layer specs")}};
  return f;
}

const LayerDescriptor& skip_connection_layer() {
  static const LayerDescriptor layer{
      "SkipConnection",
      "containers",
      "cat([x, body(x)], dim=1), as MONAI's SkipConnection: a UNet level's skip; the body's layers are "
      "children 0, 1, ...",
      layer_fields<SkipConnection>(),
      make_layer<SkipConnection>,
      {{"body", {{{"type", "Conv3d"}, {"in_channels", 2}, {"out_channels", 3}, {"kernel_size", 1}}}}},
      {2, 2, 2, 2, 2},
      AutocastRule::InputType,
      false,
      nullptr,
      // A UNet level: down, a convolution, up, on an image as well (cat_channels takes any rank).
      {{{{"body",
          {{{"type", "MaxPool3d"}, {"kernel_size", 2}},
           {{"type", "Conv3d"}, {"in_channels", 2}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
           {{"type", "ConvTranspose3d"}, {"in_channels", 4}, {"out_channels", 2}, {"kernel_size", 2}, {"stride", 2}}}}},
        {2, 2, 4, 4, 4}},
       {{{"body", {{{"type", "Conv2d"}, {"in_channels", 3}, {"out_channels", 2}, {"kernel_size", 1}}}}},
        {2, 3, 4, 5}}}};
  return layer;
}

}  // namespace minidl
