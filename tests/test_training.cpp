// End-to-end training on the CPU with the real data: the loss falls, two runs give the same bits,
// a resumed run equals an uninterrupted one, a NaN loss stops the run, a corrupt checkpoint is
// refused with a message naming it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "train/checkpoint.h"
#include "train/run_folder.h"
#include "train/run.h"
#include "train/trainer.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "layers/module.h"
#include "json_lines.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Per process: other checkouts may run the same tests on this machine at the same time.
std::string test_root() {
  return (fs::temp_directory_path() / ("minidl_test_runs." + std::to_string(getpid()))).string();
}

// A tiny net on 512 training images: 8 steps of 64 per epoch.
std::string write_config(const std::string& dir, const std::string& extra_scale = "0.125") {
  fs::create_directories(dir);
  json c = json::parse(R"({
    "seed": 3, "device": "cpu", "epochs": 2, "batch_size": 64,
    "data": {"train_limit": 512, "test_limit": 1000, "augment": {"crop_padding": 2, "flip": true, "cutout": 4}},
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

RunOptions options_for(const std::string& config, const std::string& out) {
  RunOptions o;
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
  REQUIRE(run_training(options_for(write_config(root), root + "/run")) == 0);
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
  // The config leaves precision and memory_format at "auto": the run folder records what the CPU
  // chose, so a resume or an export never chooses again.
  const json config = json::parse(slurp(root + "/run/config.json"));
  const json recorded = read_checkpoint_info(root + "/run/checkpoint.safetensors").config;
  const json summary = json::parse(slurp(root + "/run/summary.json"));
  for (const json* j : {&config, &recorded, &summary}) {
    CHECK(j->at("precision") == "fp32");
    CHECK(j->at("memory_format") == "contiguous");
  }
  REQUIRE_THROWS_WITH(run_training(options_for(root + "/config.in.json", root + "/run")),
                      Catch::Contains("is not empty") && Catch::Contains("--resume"));
}

TEST_CASE("training: two runs and a resumed run give the same bits", "[training][repro]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/repro";
  fs::remove_all(root);
  const std::string config = write_config(root);
  REQUIRE(run_training(options_for(config, root + "/a")) == 0);
  REQUIRE(run_training(options_for(config, root + "/b")) == 0);
  RunOptions first_half = options_for(config, root + "/c");
  first_half.max_steps = 8;  // stops after epoch 1 and its checkpoint
  REQUIRE(run_training(first_half) == 0);
  REQUIRE(read_checkpoint_info(root + "/c/checkpoint.safetensors").epoch == 1);
  RunOptions resume;
  resume.resume_dir = root + "/c";
  REQUIRE(run_training(resume) == 0);

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
  REQUIRE(run_training(options_for(write_config(root, "3e38"), root + "/run")) == 3);
  // On the CPU the losses are read after every step: the run stops at the first non-finite one,
  // not at the end of the epoch's 8 steps.
  REQUIRE(test::read_json_lines(root + "/run/steps.jsonl").size() < 8);
  REQUIRE_FALSE(fs::exists(root + "/run/checkpoint.safetensors"));
  REQUIRE(test::read_json_lines(root + "/run/metrics.jsonl").empty());
}

TEST_CASE("training: a corrupt checkpoint is refused, naming the file", "[training]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/corrupt";
  fs::remove_all(root);
  RunOptions o = options_for(write_config(root), root + "/run");
  o.max_steps = 8;
  REQUIRE(run_training(o) == 0);
  const std::string ckpt = root + "/run/checkpoint.safetensors";
  fs::resize_file(ckpt, fs::file_size(ckpt) / 2);
  RunOptions resume;
  resume.resume_dir = root + "/run";
  REQUIRE_THROWS_WITH(run_training(resume), Catch::Contains("checkpoint.safetensors"));
  RunOptions missing;
  missing.resume_dir = root + "/nowhere";
  REQUIRE_THROWS_WITH(run_training(missing), Catch::Contains("nothing to resume"));
}

// ---- Interrupted runs and refused resumes ----

namespace {

// Every file in a run folder with its bytes: a refused command must leave them all as they were.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename().string()] = slurp(e.path().string());
  return files;
}

// Trains as run_training does, with `observer` on the run's model.
int run_observed(const RunOptions& options, ForwardObserver& observer) {
  Run run(options);
  run.trainer().model().set_observer(&observer);
  return run.execute().exit_code;
}

// Sends `sig` to this process as the `at`-th training step's forward starts (counting the root
// module's forwards in training mode, so evaluation passes do not count).
struct SignalAtStep : ForwardObserver {
  SignalAtStep(int sig, int at) : sig_(sig), at_(at) {}
  void enter(const Module& m) override {
    if (m.path().empty() && m.is_training() && ++seen_ == at_) ::raise(sig_);
  }
  void exit(const Module&, const Tensor&, const Tensor&) override {}
  int sig_, at_, seen_ = 0;
};

RunOptions resume_of(const std::string& dir) {
  RunOptions o;
  o.resume_dir = dir;
  return o;
}

// Rewrites one metadata value of a checkpoint (tensors kept).
void set_checkpoint_metadata(const std::string& path, const std::string& key, const std::string& value) {
  SafeTensors st = load_safetensors(path);
  st.metadata[key] = value;
  save_safetensors(path, st.tensors, st.metadata);
}

pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

}  // namespace

TEST_CASE("resume: a finished run is refused unless --set epochs=N raises the count", "[training][resume]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/finished";
  fs::remove_all(root);
  const std::string run = root + "/run";
  REQUIRE(run_training(options_for(write_config(root), run)) == 0);
  const auto before = snapshot(run);
  REQUIRE_THROWS_WITH(run_training(resume_of(run)),
                      Catch::Contains("the run is finished") && Catch::Contains("--set epochs=N with N > 2"));
  RunOptions same = resume_of(run);
  same.overrides = {"epochs=2"};
  REQUIRE_THROWS_WITH(run_training(same), Catch::Contains("--set epochs=2 is not more than the 2 epochs"));
  REQUIRE(snapshot(run) == before);  // summary.json and the logs untouched

  RunOptions longer = resume_of(run);
  longer.overrides = {"epochs=3"};
  REQUIRE(run_training(longer) == 0);
  REQUIRE(test::read_json_lines(run + "/metrics.jsonl").size() == 3);
  REQUIRE(test::read_json_lines(run + "/steps.jsonl").size() == 24);
  REQUIRE(json::parse(slurp(run + "/config.json"))["epochs"] == 3);
  REQUIRE(read_checkpoint_info(run + "/checkpoint.safetensors").epoch == 3);
}

TEST_CASE("resume: --set epochs=N never lowers the epoch count", "[training][resume]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/fewer";
  fs::remove_all(root);
  const std::string run = root + "/run";
  RunOptions part = options_for(write_config(root), run);
  part.max_steps = 3;
  REQUIRE(run_training(part) == 0);
  const auto before = snapshot(run);
  RunOptions fewer = resume_of(run);
  fewer.overrides = {"epochs=1.5"};
  REQUIRE_THROWS_WITH(run_training(fewer), Catch::Contains("--set epochs=1.5 is fewer than the 2 epochs the run was "
                                                           "started with"));
  REQUIRE(snapshot(run) == before);
  RunOptions same = resume_of(run);
  same.overrides = {"epochs=2"};
  same.max_steps = 4;
  Run resumed(same);
  REQUIRE(resumed.execute().exit_code == 0);
  REQUIRE(slurp(run + "/log.txt").find("raised") == std::string::npos);
  // A Run trains once: a second execute() says so (it blamed another process).
  REQUIRE_THROWS_WITH(resumed.execute(), Catch::Contains("this run has been executed already"));
}

TEST_CASE("resume: other options are refused and a bad checkpoint changes nothing", "[training][resume]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/refused";
  fs::remove_all(root);
  const std::string run = root + "/run", ckpt = run + "/checkpoint.safetensors";
  RunOptions first = options_for(write_config(root), run);
  first.max_steps = 8;
  REQUIRE(run_training(first) == 0);
  auto before = snapshot(run);

  RunOptions o = resume_of(run);
  o.config_path = root + "/config.in.json";
  REQUIRE_THROWS_WITH(run_training(o), Catch::Contains("--config cannot be combined with --resume"));
  o = resume_of(run);
  o.output_dir = root + "/elsewhere";
  REQUIRE_THROWS_WITH(run_training(o), Catch::Contains("--output cannot be combined with --resume"));
  o = resume_of(run);
  o.overrides = {"epochs=3", "optimizer.lr=1"};
  REQUIRE_THROWS_WITH(run_training(o), Catch::Contains("--set optimizer.lr=... cannot change a run being resumed"));
  o = resume_of(run);
  o.max_steps = 5;
  REQUIRE_THROWS_WITH(run_training(o), Catch::Contains("--max-steps 5 is already reached"));
  REQUIRE(snapshot(run) == before);

  // Parseable but invalid metadata: refused before metrics.jsonl or steps.jsonl is touched.
  const std::string good = slurp(ckpt);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"epoch", "-5"}, {"step", "-100"}, {"step", "5"}, {"epoch", "1xyz"}, {"config", "[1,2]"}}) {
    INFO(key << " = " << value);
    std::ofstream(ckpt, std::ios::binary) << good;
    set_checkpoint_metadata(ckpt, key, value);
    before = snapshot(run);
    REQUIRE_THROWS_WITH(run_training(resume_of(run)), Catch::Contains("checkpoint '" + ckpt + "'"));
    REQUIRE(snapshot(run) == before);
  }

  // A valid resume removes the temp files of killed writers.
  std::ofstream(ckpt, std::ios::binary) << good;
  const std::string stale = run + "/checkpoint.safetensors.tmp." + std::to_string(dead_pid());
  std::ofstream(stale) << "torn";
  REQUIRE(run_training(resume_of(run)) == 0);
  REQUIRE_FALSE(fs::exists(stale));
  REQUIRE_THAT(slurp(run + "/log.txt"), Catch::Contains("removed temporary files left by killed runs"));
}

