// The tied language-model head and its factory.
#include "layers/transformer/lm_head.h"

#include "core/autocast.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/storage_rounding.h"
#include "layers/linear/linear.h"
#include "layers/registry.h"

namespace minidl {

void LMHead::bind_siblings(const std::vector<std::shared_ptr<Module>>& layers) {
  MINIDL_CHECK(tied_to() < static_cast<int64_t>(layers.size()), "LMHead: tied_to ", tied_to(), " is past the ",
               layers.size(), " layers of its list");
  embedding_ = std::dynamic_pointer_cast<Embedding>(layers[static_cast<size_t>(tied_to())]);
  MINIDL_CHECK(embedding_ != nullptr, "LMHead: tied_to ", tied_to(), " names a ",
               layers[static_cast<size_t>(tied_to())]->type_name(), ", not an Embedding");
}

Tensor LMHead::forward(const Tensor& x) {
  MINIDL_CHECK(embedding_ != nullptr, label(),
               ": not tied to an Embedding (it must sit in a layer list with one at index ", tied_to(), ")");
  const Tensor& w = embedding_->weight;
  MINIDL_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == w.size(1), label(), ": expected input (..., ", w.size(1),
               "), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (autocast_active()) {
    const DType t = autocast_dtype();
    return linear(x.to(t), w.to(t), Tensor());
  }
  return linear(x, in_dtype_of(w, x), Tensor());
}

std::string LMHead::describe() const {
  if (!embedding_) return str("LMHead tied to ", tied_to());
  return str("LMHead tied to ", tied_to(), " (", embedding_->embedding_dim(), "->", embedding_->num_embeddings(), ")");
}

// x (M, D) times W^T (D, V): 2 M D V FLOPs; backward twice that (dx and dW).
std::optional<LayerWork> LMHead::work(const Tensor& x, const Tensor& y) const {
  if (!embedding_) return std::nullopt;
  const double v = static_cast<double>(embedding_->num_embeddings()),
               d = static_cast<double>(embedding_->embedding_dim());
  const double m = static_cast<double>(x.numel()) / d;
  const double w_bytes = work_bytes(static_cast<int64_t>(v * d), y.dtype());
  LayerWork w;
  w.forward.flops = 2 * m * d * v;
  w.forward.bytes = work_bytes(x) + w_bytes + work_bytes(y);
  w.backward.flops = 4 * m * d * v;
  w.backward.bytes = 2 * work_bytes(y) + work_bytes(x) * 2 + w_bytes + work_bytes(embedding_->weight);
  w.saved_bytes = work_bytes(x);
  return w;
}

const Fields<LMHeadSpec>& LMHeadSpec::fields() {
  static const Fields<LMHeadSpec> f{{integer("tied_to", &LMHeadSpec::tied_to, kRequired, {0, kMaxFeatures},
                                             "the index of the Embedding in the same layer list whose weight it shares")}};
  return f;
}

const LayerDescriptor& lm_head_layer() {
  static const LayerDescriptor layer{
      "LMHead",
      "transformer",
      "logits = F.linear(x, wte.weight): a language model's head tied to the Embedding at index tied_to of its list",
      layer_fields<LMHead>(),
      make_layer<LMHead>,
      {{"tied_to", 0}},
      {2, 5},
      AutocastRule::LowerPrecision,
      false,
      nullptr,
      {},
      11,
      {nlohmann::json{{"type", "Embedding"}, {"num_embeddings", 11}, {"embedding_dim", 4}}}};
  return layer;
}

}  // namespace minidl
