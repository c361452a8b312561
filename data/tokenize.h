// A text file to a language model's token files: GPT-2's tokenizer (data/gpt2_tokenizer.h) over
// the whole text, <|endoftext|> first (as llm.c's dev/data scripts start each document), and the
// tokens split into OUT/val.bin (the first val_fraction of them, llm.c's order) and OUT/train.bin
// (the rest), in llm.c's format (data/token_file.h). `minidl tokenize` and scripts/tokenize.sh
// call it. The tokenizer "bytes" makes each byte of the text a token (a vocabulary of 256, as
// nanoGPT's character-level examples): small models and tests need no vocabulary files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace minidl {

// The text is read whole: 1 GiB (about 250M tokens) bounds it, a device or /dev/zero is an error.
constexpr size_t kMaxTextBytes = size_t{1} << 30;
constexpr const char* kByteTokenizer = "bytes";

struct TokenizeResult {
  int64_t text_bytes = 0, train_tokens = 0, val_tokens = 0;
};

TokenizeResult tokenize_text_file(const std::string& tokenizer_dir, const std::string& text_path,
                                  const std::string& out_dir, double val_fraction);

}  // namespace minidl
