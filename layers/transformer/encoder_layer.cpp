// The TransformerEncoderLayer container and its factory.
#include "layers/transformer/encoder_layer.h"

#include <algorithm>

#include "core/autocast.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/tensor_ops.h"
#include "layers/activation/activation.h"
#include "layers/registry.h"

namespace minidl {

TransformerEncoderLayer::TransformerEncoderLayer(const EncoderLayerOptions& o) : o_(o) {
  MINIDL_CHECK(o.activation == "relu" || o.activation == "gelu",
               "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got ", json_excerpt(o.activation));
  self_attn = std::make_shared<MultiheadAttention>(o.d_model, o.nhead, o.dropout, o.bias);
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
  h = o_.activation == "gelu" ? gelu(h) : relu(h);
  return (*dropout2)((*linear2)((*dropout)(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x_in) {
  MINIDL_CHECK(x_in.defined() && x_in.dim() == 3 && x_in.size(2) == o_.d_model, label(), ": expected input (N, T, ",
               o_.d_model, "), got ", x_in.defined() ? shape_str(x_in.shape()) : std::string("an undefined tensor"));
  Tensor x = x_in;
  if (o_.norm_first) {
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
  LayerWork w;
  const double n = static_cast<double>(y.numel());
  w.forward.flops = 2 * n;
  w.forward.bytes = 2 * (2 * work_bytes(x) + work_bytes(y));
  const double hidden = n / static_cast<double>(o_.d_model) * static_cast<double>(o_.dim_feedforward);
  const bool gelu_act = o_.activation == "gelu";
  const double hidden_bytes = hidden * static_cast<double>(dtype_size(autocast_active() ? autocast_dtype() : y.dtype()));
  w.forward.flops += (gelu_act ? 8 : 1) * hidden;
  w.forward.bytes += 2 * hidden_bytes;
  w.backward.flops = (gelu_act ? 12 : 1) * hidden;
  w.backward.bytes = 3 * hidden_bytes;
  w.saved_bytes = hidden_bytes;
  return w;
}

std::string TransformerEncoderLayer::describe() const {
  return str("TransformerEncoderLayer ", o_.d_model, " h", o_.nhead, " ff", o_.dim_feedforward,
             o_.norm_first ? " pre-norm" : " post-norm");
}

nlohmann::json TransformerEncoderLayer::to_json() const {
  return {{"type", "TransformerEncoderLayer"},
          {"d_model", o_.d_model},
          {"nhead", o_.nhead},
          {"dim_feedforward", o_.dim_feedforward},
          {"dropout", o_.dropout},
          {"activation", o_.activation},
          {"layer_norm_eps", o_.layer_norm_eps},
          {"norm_first", o_.norm_first},
          {"drop_path", o_.drop_path},
          {"bias", o_.bias}};
}

namespace {

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
EncoderLayerOptions read_encoder_layer(LayerArgs& args) {
  EncoderLayerOptions o;
  o.d_model = args.get_int("d_model");
  o.nhead = args.get_int("nhead");
  MINIDL_CHECK(o.d_model >= 1 && o.d_model <= kMaxFeatures, args.key_path("d_model"), ": must be in 1..", kMaxFeatures,
               ", got ", o.d_model);
  MINIDL_CHECK(o.nhead >= 1 && o.d_model % o.nhead == 0, args.key_path("nhead"), ": must divide d_model (", o.d_model,
               "), got ", o.nhead);
  o.dim_feedforward = args.get_int("dim_feedforward", o.dim_feedforward);
  MINIDL_CHECK(o.dim_feedforward >= 1 && o.dim_feedforward <= kMaxFeatures, args.key_path("dim_feedforward"),
               ": must be in 1..", kMaxFeatures, ", got ", o.dim_feedforward);
  o.dropout = args.get_float("dropout", o.dropout);
  MINIDL_CHECK(o.dropout >= 0 && o.dropout <= 1, args.key_path("dropout"), ": must be in [0, 1], got ", o.dropout);
  o.activation = args.get_string("activation", o.activation);
  MINIDL_CHECK(o.activation == "relu" || o.activation == "gelu", args.key_path("activation"),
               ": must be \"relu\" or \"gelu\", got ", json_excerpt(o.activation));
  o.layer_norm_eps = args.get_float("layer_norm_eps", o.layer_norm_eps);
  MINIDL_CHECK(o.layer_norm_eps >= 0, args.key_path("layer_norm_eps"), ": must be >= 0, got ", o.layer_norm_eps);
  o.norm_first = args.get_bool("norm_first", o.norm_first);
  o.drop_path = args.get_float("drop_path", o.drop_path);
  MINIDL_CHECK(o.drop_path >= 0 && o.drop_path <= 1, args.key_path("drop_path"), ": must be in [0, 1], got ",
               o.drop_path);
  o.bias = args.get_bool("bias", o.bias);
  args.finish();
  check_weight_size(args, {3 * o.d_model, o.d_model});
  check_weight_size(args, {o.dim_feedforward, o.d_model});
  return o;
}

std::shared_ptr<Module> make_transformer_encoder_layer(LayerArgs& args) {
  return std::make_shared<TransformerEncoderLayer>(read_encoder_layer(args));
}

// self_attn, linear1 and linear2 (with their biases), norm1 and norm2 (weight and bias each).
LayerState encoder_layer_state(LayerArgs& args) {
  const EncoderLayerOptions o = read_encoder_layer(args);
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
      {required_key("d_model", "int", "model width D, 1..2^31"),
       required_key("nhead", "int", "attention heads; must divide d_model"),
       default_key("dim_feedforward", "int", 2048, "hidden width of the MLP block"),
       default_key("dropout", "float", 0.1, "dropout in attention, after it, and in the MLP block, in [0, 1]"),
       default_key("activation", "string", "relu", "\"relu\" or \"gelu\""),
       default_key("layer_norm_eps", "float", 1e-5, "LayerNorm's eps"),
       default_key("norm_first", "bool", false, "pre-norm (true) or post-norm (false, PyTorch's default)"),
       default_key("drop_path", "float", 0.0, "stochastic depth on both residual branches, in [0, 1]"),
       default_key("bias", "bool", true, "biases in the attention and MLP projections")},
      make_transformer_encoder_layer,
      {{"d_model", 8}, {"nhead", 2}, {"dim_feedforward", 16}, {"dropout", 0.0}, {"norm_first", true}},
      {2, 5, 8},
      AutocastRule::InputType,
      true,
      encoder_layer_state,
      {{{{"d_model", 8}, {"nhead", 2}, {"dim_feedforward", 12}, {"dropout", 0.1}}, {2, 5, 8}}}};
  return layer;
}

}  // namespace minidl
