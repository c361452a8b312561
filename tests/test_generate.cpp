// Sampling from a language model (train/generate.h) on a tiny causal transformer built from JSON:
// greedy decoding against the argmax of logits computed step by step, the seed's determinism, top-k
// against the logits of each step and the sampler's frequencies against the softmax, the context
// crop, bad options; a run folder of the model loaded through TrainedRun; [cuda]: the GPU's tokens
// are the CPU's for the same seed.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "core/autocast.h"
#include "core/error.h"
#include "core/init.h"
#include "core/safetensors.h"
#include "core/settings.h"
#include "layers/registry.h"
#include "test_util.h"
#include "train/config.h"
#include "train/generate.h"
#include "train/trained_run.h"

using namespace minidl;

namespace {

constexpr int64_t kVocab = 23, kPositions = 8;

nlohmann::json tiny_layers() {
  const auto block = nlohmann::json::parse(R"({"type": "TransformerEncoderLayer", "d_model": 16, "nhead": 2,
      "dim_feedforward": 32, "dropout": 0.1, "activation": "gelu_tanh", "norm_first": true, "causal": true})");
  return nlohmann::json::array(
      {{{"type", "Embedding"}, {"num_embeddings", kVocab}, {"embedding_dim", 16}, {"init_std", 0.02}},
       {{"type", "PositionEmbedding"}, {"num_tokens", kPositions}, {"embed_dim", 16}, {"init_std", 0.5}},
       block,
       block,
       {{"type", "LayerNorm"}, {"normalized_shape", {16}}},
       {{"type", "LMHead"}, {"tied_to", 0}}});
}

std::shared_ptr<Module> tiny_model(uint64_t seed = 7) {
  set_init_seed(seed);
  auto m = build_sequential(tiny_layers(), "model.layers");
  m->assign_paths();
  return m;
}

GenerateOptions options(int64_t n, double temperature, int64_t top_k, uint64_t seed = 0) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  o.context = kPositions;
  return o;
}

// The logits of the last position for the last `context` tokens, computed directly.
std::vector<float> next_logits(Module& model, const std::vector<int32_t>& tokens, int64_t context) {
  autograd::NoGradGuard no_grad;
  const int64_t t = std::min<int64_t>(context, static_cast<int64_t>(tokens.size()));
  const std::vector<int32_t> window(tokens.end() - t, tokens.end());
  const std::vector<float> y = model(Tensor::from_vector(window, {1, t})).to_vector();
  return std::vector<float>(y.end() - kVocab, y.end());
}

// `n` tokens after `prompt`, each the argmax of the logits computed directly (the first of ties),
// the model in eval mode.
std::vector<int32_t> greedy(Module& model, const std::vector<int32_t>& prompt, int n) {
  model.eval();
  std::vector<int32_t> tokens = prompt, out;
  for (int step = 0; step < n; ++step) {
    const std::vector<float> l = next_logits(model, tokens, kPositions);
    out.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    tokens.push_back(out.back());
  }
  return out;
}

// The ids of the k largest logits (ties with the k-th included).
std::vector<int32_t> top_ids(const std::vector<float>& logits, int64_t k) {
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  std::vector<int32_t> ids;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= sorted[static_cast<size_t>(k - 1)]) ids.push_back(static_cast<int32_t>(i));
  return ids;
}

}  // namespace

TEST_CASE("generate: temperature 0 and top_k 1 are the argmax of each step's logits", "[generate]") {
  auto model = tiny_model();
  const std::vector<int32_t> prompt = {3, 14, 1};
  // 12 tokens: the window reaches its 8 positions and slides.
  const std::vector<int32_t> want = greedy(*model, prompt, 12);
  model->train();
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, options(12, 0.0, 0)) == want);
  REQUIRE(model->is_training());  // its mode restored
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, options(12, 1.0, 1, 5)) == want);
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, options(12, 0.7, 1, 9)) == want);
  // Not a model that repeats one token: the test would pass on a broken crop otherwise.
  REQUIRE(std::set<int32_t>(want.begin(), want.end()).size() > 1);
  // Under bf16 autocast the logits are bf16: the last position's row read from them.
  const AutocastGuard autocast(DType::BFloat16);
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, options(12, 0.0, 0)) == greedy(*model, prompt, 12));
}

TEST_CASE("generate: the same seed gives the same tokens, another seed others, and the tokens stream", "[generate]") {
  auto model = tiny_model();
  const std::vector<int32_t> prompt = {5, 2};
  std::vector<int32_t> streamed;
  GenerateOptions o = options(24, 1.0, 0, 11);
  o.on_token = [&](int32_t id) { streamed.push_back(id); };
  const std::vector<int32_t> a = generate_tokens(*model, Device::cpu(), prompt, o);
  REQUIRE(a.size() == 24);
  REQUIRE(streamed == a);
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, options(24, 1.0, 0, 11)) == a);
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, options(24, 1.0, 0, 12)) != a);
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, options(0, 1.0, 0, 11)).empty());
}

