// precision "bf16" and "fp16": every layer runs a half input storage-rounded (the float32 op on
// the rounded input, its output rounded once; gradients through the same casts), Conv2d and
// Linear cast their float32 weights and send float32 gradients back, the loss scaler's rule and
// state (PyTorch GradScaler), and training runs in both types on the CPU: the same bits twice and
// after a resume, skipped float16 steps on overflow.
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/settings.h"
#include "core/tensor.h"
#include "core/tensor_ops.h"
#include "json_lines.h"
#include "layers/activation/activation.h"
#include "layers/conv/conv2d.h"
#include "layers/norm/norm_path.h"
#include "layers/registry.h"
#include "optim/grad_scaler.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/run.h"
#include "train/trainer.h"

using namespace minidl;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The stored 16-bit patterns of a half tensor.
std::vector<uint16_t> half_bits(const Tensor& t) {
  std::vector<uint16_t> out;
  if (t.dtype() == DType::BFloat16)
    for (bf16 v : t.values<bf16>()) out.push_back(v.bits);
  else
    for (fp16 v : t.values<fp16>()) out.push_back(v.bits);
  return out;
}

// Rounds every float32 parameter of `layer` to `d` in place, so that running the layer in float32
// on half-valued inputs rounds nothing the half run does not round.
void round_parameters(Module& layer, DType d) {
  for (auto& [name, p] : layer.named_parameters()) p.copy_(p.to(d).to(DType::Float32));
}

void clear_grads(Module& layer) {
  for (auto& [name, p] : layer.named_parameters()) p.set_grad(Tensor());
}

}  // namespace

TEST_CASE("every layer runs a half input storage-rounded: float32 inside, rounded once, gradients alike",
          "[half][precision]") {
  struct Case {
    const char* spec;
    Shape shape;
    bool casts_weights;  // Conv2d and Linear: their weight gradients pass through the half type
  };
  const Case cases[] = {
      {R"({"type": "Conv2d", "in_channels": 2, "out_channels": 3, "kernel_size": 3, "padding": 1})", {2, 2, 5, 4}, true},
      {R"({"type": "Linear", "in_features": 4, "out_features": 3})", {2, 2, 5, 4}, true},
      {R"({"type": "BatchNorm2d", "num_features": 2, "relu": true})", {2, 2, 5, 4}, false},
      {R"({"type": "GroupNorm", "num_groups": 1, "num_channels": 2})", {2, 2, 5, 4}, false},
      {R"({"type": "LayerNorm", "normalized_shape": [5, 4]})", {2, 2, 5, 4}, false},
      {R"({"type": "ReLU"})", {2, 2, 5, 4}, false},
      {R"({"type": "GELU"})", {2, 2, 5, 4}, false},
      {R"({"type": "MaxPool2d", "kernel_size": 2})", {2, 2, 5, 4}, false},
      {R"({"type": "GlobalAvgPool2d"})", {2, 2, 5, 4}, false},
      {R"({"type": "GlobalMaxPool2d"})", {2, 2, 5, 4}, false},
      {R"({"type": "Flatten"})", {2, 2, 5, 4}, false},
      {R"({"type": "Scale", "value": 0.3})", {2, 2, 5, 4}, false},
      // A body whose output needs no rounding (ReLU of a half value is one), so the residual's one
      // rounding is the add's, as in the float32 reference.
      {R"({"type": "Residual", "body": [{"type": "ReLU"}]})", {2, 2, 5, 4}, false},
  };
  for (DType d : {DType::BFloat16, DType::Float16}) {
    for (const Case& c : cases) {
      INFO(c.spec << " in " << dtype_name(d));
      auto layer = build_layer(json::parse(c.spec), "layer");
      round_parameters(*layer, d);
      const Tensor x0 = test::random_tensor(c.shape, 11, -3.f, 3.f);
      const Tensor dy_values = test::random_tensor((*layer)(x0.detach()).shape(), 12);

      // The half run: the input rounded to d, the layer on it, the gradient seeded in d.
      Tensor xa = x0.clone();
      xa.set_requires_grad(true);
      const Tensor ya = (*layer)(xa.to(d));
      REQUIRE(ya.dtype() == d);
      clear_grads(*layer);
      autograd::backward(ya, dy_values.to(d));
      std::vector<std::vector<float>> grads_a;
      for (auto& [name, p] : layer->named_parameters()) grads_a.push_back(p.grad().to_vector());

      // The reference: the float32 layer on the rounded input, its output and gradient rounded.
      Tensor xb = x0.clone();
      xb.set_requires_grad(true);
      const Tensor yb = (*layer)(xb.to(d).to(DType::Float32)).to(d);
      clear_grads(*layer);
      autograd::backward(yb, dy_values.to(d));
      REQUIRE(half_bits(ya) == half_bits(yb));
      REQUIRE(xa.grad().to_vector() == xb.grad().to_vector());
      size_t i = 0;
      for (auto& [name, p] : layer->named_parameters()) {
        INFO("gradient of " << name);
        REQUIRE(p.grad().dtype() == DType::Float32);
        const std::vector<float> want = c.casts_weights ? p.grad().to(d).to_vector() : p.grad().to_vector();
        REQUIRE(grads_a[i++] == want);
      }
    }
  }
}

