// Reading and writing llm.c's token files (token_file.h). The header and tokens are
// little-endian, as llm.c writes them with numpy on x86 and reads them with fread.
#include "data/token_file.h"

#include <cstdio>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/regular_file.h"

namespace minidl {

namespace {
constexpr int64_t kHeaderBytes = kTokenFileHeaderInts * 4;
}  // namespace

std::vector<int32_t> read_token_file(const std::string& path, int64_t vocab_size) {
  // Opened without blocking (a FIFO at the path is refused, not waited on).
  const File f = open_regular_file(path, "token file");
  MINIDL_CHECK(std::fseek(f.get(), 0, SEEK_END) == 0, "token file '", path, "': cannot seek");
  const int64_t size = std::ftell(f.get());
  std::rewind(f.get());
  MINIDL_CHECK(size >= kHeaderBytes, "token file '", path, "': ", size, " bytes, shorter than the ", kHeaderBytes,
               "-byte header (256 int32: magic ", kTokenFileMagic, ", version, token count)");
  std::vector<int32_t> header(kTokenFileHeaderInts);
  MINIDL_CHECK(std::fread(header.data(), 1, kHeaderBytes, f.get()) == static_cast<size_t>(kHeaderBytes), "token file '",
               path, "': cannot read the header");
  MINIDL_CHECK(header[0] == kTokenFileMagic, "token file '", path, "': magic ", header[0], ", expected ",
               kTokenFileMagic, " (llm.c's token format)");
  MINIDL_CHECK(header[1] == kTokenFileVersion, "token file '", path, "': version ", header[1], ", expected ",
               kTokenFileVersion, " (uint16 tokens)");
  const int64_t count = header[2];
  MINIDL_CHECK(count >= 0 && size == kHeaderBytes + 2 * count, "token file '", path, "': the header says ", count,
               " tokens, which take ", kHeaderBytes + 2 * count, " bytes, but the file has ", size);
  std::vector<uint16_t> raw(static_cast<size_t>(count));
  MINIDL_CHECK(std::fread(raw.data(), 2, raw.size(), f.get()) == raw.size(), "token file '", path,
               "': read failed after the header");
  std::vector<int32_t> tokens(raw.begin(), raw.end());
  if (vocab_size > 0)
    for (size_t i = 0; i < tokens.size(); ++i)
      MINIDL_CHECK(tokens[i] < vocab_size, "token file '", path, "': token ", i, " is ", tokens[i],
                   ", not below the vocabulary size ", vocab_size);
  return tokens;
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens) {
  MINIDL_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), "token file '", path, "': ", tokens.size(),
               " tokens are more than the header's int32 count holds");
  std::vector<int32_t> header(kTokenFileHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::vector<uint16_t> raw(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    MINIDL_CHECK(tokens[i] >= 0 && tokens[i] <= 65535, "token file '", path, "': token ", i, " is ", tokens[i],
                 ", outside uint16");
    raw[i] = static_cast<uint16_t>(tokens[i]);
  }
  AtomicFile out(path, "token file");
  out.write(header.data(), sizeof(int32_t) * header.size());
  out.write(raw.data(), sizeof(uint16_t) * raw.size());
  out.commit();
}

}  // namespace minidl
