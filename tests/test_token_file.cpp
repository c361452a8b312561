// llm.c's token files: what write_token_file writes reads back, the header is llm.c's (checked
// byte by byte), and each kind of damage is one message naming the file.
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "core/error.h"
#include "data/token_file.h"
#include "test_util.h"

using namespace minidl;

namespace {

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("token files: llm.c's layout, written and read back", "[tokens]") {
  test::TempDir tmp("tokens");
  const std::string path = tmp.file("train.bin");
  const std::vector<int32_t> tokens = {50256, 0, 15496, 11, 995, 65535};
  write_token_file(path, tokens);
  const std::vector<char> b = bytes_of(path);
  REQUIRE(b.size() == 1024 + 2 * tokens.size());
  int32_t header[3];
  std::memcpy(header, b.data(), sizeof(header));
  REQUIRE(header[0] == 20240520);
  REQUIRE(header[1] == 1);
  REQUIRE(header[2] == 6);
  for (size_t i = 12; i < 1024; ++i) REQUIRE(b[i] == 0);
  uint16_t first;
  std::memcpy(&first, b.data() + 1024, 2);
  REQUIRE(first == 50256);
  REQUIRE(read_token_file(path) == tokens);
  REQUIRE(read_token_file(path, 65536) == tokens);
  REQUIRE_THROWS_WITH(read_token_file(path, 50257),
                      Catch::Contains("token 5 is 65535") && Catch::Contains("vocabulary size 50257"));
  REQUIRE_THROWS_WITH(write_token_file(tmp.file("bad.bin"), {1, 70000}), Catch::Contains("token 1 is 70000"));
  REQUIRE(token_windows(6, 2) == 2);  // [0..2], [2..4]; token 5 is never a target
  REQUIRE(token_windows(7, 2) == 3);
  REQUIRE(token_windows(1, 4) == 0);
}

TEST_CASE("token files: damage is one message naming the file", "[tokens][hostile]") {
  test::TempDir tmp("tokens");
  const std::string path = tmp.file("t.bin");
  write_token_file(path, {1, 2, 3});
  const std::vector<char> good = bytes_of(path);
  auto damaged = [&](const std::function<void(std::vector<char>&)>& edit) {
    std::vector<char> b = good;
    edit(b);
    write_bytes(path, b);
    return path;
  };
  REQUIRE_THROWS_WITH(read_token_file(tmp.file("none.bin")),
                      Catch::Contains("token file") && Catch::Contains("none.bin"));
  // A FIFO where the file belongs is refused, not waited on.
  REQUIRE(::mkfifo(tmp.file("fifo.bin").c_str(), 0600) == 0);
  REQUIRE_THAT(test::error_in_child([&] { read_token_file(tmp.file("fifo.bin")); }),
               Catch::Contains("not a regular file"));
  REQUIRE_THROWS_WITH(read_token_file(damaged([](std::vector<char>& b) { b.resize(100); })),
                      Catch::Contains("t.bin") && Catch::Contains("shorter than the 1024-byte header"));
  REQUIRE_THROWS_WITH(read_token_file(damaged([](std::vector<char>& b) { b[0] = 1; })),
                      Catch::Contains("t.bin") && Catch::Contains("expected 20240520"));
  REQUIRE_THROWS_WITH(read_token_file(damaged([](std::vector<char>& b) { b[4] = 2; })),
                      Catch::Contains("version 2, expected 1"));
  REQUIRE_THROWS_WITH(read_token_file(damaged([](std::vector<char>& b) { b.pop_back(); })),
                      Catch::Contains("the header says 3 tokens, which take 1030 bytes, but the file has 1029"));
}
