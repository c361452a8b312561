// TensorBoard event files: the CRC-32C and TFRecord framing, a write/read round trip with our
// reader, corruption caught by the CRCs, and a real training run whose event file holds every
// step's loss (bit for bit) and every epoch's metrics.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "train/config.h"
#include "train/run_log.h"
#include "train/tensorboard.h"
#include "train/run.h"
#include "train/trainer.h"
#include "core/error.h"
#include "json_lines.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path().string());
  return out;
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C and TFRecord's mask match the published values", "[tensorboard]") {
  // The CRC-32C check value (RFC 3720 B.4 and every CRC catalogue): "123456789" -> 0xE3069283.
  REQUIRE(crc32c("123456789", 9) == 0xE3069283u);
  // 32 zero bytes -> 0x8A9136AA (RFC 3720 B.4).
  const std::string zeros(32, '\0');
  REQUIRE(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  const uint32_t c = 0xE3069283u;
  REQUIRE(masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("tensorboard: scalars written are read back with their tags, steps and bits", "[tensorboard]") {
  test::TempDir dir("tb");
  std::string path;
  {
    TensorBoardWriter w(dir.path.string(), 7);
    path = w.path();
    w.scalar("train/loss", 7, 2.302585f, 1000.5);
    w.scalar("accuracy/test", 8, 91.25f, 1001.25);
    w.scalar("lr", 9, -0.0f, 1002.0);
    w.scalar("tiny", 10, 1e-38f, 1003.0);
  }
  REQUIRE(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const TensorBoardEvents e = read_tensorboard_events(path);
  REQUIRE(e.file_version == "brain.Event:2");
  REQUIRE(e.session_starts == std::vector<int64_t>{7});
  REQUIRE(e.scalars.size() == 4);
  REQUIRE(e.scalars[0].tag == "train/loss");
  REQUIRE(e.scalars[0].step == 7);
  REQUIRE(e.scalars[0].value == 2.302585f);
  REQUIRE(e.scalars[0].wall_time == 1000.5);
  REQUIRE(e.scalars[1].tag == "accuracy/test");
  REQUIRE(e.scalars[1].value == 91.25f);
  REQUIRE(std::signbit(e.scalars[2].value));
  REQUIRE(e.scalars[3].value == 1e-38f);
  REQUIRE(e.scalars[3].step == 10);

  // A second writer in the same second gets a file of its own.
  TensorBoardWriter again(dir.path.string(), 0);
  REQUIRE(again.path() != path);
}

TEST_CASE("tensorboard: a flipped byte or a cut file is an error naming the record", "[tensorboard]") {
  test::TempDir dir("tbbad");
  std::string path;
  {
    TensorBoardWriter w(dir.path.string(), 0);
    path = w.path();
    w.scalar("a", 1, 1.0f, 1.0);
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = bytes;
  flipped[flipped.size() - 6] ^= 0x01;  // inside the last record's data
  std::ofstream(dir.file("flipped"), std::ios::binary) << flipped;
  REQUIRE_THROWS_WITH(read_tensorboard_events(dir.file("flipped")), Catch::Contains("record 2: the data's CRC"));
  std::string length = bytes;
  length[0] ^= 0x01;  // the first record's length
  std::ofstream(dir.file("length"), std::ios::binary) << length;
  REQUIRE_THROWS_WITH(read_tensorboard_events(dir.file("length")), Catch::Contains("record 0: the length's CRC"));
  std::ofstream(dir.file("cut"), std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  REQUIRE_THROWS_WITH(read_tensorboard_events(dir.file("cut")), Catch::Contains("record 2 is cut short"));
}

TEST_CASE("tensorboard: the epoch scalars follow metrics.jsonl's keys", "[tensorboard]") {
  const json record = {{"epoch", 2},      {"step", 16},         {"train_loss", 1.5}, {"train_acc", 40.0},
                       {"test_acc", 45.5}, {"test_acc_tta", 46.0}, {"lr", 0.1},        {"seconds", 2.0},
                       {"eval_seconds", 0.5}, {"images_per_s", 256.0}};
  const auto s = tensorboard_epoch_scalars(record, 8);
  std::map<std::string, double> m(s.begin(), s.end());
  REQUIRE(m.size() == s.size());
  REQUIRE(m.at("accuracy/train") == 40.0);
  REQUIRE(m.at("accuracy/test") == 45.5);
  REQUIRE(m.at("accuracy/test_tta") == 46.0);
  REQUIRE(m.at("epoch/train_loss") == 1.5);
  REQUIRE(m.at("lr") == 0.1);
  REQUIRE(m.at("throughput/images_per_s") == 256.0);
  REQUIRE(m.at("time/epoch_s") == 2.0);
  REQUIRE(m.at("time/eval_s") == 0.5);
  REQUIRE(m.at("time/step_ms") == 250.0);
  REQUIRE(m.at("epoch") == 2.0);
  json no_tta = record;
  no_tta.erase("test_acc_tta");
  for (const auto& kv : tensorboard_epoch_scalars(no_tta, 8)) REQUIRE(kv.first != "accuracy/test_tta");
  json segmentation = record;
  segmentation["test_dice"] = 0.75;
  const auto with_dice = tensorboard_epoch_scalars(segmentation, 8);
  REQUIRE(std::map<std::string, double>(with_dice.begin(), with_dice.end()).at("dice/test") == 0.75);
  REQUIRE(m.count("dice/test") == 0);
}

TEST_CASE("tensorboard: a training run with log.tensorboard logs every step and epoch", "[tensorboard][training]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir dir("tbrun");
  json c = json::parse(R"({
    "seed": 1, "device": "cpu", "epochs": 2, "batch_size": 64,
    "data": {"train_limit": 256},
    "model": {"layers": [
      {"type": "Conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "GlobalAvgPool2d"},
      {"type": "Linear", "in_features": 4, "out_features": 10}]},
    "optimizer": {"type": "SGD", "lr": 0.05},
    "eval": {"tta": "flip"},
    "output": {"progress": false},
    "log": {"tensorboard": true}
  })");
  c["data"]["dir"] = test::data_dir();
  std::ofstream(dir.file("config.json")) << c.dump();
  RunOptions o;
  o.config_path = dir.file("config.json");
  o.output_dir = dir.file("run");
  REQUIRE(run_training(o) == 0);

  const std::vector<std::string> files = event_files(dir.file("run"));
  REQUIRE(files.size() == 1);
  const TensorBoardEvents e = read_tensorboard_events(files[0]);
  REQUIRE(e.session_starts == std::vector<int64_t>{0});
  std::map<std::pair<std::string, int64_t>, float> got;
  for (const auto& s : e.scalars) REQUIRE(got.emplace(std::make_pair(s.tag, s.step), s.value).second);

  const std::vector<json> steps = test::read_json_lines(dir.file("run/steps.jsonl"));
  REQUIRE(steps.size() == 8);
  for (const json& s : steps) {
    const float loss = got.at({kTensorBoardLossTag, s["step"].get<int64_t>()});
    REQUIRE(float_bits_hex(loss) == s["loss_bits"].get<std::string>());
  }
  const std::vector<json> metrics = test::read_json_lines(dir.file("run/metrics.jsonl"));
  REQUIRE(metrics.size() == 2);
  size_t epoch_scalars = 0;
  for (const json& m : metrics) {
    const auto expected = tensorboard_epoch_scalars(m, 4);
    REQUIRE(expected.size() == 10);  // every key of the record, TTA and step time included
    for (const auto& [tag, value] : expected) {
      INFO(tag << " at the epoch's last step, " << m["step"].get<int64_t>() - 1);
      REQUIRE(got.at({tag, m["step"].get<int64_t>() - 1}) == static_cast<float>(value));
      ++epoch_scalars;
    }
  }
  REQUIRE(e.scalars.size() == steps.size() + epoch_scalars);
  // Without the key no event file is written.
  RunOptions plain = o;
  plain.output_dir = dir.file("plain");
  c["log"]["tensorboard"] = false;
  std::ofstream(dir.file("config.json"), std::ios::trunc) << c.dump();
  REQUIRE(run_training(plain) == 0);
  REQUIRE(event_files(dir.file("plain")).empty());
}

TEST_CASE("tensorboard: log.tensorboard is checked strictly", "[tensorboard][config]") {
  json c = {{"model", {{"layers", json::array()}}}, {"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}};
  REQUIRE_FALSE(parse_train_config(c).tensorboard);
  c["log"] = {{"tensorboard", true}};
  REQUIRE(parse_train_config(c).tensorboard);
  REQUIRE(parse_train_config(parse_train_config(c).to_json()).tensorboard);
  c["log"] = {{"tensorboard", "yes"}};
  REQUIRE_THROWS_WITH(parse_train_config(c), Catch::Contains("log.tensorboard"));
  c["log"] = {{"tensorbord", true}};
  REQUIRE_THROWS_WITH(parse_train_config(c), Catch::Contains("log.tensorbord: unknown key"));
}
