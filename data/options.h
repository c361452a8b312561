// The "data" section of a training config and what it turns into: which format and where the
// files are, how many training images to use, the per-channel normalization and the training
// augmentation (docs/data.md).
//   "data": {"format": "cifar10", "dir": "", "train_limit": 0, "test_limit": 0,
//            "mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616],
//            "augment": {"crop_padding": 4, "padding_mode": "reflect", "flip": true,
//                        "flip_mode": "random", "cutout": 8,
//                        "color_jitter": {"brightness": 0.14, "contrast": 0.13}}}
// Every key is optional; a missing "augment" means no augmentation. Format-specific keys:
//   "cifar100": "label": "fine" (100 classes, the default) or "coarse" (20 superclasses)
//   "image_folder": "image_size": S (required), "resize": "crop" | "pad" | "stretch",
//                   "test_dir": "", "cache_dir": "", "skip_bad": false
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/augment_kernel.h"

namespace minidl {

struct AugmentOptions {
  int crop_padding = 0;                  // RandomCrop(32, padding=crop_padding); 0 = off
  std::string padding_mode = "reflect";  // "reflect" or "zero" (a black pixel, before Normalize); reflect needs padding < H and W
  bool flip = false;                     // horizontal flip with p = 0.5
  std::string flip_mode = "random";      // "random" (new draw each epoch) or "alternating"
  int cutout = 0;                        // side of the zeroed square; 0 = off
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

  // Reads the object at key path `path`; unknown keys and bad values are errors naming the key.
  static AugmentOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const;
  // Errors naming `path`.key for a value out of range.
  void validate(const std::string& path) const;
  // Errors naming `path`.key for a value the images' size (H, W) cannot take.
  void validate_for_size(const std::string& path, int64_t height, int64_t width) const;
};

struct Normalization {
  std::array<double, 3> mean = {0.4914, 0.4822, 0.4465};  // CIFAR-10, in [0, 1] units
  std::array<double, 3> std = {0.2470, 0.2435, 0.2616};
};

struct DataOptions {
  std::string format = "cifar10";  // "cifar10", "cifar100" or "image_folder"
  std::string dir;          // the batch files (or their cifar-*-batches-bin / cifar-100-binary folder),
                            // or an image folder's root (dir/train/<class>/*, dir/test/<class>/*)
  int64_t train_limit = 0;  // > 0: train on the first train_limit images only
  int64_t test_limit = 0;   // > 0: evaluate on the first test_limit test images only (quick checks)
  std::string label = "fine";  // cifar100: "fine" or "coarse" labels
  // image_folder (data/image_folder.h):
  int64_t image_size = 0;          // every image becomes S x S
  std::string resize = "crop";     // "crop": shorter side to S, center crop; "pad": longer side to S,
                                   // centered on black; "stretch": both sides to S
  std::string test_dir;            // the test split's root; "" = dir/test (dir is then dir/train's parent)
  std::string cache_dir;           // "" = <dir>/.minidl-cache
  bool skip_bad = false;           // files that do not decode are skipped (and counted) instead of an error
  Normalization normalize;
  AugmentOptions augment;

  static DataOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const;
};

// The kernel parameters for one epoch (augment = nullptr: normalization only).
kernels::AugmentParams augment_params(const Normalization& normalize, const AugmentOptions* augment,
                                      uint64_t seed, int64_t epoch);

}  // namespace minidl
