// GPT-2's byte-level BPE (gpt2_tokenizer.h).
#include "data/gpt2_tokenizer.h"

#include <climits>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/regular_file.h"
#include "data/unicode_classes.h"

namespace minidl {

namespace {

// One decoded character: its code point (an invalid byte is itself, above the Unicode range so it
// is none of the classes) and where its bytes end.
struct Char {
  uint32_t cp;
  size_t end;
};

constexpr uint32_t kInvalidByte = 0x110000;

std::vector<Char> decode_utf8(const std::string& s) {
  std::vector<Char> out;
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (c >> 6) == 2;
      cp = cp << 6 | (c & 0x3F);
    }
    if (!ok) {
      out.push_back({kInvalidByte + b, i + 1});
      ++i;
    } else {
      i += static_cast<size_t>(len);
      out.push_back({cp, i});
    }
  }
  return out;
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | cp >> 12);
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | cp >> 18);
    s += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// JavaScript's \s in a /u pattern (the package's engine): WhiteSpace and LineTerminator.
bool is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

bool is_letter(uint32_t c) { return c < kInvalidByte && is_unicode_letter(c); }
bool is_number(uint32_t c) { return c < kInvalidByte && is_unicode_number(c); }
bool is_other(uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }

// Where the piece starting at character i ends (the pattern's alternatives in order).
size_t piece_end(const std::vector<Char>& t, size_t i) {
  const size_t n = t.size();
  auto at = [&](size_t k) { return k < n ? t[k].cp : 0u; };
  if (at(i) == '\'') {
    const uint32_t a = at(i + 1), b = at(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  const size_t s = at(i) == ' ' && i + 1 < n ? i + 1 : i;
  for (bool (*cls)(uint32_t) : {is_letter, is_number, is_other}) {
    if (s < n && cls(t[s].cp)) {
      size_t j = s + 1;
      while (j < n && cls(t[j].cp)) ++j;
      return j;
    }
  }
  // Whitespace: the run, less its last character when a non-space follows and the rest is not
  // empty (\s+(?!\S)); else the run itself (\s+).
  size_t j = i + 1;
  while (j < n && is_space(t[j].cp)) ++j;
  return j < n && j - 1 > i ? j - 1 : j;
}

std::string read_file(const std::string& path) {
  MINIDL_CHECK(path_exists(path), "GPT-2 tokenizer: no file '", path,
               "' (scripts/fetch-gpt2-tokenizer.sh DIR fetches it)");
  return read_file_limited(path, "GPT-2 tokenizer file");
}

}  // namespace

std::vector<std::string> gpt2_pretokenize(const std::string& text) {
  const std::vector<Char> t = decode_utf8(text);
  std::vector<std::string> out;
  size_t i = 0, byte = 0;
  while (i < t.size()) {
    const size_t j = piece_end(t, i);
    out.push_back(text.substr(byte, t[j - 1].end - byte));
    byte = t[j - 1].end;
    i = j;
  }
  return out;
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) {
  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(read_file(enc_path));
  } catch (const nlohmann::json::exception& e) {
    fail(str("GPT-2 tokenizer: '", enc_path, "' is not valid JSON: ", e.what()));
  }
  MINIDL_CHECK(enc.is_object() && !enc.empty(), "GPT-2 tokenizer: '", enc_path,
               "' must be an object of token strings to ids");
  decoder_.resize(enc.size());
  for (const auto& [token, id] : enc.items()) {
    MINIDL_CHECK(
        id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < static_cast<int64_t>(enc.size()),
        "GPT-2 tokenizer: '", enc_path, "': the id of ", nlohmann::json(token).dump(), " is not in 0..",
        enc.size() - 1);
    const auto i = static_cast<size_t>(id.get<int32_t>());
    MINIDL_CHECK(decoder_[i].empty(), "GPT-2 tokenizer: '", enc_path, "': id ", i, " is given to both ",
                 nlohmann::json(decoder_[i]).dump(), " and ", nlohmann::json(token).dump());
    MINIDL_CHECK(!token.empty(), "GPT-2 tokenizer: '", enc_path, "': id ", i, " is given to an empty token");
    encoder_[token] = id.get<int32_t>();
    decoder_[i] = token;
  }
  const auto eot = encoder_.find("<|endoftext|>");
  MINIDL_CHECK(eot != encoder_.end(), "GPT-2 tokenizer: '", enc_path, "' has no \"<|endoftext|>\" token");
  end_of_text_ = eot->second;
  std::istringstream lines(read_file(bpe_path));
  std::string line;
  int32_t rank = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    MINIDL_CHECK(line.find(' ') != std::string::npos && line.find(' ') == line.rfind(' '), "GPT-2 tokenizer: '",
                 bpe_path, "': merge ", rank + 1, " is not two symbols separated by a space: ", line);
    ranks_.emplace(line, rank++);
  }
  MINIDL_CHECK(rank > 0, "GPT-2 tokenizer: '", bpe_path, "' holds no merges");
  // bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n in order.
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? b : next++;
    byte_char_[b] = encode_utf8(cp);
    char_byte_[cp] = static_cast<uint8_t>(b);
  }
}

void Gpt2Tokenizer::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  std::vector<std::string> word;
  for (char c : piece) word.push_back(byte_char_[static_cast<unsigned char>(c)]);
  while (word.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t k = 0; k + 1 < word.size(); ++k) {
      const auto it = ranks_.find(word[k] + " " + word[k + 1]);
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        at = k;
      }
    }
    if (best == INT32_MAX) break;
    // Merge every occurrence of the best pair, left to right.
    const std::string first = word[at], second = word[at + 1];
    std::vector<std::string> merged;
    for (size_t k = 0; k < word.size(); ++k) {
      if (k + 1 < word.size() && word[k] == first && word[k + 1] == second) {
        merged.push_back(first + second);
        ++k;
      } else {
        merged.push_back(word[k]);
      }
    }
    word = std::move(merged);
  }
  for (const std::string& symbol : word) {
    const auto it = encoder_.find(symbol);
    MINIDL_CHECK(it != encoder_.end(), "GPT-2 tokenizer: the vocabulary has no token for the merged symbol ",
                 nlohmann::json(symbol).dump());
    out.push_back(it->second);
  }
}

std::vector<int32_t> Gpt2Tokenizer::encode(const std::string& text) const {
  // A text repeats its words: each distinct piece is merged once.
  std::unordered_map<std::string, std::vector<int32_t>> seen;
  std::vector<int32_t> out;
  for (const std::string& piece : gpt2_pretokenize(text)) {
    auto it = seen.find(piece);
    if (it == seen.end()) {
      std::vector<int32_t> ids;
      bpe(piece, ids);
      it = seen.emplace(piece, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& tokens) const {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    MINIDL_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size(), "GPT-2 tokenizer: token ", i, " is ", tokens[i],
                 ", not in 0..", vocab_size() - 1);
    for (const Char& c : decode_utf8(decoder_[static_cast<size_t>(tokens[i])])) {
      const auto it = char_byte_.find(c.cp);
      MINIDL_CHECK(it != char_byte_.end(), "GPT-2 tokenizer: token ", tokens[i],
                   " holds a character outside the byte map");
      out += static_cast<char>(it->second);
    }
  }
  return out;
}

}  // namespace minidl
