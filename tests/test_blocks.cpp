// The blocks of modern backbones: Residual with a projection shortcut (ResNet's downsample),
// LayerNorm2d (ConvNeXt's LayerNorm over channels), LayerScale2d (its per-channel gamma) and
// SqueezeExcitation (torchvision's, over channel_gate), each
// against a float64 reference or an equivalent composition, backward against finite differences,
// in both layouts, their specs and errors, and CUDA against the CPU.
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/tensor_ops.h"
#include "cuda_vs_cpu.h"
#include "layers/activation/activation.h"
#include "layers/activation/pointwise.h"
#include "layers/containers/layer_scale.h"
#include "layers/containers/residual.h"
#include "layers/containers/squeeze_excitation.h"
#include "layers/norm/layernorm2d.h"
#include "layers/norm/norm.h"
#include "layers/registry.h"
#include "test_util.h"

using namespace minidl;

namespace {

nlohmann::json J(const char* text) { return nlohmann::json::parse(text); }

// y (float64) of LayerNorm2d: each pixel's C values normalized with their biased variance.
std::vector<double> layer_norm_2d_ref(const Tensor& x, const std::vector<float>& w, const std::vector<float>& b,
                                      double eps) {
  const std::vector<float> v = x.to_vector();
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  std::vector<double> y(v.size());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t p = 0; p < hw; ++p) {
      double mean = 0, var = 0;
      for (int64_t k = 0; k < c; ++k) mean += v[(s * c + k) * hw + p];
      mean /= static_cast<double>(c);
      for (int64_t k = 0; k < c; ++k) var += std::pow(v[(s * c + k) * hw + p] - mean, 2);
      var /= static_cast<double>(c);
      for (int64_t k = 0; k < c; ++k) {
        const int64_t i = (s * c + k) * hw + p;
        y[i] = (v[i] - mean) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[k]) + (b.empty() ? 0.0 : b[k]);
      }
    }
  return y;
}

const char* kProjection = R"({"type": "Residual",
  "body": [{"type": "Conv2d", "in_channels": 4, "out_channels": 6, "kernel_size": 3, "stride": 2, "padding": 1,
            "bias": false},
           {"type": "BatchNorm2d", "num_features": 6, "relu": true},
           {"type": "Conv2d", "in_channels": 6, "out_channels": 6, "kernel_size": 3, "padding": 1, "bias": false},
           {"type": "BatchNorm2d", "num_features": 6}],
  "shortcut": [{"type": "Conv2d", "in_channels": 4, "out_channels": 6, "kernel_size": 1, "stride": 2, "bias": false},
               {"type": "BatchNorm2d", "num_features": 6}]})";

}  // namespace

TEST_CASE("Residual with a shortcut: y = shortcut(x) + body(x), torchvision's names, round trip", "[blocks][module]") {
  auto r = build_layer(J(kProjection), "model.layers[4]");
  r->assign_paths();
  std::vector<std::string> names;
  for (const auto& [name, t] : r->named_parameters()) names.push_back(name);
  REQUIRE(names == std::vector<std::string>{"0.weight", "1.weight", "1.bias", "2.weight", "3.weight", "3.bias",
                                            "shortcut.0.weight", "shortcut.1.weight", "shortcut.1.bias"});
  REQUIRE(r->to_json() == build_layer(r->to_json(), "m")->to_json());
  REQUIRE(r->to_json().at("shortcut").size() == 2);
  const auto& res = dynamic_cast<const Residual&>(*r);
  REQUIRE(res.body().size() == 4);
  REQUIRE(res.shortcut() != nullptr);
  // The output is the sum of the two branches run on their own.
  const Tensor x = test::random_tensor({2, 4, 7, 6}, 1);
  const Tensor y = (*r)(x);
  REQUIRE(y.shape() == Shape{2, 6, 4, 3});
  Tensor body = x;
  for (const auto& layer : res.body()) body = (*layer)(body);
  const Tensor shortcut = (*r->children().back().second)(x);
  REQUIRE(y.to_vector() == add(shortcut, body).to_vector());
  // Gradients through both branches into x (without the ReLU, whose kinks finite differences of
  // 1e-2 cross).
  auto smooth = build_layer(J(R"({"type": "Residual",
      "body": [{"type": "Conv2d", "in_channels": 4, "out_channels": 6, "kernel_size": 3, "stride": 2, "padding": 1},
               {"type": "BatchNorm2d", "num_features": 6}],
      "shortcut": [{"type": "Conv2d", "in_channels": 4, "out_channels": 6, "kernel_size": 1, "stride": 2}]})"),
                            "m");
  test::gradcheck([&](const Tensor& v) { return (*smooth)(v); }, test::random_tensor({2, 4, 5, 5}, 2), 1e-2, 3e-2,
                  3e-3);
  // Without a shortcut the spec prints back as it always has.
  const nlohmann::json plain = J(R"({"type": "Residual", "body": [{"type": "ReLU"}]})");
  REQUIRE(build_layer(plain, "m")->to_json() == plain);
}

