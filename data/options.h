// The "data" section of a training config and what it turns into: which format and where the
// files are, how many training images to use, the per-channel normalization and the training
// augmentation (docs/data.md).
//   "data": {"format": "cifar10", "dir": "", "train_limit": 0, "test_limit": 0,
//            "val_fraction": 0.1, "val_seed": 0,
//            "mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616],
//            "augment": {"crop_padding": 4, "padding_mode": "reflect", "flip": true,
//                        "flip_mode": "random", "cutout": 8,
//                        "color_jitter": {"brightness": 0.14, "contrast": 0.13}}}
// Every key is optional; a missing "augment" means no augmentation. "mean" and "std" may be "auto":
// computed from the training images when the run starts (the default for image folders; CIFAR
// keeps its published constants). Format-specific keys:
//   "cifar100": "label": "fine" (100 classes, the default) or "coarse" (20 superclasses)
//   "image_folder": "image_size": S (required), "resize": "crop" | "pad" | "stretch",
//                   "test_dir": "", "cache_dir": "", "skip_bad": false
//   "tokens": "seq_len": T (required): dir/train.bin and dir/val.bin (llm.c's token files, what
//             `minidl tokenize` writes) cut into windows of T + 1 tokens; no normalization, no
//             augmentation, the limits count windows
//   "volumes": "size": 32, "classes": 4, "objects": 3, "noise": 0.1, "volume_seed": 0,
//              "train_volumes": 64, "test_volumes": 16: the synthetic segmentation set of
//              data/volumes.h, volumes 0 .. N - 1 for training and N .. N + M - 1 for the test;
//              no folder, no normalization, no augmentation, the limits count volumes
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/enum_names.h"
#include "core/fields.h"
#include "data/augment_kernel.h"
#include "data/image_decode.h"
#include "data/volumes.h"

namespace minidl {

// What a padded crop's border holds: the image mirrored, or a black pixel (before Normalize).
enum class PaddingMode { Reflect, Zero };
template <>
struct EnumNames<PaddingMode> {
  static constexpr EnumName<PaddingMode> values[] = {{PaddingMode::Reflect, "reflect"}, {PaddingMode::Zero, "zero"}};
};

// A new flip draw each epoch, or each image flipped every other epoch (airbench).
enum class FlipMode { Random, Alternating };
template <>
struct EnumNames<FlipMode> {
  static constexpr EnumName<FlipMode> values[] = {{FlipMode::Random, "random"}, {FlipMode::Alternating, "alternating"}};
};

enum class DataFormat { Cifar10, Cifar100, ImageFolder, Tokens, Volumes };
template <>
struct EnumNames<DataFormat> {
  static constexpr EnumName<DataFormat> values[] = {{DataFormat::Cifar10, "cifar10"},
                                                    {DataFormat::Cifar100, "cifar100"},
                                                    {DataFormat::ImageFolder, "image_folder"},
                                                    {DataFormat::Tokens, "tokens"},
                                                    {DataFormat::Volumes, "volumes"}};
};

// CIFAR-100's 100 classes or its 20 superclasses.
enum class Cifar100Label { Fine, Coarse };
template <>
struct EnumNames<Cifar100Label> {
  static constexpr EnumName<Cifar100Label> values[] = {{Cifar100Label::Fine, "fine"},
                                                       {Cifar100Label::Coarse, "coarse"}};
};

template <>
struct EnumNames<FitMode> {
  static constexpr EnumName<FitMode> values[] = {
      {FitMode::Crop, "crop"}, {FitMode::Pad, "pad"}, {FitMode::Stretch, "stretch"}};
};

struct AugmentOptions {
  int crop_padding = 0;                             // RandomCrop(32, padding=crop_padding); 0 = off
  PaddingMode padding_mode = PaddingMode::Reflect;  // reflect needs padding < H and W
  bool flip = false;                                // horizontal flip with p = 0.5
  FlipMode flip_mode = FlipMode::Random;
  int cutout = 0;  // side of the zeroed square; 0 = off
  // "random_resized_crop": {"scale": [0.08, 1], "ratio": [0.75, 1.3333]}: torchvision's
  // RandomResizedCrop to the images' own size, instead of the padded crop (for larger images).
  bool resized_crop = false;
  std::array<double, 2> crop_scale = {0.08, 1.0};
  std::array<double, 2> crop_ratio = {3.0 / 4.0, 4.0 / 3.0};
  // "color_jitter": {"brightness": 0.14, "contrast": 0.13}: each image's normalized values become
  // (x + b) * c, b ~ U(-brightness, brightness), c ~ U(1 - contrast, 1 + contrast), drawn anew
  // every epoch (the CIFAR-10 speedrun record's jitter; not torchvision's ColorJitter, which works
  // on [0, 1] pixels and blends contrast toward the image's gray mean).
  double brightness = 0;
  double contrast = 0;

