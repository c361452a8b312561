// A validation split (data.val_fraction, an image folder's val/), the keys that choose on it
// (early_stopping, checkpoint.save_best) and data.mean/std "auto": the split is fixed and
// stratified, bad values are refused naming the key, a run evaluates every epoch on the split and
// the test set once at the end, stops early, keeps best.safetensors, and resumes from any point
// with the same bits and the same decisions.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/safetensors.h"
#include "data/holdout.h"
#include "data/options.h"
#include "json_lines.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/run.h"
#include "train/trainer.h"

using namespace minidl;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// `per_class` images of each of `classes` classes, interleaved, each image filled with its index.
Dataset labelled(int classes, int per_class) {
  const int n = classes * per_class;
  std::vector<uint8_t> px(static_cast<size_t>(n) * 3 * 2 * 2);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    labels[static_cast<size_t>(i)] = i % classes;
    for (int k = 0; k < 12; ++k) px[static_cast<size_t>(i * 12 + k)] = static_cast<uint8_t>(i);
  }
  Dataset d;
  d.images = Tensor::from_vector(px, {n, 3, 2, 2});
  d.labels = Tensor::from_vector(labels, {n});
  return d;
}

std::map<int32_t, int> class_counts(const Dataset& d) {
  std::map<int32_t, int> c;
  for (int32_t l : d.labels.values<int32_t>()) ++c[l];
  return c;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// 512 training images, about 10% held out: about 461 train (7 steps of 64), 51 validation.
std::string write_config(const std::string& dir, const json& extra) {
  fs::create_directories(dir);
  json c = json::parse(R"({
    "seed": 5, "device": "cpu", "epochs": 4, "batch_size": 64,
    "data": {"train_limit": 512, "test_limit": 500, "val_fraction": 0.1, "augment": {"crop_padding": 2, "flip": true}},
    "model": {"layers": [
      {"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
      {"type": "BatchNorm2d", "num_features": 8, "relu": true},
      {"type": "MaxPool2d", "kernel_size": 4},
      {"type": "GlobalMaxPool2d"},
      {"type": "Linear", "in_features": 8, "out_features": 10}]},
    "optimizer": {"type": "SGD", "lr": 0.05, "momentum": 0.9},
    "schedule": {"type": "piecewise_linear", "fractions": [0, 0.5, 1], "factors": [1, 1, 0.2]},
    "eval": {"batch_size": 200},
    "output": {"progress": false}
  })");
  c["data"]["dir"] = test::data_dir();
  c.merge_patch(extra);
  const std::string path = dir + "/config.in.json";
  std::ofstream(path) << c.dump(2);
  return path;
}

RunOptions fresh(const std::string& config, const std::string& out, int64_t max_steps = 0) {
  RunOptions o;
  o.config_path = config;
  o.output_dir = out;
  o.max_steps = max_steps;
  return o;
}

// The metrics records without their timings (which differ between runs), and without the test
// accuracy before the last record (a run stopped by --max-steps at an epoch's end evaluates the
// test split there; its resume goes on).
std::vector<json> records(const std::string& run) {
  std::vector<json> out = test::read_json_lines(run + "/metrics.jsonl");
  for (size_t i = 0; i < out.size(); ++i) {
    for (const char* key : {"seconds", "eval_seconds", "images_per_s"}) out[i].erase(key);
    if (i + 1 < out.size()) out[i].erase("test_acc");
  }
  return out;
}

}  // namespace

