// The dataset a config's "data" section names, whatever its format: CIFAR-10 or CIFAR-100
// binaries (data/cifar10.h), an image folder (data/image_folder.h) or a token set's windows.
#pragma once
#include "data/cifar10.h"
#include "data/options.h"

namespace minidl {

// The training split (data.train_limit applied) or the test split (a token set's val.bin), with
// its class names and a note for the run log saying where it came from.
Dataset load_dataset(const DataOptions& data, Split split);

// zlib's CRC-32 of a data set as it trains: its images' and labels' bytes and its class names. Two
// copies of the same data give the same value wherever they were read from; one image, label or
// class more, less or changed gives another (ranks that loaded different data, a resume after the
// training folder changed).
uint32_t dataset_crc32(const Dataset& d);

}  // namespace minidl