  // The keys of "augment".
  static const Fields<AugmentOptions>& fields();
  // Reads the object at key path `path`; unknown keys and bad values are errors naming the key.
  static AugmentOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const { return write_fields(fields(), *this); }
  // Errors naming `path`.key for a value out of range.
  void validate(const std::string& path) const;
  // Errors naming `path`.key for a value the images' size (H, W) cannot take.
  void validate_for_size(const std::string& path, int64_t height, int64_t width) const;
};

struct Normalization {
  std::array<double, 3> mean = {0.4914, 0.4822, 0.4465};  // CIFAR-10, in [0, 1] units
  std::array<double, 3> std = {0.2470, 0.2435, 0.2616};
  // "auto": the training images' own statistics (data/holdout.h, channel_stats), filled in by the
  // Trainer before any batch is made; config.json records the numbers.
  bool auto_mean = false;
  bool auto_std = false;
};

struct DataOptions {
  DataFormat format = DataFormat::Cifar10;
  std::string dir;          // the batch files (or their cifar-*-batches-bin / cifar-100-binary folder),
                            // or an image folder's root (dir/train/<class>/*, dir/test/<class>/*)
  int64_t train_limit = 0;  // > 0: train on the first train_limit images only
  int64_t test_limit = 0;   // > 0: evaluate on the first test_limit test images only (quick checks)
  // > 0: this fraction of the training images (after train_limit) is held out as the validation
  // split, stratified by class (data/holdout.h); 0: none (an image folder's val/ may give one).
  double val_fraction = 0;
  uint64_t val_seed = 0;                      // which images are held out; independent of the run's seed
  Cifar100Label label = Cifar100Label::Fine;  // cifar100 only
  // image_folder (data/image_folder.h):
  int64_t image_size = 0;          // every image becomes S x S
  FitMode resize = FitMode::Crop;  // data/image_decode.h
  std::string test_dir;            // the test split's root; "" = dir/test (dir is then dir/train's parent)
  std::string cache_dir;           // "" = <dir>/.minidl-cache
  bool skip_bad = false;           // files that do not decode are skipped (and counted) instead of an error
  int64_t seq_len = 0;             // tokens: the tokens of a sample's input (the model's context)
  VolumeSetOptions volumes;        // volumes: the synthetic set (data/volumes.h)
  int64_t train_volumes = 64;      // volumes: the training set is volumes 0 .. train_volumes - 1
  int64_t test_volumes = 16;       // volumes: the test set is the next test_volumes
  Normalization normalize;
  AugmentOptions augment;

  // The keys of "data"; a format's own keys are refused for another format and written back only
  // for theirs, so a CIFAR-10 run's config.json reads as it always has.
  static const Fields<DataOptions>& fields();
  static DataOptions from_json(const nlohmann::json& j, const std::string& path);
  // What a sample's correct predictions count: 1 (an image), seq_len (a token window) or size^3
  // (a volume's voxels).
  int64_t outputs_per_sample() const;
  nlohmann::json to_json() const { return write_fields(fields(), *this); }
};

// The kernel parameters for one epoch (augment = nullptr: normalization only).
kernels::AugmentParams augment_params(const Normalization& normalize, const AugmentOptions* augment, uint64_t seed,
                                      int64_t epoch);

}  // namespace minidl
