// The language-model layers: Embedding (lookup, the ordered gradient sums, PyTorch's normal_
// init), LMHead (F.linear with the tied embedding's weight, one parameter taking both gradients),
// and cross-entropy over (B, T, V) logits (the fused classifier) against float64 and finite
// differences; [cuda]: each on the GPU against the CPU, with GPT-2's V = 50257, the same bits
// every run.
#include <cmath>

#include "core/autocast.h"
#include "core/error.h"
#include "core/init.h"
#include "layers/linear/linear.h"
#include "layers/loss/loss.h"
#include "layers/registry.h"
#include "layers/transformer/embedding.h"
#include "layers/transformer/lm_head.h"
#include "test_util.h"

using namespace minidl;

namespace {

// Mean over rows of (1 - eps)(lse - x_label) + eps (lse - mean x), in float64.
double token_loss_ref(const std::vector<float>& x, const std::vector<int32_t>& labels, int64_t classes, double eps) {
  double total = 0;
  const int64_t rows = static_cast<int64_t>(labels.size());
  for (int64_t i = 0; i < rows; ++i) {
    double m = -INFINITY, s = 0, sum_x = 0;
    for (int64_t k = 0; k < classes; ++k) m = std::max(m, static_cast<double>(x[i * classes + k]));
    for (int64_t k = 0; k < classes; ++k) {
      s += std::exp(x[i * classes + k] - m);
      sum_x += x[i * classes + k];
    }
    const double lse = m + std::log(s);
    total += (1 - eps) * (lse - x[i * classes + labels[i]]) + eps * (lse - sum_x / static_cast<double>(classes));
  }
  return total / static_cast<double>(rows);
}

std::shared_ptr<Module> build_list(const std::string& layers) {
  auto m = build_sequential(nlohmann::json::parse(layers), "model.layers");
  m->assign_paths();
  return m;
}

}  // namespace

TEST_CASE("Embedding returns the ids' rows and sums each id's gradient rows", "[language_model]") {
  set_init_seed(2);
  Embedding e(7, 3);
  const std::vector<int32_t> ids = {4, 0, 4, 6, 4, 1};
  const Tensor x = Tensor::from_vector(ids, {2, 3});
  const Tensor y = e(x);
  REQUIRE(y.shape() == Shape{2, 3, 3});
  const std::vector<float> w = e.weight.to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t c = 0; c < 3; ++c) REQUIRE(yv[i * 3 + c] == w[static_cast<size_t>(ids[i]) * 3 + c]);
  const Tensor g = test::random_tensor({2, 3, 3}, 5);
  autograd::backward(y, g);
  const std::vector<float> gv = g.to_vector(), dw = e.weight.grad().to_vector();
  for (int32_t id = 0; id < 7; ++id)
    for (size_t c = 0; c < 3; ++c) {
      float want = 0.f;  // token order, as the kernels sum
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == id) want += gv[i * 3 + c];
      REQUIRE(dw[static_cast<size_t>(id) * 3 + c] == want);
    }
  test::gradcheck([&](const Tensor& wt) { return embedding(x, wt); }, e.weight.detach().clone());
  REQUIRE_THROWS_WITH(e(Tensor::from_vector(std::vector<int32_t>{1, 7}, {2})),
                      Catch::Contains("token id 7 at index 1") && Catch::Contains("num_embeddings 7"));
  REQUIRE_THROWS_WITH(e(test::random_tensor({2, 3}, 1)), Catch::Contains("int32 token ids"));
}

TEST_CASE("Embedding's init is normal_(std): PyTorch's N(0, 1) by default, unbounded", "[language_model]") {
  set_init_seed(3);
  auto m = build_list(R"([{"type": "Embedding", "num_embeddings": 100, "embedding_dim": 100}])");
  const std::vector<float> w = m->named_parameters().at(0).second.to_vector();
  double sq = 0, far = 0;
  for (float v : w) {
    sq += static_cast<double>(v) * v;
    far = std::max(far, std::fabs(static_cast<double>(v)));
  }
  CHECK(std::sqrt(sq / 10000) == Approx(1.0).margin(0.03));
  CHECK(far > 3.0);  // trunc_normal_ would stop at 2
  auto small = build_list(R"([{"type": "Embedding", "num_embeddings": 10, "embedding_dim": 100, "init_std": 0.02}])");
  double sq2 = 0;
  for (float v : small->named_parameters().at(0).second.to_vector()) sq2 += static_cast<double>(v) * v;
  CHECK(std::sqrt(sq2 / 1000) == Approx(0.02).margin(0.002));
}

