// The run config's key table (train/config_keys.h): every key round-trips through parse and
// to_json, a missing key gets the table's default, a value outside the table's range is refused
// naming the key, and the named enums refuse unknown names naming the allowed ones.
#include <set>

#include "core/error.h"
#include "test_util.h"
#include "train/config.h"
#include "train/config_keys.h"

using namespace minidl;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

json minimal() {
  return json::parse(R"({"model": {"layers": [{"type": "Flatten"}]}, "optimizer": {"type": "SGD", "lr": 0.1}})");
}

json::json_pointer pointer(const std::string& path) {
  std::string p = "/" + path;
  for (char& ch : p)
    if (ch == '.') ch = '/';
  return json::json_pointer(p);
}

json with(const std::string& path, const json& value, const json& extra = json::object()) {
  json j = minimal();
  j.update(extra);
  j[pointer(path)] = value;
  return j;
}

std::string error_of(const json& config) {
  try {
    parse_train_config(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A value other than the default for every key (and what else it needs to be valid).
struct Sample {
  json value;
  json extra = json::object();
};
const std::map<std::string, Sample>& samples() {
  static const std::map<std::string, Sample> s = {
      {"seed", {7u}},  // as JSON text parses it: unsigned
      {"deterministic", {false}},
      {"allow_tf32", {false}},
      {"cuda_graph", {false}},
      {"norm_single_read", {false}},
      {"precision", {"bf16"}},
      {"memory_format", {"channels_last"}},
      {"device", {"cpu"}},
      {"epochs", {2.5}},
      {"batch_size", {64}},
      {"accumulate_steps", {4}},
      {"bucket_mb", {0.5}},
      {"data", {{{"train_limit", 100}}}},
      {"model",
       {{{"layers", {{{"type", "Flatten"}}, {{"type", "Linear"}, {"in_features", 3072}, {"out_features", 10}}}}}}},
      {"loss.label_smoothing", {0.1}},
      {"optimizer", {{{"type", "AdamW"}, {"lr", 0.01}}}},
      {"schedule", {{{"type", "piecewise_linear"}, {"epochs", {0, 1}}, {"factors", {1, 0}}}}},
      {"init", {json::array({{{"match", "bias"}, {"type", "zeros"}}})}},
      {"freeze", {json::array({{{"match", "0.weight"}}})}},
      {"lookahead", {{{"every_n_steps", 5}}}},
      {"grad_scaler", {{{"init_scale", 1024}}, {{"precision", "fp16"}}}},
      {"grad_clip", {1.5}},
      {"eval.tta", {"flip_translate"}},
      {"eval.tta_share", {0.25}},
      {"eval.tta_weights", {"equal"}},
      {"eval.batch_size", {500}},
      {"output.dir", {"runs/x"}},
      {"output.progress", {false}},
      {"checkpoint.every_steps", {10}},
      {"checkpoint.every_minutes", {2.5}},
      {"checkpoint.keep", {3}},
      {"log.tensorboard", {true}},
  };
  return s;
}

}  // namespace

TEST_CASE("every key of the config table round-trips through parse and to_json", "[config]") {
  std::set<std::string> paths;
  for (const ConfigKey& k : config_keys()) {
    INFO(k.path);
    REQUIRE(paths.insert(k.path).second);  // one row per key
    REQUIRE(!k.meaning.empty());
    REQUIRE(samples().count(k.path) == 1);  // a new key needs a sample here
    const Sample& s = samples().at(k.path);
    REQUIRE(s.value != k.default_value);
    const TrainConfig c = parse_train_config(with(k.path, s.value, s.extra));
    const json written = c.to_json();
    REQUIRE(written.at(pointer(k.path)) == s.value);
    REQUIRE(k.write(c) == s.value);
    REQUIRE(parse_train_config(written).to_json() == written);
  }
  REQUIRE(paths.size() == samples().size());
}

TEST_CASE("a missing key gets the table's default, written back unless written only when set", "[config]") {
  const TrainConfig c = parse_train_config(minimal());
  const json written = c.to_json();
  for (const ConfigKey& k : config_keys()) {
    INFO(k.path);
    if (k.required) {
      json j = minimal();
      j.erase(k.path);
      REQUIRE_THAT(error_of(j), Contains(k.path + ": required"));
      continue;
    }
    REQUIRE(k.write(c) == k.default_value);
    if (k.written_at_default)
      REQUIRE(written.at(pointer(k.path)) == k.default_value);
    else
      REQUIRE(!written.contains(pointer(k.path)));
  }
  // The checkpoint section is written whole once one of its keys is set.
  const json set = parse_train_config(with("checkpoint.keep", 2)).to_json();
  REQUIRE(set.at("checkpoint") == json({{"every_steps", 0}, {"every_minutes", 0.0}, {"keep", 2}}));
}

TEST_CASE("a value outside the table's range is refused naming the key and the range", "[config]") {
  const std::vector<std::pair<std::string, json>> bad = {
      {"seed", -1},
      {"epochs", 0},
      {"epochs", 1e7},
      {"batch_size", 0},
      {"batch_size", 1000001},
      {"accumulate_steps", 0},
      {"bucket_mb", -1},
      {"loss.label_smoothing", 1},
      {"loss.label_smoothing", -0.1},
      {"grad_clip", 0},
      {"eval.batch_size", 0},
      {"checkpoint.every_steps", -1},
      {"checkpoint.every_minutes", -1},
      {"checkpoint.every_minutes", 2e6},
      {"checkpoint.keep", 0},
      {"checkpoint.keep", 1001},
      {"precision", "fp8"},
      {"memory_format", "nhwc"},
      {"eval.tta", "mirror"},
      {"eval.tta_share", 0},
      {"eval.tta_share", 1.5},
      {"eval.tta_weights", "mean"},
  };
  for (const auto& [path, value] : bad) {
    INFO(path << " = " << value.dump());
    const std::string m = error_of(with(path, value));
    REQUIRE_THAT(m, Contains(path + ": expected"));
    for (const ConfigKey& k : config_keys())
      if (k.path == path && k.type != "integer") REQUIRE_THAT(m, Contains(k.allowed));
  }
  REQUIRE(error_of(with("epochs", 0)) == "epochs: expected a number in (0, 1000000], got 0");
  REQUIRE(error_of(with("grad_clip", 0)) ==
          "grad_clip: expected a number > 0 (leave the key out for no clipping), got 0");
  REQUIRE(error_of(with("eval.tta", "mirror")) ==
          "eval.tta: expected \"none\", \"flip\", \"flip_translate\" or \"airbench\", got \"mirror\"");
  // Rules between keys.
  REQUIRE_THAT(error_of(with("accumulate_steps", 3)), Contains("3 micro-batches do not split batch_size 128"));
  REQUIRE_THAT(error_of(with("grad_scaler", json::object())), Contains("grad_scaler: loss scaling is for precision"));
}

TEST_CASE("named enums: one list of names for to_string, from_string, JSON and errors", "[config]") {
  for (TtaMode m : {TtaMode::None, TtaMode::Flip, TtaMode::FlipTranslate, TtaMode::Airbench})
    REQUIRE(from_string<TtaMode>(to_string(m), "eval.tta") == m);
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16})
    REQUIRE(from_string<Precision>(to_string(p), "precision") == p);
  for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    REQUIRE(from_string<MemoryFormat>(to_string(f), "memory_format") == f);
    REQUIRE(std::string(to_string(f)) == memory_format_name(f));
  }
  REQUIRE_THROWS_WITH(from_string<TtaMode>("Flip", "eval.tta"),
                      "eval.tta: expected \"none\", \"flip\", \"flip_translate\" or \"airbench\", got \"Flip\"");
  REQUIRE_THROWS_WITH(from_string<Precision>("", "--precision"),
                      "--precision: expected \"fp32\", \"bf16\" or \"fp16\", got \"\"");
  // JSON holds the name, never the underlying integer.
  REQUIRE(json(Precision::Bf16) == "bf16");
  REQUIRE(json(TtaMode::FlipTranslate) == "flip_translate");
}

TEST_CASE("the config reference lists every key with its default and allowed values", "[config]") {
  const std::string md = config_reference_markdown();
  REQUIRE_THAT(md, Contains("Generated by `minidl config --doc`"));
  for (const ConfigKey& k : config_keys()) {
    INFO(k.path);
    REQUIRE_THAT(md, Contains("| `" + k.path + "` | " + k.type + " | "));
    if (!k.documented_in.empty()) REQUIRE_THAT(md, Contains(k.documented_in));
  }
  REQUIRE_THAT(
      md, Contains("| `eval.tta` | string | `\"none\"` | \"none\", \"flip\", \"flip_translate\" or \"airbench\" |"));
  REQUIRE_THAT(md, Contains("| `batch_size` | integer | `128` | 1..1000000 |"));
}
