// Channels-last (NHWC) tensors: the layout itself (strides, reordering, host order, printing),
// how it travels through autograd and the elementwise ops, and every layer on a channels-last
// input against the same layer on the contiguous one on the CPU (which reorders around its NCHW
// kernels, or runs BatchNorm as [N*H*W][C]) in float32, bfloat16 and float16; the GPU's reordering
// and repeatable bits. The op harness holds each layer's channels-last CUDA run (cuDNN's NHWC
// engines, the NHWC norm and pooling kernels) to the CPU's (tests/test_op_harness_cuda.cpp).
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/tensor.h"
#include "core/tensor_ops.h"
#include "layers/registry.h"
#include "train/run.h"
#include "train/trainer.h"
#include "json_lines.h"
#include "test_util.h"

using namespace minidl;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// The logical (N, C, H, W) index of NHWC storage position i.
std::vector<float> nhwc_order(const std::vector<float>& nchw, const Shape& s) {
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  std::vector<float> out(nchw.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) out[((a * h + y) * w + x) * c + k] = nchw[((a * c + k) * h + y) * w + x];
  return out;
}

// The raw stored floats of t, in storage order (not the logical order to_vector gives).
std::vector<float> stored_floats(const Tensor& t) {
  Tensor flat = t.detach().cpu().to(DType::Float32);
  std::vector<float> v(static_cast<size_t>(flat.numel()));
  const float* p = flat.data<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  return v;
}

void clear_grads(Module& m) {
  for (auto& [name, p] : m.named_parameters()) p.set_grad(Tensor());
}

struct LayerCase {
  const char* spec;
  Shape shape;
};

// One layer of each kind a channels-last model meets, with shapes that exercise odd channel
// counts, odd planes and every pooling geometry.
const LayerCase kLayerCases[] = {
    {R"({"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": true})",
     {2, 3, 9, 7}},
    {R"({"type": "Conv2d", "in_channels": 8, "out_channels": 16, "kernel_size": 3, "padding": 1, "bias": false})",
     {2, 8, 8, 8}},
    {R"({"type": "Conv2d", "in_channels": 6, "out_channels": 5, "kernel_size": 2, "stride": 2, "bias": true})",
     {3, 6, 7, 9}},
    {R"({"type": "BatchNorm2d", "num_features": 8, "relu": true})", {4, 8, 6, 5}},
    {R"({"type": "BatchNorm2d", "num_features": 5})", {3, 5, 7, 3}},
    {R"({"type": "GroupNorm", "num_groups": 2, "num_channels": 8, "relu": true})", {2, 8, 5, 5}},
    {R"({"type": "GroupNorm", "num_groups": 8, "num_channels": 64})", {3, 64, 4, 6}},
    {R"({"type": "LayerNorm", "normalized_shape": [4, 3, 5]})", {3, 4, 3, 5}},
    {R"({"type": "LayerNorm", "normalized_shape": [5]})", {3, 4, 3, 5}},  // strided groups: reordered
    {R"({"type": "MaxPool2d", "kernel_size": 2})", {2, 8, 8, 6}},
    {R"({"type": "MaxPool2d", "kernel_size": 3, "stride": 1, "padding": 1})", {2, 5, 7, 7}},
    {R"({"type": "MaxPool2d", "kernel_size": 3})", {2, 16, 3, 3}},
    {R"({"type": "GlobalMaxPool2d"})", {3, 12, 4, 4}},
    {R"({"type": "GlobalAvgPool2d"})", {3, 12, 5, 3}},
    {R"({"type": "ReLU"})", {2, 6, 4, 5}},
    {R"({"type": "GELU"})", {2, 6, 4, 5}},
    {R"({"type": "Scale", "value": 0.25})", {2, 6, 4, 5}},
    {R"({"type": "Residual", "body": [{"type": "Conv2d", "in_channels": 8, "out_channels": 8, "kernel_size": 3,
         "padding": 1, "bias": false}, {"type": "BatchNorm2d", "num_features": 8, "relu": true}]})",
     {2, 8, 6, 6}},
    {R"({"type": "Sequential", "layers": [{"type": "Flatten"},
         {"type": "Linear", "in_features": 96, "out_features": 7}]})",
     {2, 6, 4, 4}},
};