TEST_CASE("generate: top_k never draws outside the k largest logits of its step", "[generate]") {
  auto model = tiny_model(3);
  const std::vector<int32_t> prompt = {0, 9, 17};
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<int32_t> got = generate_tokens(*model, Device::cpu(), prompt, options(20, 1.5, 3, seed));
    std::vector<int32_t> tokens = prompt;
    model->eval();
    for (int32_t id : got) {
      const std::vector<int32_t> allowed = top_ids(next_logits(*model, tokens, kPositions), 3);
      REQUIRE(std::find(allowed.begin(), allowed.end(), id) != allowed.end());
      tokens.push_back(id);
    }
  }
}

TEST_CASE("sample_token: top-k's frequencies are the softmax of the k largest, temperature-scaled", "[generate]") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.2f, 1.9f, -3.0f, 0.0f, 1.5f};
  for (const auto& [k, temperature] : std::vector<std::pair<int64_t, double>>{{3, 1.0}, {4, 0.5}, {0, 2.0}}) {
    GenerateOptions o = options(1, temperature, k, 42);
    const std::vector<int32_t> allowed = k ? top_ids(logits, k) : std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7};
    double total = 0;
    std::map<int32_t, double> want;
    for (int32_t id : allowed) total += want[id] = std::exp(logits[id] / temperature);
    const int draws = 20000;
    std::map<int32_t, int> seen;
    for (int s = 0; s < draws; ++s) ++seen[sample_token(logits, o, static_cast<uint64_t>(s))];
    for (const auto& [id, count] : seen) REQUIRE(want.count(id) == 1);
    for (const auto& [id, w] : want) {
      const double p = w / total, sd = std::sqrt(p * (1 - p) / draws);
      REQUIRE(std::fabs(seen[id] / static_cast<double>(draws) - p) < 5 * sd + 1e-9);
    }
  }
  // vocab_limit: ids at and past it are never drawn, even the largest logit.
  GenerateOptions o = options(1, 1.0, 0, 1);
  o.vocab_limit = 4;
  for (int s = 0; s < 2000; ++s) REQUIRE(sample_token(logits, o, static_cast<uint64_t>(s)) < 4);
  o.temperature = 0;
  REQUIRE(sample_token(logits, o, 0) == 1);
  // A temperature near 0 is the argmax too, without overflow.
  REQUIRE(sample_token(logits, options(1, 1e-300, 0, 3), 0) == 1);
  // Ties under temperature 0: the lowest id, as torch.argmax.
  REQUIRE(sample_token({1.f, 3.f, 3.f}, options(1, 0.0, 0), 0) == 1);
  REQUIRE_THROWS_WITH(sample_token({1.f, NAN}, options(1, 1.0, 0), 4),
                      Catch::Contains("step 4") && Catch::Contains("logit of token 1 is nan"));
}

TEST_CASE("generate: a prompt longer than the context is cropped to its last tokens", "[generate]") {
  auto model = tiny_model(5);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<int32_t> tail(prompt.end() - kPositions, prompt.end());
  for (double temperature : {0.0, 1.0}) {
    const GenerateOptions o = options(6, temperature, 0, 3);
    REQUIRE(generate_tokens(*model, Device::cpu(), prompt, o) == generate_tokens(*model, Device::cpu(), tail, o));
  }
  // A shorter context than the model's positions: the window is that many tokens.
  GenerateOptions o = options(6, 0.0, 0);
  o.context = 4;
  const std::vector<int32_t> last4(prompt.end() - 4, prompt.end());
  REQUIRE(generate_tokens(*model, Device::cpu(), prompt, o) == generate_tokens(*model, Device::cpu(), last4, o));
  // A context past the PositionEmbedding's positions is the caller's mistake: the layer says so.
  o.context = kPositions + 1;
  REQUIRE_THROWS(generate_tokens(*model, Device::cpu(), prompt, o));
  REQUIRE(position_limit(*model) == kPositions);
}

TEST_CASE("generate: bad options are one error naming the option", "[generate]") {
  auto model = tiny_model();
  const std::vector<int32_t> prompt = {1, 2};
  const auto fails = [&](const std::vector<int32_t>& p, GenerateOptions o, const std::string& what) {
    REQUIRE_THROWS_WITH(generate_tokens(*model, Device::cpu(), p, o), Catch::Contains(what));
  };
  fails(prompt, options(4, -1.0, 0), "temperature must be >= 0");
  fails(prompt, options(4, NAN, 0), "temperature must be >= 0");
  fails(prompt, options(4, 1.0, -2), "top_k must be >= 0");
  fails(prompt, options(-1, 1.0, 0), "max_new_tokens must be >= 0");
  GenerateOptions no_context = options(4, 1.0, 0);
  no_context.context = 0;
  fails(prompt, no_context, "context");
  fails({}, options(4, 1.0, 0), "the prompt is empty");
  fails({1, kVocab}, options(4, 1.0, 0), "prompt token 23 at index 1 is outside the model's vocabulary [0, 23)");
  fails({-1}, options(4, 1.0, 0), "prompt token -1 at index 0");
  // A model that does not give (1, t, V) logits.
  auto classifier = build_sequential(nlohmann::json::parse(R"([{"type": "Embedding", "num_embeddings": 5,
      "embedding_dim": 4}, {"type": "Flatten"}])"),
                                     "model.layers");
  REQUIRE_THROWS_WITH(generate_tokens(*classifier, Device::cpu(), prompt, options(1, 1.0, 0)),
                      Catch::Contains("not (1, t, V) logits"));
}

