// Core: tensors, views, copies, autograd (accumulation, shared inputs, tape freeing, no-grad),
// the counter RNG, modules' state dicts and the layer factory's errors.
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "core/tensor_ops.h"
#include "layers/registry.h"
#include "layers/containers/residual.h"
#include "layers/containers/sequential.h"
#include "test_util.h"

using namespace minidl;

TEST_CASE("tensor factories, shape and values", "[core]") {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  REQUIRE(t.numel() == 6);
  REQUIRE(t.dim() == 2);
  REQUIRE(t.size(-1) == 3);
  REQUIRE(t.is_contiguous());
  REQUIRE(t.strides() == std::vector<int64_t>{3, 1});
  REQUIRE(t.to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(Tensor::full({4}, 2.5f).to_vector() == std::vector<float>(4, 2.5f));
  REQUIRE(Tensor::zeros({3}, DType::Int32).values<int32_t>() == std::vector<int32_t>(3, 0));
  REQUIRE_THROWS_WITH(t.size(2), Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(t.data<int32_t>(), Catch::Contains("float32"));
  REQUIRE_THROWS_WITH(Tensor::from_vector(std::vector<float>{1, 2}, {3}), Catch::Contains("2 values"));
}

TEST_CASE("reshape is a view and clone is a copy", "[core]") {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor v = t.reshape({3, -1});
  REQUIRE(v.shape() == Shape{3, 2});
  Tensor c = t.clone();
  t.fill_(7.f);
  REQUIRE(v.to_vector() == std::vector<float>(6, 7.f));
  REQUIRE(c.to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE_THROWS_WITH(t.reshape({4, -1}), Catch::Contains("cannot reshape"));
}

TEST_CASE("autograd accumulates through shared inputs and frees the tape", "[core][autograd]") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, -2, 3}, {3});
  x.set_requires_grad(true);
  // y = (x + x*2) * 3 + x  =>  dy/dx = 10
  Tensor y = add(mul(add(x, mul(x, 2.f)), 3.f), x);
  Tensor g = Tensor::from_vector(std::vector<float>{1, 1, 1}, {3});
  autograd::backward(y, g);
  REQUIRE(x.grad().to_vector() == std::vector<float>{10, 10, 10});
  REQUIRE(y.grad_fn()->inputs.empty());  // tape freed
  // A second backward through a new graph accumulates into the leaf.
  autograd::backward(mul(x, 0.5f), g);
  REQUIRE(x.grad().to_vector() == std::vector<float>{10.5f, 10.5f, 10.5f});
  // A new graph built on a node an earlier backward ran through: a clear error, not a call of
  // the freed backward function.
  Tensor shared = mul(x, 2.f);
  autograd::backward(add(shared, x), g);
  REQUIRE_THROWS_WITH(autograd::backward(add(shared, x), g),
                      Catch::Contains("op 'mul'") && Catch::Contains("backpropagated through already"));
}

TEST_CASE("the leaf hook tells each leaf once, when its gradient is complete", "[core][autograd]") {
  auto leaf = [](float v) {
    Tensor t = Tensor::from_vector(std::vector<float>{v}, {1});
    t.set_requires_grad(true);
    return t;
  };
  Tensor a = leaf(1), b = leaf(2), c = leaf(3), unused = leaf(4);
  // y = (a * 2 + b) * 3 + a + c * 5: a feeds two nodes, the last of them late in backward.
  const Tensor y = add(add(mul(add(mul(a, 2.f), b), 3.f), a), mul(c, 5.f));
  std::vector<std::pair<const TensorImpl*, float>> told;  // the leaf and its gradient when told
  {
    autograd::LeafGradHookScope hook([&](const TensorImpl* t) {
      const Tensor& which = t == a.impl() ? a : t == b.impl() ? b : t == c.impl() ? c : unused;
      told.emplace_back(t, which.grad().to_vector()[0]);
    });
    autograd::backward(y, Tensor::full({1}, 1.f));
  }
  REQUIRE(told.size() == 3);  // unused is not in the graph
  for (const auto& [t, g] : told) {
    INFO("leaf " << (t == a.impl() ? "a" : t == b.impl() ? "b" : "c"));
    // Complete when told: the gradient it ends the backward with.
    CHECK(g == (t == a.impl() ? 7.f : t == b.impl() ? 3.f : 5.f));
  }
  // Outside the scope nothing is told.
  autograd::backward(mul(a, 2.f), Tensor::full({1}, 1.f));
  CHECK(told.size() == 3);
}

