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

#include "layers/layer_descriptor.h"
#include "layers/module.h"
#include "layers/transformer/embedding.h"

namespace minidl {

class LMHead : public Module {
 public:
  explicit LMHead(int64_t tied_to) : tied_to_(tied_to) {}
  // (..., D) -> (..., V) with the tied embedding's weight (V, D).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LMHead"; }
  std::string describe() const override;  // "LMHead tied to 0 (768->50257)"
  nlohmann::json to_json() const override { return {{"type", "LMHead"}, {"tied_to", tied_to_}}; }
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;
  // The layers of the list that holds it (build_sequential calls it once every layer is built):
  // checks that layer `tied_to` is an Embedding and keeps it.
  void bind_siblings(const std::vector<std::shared_ptr<Module>>& layers) override;

  int64_t tied_to() const { return tied_to_; }
  // The embedding whose weight it uses (null before bind_siblings).
  const Embedding* embedding() const { return embedding_.get(); }

 private:
  int64_t tied_to_;
  std::shared_ptr<Embedding> embedding_;
};

const LayerDescriptor& lm_head_layer();

}  // namespace minidl
