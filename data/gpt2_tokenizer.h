// GPT-2's byte-level BPE tokenizer in C++ (what OpenAI's encoder.py and the npm package
// gpt-3-encoder compute): text is split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// into pieces, each piece's UTF-8 bytes are mapped to printable characters (bytes_to_unicode),
// and the vocabulary's merges (vocab.bpe, lowest rank first) join them into tokens (encoder.json).
// The two files come from scripts/fetch-gpt2-tokenizer.sh (checksummed); nothing is downloaded at
// run time. Bytes that are not valid UTF-8 are kept, each a piece's character of its own.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace minidl {

constexpr int32_t kGpt2EndOfText = 50256;  // <|endoftext|> in GPT-2's vocabulary, between documents

// The pieces GPT-2's pattern splits `text` (UTF-8) into, in order; they concatenate to `text`.
std::vector<std::string> gpt2_pretokenize(const std::string& text);

class Gpt2Tokenizer {
 public:
  // Reads DIR/encoder.json and DIR/vocab.bpe; a missing or malformed file is one message naming it.
  // Any vocabulary in GPT-2's format is taken (a small one trained the same way, a test's), as
  // long as it has "<|endoftext|>" and ids 0..size-1 each once.
  explicit Gpt2Tokenizer(const std::string& dir);

  std::vector<int32_t> encode(const std::string& text) const;
  // The text of `tokens` (ids out of range are an error naming the first).
  std::string decode(const std::vector<int32_t>& tokens) const;
  int64_t vocab_size() const { return static_cast<int64_t>(decoder_.size()); }
  // The id of "<|endoftext|>" (kGpt2EndOfText in GPT-2's vocabulary).
  int32_t end_of_text() const { return end_of_text_; }

 private:
  // The tokens of one piece's byte-mapped characters.
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> encoder_;
  std::vector<std::string> decoder_;
  std::unordered_map<std::string, int32_t> ranks_;   // "first second" -> merge rank
  std::string byte_char_[256];                       // byte -> its printable character (UTF-8)
  std::unordered_map<uint32_t, uint8_t> char_byte_;  // and back
  int32_t end_of_text_ = 0;
};

}  // namespace minidl