TEST_CASE("a leaf's gradient owns its storage and keeps its address from step to step", "[core][autograd]") {
  // What a CUDA graph of the training step relies on: its update kernels read the gradient at the
  // address of the capture, so accumulation must write there rather than into a new sum.
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor b = Tensor::from_vector(std::vector<float>{3, 4}, {2}).set_requires_grad(true);
  Tensor g = Tensor::from_vector(std::vector<float>{1, 1}, {2});
  autograd::backward(add(a, b), g);  // add's backward returns one storage for both inputs
  const void* a_storage = a.grad().raw_data();
  REQUIRE(a_storage != b.grad().raw_data());
  REQUIRE(a_storage != g.raw_data());
  autograd::backward(add(a, b), g);
  REQUIRE(a.grad().raw_data() == a_storage);
  REQUIRE(a.grad().to_vector() == std::vector<float>{2, 2});
  REQUIRE(b.grad().to_vector() == std::vector<float>{2, 2});
  a.grad().zero_();
  autograd::backward(mul(a, 3.f), g);
  REQUIRE(a.grad().raw_data() == a_storage);
  REQUIRE(a.grad().to_vector() == std::vector<float>{3, 3});
  REQUIRE(b.grad().to_vector() == std::vector<float>{2, 2});
}

TEST_CASE("gradients through reshape and the residual add", "[core][autograd]") {
  test::gradcheck([](const Tensor& x) { return add(x.reshape({6}), mul(x, 3.f).reshape({6})); },
                  test::random_tensor({2, 3}, 1));
}

TEST_CASE("no-grad guard stops recording", "[core][autograd]") {
  Tensor x = Tensor::full({2}, 1.f).set_requires_grad(true);
  {
    autograd::NoGradGuard guard;
    Tensor y = mul(x, 2.f);
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(y.grad_fn() == nullptr);
  }
  REQUIRE(mul(x, 2.f).requires_grad());
  Tensor plain = Tensor::full({2}, 1.f);
  REQUIRE_THROWS_WITH(mul(plain, 2.f).backward(), Catch::Contains("one-element"));
}

TEST_CASE("philox is a pure function of seed, stream and index", "[core][rng]") {
  Philox4 a = philox(42, 3, 1000), b = philox(42, 3, 1000);
  for (int i = 0; i < 4; ++i) REQUIRE(a.v[i] == b.v[i]);
  Philox4 c = philox(42, 4, 1000), d = philox(43, 3, 1000), e = philox(42, 3, 1001);
  REQUIRE(a.v[0] != c.v[0]);
  REQUIRE(a.v[0] != d.v[0]);
  REQUIRE(a.v[0] != e.v[0]);
  // Philox4x32-10 known-answer test (Random123 kat_vectors: counter 0, key 0).
  Philox4 z = philox(0, 0, 0);
  REQUIRE(z.v[0] == 0x6627e8d5u);
  REQUIRE(z.v[1] == 0xe169c58du);
  REQUIRE(z.v[2] == 0xbc57ac4cu);
  REQUIRE(z.v[3] == 0x9b00dbd8u);
  // Uniform draws look uniform: mean of 100k draws within 0.005 of 0.5.
  double s = 0;
  for (uint64_t i = 0; i < 100000; ++i) s += uniform01(philox(1, 2, i).v[1]);
  REQUIRE(std::fabs(s / 100000 - 0.5) < 0.005);
}

TEST_CASE("init draws depend on seed and order only", "[core][rng]") {
  Tensor a = Tensor::empty({100}), b = Tensor::empty({100}), c = Tensor::empty({100});
  set_init_seed(5);
  init_uniform_(a, 0.1f);
  set_init_seed(5);
  init_uniform_(b, 0.1f);
  init_uniform_(c, 0.1f);
  REQUIRE(a.to_vector() == b.to_vector());
  REQUIRE(a.to_vector() != c.to_vector());
  for (float v : a.to_vector()) REQUIRE(std::fabs(v) <= 0.1f);
}