TEST_CASE("LMHead is F.linear with the tied Embedding's weight, which takes both gradients", "[language_model]") {
  set_init_seed(4);
  auto m = build_list(R"([{"type": "Embedding", "num_embeddings": 9, "embedding_dim": 4},
                          {"type": "LayerNorm", "normalized_shape": [4]},
                          {"type": "LMHead", "tied_to": 0}])");
  std::vector<std::string> names;
  for (const auto& [name, t] : m->named_parameters()) names.push_back(name);
  REQUIRE(names == std::vector<std::string>{"0.weight", "1.weight", "1.bias"});
  auto& head = static_cast<LMHead&>(*m->children().at(2).second);
  REQUIRE(head.describe() == "LMHead tied to 0 (4->9)");
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 8, 1, 3, 0, 2}, {2, 3});
  const Tensor w = m->named_parameters().at(0).second;
  const Tensor y = (*m)(ids);
  REQUIRE(y.shape() == Shape{2, 3, 9});
  auto& norm = *m->children().at(1).second;
  REQUIRE(y.to_vector() == linear(norm(embedding(ids, w.detach())), w.detach(), Tensor()).to_vector());
  // The tied weight's gradient is the sum of the lookup's and the head's: finite differences of
  // the whole model as a function of that one tensor.
  const Tensor g = test::random_tensor(y.shape(), 6);
  autograd::backward(y, g);
  const std::vector<float> analytic = w.grad().to_vector();
  test::gradcheck([&](const Tensor& wt) { return linear(norm(embedding(ids, wt)), wt, Tensor()); }, w.detach().clone(),
                  1e-2, 2e-2, 2e-3, 6);
  Tensor wt = w.detach().clone();
  wt.set_requires_grad(true);
  autograd::backward(linear(norm(embedding(ids, wt)), wt, Tensor()), g);
  REQUIRE(analytic == wt.grad().to_vector());
  // Under bf16 autocast the logits are bf16, as Linear's.
  {
    const AutocastGuard ac(DType::BFloat16);
    REQUIRE((*m)(ids).dtype() == DType::BFloat16);
  }
  REQUIRE(build_list(m->to_json().at("layers").dump())->to_json() == m->to_json());
}

TEST_CASE("LMHead names what it cannot tie to", "[language_model]") {
  REQUIRE_THROWS_WITH(build_list(R"([{"type": "Linear", "in_features": 4, "out_features": 4},
                                     {"type": "LMHead", "tied_to": 0}])"),
                      Catch::Contains("model.layers[1]") && Catch::Contains("names a Linear, not an Embedding"));
  REQUIRE_THROWS_WITH(build_list(R"([{"type": "LMHead", "tied_to": 3}])"),
                      Catch::Contains("model.layers[0]") && Catch::Contains("tied_to 3 is past the 1 layers"));
  REQUIRE_THROWS_WITH(build_list(R"([{"type": "LMHead", "tied_to": -1}])"),
                      Catch::Contains("model.layers[0].tied_to: expected an integer in 0.."));
  auto alone = build_layer(nlohmann::json::parse(R"({"type": "LMHead", "tied_to": 0})"), "head");
  REQUIRE_THROWS_WITH((*alone)(test::random_tensor({2, 4}, 1)), Catch::Contains("not tied to an Embedding"));
}

TEST_CASE("cross_entropy over (B, T, V) matches float64 and finite differences, with label smoothing",
          "[language_model]") {
  const std::vector<int32_t> labels = {3, 0, 10, 7, 7, 1};
  const Tensor y = Tensor::from_vector(labels, {2, 3});
  for (float eps : {0.f, 0.1f}) {
    const Tensor x = test::random_tensor({2, 3, 11}, 8, -3.f, 3.f);
    const Tensor loss = cross_entropy(x, y, eps);
    REQUIRE(loss.shape() == Shape{1});
    REQUIRE(loss.item() == Approx(token_loss_ref(x.to_vector(), labels, 11, eps)).epsilon(1e-6));
    // The same loss as the (N, K) form over the flattened tokens.
    REQUIRE(loss.item() == Approx(cross_entropy(x.reshape({6, 11}), y.reshape({6}), eps).item()).epsilon(1e-6));
    test::gradcheck([&](const Tensor& t) { return cross_entropy(t, y, eps); }, x.clone(), 1e-2, 1e-2, 1e-4);
  }
  // bfloat16 logits on the CPU are widened: the float32 loss of the rounded values.
  const Tensor xb = test::random_tensor({2, 3, 11}, 9).to(DType::BFloat16);
  REQUIRE(cross_entropy(xb, y).item() == cross_entropy(xb.to(DType::Float32), y).item());
  REQUIRE_THROWS_WITH(cross_entropy(test::random_tensor({2, 3, 11}, 1), Tensor::from_vector(labels, {3, 2})),
                      Catch::Contains("take int32 labels (2, 3)"));
  REQUIRE_THROWS_WITH(cross_entropy(test::random_tensor({2, 3, 4}, 1), y), Catch::Contains("labels[2] = 10"));
}

