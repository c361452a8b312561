// The transformer layers: self-attention against a float64 reference and finite differences
// (with and without attention dropout), MultiheadAttention and TransformerEncoderLayer against
// their definitions and PyTorch's state_dict names, the token layers (Tokens, PositionEmbedding,
// ClassToken, TokenPool) forward and backward, the factories; [cuda]: every layer on the GPU
// against the CPU in float32 and bfloat16, the same bits on repeated runs, and a training step of
// a small ViT captured as a CUDA graph against the eager step.
#include <cmath>

#include "core/autocast.h"
#include "core/cuda_graph.h"
#include "core/error.h"
#include "core/init.h"
#include "core/settings.h"
#include "core/tensor_ops.h"
#include "layers/activation/activation.h"
#include "layers/loss/loss.h"
#include "layers/registry.h"
#include "layers/regularization/dropout.h"
#include "layers/transformer/attention.h"
#include "layers/transformer/encoder_layer.h"
#include "layers/transformer/tokens.h"
#include "test_util.h"

using namespace minidl;

namespace {

struct DropoutStateGuard {
  uint64_t seed = dropout_seed();
  int64_t step = dropout_step();
  ~DropoutStateGuard() {
    set_dropout_seed(seed);
    set_dropout_step(step);
  }
};

// Self-attention of qkv (N, T, 3D) in float64, the definition written out; causal: query i sees
// keys 0..i.
std::vector<double> attention_ref(const Tensor& qkv, int64_t heads, bool causal = false) {
  const std::vector<float> v = qkv.to_vector();
  const int64_t n = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / 3, hd = d / heads;
  std::vector<double> out(static_cast<size_t>(n * t * d));
  auto at = [&](int64_t b, int64_t tok, int64_t which, int64_t h, int64_t c) {
    return static_cast<double>(v[static_cast<size_t>((b * t + tok) * 3 * d + which * d + h * hd + c)]);
  };
  for (int64_t b = 0; b < n; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < t; ++i) {
        const int64_t seen = causal ? i + 1 : t;
        std::vector<double> s(static_cast<size_t>(seen));
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < hd; ++c) dot += at(b, i, 0, h, c) * at(b, j, 1, h, c);
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          max = std::max(max, s[j]);
        }
        for (double& e : s) sum += (e = std::exp(e - max));
        for (int64_t c = 0; c < hd; ++c) {
          double o = 0;
          for (int64_t j = 0; j < seen; ++j) o += s[j] / sum * at(b, j, 2, h, c);
          out[static_cast<size_t>((b * t + i) * d + h * hd + c)] = o;
        }
      }
  return out;
}

std::shared_ptr<Module> build(const std::string& spec, const std::string& path = "m") {
  auto m = build_layer(nlohmann::json::parse(spec), path);
  m->assign_paths(path);
  return m;
}

std::vector<std::string> names(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(name);
  return out;
}

void require_close_scaled(const std::vector<float>& got, const std::vector<float>& want, double tol,
                          const std::string& what) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  test::require_close(got, want, 0.0, tol * std::max(scale, 1e-30), what);
}

}  // namespace

TEST_CASE("self_attention matches the float64 definition", "[transformer]") {
  for (int64_t heads : {1, 2, 3}) {
    const Tensor qkv = test::random_tensor({2, 7, 3 * heads * 4}, 10 + heads, -2.f, 2.f);
    test::require_close(self_attention(qkv, heads).to_vector(), attention_ref(qkv, heads), 1e-5, 1e-6,
                        str("heads ", heads));
  }
}

TEST_CASE("self_attention backward matches finite differences", "[transformer]") {
  test::gradcheck([](const Tensor& x) { return self_attention(x, 2); }, test::random_tensor({2, 5, 12}, 3), 1e-2,
                  2e-2, 2e-3);
}

