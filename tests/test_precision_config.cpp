// The run config's "precision" and "memory_format": "auto" by default and resolved for the run's
// device (bf16 channels_last on a GPU of compute capability 8.0 on, fp32 contiguous on the CPU),
// the concrete choice written back, strict values, and the refusal of anything else, naming the key.
#include "train/config.h"
#include "train/precision.h"
#include "train/trainer.h"
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

// 16 images of 3x4x4 with labels 0..9.
Dataset tiny_images() {
  std::vector<uint8_t> px(16 * 3 * 4 * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37);
  std::vector<int32_t> labels(16);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  Dataset d;
  d.images = Tensor::from_vector(px, {16, 3, 4, 4});
  d.labels = Tensor::from_vector(labels, {16});
  return d;
}
}  // namespace

TEST_CASE("precision and memory_format default to auto, which the CPU resolves to fp32 contiguous",
          "[config][half]") {
  const TrainConfig c = parse_train_config(config_with(json::object()));
  CHECK_FALSE(c.precision.has_value());
  CHECK_FALSE(c.memory_format.has_value());
  CHECK(c.to_json().at("precision") == "auto");
  CHECK(c.to_json().at("memory_format") == "auto");
  // "auto" given is the default.
  CHECK(parse_train_config(config_with({{"precision", "auto"}, {"memory_format", "auto"}})).to_json() == c.to_json());

  const TrainConfig cpu = resolve_for_device(c, Device::cpu());
  CHECK(cpu.precision == Precision::Fp32);
  CHECK(cpu.memory_format == MemoryFormat::Contiguous);
  const json resolved = cpu.to_json();
  CHECK(resolved.at("precision") == "fp32");
  CHECK(resolved.at("memory_format") == "contiguous");
  const TrainConfig explicit_ = parse_train_config(config_with({{"precision", "fp32"}, {"memory_format", "contiguous"}}));
  CHECK(explicit_.to_json() == resolved);
  // A value the config names is kept, whatever the device.
  const TrainConfig half = resolve_for_device(
      parse_train_config(config_with({{"precision", "bf16"}, {"memory_format", "channels_last"}})), Device::cpu());
  CHECK(half.precision == Precision::Bf16);
  CHECK(half.memory_format == MemoryFormat::ChannelsLast);
  const TrainConfig mixed = resolve_for_device(parse_train_config(config_with({{"precision", "fp16"}})), Device::cpu());
  CHECK(mixed.precision == Precision::Fp16);
  CHECK(mixed.memory_format == MemoryFormat::Contiguous);
}

TEST_CASE("auto chooses bf16 on a GPU of compute capability 8.0 on, channels_last on any GPU", "[config][half]") {
  CHECK(auto_precision(DeviceType::CUDA, 90) == Precision::Bf16);  // H100, H200
  CHECK(auto_precision(DeviceType::CUDA, 80) == Precision::Bf16);  // A100
  CHECK(auto_precision(DeviceType::CUDA, 86) == Precision::Bf16);
  CHECK(auto_precision(DeviceType::CUDA, 75) == Precision::Fp32);  // T4: no bfloat16 tensor cores
  CHECK(auto_precision(DeviceType::CUDA, 70) == Precision::Fp32);  // V100
  CHECK(auto_precision(DeviceType::CPU, 0) == Precision::Fp32);
  CHECK(auto_precision(DeviceType::CPU, 90) == Precision::Fp32);
  CHECK(auto_memory_format(DeviceType::CUDA) == MemoryFormat::ChannelsLast);
  CHECK(auto_memory_format(DeviceType::CPU) == MemoryFormat::Contiguous);
  CHECK(compute_capability(Device::cpu()) == 0);
}

TEST_CASE("a Trainer resolves auto for its device and records the choice", "[config][half]") {
  json j = config_with({{"device", "cpu"}, {"batch_size", 8}, {"eval", {{"batch_size", 8}}}});
  j["model"]["layers"].push_back({{"type", "Linear"}, {"in_features", 48}, {"out_features", 10}});
  Trainer trainer(parse_train_config(j), Device::cpu(), tiny_images(), tiny_images());
  CHECK(trainer.config().precision == Precision::Fp32);
  CHECK(trainer.config().memory_format == MemoryFormat::Contiguous);
  CHECK(trainer.resolved_config().at("precision") == "fp32");
  CHECK(trainer.resolved_config().at("memory_format") == "contiguous");
}

TEST_CASE("precision takes auto, fp32, bf16, fp16 and memory_format auto, contiguous, channels_last, others name "
          "the key and the choices",
          "[config][half]") {
  for (const char* p : {"fp32", "bf16", "fp16"})
    CHECK(parse_train_config(config_with({{"precision", p}})).to_json().at("precision") == p);
  for (const char* f : {"contiguous", "channels_last"})
    CHECK(parse_train_config(config_with({{"memory_format", f}})).to_json().at("memory_format") == f);
  CHECK_THROWS_WITH(parse_train_config(config_with({{"precision", "float16"}})),
                    Contains("precision: expected \"auto\", \"fp32\", \"bf16\" or \"fp16\", got \"float16\""));
  CHECK_THROWS_WITH(parse_train_config(config_with({{"memory_format", "nhwc"}})),
                    Contains("memory_format: expected \"auto\", \"contiguous\" or \"channels_last\", got \"nhwc\""));
  CHECK_THROWS_WITH(parse_train_config(config_with({{"precision", "Auto"}})), Contains("got \"Auto\""));
  CHECK_THROWS_WITH(parse_train_config(config_with({{"precision", 16}})), Contains("precision: expected a string"));
  CHECK_THROWS_WITH(parse_train_config(config_with({{"memory-format", "contiguous"}})),
                    Contains("memory-format: unknown key"));
  // Loss scaling is for fp16, which auto never chooses.
  CHECK_THROWS_WITH(parse_train_config(config_with({{"grad_scaler", json::object()}})),
                    Contains("this config's precision is \"auto\""));
}

TEST_CASE("precision=... and memory_format=... given with --set override auto", "[config][half]") {
  json j = config_with(json::object());
  apply_override(j, "precision=fp32");
  apply_override(j, "memory_format=contiguous");
  const TrainConfig c = parse_train_config(j);
  CHECK(c.precision == Precision::Fp32);
  CHECK(c.memory_format == MemoryFormat::Contiguous);
  apply_override(j, "precision=auto");
  CHECK_FALSE(parse_train_config(j).precision.has_value());
}