TEST_CASE("half ops check their operands", "[half][precision]") {
  const Tensor x = Tensor::zeros({1, 2, 3, 3}, DType::BFloat16);
  CHECK_THROWS_WITH(add(x, Tensor::zeros({1, 2, 3, 2}, DType::Float16)), Contains("add: shapes"));
  auto conv = build_layer(json::parse(R"({"type": "Conv2d", "in_channels": 2, "out_channels": 2, "kernel_size": 1})"),
                          "layer");
  // The module casts its weight; the op itself wants one dtype for all its operands.
  CHECK((*conv)(x).dtype() == DType::BFloat16);
  CHECK_THROWS_WITH(conv2d(x, Tensor::zeros({2, 2, 1, 1}), Tensor(), Size2d(1), Size2d(0)),
                    Contains("conv2d: a bfloat16 input needs a weight and bias of that dtype"));
  CHECK_THROWS_WITH(conv2d(Tensor::zeros({1, 2, 3, 3}), Tensor::zeros({2, 2, 1, 1}, DType::BFloat16), Tensor(),
                           Size2d(1), Size2d(0)),
                    Contains("conv2d: a float32 input needs a float32 weight and bias"));
}

TEST_CASE("autocast: Conv2d and Linear in the autocast type, GroupNorm and LayerNorm in float32, add promotes",
          "[half][precision]") {
  const Tensor x = test::random_tensor({2, 4, 6, 6}, 51, -2.f, 2.f);
  auto conv = build_layer(json::parse(R"({"type": "Conv2d", "in_channels": 4, "out_channels": 4, "kernel_size": 3,
                                          "padding": 1, "bias": true})"), "conv");
  auto linear = build_layer(json::parse(R"({"type": "Linear", "in_features": 6, "out_features": 3})"), "linear");
  auto bn = build_layer(json::parse(R"({"type": "BatchNorm2d", "num_features": 4})"), "bn");
  auto gn = build_layer(json::parse(R"({"type": "GroupNorm", "num_groups": 2, "num_channels": 4})"), "gn");
  auto ln = build_layer(json::parse(R"({"type": "LayerNorm", "normalized_shape": [6, 6]})"), "ln");
  CHECK(autocast_dtype() == DType::Float32);
  CHECK((*conv)(x).dtype() == DType::Float32);  // no scope: nothing is cast
  for (DType d : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(d));
    const AutocastGuard autocast(d);
    CHECK(autocast_dtype() == d);
    const Tensor y = (*conv)(x);  // a float32 input is cast too
    REQUIRE(y.dtype() == d);
    const Conv2d& c = dynamic_cast<const Conv2d&>(*conv);
    CHECK(half_bits(y) == half_bits(conv2d(x.to(d), c.weight.to(d), c.bias.to(d), Size2d(1), Size2d(1))));
    CHECK((*linear)(x).dtype() == d);
    CHECK((*bn)(y).dtype() == d);
    CHECK((*gn)(y).dtype() == DType::Float32);
    CHECK((*ln)(y).dtype() == DType::Float32);
    CHECK((*gn)(y).to_vector() == (*gn)(y.to(DType::Float32)).to_vector());
    CHECK(relu(y).dtype() == d);
    const Tensor sum = add(y, x);  // half + float32 is float32
    CHECK(sum.dtype() == DType::Float32);
    CHECK(sum.to_vector() == add(y.to(DType::Float32), x).to_vector());
    CHECK(add(y, y).dtype() == d);
  }
  CHECK(autocast_dtype() == DType::Float32);  // the guard restores the state
}

