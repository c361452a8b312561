// TransformerEncoderLayer as torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward,
// dropout, activation, layer_norm_eps, batch_first=True, norm_first), plus timm's stochastic
// depth (drop_path) on both residual branches. A container: its children are PyTorch's
// (self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2, in that order) so the
// state_dict keys are PyTorch's ("layers.0.self_attn.in_proj_weight", "layers.0.norm1.weight"),
// and drop_path1, drop_path2 (timm's names; they hold no tensors, and draw independently).
// With causal and norm_first and activation "gelu_tanh" it is GPT-2's block (nanoGPT's Block).
//   norm_first (pre-norm): x = x + drop_path1(dropout1(self_attn(norm1(x))))
//                          x = x + drop_path2(dropout2(linear2(dropout(act(linear1(norm2(x)))))))
//   post-norm:             x = norm1(x + drop_path1(dropout1(self_attn(x))))
//                          x = norm2(x + drop_path2(dropout2(ff(x))))
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "layers/linear/linear.h"
#include "layers/layer_descriptor.h"
#include "layers/module.h"
#include "layers/norm/layernorm.h"
#include "layers/regularization/dropout.h"
#include "layers/transformer/attention.h"

namespace minidl {

struct EncoderLayerOptions {
  int64_t d_model = 0, nhead = 0, dim_feedforward = 2048;
  double dropout = 0.1;     // PyTorch's default
  std::string activation = "relu";  // "relu", "gelu" or "gelu_tanh" (GELU(approximate="tanh")); PyTorch's default relu
  double layer_norm_eps = 1e-5;
  bool norm_first = false;  // PyTorch's default post-norm
  double drop_path = 0.0;
  bool bias = true;
  bool causal = false;  // self_attn's mask: each token sees itself and the tokens before it
};

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const EncoderLayerOptions& o);
  Tensor forward(const Tensor& x) override;  // (N, T, d_model) -> the same
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  std::string describe() const override;  // "TransformerEncoderLayer 384 h6 ff1152 pre-norm"
  nlohmann::json to_json() const override;
  // Its own work: the two residual adds and the activation (its children report theirs).
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<DropPath> drop_path1, drop_path2;

 private:
  Tensor feed_forward(const Tensor& x);
  EncoderLayerOptions o_;
};

const LayerDescriptor& transformer_encoder_layer_layer();

}  // namespace minidl
