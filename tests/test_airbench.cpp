// The airbench recipe end to end on the CPU: the TTA views and weights, the lr schedule in run
// fractions, fractional epochs, and a few training steps of configs/airbench94.json,
// configs/airbench94_muon.json and configs/airbench94_record.json (shrunk: small batches, few
// images) twice with the same seed, identical in bits; then a resumed run (lookahead, freezing and
// whitening in play) equal to an uninterrupted one.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "bench/bench_accuracy.h"
#include "core/safetensors.h"
#include "data/tta.h"
#include "layers/conv/patch_whitening.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/run.h"
#include "train/trainer.h"

using namespace minidl;
using nlohmann::json;
namespace fs = std::filesystem;

TEST_CASE("airbench TTA: six views, translate then mirror, weights summing to 1", "[tta]") {
  const std::vector<TtaView> v = tta_views(TtaMode::Airbench);
  REQUIRE(v.size() == 6);
  double total = 0;
  for (const TtaView& view : v) total += view.weight;
  REQUIRE(total == 1.0);
  const Tensor x = test::random_tensor({2, 3, 5, 6}, 4);
  // airbench mirrors the shifted image: hflip(shift(x, d, d)).
  for (int d : {-1, 1}) {
    auto it = std::find_if(v.begin(), v.end(), [&](const TtaView& t) { return t.flip && t.dy == d; });
    REQUIRE(it != v.end());
    REQUIRE(flip_translate(x, true, it->dy, it->dx).to_vector() == hflip(flip_translate(x, false, d, d)).to_vector());
  }
  REQUIRE(tta_views(TtaMode::None).size() == 1);
  REQUIRE(tta_views(TtaMode::Flip).size() == 2);
  REQUIRE(tta_views(TtaMode::FlipTranslate).size() == 6);
}

TEST_CASE("piecewise_linear in fractions of the run (airbench's triangle)", "[schedule]") {
  auto s = make_schedule(json::parse(R"({"type": "piecewise_linear", "fractions": [0, 0.25, 1], "factors": [0.2, 1, 0.1]})"),
                         "schedule");
  REQUIRE(s->factor(0, 48, 400) == Approx(0.2));
  REQUIRE(s->factor(50, 48, 400) == Approx(0.6));
  REQUIRE(s->factor(100, 48, 400) == Approx(1.0));
  REQUIRE(s->factor(250, 48, 400) == Approx(0.55));
  REQUIRE(s->factor(400, 48, 400) == Approx(0.1));
  REQUIRE(s->to_json()["fractions"].size() == 3);
  REQUIRE_THROWS_WITH(make_schedule(json::parse(R"({"type": "piecewise_linear", "fractions": [0, 1], "epochs": [0, 1],
                                                    "factors": [1, 0]})"), "schedule"),
                      Catch::Contains("not both"));
}

namespace {

json shrunk(const std::string& name) {
  std::ifstream in(std::string(MINIDL_SOURCE_DIR) + "/configs/" + name);
  json c = json::parse(in);
  c["device"] = "cpu";
  c["batch_size"] = 32;
  c["data"]["dir"] = test::data_dir();
  c["data"]["train_limit"] = 128;  // 4 steps per epoch
  c["data"]["test_limit"] = 1000;  // evaluation is most of a CPU run; a tenth of the test set checks it
  c["output"]["progress"] = false;
  for (json& rule : c["init"])
    if (rule["type"] == "patch_whitening") rule["images"] = 64;
  return c;
}

Dataset first_images(const Dataset& d, int64_t n) {
  std::vector<uint8_t> px = d.images.values<uint8_t>();
  std::vector<int32_t> lb = d.labels.values<int32_t>();
  px.resize(static_cast<size_t>(n * kCifarImageBytes));
  lb.resize(static_cast<size_t>(n));
  return {Tensor::from_vector(px, {n, 3, 32, 32}), Tensor::from_vector(lb, {n}), d.classes, d.note};
}

}  // namespace

TEST_CASE("fractional epochs: ceil(epochs * steps per epoch) steps", "[config][airbench]") {
  MINIDL_REQUIRE_DATA();
  json c = shrunk("airbench94.json");
  TrainConfig config = parse_train_config(c);
  REQUIRE(config.epochs == 9.9);
  REQUIRE(config.to_json()["epochs"] == 9.9);
  c["epochs"] = 2;
  REQUIRE(parse_train_config(c).to_json()["epochs"].is_number_integer());
  c["epochs"] = 0;
  REQUIRE_THROWS_WITH(parse_train_config(c), Catch::Contains("epochs"));
  auto [train, test] = load_datasets(config);
  Trainer t(config, Device::cpu(), train, first_images(test, 10));
  REQUIRE(t.steps_per_epoch() == 4);
  REQUIRE(t.total_steps() == 40);  // ceil(4 * 9.9)
  REQUIRE(t.resolved_config()["lookahead"]["every_n_steps"] == 5);
}

