#include "layers/model_memory.h"

#include <algorithm>
#include <cstdio>

#include "core/allocator.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "layers/registry.h"

namespace minidl {

namespace {

constexpr int64_t kFloatBytes = 4;  // parameters and buffers are built as float32

std::string gb(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", static_cast<double>(bytes) / 1e9);
  return text;
}

void add_layers(const nlohmann::json& list, const std::string& path, ModelMemory& out);

// One layer spec: its own tensors (from its descriptor), then the layer lists it holds. Errors are
// prefixed with the layer as build_layer prefixes them.
void add_layer(const nlohmann::json& spec, const std::string& path, ModelMemory& out) {
  MINIDL_CHECK(spec.is_object(), path, ": a layer must be a JSON object like {\"type\": \"Conv2d\", ...}");
  MINIDL_CHECK(spec.contains("type") && spec["type"].is_string(), path, ".type: missing (a string naming the layer)");
  const std::string type = spec["type"].get<std::string>();
  const LayerDescriptor* layer = find_layer(type);
  if (!layer) return;  // build_layer names the unknown type, with the known ones
  if (layer->state) {
    LayerState state;
    try {
      LayerArgs args(spec, path);
      args.get_string("type", type);
      state = layer->state(args);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.rfind(path, 0) == 0) throw;
      fail(str(path, " (", type, "): ", what));
    }
    LayerMemory m{path, state.description, checked_mul(state.elements, kFloatBytes, "layer bytes"),
                  checked_mul(state.largest_tensor, kFloatBytes, "layer bytes")};
    out.state_bytes = checked_add(out.state_bytes, m.bytes, "model bytes");
    out.layers.push_back(std::move(m));
  }
  for (const FieldInfo& key : layer->fields)
    if (key.type == "layers" && spec.contains(key.name)) add_layers(spec[key.name], path + "." + key.name, out);
}

void add_layers(const nlohmann::json& list, const std::string& path, ModelMemory& out) {
  if (!list.is_array()) return;  // build_sequential says what it expected
  for (size_t i = 0; i < list.size(); ++i) add_layer(list[i], str(path, "[", i, "]"), out);
}

// The host peak: every tensor, plus two more copies of the largest while it is initialized.
void finish_estimate(ModelMemory& out) {
  int64_t largest_tensor = 0;
  for (const LayerMemory& m : out.layers) largest_tensor = std::max(largest_tensor, m.largest_tensor_bytes);
  out.host_peak_bytes = checked_add(out.state_bytes, checked_mul(2, largest_tensor, "model bytes"), "model bytes");
}

}  // namespace

const LayerMemory* ModelMemory::largest() const {
  auto it = std::max_element(layers.begin(), layers.end(),
                             [](const LayerMemory& a, const LayerMemory& b) { return a.bytes < b.bytes; });
  return it == layers.end() ? nullptr : &*it;
}

ModelMemory estimate_model_memory(const nlohmann::json& layers, const std::string& path) {
  ModelMemory out;
  add_layers(layers, path, out);
  finish_estimate(out);
  return out;
}

void check_model_memory(const ModelMemory& memory, Device device, uint64_t host_available, uint64_t device_available) {
  const LayerMemory* largest = memory.largest();
  if (largest == nullptr) return;
  const auto refuse = [&](uint64_t needed, const char* where, uint64_t available) {
    fail(str(largest->path, " (", largest->description, "): ", gb(largest->bytes),
             " of parameters and buffers; the model needs about ", gb(needed), " of ", where, " memory, ",
             gb(available), " available"));
  };
  const uint64_t host_needed = static_cast<uint64_t>(memory.host_peak_bytes);
  if (host_available > 0 && host_needed > host_available) refuse(host_needed, "host", host_available);
  const uint64_t device_needed = static_cast<uint64_t>(memory.state_bytes);
  if (device.is_cuda() && device_available > 0 && device_needed > device_available)
    refuse(device_needed, "device", device_available);
}

namespace {
thread_local int build_depth = 0;

void check_fits(const ModelMemory& memory, Device device) {
  if (memory.largest() == nullptr) return;
  check_model_memory(memory, device, available_host_bytes(), device.is_cuda() ? available_device_bytes() : 0);
}
}  // namespace

void check_model_fits(const nlohmann::json& layers, const std::string& path, Device device) {
  check_fits(estimate_model_memory(layers, path), device);
}

void check_layer_fits(const nlohmann::json& spec, const std::string& path, Device device) {
  ModelMemory memory;
  add_layer(spec, path, memory);
  finish_estimate(memory);
  check_fits(memory, device);
}

OutermostBuild::OutermostBuild() : outermost_(build_depth++ == 0) {}
OutermostBuild::~OutermostBuild() { --build_depth; }

}  // namespace minidl
