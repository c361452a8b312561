#include "layers/registry.h"

#include <functional>
#include <map>

#include "core/error.h"

namespace minidl {

namespace {

using Factory = std::function<std::shared_ptr<Module>(LayerArgs&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = {
      {"Conv2d", make_conv2d},
      {"Linear", make_linear},
      {"BatchNorm2d", make_batchnorm2d},
      {"GroupNorm", make_groupnorm},
      {"LayerNorm", make_layernorm},
      {"ReLU", make_relu},
      {"GELU", make_gelu},
      {"MaxPool2d", make_maxpool2d},
      {"GlobalAvgPool2d", make_global_avg_pool2d},
      {"GlobalMaxPool2d", make_global_max_pool2d},
      {"Flatten", make_flatten},
      {"Scale", make_scale},
      {"Sequential", make_sequential},
      {"Residual", make_residual},
      {"Dropout", make_dropout},
      {"DropPath", make_drop_path},
      {"Tokens", make_tokens},
      {"PositionEmbedding", make_position_embedding},
      {"ClassToken", make_class_token},
      {"TokenPool", make_token_pool},
      {"MultiheadAttention", make_multihead_attention},
      {"TransformerEncoderLayer", make_transformer_encoder_layer},
  };
  return table;
}

}  // namespace

void check_weight_size(const LayerArgs& args, const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) overflow = overflow || __builtin_mul_overflow(n, d, &n);
  MINIDL_CHECK(!overflow && n <= kMaxLayerParameters, args.where(), ": a weight of shape ", shape_str(shape),
               " has ", overflow ? std::string("more than 2^63") : std::to_string(n), " elements, more than the ",
               kMaxLayerParameters, " one layer may have");
}

std::vector<std::string> layer_types() {
  std::vector<std::string> out;
  for (const auto& kv : factories()) out.push_back(kv.first);
  return out;
}

std::shared_ptr<Module> build_layer(const nlohmann::json& spec, const std::string& path) {
  MINIDL_CHECK(spec.is_object(), path, ": a layer must be a JSON object like {\"type\": \"Conv2d\", ...}");
  MINIDL_CHECK(spec.contains("type") && spec["type"].is_string(), path, ".type: missing (a string naming the layer)");
  const std::string type = spec["type"].get<std::string>();
  auto it = factories().find(type);
  if (it == factories().end()) {
    std::string known;
    for (const auto& t : layer_types()) known += (known.empty() ? "" : ", ") + t;
    fail(str(path, ".type: unknown layer '", type, "' (known: ", known, ")"));
  }
  LayerArgs args(spec, path);
  args.get_string("type", type);
  try {
    std::shared_ptr<Module> m = it->second(args);
    args.finish();
    return m;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind(path, 0) == 0) throw;  // names the layer already
    fail(str(path, " (", type, "): ", what));
  }
}

}  // namespace minidl
