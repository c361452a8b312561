#include "data/loader.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/allocator.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/token_batch_kernel.h"
#include "data/volume_batch_kernel.h"

namespace minidl {

LoaderOptions LoaderOptions::training(const DataOptions& data, int64_t batch_size, uint64_t seed) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = true;
  o.drop_last = true;
  o.seed = seed;
  o.normalize = data.normalize;
  o.augment = data.augment;
  return o;
}

LoaderOptions LoaderOptions::evaluation(const DataOptions& data, int64_t batch_size) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.normalize = data.normalize;
  return o;
}

std::vector<int32_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  MINIDL_CHECK(n >= 0 && n < (int64_t{1} << 31), "data: cannot shuffle ", n, " images");
  MINIDL_CHECK(epoch >= 0 && epoch < (int64_t{1} << 32), "data: epoch ", epoch, " out of range");
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t counter = (static_cast<uint64_t>(epoch) << 32) | static_cast<uint64_t>(i);
    const uint32_t j = uniform_below(philox(seed, kStreamShuffle, counter).v[0],
                                     static_cast<uint32_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[j]);
  }
  return order;
}

Loader::Loader(const Dataset& data, LoaderOptions options, Device device)
    : options_(std::move(options)), device_(device), size_(data.size()) {
  MINIDL_CHECK(options_.batch_size > 0, "data loader: batch_size must be > 0, got ", options_.batch_size);
  MINIDL_CHECK(size_ > 0, "data loader: the dataset is empty");
  const char* samples = data.is_tokens() ? " windows" : data.is_volumes() ? " volumes" : " images";
  MINIDL_CHECK(!options_.drop_last || size_ >= options_.batch_size, "data loader: batch_size ", options_.batch_size,
               " is larger than the ", size_, samples, ", and drop_last leaves no batch");
  if (data.is_tokens()) {
    seq_len_ = data.seq_len;
    MINIDL_CHECK(data.images.dtype() == DType::Int32 && data.images.dim() == 2 && data.images.size(1) == seq_len_ + 1,
                 "data loader: expected int32 token windows (", size_, ", ", seq_len_ + 1, "), got ",
                 data.images.str());
    images_ = data.images.to(device_);
  } else if (data.is_volumes()) {
    check_volumes(data);
    images_ = data.images.to(device_);
    labels_ = data.labels.to(device_);
  } else {
    check_images(data);
    images_ = data.images.to(device_);
    labels_ = data.labels.to(device_);
  }
  std::vector<int32_t> identity(static_cast<size_t>(size_));
  std::iota(identity.begin(), identity.end(), 0);
  order_ = Tensor::from_vector(identity, {size_}, device_);
  cursor_ = Tensor::zeros({static_cast<int64_t>(sizeof(kernels::BatchCursor))}, DType::UInt8, device_);
}

void Loader::check_volumes(const Dataset& data) {
  const Tensor& x = data.images;
  MINIDL_CHECK(x.defined() && x.dtype() == DType::Float32 && x.dim() == 5 && x.size(0) == size_ && x.is_contiguous(),
               "data loader: expected float32 contiguous (", size_, ", C, D, H, W) volumes, got ",
               x.defined() ? x.str() : std::string("none"));
  const Shape voxels(x.shape().begin() + 2, x.shape().end());
  Shape want{size_};
  want.insert(want.end(), voxels.begin(), voxels.end());
  MINIDL_CHECK(data.labels.defined() && data.labels.dtype() == DType::Int32 && data.labels.shape() == want,
               "data loader: expected int32 labels ", shape_str(want), " for the volumes ", shape_str(x.shape()),
               ", got ", data.labels.defined() ? data.labels.str() : std::string("none"));
  volume_shape_ = x.shape();
  volume_shape_[0] = 0;
}

void Loader::check_images(const Dataset& data) {
  MINIDL_CHECK(data.images.defined() && data.images.dtype() == DType::UInt8 && data.images.dim() == 4 &&
                   data.images.size(0) == size_ && data.images.size(1) == 3 && data.images.size(2) > 0 &&
                   data.images.size(3) > 0 && data.images.size(2) * data.images.size(3) < (int64_t{1} << 28),
               "data loader: expected uint8 images (", size_, ", 3, H, W), got ",
               data.images.defined() ? data.images.str() : std::string("none"));
  channels_ = static_cast<int>(data.images.size(1));
  height_ = static_cast<int>(data.images.size(2));
  width_ = static_cast<int>(data.images.size(3));
  if (options_.augment) options_.augment->validate_for_size("data.augment", height_, width_);
  MINIDL_CHECK(data.labels.dtype() == DType::Int32, "data loader: expected int32 labels, got ",
               data.labels.str());
}

int64_t Loader::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? size_ / b : (size_ + b - 1) / b;
}

void Loader::start_epoch(int64_t epoch) {
  // Token and volume sets have nothing to normalize or augment: their batch kernels read only
  // the position.
  if (seq_len_ == 0 && volume_shape_.empty())
    params_ = augment_params(options_.normalize, options_.augment ? &*options_.augment : nullptr, options_.seed,
                             epoch);
  params_.channels = channels_;
  params_.height = height_;
  params_.width = width_;
  if (options_.shuffle || reordered_) {
    // Into the same storage: a captured graph holds the address of order_.
    std::vector<int32_t> order(static_cast<size_t>(size_));
    if (options_.shuffle)
      order = epoch_permutation(options_.seed, epoch, size_);
    else
      std::iota(order.begin(), order.end(), 0);
    copy_bytes_async(order_.raw_data(), device_, order.data(), Device::cpu(), order.size() * sizeof(int32_t));
    reordered_ = false;
  }
  limit_ = size_;
  epoch_ = epoch;
  position_ = 0;
  current_batch_ = 0;
  batch_start_ = 0;
  batch_size_ = 0;
}