// Runs `layer` forward and backward on x (contiguous) and on x reordered to channels-last (cast
// to `dtype` either way, under autocast for a half dtype) and requires the same output, input
// gradient and parameter gradients within (rtol, atol); 0, 0 means bit for bit.
void require_layout_agnostic(Module& layer, const Tensor& x0, const Tensor& dy0, DType dtype, double rtol,
                             double atol, const std::string& what) {
  struct Run {
    std::vector<float> y, dx;
    std::vector<std::vector<float>> grads;
    MemoryFormat format;
  };
  auto run = [&](MemoryFormat f) {
    Tensor x = x0.clone();
    x.set_requires_grad(true);
    Tensor y;
    {
      const AutocastGuard autocast(dtype);
      y = layer(x.to(dtype, f));
    }
    clear_grads(layer);
    autograd::backward(y, dy0.to(y.dtype()));
    Run r{y.to_vector(), x.grad().to_vector(), {}, y.memory_format()};
    for (auto& [name, p] : layer.named_parameters()) r.grads.push_back(p.grad().to_vector());
    REQUIRE(x.grad().memory_format() == MemoryFormat::Contiguous);
    return r;
  };
  const Run a = run(MemoryFormat::Contiguous), b = run(MemoryFormat::ChannelsLast);
  INFO(what);
  if (dy0.dim() == 4) CHECK(b.format == MemoryFormat::ChannelsLast);  // a 4-d output keeps the input's layout
  if (rtol == 0 && atol == 0) {
    CHECK(b.y == a.y);
    CHECK(b.dx == a.dx);
    for (size_t i = 0; i < a.grads.size(); ++i) CHECK(b.grads[i] == a.grads[i]);
    return;
  }
  test::require_close(b.y, a.y, rtol, atol, what + ": y");
  test::require_close(b.dx, a.dx, rtol, atol, what + ": dx");
  for (size_t i = 0; i < a.grads.size(); ++i)
    test::require_close(b.grads[i], a.grads[i], rtol, atol * 10, what + ": parameter gradient");
}

// Output shape of a layer on x, for the upstream gradient.
Shape output_shape(Module& layer, const Tensor& x) {
  autograd::NoGradGuard no_grad;
  return layer(x).shape();
}

}  // namespace

TEST_CASE("channels_last tensors: strides, reordering, host order, printing", "[layout]") {
  const Shape s{2, 3, 4, 5};
  const std::vector<float> v = test::random_values(shape_numel(s), 1);
  const Tensor x = Tensor::from_vector(v, s);
  CHECK(x.memory_format() == MemoryFormat::Contiguous);
  const Tensor cl = x.to(MemoryFormat::ChannelsLast);
  CHECK(cl.is_channels_last());
  CHECK(cl.shape() == s);  // the logical shape stays (N, C, H, W)
  CHECK(cl.strides() == std::vector<int64_t>{60, 1, 15, 3});
  CHECK(stored_floats(cl) == nhwc_order(v, s));
  CHECK(cl.to_vector() == v);  // host order is the logical one
  CHECK(cl.contiguous().is_contiguous());
  CHECK(stored_floats(cl.contiguous()) == v);
  CHECK(cl.to(MemoryFormat::ChannelsLast).same(cl));
  CHECK(cl.str() == "Tensor[float32, cpu, (2, 3, 4, 5), channels_last]");
  CHECK(cl.clone().is_channels_last());
  CHECK(Tensor::empty_like(cl).is_channels_last());
  CHECK(Tensor::zeros_like(cl).is_channels_last());
  CHECK_THROWS_WITH(Tensor::from_vector(std::vector<float>(6, 0.f), {2, 3}).to(MemoryFormat::ChannelsLast),
                    Contains("needs a 4-d (N, C, H, W) tensor"));
  CHECK_THROWS_WITH(Tensor::empty({2, 3}, DType::Float32, Device::cpu(), MemoryFormat::ChannelsLast),
                    Contains("channels_last needs a 4-d"));
  // Reordering and converting in one pass is the two steps' bits.
  for (DType d : {DType::BFloat16, DType::Float16}) {
    const Tensor fused = x.to(d, MemoryFormat::ChannelsLast);
    CHECK(fused.dtype() == d);
    CHECK(fused.is_channels_last());
    CHECK(stored_floats(fused) == stored_floats(x.to(d).to(MemoryFormat::ChannelsLast)));
    CHECK(fused.to(DType::Float32).is_channels_last());  // a cast keeps the layout
  }
}