namespace {

// One step of the scaler as the trainer runs it: unscale a gradient (inf where `overflow`), update.
void scaler_step(GradScaler& s, bool overflow, Device device) {
  s.unscale({Tensor::from_vector(std::vector<float>{1.f, overflow ? INFINITY : 2.f}, {2}, device)});
  s.update();
}

std::vector<Device> scaler_devices() {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  return devices;
}

}  // namespace

TEST_CASE("grad scaler: PyTorch GradScaler's growth and backoff rule, on the device", "[precision][grad_scaler]") {
  for (Device device : scaler_devices()) {
    INFO(device.str());
    GradScalerOptions o;
    o.growth_interval = 3;
    GradScaler s(o, device);
    CHECK(s.scale() == 65536.f);
    CHECK(s.backward_seed().to_vector() == std::vector<float>{65536.f});
    scaler_step(s, false, device);
    scaler_step(s, false, device);
    CHECK(s.scale() == 65536.f);
    CHECK(s.growth_tracker() == 2);
    scaler_step(s, false, device);  // the third clean step in a row grows the scale
    CHECK(s.scale() == 131072.f);
    CHECK(s.backward_seed().to_vector() == std::vector<float>{131072.f});
    CHECK(s.growth_tracker() == 0);
    scaler_step(s, false, device);
    scaler_step(s, true, device);  // an overflow halves it and restarts the count
    CHECK(s.scale() == 65536.f);
    CHECK(s.growth_tracker() == 0);
    CHECK(s.skipped_steps() == 1);

    GradScalerOptions big;
    big.init_scale = 3e38;
    big.growth_interval = 1;
    GradScaler at_max(big, device);
    scaler_step(at_max, false, device);  // 6e38 is not a finite float32: the scale stays
    CHECK(at_max.scale() == 3e38f);

    GradScalerOptions tiny;
    tiny.init_scale = 2 * static_cast<double>(FLT_MIN);
    GradScaler at_min(tiny, device);
    scaler_step(at_min, true, device);
    scaler_step(at_min, true, device);  // half of FLT_MIN is subnormal: the scale stays at FLT_MIN
    CHECK(at_min.scale() == FLT_MIN);
    CHECK(at_min.skipped_steps() == 2);
  }
}

TEST_CASE("grad scaler: unscale multiplies by 1/scale and flags inf and NaN", "[precision][grad_scaler]") {
  for (Device device : scaler_devices()) {
    INFO(device.str());
    GradScaler s(GradScalerOptions(), device);
    // More gradients than one launch takes (128), of ragged sizes: the list is chunked.
    std::vector<Tensor> many;
    for (int i = 0; i < 130; ++i)
      many.push_back(Tensor::from_vector(test::random_values(1 + 37 * i, i), {1 + 37 * i}, device));
    std::vector<std::vector<float>> want;
    for (const Tensor& t : many) {
      std::vector<float> v = t.to_vector();
      for (float& x : v) x *= 1.f / 65536.f;
      want.push_back(v);
    }
    s.unscale(many);
    CHECK_FALSE(s.found_inf());
    for (size_t i = 0; i < many.size(); ++i) REQUIRE(many[i].to_vector() == want[i]);
    Tensor a = Tensor::from_vector(std::vector<float>{65536.f, -3.f, 0.f}, {3}, device);
    Tensor b = Tensor::from_vector(std::vector<float>{1.f, 2.f}, {2}, device);
    s.unscale({a, b});
    CHECK_FALSE(s.found_inf());
    CHECK(a.to_vector() == std::vector<float>{1.f, -3.f / 65536.f, 0.f});
    CHECK(b.to_vector() == std::vector<float>{1.f / 65536.f, 2.f / 65536.f});
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      Tensor c = Tensor::from_vector(std::vector<float>{1.f, bad}, {2}, device);
      many.back() = c;
      s.unscale(many);  // the bad value in the last chunk
      CHECK(s.found_inf());
      s.unscale({b});  // the flag is cleared for every call
      CHECK_FALSE(s.found_inf());
    }
  }
}

