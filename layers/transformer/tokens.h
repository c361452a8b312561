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

#include "core/enum_names.h"
#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

Tensor tokens(const Tensor& x);
Tensor add_position_embedding(const Tensor& x, const Tensor& weight);
Tensor prepend_class_token(const Tensor& x, const Tensor& cls_token);
Tensor token_pool(const Tensor& x, bool mean);

const LayerDescriptor& tokens_layer();
const LayerDescriptor& position_embedding_layer();
const LayerDescriptor& class_token_layer();
const LayerDescriptor& token_pool_layer();

class Tokens : public Layer<NoKeys> {
 public:
  explicit Tokens(const NoKeys& spec = {}) : Layer(tokens_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return tokens(x); }
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;
};

struct PositionEmbeddingSpec {
  int64_t num_tokens, embed_dim;
  double init_std;
  static const Fields<PositionEmbeddingSpec>& fields();
};

class PositionEmbedding : public Layer<PositionEmbeddingSpec> {
 public:
  PositionEmbedding(int64_t num_tokens, int64_t embed_dim, double init_std = 0.02)
      : PositionEmbedding(PositionEmbeddingSpec{num_tokens, embed_dim, init_std}) {}
  explicit PositionEmbedding(const PositionEmbeddingSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "PositionEmbedding 64x384"
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  Tensor weight;  // (1, num_tokens, embed_dim)
};

struct ClassTokenSpec {
  int64_t embed_dim;
  static const Fields<ClassTokenSpec>& fields();
};

class ClassToken : public Layer<ClassTokenSpec> {
 public:
  explicit ClassToken(int64_t embed_dim) : ClassToken(ClassTokenSpec{embed_dim}) {}
  explicit ClassToken(const ClassTokenSpec& spec);  // cls_token zeros, as torchvision's ViT
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "ClassToken 384"
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  Tensor cls_token;  // (1, 1, embed_dim)
};

enum class TokenPoolMode { Mean, Cls };
template <>
struct EnumNames<TokenPoolMode> {
  static constexpr EnumName<TokenPoolMode> values[] = {{TokenPoolMode::Mean, "mean"}, {TokenPoolMode::Cls, "cls"}};
};

struct TokenPoolSpec {
  TokenPoolMode mode;
  static const Fields<TokenPoolSpec>& fields();
};

class TokenPool : public Layer<TokenPoolSpec> {
 public:
  explicit TokenPool(bool mean) : TokenPool(TokenPoolSpec{mean ? TokenPoolMode::Mean : TokenPoolMode::Cls}) {}
  explicit TokenPool(const TokenPoolSpec& spec) : Layer(token_pool_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return token_pool(x, mean()); }
  std::string describe() const override { return mean() ? "TokenPool mean" : "TokenPool cls"; }
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

 private:
  bool mean() const { return spec().mode == TokenPoolMode::Mean; }
};

}  // namespace minidl