TEST_CASE("Residual errors name the key: an empty shortcut, a body that changes the shape", "[blocks][module]") {
  CHECK_THAT(test::error_of([] {
               build_layer(J(R"({"type": "Residual", "body": [{"type": "ReLU"}], "shortcut": []})"), "model.layers[2]");
             }),
             Catch::Contains("model.layers[2].shortcut: expected a non-empty list of layers"));
  CHECK_THAT(test::error_of([] {
               build_layer(J(R"({"type": "Residual", "body": [{"type": "ReLU"}], "shortcut": [{"type": "Relu"}]})"),
                           "model.layers[2]");
             }),
             Catch::Contains("model.layers[2].shortcut[0].type: unknown layer 'Relu'"));
  auto strided = build_layer(J(R"({"type": "Residual", "body": [{"type": "AvgPool2d", "kernel_size": 2}]})"), "m");
  CHECK_THAT(test::error_of([&] { (*strided)(Tensor::zeros({1, 2, 4, 4})); }), Catch::Contains("needs a \"shortcut\""));
  auto wrong = build_layer(J(R"({"type": "Residual", "body": [{"type": "AvgPool2d", "kernel_size": 2}],
                                 "shortcut": [{"type": "ReLU"}]})"),
                           "m");
  CHECK_THAT(test::error_of([&] {
               (*wrong)(Tensor::zeros({1, 2, 4, 4}));
             }),
             Catch::Contains("does not match the shortcut's output"));
}

TEST_CASE("layer_norm_2d normalizes each pixel's channels, in both layouts, with finite-difference gradients",
          "[blocks][norm]") {
  const Tensor x = test::random_tensor({3, 5, 4, 3}, 3, -2.f, 4.f);
  const Tensor w = test::random_tensor({5}, 4, 0.5f, 1.5f), b = test::random_tensor({5}, 5);
  const std::vector<double> want = layer_norm_2d_ref(x, w.to_vector(), b.to_vector(), 1e-6);
  test::require_close(layer_norm_2d(x, w, b).to_vector(), want, 1e-5, 1e-5, "contiguous");
  const Tensor ycl = layer_norm_2d(x.to(MemoryFormat::ChannelsLast), w, b);
  REQUIRE(ycl.is_channels_last());
  REQUIRE(ycl.contiguous().to_vector() == layer_norm_2d(x, w, b).to_vector());
  test::require_close(layer_norm_2d(x, Tensor(), Tensor()).to_vector(), layer_norm_2d_ref(x, {}, {}, 1e-6), 1e-5, 1e-5,
                      "no affine");
  test::gradcheck([&](const Tensor& v) { return layer_norm_2d(v, w, b); }, test::random_tensor({2, 5, 3, 2}, 6), 1e-2,
                  3e-2, 3e-3);
  test::gradcheck(
      [&](const Tensor& v) {
        return layer_norm_2d(test::random_tensor({2, 5, 3, 2}, 7), v, b);
      },
      w.clone(), 1e-2, 3e-2, 3e-3);
  // A fused GELU is the separate layer's.
  const Tensor fused = layer_norm_2d(x, w, b, 1e-6, norm::NormActivation::GELU);
  REQUIRE(fused.shape() == x.shape());
  auto gelu_layer = build_layer(J(R"({"type": "GELU"})"), "g");
  REQUIRE(fused.to_vector() == (*gelu_layer)(layer_norm_2d(x, w, b)).to_vector());
}

