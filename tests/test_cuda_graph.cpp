// CUDA graphs: a captured graph replays with the values written before each replay; its memory
// is its own until it is dropped; a capture that synchronizes or allocates behind the allocator's
// back fails, names the call and runs nothing; StepGraph falls back to eager steps; a step's
// persistent tensors keep their addresses; and whole training runs give the same bits graphed and
// eager (BatchNorm + SGD; GroupNorm + LayerNorm + GELU + AdamW; lookahead and a part-way freeze,
// steps of several kinds; float16 with loss scaling that skips steps), also resumed, and so do
// steps of several micro-batches (their reduction's collectives in the graph; dropout too).
#include <filesystem>
#include <fstream>
#include <set>

#include "core/allocator.h"
#include "core/cuda_graph.h"
#include "core/safetensors.h"
#include "core/tensor_ops.h"
#include "distributed/communicator.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/step_graph.h"
#include "train/run.h"
#include "train/trainer.h"
#include "test_util.h"

#ifdef MINIDL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void upload(Tensor& dst, float value) {
  const std::vector<float> v(static_cast<size_t>(dst.numel()), value);
  copy_bytes_async(dst.raw_data(), dst.device(), v.data(), Device::cpu(), v.size() * sizeof(float));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A small net on 512 training images, 8 steps of 64 per epoch, on the GPU. `norm` picks the
// variant: BatchNorm2d with ReLU and SGD; the same with a Linear bias, lookahead every 2 steps and
// that bias frozen from epoch 1 (steps of several kinds, each its own graph); or GroupNorm,
// LayerNorm and GELU with AdamW and gradient clipping (its factor decided on the device). Float32
// NCHW, named ("auto" would choose bf16 channels-last on the GPU); a "_fp16" suffix trains in
// float16 channels-last from a loss scale of 2^24, which overflows the first steps' gradients:
// the scaler skips them on the device.
std::string write_config(const std::string& dir, std::string norm) {
  const std::string fp16_suffix = "_fp16";
  const bool fp16 = norm.size() > fp16_suffix.size() &&
                    norm.compare(norm.size() - fp16_suffix.size(), fp16_suffix.size(), fp16_suffix) == 0;
  if (fp16) norm.resize(norm.size() - fp16_suffix.size());
  fs::create_directories(dir);
  json c = json::parse(R"({
    "seed": 5, "device": "cuda", "precision": "fp32", "memory_format": "contiguous", "epochs": 2, "batch_size": 64,
    "data": {"train_limit": 512, "augment": {"crop_padding": 2, "flip": true, "cutout": 4}},
    "loss": {"label_smoothing": 0.1},
    "schedule": {"type": "piecewise_linear", "epochs": [0, 1, 2], "factors": [0.5, 1, 0.2]},
    "eval": {"tta": "flip_translate", "batch_size": 3000},
    "output": {"progress": false}
  })");
  c["data"]["dir"] = test::data_dir();
  if (norm == "batchnorm" || norm == "batchnorm_lookahead_freeze" || norm == "batchnorm_dropout") {
    c["model"]["layers"] = json::parse(R"([
      {"type": "Conv2d", "in_channels": 3, "out_channels": 16, "kernel_size": 3, "padding": 1, "bias": false},
      {"type": "BatchNorm2d", "num_features": 16, "relu": true},
      {"type": "MaxPool2d", "kernel_size": 2},
      {"type": "Residual", "body": [
        {"type": "Conv2d", "in_channels": 16, "out_channels": 16, "kernel_size": 3, "padding": 1, "bias": false},
        {"type": "BatchNorm2d", "num_features": 16, "relu": true}]},
      {"type": "MaxPool2d", "kernel_size": 4},
      {"type": "GlobalMaxPool2d"},
      {"type": "Linear", "in_features": 16, "out_features": 10, "bias": false},
      {"type": "Scale", "value": 0.125}])");
    c["optimizer"] = json::parse(R"({"type": "SGD", "lr": 0.05, "momentum": 0.9, "nesterov": true,
                                     "weight_decay": 5e-4})");
    if (norm == "batchnorm_lookahead_freeze") {
      c["model"]["layers"][6]["bias"] = true;
      c["lookahead"] = json::parse(R"({"start_epochs": 0, "every_n_steps": 2})");
      c["freeze"] = json::parse(R"([{"match": "6.bias", "from_epoch": 1}])");
    }
    if (norm == "batchnorm_dropout")
      c["model"]["layers"].insert(c["model"]["layers"].begin() + 6, json::parse(R"({"type": "Dropout", "p": 0.25})"));
  } else {
    c["model"]["layers"] = json::parse(R"([
      {"type": "Conv2d", "in_channels": 3, "out_channels": 16, "kernel_size": 3, "padding": 1},
      {"type": "GroupNorm", "num_groups": 4, "num_channels": 16},
      {"type": "GELU"},
      {"type": "MaxPool2d", "kernel_size": 2},
      {"type": "Conv2d", "in_channels": 16, "out_channels": 16, "kernel_size": 3, "padding": 1},
      {"type": "LayerNorm", "normalized_shape": [16, 16, 16], "relu": true},
      {"type": "GlobalAvgPool2d"},
      {"type": "Linear", "in_features": 16, "out_features": 10}])");
    c["optimizer"] = json::parse(R"({"type": "AdamW", "lr": 0.003, "weight_decay": 0.01})");
    c["grad_clip"] = 0.5;
  }
  if (fp16) {
    c["precision"] = "fp16";
    c["memory_format"] = "channels_last";
    c["grad_scaler"] = json::parse(R"({"init_scale": 16777216, "growth_interval": 4})");
  }
  const std::string path = dir + "/config.in.json";
  std::ofstream(path) << c.dump(2);
  return path;
}

