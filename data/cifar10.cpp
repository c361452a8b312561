#include "data/cifar10.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

const char* const kTrainFiles[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                   "data_batch_4.bin", "data_batch_5.bin"};
const char* const kTestFile = "test_batch.bin";

// Reads the raw records of one file into `raw`, checked: the file opens, its size is exactly
// `records` records and every label is a class index.
void read_records(const std::string& path, int64_t records, std::vector<uint8_t>& raw) {
  std::error_code ec;
  // A folder opens as a stream too, and then reports a size of 2^63 - 1.
  MINIDL_CHECK(!std::filesystem::exists(path, ec) || std::filesystem::is_regular_file(path, ec), "CIFAR-10: '",
               path, "' is not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MINIDL_CHECK(in.good(), "CIFAR-10: cannot open '", path, "' (missing file?)");
  const int64_t bytes = static_cast<int64_t>(in.tellg());
  MINIDL_CHECK(bytes % kCifarRecordBytes == 0, "CIFAR-10: '", path, "' has ", bytes,
               " bytes, not a multiple of the 3073-byte record (1 label + 3072 pixels): truncated "
               "or not a CIFAR-10 binary batch");
  MINIDL_CHECK(bytes == records * kCifarRecordBytes, "CIFAR-10: '", path, "' holds ",
               bytes / kCifarRecordBytes, " records, expected ", records, " (truncated?)");
  raw.resize(static_cast<size_t>(bytes));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(raw.data()), bytes);
  MINIDL_CHECK(in.good(), "CIFAR-10: reading '", path, "' failed");
  for (int64_t r = 0; r < records; ++r) {
    const int label = raw[static_cast<size_t>(r * kCifarRecordBytes)];
    MINIDL_CHECK(label < kCifarClasses, "CIFAR-10: '", path, "' record ", r, " has label ", label,
                 " (expected 0..9)");
  }
}

// Splits the first `count` records of `raw` into the image and label tensors at `first`.
void unpack(const std::vector<uint8_t>& raw, int64_t count, int64_t first, Dataset& out) {
  uint8_t* images = out.images.data<uint8_t>();
  int32_t* labels = out.labels.data<int32_t>();
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* rec = raw.data() + r * kCifarRecordBytes;
    labels[first + r] = rec[0];
    std::memcpy(images + (first + r) * kCifarImageBytes, rec + 1, kCifarImageBytes);
  }
}

Dataset allocate(int64_t n) {
  Dataset d;
  d.images = Tensor::empty({n, kCifarChannels, kCifarHeight, kCifarWidth}, DType::UInt8);
  d.labels = Tensor::empty({n}, DType::Int32);
  return d;
}

bool has_batches(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kTestFile, ec) || fs::is_regular_file(dir / kTrainFiles[0], ec);
}

}  // namespace

std::string resolve_cifar10_dir(const std::string& dir) {
  MINIDL_CHECK(!dir.empty(), "CIFAR-10: no data directory given (data.dir); "
                             "scripts/fetch-cifar10.sh downloads the dataset");
  const fs::path root(dir);
  if (has_batches(root)) return root.string();
  const fs::path sub = root / "cifar-10-batches-bin";
  if (has_batches(sub)) return sub.string();
  fail(str("CIFAR-10: no batch files (data_batch_1.bin .. data_batch_5.bin, test_batch.bin) in '",
           root.string(), "' or '", sub.string(),
           "'; scripts/fetch-cifar10.sh DIR downloads and unpacks them"));
}

Dataset read_cifar10_batch(const std::string& path, int64_t records) {
  std::vector<uint8_t> raw;
  read_records(path, records, raw);
  Dataset d = allocate(records);
  unpack(raw, records, 0, d);
  return d;
}

Dataset load_cifar10(const std::string& dir, Split split, int64_t limit) {
  MINIDL_CHECK(limit >= 0, "CIFAR-10: the image limit must be >= 0, got ", limit);
  const fs::path root(resolve_cifar10_dir(dir));
  std::vector<std::string> files;
  if (split == Split::Train) files.assign(std::begin(kTrainFiles), std::end(kTrainFiles));
  else files.push_back(kTestFile);
  const int64_t available = static_cast<int64_t>(files.size()) * kCifarRecordsPerFile;
  const int64_t n = limit > 0 ? std::min(limit, available) : available;
  Dataset d = allocate(n);
  std::vector<uint8_t> raw;  // one buffer for every file
  for (size_t f = 0; f * kCifarRecordsPerFile < static_cast<size_t>(n); ++f) {
    const int64_t first = static_cast<int64_t>(f) * kCifarRecordsPerFile;
    read_records((root / files[f]).string(), kCifarRecordsPerFile, raw);
    unpack(raw, std::min(kCifarRecordsPerFile, n - first), first, d);
  }
  return d;
}

}  // namespace minidl