TEST_CASE("attention dropout: a fixed mask of the probabilities, the same in the backward", "[transformer]") {
  const DropoutStateGuard guard;
  set_dropout_seed(4);
  set_dropout_step(2);
  const Tensor qkv = test::random_tensor({2, 6, 12}, 5);
  const Tensor plain = self_attention(qkv, 2);
  const Tensor a = self_attention(qkv, 2, 0.3f, 11);
  REQUIRE(a.to_vector() == self_attention(qkv, 2, 0.3f, 11).to_vector());
  CHECK(a.to_vector() != plain.to_vector());
  CHECK(a.to_vector() != self_attention(qkv, 2, 0.3f, 12).to_vector());
  // p = 1 drops every probability.
  for (float v : self_attention(qkv, 2, 1.f, 11).to_vector()) REQUIRE(v == 0.f);
  test::gradcheck([](const Tensor& x) { return self_attention(x, 2, 0.3f, 11); }, qkv.clone(), 1e-2, 2e-2, 2e-3);
}

TEST_CASE("causal self_attention matches the float64 definition, and no token sees the tokens after it",
          "[transformer]") {
  for (int64_t heads : {1, 3}) {
    const Tensor qkv = test::random_tensor({2, 9, 3 * heads * 4}, 20 + heads, -2.f, 2.f);
    const Tensor y = self_attention(qkv, heads, 0.f, 0, true);
    test::require_close(y.to_vector(), attention_ref(qkv, heads, true), 1e-5, 1e-6, str("heads ", heads));
    CHECK(y.to_vector() != self_attention(qkv, heads).to_vector());
    // Changing the last token changes only the last token's output.
    std::vector<float> v = qkv.to_vector();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < qkv.size(2); ++c) v[static_cast<size_t>((b * 9 + 8) * qkv.size(2) + c)] += 1.f;
    const std::vector<float> y2 = self_attention(Tensor::from_vector(v, qkv.shape()), heads, 0.f, 0, true).to_vector();
    const std::vector<float> y1 = y.to_vector();
    const int64_t d = qkv.size(2) / 3;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 9; ++i)
        for (int64_t c = 0; c < d; ++c) {
          const size_t e = static_cast<size_t>((b * 9 + i) * d + c);
          if (i < 8) REQUIRE(y2[e] == y1[e]);
        }
  }
  test::gradcheck([](const Tensor& x) { return self_attention(x, 2, 0.f, 0, true); }, test::random_tensor({2, 5, 12}, 4),
                  1e-2, 2e-2, 2e-3);
  const DropoutStateGuard guard;
  set_dropout_seed(4);
  set_dropout_step(3);
  test::gradcheck([](const Tensor& x) { return self_attention(x, 2, 0.3f, 11, true); }, test::random_tensor({2, 6, 12}, 5),
                  1e-2, 2e-2, 2e-3);
}

TEST_CASE("self_attention rejects inputs that do not split into heads", "[transformer]") {
  REQUIRE_THROWS_WITH(self_attention(Tensor::zeros({2, 3, 10}), 2), Catch::Contains("3 * num_heads"));
  REQUIRE_THROWS_WITH(self_attention(Tensor::zeros({6, 10}), 1), Catch::Contains("(N, T, 3 * embed_dim)"));
}

