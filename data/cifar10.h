// CIFAR-10 from the official binary layout (cifar-10-batches-bin): data_batch_1..5.bin and
// test_batch.bin, each 10000 records of 1 label byte followed by 3072 image bytes (the R, G and B
// planes of a 32x32 image, row-major). CIFAR-100 from its binary layout (cifar-100-binary):
// train.bin (50000 records) and test.bin (10000), each record a coarse and a fine label byte and
// the same 3072 image bytes. Images stay uint8 on the host (150 MB for the training set); the
// loader normalizes and augments per batch, on the CPU or on the GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl {

constexpr int64_t kCifarChannels = 3;
constexpr int64_t kCifarHeight = 32;
constexpr int64_t kCifarWidth = 32;
constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarHeight * kCifarWidth;  // 3072
constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;                      // 3073
constexpr int64_t kCifarRecordsPerFile = 10000;
constexpr int64_t kCifarClasses = 10;

constexpr int64_t kCifar100Classes = 100;
constexpr int64_t kCifar100Coarse = 20;

// What a data set's samples are: images with one class each, windows of a token stream, or
// volumes with one class per voxel.
enum class SampleKind { Images, Tokens, Volumes };

// Images and labels of one split, and the class names (index = label).
// A token set holds int32 (N, seq_len + 1) windows of a token stream in `images` and no labels:
// each window's tokens after the first are its targets (data/token_batch_kernel.h). A volume set
// holds float32 (N, 1, S, S, S) images and int32 (N, S, S, S) labels (data/volumes.h).
struct Dataset {
  Tensor images;  // uint8 (N, C, H, W), host (3 x 32 x 32 for CIFAR); a token set's windows; volumes
  Tensor labels;  // int32 (N), host, values 0 .. classes.size() - 1; a volume set's (N, S, S, S)
  std::vector<std::string> classes;
  bool is_tokens() const { return kind == SampleKind::Tokens; }
  bool is_volumes() const { return kind == SampleKind::Volumes; }
  int64_t size() const {
    if (kind != SampleKind::Images) return images.defined() ? images.size(0) : 0;
    return labels.defined() ? labels.numel() : 0;
  }
  int64_t num_classes() const { return static_cast<int64_t>(classes.size()); }
  // Predictions per sample: 1 per image, seq_len per window, S^3 per volume.
  int64_t outputs_per_sample() const {
    if (kind == SampleKind::Tokens) return seq_len;
    if (kind == SampleKind::Volumes) return labels.defined() ? labels.numel() / size() : 0;
    return 1;
  }
  // What it was read from, for the run log (e.g. how many bad files were skipped); may be empty.
  std::string note;
  int64_t seq_len = 0;  // a token set's
  SampleKind kind = SampleKind::Images;
};

// Val: an image folder's val/ split (data/image_folder.h); CIFAR has none (data.val_fraction holds
// one out of the training set instead, data/holdout.h).
enum class Split { Train, Val, Test };
inline const char* split_name(Split s) { return s == Split::Train ? "train" : s == Split::Val ? "val" : "test"; }

// The folder holding the batch files: `dir` itself, or its cifar-10-batches-bin subfolder (what
// the official archive unpacks to). Errors naming both places when neither has the files.
std::string resolve_cifar10_dir(const std::string& dir);

// The training set (data_batch_1..5, 50000 images) or the test set (test_batch, 10000). A limit
// > 0 keeps only the first `limit` images (quick runs read only the files they need).
Dataset load_cifar10(const std::string& dir, Split split, int64_t limit = 0);

// The CIFAR-100 training set (train.bin, 50000 images in the official archive; any whole number
// of records is read) or test set (test.bin, 10000) from `dir` or
// its cifar-100-binary subfolder, with the fine (100 classes) or coarse (20) labels. Class names
// come from fine_label_names.txt / coarse_label_names.txt beside the files when present.
std::string resolve_cifar100_dir(const std::string& dir);
Dataset load_cifar100(const std::string& dir, Split split, bool coarse, int64_t limit = 0);

// One batch file holding exactly `records` records. Errors name the file: missing, a size that is
// not `records` * 3073 bytes, or a label above 9 (with the record index and the value).
Dataset read_cifar10_batch(const std::string& path, int64_t records = kCifarRecordsPerFile);

}  // namespace minidl
