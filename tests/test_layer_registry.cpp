// The layer table (layers/layer_descriptor.h, layers/registry.cpp): every descriptor's example
// builds and runs, the module it builds answers with that descriptor, its config round-trips
// (to_json -> build -> to_json, same output), its declared keys are the keys its factory reads
// with the defaults it uses, and docs/layers.json (which the PyTorch builders in scripts/ read)
// is the schema the library prints.
#include <set>

#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/registry.h"
#include "op_harness.h"
#include "train/config.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

json example_spec(const LayerDescriptor& layer) {
  json spec = layer.example;
  spec["type"] = layer.name;
  return spec;
}

// A value of a key's declared type, for keys whose default depends on other keys.
json value_of_type(const std::string& type) {
  if (type == "bool") return true;
  if (type == "int" || type == "ints") return 1;
  if (type == "float") return 0.5;
  if (type == "layers") return json::array({{{"type", "ReLU"}}});
  FAIL("no sample value for key type '" << type << "'");
  return nullptr;
}

}  // namespace

TEST_CASE("layer table: names are unique, found by name, and every key has a known type", "[registry]") {
  std::set<std::string> names;
  for (const LayerDescriptor* layer : layer_descriptors()) {
    INFO(layer->name);
    REQUIRE(names.insert(layer->name).second);
    REQUIRE(find_layer(layer->name) == layer);
    REQUIRE(layer->make != nullptr);
    REQUIRE(!layer->family.empty());
    REQUIRE(!layer->summary.empty());
    for (const FieldInfo& k : layer->fields) {
      INFO(k.name);
      REQUIRE(std::set<std::string>{"int", "float", "bool", "string", "ints", "layers"}.count(k.type) == 1);
      REQUIRE(!k.doc.empty());
      REQUIRE(!(k.required && !k.default_value.is_null()));
      // A number or a choice says what it may be (Flatten's dims, counted from either end, are any).
      if (k.type == "float" || k.type == "string" || (k.type == "int" && layer->name != "Flatten"))
        REQUIRE(!k.range.empty());
    }
  }
  REQUIRE(find_layer("Conv4d") == nullptr);
  REQUIRE(layer_types().size() == layer_descriptors().size());
}

TEST_CASE("layer table: each example builds, runs, and round-trips to_json -> build -> to_json", "[registry]") {
  for (const LayerDescriptor* layer : layer_descriptors()) {
    for (const LayerExample& e : layer_examples(*layer)) {
      INFO(e.spec.dump());
      REQUIRE(!e.input.empty());
      std::shared_ptr<Module> a = build_layer(e.spec, "example");
      REQUIRE(a->descriptor() == layer);
      REQUIRE(a->type_name() == layer->name);
      const json printed = a->to_json();
      REQUIRE(printed.at("type") == layer->name);
      std::shared_ptr<Module> b = build_layer(printed, "printed");
      REQUIRE(b->to_json() == printed);
      // Same state, same input: the rebuilt layer computes the same values (after the layers it
      // needs before it in its list, if any).
      a = test::example_module(e, e.spec);
      b = test::example_module(e, printed);
      b->load_state_dict(a->state_dict());
      const Tensor x = test::example_input(e, 3);
      autograd::NoGradGuard no_grad;
      REQUIRE(b->operator()(x).to_vector() == a->operator()(x).to_vector());
    }
  }
}

TEST_CASE("layer table: the declared keys are the factory's, with its defaults", "[registry]") {
  for (const LayerDescriptor* layer : layer_descriptors()) {
    INFO(layer->name);
    std::set<std::string> declared;
    for (const FieldInfo& k : layer->fields) declared.insert(k.name);
    // Every key the layer prints back is declared.
    const json printed_back = build_layer(example_spec(*layer), "x")->to_json();
    for (const auto& [key, value] : printed_back.items()) {
      INFO("printed key " << key);
      REQUIRE((key == "type" || declared.count(key) == 1));
    }
    for (const FieldInfo& k : layer->fields) {
      INFO("key " << k.name);
      json without = example_spec(*layer);
      without.erase(k.name);
      if (k.required) {
        REQUIRE_THROWS_WITH(build_layer(without, "x"), Catch::Contains("x." + k.name));
      } else if (!k.default_value.is_null()) {
        // Absent, it takes the default; given as the default, the factory reads it.
        const json printed = build_layer(without, "x")->to_json();
        if (printed.contains(k.name)) REQUIRE(printed[k.name] == k.default_value);
        json given = without;
        given[k.name] = k.default_value;
        REQUIRE(build_layer(given, "x")->to_json() == printed);
      } else {
        json given = without;
        given[k.name] = value_of_type(k.type);
        REQUIRE_NOTHROW(build_layer(given, "x"));
      }
    }
    json unknown = example_spec(*layer);
    unknown["no_such_key"] = 1;
    REQUIRE_THROWS_WITH(build_layer(unknown, "x"), Catch::Contains("x.no_such_key: unknown key"));
  }
}

TEST_CASE("layer table: docs/layers.json is the schema the library prints", "[registry]") {
  const json schema = layer_schema();
  REQUIRE(schema.size() == layer_descriptors().size());
  for (const LayerDescriptor* layer : layer_descriptors()) {
    INFO(layer->name);
    const json& examples = schema.at(layer->name).at("examples");
    REQUIRE(examples.size() == 1 + layer->more_examples.size());
    REQUIRE(examples.at(0).at("spec") == example_spec(*layer));
    REQUIRE(examples.at(0).at("input") == layer->example_input);
    REQUIRE(schema.at(layer->name).at("keys").size() == layer->fields.size());
  }
  INFO("docs/layers.json is out of date: build/minidl layers --json > docs/layers.json");
  REQUIRE(read_json_file(std::string(MINIDL_SOURCE_DIR) + "/docs/layers.json") == schema);
}