TEST_CASE("MultiheadAttention: PyTorch's parameter names and in_proj -> attention -> out_proj", "[transformer]") {
  set_init_seed(1);
  auto m = build(R"({"type": "MultiheadAttention", "embed_dim": 8, "num_heads": 2})");
  REQUIRE(names(*m) == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  auto& mha = static_cast<MultiheadAttention&>(*m);
  REQUIRE(mha.in_proj_weight.shape() == Shape{24, 8});
  // Biases start at zero, the in_proj weight within xavier's bound sqrt(6 / 32).
  for (float v : mha.in_proj_bias.to_vector()) REQUIRE(v == 0.f);
  for (float v : mha.out_proj->bias.to_vector()) REQUIRE(v == 0.f);
  for (float v : mha.in_proj_weight.to_vector()) REQUIRE(std::fabs(v) <= std::sqrt(6.f / 32.f));
  mha.in_proj_bias.copy_(test::random_tensor({24}, 2));
  const Tensor x = test::random_tensor({3, 5, 8}, 3);
  const Tensor want = linear(self_attention(linear(x, mha.in_proj_weight, mha.in_proj_bias), 2), mha.out_proj->weight,
                             mha.out_proj->bias);
  REQUIRE((*m)(x).to_vector() == want.to_vector());
  auto no_bias = build(R"({"type": "MultiheadAttention", "embed_dim": 8, "num_heads": 4, "bias": false})");
  REQUIRE(names(*no_bias) == std::vector<std::string>{"in_proj_weight", "out_proj.weight"});
  REQUIRE(build(m->to_json().dump())->to_json() == m->to_json());
}

TEST_CASE("MultiheadAttention gradients match finite differences", "[transformer]") {
  auto m = build(R"({"type": "MultiheadAttention", "embed_dim": 6, "num_heads": 3})");
  test::gradcheck([&](const Tensor& x) { return (*m)(x); }, test::random_tensor({2, 4, 6}, 21), 1e-2, 2e-2, 2e-3);
}

TEST_CASE("TransformerEncoderLayer: PyTorch's state_dict keys and the pre-norm definition", "[transformer]") {
  auto m = build(R"({"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedforward": 16,
                     "dropout": 0.0, "activation": "gelu", "norm_first": true})");
  REQUIRE(names(*m) == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                                "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                                "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                                "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  auto& e = static_cast<TransformerEncoderLayer&>(*m);
  const Tensor x = test::random_tensor({2, 5, 8}, 4);
  Tensor h = add(x, (*e.self_attn)((*e.norm1)(x)));
  h = add(h, (*e.linear2)(gelu((*e.linear1)((*e.norm2)(h)))));
  REQUIRE((*m)(x).to_vector() == h.to_vector());
  REQUIRE(build(m->to_json().dump())->to_json() == m->to_json());
}

TEST_CASE("TransformerEncoderLayer with causal and gelu_tanh is GPT-2's block", "[transformer]") {
  auto m = build(R"({"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedforward": 32,
                     "dropout": 0.0, "activation": "gelu_tanh", "norm_first": true, "causal": true})");
  auto& e = static_cast<TransformerEncoderLayer&>(*m);
  REQUIRE(e.self_attn->causal());
  const Tensor x = test::random_tensor({2, 5, 8}, 4);
  Tensor h = add(x, (*e.self_attn)((*e.norm1)(x)));
  h = add(h, (*e.linear2)(gelu((*e.linear1)((*e.norm2)(h)), GeluApproximate::Tanh)));
  REQUIRE((*m)(x).to_vector() == h.to_vector());
  const Tensor qkv = linear((*e.norm1)(x), e.self_attn->in_proj_weight, e.self_attn->in_proj_bias);
  REQUIRE((*e.self_attn)((*e.norm1)(x)).to_vector() ==
          linear(self_attention(qkv, 2, 0.f, 0, true), e.self_attn->out_proj->weight, e.self_attn->out_proj->bias)
              .to_vector());
  REQUIRE(build(m->to_json().dump())->to_json() == m->to_json());
  REQUIRE(m->to_json()["causal"] == true);
  test::gradcheck([&](const Tensor& v) { return (*m)(v); }, test::random_tensor({2, 4, 8}, 9), 1e-2, 3e-2, 3e-3);
  REQUIRE_THROWS_WITH(build(R"({"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "activation": "silu"})"),
                      Catch::Contains("\"gelu_tanh\""));
}

namespace {

// A pre-norm layer's output and every gradient after one backward under bf16 autocast, its
// LayerNorms giving the projections bf16 (`fused`) or float32 that the projections cast.
std::vector<std::vector<float>> pre_norm_autocast_step(Device device, bool fused) {
  set_init_seed(11);
  auto m = build(R"({"type": "TransformerEncoderLayer", "d_model": 32, "nhead": 4, "dim_feedforward": 48,
                     "dropout": 0.0, "activation": "gelu", "norm_first": true})");
  m->to(device);
  auto& e = static_cast<TransformerEncoderLayer&>(*m);
  e.norm1->set_feeds_half_gemm(fused);
  e.norm2->set_feeds_half_gemm(fused);
  Tensor x = test::random_tensor({3, 5, 32}, 21, -2.f, 3.f, device);
  x.set_requires_grad(true);
  Tensor y;
  {
    const AutocastGuard ac(DType::BFloat16);
    REQUIRE((*e.norm1)(x).dtype() == (fused ? DType::BFloat16 : DType::Float32));
    y = (*m)(x);
  }
  REQUIRE(y.dtype() == DType::Float32);
  autograd::backward(y, test::random_tensor(y.shape(), 22, -1.f, 1.f, device));
  std::vector<std::vector<float>> out{y.to_vector(), x.grad().to_vector()};
  for (const auto& [name, t] : m->named_parameters()) out.push_back(t.grad().to_vector());
  return out;
}

}  // namespace

