// ONNX export from C++: every example of every exportable layer type is written as a model of its
// own with its output, the graph's interface and initializers (parsed back with the same ONNX
// classes), and the refusals. The numbers themselves are checked by tests/onnx_export_test.sh
// (checker and a numpy evaluator against minidl's logits and the examples' outputs).
#include <functional>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "export/onnx_examples.h"
#include "export/onnx_export.h"
#include "layers/containers/sequential.h"
#include "layers/registry.h"
#include "onnx/onnx.pb.h"
#include "train/config.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A module no descriptor knows: what export does with a layer type it has no emitter for.
class Unregistered : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Unregistered"; }
  json to_json() const override { return {{"type", "Unregistered"}}; }
};

// Every config and ONNX test model but the language models and the volume models: Embedding and
// LMHead have no ONNX export (docs/transformer.md), nor do the 3-d convolutions (docs/volumes.md).
std::vector<std::string> exported_configs() {
  std::vector<std::string> out;
  for (const char* dir : {"/tests/onnx", "/configs"})
    for (const auto& e : fs::directory_iterator(std::string(MINIDL_SOURCE_DIR) + dir)) {
      if (e.path().extension() != ".json") continue;
      const json config = read_json_file(e.path().string());
      const std::string format = config.contains("data") ? config["data"].value("format", "") : "";
      if (format == "tokens" || format == "volumes") continue;
      out.push_back(e.path().string());
    }
  return out;
}

std::shared_ptr<Module> model_of(const std::string& config) {
  auto m = build_sequential(read_json_file(config).at("model").at("layers"), "model.layers");
  m->assign_paths();
  return m;
}

}  // namespace

TEST_CASE("onnx: export --examples writes every example of every exportable layer type, with its output", "[onnx]") {
  // The onnx_export ctest evaluates each of these files against the output beside it.
  test::TempDir dir("onnx_examples");
  const std::vector<std::string> stems = export_layer_examples(dir.path.string());
  const std::set<std::string> written(stems.begin(), stems.end());
  REQUIRE(written.size() == stems.size());
  size_t expected = 0;
  for (const LayerDescriptor* layer : layer_descriptors()) {
    if (!layer->onnx) continue;
    const std::vector<LayerExample> examples = layer_examples(*layer);
    for (size_t i = 0; i < examples.size(); ++i) {
      const std::string stem = layer->name + "_" + std::to_string(i);
      INFO(stem);
      if (!examples[i].onnx) {
        REQUIRE(written.count(stem) == 0);
        std::shared_ptr<Module> m = build_layer(examples[i].spec, layer->name);
        m->assign_paths();
        REQUIRE_THROWS_WITH(onnx_model_bytes(*m, {}), Catch::Contains("has no ONNX export"));
        continue;
      }
      ++expected;
      REQUIRE(written.count(stem) == 1);
      const SafeTensors ref = load_safetensors(dir.file(stem + ".safetensors"));
      REQUIRE(ref.tensors.size() == 2);
      REQUIRE(ref.tensors[0].second.shape() == examples[i].input);
      const Shape& out = ref.tensors[1].second.shape();
      onnx::ModelProto proto;
      REQUIRE(proto.ParseFromString(read_file_limited(dir.file(stem + ".onnx"), "ONNX file", size_t(1) << 26)));
      const onnx::GraphProto& g = proto.graph();
      REQUIRE(g.output(0).name() == "output");
      const auto& in_shape = g.input(0).type().tensor_type().shape();
      const auto& out_shape = g.output(0).type().tensor_type().shape();
      REQUIRE(in_shape.dim_size() == static_cast<int>(examples[i].input.size()));
      REQUIRE(out_shape.dim_size() == static_cast<int>(out.size()));
      REQUIRE(in_shape.dim(0).dim_param() == "batch");
      for (size_t d = 1; d < examples[i].input.size(); ++d)
        REQUIRE(in_shape.dim(static_cast<int>(d)).dim_value() == examples[i].input[d]);
      for (size_t d = 1; d < out.size(); ++d) REQUIRE(out_shape.dim(static_cast<int>(d)).dim_value() == out[d]);
    }
  }
  REQUIRE(stems.size() == expected);
}

TEST_CASE("onnx: export has an emitter for exactly the layer types whose descriptor says onnx", "[onnx][registry]") {
  std::set<const LayerDescriptor*> emitted;
  for (const LayerDescriptor* layer : onnx_exported_layers()) {
    INFO("emitter for a layer not in the registry's table: " << layer->name);
    REQUIRE(find_layer(layer->name) == layer);
    emitted.insert(layer);
  }
  for (const LayerDescriptor* layer : layer_descriptors()) {
    INFO("layer type " << layer->name << ": add its emitter to export/onnx_export.cpp, or set onnx = false in its "
                          "descriptor (export then refuses it, naming the layer)");
    REQUIRE(emitted.count(layer) == (layer->onnx ? 1u : 0u));
  }
  auto model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{std::make_shared<Unregistered>()});
  model->assign_paths();
  REQUIRE_THROWS_WITH(onnx_model_bytes(*model, {}), Catch::Contains("layer type 'Unregistered' has no ONNX export"));
}