TEST_CASE("channels_last through autograd, reshape, copy_ and add", "[layout]") {
  const Shape s{2, 3, 2, 2};
  const Tensor x0 = test::random_tensor(s, 2);
  Tensor x = x0.clone();
  x.set_requires_grad(true);
  const Tensor dy = test::random_tensor(s, 3);
  // The gradient of a reordering is reordered back, and a seed is taken in its root's layout.
  Tensor y = x.to(DType::BFloat16, MemoryFormat::ChannelsLast);
  autograd::backward(y, dy.to(DType::BFloat16));
  REQUIRE(x.grad().is_contiguous());
  CHECK(x.grad().to_vector() == dy.to(DType::BFloat16).to(DType::Float32).to_vector());

  // reshape of channels-last memory reorders first (the values of the contiguous reshape), except
  // where the two orders coincide: (N, C, 1, 1).
  const Tensor cl = x0.to(MemoryFormat::ChannelsLast);
  CHECK(cl.reshape({2, 12}).to_vector() == x0.reshape({2, 12}).to_vector());
  const Tensor pooled = test::random_tensor({2, 5, 1, 1}, 4).to(MemoryFormat::ChannelsLast);
  const Tensor flat = pooled.reshape({2, 5});
  CHECK(flat.raw_data() == pooled.raw_data());  // a view
  CHECK(flat.to_vector() == pooled.to_vector());

  // copy_ between layouts copies values, not bytes.
  Tensor dst = Tensor::empty(s);
  dst.copy_(cl);
  CHECK(dst.to_vector() == x0.to_vector());
  Tensor dst_cl = Tensor::empty(s, DType::Float32, Device::cpu(), MemoryFormat::ChannelsLast);
  dst_cl.copy_(x0);
  CHECK(stored_floats(dst_cl) == stored_floats(cl));

  // add of two layouts takes the first's; each input's gradient comes back in its own layout.
  Tensor a = x0.clone().to(MemoryFormat::ChannelsLast), b = test::random_tensor(s, 5);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor sum = add(a, b);
  CHECK(sum.is_channels_last());
  std::vector<float> want = x0.to_vector(), bv = b.to_vector();
  for (size_t i = 0; i < want.size(); ++i) want[i] += bv[i];
  CHECK(sum.to_vector() == want);
  autograd::backward(sum, dy);
  CHECK(a.grad().is_channels_last());
  CHECK(b.grad().is_contiguous());
  CHECK(a.grad().to_vector() == dy.to_vector());
  CHECK(b.grad().to_vector() == dy.to_vector());
}

TEST_CASE("every layer on the CPU gives a channels_last input the contiguous input's results", "[layout]") {
  for (const LayerCase& c : kLayerCases) {
    auto layer = build_layer(json::parse(c.spec), "layer");
    for (auto& [name, p] : layer->named_parameters()) p.copy_(test::random_tensor(p.shape(), 11, 0.5f, 1.5f));
    const Tensor x = test::random_tensor(c.shape, 12, -2.f, 3.f);
    const Tensor dy = test::random_tensor(output_shape(*layer, x), 13);
    // BatchNorm sums a channel as a column of [N*H*W][C] instead of N planes, GroupNorm a group
    // position by position, and LayerNorm over (C, H, W) a sample in (H, W, C) order: another
    // float64 summation order, so their results agree to float32 rounding; every other layer runs
    // the same NCHW kernel on reordered data and gives the same bits.
    const std::string spec = c.spec;
    const bool reordered_sums = spec.find("BatchNorm2d") != std::string::npos ||
                                spec.find("GroupNorm") != std::string::npos ||
                                spec.find("\"normalized_shape\": [4, 3, 5]") != std::string::npos;
    require_layout_agnostic(*layer, x, dy, DType::Float32, reordered_sums ? 1e-5 : 0, reordered_sums ? 1e-6 : 0,
                            c.spec);
    for (DType d : {DType::BFloat16, DType::Float16}) {
      const double ulp = d == DType::BFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
      require_layout_agnostic(*layer, x, dy, d, reordered_sums ? ulp : 0, reordered_sums ? 1e-3 : 0,
                              std::string(c.spec) + " in " + dtype_name(d));
    }
  }
}

