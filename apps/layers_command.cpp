// `minidl layers`: every layer type a config's model can use, with its keys (type, default,
// meaning); `--json` prints the same as JSON (layers/registry.h's layer_schema(), of which
// docs/layers.json is a copy), which the PyTorch builders in scripts/ read.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "layers/registry.h"

namespace minidl {

namespace {

int layers_command(bool json) {
  if (json) {
    std::cout << layer_schema().dump(2) << "\n";
    return 0;
  }
  for (const LayerDescriptor* layer : layer_descriptors()) {
    std::cout << layer->name << " (layers/" << layer->family << "/): " << layer->summary << "\n";
    size_t width = 0;
    for (const FieldInfo& k : layer->fields) width = std::max(width, k.name.size());
    for (const FieldInfo& k : layer->fields) {
      const std::string value = k.required ? "required" : k.default_value.is_null() ? "derived" : k.default_value.dump();
      std::cout << "  " << k.name << std::string(width - k.name.size() + 2, ' ') << k.type
                << std::string(k.type.size() < 8 ? 8 - k.type.size() : 1, ' ') << value
                << std::string(value.size() < 10 ? 10 - value.size() : 1, ' ') << k.doc
                << (k.range.empty() ? "" : " (" + k.range + ")") << "\n";
    }
  }
  return 0;
}

}  // namespace

Command add_layers_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("layers", "list the layer types a config's model can use, with their keys");
  cmd->add_flag("--json", *json, "print the schema as JSON (what docs/layers.json holds)");
  return {cmd, [json] { return layers_command(*json); }};
}

}  // namespace minidl