TEST_CASE("grad scaler: options and state are checked", "[precision][grad_scaler][config]") {
  CHECK_THROWS_WITH(GradScalerOptions::from_json(json::parse(R"({"init_scal": 1})"), "grad_scaler"),
                    Contains("grad_scaler.init_scal: unknown key"));
  CHECK_THROWS_WITH(GradScalerOptions::from_json(json::parse(R"({"init_scale": 1e39})"), "grad_scaler"),
                    Contains("grad_scaler.init_scale: expected a normal positive float32 value"));
  // A subnormal scale would make 1/scale infinite.
  CHECK_THROWS_WITH(GradScalerOptions::from_json(json::parse(R"({"init_scale": 1e-39})"), "grad_scaler"),
                    Contains("grad_scaler.init_scale: expected a normal positive float32 value"));
  CHECK_THROWS_WITH(GradScalerOptions::from_json(json::parse(R"({"backoff_factor": 1})"), "grad_scaler"),
                    Contains("grad_scaler.backoff_factor"));
  CHECK_THROWS_WITH(GradScalerOptions::from_json(json::parse(R"({"growth_interval": 0})"), "grad_scaler"),
                    Contains("grad_scaler.growth_interval"));
  const GradScalerOptions o = GradScalerOptions::from_json(json::parse(R"({"growth_interval": 7})"), "grad_scaler");
  CHECK(GradScalerOptions::from_json(o.to_json(), "x").to_json() == o.to_json());

  GradScaler s(o, Device::cpu());
  scaler_step(s, true, Device::cpu());
  scaler_step(s, false, Device::cpu());
  GradScaler t(o, Device::cpu());
  t.load_state(s.state());
  CHECK(t.state() == s.state());
  CHECK(t.scale() == 32768.f);
  CHECK_THROWS_WITH(t.load_state(json::parse(R"({"scale": -1, "growth_tracker": 0, "skipped_steps": 0})")),
                    Contains("scale must be a normal positive float32 value"));
  CHECK_THROWS_WITH(t.load_state(json::parse(R"({"scale": 2, "growth_tracker": 7, "skipped_steps": 0})")),
                    Contains("growth_tracker must be in 0..6"));
  CHECK_THROWS_WITH(t.load_state(json::parse(R"({"scale": 2})")), Contains("grad_scaler state: expected"));
}

namespace {

std::string test_root() {
  return (fs::temp_directory_path() / ("minidl_test_precision." + std::to_string(getpid()))).string();
}

// A small net with every layer kind of the GPU configs, 6 steps of 64 per epoch.
std::string write_config(const std::string& dir, const json& extra) {
  fs::create_directories(dir);
  json c = json::parse(R"({
    "seed": 5, "device": "cpu", "epochs": 2, "batch_size": 64,
    "data": {"train_limit": 384, "test_limit": 1000, "augment": {"crop_padding": 2, "flip": true}},
    "model": {"layers": [
      {"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": true},
      {"type": "BatchNorm2d", "num_features": 8, "relu": true},
      {"type": "MaxPool2d", "kernel_size": 2},
      {"type": "Residual", "body": [{"type": "Conv2d", "in_channels": 8, "out_channels": 8, "kernel_size": 3,
                                     "padding": 1, "bias": false},
                                    {"type": "GroupNorm", "num_groups": 2, "num_channels": 8}, {"type": "GELU"}]},
      {"type": "MaxPool2d", "kernel_size": 4},
      {"type": "Flatten"},
      {"type": "Linear", "in_features": 128, "out_features": 10},
      {"type": "Scale", "value": 0.5}]},
    "loss": {"label_smoothing": 0.1},
    "optimizer": {"type": "SGD", "lr": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4},
    "eval": {"tta": "none", "batch_size": 2500},
    "output": {"progress": false}
  })");
  c["data"]["dir"] = test::data_dir();
  c.update(extra);
  const std::string path = dir + "/config.in.json";
  std::ofstream(path) << c.dump(2);
  return path;
}

