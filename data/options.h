// The "data" section of a training config and what it turns into: where the files are, how many
// training images to use, the per-channel normalization and the training augmentation.
//   "data": {"dir": "", "train_limit": 0,
//            "mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616],
//            "augment": {"crop_padding": 4, "padding_mode": "reflect", "flip": true,
//                        "flip_mode": "random", "cutout": 8}}
// Every key is optional; a missing "augment" means no augmentation.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/augment_kernel.h"

namespace minidl {

struct AugmentOptions {
  int crop_padding = 0;                  // RandomCrop(32, padding=crop_padding); 0 = off
  std::string padding_mode = "reflect";  // "reflect" or "zero" (a black pixel, before Normalize)
  bool flip = false;                     // horizontal flip with p = 0.5
  std::string flip_mode = "random";      // "random" (new draw each epoch) or "alternating"
  int cutout = 0;                        // side of the zeroed square; 0 = off

  // Reads the object at key path `path`; unknown keys and bad values are errors naming the key.
  static AugmentOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const;
  // Errors naming `path`.key for a value out of range.
  void validate(const std::string& path) const;
};

struct Normalization {
  std::array<double, 3> mean = {0.4914, 0.4822, 0.4465};  // CIFAR-10, in [0, 1] units
  std::array<double, 3> std = {0.2470, 0.2435, 0.2616};
};

struct DataOptions {
  std::string dir;          // holds the batch files or their cifar-10-batches-bin folder
  int64_t train_limit = 0;  // > 0: train on the first train_limit images only
  Normalization normalize;
  AugmentOptions augment;

  static DataOptions from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const;
};

// The kernel parameters for one epoch (augment = nullptr: normalization only).
kernels::AugmentParams augment_params(const Normalization& normalize, const AugmentOptions* augment,
                                      uint64_t seed, int64_t epoch);

}  // namespace minidl
