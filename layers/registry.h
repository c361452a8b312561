// Building modules from JSON. A layer spec is an object with "type" and the layer's own keys,
// named as in PyTorch ({"type": "Conv2d", "in_channels": 3, "out_channels": 64,
// "kernel_size": 3, "padding": 1, "bias": false}), read with core/json_args.h: keys with defaults
// and type checks; finish() rejects any key the layer did not read, naming its full path
// ("model.layers[3].kernal_size").
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_args.h"
#include "layers/module.h"

namespace minidl {

// Layer factories read their spec with the core JSON reader.
using LayerArgs = JsonArgs;

// Bounds the factories check before anything is allocated, so no size computed from a spec can
// overflow and a mistyped size fails at once, naming its key, instead of taking all memory.
constexpr int64_t kMaxFeatures = int64_t{1} << 31;        // channels or features of one layer
constexpr int64_t kMaxWindow = int64_t{1} << 16;           // kernel, stride and padding, in pixels
constexpr int64_t kMaxLayerParameters = int64_t{1} << 31;  // elements of one weight (8 GiB of fp32)
// Errors naming the layer when a weight of `shape` would hold more than kMaxLayerParameters.
void check_weight_size(const LayerArgs& args, const Shape& shape);

// Builds one layer (and, for containers, its children) from its spec at `path`. Any error while
// building it (an allocation too large, say) names `path`.
std::shared_ptr<Module> build_layer(const nlohmann::json& spec, const std::string& path);
// Builds a Sequential from a JSON list of layer specs.
std::shared_ptr<Module> build_sequential(const nlohmann::json& list, const std::string& path);
// The type names build_layer knows, for error messages and docs.
std::vector<std::string> layer_types();

// Factories, one per layer type; each lives beside its layer.
std::shared_ptr<Module> make_conv2d(LayerArgs& args);
std::shared_ptr<Module> make_linear(LayerArgs& args);
std::shared_ptr<Module> make_batchnorm2d(LayerArgs& args);
std::shared_ptr<Module> make_groupnorm(LayerArgs& args);
std::shared_ptr<Module> make_layernorm(LayerArgs& args);
std::shared_ptr<Module> make_relu(LayerArgs& args);
std::shared_ptr<Module> make_gelu(LayerArgs& args);
std::shared_ptr<Module> make_maxpool2d(LayerArgs& args);
std::shared_ptr<Module> make_global_avg_pool2d(LayerArgs& args);
std::shared_ptr<Module> make_global_max_pool2d(LayerArgs& args);
std::shared_ptr<Module> make_flatten(LayerArgs& args);
std::shared_ptr<Module> make_scale(LayerArgs& args);
std::shared_ptr<Module> make_sequential(LayerArgs& args);
std::shared_ptr<Module> make_residual(LayerArgs& args);
std::shared_ptr<Module> make_dropout(LayerArgs& args);
std::shared_ptr<Module> make_drop_path(LayerArgs& args);
std::shared_ptr<Module> make_tokens(LayerArgs& args);
std::shared_ptr<Module> make_position_embedding(LayerArgs& args);
std::shared_ptr<Module> make_class_token(LayerArgs& args);
std::shared_ptr<Module> make_token_pool(LayerArgs& args);
std::shared_ptr<Module> make_multihead_attention(LayerArgs& args);
std::shared_ptr<Module> make_transformer_encoder_layer(LayerArgs& args);

}  // namespace minidl