int train(const std::string& config, const std::string& out, bool graph, int64_t max_steps = 0,
          const std::string& dist = "auto", const std::vector<std::string>& overrides = {}) {
  RunOptions o;
  o.config_path = config;
  o.output_dir = out;
  o.overrides = overrides;
  o.overrides.push_back(graph ? "cuda_graph=true" : "cuda_graph=false");
  o.max_steps = max_steps;
  o.dist = dist;
  return run_training(o);
}

// Trains `config` eagerly, graphed, and graphed for 8 steps then resumed, in dir/eager, dir/graph
// and dir/half, and requires the three to log the same steps and end with the same weights.
void require_graphed_equals_eager(const std::string& config, const std::string& dir, const std::string& dist = "auto",
                                  const std::vector<std::string>& overrides = {}) {
  REQUIRE(train(config, dir + "/eager", false, 0, dist, overrides) == 0);
  REQUIRE(train(config, dir + "/graph", true, 0, dist, overrides) == 0);
  REQUIRE(train(config, dir + "/half", true, 8, dist, overrides) == 0);
  RunOptions resume;
  resume.resume_dir = dir + "/half";
  resume.dist = dist;
  REQUIRE(run_training(resume) == 0);

  const std::string steps = slurp(dir + "/eager/steps.jsonl");
  REQUIRE(!steps.empty());
  REQUIRE(steps == slurp(dir + "/graph/steps.jsonl"));
  REQUIRE(steps == slurp(dir + "/half/steps.jsonl"));
  const std::string hash = safetensors_payload_sha256(dir + "/eager/model.safetensors");
  REQUIRE(hash == safetensors_payload_sha256(dir + "/graph/model.safetensors"));
  REQUIRE(hash == safetensors_payload_sha256(dir + "/half/model.safetensors"));
}

}  // namespace

TEST_CASE("a CUDA graph replays its work with the values written before each replay", "[cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  Tensor x = Tensor::zeros({1000}, DType::Float32, Device::cuda());
  Tensor y;
  CudaGraph graph;
  REQUIRE(graph.capture([&] { y = add(mul(x, 2.f), x); }) == "");
  REQUIRE(graph.captured());
  const size_t mallocs = device_memory_stats().device_mallocs;
  for (int r = 1; r <= 3; ++r) {
    upload(x, static_cast<float>(r));
    graph.replay();
    REQUIRE(y.to_vector() == std::vector<float>(1000, 3.f * static_cast<float>(r)));
  }
  REQUIRE(device_memory_stats().device_mallocs == mallocs);
}

TEST_CASE("a CUDA graph's memory serves nothing else until the graph is dropped", "[cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  Tensor x = Tensor::full({4096}, 1.f, Device::cuda());
  Tensor y;
  void* scratch = nullptr;
  CudaGraph graph;
  REQUIRE(graph.capture([&] {
            Tensor t = mul(x, 3.f);  // freed inside the capture: back to the graph's pool
            scratch = t.raw_data();
            y = add(t, x);
          }) == "");
  std::vector<Tensor> eager;
  std::set<void*> seen;
  for (int i = 0; i < 8; ++i) {
    eager.push_back(Tensor::empty({4096}, DType::Float32, Device::cuda()));
    seen.insert(eager.back().raw_data());
  }
  REQUIRE(seen.count(scratch) == 0);
  REQUIRE(seen.count(y.raw_data()) == 0);
  graph.replay();
  REQUIRE(y.to_vector() == std::vector<float>(4096, 4.f));
  graph.reset();
  bool reused = false;
  for (int i = 0; i < 8 && !reused; ++i) {
    eager.push_back(Tensor::empty({4096}, DType::Float32, Device::cuda()));
    reused = eager.back().raw_data() == scratch;
  }
  REQUIRE(reused);
}