void Loader::start_subset(const std::vector<int32_t>& indices) {
  const int64_t n = static_cast<int64_t>(indices.size());
  MINIDL_CHECK(n <= size_, "data loader: a subset of ", n, " images of ", size_);
  for (int32_t i : indices)
    MINIDL_CHECK(i >= 0 && i < size_, "data loader: subset index ", i, " is outside the ", size_, " images");
  start_epoch(0);
  if (n > 0)
    copy_bytes_async(order_.raw_data(), device_, indices.data(), Device::cpu(), indices.size() * sizeof(int32_t));
  reordered_ = true;
  limit_ = n;
}

bool Loader::advance() {
  MINIDL_CHECK(epoch_ >= 0, "data loader: call start_epoch() before next()");
  const int64_t b = std::min(options_.batch_size, limit_ - position_);
  if (b <= 0 || (options_.drop_last && b < options_.batch_size)) return false;
  const kernels::BatchCursor cursor{params_, position_};
  copy_bytes_async(cursor_.raw_data(), device_, &cursor, Device::cpu(), sizeof(cursor));
  current_batch_ = b;
  micro_offset_ = 0;
  batch_start_ = position_;
  batch_size_ = b;
  position_ += b;
  return true;
}

void Loader::select_micro_batch(int64_t offset, int64_t size) {
  MINIDL_CHECK(batch_size_ > 0 && offset >= 0 && size > 0 && offset + size <= batch_size_, "data loader: ", size,
               " images at ", offset, " are not inside the current batch of ", batch_size_);
  micro_offset_ = offset;
  current_batch_ = size;
}

void Loader::emit(Batch& out) const {
  MINIDL_CHECK(current_batch_ > 0, "data loader: emit() needs a successful advance() first");
  if (seq_len_ > 0) return emit_tokens(out);
  if (!volume_shape_.empty()) return emit_volumes(out);
  const int64_t b = current_batch_;
  const DType dtype = options_.dtype;
  const bool channels_last = options_.format == MemoryFormat::ChannelsLast;
  out.images = Tensor::empty({b, channels_, height_, width_}, dtype, device_, options_.format);
  out.labels = Tensor::empty({b}, DType::Int32, device_);
  const auto* cursor = static_cast<const kernels::BatchCursor*>(cursor_.raw_data());
  dispatch(
      device_, "augment_batch",
      [&] {
        kernels::augment_batch_cpu(images_.data<uint8_t>(), labels_.data<int32_t>(), order_.data<int32_t>(), b, cursor,
                                   micro_offset_, out.images.raw_data(), dtype, channels_last,
                                   out.labels.data<int32_t>());
      },
      [&] {
        kernels::augment_batch_cuda(images_.data<uint8_t>(), labels_.data<int32_t>(), order_.data<int32_t>(), b, cursor,
                                    micro_offset_, out.images.raw_data(), dtype, channels_last,
                                    out.labels.data<int32_t>());
      });
}

void Loader::emit_tokens(Batch& out) const {
  const int64_t b = current_batch_, t = seq_len_;
  out.images = Tensor::empty({b, t}, DType::Int32, device_);
  out.labels = Tensor::empty({b, t}, DType::Int32, device_);
  const auto* cursor = static_cast<const kernels::BatchCursor*>(cursor_.raw_data());
  dispatch(
      device_, "token_batch",
      [&] {
        kernels::token_batch_cpu(images_.data<int32_t>(), order_.data<int32_t>(), b, t, cursor, micro_offset_,
                                 out.images.data<int32_t>(), out.labels.data<int32_t>());
      },
      [&] {
        kernels::token_batch_cuda(images_.data<int32_t>(), order_.data<int32_t>(), b, t, cursor, micro_offset_,
                                  out.images.data<int32_t>(), out.labels.data<int32_t>());
      });
}

void Loader::emit_volumes(Batch& out) const {
  const int64_t b = current_batch_;
  Shape shape = volume_shape_;
  shape[0] = b;
  const Shape label_shape = [&] {
    Shape l{b};
    l.insert(l.end(), shape.begin() + 2, shape.end());
    return l;
  }();
  // The run's channels-last format is NDHWC for a volume.
  const MemoryFormat format =
      is_channels_last_format(options_.format) ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous;
  const DType dtype = options_.dtype;
  out.images = Tensor::empty(shape, dtype, device_, format);
  out.labels = Tensor::empty(label_shape, DType::Int32, device_);
  const kernels::VolumeShape s{shape[1], shape_numel(label_shape) / b};
  const bool channels_last = format == MemoryFormat::ChannelsLast3d;
  const auto* cursor = static_cast<const kernels::BatchCursor*>(cursor_.raw_data());
  dispatch(
      device_, "volume_batch",
      [&] {
        kernels::volume_batch_cpu(images_.data<float>(), labels_.data<int32_t>(), order_.data<int32_t>(), b, s, cursor,
                                  micro_offset_, out.images.raw_data(), dtype, channels_last,
                                  out.labels.data<int32_t>());
      },
      [&] {
        kernels::volume_batch_cuda(images_.data<float>(), labels_.data<int32_t>(), order_.data<int32_t>(), b, s, cursor,
                                   micro_offset_, out.images.raw_data(), dtype, channels_last,
                                   out.labels.data<int32_t>());
      });
}

bool Loader::next(Batch& out) {
  if (!advance()) return false;
  emit(out);
  return true;
}

}  // namespace minidl