TEST_CASE("generate: a run folder of a language model loads through TrainedRun", "[generate]") {
  test::TempDir tmp("generate_run");
  auto model = tiny_model(9);
  nlohmann::json config = {{"model", {{"layers", tiny_layers()}}},
                           {"optimizer", {{"type", "SGD"}, {"lr", 0.1}}},
                           {"device", "cpu"},
                           {"seed", 9u}};
  std::ofstream(tmp.file("config.json")) << parse_train_config(config).to_json().dump(2);
  save_safetensors(tmp.file("model.safetensors"), model->state_dict());
  TrainedRun run(tmp.path.string(), "", "cpu");
  REQUIRE(run.language_model());
  REQUIRE(run.vocab_size() == kVocab);
  REQUIRE(run.classes().empty());
  const std::vector<int32_t> prompt = {4, 4, 8};
  const GenerateOptions o = options(10, 1.0, 5, 21);
  REQUIRE(generate_tokens(run.model(), run.device(), prompt, o) == generate_tokens(*model, Device::cpu(), prompt, o));
  // The window: the PositionEmbedding's length without data.seq_len, --context within it.
  REQUIRE(run_context(run, 0) == kPositions);
  REQUIRE(run_context(run, 3) == 3);
  REQUIRE_THROWS_WITH(run_context(run, 9), Catch::Contains("--context 9 is longer than the model's "
                                                           "PositionEmbedding (8 positions)"));
  // A token set's run: its data.seq_len, the windows it trained on.
  config["data"] = {{"format", "tokens"}, {"dir", tmp.file("tokens")}, {"seq_len", 6}};
  std::ofstream(tmp.file("config.json")) << parse_train_config(config).to_json().dump(2);
  TrainedRun tokens_run(tmp.path.string(), "", "cpu");
  REQUIRE(run_context(tokens_run, 0) == 6);
  REQUIRE(run_context(tokens_run, 8) == 8);
  config["data"]["seq_len"] = 12;
  std::ofstream(tmp.file("config.json")) << parse_train_config(config).to_json().dump(2);
  TrainedRun too_long(tmp.path.string(), "", "cpu");
  REQUIRE_THROWS_WITH(run_context(too_long, 0),
                      Catch::Contains("the run's data.seq_len 12 is longer than the model's"));
  // The image commands' calls name the run as a language model's.
  REQUIRE_THROWS_WITH(run.image_size(),
                      Catch::Contains("is a language model's run") && Catch::Contains("minidl generate"));
}

TEST_CASE("generate: a model without positions needs a context", "[generate]") {
  test::TempDir tmp("generate_bigram");
  const nlohmann::json layers = nlohmann::json::parse(R"([{"type": "Embedding", "num_embeddings": 6,
      "embedding_dim": 4}, {"type": "LMHead", "tied_to": 0}])");
  set_init_seed(1);
  auto model = build_sequential(layers, "model.layers");
  model->assign_paths();
  std::ofstream(tmp.file("config.json")) << parse_train_config({{"model", {{"layers", layers}}},
                                                                {"optimizer", {{"type", "SGD"}, {"lr", 0.1}}},
                                                                {"device", "cpu"}})
                                                .to_json()
                                                .dump(2);
  save_safetensors(tmp.file("model.safetensors"), model->state_dict());
  TrainedRun run(tmp.path.string(), "", "cpu");
  REQUIRE_THROWS_WITH(run_context(run, 0), Catch::Contains("no data.seq_len") && Catch::Contains("--context"));
  REQUIRE(run_context(run, 64) == 64);
}

TEST_CASE("generate on CUDA draws the CPU's tokens for the same seed", "[generate][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const ComputeSettings saved = compute_settings();
  ComputeSettings exact = saved;
  exact.allow_tf32 = false;
  set_compute_settings(exact);
  auto cpu = tiny_model(4), gpu = tiny_model(4);
  gpu->to(Device::cuda());
  const std::vector<int32_t> prompt = {7, 1, 22};
  for (const GenerateOptions& o : {options(16, 0.0, 0), options(16, 1.0, 0, 8), options(16, 0.8, 5, 9)})
    CHECK(generate_tokens(*gpu, Device::cuda(), prompt, o) == generate_tokens(*cpu, Device::cpu(), prompt, o));
  set_compute_settings(saved);
}
