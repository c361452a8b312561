// TransformerEncoderLayer as torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward,
// dropout, activation, layer_norm_eps, batch_first=True, norm_first), plus timm's stochastic
// depth (drop_path) on both residual branches. A container: its children are PyTorch's
// (self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2, in that order) so the
// state_dict keys are PyTorch's ("layers.0.self_attn.in_proj_weight", "layers.0.norm1.weight"),
// and drop_path1, drop_path2 (timm's names; they hold no tensors, and draw independently).
// With causal, norm_first and activation "gelu_tanh" it is GPT-2's block (nanoGPT's Block).
//   norm_first (pre-norm): x = x + drop_path1(dropout1(self_attn(norm1(x))))
//                          x = x + drop_path2(dropout2(linear2(dropout(act(linear1(norm2(x)))))))
//   post-norm:             x = norm1(x + drop_path1(dropout1(self_attn(x))))
//                          x = norm2(x + drop_path2(dropout2(ff(x))))
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/enum_names.h"
#include "core/fields.h"
#include "layers/layer.h"
#include "layers/linear/linear.h"
#include "layers/norm/layernorm.h"
#include "layers/regularization/dropout.h"
#include "layers/transformer/attention.h"

namespace minidl {

const LayerDescriptor& transformer_encoder_layer_layer();

// The MLP block's activation.
enum class FeedForwardActivation { ReLU, GELU, GELUTanh };
template <>
struct EnumNames<FeedForwardActivation> {
  static constexpr EnumName<FeedForwardActivation> values[] = {{FeedForwardActivation::ReLU, "relu"},
                                                               {FeedForwardActivation::GELU, "gelu"},
                                                               {FeedForwardActivation::GELUTanh, "gelu_tanh"}};
};

// PyTorch's defaults (dim_feedforward 2048, dropout 0.1, relu, post-norm) are the fields'.
struct TransformerEncoderLayerSpec {
  int64_t d_model, nhead, dim_feedforward;
  double dropout;
  FeedForwardActivation activation;
  double layer_norm_eps;
  bool norm_first;
  double drop_path;
  bool bias;
  bool causal = false;  // self_attn's mask: each token sees itself and the tokens before it
  static const Fields<TransformerEncoderLayerSpec>& fields();
};

class TransformerEncoderLayer : public Layer<TransformerEncoderLayerSpec> {
 public:
  explicit TransformerEncoderLayer(const TransformerEncoderLayerSpec& spec);
  Tensor forward(const Tensor& x) override;  // (N, T, d_model) -> the same
  std::string describe() const override;     // "TransformerEncoderLayer 384 h6 ff1152 pre-norm"
  // Its own work: the two residual adds and the activation (its children report theirs).
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<DropPath> drop_path1, drop_path2;

 private:
  Tensor feed_forward(const Tensor& x);
};

}  // namespace minidl