TEST_CASE("LayerNorm2d spec: timm's defaults, parameters, round trip, errors naming the key",
          "[blocks][norm][config]") {
  auto ln = build_layer(J(R"({"type": "LayerNorm2d", "num_channels": 8})"), "model.layers[1]");
  REQUIRE(ln->to_json() == J(R"({"type": "LayerNorm2d", "num_channels": 8, "eps": 1e-6, "affine": true,
                                 "relu": false})"));
  REQUIRE(ln->named_parameters().size() == 2);
  REQUIRE(ln->describe() == "LayerNorm2d 8");
  auto silu = build_layer(J(R"({"type": "LayerNorm2d", "num_channels": 8, "silu": true, "affine": false})"), "m");
  REQUIRE(silu->describe() == "LayerNorm2d 8 +SiLU");
  REQUIRE(silu->to_json().at("silu") == true);
  REQUIRE(silu->named_parameters().empty());
  CHECK_THAT(test::error_of([] { build_layer(J(R"({"type": "LayerNorm2d", "num_channels": 0})"), "model.layers[1]"); }),
             Catch::Contains("model.layers[1].num_channels"));
  CHECK_THAT(test::error_of([] {
               build_layer(J(R"({"type": "LayerNorm2d", "num_channels": 4, "gelu": true, "silu": true})"),
                           "model.layers[1]");
             }),
             Catch::Contains("model.layers[1].silu: a layer applies one activation, but both \"gelu\" and \"silu\""));
  CHECK_THAT(test::error_of([&] {
               (*ln)(Tensor::zeros({2, 4, 3, 3}));
             }),
             Catch::Contains("expected input (N, 8, H, W)"));
}

TEST_CASE("layer_scale_2d multiplies each channel by gamma, with the gradients of x and gamma", "[blocks]") {
  const Tensor x = test::random_tensor({3, 4, 5, 2}, 8);
  const Tensor gamma = test::random_tensor({4}, 9, 0.5f, 2.f);
  const std::vector<float> xv = x.to_vector(), gv = gamma.to_vector();
  std::vector<float> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] * gv[i / 10 % 4];
  REQUIRE(layer_scale_2d(x, gamma).to_vector() == want);
  const Tensor ycl = layer_scale_2d(x.to(MemoryFormat::ChannelsLast), gamma);
  REQUIRE(ycl.is_channels_last());
  REQUIRE(ycl.contiguous().to_vector() == want);
  test::gradcheck([&](const Tensor& v) { return layer_scale_2d(v, gamma); }, x.clone(), 1e-2, 1e-3, 1e-4);
  test::gradcheck([&](const Tensor& v) { return layer_scale_2d(x, v); }, gamma.clone(), 1e-2, 1e-3, 1e-4);
  test::gradcheck([&](const Tensor& v) { return layer_scale_2d(x.to(MemoryFormat::ChannelsLast), v); }, gamma.clone(),
                  1e-2, 1e-3, 1e-4);
  CHECK_THAT(test::error_of([&] { layer_scale_2d(x, Tensor::zeros({3})); }),
             Catch::Contains("gamma must be float32 of shape (4)"));
}

TEST_CASE("LayerScale2d spec: gamma at init_values, round trip, errors naming the key", "[blocks][config]") {
  auto ls = build_layer(J(R"({"type": "LayerScale2d", "dim": 6, "init_values": 1e-6})"), "model.layers[5]");
  const auto params = ls->named_parameters();
  REQUIRE(params.size() == 1);
  REQUIRE(params[0].first == "gamma");
  REQUIRE(params[0].second.to_vector() == std::vector<float>(6, 1e-6f));
  REQUIRE(build_layer(ls->to_json(), "m")->to_json() == ls->to_json());
  REQUIRE(build_layer(J(R"({"type": "LayerScale2d", "dim": 2})"), "m")->to_json().at("init_values") == 1e-5);
  CHECK_THAT(test::error_of([] { build_layer(J(R"({"type": "LayerScale2d"})"), "model.layers[5]"); }),
             Catch::Contains("model.layers[5].dim"));
  CHECK_THAT(test::error_of([] {
               build_layer(J(R"({"type": "LayerScale2d", "dim": 2, "init_values": 1e39})"), "model.layers[5]");
             }),
             Catch::Contains("model.layers[5].init_values"));
  CHECK_THAT(test::error_of([&] {
               (*ls)(Tensor::zeros({1, 5, 2, 2}));
             }),
             Catch::Contains("expected input (N, 6, H, W)"));
}

