// Building modules from JSON. A layer spec is an object with "type" and the layer's own keys,
// named as in PyTorch ({"type": "Conv2d", "in_channels": 3, "out_channels": 64,
// "kernel_size": 3, "padding": 1, "bias": false}), read with core/json_args.h: keys with defaults
// and type checks; finish() rejects any key the layer did not read, naming its full path
// ("model.layers[3].kernal_size"). Every layer type is one LayerDescriptor
// (layers/layer_descriptor.h) in the table registry.cpp holds.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layers/layer_descriptor.h"
#include "layers/module.h"

namespace minidl {

// Bounds the factories check before anything is allocated, so no size computed from a spec can
// overflow and a mistyped size fails at once, naming its key, instead of taking all memory.
constexpr int64_t kMaxFeatures = int64_t{1} << 31;        // channels or features of one layer
constexpr int64_t kMaxWindow = int64_t{1} << 16;           // kernel, stride and padding, in pixels
constexpr int64_t kMaxLayerParameters = int64_t{1} << 31;  // elements of one weight (8 GiB of fp32)
// Errors naming the layer when a weight of `shape` would hold more than kMaxLayerParameters.
void check_weight_size(const LayerArgs& args, const Shape& shape);

// Builds one layer (and, for containers, its children) from its spec at `path`. Any error while
// building it (an allocation too large, say) names `path`. The outermost call first checks that
// everything the spec holds fits in memory, on the host and, for a model to be moved to a GPU,
// on `device` (layers/model_memory.h): a model too large is refused, naming its largest layer,
// before anything is allocated.
std::shared_ptr<Module> build_layer(const nlohmann::json& spec, const std::string& path, Device device = Device::cpu());
// Builds each layer of a JSON list of layer specs at `path` ("model.layers" -> "model.layers[0]"),
// inside an outer build that checked the memory.
std::vector<std::shared_ptr<Module>> build_layers(const nlohmann::json& list, const std::string& path);
// Builds a Sequential from a JSON list of layer specs, with the same check.
std::shared_ptr<Module> build_sequential(const nlohmann::json& list, const std::string& path,
                                         Device device = Device::cpu());

// Every layer type, in the table's order.
const std::vector<const LayerDescriptor*>& layer_descriptors();
// The descriptor of `type` ("Conv2d"), or null when no layer has that name.
const LayerDescriptor* find_layer(const std::string& type);
// The type names build_layer knows, for error messages and docs.
std::vector<std::string> layer_types();
// The schema of every layer type, keyed by type name: {"Conv2d": {"family", "summary", "keys":
// [{"name", "type", "required", "default", "range", "doc"}] (fields_schema), "examples": [{"spec",
// "input"}], "autocast", "onnx"}, ...}. `minidl layers --json` prints it; docs/layers.json is a copy
// the tests compare.
nlohmann::json layer_schema();

}  // namespace minidl
