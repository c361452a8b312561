// The run config's key table (train/config_keys.h): every key round-trips through parse and
// to_json, a missing key gets the table's default, a value outside the table's range is refused
// naming the key, the named enums refuse unknown names naming the allowed ones, and the reference
// documents every key of every section.
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
      {"loss.type", {"dice", {{"data", {{"format", "volumes"}}}}}},
      {"loss.label_smoothing", {0.1}},
      {"optimizer", {{{"type", "AdamW"}, {"lr", 0.01}}}},
      {"schedule", {{{"type", "piecewise_linear"}, {"epochs", {0, 1}}, {"factors", {1, 0}}}}},
      {"init", {json::array({{{"match", "bias"}, {"type", "zeros"}}})}},
      {"freeze", {json::array({{{"match", "0.weight"}}})}},
      {"init_from.path", {"runs/x"}},
      {"init_from.skip", {json::array({"3.*"}), {{"init_from", {{"path", "runs/x"}}}}}},
      {"init_from.map", {{{"module", ""}}, {{"init_from", {{"path", "runs/x"}}}}}},
      {"init_from.strict", {false, {{"init_from", {{"path", "runs/x"}}}}}},
      {"lookahead", {{{"every_n_steps", 5}}}},
      {"grad_scaler", {{{"init_scale", 1024}}, {{"precision", "fp16"}}}},
      {"grad_clip", {1.5}},
      {"eval.tta", {"flip_translate"}},
      {"eval.tta_share", {0.25}},
      {"eval.tta_weights", {"equal"}},
      {"eval.batch_size", {500}},
      {"eval.every_steps", {250}},
      {"eval.target_dice", {0.9, {{"data", {{"format", "volumes"}}}}}},
      {"output.dir", {"runs/x"}},
      {"output.progress", {false}},
      {"checkpoint.every_steps", {10}},
      {"checkpoint.every_minutes", {2.5}},
      {"checkpoint.keep", {3}},
      {"checkpoint.save_best", {true}},
      {"checkpoint.monitor", {"val_acc", {{"checkpoint", {{"save_best", true}}}}}},
      {"checkpoint.mode", {"max", {{"checkpoint", {{"save_best", true}}}}}},
      {"early_stopping.patience", {5}},
      {"early_stopping.monitor", {"train_loss", {{"early_stopping", {{"patience", 2}}}}}},
      {"early_stopping.mode", {"min", {{"early_stopping", {{"patience", 2}}}}}},
      {"early_stopping.min_delta", {0.01, {{"early_stopping", {{"patience", 2}}}}}},
      {"log.tensorboard", {true}},
  };
  return s;
}

}  // namespace

TEST_CASE("every key of the config table round-trips through parse and to_json", "[config]") {
  std::set<std::string> paths;
  for (const Field<TrainConfig>& k : config_keys().keys) {
    INFO(k.name);
    REQUIRE(paths.insert(k.name).second);  // one row per key
    REQUIRE(!k.doc.empty());
    REQUIRE(samples().count(k.name) == 1);  // a new key needs a sample here
    const Sample& s = samples().at(k.name);
    REQUIRE(s.value != k.default_value);
    const TrainConfig c = parse_train_config(with(k.name, s.value, s.extra));
    const json written = c.to_json();
    REQUIRE(written.at(pointer(k.name)) == s.value);
    REQUIRE(k.write(c) == s.value);
    REQUIRE(parse_train_config(written).to_json() == written);
  }
  REQUIRE(paths.size() == samples().size());
}