TEST_CASE("airbench configs train on the CPU, the same seed giving the same bits", "[training][airbench]") {
  MINIDL_REQUIRE_DATA();
  for (const char* name : {"airbench94.json", "airbench94_muon.json", "airbench94_record.json"}) {
    INFO(name);
    json c = shrunk(name);
    if (c.contains("lookahead")) c["lookahead"] = {{"start_epochs", 0}, {"every_n_steps", 2}};
    const TrainConfig config = parse_train_config(c);
    auto [train, test] = load_datasets(config);
    const Dataset few = first_images(test, 40);
    const AccuracyRun a = run_for_accuracy(config, Device::cpu(), train, few, 5);
    const AccuracyRun b = run_for_accuracy(config, Device::cpu(), train, few, 5);
    REQUIRE(a.steps == 5);
    REQUIRE(a.weights_sha256 == b.weights_sha256);
    REQUIRE(a.tta_acc == b.tta_acc);
    REQUIRE(a.tta_acc >= 0);
    REQUIRE(a.test_acc >= 0);
  }
}

TEST_CASE("airbench configs: a resumed run equals an uninterrupted one", "[training][airbench][repro]") {
  MINIDL_REQUIRE_DATA();
  const test::TempDir work("airbench_resume");
  // airbench94: lookahead, freezing and whitening in play; the record: color jitter, Muon's weight
  // decay and renormalization interval, the whitening bias's own schedule across the resume, and
  // selective TTA at each evaluation.
  for (const char* name : {"airbench94.json", "airbench94_record.json"}) {
    INFO(name);
    const fs::path root = work.path / name;
    fs::create_directories(root);
    json c = shrunk(name);
    // Narrow the net so a CPU run of 10 steps and two evaluations stays quick.
    c["model"]["layers"] = json::parse(R"([
    {"type": "Conv2d", "in_channels": 3, "out_channels": 24, "kernel_size": 2, "padding": 0, "bias": true},
    {"type": "GELU"},
    {"type": "Conv2d", "in_channels": 24, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
    {"type": "MaxPool2d", "kernel_size": 4},
    {"type": "BatchNorm2d", "num_features": 8, "eps": 1e-12, "momentum": 0.4},
    {"type": "GELU"},
    {"type": "MaxPool2d", "kernel_size": 7},
    {"type": "Flatten"},
    {"type": "Linear", "in_features": 8, "out_features": 10, "bias": false},
    {"type": "Scale", "value": 0.111}])");
    c["epochs"] = 2.5;
    if (c.contains("lookahead")) {
      c["lookahead"] = {{"start_epochs", 0.5}, {"every_n_steps", 3}};
      c["freeze"][2]["from_epoch"] = 1;
      c["eval"]["tta"] = "none";  // the test images twice per run: keep it to one view
    } else {
      c["model"]["layers"][9]["value"] = 0.00390625;  // its own head scale: its head lr is tuned to it
      c["data"]["test_limit"] = 200;                   // selective TTA redoes 50 of them
    }
    const std::string config = (root / "config.in.json").string();
    std::ofstream(config) << c.dump(2);
    auto opts = [&](const std::string& out) {
      RunOptions o;
      o.config_path = config;
      o.output_dir = (root / out).string();
      return o;
    };
    REQUIRE(run_training(opts("a")) == 0);
    RunOptions half = opts("b");
    half.max_steps = 4;
    REQUIRE(run_training(half) == 0);
    RunOptions resume;
    resume.resume_dir = (root / "b").string();
    REQUIRE(run_training(resume) == 0);
    {
      // A fractional epoch count resumes as it was: not "raised" (2.5 once read back as 2).
      std::ifstream log(root / "b" / "log.txt");
      const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      REQUIRE(text.find("resumed at step 4") != std::string::npos);
      REQUIRE(text.find("epochs raised") == std::string::npos);
    }
    REQUIRE(read_checkpoint_info((root / "a" / "checkpoint.safetensors").string()).step == 10);  // ceil(4 * 2.5)
    REQUIRE(safetensors_payload_sha256((root / "a" / "model.safetensors").string()) ==
            safetensors_payload_sha256((root / "b" / "model.safetensors").string()));
    const auto summary = [&](const char* run) { return json::parse(std::ifstream(root / run / "summary.json")); };
    REQUIRE(summary("a").value("test_acc_tta", -1.0) == summary("b").value("test_acc_tta", -1.0));
    // The frozen whitening filters and BatchNorm weights never moved.
    const SafeTensors weights = load_safetensors((root / "a" / "model.safetensors").string());
    for (float v : find_tensor(weights, "4.weight", "model.safetensors").to_vector()) REQUIRE(v == 1.f);
    Tensor whitening = find_tensor(weights, "0.weight", "model.safetensors");
    auto [train, test] = load_datasets(parse_train_config(c));
    Loader first(train, LoaderOptions::evaluation(DataOptions::from_json(c["data"], "data"), 64), Device::cpu());
    first.start_epoch(0);
    Batch b;
    first.next(b);
    REQUIRE(whitening.to_vector() == whitening_filters(patch_moments(b.images, 2, 2), 3, 2, 2, 5e-4).to_vector());
  }
}