TEST_CASE("a capture that synchronizes with the host fails, names the call, and runs nothing", "[cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  Tensor x = Tensor::full({256}, 2.f, Device::cuda());
  Tensor y = Tensor::zeros({256}, DType::Float32, Device::cuda());
  CudaGraph graph;
  const std::string why = graph.capture([&] {
    axpy_(y, 1.f, x);
    (void)y.to_vector();  // a host copy: cannot be part of a graph
  });
  INFO(why);
  REQUIRE_THAT(why, Catch::Contains("CUDA error") && Catch::Contains("runtime.cu"));
  REQUIRE_FALSE(graph.captured());
  REQUIRE(y.to_vector() == std::vector<float>(256, 0.f));  // the captured axpy never ran
  axpy_(y, 1.f, x);                                         // and eager work is unaffected
  REQUIRE(y.to_vector() == std::vector<float>(256, 2.f));
}

TEST_CASE("a capture that uploads from the host fails and names why", "[cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  // A replay would read the upload's staging slot after later uploads rewrote it.
  Tensor y = Tensor::zeros({16}, DType::Float32, Device::cuda());
  CudaGraph graph;
  const std::string why = graph.capture([&] { upload(y, 3.f); });
  INFO(why);
  REQUIRE_THAT(why, Catch::Contains("host-to-device copy inside a CUDA graph capture"));
  REQUIRE_FALSE(graph.captured());
  upload(y, 3.f);
  REQUIRE(y.to_vector() == std::vector<float>(16, 3.f));
}

TEST_CASE("a capture in which a library allocates device memory of its own fails", "[cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  // As cuDNN 9's cudnnAddTensor may do: a cudaMalloc (and cudaFree) behind the caller's back. A
  // graph replaying into that memory after it was freed would compute wrong results; the
  // thread-local capture refuses the call and the capture fails, even if the library swallows
  // the error.
  Tensor x = Tensor::full({256}, 2.f, Device::cuda());
  Tensor y = Tensor::zeros({256}, DType::Float32, Device::cuda());
  CudaGraph graph;
  cudaError_t inside = cudaSuccess;
  const std::string why = graph.capture([&] {
    axpy_(y, 1.f, x);
    void* scratch = nullptr;
    inside = cudaMalloc(&scratch, 1 << 20);
    if (inside == cudaSuccess) (void)cudaFree(scratch);
  });
  INFO(why);
  REQUIRE(inside != cudaSuccess);
  REQUIRE_THAT(why, Catch::Contains("cudaStreamEndCapture"));
  REQUIRE_FALSE(graph.captured());
  REQUIRE(y.to_vector() == std::vector<float>(256, 0.f));
  axpy_(y, 1.f, x);
  REQUIRE(y.to_vector() == std::vector<float>(256, 2.f));
#endif
}

TEST_CASE("StepGraph warms up, replays, and falls back to eager steps when the capture fails", "[cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  Tensor x = Tensor::full({64}, 1.f, Device::cuda());
  Tensor acc = Tensor::zeros({64}, DType::Float32, Device::cuda());
  int host_runs = 0;
  StepGraph good("test step", true, 1);
  for (int i = 0; i < 4; ++i) good.run([&] { ++host_runs; axpy_(acc, 1.f, x); }, [] {});
  REQUIRE(good.mode() == "CUDA graph");
  REQUIRE(host_runs == 2);  // the warm-up call and the capture; the replays run no host code
  REQUIRE(acc.to_vector() == std::vector<float>(64, 4.f));

  int discarded = 0;
  host_runs = 0;
  StepGraph bad("test step", true, 1);
  for (int i = 0; i < 3; ++i)
    bad.run([&] { ++host_runs; axpy_(acc, 1.f, x); (void)acc.to_vector(); }, [&] { ++discarded; });
  REQUIRE_THAT(bad.mode(), Catch::Contains("capture failed"));
  REQUIRE(discarded == 1);
  REQUIRE(host_runs == 4);  // warm-up, the failed capture, its eager rerun, one more eager step
  REQUIRE(acc.to_vector() == std::vector<float>(64, 7.f));
}