TEST_CASE("a pre-norm layer's LayerNorms give bf16 to its projections under autocast, with the bits of float32 "
          "then a cast",
          "[transformer]") {
  REQUIRE(pre_norm_autocast_step(Device::cpu(), true) == pre_norm_autocast_step(Device::cpu(), false));
}

TEST_CASE("on CUDA a pre-norm layer's LayerNorms write bf16 in the Warp kernel, with the bits of float32 then a cast",
          "[transformer][cuda]") {
  MINIDL_REQUIRE_CUDA();
  REQUIRE(pre_norm_autocast_step(Device::cuda(), true) == pre_norm_autocast_step(Device::cuda(), false));
}

TEST_CASE("TransformerEncoderLayer post-norm follows PyTorch's default order", "[transformer]") {
  auto m = build(R"({"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedforward": 12,
                     "dropout": 0.0})");
  auto& e = static_cast<TransformerEncoderLayer&>(*m);
  const Tensor x = test::random_tensor({2, 3, 8}, 6);
  Tensor h = (*e.norm1)(add(x, (*e.self_attn)(x)));
  h = (*e.norm2)(add(h, (*e.linear2)(relu((*e.linear1)(h)))));
  REQUIRE((*m)(x).to_vector() == h.to_vector());
}

TEST_CASE("TransformerEncoderLayer gradients match finite differences, dropout and drop path included",
          "[transformer]") {
  const DropoutStateGuard guard;
  set_dropout_seed(8);
  set_dropout_step(1);
  auto m = build(R"({"type": "TransformerEncoderLayer", "d_model": 6, "nhead": 2, "dim_feedforward": 10,
                     "dropout": 0.2, "activation": "gelu", "norm_first": true, "drop_path": 0.3})");
  test::gradcheck([&](const Tensor& x) { return (*m)(x); }, test::random_tensor({3, 4, 6}, 7), 1e-2, 3e-2, 3e-3);
  // In eval mode the layer is deterministic and dropout-free.
  m->eval();
  const Tensor x = test::random_tensor({3, 4, 6}, 7);
  set_dropout_step(2);
  const std::vector<float> a = (*m)(x).to_vector();
  set_dropout_step(3);
  REQUIRE((*m)(x).to_vector() == a);
}

TEST_CASE("Tokens is flatten(2).transpose(1, 2), from NCHW or channels-last memory", "[transformer]") {
  const Tensor x = test::random_tensor({2, 3, 4, 5}, 9);
  const std::vector<float> xv = x.to_vector();
  for (bool cl : {false, true}) {
    const Tensor y = tokens(cl ? x.to(MemoryFormat::ChannelsLast) : x);
    REQUIRE(y.shape() == Shape{2, 20, 3});
    const std::vector<float> yv = y.to_vector();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t p = 0; p < 20; ++p)
        for (int64_t c = 0; c < 3; ++c) REQUIRE(yv[(n * 20 + p) * 3 + c] == xv[(n * 3 + c) * 20 + p]);
  }
  test::gradcheck([](const Tensor& t) { return tokens(t); }, x.clone());
}

TEST_CASE("PositionEmbedding adds a learned (1, T, D) weight", "[transformer]") {
  set_init_seed(3);
  auto m = build(R"({"type": "PositionEmbedding", "num_tokens": 4, "embed_dim": 5, "init_std": 0.02})");
  auto& pe = static_cast<PositionEmbedding&>(*m);
  REQUIRE(names(*m) == std::vector<std::string>{"weight"});
  REQUIRE(pe.weight.shape() == Shape{1, 4, 5});
  double sq = 0;
  for (float v : pe.weight.to_vector()) sq += static_cast<double>(v) * v;
  CHECK(std::sqrt(sq / 20) > 0.005);
  CHECK(std::sqrt(sq / 20) < 0.05);
  const Tensor x = test::random_tensor({3, 4, 5}, 1);
  const std::vector<float> y = (*m)(x).to_vector(), xv = x.to_vector(), w = pe.weight.to_vector();
  for (size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == xv[i] + w[i % 20]);
  test::gradcheck([&](const Tensor& t) { return (*m)(t); }, x.clone());
  test::gradcheck([&](const Tensor& w) { return add_position_embedding(x, w); }, pe.weight.clone());
  // A bfloat16 input meets the float32 weight in float32.
  REQUIRE((*m)(x.to(DType::BFloat16)).dtype() == DType::Float32);
  // A shorter sequence takes the first T positions; the others get no gradient.
  const Tensor x2 = test::random_tensor({3, 2, 5}, 2);
  const std::vector<float> y2 = (*m)(x2).to_vector(), x2v = x2.to_vector();
  for (size_t i = 0; i < y2.size(); ++i) REQUIRE(y2[i] == x2v[i] + w[i % 10]);
  test::gradcheck([&](const Tensor& w2) { return add_position_embedding(x2, w2); }, pe.weight.clone());
}