RunOptions run_options(const std::string& config, const std::string& out, int64_t max_steps = 0) {
  RunOptions o;
  o.config_path = config;
  o.output_dir = out;
  o.max_steps = max_steps;
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Trains `config` three ways (twice, and stopped after epoch 1 then resumed) and requires the same
// steps and weights; returns the weights' hash.
std::string require_repeatable(const std::string& config, const std::string& root) {
  REQUIRE(run_training(run_options(config, root + "/a")) == 0);
  REQUIRE(run_training(run_options(config, root + "/b")) == 0);
  REQUIRE(run_training(run_options(config, root + "/c", 6)) == 0);
  RunOptions resume;
  resume.resume_dir = root + "/c";
  REQUIRE(run_training(resume) == 0);
  const std::string steps = slurp(root + "/a/steps.jsonl");
  REQUIRE(steps == slurp(root + "/b/steps.jsonl"));
  REQUIRE(steps == slurp(root + "/c/steps.jsonl"));
  const auto ma = test::read_json_lines(root + "/a/metrics.jsonl"), mc = test::read_json_lines(root + "/c/metrics.jsonl");
  REQUIRE(ma.size() == mc.size());
  for (size_t e = 0; e < ma.size(); ++e)
    for (const char* key : {"train_loss", "train_acc", "test_acc", "loss_scale", "skipped_steps"})
      REQUIRE(ma[e].value(key, json()) == mc[e].value(key, json()));
  const std::string hash = safetensors_payload_sha256(root + "/a/model.safetensors");
  REQUIRE(hash == safetensors_payload_sha256(root + "/b/model.safetensors"));
  REQUIRE(hash == safetensors_payload_sha256(root + "/c/model.safetensors"));
  return hash;
}

}  // namespace

TEST_CASE("training: bf16 and fp16 give the same bits twice and after a resume, not fp32's", "[training][precision]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/repeat";
  fs::remove_all(root);
  const std::string fp32 = require_repeatable(write_config(root + "/fp32", json::object()), root + "/fp32");
  const std::string bf16 = require_repeatable(write_config(root + "/bf16", {{"precision", "bf16"}}), root + "/bf16");
  // The scale grows every 4 clean steps, so the resume at step 6 must restore a grown scale and a
  // clean-step count of 2 to end with the uninterrupted run's bits.
  const std::string fp16 = require_repeatable(
      write_config(root + "/fp16", {{"precision", "fp16"}, {"grad_scaler", {{"growth_interval", 4}}}}), root + "/fp16");
  CHECK(bf16 != fp32);
  CHECK(fp16 != fp32);
  CHECK(fp16 != bf16);
  // The weights stay float32 masters, whatever the activations' type.
  for (const auto& [name, t] : load_safetensors(root + "/bf16/a/model.safetensors").tensors)
    CHECK(t.dtype() == DType::Float32);
  const auto metrics = test::read_json_lines(root + "/fp16/a/metrics.jsonl");
  REQUIRE(metrics.size() == 2);
  CHECK(metrics[0]["loss_scale"].get<double>() == 65536.0 * 2);  // grown after step 4
  CHECK(metrics[1]["loss_scale"].get<double>() == 65536.0 * 8);  // and after steps 8 and 12
  CHECK(metrics[1]["skipped_steps"].get<int64_t>() == 0);
  CHECK(read_checkpoint_info(root + "/fp16/c/checkpoint.safetensors").grad_scaler.at("scale") == 65536.0 * 8);
  CHECK(read_checkpoint_info(root + "/bf16/a/checkpoint.safetensors").grad_scaler.is_null());
  const json resolved = json::parse(slurp(root + "/fp16/a/config.json"));
  CHECK(resolved.at("precision") == "fp16");
  CHECK(resolved.at("grad_scaler").at("growth_interval") == 4);
  CHECK(resolved.at("grad_scaler").at("init_scale") == 65536.0);
}

