// The CIFAR-10 reader: the real decoded data (sizes, class balance, channel order through the
// per-channel means), the image limit, the cifar-10-batches-bin subfolder, and broken files made
// in a temp dir (missing, truncated, label out of range), each error naming the file.
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "data/cifar10.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("cifar10") {}
};

// Records whose label is `labels[r]` and whose pixel k is (r * 7 + k) mod 256.
void write_records(const fs::path& file, const std::vector<int>& labels) {
  std::ofstream out(file, std::ios::binary);
  for (size_t r = 0; r < labels.size(); ++r) {
    out.put(static_cast<char>(labels[r]));
    for (int64_t k = 0; k < kCifarImageBytes; ++k) out.put(static_cast<char>((r * 7 + k) % 256));
  }
}

void write_bytes(const fs::path& file, size_t n) {
  std::ofstream out(file, std::ios::binary);
  out << std::string(n, '\0');
}

}  // namespace

TEST_CASE("CIFAR-10 real data: 50000/10000 images, 5000 per class, RGB planes", "[data][cifar10]") {
  const std::string dir = test::data_dir();
  if (dir.empty() || !fs::exists(fs::path(dir) / "test_batch.bin")) {
    WARN("SKIPPED: no decoded CIFAR-10 at MINIDL_DATA_DIR='" << dir << "'");
    return;
  }
  const Dataset train = load_cifar10(dir, Split::Train);
  const Dataset test = load_cifar10(dir, Split::Test);
  REQUIRE(train.images.shape() == Shape{50000, 3, 32, 32});
  REQUIRE(train.images.dtype() == DType::UInt8);
  REQUIRE(train.labels.shape() == Shape{50000});
  REQUIRE(test.size() == 10000);

  std::array<int64_t, 10> train_hist{}, test_hist{};
  for (int32_t l : train.labels.values<int32_t>()) train_hist.at(static_cast<size_t>(l))++;
  for (int32_t l : test.labels.values<int32_t>()) test_hist.at(static_cast<size_t>(l))++;
  for (int c = 0; c < 10; ++c) {
    INFO("class " << c);
    REQUIRE(train_hist[c] == 5000);
    REQUIRE(test_hist[c] == 1000);
  }

  // The per-channel means of the training set are the published normalization constants
  // (0.4914, 0.4822, 0.4465): the planes are read as R, G, B and the pixels as bytes.
  const uint8_t* px = train.images.data<uint8_t>();
  std::array<double, 3> mean{};
  for (int64_t i = 0; i < 50000; ++i)
    for (int c = 0; c < 3; ++c) {
      uint32_t plane = 0;  // integer sums: exact, and they vectorize
      for (int64_t k = 0; k < 1024; ++k) plane += px[(i * 3 + c) * 1024 + k];
      mean[c] += plane;
    }
  const std::array<double, 3> expected = {0.4914, 0.4822, 0.4465};
  for (int c = 0; c < 3; ++c) {
    INFO("channel " << c << " mean " << mean[c] / (50000.0 * 1024 * 255));
    REQUIRE(std::fabs(mean[c] / (50000.0 * 1024 * 255) - expected[c]) < 2e-3);
  }

  {  // a limit keeps the first images, reading only the files it needs
    const Dataset part = load_cifar10(dir, Split::Train, 12345);
    REQUIRE(part.size() == 12345);
    REQUIRE(std::memcmp(part.images.data<uint8_t>(), train.images.data<uint8_t>(), part.images.nbytes()) == 0);
    REQUIRE(std::memcmp(part.labels.data<int32_t>(), train.labels.data<int32_t>(), part.labels.nbytes()) == 0);
  }
  {  // a folder holding cifar-10-batches-bin is accepted
    TempDir tmp;
    fs::create_directory_symlink(fs::absolute(dir), tmp.path / "cifar-10-batches-bin");
    REQUIRE(resolve_cifar10_dir(tmp.path.string()) == (tmp.path / "cifar-10-batches-bin").string());
    REQUIRE(load_cifar10(tmp.path.string(), Split::Test).labels.values<int32_t>() ==
            test.labels.values<int32_t>());
  }
}

TEST_CASE("CIFAR-10 record layout: label byte then the 3072 pixels", "[data][cifar10]") {
  TempDir tmp;
  const fs::path file = tmp.path / "small.bin";
  write_records(file, {3, 9, 0});
  const Dataset d = read_cifar10_batch(file.string(), 3);
  REQUIRE(d.labels.values<int32_t>() == std::vector<int32_t>{3, 9, 0});
  REQUIRE(d.images.shape() == Shape{3, 3, 32, 32});
  const std::vector<uint8_t> px = d.images.values<uint8_t>();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t k = 0; k < kCifarImageBytes; k += 97) {
      INFO("record " << r << " byte " << k);
      REQUIRE(px[r * kCifarImageBytes + k] == (r * 7 + k) % 256);
    }
}

TEST_CASE("CIFAR-10 errors name the file and what is wrong", "[data][cifar10]") {
  TempDir tmp;
  const std::string root = tmp.path.string();

  // Nothing there: both places that were searched are named.
  REQUIRE_THROWS_WITH(load_cifar10(root, Split::Test),
                      Catch::Contains(root) && Catch::Contains("cifar-10-batches-bin") &&
                          Catch::Contains("fetch-cifar10.sh"));
  REQUIRE_THROWS_WITH(load_cifar10("", Split::Test), Catch::Contains("data.dir"));

  // Only a test batch: the training set names the missing file.
  write_records(tmp.path / "test_batch.bin", {1});
  REQUIRE_THROWS_WITH(load_cifar10(root, Split::Train),
                      Catch::Contains((tmp.path / "data_batch_1.bin").string()) &&
                          Catch::Contains("cannot open"));

  // Truncated inside a record, and at a record boundary.
  write_bytes(tmp.path / "test_batch.bin", 2 * 3073 + 100);
  REQUIRE_THROWS_WITH(load_cifar10(root, Split::Test),
                      Catch::Contains((tmp.path / "test_batch.bin").string()) &&
                          Catch::Contains("not a multiple of the 3073-byte record"));
  write_bytes(tmp.path / "test_batch.bin", 5 * 3073);
  REQUIRE_THROWS_WITH(load_cifar10(root, Split::Test),
                      Catch::Contains((tmp.path / "test_batch.bin").string()) &&
                          Catch::Contains("holds 5 records, expected 10000"));

  // A label out of range names the record and the value.
  write_records(tmp.path / "bad_label.bin", {4, 10, 2});
  REQUIRE_THROWS_WITH(read_cifar10_batch((tmp.path / "bad_label.bin").string(), 3),
                      Catch::Contains((tmp.path / "bad_label.bin").string()) &&
                          Catch::Contains("record 1 has label 10"));

  // Files found through the subfolder are named with it.
  TempDir outer;
  fs::create_directories(outer.path / "cifar-10-batches-bin");
  write_bytes(outer.path / "cifar-10-batches-bin" / "test_batch.bin", 3073 + 1);
  REQUIRE_THROWS_WITH(load_cifar10(outer.path.string(), Split::Test),
                      Catch::Contains((outer.path / "cifar-10-batches-bin" / "test_batch.bin").string()));
}
