// The run config's "precision" and "memory_format": defaults, strict values, the resolved config,
// and the refusal of anything else, naming the key.
#include "train/config.h"
#include "core/error.h"
#include "test_util.h"

using namespace minidl;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {
json config_with(const json& extra) {
  json j = json::parse(R"({"model": {"layers": [{"type": "Flatten"}]}, "optimizer": {"type": "SGD", "lr": 0.1}})");
  j.update(extra);
  return j;
}
}  // namespace

TEST_CASE("precision and memory_format default to fp32 and contiguous and are written back", "[config][half]") {
  const TrainConfig c = parse_train_config(config_with(json::object()));
  CHECK(c.precision == Precision::Fp32);
  CHECK(c.memory_format == MemoryFormat::Contiguous);
  const json resolved = c.to_json();
  CHECK(resolved.at("precision") == "fp32");
  CHECK(resolved.at("memory_format") == "contiguous");
  const TrainConfig explicit_ = parse_train_config(config_with({{"precision", "fp32"}, {"memory_format", "contiguous"}}));
  CHECK(explicit_.to_json() == resolved);
}

TEST_CASE("precision takes fp32, bf16, fp16 and memory_format contiguous, channels_last; others name the key",
          "[config][half]") {
  for (const char* p : {"bf16", "fp16"})
    CHECK(parse_train_config(config_with({{"precision", p}})).to_json().at("precision") == p);
  CHECK(parse_train_config(config_with({{"memory_format", "channels_last"}})).to_json().at("memory_format") ==
        "channels_last");
  CHECK_THROWS_WITH(parse_train_config(config_with({{"precision", "float16"}})),
                    Contains("precision: expected \"fp32\", \"bf16\" or \"fp16\", got \"float16\""));
  CHECK_THROWS_WITH(parse_train_config(config_with({{"memory_format", "nhwc"}})),
                    Contains("memory_format: expected \"contiguous\" or \"channels_last\", got \"nhwc\""));
  CHECK_THROWS_WITH(parse_train_config(config_with({{"precision", 16}})), Contains("precision: expected a string"));
  CHECK_THROWS_WITH(parse_train_config(config_with({{"memory-format", "contiguous"}})),
                    Contains("memory-format: unknown key"));
}