TEST_CASE("training: fp16 steps that overflow are skipped and the scale backs off", "[training][precision]") {
  MINIDL_REQUIRE_DATA();
  const std::string root = test_root() + "/overflow";
  fs::remove_all(root);
  // 2^120 times any gradient overflows float16's 65504: every step is skipped until the scale
  // has halved below 2^16 or so (about 105 halvings), far more steps than the run has.
  // With lookahead: its averaging follows the training steps, skipped updates included.
  const std::string config =
      write_config(root, {{"precision", "fp16"},
                          {"epochs", 1},
                          {"grad_scaler", {{"init_scale", 1.329228e36}}},
                          {"lookahead", {{"every_n_steps", 2}, {"start_epochs", 0}}}});
  TrainConfig c = load_train_config(config, {}, "", root + "/run");
  Trainer trainer(c, Device::cpu());
  const std::vector<float> before = trainer.model().state_dict().front().second.to_vector();
  const std::shared_ptr<void> record = allocate_pinned(sizeof(Trainer::StepRecord));
  trainer.train_loader().start_epoch(0);
  for (int64_t step = 0; step < 6; ++step)
    REQUIRE(trainer.train_step(step, static_cast<Trainer::StepRecord*>(record.get())));
  REQUIRE(trainer.grad_scaler()->skipped_steps() == 6);
  CHECK(trainer.grad_scaler()->scale() == static_cast<float>(1.329228e36 / 64));
  // No update happened: the first weight is unchanged and no parameter counted a step; lookahead
  // counted all 6 training steps.
  CHECK(trainer.model().state_dict().front().second.to_vector() == before);
  const json scalars = trainer.optimizer().state_scalars();
  CHECK(scalars.at("steps") == 6);
  for (const auto& [name, count] : scalars.at("inner").at("steps").items()) CHECK(count == 0);
}

TEST_CASE("precision: grad_scaler is for fp16 only, and a checkpoint must match the precision", "[config][precision]") {
  json j = json::parse(R"({"model": {"layers": [{"type": "Flatten"}]}, "optimizer": {"type": "SGD", "lr": 0.1},
                           "precision": "bf16", "grad_scaler": {}})");
  CHECK_THROWS_WITH(parse_train_config(j), Contains("grad_scaler: loss scaling is for precision \"fp16\" only"));
  j["precision"] = "fp16";
  CHECK(parse_train_config(j).to_json().at("grad_scaler") == json::object());
}

TEST_CASE("CUDA half elementwise kernels give the storage-rounded float32 op's bits", "[half][precision][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  using Op = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x, GeluApproximate::None); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximate::Tanh); }},
      {"mul", [](const Tensor& x) { return mul(x, 0.37f); }},
      // relu of a half value needs no rounding: the add's is the only one, as in the reference.
      {"add", [](const Tensor& x) { return add(x, relu(x)); }},
  };
  // An odd length, so the 8-element packs leave a tail the scalar loop takes.
  for (int64_t n : {int64_t(8 * 1000), int64_t(100003)}) {
    for (DType d : {DType::BFloat16, DType::Float16}) {
      for (const auto& [name, op] : ops) {
        INFO(name << " in " << dtype_name(d) << ", n = " << n);
        const Tensor x0 = test::random_tensor({n}, 31, -4.f, 4.f, gpu);
        const Tensor dy = test::random_tensor({n}, 32, -1.f, 1.f, gpu).to(d);
        Tensor xa = x0.clone(), xb = x0.clone();
        xa.set_requires_grad(true);
        xb.set_requires_grad(true);
        const Tensor ya = op(xa.to(d));
        const Tensor yb = op(xb.to(d).to(DType::Float32)).to(d);
        REQUIRE(ya.dtype() == d);
        REQUIRE(half_bits(ya) == half_bits(yb));
        autograd::backward(ya, dy);
        autograd::backward(yb, dy);
        REQUIRE(xa.grad().to_vector() == xb.grad().to_vector());
      }
    }
  }
}