TEST_CASE("state dict names follow PyTorch and nested containers", "[core][module]") {
  nlohmann::json layers = nlohmann::json::parse(R"([
    {"type": "Conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1, "bias": false},
    {"type": "BatchNorm2d", "num_features": 4},
    {"type": "Residual", "body": [
      {"type": "Conv2d", "in_channels": 4, "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "ReLU"}]},
    {"type": "GlobalMaxPool2d"},
    {"type": "Linear", "in_features": 4, "out_features": 10, "bias": false}
  ])");
  auto model = build_sequential(layers, "model.layers");
  model->assign_paths();
  std::vector<std::string> names;
  for (auto& kv : model->state_dict()) names.push_back(kv.first);
  REQUIRE(names == std::vector<std::string>{"0.weight", "1.weight", "1.bias", "2.0.weight", "2.0.bias",
                                            "4.weight", "1.running_mean", "1.running_var"});
  auto mods = model->named_modules();
  REQUIRE(mods[4].first == "2.0");
  // to_json prints a config that builds the same structure.
  auto again = build_layer(model->to_json(), "again");
  REQUIRE(again->state_dict().size() == model->state_dict().size());
  // load_state_dict rejects missing, extra and mis-shaped tensors, naming them.
  auto state = model->state_dict();
  state.pop_back();
  REQUIRE_THROWS_WITH(model->load_state_dict(state), Catch::Contains("missing tensor '1.running_var'"));
  state = model->state_dict();
  state.push_back({"9.weight", Tensor::zeros({1})});
  REQUIRE_THROWS_WITH(model->load_state_dict(state), Catch::Contains("unexpected tensor '9.weight'"));
  state = model->state_dict();
  state[0].second = Tensor::zeros({1});
  REQUIRE_THROWS_WITH(model->load_state_dict(state), Catch::Contains("'0.weight'"));
}

TEST_CASE("layer factory errors name the key path", "[core][module]") {
  using nlohmann::json;
  REQUIRE_THROWS_WITH(build_sequential(json::parse(R"([{"type": "Conv4d"}])"), "model.layers"),
                      Catch::Contains("model.layers[0].type: unknown layer 'Conv4d'"));
  REQUIRE_THROWS_WITH(build_sequential(json::parse(R"([{"type": "ReLU", "inplace": true}])"), "model.layers"),
                      Catch::Contains("model.layers[0].inplace: unknown key"));
  // The known keys listed include the optional ones a layer reads only when present.
  REQUIRE_THROWS_WITH(build_sequential(json::parse(R"([{"type": "Conv2d", "in_channels": 3, "out_channels": 4,
                                                        "kernel_size": 3, "strides": 2}])"),
                                       "model.layers"),
                      Catch::Contains("model.layers[0].strides: unknown key") && Catch::Contains(" stride,"));
  REQUIRE_THROWS_WITH(
      build_sequential(json::parse(R"([{"type": "Linear", "in_features": "4", "out_features": 2}])"), "m"),
      Catch::Contains("m[0].in_features: expected an integer"));
  REQUIRE_THROWS_WITH(build_sequential(json::parse(R"([{"type": "Linear", "out_features": 2}])"), "m"),
                      Catch::Contains("m[0].in_features: required key is missing"));
  REQUIRE_THROWS_WITH(build_sequential(json::parse(R"({"type": "ReLU"})"), "model.layers"),
                      Catch::Contains("model.layers: expected a list"));
}

TEST_CASE("residual checks that the body keeps the shape", "[core][module]") {
  auto res = build_layer(nlohmann::json::parse(R"({"type": "Residual", "body": [{"type": "MaxPool2d", "kernel_size": 2}]})"),
                         "r");
  REQUIRE_THROWS_WITH((*res)(Tensor::zeros({1, 2, 4, 4})), Catch::Contains("does not match its input"));
}
