// End-to-end training on the CPU with the real data: the loss falls, two runs give the same bits,
// a resumed run equals an uninterrupted one, a NaN loss stops the run, a corrupt checkpoint is
// refused with a message naming it.
#include <filesystem>
#include <fstream>

#include "train/checkpoint.h"
#include "train/trainer.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "json_lines.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string test_root() { return (fs::temp_directory_path() / "minidl_test_runs").string(); }

// A tiny net on 512 training images: 8 steps of 64 per epoch.
std::string write_config(const std::string& dir, const std::string& extra_scale = "0.125") {
  fs::create_directories(dir);
  json c = json::parse(R"({
    "seed": 3, "device": "cpu", "epochs": 2, "batch_size": 64,
    "data": {"train_limit": 512, "augment": {"crop_padding": 2, "flip": true, "cutout": 4}},
    "model": {"layers": [
      {"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
      {"type": "BatchNorm2d", "num_features": 8, "relu": true},
      {"type": "MaxPool2d", "kernel_size": 4},
      {"type": "Residual", "body": [{"type": "Conv2d", "in_channels": 8, "out_channels": 8, "kernel_size": 3, "padding": 1},
                                   {"type": "ReLU"}]},
      {"type": "GlobalMaxPool2d"},
      {"type": "Linear", "in_features": 8, "out_features": 10}]},
    "loss": {"label_smoothing": 0.1},
    "optimizer": {"type": "SGD", "lr": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4},
    "schedule": {"type": "piecewise_linear", "epochs": [0, 1, 2], "factors": [1, 1, 0.2]},
    "eval": {"tta": "flip", "batch_size": 2000},
    "output": {"progress": false}
  })");
  c["data"]["dir"] = test::data_dir();
  c["model"]["layers"].push_back({{"type", "Scale"}, {"value", json::parse(extra_scale)}});
  const std::string path = dir + "/config.in.json";
  std::ofstream(path) << c.dump(2);
  return path;
}

TrainOptions options_for(const std::string& config, const std::string& out) {
  TrainOptions o;
  o.config_path = config;
  o.output_dir = out;
  return o;
}


std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("training: the loss falls and every record is written", "[training]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/falls";
  fs::remove_all(root);
  REQUIRE(train_command(options_for(write_config(root), root + "/run")) == 0);
  auto steps = test::read_json_lines(root + "/run/steps.jsonl");
  REQUIRE(steps.size() == 16);
  double first = 0, last = 0;
  for (int i = 0; i < 4; ++i) first += steps[i]["loss"].get<double>();
  for (int i = 12; i < 16; ++i) last += steps[i]["loss"].get<double>();
  REQUIRE(last < first);
  auto metrics = test::read_json_lines(root + "/run/metrics.jsonl");
  REQUIRE(metrics.size() == 2);
  REQUIRE(metrics[1]["test_acc"].get<double>() > 0.0);
  REQUIRE(metrics[1]["test_acc"].get<double>() <= 100.0);
  REQUIRE(metrics[1].contains("test_acc_tta"));
  REQUIRE(fs::exists(root + "/run/config.json"));
  REQUIRE(fs::exists(root + "/run/summary.json"));
  REQUIRE(read_checkpoint_info(root + "/run/checkpoint.safetensors").epoch == 2);
  REQUIRE_THROWS_WITH(train_command(options_for(root + "/config.in.json", root + "/run")),
                      Catch::Contains("already holds a run"));
}

TEST_CASE("training: two runs and a resumed run give the same bits", "[training][repro]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/repro";
  fs::remove_all(root);
  const std::string config = write_config(root);
  REQUIRE(train_command(options_for(config, root + "/a")) == 0);
  REQUIRE(train_command(options_for(config, root + "/b")) == 0);
  TrainOptions first_half = options_for(config, root + "/c");
  first_half.max_steps = 8;  // stops after epoch 1 and its checkpoint
  REQUIRE(train_command(first_half) == 0);
  REQUIRE(read_checkpoint_info(root + "/c/checkpoint.safetensors").epoch == 1);
  TrainOptions resume;
  resume.resume_dir = root + "/c";
  REQUIRE(train_command(resume) == 0);

  const std::string steps_a = slurp(root + "/a/steps.jsonl");
  REQUIRE(steps_a == slurp(root + "/b/steps.jsonl"));
  REQUIRE(steps_a == slurp(root + "/c/steps.jsonl"));
  const std::string hash_a = safetensors_payload_sha256(root + "/a/model.safetensors");
  REQUIRE(hash_a == safetensors_payload_sha256(root + "/b/model.safetensors"));
  REQUIRE(hash_a == safetensors_payload_sha256(root + "/c/model.safetensors"));
}

TEST_CASE("training: a NaN loss stops the run with exit code 3", "[training]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/nan";
  fs::remove_all(root);
  REQUIRE(train_command(options_for(write_config(root, "1e39"), root + "/run")) == 3);
  REQUIRE_FALSE(fs::exists(root + "/run/checkpoint.safetensors"));
  REQUIRE(test::read_json_lines(root + "/run/metrics.jsonl").empty());
}

TEST_CASE("training: a corrupt checkpoint is refused, naming the file", "[training]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/corrupt";
  fs::remove_all(root);
  TrainOptions o = options_for(write_config(root), root + "/run");
  o.max_steps = 8;
  REQUIRE(train_command(o) == 0);
  const std::string ckpt = root + "/run/checkpoint.safetensors";
  fs::resize_file(ckpt, fs::file_size(ckpt) / 2);
  TrainOptions resume;
  resume.resume_dir = root + "/run";
  REQUIRE_THROWS_WITH(train_command(resume), Catch::Contains("checkpoint.safetensors"));
  TrainOptions missing;
  missing.resume_dir = root + "/nowhere";
  REQUIRE_THROWS_WITH(train_command(missing), Catch::Contains("nothing to resume"));
}