TEST_CASE("ClassToken prepends the learned token, TokenPool takes the mean or token 0", "[transformer]") {
  auto m = build(R"({"type": "ClassToken", "embed_dim": 3})");
  auto& ct = static_cast<ClassToken&>(*m);
  REQUIRE(names(*m) == std::vector<std::string>{"cls_token"});
  ct.cls_token.copy_(Tensor::from_vector(std::vector<float>{7.f, 8.f, 9.f}, {1, 1, 3}));
  const Tensor x = test::random_tensor({2, 4, 3}, 2);
  const Tensor y = (*m)(x);
  REQUIRE(y.shape() == Shape{2, 5, 3});
  const std::vector<float> yv = y.to_vector(), xv = x.to_vector();
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t c = 0; c < 3; ++c) REQUIRE(yv[n * 15 + c] == 7.f + c);
    for (int64_t i = 0; i < 12; ++i) REQUIRE(yv[n * 15 + 3 + i] == xv[n * 12 + i]);
  }
  test::gradcheck([&](const Tensor& t) { return (*m)(t); }, x.clone());
  test::gradcheck([&](const Tensor& c) { return prepend_class_token(x, c); }, ct.cls_token.clone());

  for (bool mean : {true, false}) {
    auto pool = build(mean ? R"({"type": "TokenPool", "mode": "mean"})" : R"({"type": "TokenPool", "mode": "cls"})");
    const std::vector<float> p = (*pool)(x).to_vector();
    REQUIRE(p.size() == 6);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c) {
        float want = xv[n * 12 + c];
        if (mean) want = (xv[n * 12 + c] + xv[n * 12 + 3 + c] + xv[n * 12 + 6 + c] + xv[n * 12 + 9 + c]) / 4.f;
        REQUIRE(p[n * 3 + c] == want);
      }
    test::gradcheck([&](const Tensor& t) { return (*pool)(t); }, x.clone());
  }
}

TEST_CASE("transformer factories name the bad key", "[transformer]") {
  auto fails = [](const char* spec, const char* key) {
    REQUIRE_THROWS_WITH(build_layer(nlohmann::json::parse(spec), "model.layers[4]"),
                        Catch::Contains(std::string("model.layers[4].") + key));
  };
  fails(R"({"type": "MultiheadAttention", "embed_dim": 10, "num_heads": 3})", "num_heads");
  fails(R"({"type": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "dropout": -1})", "dropout");
  fails(R"({"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "activation": "tanh"})", "activation");
  fails(R"({"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "drop_path": 2})", "drop_path");
  fails(R"({"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedfoward": 4})", "dim_feedfoward");
  fails(R"({"type": "TokenPool", "mode": "max"})", "mode");
  fails(R"({"type": "PositionEmbedding", "num_tokens": 0, "embed_dim": 4})", "num_tokens");
  fails(R"({"type": "ClassToken"})", "embed_dim");
  fails(R"({"type": "Tokens", "patch": 4})", "patch");
  auto seq = build_sequential(nlohmann::json::parse(R"([{"type": "PositionEmbedding", "num_tokens": 4,
                                                          "embed_dim": 6}])"), "model.layers");
  REQUIRE_THROWS_WITH((*seq)(Tensor::zeros({2, 5, 6})),
                      Catch::Contains("(N, T, 6) with T in 1..4") && Catch::Contains("(2, 5, 6)"));
}

