// `minidl bench data`: how fast an image folder becomes a dataset and then batches.
//   minidl bench data --dir ROOT --image-size S [--resize crop|pad|stretch] [--repeats N]
//                     [--device D] [--batch B] [--cifar10 DIR]
// prints, for the training split: decoding + fitting + writing the cache on all cores (a cold
// cache each repeat; the best repeat), reading the cache back, the images/s of augmented
// training batches made from it on the device (and from CIFAR-10 binaries with --cifar10, the
// same images in another file format), and the sha256 of the decoded pixels of both splits (class-sorted
// order, the order scripts/bench/pil_decode.py and scripts/gpu/cifar_pixels.py hash in).
#pragma once
#include <cstdint>
#include <string>

namespace minidl {

struct BenchDataOptions {
  std::string dir;               // the image folder (train/<class>/..., test/<class>/...); required
  int64_t image_size = 0;        // every image is fitted to image_size x image_size; required
  std::string resize = "crop";   // crop, pad or stretch (data.resize)
  int64_t repeats = 3;           // cold-cache decodes, the best reported
  std::string device = "auto";   // where the training batches are made
  int64_t batch = 512;
  std::string cifar10;           // CIFAR-10 binaries to time beside the folder; empty: none
};

int bench_data(const BenchDataOptions& options);

}  // namespace minidl
