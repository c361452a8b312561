// tokenize_text_file (tokenize.h).
#include "data/tokenize.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/json_limits.h"
#include "data/gpt2_tokenizer.h"
#include "data/token_file.h"

namespace minidl {

TokenizeResult tokenize_text_file(const std::string& tokenizer_dir, const std::string& text_path,
                                  const std::string& out_dir, double val_fraction) {
  MINIDL_CHECK(val_fraction > 0 && val_fraction < 1, "tokenize: the validation fraction must be in (0, 1), got ",
               val_fraction);
  const std::string text = read_file_limited(text_path, "text file", kMaxTextBytes);
  MINIDL_CHECK(!text.empty(), "tokenize: the text file '", text_path, "' is empty");
  std::vector<int32_t> tokens;
  if (tokenizer_dir == kByteTokenizer) {
    tokens.assign(text.begin(), text.end());
    for (int32_t& t : tokens) t &= 0xff;  // char may be signed
  } else {
    const Gpt2Tokenizer tokenizer(tokenizer_dir);
    tokens.push_back(tokenizer.end_of_text());
    const std::vector<int32_t> body = tokenizer.encode(text);
    tokens.insert(tokens.end(), body.begin(), body.end());
  }
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t val = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(val_fraction * static_cast<double>(n))));
  MINIDL_CHECK(n - val >= 2, "tokenize: '", text_path, "' gives ", n, " tokens, too few for a validation split of ",
               val_fraction);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  MINIDL_CHECK(!ec, "tokenize: cannot create the folder '", out_dir, "': ", ec.message());
  write_token_file(out_dir + "/val.bin", std::vector<int32_t>(tokens.begin(), tokens.begin() + val));
  write_token_file(out_dir + "/train.bin", std::vector<int32_t>(tokens.begin() + val, tokens.end()));
  return {static_cast<int64_t>(text.size()), n - val, val};
}

}  // namespace minidl