TEST_CASE("onnx: the graph's interface, opset and initializers", "[onnx]") {
  for (const std::string& config : exported_configs()) {
    INFO(config);
    std::shared_ptr<Module> model = model_of(config);
    onnx::ModelProto proto;
    REQUIRE(proto.ParseFromString(onnx_model_bytes(*model, {})));
    REQUIRE(proto.ir_version() == 8);
    REQUIRE(proto.opset_import_size() == 1);
    REQUIRE(proto.opset_import(0).version() == 17);
    const onnx::GraphProto& g = proto.graph();
    REQUIRE(g.input_size() == 1);
    REQUIRE(g.input(0).name() == "input");
    const auto& in_shape = g.input(0).type().tensor_type().shape();
    REQUIRE(in_shape.dim(0).dim_param() == "batch");
    REQUIRE(in_shape.dim(1).dim_value() == 3);
    REQUIRE(g.output_size() == 1);
    REQUIRE(g.output(0).name() == "logits");
    // The logits are as wide as the head's out_features (10 classes, 100 for CIFAR-100).
    int64_t classes = 0;
    std::function<void(const nlohmann::json&)> last_out_features = [&](const nlohmann::json& j) {
      if (j.is_object() && j.contains("out_features")) classes = j.at("out_features").get<int64_t>();
      if (j.is_structured())
        for (const auto& child : j) last_out_features(child);
    };
    last_out_features(read_json_file(config).at("model"));
    REQUIRE(g.output(0).type().tensor_type().shape().dim(1).dim_value() == classes);
    REQUIRE(g.node(g.node_size() - 1).output(0) == "logits");
    // Every state_dict tensor is an initializer under its PyTorch name, with its values.
    std::map<std::string, const onnx::TensorProto*> inits;
    for (const auto& t : g.initializer()) inits[t.name()] = &t;
    for (const auto& [name, tensor] : model->state_dict()) {
      INFO(name);
      REQUIRE(inits.count(name) == 1);
      const std::string& raw = inits[name]->raw_data();
      REQUIRE(raw.size() == tensor.nbytes());
      const std::vector<float> v = tensor.to_vector();
      REQUIRE(std::memcmp(raw.data(), v.data(), raw.size()) == 0);
    }
    // Nodes use only values defined before them (ONNX wants topological order).
    std::set<std::string> defined = {"input"};
    for (const auto& t : g.initializer()) defined.insert(t.name());
    for (const auto& n : g.node()) {
      for (const auto& i : n.input()) REQUIRE(defined.count(i) == 1);
      for (const auto& o : n.output()) REQUIRE(defined.insert(o).second);
    }
  }
}

TEST_CASE("onnx: what cannot export is refused, naming the layer", "[onnx]") {
  auto flatten = build_sequential(json::parse(R"([
      {"type": "Conv2d", "in_channels": 3, "out_channels": 2, "kernel_size": 1},
      {"type": "Flatten", "start_dim": 2}])"), "model.layers");
  flatten->assign_paths();
  REQUIRE_THROWS_WITH(onnx_model_bytes(*flatten, {}),
                      Catch::Contains("Flatten at '1': Flatten(start_dim=2, end_dim=-1) has no ONNX export"));
  auto maps = build_sequential(json::parse(R"([{"type": "Conv2d", "in_channels": 3, "out_channels": 2, "kernel_size": 1}])"),
                               "model.layers");
  maps->assign_paths();
  REQUIRE_THROWS_WITH(onnx_model_bytes(*maps, {}), Catch::Contains("expects (batch, classes) logits"));
  test::TempDir dir("onnx");
  std::shared_ptr<Module> good = model_of(std::string(MINIDL_SOURCE_DIR) + "/tests/onnx/all_layers_a.json");
  REQUIRE_THROWS_WITH(export_onnx(*good, dir.file("no/such/dir/m.onnx"), {}),
                      Catch::Contains("cannot write ONNX file") && Catch::Contains("m.onnx"));
}

TEST_CASE("onnx: Conv carries group and dilations where they are not 1", "[onnx][grouped]") {
  std::shared_ptr<Module> model = model_of(std::string(MINIDL_SOURCE_DIR) + "/tests/onnx/grouped_conv.json");
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(onnx_model_bytes(*model, {})));
  std::vector<std::map<std::string, std::vector<int64_t>>> convs;
  for (const onnx::NodeProto& n : proto.graph().node()) {
    if (n.op_type() != "Conv") continue;
    std::map<std::string, std::vector<int64_t>> attrs;
    for (const onnx::AttributeProto& a : n.attribute())
      attrs[a.name()] = a.type() == onnx::AttributeProto::INT ? std::vector<int64_t>{a.i()}
                                                              : std::vector<int64_t>(a.ints().begin(), a.ints().end());
    convs.push_back(attrs);
  }
  REQUIRE(convs.size() == 4);
  CHECK(convs[0].count("group") == 0);
  CHECK(convs[0].count("dilations") == 0);
  CHECK(convs[1]["group"] == std::vector<int64_t>{8});  // depthwise
  CHECK(convs[1].count("dilations") == 0);
  CHECK(convs[3]["group"] == std::vector<int64_t>{4});
  CHECK(convs[3]["dilations"] == std::vector<int64_t>{2, 2});
  CHECK(convs[3]["kernel_shape"] == std::vector<int64_t>{3, 5});
}