TEST_CASE("CUDA reordering gives the CPU's bits", "[layout][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const Shape& s : {Shape{2, 3, 32, 32}, Shape{3, 37, 5, 7}, Shape{1, 64, 1, 1}, Shape{5, 1, 33, 31}}) {
    const Tensor x = test::random_tensor(s, 21, -3.f, 3.f);
    for (DType from : {DType::Float32, DType::BFloat16, DType::Float16})
      for (DType to : {DType::Float32, DType::BFloat16, DType::Float16}) {
        INFO(shape_str(s) << " " << dtype_name(from) << " -> " << dtype_name(to));
        const Tensor src = x.to(from);
        const Tensor cpu = src.to(to, MemoryFormat::ChannelsLast);
        const Tensor gpu = src.to(Device::cuda()).to(to, MemoryFormat::ChannelsLast);
        REQUIRE(gpu.is_channels_last());
        CHECK(stored_floats(gpu) == stored_floats(cpu));
        CHECK(stored_floats(gpu.contiguous()) == stored_floats(src.to(to)));
      }
  }
}

TEST_CASE("CUDA channels_last forward and backward repeat their bits", "[layout][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  auto net = build_sequential(json::parse(R"([
      {"type": "Conv2d", "in_channels": 3, "out_channels": 32, "kernel_size": 3, "padding": 1, "bias": true},
      {"type": "BatchNorm2d", "num_features": 32, "relu": true},
      {"type": "MaxPool2d", "kernel_size": 2},
      {"type": "Residual", "body": [{"type": "Conv2d", "in_channels": 32, "out_channels": 32, "kernel_size": 3,
                                     "padding": 1, "bias": false},
                                    {"type": "BatchNorm2d", "num_features": 32, "relu": true}]},
      {"type": "GlobalMaxPool2d"},
      {"type": "Linear", "in_features": 32, "out_features": 10}])"),
                              "model");
  net->to(gpu);
  const Tensor x = test::random_tensor({64, 3, 16, 16}, 41, -2.f, 2.f, gpu);
  const Tensor dy = test::random_tensor({64, 10}, 42, -1.f, 1.f, gpu);
  for (DType d : {DType::Float32, DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(d));
    auto run = [&] {
      clear_grads(*net);
      Tensor y;
      {
        const AutocastGuard autocast(d);
        y = (*net)(x.to(MemoryFormat::ChannelsLast));
      }
      autograd::backward(y, dy.to(y.dtype()));
      std::vector<std::vector<float>> out{y.to_vector()};
      for (auto& [name, p] : net->named_parameters()) out.push_back(p.grad().to_vector());
      return out;
    };
    CHECK(run() == run());
  }
}

TEST_CASE("training: channels_last on the CPU repeats its bits and tracks the contiguous run", "[training][layout]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir dir("channels_last");
  json c = json::parse(R"({
    "seed": 3, "device": "cpu", "epochs": 1, "batch_size": 64,
    "data": {"train_limit": 256, "test_limit": 1000, "augment": {"crop_padding": 2, "flip": true}},
    "model": {"layers": [
      {"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
      {"type": "BatchNorm2d", "num_features": 8, "relu": true},
      {"type": "MaxPool2d", "kernel_size": 2},
      {"type": "Residual", "body": [{"type": "Conv2d", "in_channels": 8, "out_channels": 8, "kernel_size": 3,
                                     "padding": 1, "bias": false},
                                    {"type": "BatchNorm2d", "num_features": 8, "relu": true}]},
      {"type": "GlobalMaxPool2d"},
      {"type": "Linear", "in_features": 8, "out_features": 10}]},
    "optimizer": {"type": "SGD", "lr": 0.05, "momentum": 0.9},
    "eval": {"tta": "none", "batch_size": 2500},
    "output": {"progress": false}
  })");
  c["data"]["dir"] = test::data_dir();
  auto train = [&](const std::string& name, const std::string& format) {
    c["memory_format"] = format;
    const std::string config = dir.file(name + ".json");
    std::ofstream(config) << c.dump();
    RunOptions o;
    o.config_path = config;
    o.output_dir = dir.file(name);
    REQUIRE(run_training(o) == 0);
    return test::read_json_lines(dir.file(name) + "/steps.jsonl");
  };
  const auto a = train("a", "channels_last"), b = train("b", "channels_last"), nchw = train("c", "contiguous");
  REQUIRE(a.size() == 4);
  REQUIRE(a == b);
  // BatchNorm's sums run in another order in NHWC, so the runs agree to rounding, not bit for bit.
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(a[i]["loss"].get<double>() == Approx(nchw[i]["loss"].get<double>()).epsilon(1e-3));
}