TEST_CASE("channel_gate scales each sample's channels by its own factor, with the gradients of x and the gate", "[blocks]") {
  const Tensor x = test::random_tensor({3, 4, 2, 5}, 11);
  const Tensor gate = test::random_tensor({3, 4, 1, 1}, 12, 0.f, 1.f);
  const std::vector<float> xv = x.to_vector(), gv = gate.to_vector();
  std::vector<float> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] * gv[i / 10];  // (n, c) = i / (H * W)
  REQUIRE(channel_gate(x, gate).to_vector() == want);
  REQUIRE(channel_gate(x.to(MemoryFormat::ChannelsLast), gate).contiguous().to_vector() == want);
  test::gradcheck([&](const Tensor& v) { return channel_gate(v, gate); }, x.clone(), 1e-2, 1e-3, 1e-4);
  test::gradcheck([&](const Tensor& v) { return channel_gate(x, v); }, gate.clone(), 1e-2, 1e-3, 1e-4);
  test::gradcheck([&](const Tensor& v) { return channel_gate(x.to(MemoryFormat::ChannelsLast), v); }, gate.clone(),
                  1e-2, 1e-3, 1e-4);
  CHECK_THAT(test::error_of([&] {
               channel_gate(x, Tensor::zeros({3, 4}));
             }),
             Catch::Contains("the gate must be float32 of shape (3, 4, 1, 1)"));
}

TEST_CASE("SqueezeExcitation is torchvision's: x * sigmoid(fc2(relu(fc1(mean)))), its names and keys",
          "[blocks][config]") {
  auto se =
      build_layer(J(R"({"type": "SqueezeExcitation", "input_channels": 6, "squeeze_channels": 2})"), "model.layers[7]");
  se->assign_paths();
  std::vector<std::string> names;
  for (const auto& [name, t] : se->named_parameters()) names.push_back(name);
  REQUIRE(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  REQUIRE(se->to_json() == J(R"({"type": "SqueezeExcitation", "input_channels": 6, "squeeze_channels": 2})"));
  const Tensor x = test::random_tensor({2, 6, 3, 4}, 13);
  const auto& m = dynamic_cast<const SqueezeExcitation&>(*se);
  Module &fc1 = m.fc1(), &fc2 = m.fc2();
  // The gate recomputed from the float64 mean of each plane through the same convolutions.
  std::vector<float> mean(12);
  const std::vector<float> xv = x.to_vector();
  for (int64_t p = 0; p < 12; ++p) {
    double s = 0;
    for (int64_t i = 0; i < 12; ++i) s += xv[p * 12 + i];
    mean[p] = static_cast<float>(s / 12);
  }
  const std::vector<float> gate = sigmoid(fc2(relu(fc1(Tensor::from_vector(mean, {2, 6, 1, 1}))))).to_vector();
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = static_cast<double>(xv[i]) * gate[i / 12];
  test::require_close((*se)(x).to_vector(), want, 1e-5, 1e-6, "y");
  test::gradcheck([&](const Tensor& v) { return (*se)(v); }, x.clone(), 1e-2, 1e-2, 1e-3);
  CHECK_THAT(test::error_of(
                 [] { build_layer(J(R"({"type": "SqueezeExcitation", "input_channels": 6})"), "model.layers[7]"); }),
             Catch::Contains("model.layers[7].squeeze_channels"));
  CHECK_THAT(test::error_of([] {
               build_layer(J(R"({"type": "SqueezeExcitation", "input_channels": 0, "squeeze_channels": 2})"),
                           "model.layers[7]");
             }),
             Catch::Contains("model.layers[7].input_channels"));
  CHECK_THAT(test::error_of([&] {
               (*se)(Tensor::zeros({1, 5, 2, 2}));
             }),
             Catch::Contains("expected input (N, 6, H, W)"));
}

TEST_CASE("LayerNorm2d, LayerScale2d and a projection Residual on CUDA match the CPU", "[blocks][cuda]") {
  MINIDL_REQUIRE_CUDA();
  test::require_cuda_matches_cpu(J(R"({"type": "LayerNorm2d", "num_channels": 96})"), {4, 96, 9, 7}, 31);
  test::require_cuda_matches_cpu(J(R"({"type": "LayerNorm2d", "num_channels": 5, "gelu": true})"), {3, 5, 4, 3}, 32);
  test::require_cuda_matches_cpu(J(R"({"type": "LayerScale2d", "dim": 96, "init_values": 0.5})"), {16, 96, 8, 8}, 33);
  test::require_cuda_matches_cpu(J(R"({"type": "LayerScale2d", "dim": 7, "init_values": 2.0})"), {3, 7, 5, 3}, 34);
  test::require_cuda_matches_cpu(J(kProjection), {2, 4, 9, 8}, 35);
  test::require_cuda_matches_cpu(J(R"({"type": "SqueezeExcitation", "input_channels": 96, "squeeze_channels": 24})"),
                                 {8, 96, 8, 8}, 36);
  test::require_cuda_matches_cpu(J(R"({"type": "SqueezeExcitation", "input_channels": 5, "squeeze_channels": 3})"),
                                 {3, 5, 7, 3}, 37);
}
