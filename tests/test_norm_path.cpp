// The normalization layers' "single_read" key (layers/norm/norm_path.h): read and written back by
// every norm layer's spec, and set to false on every norm layer of a model, nested ones included,
// by the config's top-level "norm_single_read": false (build_model). The bits of both paths on the
// GPU are the [norm][cuda] tests' (scripts/gpu/norm_single_read.sh).
#include <string>
#include <vector>

#include "core/device.h"
#include "layers/norm/batchnorm2d.h"
#include "layers/norm/groupnorm.h"
#include "layers/norm/layernorm.h"
#include "layers/norm/layernorm2d.h"
#include "layers/registry.h"
#include "test_util.h"
#include "train/config.h"
#include "train/trainer.h"

using namespace minidl;
using nlohmann::json;

namespace {

json norm_layers(const json& first_extra) {
  json first = {{"type", "BatchNorm2d"}, {"num_features", 4}};
  first.update(first_extra);
  return json::array({first,
                      {{"type", "GroupNorm"}, {"num_groups", 2}, {"num_channels", 4}},
                      {{"type", "LayerNorm2d"}, {"num_channels", 4}},
                      {{"type", "Tokens"}},
                      {{"type", "TransformerEncoderLayer"}, {"d_model", 4}, {"nhead", 1}, {"dim_feedforward", 8}}});
}

TrainConfig config_with(const json& layers, bool norm_single_read) {
  return parse_train_config({{"device", "cpu"},
                             {"norm_single_read", norm_single_read},
                             {"model", {{"layers", layers}}},
                             {"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}});
}

// Every normalization layer's single_read, by module path.
std::vector<std::pair<std::string, bool>> single_reads(Module& model) {
  std::vector<std::pair<std::string, bool>> out;
  for (auto& [path, m] : model.named_modules()) {
    if (auto* l = dynamic_cast<BatchNorm2d*>(m)) out.emplace_back(path, l->spec().single_read);
    if (auto* l = dynamic_cast<GroupNorm*>(m)) out.emplace_back(path, l->spec().single_read);
    if (auto* l = dynamic_cast<LayerNorm*>(m)) out.emplace_back(path, l->spec().single_read);
    if (auto* l = dynamic_cast<LayerNorm2d*>(m)) out.emplace_back(path, l->spec().single_read);
  }
  return out;
}

}  // namespace

TEST_CASE("norm path: \"norm_single_read\": false turns single_read off on every norm layer, nested ones too",
          "[norm][config]") {
  const std::shared_ptr<Module> off = build_model(config_with(norm_layers(json::object()), false), Device::cpu());
  const auto reads = single_reads(*off);
  REQUIRE(reads.size() == 5);  // BatchNorm2d, GroupNorm, LayerNorm2d, the encoder layer's norm1 and norm2
  for (const auto& [path, on] : reads) {
    INFO(path);
    REQUIRE_FALSE(on);
  }
  // The top-level layers write the key back (config.json keeps the choice); by default nobody does.
  REQUIRE(off->children()[0].second->to_json().at("single_read") == false);
  const std::shared_ptr<Module> on = build_model(config_with(norm_layers(json::object()), true), Device::cpu());
  for (const auto& [path, single] : single_reads(*on)) REQUIRE(single);
  REQUIRE_FALSE(on->children()[1].second->to_json().contains("single_read"));
}

TEST_CASE("norm path: a layer's own \"single_read\": false stays under the default config", "[norm][config]") {
  const std::shared_ptr<Module> model =
      build_model(config_with(norm_layers({{"single_read", false}}), true), Device::cpu());
  const auto reads = single_reads(*model);
  REQUIRE_FALSE(reads[0].second);
  for (size_t i = 1; i < reads.size(); ++i) REQUIRE(reads[i].second);
  REQUIRE_THROWS_WITH(
      build_layer(json{{"type", "GroupNorm"}, {"num_groups", 1}, {"num_channels", 2}, {"single_read", "yes"}}, "layer"),
      Catch::Contains("single_read"));
}
