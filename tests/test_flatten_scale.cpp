// Flatten (a view: shapes, shared storage, gradients) and Scale (values, gradients), with their
// factories; on CUDA, the op harness runs both (tests/test_op_harness_cuda.cpp).
#include "core/autograd.h"
#include "core/error.h"
#include "layers/containers/flatten.h"
#include "layers/registry.h"
#include "layers/containers/scale.h"
#include "test_util.h"

using namespace minidl;

namespace {
nlohmann::json J(const char* text) { return nlohmann::json::parse(text); }
}  // namespace

TEST_CASE("flatten merges a range of dims into a view", "[flatten]") {
  Tensor x = test::random_tensor({2, 3, 4, 5}, 1);
  REQUIRE(flatten(x).shape() == Shape{2, 60});
  REQUIRE(flatten(x, 0).shape() == Shape{120});
  REQUIRE(flatten(x, 2).shape() == Shape{2, 3, 20});
  REQUIRE(flatten(x, 1, 2).shape() == Shape{2, 12, 5});
  REQUIRE(flatten(x, -3, -2).shape() == Shape{2, 12, 5});
  REQUIRE(flatten(x, 3).shape() == Shape{2, 3, 4, 5});
  Tensor v = flatten(x);
  REQUIRE(v.to_vector() == x.to_vector());
  x.fill_(2.f);  // a view: same storage
  REQUIRE(v.to_vector() == std::vector<float>(120, 2.f));
  REQUIRE_THROWS_WITH(flatten(x, 2, 1), Catch::Contains("start_dim 2") && Catch::Contains("(2, 3, 4, 5)"));
  REQUIRE_THROWS_WITH(flatten(x, 4), Catch::Contains("start_dim 4"));
  test::gradcheck([](const Tensor& t) { return flatten(t); }, test::random_tensor({2, 3, 2}, 2));
}

TEST_CASE("Scale multiplies by a fixed value", "[scale]") {
  auto s = build_layer(J(R"({"type": "Scale", "value": 0.125})"), "model.layers[9]");
  REQUIRE(s->type_name() == "Scale");
  REQUIRE(s->to_json() == J(R"({"type": "Scale", "value": 0.125})"));
  REQUIRE(s->named_parameters().empty());
  Tensor x = Tensor::from_vector(std::vector<float>{8.f, -1.f, 0.3f}, {3});
  REQUIRE((*s)(x).to_vector() == std::vector<float>{1.f, -0.125f, 0.3f * 0.125f});
  test::gradcheck([&](const Tensor& t) { return (*s)(t); }, test::random_tensor({4, 3}, 3));
  // 1/9 (airbench) survives the round trip through the printed config.
  auto ninth = build_layer(J(R"({"type": "Scale", "value": 0.1111111111111111})"), "m");
  auto again = build_layer(ninth->to_json(), "m");
  REQUIRE((*again)(x).to_vector() == (*ninth)(x).to_vector());
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "Scale"})"), "model.layers[9]"),
                      Catch::Contains("model.layers[9].value"));
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "Scale", "value": "big"})"), "model.layers[9]"),
                      Catch::Contains("model.layers[9].value"));
  // Finite as a double, infinite as the float32 the layer multiplies by.
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "Scale", "value": -1e39})"), "model.layers[9]"),
                      Catch::Contains("model.layers[9].value: expected a finite float32 number"));
}

TEST_CASE("Flatten factory reads start_dim and end_dim", "[flatten][config]") {
  auto f = build_layer(J(R"({"type": "Flatten"})"), "model.layers[5]");
  REQUIRE(f->to_json() == J(R"({"type": "Flatten", "start_dim": 1, "end_dim": -1})"));
  REQUIRE((*f)(Tensor::zeros({2, 3, 4})).shape() == Shape{2, 12});
  auto g = build_layer(J(R"({"type": "Flatten", "start_dim": 0, "end_dim": 1})"), "m");
  REQUIRE((*g)(Tensor::zeros({2, 3, 4})).shape() == Shape{6, 4});
  REQUIRE_THROWS_WITH(build_layer(J(R"({"type": "Flatten", "dim": 1})"), "model.layers[5]"),
                      Catch::Contains("model.layers[5].dim"));
}

