#include "layers/containers/flatten.h"

#include "core/error.h"
#include "core/field_kinds.h"
#include "layers/registry.h"

namespace minidl {

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  MINIDL_CHECK(x.defined(), "flatten: input is undefined");
  const int64_t n = x.dim();
  const int64_t s = start_dim < 0 ? start_dim + n : start_dim;
  const int64_t e = end_dim < 0 ? end_dim + n : end_dim;
  MINIDL_CHECK(s >= 0 && s < n && e >= 0 && e < n && s <= e, "flatten: start_dim ", start_dim, " and end_dim ",
               end_dim, " do not select a range of dims of an input of shape ", shape_str(x.shape()));
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.size(d);
  out.push_back(merged);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return x.reshape(out);
}

const Fields<FlattenSpec>& FlattenSpec::fields() {
  static const Fields<FlattenSpec> f{{
      integer("start_dim", &FlattenSpec::start_dim, 1, {}, "first dim merged (negative counts from the end)"),
      integer("end_dim", &FlattenSpec::end_dim, -1, {}, "last dim merged (negative counts from the end)"),
  }};
  return f;
}

const LayerDescriptor& flatten_layer() {
  static const LayerDescriptor layer{"Flatten",
                                     "containers",
                                     "merges dims start_dim..end_dim into one, as torch.nn.Flatten",
                                     layer_fields<Flatten>(),
                                     make_layer<Flatten>,
                                     nlohmann::json::object(),
                                     {2, 3, 2, 2},
                                     AutocastRule::InputType};
  return layer;
}

// A view when the input is contiguous (nothing moves); otherwise reshape copies it once.
std::optional<LayerWork> Flatten::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  if (!x.is_contiguous()) {
    w.forward.bytes = work_bytes(x) + work_bytes(y);
    if (y.requires_grad()) w.backward.bytes = work_bytes(y) + work_bytes(x);
  }
  return w;
}

}  // namespace minidl
