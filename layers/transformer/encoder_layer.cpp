// The TransformerEncoderLayer container and its factory.
#include "layers/transformer/encoder_layer.h"

#include <algorithm>

#include "core/autocast.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/tensor_ops.h"
#include "layers/activation/activation.h"
#include "layers/registry.h"

namespace minidl {

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerSpec& o)
    : Layer(transformer_encoder_layer_layer(), o) {
  self_attn = std::make_shared<MultiheadAttention>(o.d_model, o.nhead, o.dropout, o.bias, o.causal);
  linear1 = std::make_shared<Linear>(o.d_model, o.dim_feedforward, o.bias);
  dropout = std::make_shared<Dropout>(o.dropout);
  linear2 = std::make_shared<Linear>(o.dim_feedforward, o.d_model, o.bias);
  norm1 = std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps);
  norm2 = std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps);
  // Pre-norm: each LayerNorm's output goes only to a projection (self-attention's, linear1).
  norm1->set_feeds_half_gemm(o.norm_first);
  norm2->set_feeds_half_gemm(o.norm_first);
  dropout1 = std::make_shared<Dropout>(o.dropout);
  dropout2 = std::make_shared<Dropout>(o.dropout);
  drop_path1 = std::make_shared<DropPath>(o.drop_path);
  drop_path2 = std::make_shared<DropPath>(o.drop_path);
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("drop_path1", drop_path1);
  register_module("drop_path2", drop_path2);
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  Tensor h = (*linear1)(x);
  switch (spec().activation) {
    case FeedForwardActivation::ReLU: h = relu(h); break;
    case FeedForwardActivation::GELU: h = gelu(h); break;
    case FeedForwardActivation::GELUTanh: h = gelu(h, GeluApproximate::Tanh); break;
  }
  return (*dropout2)((*linear2)((*dropout)(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x_in) {
  const TransformerEncoderLayerSpec& o = spec();
  MINIDL_CHECK(x_in.defined() && x_in.dim() == 3 && x_in.size(2) == o.d_model, label(), ": expected input (N, T, ",
               o.d_model, "), got ", x_in.defined() ? shape_str(x_in.shape()) : std::string("an undefined tensor"));
  Tensor x = x_in;
  if (o.norm_first) {
    x = add(x, (*drop_path1)((*dropout1)((*self_attn)((*norm1)(x)))));
    return add(x, (*drop_path2)(feed_forward((*norm2)(x))));
  }
  x = (*norm1)(add(x, (*drop_path1)((*dropout1)((*self_attn)(x)))));
  return (*norm2)(add(x, (*drop_path2)(feed_forward(x))));
}

// Residual adds: one FLOP per element, two inputs read, one output written, nothing backward (dy
// goes to both branches as it is). The activation over (N, T, dim_feedforward) in the MLP's
// dtype (autocast's, else the output's): GELU ~8 FLOPs forward and 12 backward per
// element (erf counted as 1), ReLU 1 and 1; its input saved (GELU) or its output (ReLU).
std::optional<LayerWork> TransformerEncoderLayer::work(const Tensor& x, const Tensor& y) const {
  const TransformerEncoderLayerSpec& o = spec();
  LayerWork w;
  const double n = static_cast<double>(y.numel());
  w.forward.flops = 2 * n;
  w.forward.bytes = 2 * (2 * work_bytes(x) + work_bytes(y));
  const double hidden = n / static_cast<double>(o.d_model) * static_cast<double>(o.dim_feedforward);
  const bool gelu_act = o.activation != FeedForwardActivation::ReLU;
  const double hidden_bytes = hidden * static_cast<double>(dtype_size(autocast_active() ? autocast_dtype() : y.dtype()));
  w.forward.flops += (gelu_act ? 8 : 1) * hidden;
  w.forward.bytes += 2 * hidden_bytes;
  w.backward.flops = (gelu_act ? 12 : 1) * hidden;
  w.backward.bytes = 3 * hidden_bytes;
  w.saved_bytes = hidden_bytes;
  return w;
}

std::string TransformerEncoderLayer::describe() const {
  const TransformerEncoderLayerSpec& o = spec();
  return str("TransformerEncoderLayer ", o.d_model, " h", o.nhead, " ff", o.dim_feedforward,
             o.norm_first ? " pre-norm" : " post-norm", o.causal ? " causal" : "");
}

const Fields<TransformerEncoderLayerSpec>& TransformerEncoderLayerSpec::fields() {
  using S = TransformerEncoderLayerSpec;
  static const Fields<S> f{
      {integer("d_model", &S::d_model, kRequired, {1, kMaxFeatures}, "model width D"),
       integer("nhead", &S::nhead, kRequired, {1, kMaxFeatures}, "attention heads; must divide d_model"),
       integer("dim_feedforward", &S::dim_feedforward, 2048, {1, kMaxFeatures}, "hidden width of the MLP block"),
       number("dropout", &S::dropout, 0.1, kUnitInterval, "dropout in attention, after it, and in the MLP block"),
       choice("activation", &S::activation, FeedForwardActivation::ReLU,
              "the MLP block's activation (gelu_tanh: GELU(approximate=\"tanh\"), GPT-2's)"),
       number("layer_norm_eps", &S::layer_norm_eps, 1e-5, kAtLeastZero, "LayerNorm's eps"),
       flag("norm_first", &S::norm_first, false, "pre-norm (true) or post-norm (false, PyTorch's default)"),
       number("drop_path", &S::drop_path, 0.0, kUnitInterval, "stochastic depth on both residual branches"),
       flag("bias", &S::bias, true, "biases in the attention and MLP projections"),
       written_when_set(
           flag("causal", &S::causal, false, "causal self-attention: each token sees itself and the tokens before it"))},
      [](const S& o, const JsonArgs& args) {
        MINIDL_CHECK(o.d_model % o.nhead == 0, args.key_path("nhead"), ": must divide d_model (", o.d_model, "), got ",
                     o.nhead);
        check_weight_size(args, {3 * o.d_model, o.d_model});
        check_weight_size(args, {o.dim_feedforward, o.d_model});
      }};
  return f;
}

namespace {

// self_attn, linear1 and linear2 (with their biases), norm1 and norm2 (weight and bias each).
LayerState encoder_layer_state(const TransformerEncoderLayerSpec& o) {
  const int64_t d = o.d_model, ff = o.dim_feedforward;
  const int64_t mlp = 2 * ff * d + (o.bias ? ff + d : 0);
  return {multihead_attention_elements(d, o.bias) + mlp + 4 * d, std::max(3 * d * d, ff * d),
          str("TransformerEncoderLayer ", d, " h", o.nhead, " ff", ff)};
}

}  // namespace

const LayerDescriptor& transformer_encoder_layer_layer() {
  static const LayerDescriptor layer{
      "TransformerEncoderLayer",
      "transformer",
      "self-attention and an MLP block with residuals, as torch.nn.TransformerEncoderLayer(batch_first=True), plus "
      "drop_path",
      layer_fields<TransformerEncoderLayer>(),
      make_layer<TransformerEncoderLayer>,
      {{"d_model", 8}, {"nhead", 2}, {"dim_feedforward", 16}, {"dropout", 0.0}, {"norm_first", true}},
      {2, 5, 8},
      AutocastRule::InputType,
      true,
      layer_state<TransformerEncoderLayer, encoder_layer_state>,
      {{{{"d_model", 8}, {"nhead", 2}, {"dim_feedforward", 12}, {"dropout", 0.1}}, {2, 5, 8}},
       // GPT-2's block: pre-norm, causal, tanh GELU; not exported (ONNX has no causal mask here).
       {{{"d_model", 8},
         {"nhead", 2},
         {"dim_feedforward", 16},
         {"dropout", 0.0},
         {"norm_first", true},
         {"activation", "gelu_tanh"},
         {"causal", true}},
        {2, 5, 8},
        false}}};
  return layer;
}

}  // namespace minidl