TEST_CASE("a missing key gets the table's default, written back unless written only when set", "[config]") {
  const TrainConfig c = parse_train_config(minimal());
  const json written = c.to_json();
  for (const Field<TrainConfig>& k : config_keys().keys) {
    INFO(k.name);
    if (k.required) {
      json j = minimal();
      j.erase(k.name);
      REQUIRE_THAT(error_of(j), Contains(k.name + ": required"));
      continue;
    }
    REQUIRE(k.write(c).value_or(json()) == k.default_value);
    if (k.written_at_default)
      REQUIRE(written.at(pointer(k.name)) == k.default_value);
    else
      REQUIRE(!written.contains(pointer(k.name)));
  }
  // The checkpoint section is written whole once one of its keys is set.
  const json set = parse_train_config(with("checkpoint.keep", 2)).to_json();
  REQUIRE(set.at("checkpoint") == json({{"every_steps", 0},
                                        {"every_minutes", 0.0},
                                        {"keep", 2},
                                        {"save_best", false},
                                        {"monitor", "val_loss"},
                                        {"mode", "auto"}}));
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
      {"eval.every_steps", -1},
      {"checkpoint.every_steps", -1},
      {"checkpoint.every_minutes", -1},
      {"checkpoint.every_minutes", 2e6},
      {"checkpoint.keep", 0},
      {"checkpoint.keep", 1001},
      {"precision", "fp8"},
      {"memory_format", "nhwc"},
      {"eval.tta", "mirror"},
      {"early_stopping.patience", -1},
      {"early_stopping.patience", 1.5},
      {"early_stopping.min_delta", -0.1},
      {"early_stopping.monitor", "val_accuracy"},
      {"checkpoint.monitor", "test_acc"},
      {"eval.tta_share", 0},
      {"eval.tta_share", 1.5},
      {"eval.tta_weights", "mean"},
  };
  for (const auto& [path, value] : bad) {
    INFO(path << " = " << value.dump());
    const std::string m = error_of(with(path, value));
    REQUIRE_THAT(m, Contains(path + ": expected"));
    for (const Field<TrainConfig>& k : config_keys().keys)
      if (k.name == path && k.type != "int") REQUIRE_THAT(m, Contains(k.range));
  }
  REQUIRE(error_of(with("epochs", 0)) == "epochs: expected a number in (0, 1000000], got 0");
  REQUIRE(error_of(with("grad_clip", 0)) ==
          "grad_clip: expected a number > 0 (leave the key out for no clipping), got 0");
  REQUIRE(error_of(with("eval.tta", "mirror")) ==
          "eval.tta: expected \"none\", \"flip\", \"flip_translate\" or \"airbench\", got \"mirror\"");
  // Rules between keys.
  REQUIRE_THAT(error_of(with("accumulate_steps", 3)), Contains("3 micro-batches do not split batch_size 128"));
  REQUIRE_THAT(error_of(with("grad_scaler", json::object())), Contains("grad_scaler: loss scaling is for precision"));
  // A setting of a feature left off would be ignored: refused, naming the key that turns it on.
  REQUIRE_THAT(error_of(with("early_stopping", {{"monitor", "val_acc"}})),
               Contains("early_stopping.patience: required to stop early"));
  REQUIRE_THAT(error_of(with("checkpoint", {{"monitor", "val_acc"}})),
               Contains("checkpoint.monitor: only with checkpoint.save_best: true"));
  REQUIRE(error_of(with("early_stopping.patience", -1)) ==
          "early_stopping.patience: expected an integer in 0..1000000, got -1");
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
  for (const Field<TrainConfig>& k : config_keys().keys) {
    INFO(k.name);
    REQUIRE_THAT(md, Contains("| `" + k.name + "` | " + k.type + " | "));
  }
  REQUIRE_THAT(
      md, Contains("| `eval.tta` | string | `\"none\"` | \"none\", \"flip\", \"flip_translate\" or \"airbench\" |"));
  REQUIRE_THAT(md, Contains("| `batch_size` | int | `128` | 1..1000000 |"));
  // Every key of every section, from the section's own table; no line sends the reader to a header.
  for (const char* row :
       {"| `data.augment.flip` | bool | `false` |", "| `data.augment.random_resized_crop.scale` |",
        "| `data.label` | string | `\"fine\"` |", "| `optimizer.type` | string |",
        "| `optimizer.lr` (SGD) | float | `0.001` |", "| `optimizer.betas` (AdamW) |",
        "| `optimizer.ns_steps` (Muon) | int | `3` | 0..100 |", "| `optimizer.groups` (SGD) | list |",
        "| `optimizer.groups[].lr_scale` (SGD) | float | `1.0` |", "| `schedule.min_factor` (cosine) |",
        "| `schedule.decay` (warmup) | string | `\"linear\"` |", "| `init[].type` | string | required |",
        "| `init[].eps` | float | `0.0005` |", "| `freeze[].from_epoch` | float | `0.0` |",
        "| `lookahead.every_n_steps` | int | `1` | >= 1 |", "| `grad_scaler.growth_interval` | int |"})
    REQUIRE_THAT(md, Contains(row));
  REQUIRE_THAT(md, !Contains(".h,") && !Contains(".h)") && !Contains("Keys: "));
}
