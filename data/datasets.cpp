#include "data/datasets.h"

#include <zlib.h>

#include <algorithm>

#include "core/error.h"
#include "data/image_folder.h"
#include "data/token_file.h"
#include "data/volumes.h"

namespace minidl {

namespace {

// The windows of dir/train.bin (the training split) or dir/val.bin (the test split): window i is
// tokens i * T .. i * T + T, so consecutive windows share one token (llm.c's stride).
Dataset load_token_windows(const DataOptions& data, Split split, int64_t limit) {
  MINIDL_CHECK(!data.dir.empty(), "data.dir: a token set needs the folder of its train.bin and val.bin (`minidl ",
               "tokenize TEXT DIR` writes them)");
  const std::string name = split == Split::Train ? "train.bin" : "val.bin";
  const std::string path = data.dir + "/" + name;
  const std::vector<int32_t> tokens = read_token_file(path);
  const int64_t t = data.seq_len;
  int64_t n = token_windows(static_cast<int64_t>(tokens.size()), t);
  MINIDL_CHECK(n > 0, "data: '", path, "' has ", tokens.size(), " tokens, fewer than the ", t + 1,
               " of one window (data.seq_len + 1)");
  if (limit > 0) n = std::min(n, limit);
  Dataset d;
  d.kind = SampleKind::Tokens;
  d.seq_len = t;
  d.images = Tensor::empty({n, t + 1}, DType::Int32);
  int32_t* out = d.images.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(tokens.begin() + i * t, t + 1, out + i * (t + 1));
  d.note = str(split == Split::Train ? "training" : "validation", " tokens: ", n, " windows of ", t + 1, " from ",
               path, " (", tokens.size(), " tokens)");
  return d;
}

// The synthetic volumes of the split: the training set is volumes 0 .. train_volumes - 1, the
// test set the test_volumes after them, of the one seeded set (data/volumes.h).
Dataset make_volume_split(const DataOptions& data, Split split, int64_t limit) {
  const bool train = split == Split::Train;
  const int64_t first = train ? 0 : data.train_volumes;
  int64_t n = train ? data.train_volumes : data.test_volumes;
  if (limit > 0) n = std::min(n, limit);
  VolumeBatch v = synthetic_volumes(data.volumes, first, n);
  Dataset d;
  d.kind = SampleKind::Volumes;
  d.images = std::move(v.images);
  d.labels = std::move(v.labels);
  d.classes.push_back("background");
  for (int64_t c = 1; c < data.volumes.classes; ++c) d.classes.push_back(str("class ", c));
  const int64_t s = data.volumes.size;
  d.note = str(train ? "training" : "test", " volumes: ", n, " synthetic volumes ", first, "..", first + n - 1, " of ",
               s, "^3 voxels, ", data.volumes.classes, " classes (", data.volumes.objects, " objects each, noise ",
               data.volumes.noise, ", volume_seed ", data.volumes.seed, ")");
  return d;
}

}  // namespace

Dataset load_dataset(const DataOptions& data, Split split) {
  const int64_t limit = split == Split::Train ? data.train_limit : data.test_limit;
  Dataset d;
  switch (data.format) {
    case DataFormat::Tokens:
      return load_token_windows(data, split, limit);
    case DataFormat::Volumes:
      return make_volume_split(data, split, limit);
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