TEST_CASE("Embedding on CUDA gives the CPU's bits, forward and backward", "[language_model][cuda]") {
  MINIDL_REQUIRE_CUDA();
  // Repeated ids (a run of 40 of id 3) and GPT-2's vocabulary.
  for (int64_t vocab : {int64_t{17}, int64_t{50257}}) {
    const Tensor ids = test::random_ids({4, 64}, static_cast<int32_t>(std::min<int64_t>(vocab, 5)), 3);
    const Tensor w = test::random_tensor({vocab, 24}, 4);
    const Tensor g = test::random_tensor({4, 64, 24}, 5);
    Tensor wc = w.clone(), wg = w.to(Device::cuda());
    wc.set_requires_grad(true);
    wg.set_requires_grad(true);
    const Tensor yc = embedding(ids, wc), yg = embedding(ids.to(Device::cuda()), wg);
    REQUIRE(yg.to_vector() == yc.to_vector());
    autograd::backward(yc, g);
    autograd::backward(yg, g.to(Device::cuda()));
    REQUIRE(wg.grad().to_vector() == wc.grad().to_vector());
  }
}

// GPT-2's 50257 (rows read one logit at a time) and its padded 50304 (16-byte packs).
TEST_CASE(
    "cross_entropy over (B, T, 50257 or 50304) on CUDA matches the CPU in float32 and bfloat16, the same bits every "
    "run",
    "[language_model][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const int64_t V : {int64_t{50257}, int64_t{50304}})
    for (DType t : {DType::Float32, DType::BFloat16}) {
      const Tensor labels = test::random_ids({2, 5}, static_cast<int32_t>(V), 11);
      for (float eps : {0.f, 0.1f}) {
        const Tensor x = test::random_tensor({2, 5, V}, 12, -8.f, 8.f).to(t).to(DType::Float32);
        Tensor xc = x.clone(), xg = x.to(Device::cuda());
        xc.set_requires_grad(true);
        xg.set_requires_grad(true);
        const Tensor lc = cross_entropy(xc.to(t), labels, eps),
                     lg = cross_entropy(xg.to(t), labels.to(Device::cuda()), eps);
        REQUIRE(lg.item() == Approx(lc.item()).epsilon(1e-5));
        autograd::backward(lc, Tensor::from_vector(std::vector<float>{2.f}, {1}));
        autograd::backward(lg, Tensor::from_vector(std::vector<float>{2.f}, {1}, Device::cuda()));
        const std::vector<float> gc = xc.grad().to_vector(), gg = xg.grad().to_vector();
        double worst = 0;
        for (size_t i = 0; i < gc.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(gg[i]) - gc[i]));
        // Gradients are at most 2/10 in size; bf16 keeps 8 bits.
        CHECK(worst < (t == DType::Float32 ? 1e-6 : 2e-3));
        Tensor xg2 = x.to(Device::cuda());
        xg2.set_requires_grad(true);
        const Tensor lg2 = cross_entropy(xg2.to(t), labels.to(Device::cuda()), eps);
        autograd::backward(lg2, Tensor::from_vector(std::vector<float>{2.f}, {1}, Device::cuda()));
        REQUIRE(lg2.item() == lg.item());
        REQUIRE(xg2.grad().to_vector() == gg);
      }
      // bf16's 8 bits make ties among 50k logits: the earliest index wins on both.
      const Tensor x = test::random_tensor({2, 5, V}, 13, -8.f, 8.f).to(t);
      const Tensor xg = x.to(Device::cuda());
      REQUIRE(argmax_rows(xg).values<int32_t>() == argmax_rows(x).values<int32_t>());
      REQUIRE(count_correct(xg, labels.to(Device::cuda())) == count_correct(x, labels));
    }
}