TEST_CASE("a training step's persistent tensors keep their addresses from step to step", "[graph][training]") {
  // A CUDA graph replays the addresses of its capture: every tensor that outlives a step (each
  // parameter, its gradient, the optimizer's state and the model's buffers) must stay where it was,
  // or a replay reads a block the capture freed. Checked on the CPU, where the same code moves the
  // same tensors: the GroupNorm/LayerNorm net has biases, whose gradients once moved every step.
  MINIDL_REQUIRE_DATA();
  test::TempDir tmp("minidl_graph_addresses");
  for (const std::string norm : {"batchnorm", "groupnorm_layernorm_gelu", "batchnorm_lookahead_freeze",
                                 "batchnorm_fp16", "groupnorm_layernorm_gelu_fp16", "batchnorm_lookahead_freeze_fp16"}) {
    INFO(norm);
    std::ifstream in(write_config(tmp.path.string() + "/" + norm, norm));
    json c = json::parse(in);
    c["device"] = "cpu";
    Trainer trainer(parse_train_config(c), Device::cpu());
    auto addresses = [&] {
      std::vector<const void*> a;
      for (const auto& [name, t] : trainer.model().state_dict()) a.push_back(t.raw_data());
      for (const auto& [name, p] : trainer.model().named_parameters()) {
        INFO(name);
        REQUIRE(p.grad().defined());
        a.push_back(p.grad().raw_data());
      }
      for (const auto& [name, t] : trainer.optimizer().state_tensors()) a.push_back(t.raw_data());
      return a;
    };
    Trainer::StepRecord record{};
    trainer.train_loader().start_epoch(0);
    for (int64_t step = 0; step < 2; ++step) REQUIRE(trainer.train_step(step, &record));
    const std::vector<const void*> before = addresses();
    for (int64_t step = 2; step < 5; ++step) {  // each step: an allocator may hand a block back in turn
      REQUIRE(trainer.train_step(step, &record));
      REQUIRE(addresses() == before);
    }
  }
}

TEST_CASE("graphed training gives the bits of eager training, and a graphed resume too", "[cuda][graph][training]") {
  MINIDL_REQUIRE_CUDA();
  MINIDL_REQUIRE_DATA();
  for (const std::string norm : {"batchnorm", "groupnorm_layernorm_gelu", "batchnorm_lookahead_freeze",
                                 "batchnorm_fp16", "groupnorm_layernorm_gelu_fp16", "batchnorm_lookahead_freeze_fp16"}) {
    INFO(norm);
    test::TempDir tmp("graph_" + norm);
    const std::string dir = tmp.path.string();
    require_graphed_equals_eager(write_config(dir, norm), dir);
    const std::string log = slurp(dir + "/graph/log.txt");
    REQUIRE_THAT(log, Catch::Contains("training step: CUDA graph"));
    if (norm.rfind("batchnorm_lookahead_freeze", 0) == 0) REQUIRE_THAT(log, Catch::Contains("kinds of step)"));
    REQUIRE_THAT(slurp(dir + "/eager/log.txt"), Catch::Contains("training step: eager"));
    // Evaluation (graphed on full batches, eager on the last short one) counts the same.
    std::ifstream me(dir + "/eager/metrics.jsonl"), mg(dir + "/graph/metrics.jsonl");
    std::string le, lg;
    while (std::getline(me, le) && std::getline(mg, lg)) {
      const json a = json::parse(le), b = json::parse(lg);
      REQUIRE(a["test_acc"] == b["test_acc"]);
      REQUIRE(a["test_acc_tta"] == b["test_acc_tta"]);
      REQUIRE(a["train_acc"] == b["train_acc"]);
      REQUIRE(a.value("loss_scale", 0.0) == b.value("loss_scale", 0.0));
      REQUIRE(a.value("skipped_steps", 0) == b.value("skipped_steps", 0));
    }
    if (norm.find("fp16") != std::string::npos) {
      // Some steps were skipped and some taken, so both sides of the device's decision replayed.
      const json last = json::parse(lg);
      INFO(last.dump());
      REQUIRE(last["skipped_steps"].get<int64_t>() > 0);
      REQUIRE(last["skipped_steps"].get<int64_t>() < last["step"].get<int64_t>());
    }
  }
}

TEST_CASE("a step of several micro-batches replays as a CUDA graph, collectives included, with the eager bits",
          "[cuda][graph][training][dist]") {
  MINIDL_REQUIRE_CUDA();
  MINIDL_REQUIRE_DATA();
  std::vector<std::string> backends{"single"};
  if (built_with_nccl()) backends.push_back("nccl");  // a world of one: NCCL's calls in the graph
  for (const std::string norm : {"batchnorm_dropout", "batchnorm_lookahead_freeze", "groupnorm_layernorm_gelu_fp16"})
    for (const std::string& backend : backends) {
      INFO(norm << " over " << backend);
      test::TempDir tmp("graph_micro_" + norm + "_" + backend);
      const std::string dir = tmp.path.string();
      require_graphed_equals_eager(write_config(dir, norm), dir, backend, {"accumulate_steps=2"});
      REQUIRE_THAT(slurp(dir + "/graph/log.txt"), Catch::Contains("training step: CUDA graph"));
      REQUIRE_THAT(slurp(dir + "/eager/log.txt"), Catch::Contains("training step: eager"));
      REQUIRE_THAT(slurp(dir + "/eager/log.txt"),
                   Catch::Contains("data parallel: world size 1 (" + backend + "), 2 micro-batches"));
    }
}