namespace {

// A tiny ViT as a config would build it (patch 4 on 8x8 images: 4 tokens of width 8).
const char* kTinyVit = R"([
  {"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 4, "stride": 4},
  {"type": "Tokens"},
  {"type": "ClassToken", "embed_dim": 8},
  {"type": "PositionEmbedding", "num_tokens": 5, "embed_dim": 8},
  {"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.1,
   "activation": "gelu", "norm_first": true, "drop_path": 0.1},
  {"type": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.1,
   "activation": "gelu", "norm_first": true, "drop_path": 0.1},
  {"type": "LayerNorm", "normalized_shape": [8]},
  {"type": "TokenPool", "mode": "mean"},
  {"type": "Linear", "in_features": 8, "out_features": 10}
])";

struct VitRun {
  std::vector<float> loss, logits;
  std::vector<std::vector<float>> grads;
};

// One forward and backward of the tiny ViT on `device` in `dtype` autocast (Float32: none).
VitRun run_vit(Device device, DType autocast, int64_t step, const char* layers = kTinyVit) {
  set_init_seed(5);
  auto model = build_sequential(nlohmann::json::parse(layers), "model.layers");
  model->assign_paths();
  model->to(device);
  set_dropout_step(step, device);
  const Tensor x = test::random_tensor({6, 3, 8, 8}, 1, -1.f, 1.f, device);
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5}, {6}, device);
  Tensor logits;
  {
    const AutocastGuard ac(autocast);
    logits = (*model)(x);
  }
  const Tensor loss = cross_entropy(logits.to(DType::Float32), labels);
  loss.backward();
  VitRun r{loss.to_vector(), logits.to_vector(), {}};
  for (const auto& [name, p] : model->named_parameters()) r.grads.push_back(p.grad().to_vector());
  return r;
}

}  // namespace

TEST_CASE("a tiny ViT from JSON trains one step on the CPU, in float32 and bfloat16", "[transformer]") {
  const DropoutStateGuard guard;
  set_dropout_seed(3);
  const VitRun a = run_vit(Device::cpu(), DType::Float32, 0);
  REQUIRE(std::isfinite(a.loss[0]));
  REQUIRE(run_vit(Device::cpu(), DType::Float32, 0).grads == a.grads);  // same bits
  CHECK(run_vit(Device::cpu(), DType::Float32, 1).loss != a.loss);      // the step changes the masks
  const VitRun b = run_vit(Device::cpu(), DType::BFloat16, 0);
  require_close_scaled(b.logits, a.logits, 3e-2, "bf16 logits");
}

TEST_CASE("self_attention on CUDA matches the CPU in float32, bfloat16 and float16, with and without dropout, causal or not",
          "[transformer][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const DropoutStateGuard guard;
  set_dropout_seed(6);
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (const auto& [p, causal] : std::vector<std::pair<float, bool>>{{0.f, false}, {0.2f, false}, {0.f, true}, {0.2f, true}}) {
      // The half types run the fused kernels up to 64 tokens at head sizes 16..64 (ragged 9, 24
      // and 50 tokens among them), longer sequences without dropout the flash kernels (65, 130
      // and 200 tokens: one, three and four blocks, ragged), the rest (17 tokens of head size 8,
      // the long ones with dropout) the GEMMs.
      const std::vector<std::pair<Shape, int64_t>> problems = {
          {{3, 17, 3 * 2 * 8}, 2},  {{4, 65, 3 * 6 * 64}, 6}, {{3, 64, 3 * 6 * 64}, 6}, {{2, 50, 3 * 4 * 32}, 4},
          {{2, 9, 3 * 2 * 16}, 2},  {{2, 32, 3 * 2 * 64}, 2}, {{3, 64, 3 * 4 * 16}, 4}, {{2, 24, 3 * 2 * 48}, 2},
          {{2, 130, 3 * 4 * 32}, 4}, {{1, 200, 3 * 2 * 64}, 2}, {{2, 128, 3 * 3 * 48}, 3}};
      for (const auto& [shape, heads] : problems) {
        set_dropout_step(9, Device::cuda());
        // float32 leaves (only they take gradients) cast to the type under test.
        const Tensor x = test::random_tensor(shape, 2, -2.f, 2.f).to(t).to(DType::Float32);
        const Tensor g = test::random_tensor({shape[0], shape[1], shape[2] / 3}, 3).to(t);
        Tensor xc = x.clone(), xg = x.to(Device::cuda());
        xc.set_requires_grad(true);
        xg.set_requires_grad(true);
        const Tensor yc = self_attention(xc.to(t), heads, p, 4, causal), yg = self_attention(xg.to(t), heads, p, 4, causal);
        autograd::backward(yc, g);
        autograd::backward(yg, g.to(Device::cuda()));
        const double tol = t == DType::Float32 ? 1e-5 : 2e-2;
        const std::string what = str(dtype_name(t), " p=", p, causal ? " causal " : " ", shape_str(shape));
        require_close_scaled(yg.to_vector(), yc.to_vector(), tol, "y " + what);
        require_close_scaled(xg.grad().to_vector(), xc.grad().to_vector(), tol * 2, "dqkv " + what);
        // The same bits on a second run.
        Tensor xg2 = x.to(Device::cuda());
        xg2.set_requires_grad(true);
        const Tensor yg2 = self_attention(xg2.to(t), heads, p, 4, causal);
        autograd::backward(yg2, g.to(Device::cuda()));
        REQUIRE(yg2.to_vector() == yg.to_vector());
        REQUIRE(xg2.grad().to_vector() == xg.grad().to_vector());
      }
    }
  }
}