TEST_CASE("CUDA half normalization kernels match the storage-rounded float32 layers", "[half][precision][cuda][norm]") {
  MINIDL_REQUIRE_CUDA();
  // The reference runs the float32 three-launch kernels on the widened input; the half layer runs
  // on its automatic path (three launches, or the Warp path for LayerNorm rows of at most 2048):
  // the same formulas, the float sums grouped otherwise, so outputs agree to one unit in the last
  // place of the half type.
  const Device gpu = Device::cuda();
  struct Case {
    const char* spec;
    Shape shape;
  };
  const Case cases[] = {
      {R"({"type": "BatchNorm2d", "num_features": 64, "relu": true})", {32, 64, 16, 16}},
      {R"({"type": "BatchNorm2d", "num_features": 5, "relu": true})", {3, 5, 9, 7}},
      {R"({"type": "BatchNorm2d", "num_features": 8})", {4, 8, 32, 32}},
      {R"({"type": "GroupNorm", "num_groups": 4, "num_channels": 32})", {8, 32, 8, 8}},
      {R"({"type": "GroupNorm", "num_groups": 3, "num_channels": 6, "relu": true})", {3, 6, 5, 7}},
      {R"({"type": "LayerNorm", "normalized_shape": [768]})", {64, 768}},
      {R"({"type": "LayerNorm", "normalized_shape": [1600]})", {40, 1600}},
      {R"({"type": "LayerNorm", "normalized_shape": [37]})", {300, 37}},
      {R"({"type": "LayerNorm", "normalized_shape": [100]})", {50, 100}},
      {R"({"type": "LayerNorm", "normalized_shape": [2048]})", {9, 2048}},
      {R"({"type": "LayerNorm", "normalized_shape": [10, 7]})", {6, 10, 7}},
  };
  for (DType d : {DType::BFloat16, DType::Float16}) {
    const double ulp = d == DType::BFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    for (const Case& c : cases) {
      // 4-d inputs in both layouts: channels-last BatchNorm and GroupNorm run their own tiles.
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        if (f == MemoryFormat::ChannelsLast && c.shape.size() != 4) continue;
        INFO(c.spec << " " << shape_str(c.shape) << " in " << dtype_name(d)
                    << (f == MemoryFormat::ChannelsLast ? ", channels_last" : ""));
        auto layer = build_layer(json::parse(c.spec), "layer");
        layer->to(gpu);
        for (auto& [name, p] : layer->named_parameters())
          p.copy_(test::random_tensor(p.shape(), 41, 0.5f, 1.5f, gpu));
        const Tensor x0 = test::random_tensor(c.shape, 42, -2.f, 3.f, gpu);
        const Tensor dy = test::random_tensor(c.shape, 43, -1.f, 1.f, gpu).to(d, f);
        Tensor xa = x0.clone(), xb = x0.clone();
        xa.set_requires_grad(true);
        xb.set_requires_grad(true);
        auto& norm = dynamic_cast<NormLayer&>(*layer);
        norm.set_single_read(true);
        const Tensor ya = (*layer)(xa.to(d, f));
        clear_grads(*layer);
        autograd::backward(ya, dy);
        std::vector<std::vector<float>> grads_a;
        for (auto& [name, p] : layer->named_parameters()) grads_a.push_back(p.grad().to_vector());
        norm.set_single_read(false);
        const Tensor yb = (*layer)(xb.to(d, f).to(DType::Float32)).to(d);
        clear_grads(*layer);
        autograd::backward(yb, dy);
        REQUIRE(ya.dtype() == d);
        REQUIRE(ya.memory_format() == f);
        test::require_close(ya.to_vector(), yb.to_vector(), ulp, 1e-6, "y");
        test::require_close(xa.grad().to_vector(), xb.grad().to_vector(), ulp, 1e-5, "dx");
        size_t i = 0;
        for (auto& [name, p] : layer->named_parameters())
          test::require_close(grads_a[i++], p.grad().to_vector(), 1e-5, 1e-5, "gradient of " + name);
        // Eval mode (BatchNorm: the running statistics): the same agreement.
        layer->eval();
        {
          autograd::NoGradGuard no_grad;
          test::require_close((*layer)(x0.to(d, f)).to_vector(),
                              (*layer)(x0.to(d, f).to(DType::Float32)).to(d).to_vector(), ulp, 1e-6, "eval y");
        }
      }
    }
  }
}

