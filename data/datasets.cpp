#include "data/datasets.h"

#include <zlib.h>

#include "core/error.h"
#include "data/image_folder.h"

namespace minidl {

Dataset load_dataset(const DataOptions& data, Split split) {
  const int64_t limit = split == Split::Train ? data.train_limit : data.test_limit;
  Dataset d;
  switch (data.format) {
    case DataFormat::ImageFolder:
      return load_image_folder(data, split);
    case DataFormat::Cifar100:
      d = load_cifar100(data.dir, split, data.label == Cifar100Label::Coarse, limit);
      break;
    case DataFormat::Cifar10:
      d = load_cifar10(data.dir, split, limit);
      break;
  }
  d.note = str(split == Split::Train ? "training" : "test", " images: ", d.size(), " from ", data.dir, " (",
               data.format == DataFormat::Cifar100 ? "CIFAR-100" : "CIFAR-10", ", ", d.num_classes(), " classes)");
  return d;
}

uint32_t dataset_crc32(const Dataset& d) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const Tensor* t : {&d.images, &d.labels}) {
    if (!t->defined()) continue;
    const Tensor host = t->to(Device::cpu()).contiguous();
    crc = crc32_z(crc, static_cast<const Bytef*>(host.raw_data()), host.nbytes());
  }
  for (const std::string& c : d.classes) crc = crc32_z(crc, reinterpret_cast<const Bytef*>(c.c_str()), c.size() + 1);
  return static_cast<uint32_t>(crc);
}

}  // namespace minidl
