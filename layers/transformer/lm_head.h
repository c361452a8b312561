// A language model's output layer with tied weights, as GPT-2's lm_head (nanoGPT:
// `self.lm_head.weight = self.transformer.wte.weight`): logits = F.linear(x, wte.weight), no bias,
// where wte is the Embedding at index `tied_to` of the same layer list. It holds no tensor of its
// own: the embedding's weight gets both gradients (the head's first, then the lookup's, added in
// the order the backward meets them), the optimizer and checkpoints see it once, under the
// embedding's name ("0.weight"). Under autocast it runs as Linear does (the operands cast to the
// half type), so the (B, T, V) logits are bf16 in a bf16 run.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/transformer/embedding.h"

namespace minidl {

const LayerDescriptor& lm_head_layer();

struct LMHeadSpec {
  int64_t tied_to;  // the index of the Embedding in the same layer list
  static const Fields<LMHeadSpec>& fields();
};

class LMHead : public Layer<LMHeadSpec> {
 public:
  explicit LMHead(int64_t tied_to) : LMHead(LMHeadSpec{tied_to}) {}
  explicit LMHead(const LMHeadSpec& spec) : Layer(lm_head_layer(), spec) {}
  // (..., D) -> (..., V) with the tied embedding's weight (V, D).
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "LMHead tied to 0 (768->50257)"
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;
  // The layers of the list that holds it (build_layers calls it once every layer is built):
  // checks that layer `tied_to` is an Embedding and keeps it.
  void bind_siblings(const std::vector<std::shared_ptr<Module>>& layers) override;

  int64_t tied_to() const { return spec().tied_to; }
  // The embedding whose weight it uses (null before bind_siblings).
  const Embedding* embedding() const { return embedding_.get(); }

 private:
  std::shared_ptr<Embedding> embedding_;
};

}  // namespace minidl
