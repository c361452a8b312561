// `minidl bench data`: how fast an image folder becomes a dataset and then batches.
//   minidl bench data --dir ROOT --image-size S [--resize crop|pad|stretch] [--repeats N]
//                     [--device D] [--batch B] [--cifar10 DIR]
// prints, for the training split: decoding + fitting + writing the cache on all cores (a cold
// cache each repeat; the best repeat), reading the cache back, the images/s of augmented
// training batches made from it on the device (and from CIFAR-10 binaries with --cifar10, the
// same images in another file format), and the sha256 of the decoded pixels of both splits (class-sorted
// order, the order scripts/bench/pil_decode.py and scripts/gpu/cifar_pixels.py hash in).
#pragma once
#include <string>
#include <vector>

namespace minidl {

int bench_data_main(const std::vector<std::string>& args);

}  // namespace minidl
