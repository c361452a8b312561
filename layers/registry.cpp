#include "layers/registry.h"

#include <map>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/spelling.h"
#include "layers/activation/activation.h"
#include "layers/activation/pointwise.h"
#include "layers/containers/flatten.h"
#include "layers/containers/layer_scale.h"
#include "layers/containers/residual.h"
#include "layers/containers/scale.h"
#include "layers/containers/sequential.h"
#include "layers/containers/skip_connection.h"
#include "layers/containers/squeeze_excitation.h"
#include "layers/conv/conv2d.h"
#include "layers/conv/conv3d.h"
#include "layers/linear/linear.h"
#include "layers/model_memory.h"
#include "layers/norm/batchnorm2d.h"
#include "layers/norm/groupnorm.h"
#include "layers/norm/layernorm.h"
#include "layers/norm/layernorm2d.h"
#include "layers/pool/avg_pool.h"
#include "layers/pool/max_pool3d.h"
#include "layers/pool/pooling.h"
#include "layers/regularization/dropout.h"
#include "layers/transformer/attention.h"
#include "layers/transformer/embedding.h"
#include "layers/transformer/encoder_layer.h"
#include "layers/transformer/lm_head.h"
#include "layers/transformer/tokens.h"

namespace minidl {

const std::vector<const LayerDescriptor*>& layer_descriptors() {
  // The one list of layer types. A new type adds its descriptor here (and its header above).
  static const std::vector<const LayerDescriptor*> table = {
      &conv2d_layer(),
      &linear_layer(),
      &batchnorm2d_layer(),
      &groupnorm_layer(),
      &layernorm_layer(),
      &layernorm2d_layer(),
      &relu_layer(),
      &gelu_layer(),
      &silu_layer(),
      &hardswish_layer(),
      &sigmoid_layer(),
      &maxpool2d_layer(),
      &avgpool2d_layer(),
      &adaptive_avgpool2d_layer(),
      &global_avg_pool2d_layer(),
      &global_max_pool2d_layer(),
      &flatten_layer(),
      &scale_layer(),
      &layer_scale_2d_layer(),
      &squeeze_excitation_layer(),
      &sequential_layer(),
      &residual_layer(),
      &dropout_layer(),
      &drop_path_layer(),
      &tokens_layer(),
      &position_embedding_layer(),
      &class_token_layer(),
      &token_pool_layer(),
      &multihead_attention_layer(),
      &transformer_encoder_layer_layer(),
      &conv3d_layer(),
      &conv_transpose3d_layer(),
      &max_pool3d_layer(),
      &skip_connection_layer(),
      &batchnorm3d_layer(),
      &embedding_layer(),
      &lm_head_layer(),
  };
  return table;
}

namespace {

// Name -> descriptor, checked once: two descriptors with one name would make a config mean two
// things.
const std::map<std::string, const LayerDescriptor*>& by_name() {
  static const std::map<std::string, const LayerDescriptor*> index = [] {
    std::map<std::string, const LayerDescriptor*> m;
    for (const LayerDescriptor* d : layer_descriptors())
      MINIDL_CHECK(m.emplace(d->name, d).second, "layer registry: two layer types named '", d->name, "'");
    return m;
  }();
  return index;
}

}  // namespace

const LayerDescriptor* find_layer(const std::string& type) {
  auto it = by_name().find(type);
  return it == by_name().end() ? nullptr : it->second;
}

std::vector<std::string> layer_types() {
  std::vector<std::string> out;
  for (const auto& kv : by_name()) out.push_back(kv.first);
  return out;
}

void check_weight_size(const LayerArgs& args, const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) overflow = overflow || __builtin_mul_overflow(n, d, &n);
  MINIDL_CHECK(!overflow && n <= kMaxLayerParameters, args.where(), ": a weight of shape ", shape_str(shape),
               " has ", overflow ? std::string("more than 2^63") : std::to_string(n), " elements, more than the ",
               kMaxLayerParameters, " one layer may have");
}

nlohmann::json layer_schema() {
  nlohmann::json out = nlohmann::json::object();
  for (const LayerDescriptor* d : layer_descriptors()) {
    nlohmann::json examples = nlohmann::json::array();
    for (const LayerExample& e : layer_examples(*d)) {
      nlohmann::json example = {{"spec", e.spec}, {"input", e.input}};
      if (!e.onnx) example["onnx"] = false;
      if (e.ids_below > 0) example["ids_below"] = e.ids_below;
      if (!e.before.empty()) example["before"] = e.before;
      examples.push_back(std::move(example));
    }
    out[d->name] = {{"family", d->family},
                    {"summary", d->summary},
                    {"keys", fields_schema(d->fields)},
                    {"examples", std::move(examples)},
                    {"autocast", autocast_rule_name(d->autocast)},
                    {"onnx", d->onnx}};
  }
  return out;
}

std::vector<std::shared_ptr<Module>> build_layers(const nlohmann::json& list, const std::string& path) {
  MINIDL_CHECK(list.is_array(), path, ": expected a list of layers, got ", list.type_name());
  std::vector<std::shared_ptr<Module>> layers;
  for (size_t i = 0; i < list.size(); ++i) layers.push_back(build_layer(list[i], str(path, "[", i, "]")));
  // Once the whole list is built, a layer that uses another's tensors (LMHead) finds it.
  for (size_t i = 0; i < layers.size(); ++i) {
    try {
      layers[i]->bind_siblings(layers);
    } catch (const Error& e) {
      fail(str(path, "[", i, "]: ", e.what()));
    }
  }
  return layers;
}

std::shared_ptr<Module> build_layer(const nlohmann::json& spec, const std::string& path, Device device) {
  const OutermostBuild outermost;
  if (outermost) check_layer_fits(spec, path, device);
  MINIDL_CHECK(spec.is_object(), path, ": a layer must be a JSON object like {\"type\": \"Conv2d\", ...}");
  MINIDL_CHECK(spec.contains("type") && spec["type"].is_string(), path, ".type: missing (a string naming the layer)");
  const std::string type = spec["type"].get<std::string>();
  const LayerDescriptor* layer = find_layer(type);
  if (!layer) {
    std::string known;
    for (const auto& t : layer_types()) known += (known.empty() ? "" : ", ") + t;
    fail(str(path, ".type: unknown layer '", text_excerpt(type), "'", did_you_mean(type, layer_types()), " (known: ",
             known, ")"));
  }
  LayerArgs args(spec, path);
  args.get_string("type", type);
  try {
    std::shared_ptr<Module> m = layer->make(args);
    args.finish();
    return m;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind(path, 0) == 0) throw;  // names the layer already
    fail(str(path, " (", type, "): ", what));
  }
}

}  // namespace minidl
