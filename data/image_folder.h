// Datasets from a folder of labelled images, the layout of torchvision's ImageFolder:
//
//   ROOT/train/<class>/**/*.{jpg,jpeg,png}    the training split
//   ROOT/test/<class>/**/*.{jpg,jpeg,png}     the test split (ROOT/val when there is no test/)
//   ROOT/val/<class>/**/*.{jpg,jpeg,png}      beside train/ and test/: the validation split, evaluated
//                                             every epoch (the test split then once, at the end)
//
// or, with data.test_dir set (two roots, as torchvision users pass them), ROOT itself is the
// training root and test_dir the test root. Classes are the training root's sub-folder names in
// sorted (byte) order, label = index (torchvision's rule; folders starting with '.' are skipped);
// the test root's class folders must be among them and take their indices. Files are taken in
// sorted path order within each class, recursively; other extensions are ignored (counted in the
// note). Every image is decoded (data/image_decode.h: JPEG and PNG, gray -> RGB, alpha dropped),
// fitted to S x S (crop, pad or stretch) in parallel on all cores, and the split is cached as
// one uint8 file in cache_dir (default ROOT/.minidl-cache), keyed by the image size, the fit, the
// class list and every file's path, size and modification time: the next run reads the cache
// (no decoding), and a folder that changed is decoded again. The cache is written atomically.
// A file that does not decode is an error naming it, or with skip_bad is left out and counted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/cifar10.h"
#include "data/options.h"

namespace minidl {

struct ImageFolderStats {
  int64_t images = 0;     // in the returned dataset
  int64_t skipped = 0;    // files that did not decode (skip_bad)
  int64_t ignored = 0;    // files with other extensions
  bool from_cache = false;
  std::string cache_path;  // "" when no cache could be written
  double seconds = 0;
};

// The training or test split of the image folder `data` names (data.format "image_folder"), its
// images in a fixed pseudo-random order (the same on every machine, as the CIFAR binaries'
// records), or with class_sorted in the listing's order (class, then path). data.train_limit
// keeps the first images of that order.
Dataset load_image_folder(const DataOptions& data, Split split, ImageFolderStats* stats = nullptr,
                          bool class_sorted = false);

// Whether the folder has a validation split of its own: ROOT/val beside ROOT/train and ROOT/test
// (without test/, val/ is the test split; with data.test_dir there is none).
bool image_folder_has_val(const DataOptions& data);

// The class names: the sorted sub-folder names of the training root.
std::vector<std::string> image_folder_classes(const DataOptions& data);

}  // namespace minidl
