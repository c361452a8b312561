// The memory a model needs, computed from its config before anything is built. Linux overcommits:
// a model larger than memory is not refused when it is allocated but killed part-way through its
// initialization (or swaps the machine to a halt), so the whole model is checked first and the
// layer that makes it too large is named. build_layer and build_sequential (layers/registry.h)
// make this check themselves at their outermost call, so no command builds a model without it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"

namespace minidl {

struct LayerMemory {
  std::string path;         // "model.layers[3]"
  std::string description;  // "Linear 65536->32768"
  int64_t bytes = 0;        // its parameters and buffers
  int64_t largest_tensor_bytes = 0;
};

struct ModelMemory {
  std::vector<LayerMemory> layers;  // the layers holding tensors, in build order
  int64_t state_bytes = 0;          // every parameter and buffer
  // The most the host holds while the model is built: every tensor stays, and initializing one
  // holds two more copies of it for a moment (the values drawn, then the tensor they are copied
  // from), so the largest tensor counts three times.
  int64_t host_peak_bytes = 0;
  // The layer with the most bytes (null for a model without tensors).
  const LayerMemory* largest() const;
};

// Reads the layer specs at `path` ("model.layers") as building them would, checking the same keys
// with the same messages, without allocating.
ModelMemory estimate_model_memory(const nlohmann::json& layers, const std::string& path);

// Errors when building `memory` on the host (then moving it to `device`) does not fit in the bytes
// available ("model.layers[3] (Linear 65536->32768): 8.6 GB of parameters and buffers; the model
// needs about 25.8 GB of host memory, 16.0 GB available"). An availability of 0 means unknown.
void check_model_memory(const ModelMemory& memory, Device device, uint64_t host_available, uint64_t device_available);

// The two together, with the memory available now: what the builders call before building.
void check_model_fits(const nlohmann::json& layers, const std::string& path, Device device);
// The same for one layer spec (and the layers it holds).
void check_layer_fits(const nlohmann::json& spec, const std::string& path, Device device);

// True for the outermost of nested build_layer / build_sequential calls on this thread (the one
// that checks the whole spec), false for the containers' calls for their children.
class OutermostBuild {
 public:
  OutermostBuild();
  ~OutermostBuild();
  OutermostBuild(const OutermostBuild&) = delete;
  OutermostBuild& operator=(const OutermostBuild&) = delete;
  explicit operator bool() const { return outermost_; }

 private:
  bool outermost_;
};

}  // namespace minidl