TEST_CASE("fresh run: a non-empty folder is refused unless --overwrite", "[training]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/nonempty";
  fs::remove_all(root);
  const std::string run = root + "/run", config = write_config(root);
  RunOptions failed = options_for(config, run);
  failed.max_steps = 4;  // a run that stopped before its first checkpoint
  REQUIRE(run_training(failed) == 0);
  std::ofstream(run + "/notes.txt") << "mine";
  const auto before = snapshot(run);
  REQUIRE_THROWS_WITH(run_training(options_for(config, run)),
                      Catch::Contains("is not empty") && Catch::Contains("--overwrite"));
  REQUIRE(snapshot(run) == before);
  RunOptions again = options_for(config, run);
  again.overwrite = true;
  REQUIRE(run_training(again) == 0);
  const auto steps = test::read_json_lines(run + "/steps.jsonl");
  REQUIRE(steps.size() == 16);  // steps 0..15 once, not 0..3 twice
  for (size_t i = 0; i < steps.size(); ++i) REQUIRE(steps[i]["step"] == static_cast<int64_t>(i));
  REQUIRE(slurp(run + "/notes.txt") == "mine");  // only the run's own files are replaced

  // Two runs never write into one folder at the same time.
  fs::create_directories(root + "/busy");
  const RunFolderLock other(root + "/busy");
  REQUIRE_THROWS_WITH(run_training(options_for(config, root + "/busy")),
                      Catch::Contains("is in use by another run of this process"));
}

