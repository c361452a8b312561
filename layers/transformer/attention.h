// Multi-head self-attention as torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, bias,
// batch_first=True) called as mha(x, x, x, need_weights=False): parameters in_proj_weight
// (3D, D), in_proj_bias (3D), out_proj.weight (D, D), out_proj.bias (D), PyTorch's names, so
// state_dicts load either way. The op self_attention() is scaled dot-product attention over a
// packed (N, T, 3D) projection, one autograd node (attention_kernels.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/linear/linear.h"
#include "layers/regularization/dropout_state.h"

namespace minidl {

// qkv (N, T, 3D) = [q | k | v] with D = num_heads * head_dim -> (N, T, D), heads side by side.
// softmax(q k^T / sqrt(head_dim)) v per head; dropout_p > 0 drops attention probabilities with
// the draws of `salt` at the seed and step of `dropout_state` (layers/regularization/dropout_state.h;
// null: the thread's default state). causal: token i attends to tokens 0..i only
// (F.scaled_dot_product_attention(..., is_causal=True)).
Tensor self_attention(const Tensor& qkv, int64_t num_heads, float dropout_p = 0.f, uint32_t salt = 0,
                      bool causal = false, std::shared_ptr<DropoutState> dropout_state = nullptr);

const LayerDescriptor& multihead_attention_layer();

struct MultiheadAttentionSpec {
  int64_t embed_dim, num_heads;
  double dropout;
  bool bias;
  // Every token attends to itself and the tokens before it, as mha(x, x, x, attn_mask=causal_mask,
  // is_causal=True): a language model's self-attention.
  bool causal = false;
  static const Fields<MultiheadAttentionSpec>& fields();
};

class MultiheadAttention : public Layer<MultiheadAttentionSpec>, public DrawsDropout {
 public:
  // in_proj_weight xavier_uniform, biases 0, out_proj.weight as Linear's default: PyTorch's
  // _reset_parameters. On the CPU.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool causal = false)
      : MultiheadAttention(MultiheadAttentionSpec{embed_dim, num_heads, dropout, bias, causal}) {}
  explicit MultiheadAttention(const MultiheadAttentionSpec& spec);

  Tensor forward(const Tensor& x) override;  // (N, T, D) -> (N, T, D)
  std::string describe() const override;     // "MultiheadAttention 384 h6", "MultiheadAttention 768 h12 causal"
  // Its own work: the in-projection and the attention (out_proj, a child Linear, reports its own).
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  int64_t embed_dim() const { return spec().embed_dim; }
  int64_t num_heads() const { return spec().num_heads; }
  bool causal() const { return spec().causal; }

  Tensor in_proj_weight;  // (3D, D)
  Tensor in_proj_bias;    // (3D) or undefined
  std::shared_ptr<Linear> out_proj;
};

// The parameters a MultiheadAttention of `embed_dim` holds (what its constructor allocates).
int64_t multihead_attention_elements(int64_t embed_dim, bool bias);

}  // namespace minidl
