// Token embedding as torch.nn.Embedding(num_embeddings, embedding_dim): int32 token ids of any
// shape in, their rows of `weight` (num_embeddings, embedding_dim) out, shape ids.shape + (D,).
// A language model's input layer: (B, T) ids -> (B, T, D), followed by PositionEmbedding (the
// learned positions, for any T up to its num_tokens). The backward sums each id's rows in token
// order (embedding_kernels.h), so the gradient has the same bits on the CPU and the GPU.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"

namespace minidl {

// F.embedding(ids, weight): ids int32, every one in [0, num_embeddings) (checked on the CPU; on
// CUDA a bad id gives a NaN row), weight float32 (num_embeddings, D).
Tensor embedding(const Tensor& ids, const Tensor& weight);

const LayerDescriptor& embedding_layer();

struct EmbeddingSpec {
  int64_t num_embeddings, embedding_dim;
  double init_std;  // weight ~ N(0, init_std^2): PyTorch's default is 1; GPT-2 uses 0.02
  static const Fields<EmbeddingSpec>& fields();
};

class Embedding : public Layer<EmbeddingSpec> {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, double init_std = 1.0)
      : Embedding(EmbeddingSpec{num_embeddings, embedding_dim, init_std}) {}
  explicit Embedding(const EmbeddingSpec& spec);
  Tensor forward(const Tensor& ids) override { return embedding(ids, weight); }
  std::string describe() const override;  // "Embedding 50257x768"
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  int64_t num_embeddings() const { return spec().num_embeddings; }
  int64_t embedding_dim() const { return spec().embedding_dim; }

  Tensor weight;  // (num_embeddings, embedding_dim)
};


}  // namespace minidl
