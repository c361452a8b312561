#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "core/autograd.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "layers/module.h"
#include "layers/transformer/tokens.h"
#include "train/trained_run.h"

namespace minidl {

namespace {

void check_options(const GenerateOptions& o, const std::vector<int32_t>& prompt) {
  MINIDL_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
               "generate: temperature must be >= 0 (0 takes the most likely token), got ", o.temperature);
  MINIDL_CHECK(o.top_k >= 0, "generate: top_k must be >= 0 (0: every token), got ", o.top_k);
  MINIDL_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  MINIDL_CHECK(o.context >= 1, "generate: context (the model's window of tokens) must be >= 1, got ", o.context);
  MINIDL_CHECK(o.vocab_limit >= 0, "generate: vocab_limit must be >= 0 (0: every id), got ", o.vocab_limit);
  MINIDL_CHECK(!prompt.empty(), "generate: the prompt is empty (it needs at least one token)");
}

// Eval mode for the scope, the module's own mode restored after it.
class EvalScope {
 public:
  explicit EvalScope(Module& m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~EvalScope() { m_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  Module& m_;
  bool was_training_;
};

// The (1, t, V) logits of one window of ids.
Tensor window_logits(Module& model, Device device, const int32_t* ids, int64_t t) {
  const Tensor x = Tensor::from_vector(std::vector<int32_t>(ids, ids + t), {1, t}, device);
  const Tensor y = model(x);
  MINIDL_CHECK(y.dim() == 3 && y.size(0) == 1 && y.size(1) == t && is_floating(y.dtype()), "generate: the model gives ",
               y.str(), " for ", t,
               " token ids (1, t), not (1, t, V) logits: a language model ends in an LMHead or a Linear over "
               "(B, T, D)");
  return y.is_contiguous() ? y : y.contiguous();
}

// The logits of the last position, as float values on the host: only that row is copied.
std::vector<float> last_position(const Tensor& logits) {
  const int64_t t = logits.size(1), v = logits.size(2);
  auto row = std::make_shared<TensorImpl>();
  row->storage = logits.impl()->storage;
  row->shape = {v};
  row->strides = {1};
  row->offset = logits.offset() + (t - 1) * v;
  row->dtype = logits.dtype();
  row->device = logits.device();
  return Tensor(std::move(row)).to_vector();
}

// A double in [0, 1) from 53 bits of one Philox draw: fine enough that a token of probability
// 1e-12 is still reachable.
double uniform53(uint64_t seed, uint64_t step) {
  const Philox4 r = philox(seed, kStreamGenerate, step);
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 21) | (r.v[1] >> 11);
  return static_cast<double>(bits) * 0x1.0p-53;
}

}  // namespace

int32_t sample_token(const std::vector<float>& logits, const GenerateOptions& o, uint64_t step) {
  const int64_t v = static_cast<int64_t>(logits.size());
  const int64_t n = o.vocab_limit > 0 ? std::min(o.vocab_limit, v) : v;
  MINIDL_CHECK(n > 0, "generate: the model gives no logits");
  // -inf is a token the model rules out; NaN or +inf is a broken forward.
  for (int64_t i = 0; i < n; ++i)
    MINIDL_CHECK(!std::isnan(logits[i]) && logits[i] != std::numeric_limits<float>::infinity(), "generate: step ", step,
                 ": the model's logit of token ", i, " is ", logits[i]);
  const auto top = std::max_element(logits.begin(), logits.begin() + n);
  MINIDL_CHECK(std::isfinite(*top), "generate: step ", step, ": every logit is -inf");
  if (o.temperature == 0) return static_cast<int32_t>(top - logits.begin());
  // (logit - max) / temperature: finite at any temperature > 0, the largest 0.
  std::vector<double> z(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) z[i] = (static_cast<double>(logits[i]) - static_cast<double>(*top)) / o.temperature;
  // nanoGPT's top-k: every logit below the k-th largest is dropped (ties with it stay).
  double floor = -std::numeric_limits<double>::infinity();
  if (o.top_k > 0 && o.top_k < n) {
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<double>());
    floor = sorted[static_cast<size_t>(o.top_k - 1)];
  }
  double total = 0;
  for (double& x : z) {
    x = x >= floor ? std::exp(x) : 0.0;
    total += x;
  }
  // Inverse CDF in id order: the first id whose cumulative probability exceeds u.
  const double u = uniform53(o.seed, step);
  double cumulative = 0;
  int32_t last = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (z[i] == 0) continue;
    cumulative += z[i] / total;
    last = static_cast<int32_t>(i);
    if (u < cumulative) return last;
  }
  return last;  // u within rounding of 1
}

std::vector<int32_t> generate_tokens(Module& model, Device device, const std::vector<int32_t>& prompt,
                                     const GenerateOptions& o) {
  check_options(o, prompt);
  const EvalScope eval(model);
  autograd::NoGradGuard no_grad;
  // The vocabulary size, from one token, before any prompt id reaches the embedding (out-of-range
  // ids give NaN rows on a GPU, not an error).
  const int32_t probe = 0;
  const int64_t vocab = window_logits(model, device, &probe, 1).size(2);
  for (size_t i = 0; i < prompt.size(); ++i)
    MINIDL_CHECK(prompt[i] >= 0 && prompt[i] < vocab, "generate: prompt token ", prompt[i], " at index ", i,
                 " is outside the model's vocabulary [0, ", vocab, ")");
  std::vector<int32_t> tokens = prompt, out;
  out.reserve(static_cast<size_t>(o.max_new_tokens));
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t t = std::min<int64_t>(o.context, static_cast<int64_t>(tokens.size()));
    const Tensor logits = window_logits(model, device, tokens.data() + tokens.size() - t, t);
    const int32_t next = sample_token(last_position(logits), o, static_cast<uint64_t>(step));
    tokens.push_back(next);
    out.push_back(next);
    if (o.on_token) o.on_token(next);
  }
  return out;
}

int64_t position_limit(Module& model) {
  int64_t limit = 0;
  for (const auto& [path, m] : model.named_modules())
    if (const auto* pe = dynamic_cast<const PositionEmbedding*>(m))
      limit = limit == 0 ? pe->spec().num_tokens : std::min(limit, pe->spec().num_tokens);
  return limit;
}

int64_t run_context(TrainedRun& run, int64_t requested) {
  const int64_t limit = position_limit(run.model());
  const int64_t seq_len = run.data().seq_len;  // > 0 for a token set's run
  const bool has_seq_len = seq_len > 0;
  const int64_t context = requested > 0 ? requested : has_seq_len ? seq_len : limit;
  const char* source = requested > 0 ? "--context" : has_seq_len ? "the run's data.seq_len" : "";
  MINIDL_CHECK(context > 0, "--run '", text_excerpt(run.run_dir()),
               "': its config has no data.seq_len and its model no ",
               "PositionEmbedding: give --context T, the number of tokens its windows held in training");
  MINIDL_CHECK(limit == 0 || context <= limit, source, " ", context, " is longer than the model's ",
               "PositionEmbedding (", limit, " positions): give --context ", limit, " or less");
  return context;
}

}  // namespace minidl
