// The token-sequence layers of a Vision Transformer, on batch-first (N, T, D) tensors:
//   Tokens             (N, C, H, W) -> (N, H*W, C), x.flatten(2).transpose(1, 2): after a strided
//                      Conv2d (kernel = stride = patch) this is patch embedding;
//   PositionEmbedding  x + weight[:, :T], weight (1, num_tokens, D) learned (trunc_normal_(std)
//                      init), T <= num_tokens (a language model's positions 0..T-1);
//   ClassToken         prepends the learned cls_token (1, 1, D) -> (N, T + 1, D);
//   TokenPool          (N, T, D) -> (N, D): the mean over tokens, or token 0 ("cls").
// A half input meeting a float32 parameter is widened first (PyTorch's type promotion), so under
// bf16 autocast the residual stream after PositionEmbedding is float32, as in PyTorch.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "layers/layer_descriptor.h"
#include "layers/module.h"

namespace minidl {

Tensor tokens(const Tensor& x);
Tensor add_position_embedding(const Tensor& x, const Tensor& weight);
Tensor prepend_class_token(const Tensor& x, const Tensor& cls_token);
Tensor token_pool(const Tensor& x, bool mean);

class Tokens : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tokens(x); }
  std::string type_name() const override { return "Tokens"; }
  nlohmann::json to_json() const override { return {{"type", "Tokens"}}; }
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;
};

class PositionEmbedding : public Module {
 public:
  PositionEmbedding(int64_t num_tokens, int64_t embed_dim, double init_std = 0.02);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "PositionEmbedding"; }
  std::string describe() const override;  // "PositionEmbedding 64x384"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  Tensor weight;  // (1, num_tokens, embed_dim)

 private:
  int64_t num_tokens_, embed_dim_;
  double init_std_;
};

class ClassToken : public Module {
 public:
  explicit ClassToken(int64_t embed_dim);  // cls_token zeros, as torchvision's ViT
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ClassToken"; }
  std::string describe() const override;  // "ClassToken 384"
  nlohmann::json to_json() const override { return {{"type", "ClassToken"}, {"embed_dim", embed_dim_}}; }
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  Tensor cls_token;  // (1, 1, embed_dim)

 private:
  int64_t embed_dim_;
};

class TokenPool : public Module {
 public:
  explicit TokenPool(bool mean) : mean_(mean) {}
  Tensor forward(const Tensor& x) override { return token_pool(x, mean_); }
  std::string type_name() const override { return "TokenPool"; }
  std::string describe() const override { return mean_ ? "TokenPool mean" : "TokenPool cls"; }
  nlohmann::json to_json() const override { return {{"type", "TokenPool"}, {"mode", mean_ ? "mean" : "cls"}}; }
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

 private:
  bool mean_;
};

const LayerDescriptor& tokens_layer();
const LayerDescriptor& position_embedding_layer();
const LayerDescriptor& class_token_layer();
const LayerDescriptor& token_pool_layer();

}  // namespace minidl
