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
  };
  return table;
}

const char* json_type(const nlohmann::json& j) { return j.type_name(); }

}  // namespace

LayerArgs::LayerArgs(const nlohmann::json& spec, std::string path) : spec_(spec), path_(std::move(path)) {
  MINIDL_CHECK(spec_.is_object(), path_, ": a layer must be a JSON object, got ", json_type(spec_));
  used_.insert("type");
}

bool LayerArgs::has(const std::string& key) const { return spec_.contains(key); }

const nlohmann::json& LayerArgs::at(const std::string& key) {
  used_.insert(key);
  MINIDL_CHECK(spec_.contains(key), key_path(key), ": required key is missing");
  return spec_.at(key);
}

int64_t LayerArgs::get_int(const std::string& key) {
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_number_integer(), key_path(key), ": expected an integer, got ", json_type(v));
  return v.get<int64_t>();
}

int64_t LayerArgs::get_int(const std::string& key, int64_t fallback) {
  used_.insert(key);
  return has(key) ? get_int(key) : fallback;
}

double LayerArgs::get_float(const std::string& key) {
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_number(), key_path(key), ": expected a number, got ", json_type(v));
  return v.get<double>();
}

double LayerArgs::get_float(const std::string& key, double fallback) {
  used_.insert(key);
  return has(key) ? get_float(key) : fallback;
}

bool LayerArgs::get_bool(const std::string& key, bool fallback) {
  used_.insert(key);
  if (!has(key)) return fallback;
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_boolean(), key_path(key), ": expected true or false, got ", json_type(v));
  return v.get<bool>();
}

std::string LayerArgs::get_string(const std::string& key, const std::string& fallback) {
  used_.insert(key);
  if (!has(key)) return fallback;
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_string(), key_path(key), ": expected a string, got ", json_type(v));
  return v.get<std::string>();
}

std::vector<int64_t> LayerArgs::get_ints(const std::string& key) {
  const nlohmann::json& v = at(key);
  if (v.is_number_integer()) return {v.get<int64_t>()};
  MINIDL_CHECK(v.is_array() && !v.empty(), key_path(key), ": expected an integer or a list of integers, got ",
               json_type(v));
  std::vector<int64_t> out;
  for (const auto& e : v) {
    MINIDL_CHECK(e.is_number_integer(), key_path(key), ": expected integers in the list, got ", json_type(e));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

const nlohmann::json& LayerArgs::get_json(const std::string& key) { return at(key); }

void LayerArgs::finish() const {
  for (const auto& kv : spec_.items()) {
    if (used_.count(kv.key())) continue;
    std::string known;
    for (const auto& k : used_) known += (known.empty() ? "" : ", ") + k;
    fail(str(key_path(kv.key()), ": unknown key (known: ", known, ")"));
  }
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
  std::shared_ptr<Module> m = it->second(args);
  args.finish();
  return m;
}

}  // namespace minidl
