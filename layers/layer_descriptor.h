// A layer type declared once: its name, its family, its keys (the rows of its spec's fields,
// core/fields.h: type, default, range, meaning), its factory, a small example spec, how autocast
// runs it, whether it exports to ONNX, and what it allocates. The registry
// (layers/registry.cpp) holds the one table of descriptors; building from JSON, the schema
// (`minidl layers --json`, docs/layers.json, read by the PyTorch builders in scripts/), the
// trainer's choice of batch type, the memory check and the ONNX exporter's completeness check
// all read it. Each descriptor lives in its layer's .cpp beside the module; the header of the
// layer declares its getter (`conv2d_layer()`).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fields.h"
#include "core/json_args.h"
#include "layers/module.h"

namespace minidl {

// Layer factories read their spec with the core JSON reader.
using LayerArgs = JsonArgs;

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

// A spec (with its "type") and an input shape it takes.
struct LayerExample {
  nlohmann::json spec;
  Shape input;
  // False for a spec that the layer's ONNX emitter refuses (ONNX has no operator for it): the ONNX
  // checks skip it and tests/test_onnx_export.cpp checks that export refuses it.
  bool onnx = true;
  // The descriptor's ids_below and example_before (layer_examples fills them in).
  int64_t ids_below = 0;
  std::vector<nlohmann::json> before = {};
};

struct LayerDescriptor {
  std::string name;     // the spec's "type" and the module's type_name(): "Conv2d"
  std::string family;   // its folder under layers/: "conv", "norm", "containers", ...
  std::string summary;  // one line for `minidl layers`
  // The spec's keys: name, type ("int", "float", "bool", "string", "ints": an int or a list of
  // ints as PyTorch's int-or-tuple arguments, "layers": a list of layer specs), required or
  // default, range, meaning. layer_fields<Foo>() (layers/layer.h).
  std::vector<FieldInfo> fields;
  std::shared_ptr<Module> (*make)(LayerArgs& args);  // reads the spec, finish()es, builds: make_layer<Foo>
  // A small valid spec (without "type") and an input shape it takes: the tests build it, run it,
  // round-trip its config and export it; the op harness, the parity script and the ONNX check run
  // it (with `more_examples`).
  nlohmann::json example;
  Shape example_input;
  AutocastRule autocast = AutocastRule::InputType;
  // True: export/onnx_export.cpp has an emitter for it (a test checks both directions). False:
  // export refuses the layer with a message naming it.
  bool onnx = true;
  // Reads and checks the spec as `make` does and returns what the layer would allocate. Null: the
  // layer holds no tensors of its own (the children of its "layers" keys are counted on their own).
  LayerState (*state)(LayerArgs& args) = nullptr;
  // Examples beyond `example` (specs without "type"), for the paths it does not reach: a strided
  // Conv2d without bias, a fused activation, another mode. Every reader of `example` runs these
  // too: the op harness (tests/test_op_harness.cpp: CPU against finite differences, CUDA against
  // the CPU in every dtype and layout, graphed against eager), the PyTorch parity script and the
  // ONNX check.
  std::vector<LayerExample> more_examples = {};
  // A layer that takes int32 token ids (Embedding, and an LMHead behind its Embedding): its
  // examples' inputs are ids in [0, ids_below). 0: floating activations.
  int64_t ids_below = 0;
  // Layers its examples need before them in one list (LMHead: the Embedding it is tied to): the
  // readers build them and the example as one Sequential and feed it the example's input.
  std::vector<nlohmann::json> example_before = {};
};

// `example` then `more_examples`, each spec with its "type".
std::vector<LayerExample> layer_examples(const LayerDescriptor& layer);

}  // namespace minidl
