#include "data/datasets.h"

#include "core/error.h"
#include "data/image_folder.h"

namespace minidl {

Dataset load_dataset(const DataOptions& data, Split split) {
  const int64_t limit = split == Split::Train ? data.train_limit : data.test_limit;
  if (data.format == "image_folder") return load_image_folder(data, split);
  Dataset d = data.format == "cifar100" ? load_cifar100(data.dir, split, data.label == "coarse", limit)
                                        : load_cifar10(data.dir, split, limit);
  d.note = str(split == Split::Train ? "training" : "test", " images: ", d.size(), " from ", data.dir, " (",
               data.format == "cifar100" ? "CIFAR-100" : "CIFAR-10", ", ", d.num_classes(), " classes)");
  return d;
}

}  // namespace minidl