TEST_CASE("flash attention at GPT-2's shape (1024 tokens, head size 64) matches the CPU, causal or not, the same "
          "bits every run",
          "[transformer][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Shape shape{1, 1024, 3 * 2 * 64};
  for (bool causal : {true, false}) {
    const Tensor x = test::random_tensor(shape, 31, -2.f, 2.f).to(DType::BFloat16).to(DType::Float32);
    const Tensor g = test::random_tensor({1, 1024, 128}, 32).to(DType::BFloat16);
    Tensor xc = x.clone(), xg = x.to(Device::cuda());
    xc.set_requires_grad(true);
    xg.set_requires_grad(true);
    const Tensor yc = self_attention(xc.to(DType::BFloat16), 2, 0.f, 0, causal);
    const Tensor yg = self_attention(xg.to(DType::BFloat16), 2, 0.f, 0, causal);
    autograd::backward(yc, g);
    autograd::backward(yg, g.to(Device::cuda()));
    const std::string what = causal ? "causal" : "full";
    require_close_scaled(yg.to_vector(), yc.to_vector(), 2e-2, "y " + what);
    require_close_scaled(xg.grad().to_vector(), xc.grad().to_vector(), 4e-2, "dqkv " + what);
    Tensor xg2 = x.to(Device::cuda());
    xg2.set_requires_grad(true);
    const Tensor yg2 = self_attention(xg2.to(DType::BFloat16), 2, 0.f, 0, causal);
    autograd::backward(yg2, g.to(Device::cuda()));
    REQUIRE(yg2.to_vector() == yg.to_vector());
    REQUIRE(xg2.grad().to_vector() == xg.grad().to_vector());
  }
}

TEST_CASE("token layers on CUDA give the CPU's bits", "[transformer][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Tensor x = test::random_tensor({3, 5, 7}, 8);
  const Tensor w = test::random_tensor({1, 5, 7}, 9), cls = test::random_tensor({1, 1, 7}, 10);
  // exact: every output is one thread's loop in the CPU's order; the position embedding's weight
  // gradient is a column sum over the batch in partial sums on the GPU (Linear's bias gradient).
  auto both = [&](const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Tensor& a, const Tensor& b,
                  const std::string& what, bool exact = true) {
    std::vector<std::vector<float>> out[2];
    for (int dev = 0; dev < 2; ++dev) {
      const Device d = dev ? Device::cuda() : Device::cpu();
      // Fresh leaves per device and case: on the CPU, to() returns the tensor itself, whose
      // gradient would carry over from the previous case.
      Tensor ad = a.clone().to(d), bd = b.defined() ? b.clone().to(d) : b;
      ad.set_requires_grad(true);
      if (bd.defined()) bd.set_requires_grad(true);
      const Tensor y = f(ad, bd);
      autograd::backward(y, test::random_tensor(y.shape(), 11, -1.f, 1.f, d));
      out[dev] = {y.to_vector(), ad.grad().to_vector()};
      if (bd.defined()) out[dev].push_back(bd.grad().to_vector());
    }
    INFO(what);
    for (size_t i = 0; i < out[0].size(); ++i) {
      if (exact) REQUIRE(out[0][i] == out[1][i]);
      else require_close_scaled(out[1][i], out[0][i], 1e-6, what);
    }
  };
  both([](const Tensor& a, const Tensor& b) { return add_position_embedding(a, b); }, x, w, "position embedding", false);
  both([](const Tensor& a, const Tensor& b) { return prepend_class_token(a, b); }, x, cls, "class token");
  both([](const Tensor& a, const Tensor&) { return token_pool(a, true); }, x, Tensor(), "mean pool");
  both([](const Tensor& a, const Tensor&) { return token_pool(a, false); }, x, Tensor(), "cls pool");
  both([](const Tensor& a, const Tensor&) { return tokens(a); }, test::random_tensor({2, 6, 3, 4}, 12), Tensor(),
       "tokens");
}

