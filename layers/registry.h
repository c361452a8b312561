// Building modules from JSON. A layer spec is an object with "type" and the layer's own keys,
// named as in PyTorch ({"type": "Conv2d", "in_channels": 3, "out_channels": 64,
// "kernel_size": 3, "padding": 1, "bias": false}). LayerArgs hands out keys with defaults and
// type checks; finish() rejects any key the layer did not read, naming its full path
// ("model.layers[3].kernal_size").
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "layers/module.h"

namespace minidl {

class LayerArgs {
 public:
  LayerArgs(const nlohmann::json& spec, std::string path);

  int64_t get_int(const std::string& key);
  int64_t get_int(const std::string& key, int64_t fallback);
  double get_float(const std::string& key);
  double get_float(const std::string& key, double fallback);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key, const std::string& fallback);
  std::vector<int64_t> get_ints(const std::string& key);  // a number or a list of numbers
  const nlohmann::json& get_json(const std::string& key);
  bool has(const std::string& key) const;

  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const { return path_ + "." + key; }
  // Errors naming the first key nobody read.
  void finish() const;

 private:
  const nlohmann::json& at(const std::string& key);
  const nlohmann::json& spec_;
  std::string path_;
  std::set<std::string> used_;
};

// Builds one layer (and, for containers, its children) from its spec at `path`.
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

}  // namespace minidl
