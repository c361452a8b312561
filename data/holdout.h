// Splitting a data set: a subset of its images by index, the validation split held out of a
// training set (data.val_fraction), and the per-channel statistics data.mean/std "auto" take.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "data/cifar10.h"

namespace minidl {

// The images and labels at `indices`, in that order (host tensors), with the classes and note.
Dataset select_images(const Dataset& d, const std::vector<int32_t>& indices);

// A training set and the validation images held out of it.
struct HeldOut {
  Dataset train, val;
};

// A fixed, class-stratified hold-out: of each class's n images, round(fraction * n) go to the
// validation set (at most n - 1, so every class keeps one training image), chosen by a shuffle
// keyed by `seed` and the class alone; both sets keep the images' original order. The split
// depends on the images' labels, `fraction` and `seed` only, so runs of different seeds validate
// on the same images. Errors (naming data.val_fraction) when no image or every image would go.
HeldOut hold_out(const Dataset& train, double fraction, uint64_t seed);

// The mean and standard deviation of each channel over every pixel of `images` (uint8 (N, C, H,
// W), C = 3), in [0, 1] units: what torchvision users compute for Normalize. The population
// standard deviation, summed in a fixed order (the same bits on every machine).
struct ChannelStats {
  std::array<double, 3> mean{}, std{};
};
ChannelStats channel_stats(const Tensor& images);

}  // namespace minidl