TEST_CASE("val_fraction: a fixed, class-stratified hold-out that keeps the images' order", "[validation]") {
  const Dataset d = labelled(3, 10);
  const HeldOut a = hold_out(d, 0.2, 0);
  REQUIRE(a.val.size() == 6);
  REQUIRE(a.train.size() == 24);
  REQUIRE(class_counts(a.val) == std::map<int32_t, int>{{0, 2}, {1, 2}, {2, 2}});
  // Disjoint, together every image once, each set in the original order (the pixel is the index).
  std::vector<int> seen(30, 0);
  for (const Dataset* s : {&a.train, &a.val}) {
    int previous = -1;
    for (int64_t i = 0; i < s->size(); ++i) {
      const int index = s->images.data<uint8_t>()[i * 12];
      REQUIRE(index > previous);
      previous = index;
      REQUIRE(s->labels.data<int32_t>()[i] == index % 3);
      ++seen[static_cast<size_t>(index)];
    }
  }
  for (int s : seen) REQUIRE(s == 1);
  // The same seed, the same images; another seed, others.
  REQUIRE(hold_out(d, 0.2, 0).val.images.values<uint8_t>() == a.val.images.values<uint8_t>());
  REQUIRE(hold_out(d, 0.2, 1).val.images.values<uint8_t>() != a.val.images.values<uint8_t>());
  // Every class keeps a training image; a fraction that holds out nothing is refused.
  REQUIRE(class_counts(hold_out(labelled(2, 2), 0.9, 0).train) == std::map<int32_t, int>{{0, 1}, {1, 1}});
  REQUIRE_THROWS_WITH(hold_out(labelled(3, 10), 0.01, 0),
                      Contains("data.val_fraction: 0.01 of the 30 training images holds out none"));
}

TEST_CASE("data keys: val_fraction and mean/std auto are checked and written back", "[validation]") {
  auto parse = [](const std::string& text) { return DataOptions::from_json(json::parse(text), "data"); };
  for (const char* bad : {"0", "1", "-0.5", "1.5"})
    REQUIRE_THROWS_WITH(parse(std::string(R"({"val_fraction": )") + bad + "}"),
                        Contains("data.val_fraction: expected a fraction of the training images in (0, 1)"));
  REQUIRE_THROWS_WITH(parse(R"({"val_fraction": "NaN"})"), Contains("data.val_fraction: expected a number"));
  REQUIRE_THROWS_WITH(parse(R"({"val_seed": 3})"), Contains("data.val_seed: only with data.val_fraction"));
  REQUIRE_THROWS_WITH(parse(R"({"mean": "mean"})"), Contains("data.mean: expected \"auto\" or a list of 3 numbers"));
  const DataOptions v = parse(R"({"val_fraction": 0.1, "val_seed": 3})");
  REQUIRE(v.to_json().at("val_fraction") == 0.1);
  REQUIRE(v.to_json().at("val_seed") == 3);
  REQUIRE_FALSE(parse("{}").to_json().contains("val_fraction"));  // written only when set
  // CIFAR keeps its constants; an image folder's default is its own statistics.
  REQUIRE_FALSE(parse("{}").normalize.auto_mean);
  const DataOptions folder = parse(R"({"format": "image_folder", "dir": "x", "image_size": 8})");
  REQUIRE(folder.normalize.auto_mean);
  REQUIRE(folder.normalize.auto_std);
  REQUIRE(folder.to_json().at("mean") == "auto");
  const DataOptions cifar_auto = parse(R"({"std": "auto"})");
  REQUIRE_FALSE(cifar_auto.normalize.auto_mean);
  REQUIRE(cifar_auto.normalize.auto_std);
  REQUIRE(DataOptions::from_json(cifar_auto.to_json(), "data").to_json() == cifar_auto.to_json());
  REQUIRE_THROWS_WITH(augment_params(folder.normalize, nullptr, 0, 0), Contains("data.mean/std \"auto\""));
  // The statistics themselves: channel 0 is 0 and 255 in halves, channel 1 constant 51.
  std::vector<uint8_t> px(2 * 3 * 2 * 2, 0);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      px[static_cast<size_t>(i * 12 + k)] = k < 2 ? 0 : 255;
      px[static_cast<size_t>(i * 12 + 4 + k)] = 51;
    }
  const ChannelStats st = channel_stats(Tensor::from_vector(px, {2, 3, 2, 2}));
  REQUIRE(st.mean[0] == Approx(0.5));
  REQUIRE(st.std[0] == Approx(0.5));
  REQUIRE(st.mean[1] == Approx(0.2));
  REQUIRE(st.std[1] == 0);
}