TEST_CASE("CUDA half Linear (GemmEx, float32 accumulation) matches the storage-rounded CPU layer",
          "[half][precision][cuda]") {
  MINIDL_REQUIRE_CUDA();
  // Both sides multiply the same half values in float32 and round each output once; only the
  // float32 summation order differs, so outputs agree to a unit in the last place of the half type
  // (plus a float32 rounding near zero), and the GPU repeats its own bits.
  struct Case {
    int64_t in, out;
    bool bias;
    Shape shape;
  };
  const Case cases[] = {{96, 10, true, {64, 96}}, {33, 5, true, {7, 33}}, {33, 17, false, {2, 5, 33}},
                        {512, 256, true, {300, 512}}};
  const Device gpu = Device::cuda();
  for (DType d : {DType::BFloat16, DType::Float16}) {
    const double ulp = d == DType::BFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    for (const Case& c : cases) {
      INFO("Linear " << c.in << "->" << c.out << (c.bias ? "" : " no bias") << " on " << shape_str(c.shape) << " in "
                     << dtype_name(d));
      const json spec = {{"type", "Linear"}, {"in_features", c.in}, {"out_features", c.out}, {"bias", c.bias}};
      auto cpu_layer = build_layer(spec, "linear");
      auto gpu_layer = build_layer(spec, "linear");
      gpu_layer->to(gpu);
      for (auto& [name, p] : cpu_layer->named_parameters()) p.copy_(test::random_tensor(p.shape(), 51, -1.f, 1.f));
      for (auto& [name, p] : gpu_layer->named_parameters()) p.copy_(test::random_tensor(p.shape(), 51, -1.f, 1.f, gpu));
      const Tensor x0 = test::random_tensor(c.shape, 52, -2.f, 2.f);
      Shape y_shape = c.shape;
      y_shape.back() = c.out;
      const Tensor dy = test::random_tensor(y_shape, 53, -1.f, 1.f).to(d);
      auto run = [&](Module& layer, const Device& dev) {
        for (auto& [name, p] : layer.named_parameters()) p.set_grad(Tensor());
        Tensor x = x0.to(dev).to(d).to(DType::Float32);  // half values, a float32 leaf
        x.set_requires_grad(true);
        Tensor y;
        {
          const AutocastGuard autocast(d);
          y = layer(x.to(d));
        }
        REQUIRE(y.dtype() == d);
        autograd::backward(y, dy.to(dev));
        std::vector<std::vector<float>> out{y.to_vector(), x.grad().to_vector()};
        for (auto& [name, p] : layer.named_parameters()) out.push_back(p.grad().to_vector());
        return out;
      };
      const auto want = run(*cpu_layer, Device::cpu());
      const auto got = run(*gpu_layer, gpu);
      const char* names[] = {"y", "dx", "dweight", "dbias"};
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) test::require_close(got[i], want[i], ulp, 1e-4, names[i]);
      CHECK(run(*gpu_layer, gpu) == got);
    }
  }
}
