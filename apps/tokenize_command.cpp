// `minidl tokenize TEXT_FILE OUT_DIR`: GPT-2's tokenizer over a text file into OUT_DIR/train.bin
// and OUT_DIR/val.bin, llm.c's token files (data/tokenize.h); scripts/tokenize.sh wraps it.
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "data/tokenize.h"

namespace minidl {

namespace {

struct TokenizeArgs {
  std::string text, out, tokenizer = "build/gpt2-tokenizer";
  double val_fraction = 0.1;
};

int tokenize_command(const TokenizeArgs& a) {
  const TokenizeResult r = tokenize_text_file(a.tokenizer, a.text, a.out, a.val_fraction);
  std::printf(
      "tokenize: %lld bytes of '%s' -> %lld training tokens in %s/train.bin, %lld validation tokens in "
      "%s/val.bin\n",
      static_cast<long long>(r.text_bytes), a.text.c_str(), static_cast<long long>(r.train_tokens), a.out.c_str(),
      static_cast<long long>(r.val_tokens), a.out.c_str());
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize",
                                     "GPT-2's tokenizer over a text file into train/val token files "
                                     "(llm.c's format)");
  cmd->add_option("text", a->text, "the text file (UTF-8)")->required();
  cmd->add_option("out", a->out, "the folder for train.bin and val.bin")->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "the folder of encoder.json and vocab.bpe "
                  "(scripts/fetch-gpt2-tokenizer.sh), or \"bytes\": each byte a token (a vocabulary of 256)")
      ->capture_default_str();
  cmd->add_option("--val-fraction", a->val_fraction, "the share of tokens, from the start, for val.bin")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  return {cmd, [a] { return tokenize_command(*a); }};
}

}  // namespace minidl