TEST_CASE("a tiny ViT step on CUDA matches the CPU in float32 and bfloat16", "[transformer][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const DropoutStateGuard guard;
  // The patch-embedding convolution in full fp32 (TF32 would differ from the CPU by ~1e-3).
  const ComputeSettings saved = compute_settings();
  set_compute_settings({saved.deterministic, false});
  set_dropout_seed(3);
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const VitRun c = run_vit(Device::cpu(), t, 2), g = run_vit(Device::cuda(), t, 2);
    const double tol = t == DType::Float32 ? 1e-4 : 3e-2;
    require_close_scaled(g.logits, c.logits, tol, str("logits ", dtype_name(t)));
    for (size_t i = 0; i < c.grads.size(); ++i) require_close_scaled(g.grads[i], c.grads[i], tol * 3, str("grad ", i));
    REQUIRE(run_vit(Device::cuda(), t, 2).grads == g.grads);  // the same bits again
  }
  set_compute_settings(saved);
}

TEST_CASE("a tiny ViT forward and backward captured as a CUDA graph replays the eager step", "[transformer][cuda][graph]") {
  MINIDL_REQUIRE_CUDA();
  const DropoutStateGuard guard;
  set_dropout_seed(7);
  set_init_seed(5);
  auto model = build_sequential(nlohmann::json::parse(kTinyVit), "model.layers");
  model->assign_paths();
  model->to(Device::cuda());
  const Tensor x = test::random_tensor({6, 3, 8, 8}, 1, -1.f, 1.f, Device::cuda());
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5}, {6}, Device::cuda());
  const std::vector<Tensor> params = [&] {
    std::vector<Tensor> p;
    for (const auto& [name, t] : model->named_parameters()) p.push_back(t);
    return p;
  }();
  auto step = [&] {
    const AutocastGuard ac(DType::BFloat16);
    Tensor loss = cross_entropy((*model)(x).to(DType::Float32), labels);
    loss.backward();
    return loss;
  };
  auto grads = [&] {
    std::vector<std::vector<float>> g;
    for (Tensor p : params) {
      g.push_back(p.grad().to_vector());
      p.set_grad(Tensor());
    }
    return g;
  };
  set_dropout_step(0, Device::cuda());
  step();  // warm-up: cuBLAS and the allocator set up outside the capture
  grads();
  // Gradients exist before the capture so the captured backward accumulates into fixed storage;
  // every replay needs exactly these tensors back as the gradients (the graph holds their addresses).
  std::vector<Tensor> graph_grads;
  for (Tensor p : params) {
    graph_grads.push_back(Tensor::zeros(p.shape(), DType::Float32, Device::cuda()));
    p.set_grad(graph_grads.back());
  }
  Tensor loss;
  CudaGraph graph;
  REQUIRE(graph.capture([&] { loss = step(); }) == "");
  for (int64_t s : {4, 5}) {
    set_dropout_step(s, Device::cuda());
    for (size_t i = 0; i < params.size(); ++i) {
      graph_grads[i].zero_();
      Tensor(params[i]).set_grad(graph_grads[i]);
    }
    graph.replay();
    const std::vector<float> replay_loss = loss.to_vector();
    std::vector<std::vector<float>> replay_grads;
    for (const Tensor& g : graph_grads) replay_grads.push_back(g.to_vector());
    for (Tensor p : params) p.set_grad(Tensor());
    const Tensor eager = step();
    REQUIRE(eager.to_vector() == replay_loss);
    REQUIRE(grads() == replay_grads);
  }
}