TEST_CASE("validation run: evaluated every epoch, stopped early, best.safetensors kept, test at the end",
          "[validation][training]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir tmp("valrun");
  // min_delta 100: no epoch after the first improves val_loss, so patience 1 stops after epoch 2.
  const json extra = {{"early_stopping", {{"patience", 1}, {"min_delta", 100}}},
                      {"checkpoint", {{"save_best", true}, {"monitor", "val_acc"}}}};
  const std::string run = tmp.file("run");
  const RunResult r = Run(fresh(write_config(tmp.file("cfg"), extra), run)).execute();
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.stopped_early);
  const std::vector<json> m = test::read_json_lines(run + "/metrics.jsonl");
  REQUIRE(m.size() == 2);
  for (const json& rec : m) {
    REQUIRE(rec.contains("val_acc"));
    REQUIRE(rec.contains("val_loss"));
  }
  REQUIRE_FALSE(m[0].contains("test_acc"));  // the test set once, at the end
  REQUIRE(m[1].at("test_acc") == r.test_acc);
  const json summary = json::parse(slurp(run + "/summary.json"));
  // About a tenth of each class is held out (rounded per class).
  const int64_t val = summary.at("splits").at("val").get<int64_t>();
  REQUIRE(summary.at("splits").at("train").get<int64_t>() + val == 512);
  REQUIRE(std::abs(val - 51) <= 5);
  REQUIRE(summary.at("splits").at("test") == 500);
  REQUIRE(summary.at("val_acc") == m[1].at("val_acc"));
  REQUIRE(summary.at("class_metrics_split") == "test");
  REQUIRE_THAT(summary.at("stopped_early").get<std::string>(), Contains("val_loss has not improved by more than 100"));
  // best.safetensors: the epoch with the best val_acc (the first on a tie), named in its metadata.
  const int best_epoch = m[1].at("val_acc").get<double>() > m[0].at("val_acc").get<double>() ? 2 : 1;
  REQUIRE(summary.at("best").at("epoch") == best_epoch);
  REQUIRE(summary.at("best").at("value") == m[best_epoch - 1].at("val_acc"));
  const SafeTensors best = load_safetensors(run + "/best.safetensors");
  REQUIRE(best.metadata.at("epoch") == std::to_string(best_epoch));
  REQUIRE(best.metadata.at("monitor") == "val_acc");
  if (best_epoch == 2)
    REQUIRE(safetensors_payload_sha256(run + "/best.safetensors") ==
            safetensors_payload_sha256(run + "/model.safetensors"));
  const std::string log = slurp(run + "/log.txt");
  REQUIRE_THAT(log, Contains("data: validation images: " + std::to_string(val) + " held out"));
  REQUIRE_THAT(log, Contains("the run ends after epoch 2 of 4"));
  REQUIRE_THAT(log, Contains("done: test "));
  REQUIRE_THAT(log, Contains("(500 test images, the final weights), val "));
  // A run that stopped early is finished: --resume says so and changes nothing.
  RunOptions again;
  again.resume_dir = run;
  REQUIRE_THROWS_WITH(Run(again).execute(), Contains("the run is finished: it stopped early after epoch 2"));
}