TEST_CASE("signals: SIGINT/SIGTERM checkpoint at a step boundary and the resumed run is bit-exact",
          "[training][resume]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/signals";
  fs::remove_all(root);
  const std::string config = write_config(root), a = root + "/a", b = root + "/b";
  REQUIRE(run_training(options_for(config, a)) == 0);
  {
    SignalAtStep at(SIGINT, 5);  // during step 4 (0-based): stops after 5 steps, mid-epoch 1
    REQUIRE(run_observed(options_for(config, b), at) == 130);
  }
  CheckpointInfo info = read_checkpoint_info(b + "/checkpoint.safetensors");
  REQUIRE(info.epoch == 0);
  REQUIRE(info.step == 5);
  REQUIRE(info.epoch_seen == 5 * 64);
  REQUIRE_THAT(slurp(b + "/log.txt"), Catch::Contains("stopped by SIGINT after step 5 (epoch 1, step 5 of 8)"));
  {
    SignalAtStep at(SIGTERM, 6);  // steps 5..10: stops after step 11, mid-epoch 2
    REQUIRE(run_observed(resume_of(b), at) == 143);
  }
  REQUIRE(read_checkpoint_info(b + "/checkpoint.safetensors").step == 11);
  REQUIRE(run_training(resume_of(b)) == 0);
  for (const auto& e : fs::directory_iterator(b))
    REQUIRE(e.path().filename().string().find(".tmp.") == std::string::npos);

  REQUIRE(slurp(a + "/steps.jsonl") == slurp(b + "/steps.jsonl"));
  REQUIRE(safetensors_payload_sha256(a + "/model.safetensors") == safetensors_payload_sha256(b + "/model.safetensors"));
  const auto ma = test::read_json_lines(a + "/metrics.jsonl"), mb = test::read_json_lines(b + "/metrics.jsonl");
  REQUIRE(ma.size() == 2);
  REQUIRE(mb.size() == 2);
  for (size_t e = 0; e < 2; ++e)
    for (const char* key : {"epoch", "step", "train_loss", "train_acc", "test_acc", "test_acc_tta", "lr"})
      REQUIRE(ma[e][key] == mb[e][key]);
}

