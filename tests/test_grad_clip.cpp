// Gradient clipping by global norm: PyTorch clip_grad_norm_'s rule against a float64 reference,
// the fixed summation order (the same bits twice, and on the CPU and the GPU), NaN propagation,
// and the config key's checks.
#include <cmath>

#include "core/error.h"
#include "optim/grad_clip.h"
#include "train/config.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

// Ragged gradients: empty, smaller than a chunk, several chunks, and more tensors than one CUDA
// launch takes (128), so every path of the chunk table is crossed.
std::vector<std::vector<float>> ragged_values(float scale) {
  std::vector<std::vector<float>> v;
  v.push_back({});
  v.push_back(test::random_values(3 * 4096 + 17, 1, -scale, scale));
  for (int i = 0; i < 140; ++i) v.push_back(test::random_values(1 + 29 * i, 100 + i, -scale, scale));
  v.push_back(test::random_values(4096, 2, -scale, scale));
  return v;
}

std::vector<Tensor> tensors_of(const std::vector<std::vector<float>>& values, Device device) {
  std::vector<Tensor> t;
  for (const auto& v : values) t.push_back(Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, device));
  return t;
}

double norm64(const std::vector<std::vector<float>>& values) {
  double s = 0;
  for (const auto& v : values)
    for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

std::vector<Device> clip_devices() {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  return devices;
}

}  // namespace

TEST_CASE("grad clip: a norm above max_norm scales every gradient by max_norm / (norm + 1e-6)", "[grad_clip]") {
  const auto values = ragged_values(0.5f);
  const double norm = norm64(values);
  for (Device device : clip_devices()) {
    INFO(device.str());
    std::vector<Tensor> grads = tensors_of(values, device);
    GradClipper clipper(1.0, grads, device);
    clipper.clip(grads);
    CHECK(clipper.total_norm() == Approx(norm).epsilon(1e-5));
    const double coef = 1.0 / (norm + 1e-6);
    REQUIRE(coef < 0.1);
    CHECK(grads[0].numel() == 0);
    for (size_t k = 1; k < values.size(); ++k) {
      std::vector<double> want;
      for (float x : values[k]) want.push_back(x * coef);
      test::require_close(grads[k].to_vector(), want, 1e-5, 1e-12, "gradient " + std::to_string(k));
    }
  }
}

TEST_CASE("grad clip: exact on a 3-4-5 gradient, and a norm below max_norm leaves the bits", "[grad_clip]") {
  for (Device device : clip_devices()) {
    INFO(device.str());
    std::vector<Tensor> g{Tensor::from_vector(std::vector<float>{3.f, 4.f}, {2}, device)};
    GradClipper clipper(1.0, g, device);
    clipper.clip(g);
    CHECK(clipper.total_norm() == 5.f);
    const float coef = 1.f / (5.f + 1e-6f);
    CHECK(g[0].to_vector() == std::vector<float>{3.f * coef, 4.f * coef});

    const auto values = ragged_values(1e-3f);
    std::vector<Tensor> small = tensors_of(values, device);
    GradClipper loose(2.0, small, device);
    loose.clip(small);
    CHECK(loose.total_norm() < 2.f);
    for (size_t k = 0; k < values.size(); ++k) REQUIRE(small[k].to_vector() == values[k]);
  }
}

TEST_CASE("grad clip: a fixed summation order: the same bits twice and on every device", "[grad_clip]") {
  const auto values = ragged_values(3.f);
  std::vector<std::vector<float>> first;
  float first_norm = 0;
  for (Device device : clip_devices()) {
    for (int run = 0; run < 2; ++run) {
      INFO(device.str() << " run " << run);
      std::vector<Tensor> grads = tensors_of(values, device);
      GradClipper clipper(0.25, grads, device);
      clipper.clip(grads);
      if (first.empty()) {
        first_norm = clipper.total_norm();
        for (const Tensor& g : grads) first.push_back(g.to_vector());
        continue;
      }
      REQUIRE(clipper.total_norm() == first_norm);
      for (size_t k = 0; k < grads.size(); ++k) REQUIRE(grads[k].to_vector() == first[k]);
    }
  }
}

TEST_CASE("grad clip: a NaN gradient makes the norm and every gradient NaN, as PyTorch's", "[grad_clip]") {
  for (Device device : clip_devices()) {
    INFO(device.str());
    std::vector<Tensor> g{Tensor::from_vector(std::vector<float>{1.f, NAN}, {2}, device),
                          Tensor::from_vector(std::vector<float>{0.5f}, {1}, device)};
    GradClipper clipper(1.0, g, device);
    clipper.clip(g);
    CHECK(std::isnan(clipper.total_norm()));
    CHECK(std::isnan(g[1].to_vector()[0]));
  }
}

TEST_CASE("grad clip: more gradient than the clipper was made for, or not float32, is refused", "[grad_clip]") {
  std::vector<Tensor> small{Tensor::zeros({10}, DType::Float32, Device::cpu())};
  GradClipper clipper(1.0, small, Device::cpu());
  std::vector<Tensor> big{Tensor::zeros({5000}, DType::Float32, Device::cpu())};
  CHECK_THROWS_WITH(clipper.clip(big), Catch::Contains("more than the parameters"));
  std::vector<Tensor> half{Tensor::zeros({10}, DType::BFloat16, Device::cpu())};
  CHECK_THROWS_WITH(clipper.clip(half), Catch::Contains("float32 gradients"));
  CHECK_THROWS_WITH(GradClipper(0.0, small, Device::cpu()), Catch::Contains("max_norm > 0"));
}

TEST_CASE("grad clip: the config key is a number > 0, printed back only when set", "[grad_clip][config]") {
  json base = json::parse(R"({"model": {"layers": []}, "optimizer": {"type": "SGD", "lr": 0.1}})");
  CHECK_FALSE(parse_train_config(base).to_json().contains("grad_clip"));
  json set = base;
  set["grad_clip"] = 1.0;
  const TrainConfig c = parse_train_config(set);
  CHECK(c.grad_clip == 1.0);
  CHECK(c.to_json().at("grad_clip") == 1.0);
  for (const char* bad : {"0", "-1", "\"big\""}) {
    json b = base;
    b["grad_clip"] = json::parse(bad);
    CHECK_THROWS_WITH(parse_train_config(b), Catch::Contains("grad_clip"));
  }
}
