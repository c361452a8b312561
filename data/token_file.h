// llm.c's token files (dev/data/*.bin: its tinyshakespeare, tinystories and fineweb shards, and what
// scripts/tokenize.sh writes): a header of 256 little-endian int32 (magic 20240520, version 1,
// the token count, the rest 0), then the tokens as uint16. A language model trains on windows of
// T + 1 consecutive tokens: the first T are the input, the last T the targets (each token's
// next).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;  // uint16 tokens (GPT-2's 50257 fit)
constexpr int64_t kTokenFileHeaderInts = 256;

// The tokens of `path`, checked: one message naming the file and what is wrong (a short or long
// file, another magic or version, a count the size does not hold); `vocab_size` > 0 also checks
// every token is below it (naming the first one that is not).
std::vector<int32_t> read_token_file(const std::string& path, int64_t vocab_size = 0);
// Writes `tokens` (each in [0, 65535]) in the same format; the file appears whole or not at all.
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens);

// Windows of T + 1 tokens starting every T tokens (llm.c's stride: consecutive windows share one
// token), as many as fit: (tokens - 1) / T.
inline int64_t token_windows(int64_t tokens, int64_t T) { return tokens > 1 && T > 0 ? (tokens - 1) / T : 0; }

}  // namespace minidl