TEST_CASE("validation run: stopped part-way and resumed, the same bits and the same decisions",
          "[validation][training][resume]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir tmp("valresume");
  // val_loss must improve by 0.01 within 2 epochs; best by train_loss.
  const json extra = {{"epochs", 5},
                      {"early_stopping", {{"patience", 2}, {"min_delta", 0.01}}},
                      {"checkpoint", {{"save_best", true}, {"monitor", "train_loss"}}}};
  const std::string config = write_config(tmp.file("cfg"), extra);
  const std::string a = tmp.file("a"), b = tmp.file("b");
  REQUIRE(Run(fresh(config, a)).execute().exit_code == 0);
  // b stops inside epoch 2, then at the end of epoch 3, and goes on to the end.
  REQUIRE(Run(fresh(config, b, 10)).execute().exit_code == 0);
  RunOptions resume;
  resume.resume_dir = b;
  resume.max_steps = 21;
  REQUIRE(Run(resume).execute().exit_code == 0);
  // Unless early stopping ended it there, as it ended a.
  if (!json::parse(slurp(b + "/summary.json")).contains("stopped_early")) {
    resume.max_steps = 0;
    REQUIRE(Run(resume).execute().exit_code == 0);
  }
  REQUIRE(records(a) == records(b));
  REQUIRE(slurp(a + "/steps.jsonl") == slurp(b + "/steps.jsonl"));
  REQUIRE(slurp(a + "/best.safetensors") == slurp(b + "/best.safetensors"));
  REQUIRE(slurp(a + "/model.safetensors") == slurp(b + "/model.safetensors"));
  const json sa = json::parse(slurp(a + "/summary.json")), sb = json::parse(slurp(b + "/summary.json"));
  REQUIRE(sa.at("best") == sb.at("best"));
  REQUIRE(sa.value("stopped_early", "") == sb.value("stopped_early", ""));
  REQUIRE(read_checkpoint_info(a + "/checkpoint.safetensors").selection ==
          read_checkpoint_info(b + "/checkpoint.safetensors").selection);
}

TEST_CASE("validation keys: a watched validation metric without a validation split is refused before the folder exists",
          "[validation][training]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir tmp("valnone");
  json extra = {{"early_stopping", {{"patience", 2}}}};
  extra["data"] = {{"val_fraction", nullptr}};  // merge_patch: removes the key
  const std::string run = tmp.file("run");
  REQUIRE_THROWS_WITH(Run(fresh(write_config(tmp.file("cfg"), extra), run)),
                      Contains("early_stopping.monitor: \"val_loss\" is measured on a validation split") &&
                          Contains("data.val_fraction"));
  REQUIRE_FALSE(fs::exists(run));
}

TEST_CASE("evaluation on the GPU: graphed and eager give the same predictions, loss and confusion",
          "[validation][cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  MINIDL_REQUIRE_DATA();
  test::TempDir tmp("valcuda");
  json c = json::parse(slurp(write_config(tmp.file("cfg"), {{"eval", {{"tta", "flip"}, {"batch_size", 64}}}})));
  c["device"] = "cuda";
  c["precision"] = "fp32";
  auto evaluate = [&](bool graph, Split split) {
    json j = c;
    j["cuda_graph"] = graph;
    Trainer t(parse_train_config(j), Device::cuda());
    std::vector<Trainer::EvalResult> r;
    for (int pass = 0; pass < 3; ++pass) r.push_back(t.evaluate(TtaMode::Flip, split));  // warm-up, capture, replay
    return r;
  };
  for (Split split : {Split::Val, Split::Test}) {
    const auto graphed = evaluate(true, split), eager = evaluate(false, split);
    for (size_t pass = 0; pass < graphed.size(); ++pass) {
      INFO(split_name(split) << " pass " << pass);
      REQUIRE(graphed[pass].acc == eager[pass].acc);
      REQUIRE(graphed[pass].tta_acc == eager[pass].tta_acc);
      REQUIRE(graphed[pass].loss == eager[pass].loss);
      REQUIRE(graphed[pass].confusion == eager[pass].confusion);
      REQUIRE(graphed[pass].acc == graphed[0].acc);
    }
    // The confusion counts the TTA's predictions: its diagonal is the TTA accuracy.
    int64_t right = 0, total = 0;
    const int64_t k = 10;
    for (int64_t t = 0; t < k; ++t)
      for (int64_t p = 0; p < k; ++p) {
        total += graphed[0].confusion[static_cast<size_t>(t * k + p)];
        if (t == p) right += graphed[0].confusion[static_cast<size_t>(t * k + p)];
      }
    REQUIRE(total == graphed[0].images);
    REQUIRE(100.0 * static_cast<double>(right) / static_cast<double>(total) == Approx(graphed[0].tta_acc));
  }
}
