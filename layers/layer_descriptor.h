// A layer type declared once: its name, its keys (type, default, meaning), its factory, a small
// example spec, how autocast runs it, and whether it exports to ONNX. The
// registry (layers/registry.cpp) holds the one table of descriptors; building from JSON, the
// schema (`minidl layers --json`, docs/layers.json, read by the PyTorch builders in scripts/),
// the trainer's choice of batch type and the ONNX exporter's completeness check all read it.
// Each descriptor lives in its layer's .cpp beside the factory; the header of the layer declares
// its getter (`conv2d_layer()`).
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

// One key of a layer spec. `type` is one of: "int", "float", "bool", "string", "ints" (an int or a
// list of ints, as PyTorch's int-or-tuple arguments), "layers" (a list of layer specs). A key is
// required, or has a fixed default, or (default null, not required) a default computed from
// other keys that `doc` names.
struct LayerKey {
  std::string name;
  std::string type;
  bool required = false;
  nlohmann::json default_value;
  std::string doc;
};
LayerKey required_key(std::string name, std::string type, std::string doc);
LayerKey default_key(std::string name, std::string type, nlohmann::json default_value, std::string doc);
LayerKey derived_key(std::string name, std::string type, std::string doc);

// What the layer computes in under autocast (core/autocast.h): the half type (its input is cast,
// as Conv2d and Linear), float32 (GroupNorm, LayerNorm), or the type of its input.
enum class AutocastRule { LowerPrecision, Float32, InputType };
const char* autocast_rule_name(AutocastRule rule);

// The float32 parameters and buffers one layer allocates when it is built, read from its spec
// without building it: layers/model_memory.h adds them up before a model is built.
struct LayerState {
  int64_t elements = 0;        // all of its tensors (children it builds itself, as an encoder layer's, included)
  int64_t largest_tensor = 0;  // the largest of them (initializing one holds two more copies of it for a moment)
  std::string description;     // "Linear 65536->32768"
};

struct LayerDescriptor {
  std::string name;     // the spec's "type" and the module's type_name(): "Conv2d"
  std::string family;   // its folder under layers/: "conv", "norm", "containers", ...
  std::string summary;  // one line for `minidl layers`
  std::vector<LayerKey> keys;
  std::shared_ptr<Module> (*make)(LayerArgs& args);  // reads the keys, finish()es, builds
  // A small valid spec (without "type") and an input shape it takes: the tests build it, run it,
  // round-trip its config and export it; the parity script uses it where it has no case of its own.
  nlohmann::json example;
  Shape example_input;
  AutocastRule autocast = AutocastRule::InputType;
  // True: export/onnx_export.cpp has an emitter for it (a test checks both directions). False:
  // export refuses the layer with a message naming it.
  bool onnx = true;
  // Reads and checks the spec as `make` does and returns what the layer would allocate. Null: the
  // layer holds no tensors of its own (the children of its "layers" keys are counted on their own).
  LayerState (*state)(LayerArgs& args) = nullptr;
};

}  // namespace minidl
