#include "export/onnx_examples.h"

#include <filesystem>

#include "core/autograd.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/safetensors.h"
#include "export/onnx_export.h"
#include "layers/registry.h"

namespace minidl {

namespace {

// Values in [lo, hi) from the examples' stream, `ordinal` numbering the tensors of one file.
Tensor drawn(const Shape& shape, uint64_t ordinal, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * uniform01(philox(ordinal, kStreamExamples, i).v[0]);
  return Tensor::from_vector(v, shape);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<std::string> export_layer_examples(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MINIDL_CHECK(!ec && std::filesystem::is_directory(dir), "export --examples ", dir, ": cannot create the folder (",
               ec.message(), ")");
  std::vector<std::string> stems;
  for (const LayerDescriptor* layer : layer_descriptors()) {
    if (!layer->onnx) continue;
    const std::vector<LayerExample> examples = layer_examples(*layer);
    for (size_t i = 0; i < examples.size(); ++i) {
      if (!examples[i].onnx) continue;
      std::shared_ptr<Module> m = build_layer(examples[i].spec, layer->name);
      m->assign_paths();
      uint64_t ordinal = 0;
      for (auto& [name, t] : m->state_dict())
        if (t.dtype() == DType::Float32) {
          const bool variance = ends_with(name, "running_var");
          t.copy_(drawn(t.shape(), ++ordinal, variance ? 0.5f : -1.f, variance ? 1.5f : 1.f));
        }
      const Tensor x = drawn(examples[i].input, 0, -1.f, 1.f);
      m->eval();
      Tensor y;
      {
        autograd::NoGradGuard no_grad;
        y = (*m)(x);
      }
      OnnxExportOptions options;
      options.sample.assign(x.shape().begin() + 1, x.shape().end());
      options.logits = false;
      options.metadata = {{"minidl.layer", examples[i].spec.dump()}};
      const std::string stem = str(layer->name, "_", i);
      export_onnx(*m, dir + "/" + stem + ".onnx", options);
      save_safetensors(dir + "/" + stem + ".safetensors", {{"input", x}, {"output", y}},
                       {{"spec", examples[i].spec.dump()}});
      stems.push_back(stem);
    }
  }
  return stems;
}

}  // namespace minidl