TEST_CASE("training: a model that does not fit the data is refused before the run folder is made", "[training]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/fatal";
  fs::remove_all(root);
  const std::string config = write_config(root);
  json c = json::parse(slurp(config));
  c["model"]["layers"][1]["num_features"] = 9;  // the conv before it has 8 channels
  std::ofstream(config) << c.dump();
  // The startup pass of one image through the model finds it: nothing is written.
  REQUIRE_THROWS_WITH(run_training(options_for(config, root + "/run")), Catch::Contains("BatchNorm2d 9"));
  REQUIRE(!fs::exists(root + "/run"));
}

TEST_CASE("resume: a run ended part-way through an epoch (fractional epochs, --max-steps) goes on bit-exact",
          "[training][resume]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/partial";
  fs::remove_all(root);
  const std::string config = write_config(root), a = root + "/a", b = root + "/b", c = root + "/c";
  REQUIRE(run_training(options_for(config, a)) == 0);
  RunOptions part = options_for(config, b);
  part.overrides = {"epochs=1.5"};  // 12 steps; the schedule is in epochs, so its steps are a's
  REQUIRE(run_training(part) == 0);
  REQUIRE_THROWS_WITH(run_training(resume_of(b)), Catch::Contains("the run is finished"));
  RunOptions longer = resume_of(b);
  longer.overrides = {"epochs=2"};
  REQUIRE(run_training(longer) == 0);
  RunOptions limited = options_for(config, c);
  limited.max_steps = 5;
  REQUIRE(run_training(limited) == 0);
  const CheckpointInfo at5 = read_checkpoint_info(c + "/checkpoint.safetensors");
  REQUIRE(at5.step == 5);
  REQUIRE(at5.evaluated);
  REQUIRE(run_training(resume_of(c)) == 0);
  for (const std::string& run : {b, c}) {
    INFO(run);
    REQUIRE(slurp(a + "/steps.jsonl") == slurp(run + "/steps.jsonl"));
    REQUIRE(safetensors_payload_sha256(a + "/model.safetensors") ==
            safetensors_payload_sha256(run + "/model.safetensors"));
    REQUIRE(test::read_json_lines(run + "/metrics.jsonl").size() == 2);  // the partial epoch's record replaced
  }
}

// ---- Checkpoints written in the background (train/checkpoint_writer.h) ----

