// The training config: strict keys, type errors with key paths, --set overrides, resolved output.
#include <cstdio>
#include <fstream>

#include "train/config.h"
#include "core/error.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {
json minimal() {
  return json::parse(R"({
    "epochs": 2, "batch_size": 8,
    "model": {"layers": [{"type": "Flatten"}, {"type": "Linear", "in_features": 3072, "out_features": 10}]},
    "optimizer": {"type": "SGD", "lr": 0.1}
  })");
}
}  // namespace

TEST_CASE("config parses with defaults and prints itself back", "[config]") {
  TrainConfig c = parse_train_config(minimal());
  REQUIRE(c.epochs == 2);
  REQUIRE(c.batch_size == 8);
  REQUIRE(c.deterministic);
  REQUIRE(c.tta == TtaMode::None);
  TrainConfig again = parse_train_config(c.to_json());
  REQUIRE(again.to_json() == c.to_json());
}

TEST_CASE("config errors name the key path", "[config]") {
  json j = minimal();
  j["epochs"] = "ten";
  REQUIRE_THROWS_WITH(parse_train_config(j), Catch::Contains("epochs: expected a number"));
  j = minimal();
  j["epoch"] = 3;
  REQUIRE_THROWS_WITH(parse_train_config(j), Catch::Contains("epoch: unknown key"));
  j = minimal();
  j["eval"] = {{"tta", "mirror"}};
  REQUIRE_THROWS_WITH(parse_train_config(j), Catch::Contains("eval.tta"));
  j = minimal();
  j["loss"] = {{"smoothing", 0.1}};
  REQUIRE_THROWS_WITH(parse_train_config(j), Catch::Contains("loss.smoothing: unknown key"));
  j = minimal();
  j.erase("model");
  REQUIRE_THROWS_WITH(parse_train_config(j), Catch::Contains("model: required section is missing"));
  j = minimal();
  j["batch_size"] = 0;
  REQUIRE_THROWS_WITH(parse_train_config(j), Catch::Contains("batch_size: expected an integer in 1..1000000, got 0"));
}

TEST_CASE("config overrides (--set) reach values, list items and nested keys", "[config]") {
  json j = minimal();
  apply_override(j, "epochs=5");
  apply_override(j, "optimizer.lr=0.25");
  apply_override(j, "model.layers.1.out_features=7");
  apply_override(j, "output.dir=runs/x");
  REQUIRE(j["epochs"] == 5);
  REQUIRE(j["optimizer"]["lr"] == 0.25);
  REQUIRE(j["model"]["layers"][1]["out_features"] == 7);
  REQUIRE(j["output"]["dir"] == "runs/x");
  REQUIRE_THROWS_WITH(apply_override(j, "epochs"), Catch::Contains("expected key.path=value"));
  REQUIRE_THROWS_WITH(apply_override(j, "model.layers.9.x=1"), Catch::Contains("past the end"));
  REQUIRE_THROWS_WITH(apply_override(j, "epochs.x=1"), Catch::Contains("not an object"));
  // A number past a double's range is said to be one, not taken as a string of the wrong type;
  // text that is not a number still is a string.
  REQUIRE_THROWS_WITH(apply_override(j, "epochs=1e400"),
                      Catch::Contains("--set 'epochs=1e400': the number is out of range"));
  REQUIRE_THROWS_WITH(apply_override(j, "epochs=-2.5E+999"), Catch::Contains("the number is out of range"));
  apply_override(j, "output.dir=1e");
  REQUIRE(j["output"]["dir"] == "1e");
  apply_override(j, "output.dir=01");
  REQUIRE(j["output"]["dir"] == "01");
  apply_override(j, "epochs=2.5e1");
  REQUIRE(j["epochs"] == 25.0);
}

TEST_CASE("a malformed config file names the file", "[config]") {
  REQUIRE_THROWS_WITH(read_json_file("/nonexistent/config.json"), Catch::Contains("/nonexistent/config.json"));
  const std::string path = "test_config_malformed.json";
  {
    std::ofstream f(path);
    f << "{\"epochs\": 3,,}";
  }
  REQUIRE_THROWS_WITH(read_json_file(path), Catch::Contains("is not valid JSON"));
  std::remove(path.c_str());
}

TEST_CASE("shipped configs parse", "[config]") {
  for (const char* name : {"quick_cpu", "resnet9", "resnet9_groupnorm", "resnet9_layernorm"}) {
    INFO(name);
    TrainConfig c = parse_train_config(read_json_file(std::string(MINIDL_SOURCE_DIR) + "/configs/" + name + ".json"));
    REQUIRE(c.epochs > 0);
  }
}
