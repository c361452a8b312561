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

// A binary record layout: CIFAR-10's (one label byte) or CIFAR-100's (coarse, then fine).
struct RecordFormat {
  const char* name;     // for messages
  int64_t label_bytes;  // before the 3072 image bytes
  int64_t label_at;     // which of them is the label
  int64_t classes;
  int64_t record_bytes() const { return label_bytes + kCifarImageBytes; }
};

constexpr RecordFormat kCifar10Format{"CIFAR-10", 1, 0, kCifarClasses};

const char* const kCifar10Names[] = {"airplane", "automobile", "bird", "cat", "deer",
                                     "dog", "frog", "horse", "ship", "truck"};

// Reads the raw records of one file into `raw`, checked: the file opens, its size is exactly
// `records` records (or any whole number of them, at least one, when `records` is 0) and every
// label is a class index. Returns the number of records.
int64_t read_records(const std::string& path, int64_t records, const RecordFormat& f, std::vector<uint8_t>& raw) {
  std::error_code ec;
  // A folder opens as a stream too, and then reports a size of 2^63 - 1.
  MINIDL_CHECK(!std::filesystem::exists(path, ec) || std::filesystem::is_regular_file(path, ec), f.name, ": '",
               path, "' is not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MINIDL_CHECK(in.good(), f.name, ": cannot open '", path, "' (missing file?)");
  const int64_t bytes = static_cast<int64_t>(in.tellg());
  MINIDL_CHECK(bytes % f.record_bytes() == 0, f.name, ": '", path, "' has ", bytes, " bytes, not a multiple of the ",
               f.record_bytes(), "-byte record (", f.label_bytes == 1 ? "1 label" : "2 labels",
               " + 3072 pixels): truncated or not a ", f.name, " binary batch");
  if (records == 0) {
    records = bytes / f.record_bytes();
    MINIDL_CHECK(records > 0, f.name, ": '", path, "' is empty");
  }
  MINIDL_CHECK(bytes == records * f.record_bytes(), f.name, ": '", path, "' holds ", bytes / f.record_bytes(),
               " records, expected ", records, " (truncated?)");
  raw.resize(static_cast<size_t>(bytes));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(raw.data()), bytes);
  MINIDL_CHECK(in.good(), f.name, ": reading '", path, "' failed");
  for (int64_t r = 0; r < records; ++r) {
    const int label = raw[static_cast<size_t>(r * f.record_bytes() + f.label_at)];
    MINIDL_CHECK(label < f.classes, f.name, ": '", path, "' record ", r, " has label ", label, " (expected 0..",
                 f.classes - 1, ")");
  }
  return records;
}

// Splits the first `count` records of `raw` into the image and label tensors at `first`.
void unpack(const std::vector<uint8_t>& raw, int64_t count, int64_t first, const RecordFormat& f, Dataset& out) {
  uint8_t* images = out.images.data<uint8_t>();
  int32_t* labels = out.labels.data<int32_t>();
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* rec = raw.data() + r * f.record_bytes();
    labels[first + r] = rec[f.label_at];
    std::memcpy(images + (first + r) * kCifarImageBytes, rec + f.label_bytes, kCifarImageBytes);
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

bool has_cifar100(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "train.bin", ec) || fs::is_regular_file(dir / "test.bin", ec);
}

// The names in `file` (one a line) when it holds exactly `n` of them, else "0" .. "n-1".
std::vector<std::string> class_names(const fs::path& file, int64_t n) {
  std::vector<std::string> names;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  if (static_cast<int64_t>(names.size()) == n) return names;
  names.clear();
  for (int64_t i = 0; i < n; ++i) names.push_back(std::to_string(i));
  return names;
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
  read_records(path, records, kCifar10Format, raw);
  Dataset d = allocate(records);
  unpack(raw, records, 0, kCifar10Format, d);
  d.classes.assign(std::begin(kCifar10Names), std::end(kCifar10Names));
  return d;
}

Dataset load_cifar10(const std::string& dir, Split split, int64_t limit) {
  MINIDL_CHECK(limit >= 0, "CIFAR-10: the image limit must be >= 0, got ", limit);
  MINIDL_CHECK(split != Split::Val, "CIFAR-10 has no validation split of its own (data.val_fraction holds one out)");
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
    read_records((root / files[f]).string(), kCifarRecordsPerFile, kCifar10Format, raw);
    unpack(raw, std::min(kCifarRecordsPerFile, n - first), first, kCifar10Format, d);
  }
  d.classes.assign(std::begin(kCifar10Names), std::end(kCifar10Names));
  return d;
}

std::string resolve_cifar100_dir(const std::string& dir) {
  MINIDL_CHECK(!dir.empty(), "CIFAR-100: no data directory given (data.dir)");
  const fs::path root(dir);
  if (has_cifar100(root)) return root.string();
  const fs::path sub = root / "cifar-100-binary";
  if (has_cifar100(sub)) return sub.string();
  fail(str("CIFAR-100: no train.bin or test.bin in '", root.string(), "' or '", sub.string(),
           "' (the official cifar-100-binary.tar.gz unpacks to cifar-100-binary/)"));
}

Dataset load_cifar100(const std::string& dir, Split split, bool coarse, int64_t limit) {
  MINIDL_CHECK(limit >= 0, "CIFAR-100: the image limit must be >= 0, got ", limit);
  MINIDL_CHECK(split != Split::Val, "CIFAR-100 has no validation split of its own (data.val_fraction holds one out)");
  const fs::path root(resolve_cifar100_dir(dir));
  const RecordFormat f{"CIFAR-100", 2, coarse ? 0 : 1, coarse ? kCifar100Coarse : kCifar100Classes};
  std::vector<uint8_t> raw;
  const int64_t records = read_records((root / (split == Split::Train ? "train.bin" : "test.bin")).string(), 0, f, raw);
  const int64_t n = limit > 0 ? std::min(limit, records) : records;
  Dataset d = allocate(n);
  unpack(raw, n, 0, f, d);
  d.classes = class_names(root / (coarse ? "coarse_label_names.txt" : "fine_label_names.txt"), f.classes);
  return d;
}

}  // namespace minidl