namespace {

// Calls `action` as the `at`-th training step's forward starts (as SignalAtStep counts).
struct AtStep : ForwardObserver {
  AtStep(int at, std::function<void()> action) : at_(at), action_(std::move(action)) {}
  void enter(const Module& m) override {
    if (m.path().empty() && m.is_training() && ++seen_ == at_) action_();
  }
  void exit(const Module&, const Tensor&, const Tensor&) override {}
  int at_, seen_ = 0;
  std::function<void()> action_;
};

std::set<std::string> checkpoint_files(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find("checkpoint") == 0) names.insert(name);
  }
  return names;
}

}  // namespace

TEST_CASE("checkpoints by cadence: a stopped run leaves complete ones, kept in order, and resumes bit-exact",
          "[training][resume]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/cadence";
  fs::remove_all(root);
  const std::string config = write_config(root), a = root + "/a", b = root + "/b";
  RunOptions oa = options_for(config, a), ob = options_for(config, b);
  oa.overrides = ob.overrides = {"checkpoint.every_steps=2", "checkpoint.keep=3"};
  REQUIRE(run_training(oa) == 0);
  // The throughput counts every image trained, also those of steps a checkpoint came between.
  const json summary = json::parse(slurp(a + "/summary.json"));
  const double trained = summary["images_per_s"].get<double>() * summary["train_seconds"].get<double>();
  REQUIRE(std::abs(trained - 16 * 64) < 1e-6 * 16 * 64);
  {
    SignalAtStep at(SIGINT, 5);  // checkpoints at steps 2 and 4 by cadence, then the stop's at 5
    REQUIRE(run_observed(ob, at) == 130);
  }
  REQUIRE_THAT(slurp(b + "/log.txt"), Catch::Contains("wrote " + b + "/checkpoint.safetensors at step 5"));
  REQUIRE(checkpoint_files(b) == std::set<std::string>{"checkpoint.safetensors", "checkpoint.step-2.safetensors",
                                                      "checkpoint.step-4.safetensors"});
  // Each is complete: read_checkpoint_info checks every tensor against the recorded CRC-32.
  REQUIRE(read_checkpoint_info(b + "/checkpoint.safetensors").step == 5);
  REQUIRE(read_checkpoint_info(b + "/checkpoint.step-4.safetensors").step == 4);
  REQUIRE(read_checkpoint_info(b + "/checkpoint.step-2.safetensors").step == 2);
  REQUIRE(run_training(resume_of(b)) == 0);
  REQUIRE(slurp(a + "/steps.jsonl") == slurp(b + "/steps.jsonl"));
  REQUIRE(safetensors_payload_sha256(a + "/model.safetensors") == safetensors_payload_sha256(b + "/model.safetensors"));
  REQUIRE(checkpoint_files(a) == std::set<std::string>{"checkpoint.safetensors", "checkpoint.step-12.safetensors",
                                                      "checkpoint.step-14.safetensors"});
  REQUIRE(checkpoint_files(b) == checkpoint_files(a));
  REQUIRE(safetensors_payload_sha256(a + "/checkpoint.safetensors") ==
          safetensors_payload_sha256(b + "/checkpoint.safetensors"));
}

TEST_CASE("checkpoints by cadence: a failed background write ends the run with an error naming the file",
          "[training]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/write_error";
  fs::remove_all(root);
  const std::string run = root + "/run", ckpt = run + "/checkpoint.safetensors";
  RunOptions o = options_for(write_config(root), run);
  o.overrides = {"checkpoint.every_steps=2"};
  {
    // Once the run has started, a folder where the checkpoint goes: no file can be renamed over
    // it, whoever runs the test. The write of step 2's fails in the background and ends the run
    // at the next checkpoint.
    AtStep at(1, [&] { fs::create_directories(ckpt + "/in_the_way"); });
    REQUIRE_THROWS_WITH(run_observed(o, at), Catch::Contains("cannot write safetensors file '" + ckpt + "'") &&
                                                 Catch::Contains("Is a directory"));
  }
  REQUIRE_THAT(slurp(run + "/log.txt"), Catch::Contains("error: cannot write safetensors file '" + ckpt + "'"));
  REQUIRE_FALSE(fs::exists(run + "/summary.json"));
}
