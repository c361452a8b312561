// `minidl generate`: text sampled from a trained language model's run (train/generate.h), the
// prompt then each token printed as it is drawn.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/autocast.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "data/gpt2_tokenizer.h"
#include "data/tokenize.h"
#include "train/generate.h"
#include "train/trained_run.h"

namespace minidl {

namespace {

struct GenerateArgs {
  std::string run_dir, weights, device, prompt, tokenizer = "build/gpt2-tokenizer";
  std::vector<int32_t> prompt_ids;
  bool tokenizer_given = false;
  int64_t max_new_tokens = 200, top_k = 0, context = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
};

void print(const std::string& bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}

// Text to ids and back: GPT-2's tokenizer files, or "bytes" (each byte a token, as `minidl
// tokenize --tokenizer bytes` made the run's data).
class Vocabulary {
 public:
  explicit Vocabulary(const std::string& name) {
    if (name != kByteTokenizer) gpt2_.emplace(name);
  }
  int64_t size() const { return gpt2_ ? gpt2_->vocab_size() : 256; }
  std::vector<int32_t> encode(const std::string& text) const {
    if (gpt2_) return gpt2_->encode(text);
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const {
    if (gpt2_) return gpt2_->decode(ids);
    std::string text;
    for (int32_t id : ids) text += static_cast<char>(id);
    return text;
  }

 private:
  std::optional<Gpt2Tokenizer> gpt2_;
};

int generate_command(const GenerateArgs& a) {
  TrainedRun run(a.run_dir, a.weights, a.device);
  MINIDL_CHECK(run.language_model(), "--run '", text_excerpt(a.run_dir),
               "' holds an image classifier (its model takes images): minidl predict classifies with it");
  // Text in and out through the vocabulary; with --prompt-ids and no tokenizer folder, ids in and
  // out (llm.c's sampler prints ids when it has no tokenizer).
  std::optional<Vocabulary> vocabulary;
  if (!a.prompt.empty() || a.tokenizer_given || std::filesystem::exists(a.tokenizer + "/encoder.json"))
    vocabulary.emplace(a.tokenizer);
  MINIDL_CHECK(!vocabulary || vocabulary->size() <= run.vocab_size(), "--tokenizer ", text_excerpt(a.tokenizer),
               ": its ", vocabulary ? vocabulary->size() : 0, " tokens do not fit the model's vocabulary of ",
               run.vocab_size(), ": give the tokenizer its data was made with (bytes: 256)");
  const std::vector<int32_t> prompt = a.prompt.empty() ? a.prompt_ids : vocabulary->encode(a.prompt);
  GenerateOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.temperature = a.temperature;
  o.top_k = a.top_k;
  o.seed = a.seed;
  o.context = run_context(run, a.context);
  // A model's padded vocabulary (llm.c's 50304) never yields an id the tokenizer cannot decode.
  o.vocab_limit = vocabulary ? vocabulary->size() : 0;
  if (vocabulary) {
    for (int32_t id : prompt)
      MINIDL_CHECK(id >= 0 && id < vocabulary->size(), "--prompt-ids: token ", id,
                   " is outside the tokenizer's vocabulary [0, ", vocabulary->size(), ") (", text_excerpt(a.tokenizer),
                   ")");
    print(vocabulary->decode(prompt));
    o.on_token = [&](int32_t id) { print(vocabulary->decode({id})); };
  } else {
    std::string ids;
    for (int32_t id : prompt) ids += (ids.empty() ? "" : " ") + std::to_string(id);
    print(ids);
    o.on_token = [](int32_t id) { print(" " + std::to_string(id)); };
  }
  const AutocastGuard autocast(run.activation_dtype());
  generate_tokens(run.model(), run.device(), prompt, o);
  print("\n");
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "sample text from a trained language model's run");
  add_trained_run_options(cmd, a->run_dir, a->weights, a->device);
  CLI::Option* prompt = cmd->add_option("--prompt", a->prompt, "the text to continue (encoded with the tokenizer)");
  cmd->add_option("--prompt-ids", a->prompt_ids,
                  "the token ids to continue, comma-separated (without a tokenizer folder, ids are printed)")
      ->delimiter(',')
      ->excludes(prompt);
  CLI::Option* tokenizer =
      cmd->add_option("--tokenizer", a->tokenizer,
                      "the folder of encoder.json and vocab.bpe (scripts/fetch-gpt2-tokenizer.sh), or \"bytes\": each "
                      "byte a token, as minidl tokenize --tokenizer bytes made the run's data")
          ->capture_default_str();
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "tokens to draw after the prompt")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--temperature", a->temperature, "the logits are divided by it; 0 takes the most likely token")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (text.empty() || *end != '\0' || !std::isfinite(v)) return "must be a number, got " + text_excerpt(text);
            return v >= 0 ? "" : "must be >= 0 (0 takes the most likely token), got " + text_excerpt(text);
          },
          "FLOAT >= 0"));
  cmd->add_option("--top-k", a->top_k, "draw from the k most likely tokens only (0: from all)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--seed", a->seed, "the draws' seed: the same seed, the same text")->capture_default_str();
  cmd->add_option("--context", a->context,
                  "the tokens the model sees each step (default: the run's data.seq_len, else its "
                  "PositionEmbedding's length)")
      ->check(whole_number(1));
  cmd->callback([a, cmd, prompt, tokenizer] {
    if (prompt->count() == 0 && cmd->count("--prompt-ids") == 0)
      throw CLI::RequiredError("--prompt TEXT or --prompt-ids IDS");
    a->tokenizer_given = tokenizer->count() > 0;
  });
  return {cmd, [a] { return generate_command(*a); }};
}

}  // namespace minidl
