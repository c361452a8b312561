#include "data/holdout.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "data/loader.h"

namespace minidl {

namespace {

// The class shuffles' seed: another stream of draws than the training order of the same seed.
constexpr uint64_t kHoldOutSalt = 0x76616c5f73706c74;  // "val_splt"

}  // namespace

Dataset select_images(const Dataset& d, const std::vector<int32_t>& indices) {
  const Tensor images = d.images.device().is_cuda() ? d.images.to(Device::cpu()) : d.images;
  const Tensor labels = d.labels.device().is_cuda() ? d.labels.to(Device::cpu()) : d.labels;
  const int64_t count = static_cast<int64_t>(indices.size());
  const int64_t pixels = images.numel() / std::max<int64_t>(1, d.size());
  Dataset out;
  out.images = Tensor::empty({count, images.size(1), images.size(2), images.size(3)}, DType::UInt8);
  out.labels = Tensor::empty({count}, DType::Int32);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = indices[static_cast<size_t>(k)];
    std::memcpy(out.images.data<uint8_t>() + k * pixels, images.data<uint8_t>() + i * pixels,
                static_cast<size_t>(pixels));
    out.labels.data<int32_t>()[k] = labels.data<int32_t>()[i];
  }
  out.classes = d.classes;
  out.note = d.note;
  return out;
}

HeldOut hold_out(const Dataset& train, double fraction, uint64_t seed) {
  MINIDL_CHECK(std::isfinite(fraction) && fraction > 0 && fraction < 1,
               "data.val_fraction: expected a number in (0, 1), got ", fraction);
  const std::vector<int32_t> labels =
      (train.labels.device().is_cuda() ? train.labels.to(Device::cpu()) : train.labels).values<int32_t>();
  int32_t top = -1;
  for (int32_t l : labels) top = std::max(top, l);
  std::vector<std::vector<int32_t>> by_class(static_cast<size_t>(top + 1));
  for (size_t i = 0; i < labels.size(); ++i)
    by_class[static_cast<size_t>(labels[i])].push_back(static_cast<int32_t>(i));
  std::vector<char> is_val(labels.size(), 0);
  int64_t held = 0;
  for (size_t c = 0; c < by_class.size(); ++c) {
    const std::vector<int32_t>& members = by_class[c];
    const int64_t n = static_cast<int64_t>(members.size());
    if (n == 0) continue;
    const int64_t take = std::min<int64_t>(n - 1, std::llround(fraction * static_cast<double>(n)));
    const std::vector<int32_t> order = epoch_permutation(seed ^ kHoldOutSalt, static_cast<int64_t>(c), n);
    for (int64_t k = 0; k < take; ++k) is_val[static_cast<size_t>(members[static_cast<size_t>(order[k])])] = 1;
    held += take;
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  MINIDL_CHECK(held > 0, "data.val_fraction: ", fraction, " of the ", n,
               " training images holds out none (each class keeps at least one training image); raise it or use more "
               "images");
  std::vector<int32_t> train_idx, val_idx;
  for (int64_t i = 0; i < n; ++i)
    (is_val[static_cast<size_t>(i)] ? val_idx : train_idx).push_back(static_cast<int32_t>(i));
  HeldOut out{select_images(train, train_idx), select_images(train, val_idx)};
  out.train.note = str(train.note, "; ", val_idx.size(), " of them held out for validation (data.val_fraction ",
                       fraction, ", stratified by class)");
  out.val.note = str("validation images: ", val_idx.size(), " held out of the training images");
  return out;
}

ChannelStats channel_stats(const Tensor& images) {
  MINIDL_CHECK(images.defined() && images.dtype() == DType::UInt8 && images.dim() == 4 && images.size(1) == 3 &&
                   images.numel() > 0,
               "data.mean/std \"auto\": expected uint8 (N, 3, H, W) training images, got ",
               images.defined() ? images.str() : std::string("none"));
  const Tensor host = images.device().is_cuda() ? images.to(Device::cpu()) : images;
  const int64_t n = host.size(0), plane = host.size(2) * host.size(3);
  const uint8_t* p = host.data<uint8_t>();
  // Integer sums are exact in any order; the division comes last.
  uint64_t sum[3] = {0, 0, 0}, sum_sq[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) {
      const uint8_t* q = p + (i * 3 + c) * plane;
      uint64_t s = 0, s2 = 0;
      for (int64_t k = 0; k < plane; ++k) {
        s += q[k];
        s2 += static_cast<uint64_t>(q[k]) * q[k];
      }
      sum[c] += s;
      sum_sq[c] += s2;
    }
  ChannelStats st;
  const double count = static_cast<double>(n) * static_cast<double>(plane);
  for (int c = 0; c < 3; ++c) {
    const double mean = static_cast<double>(sum[c]) / count;
    const double var = std::max(0.0, static_cast<double>(sum_sq[c]) / count - mean * mean);
    st.mean[c] = mean / 255.0;
    st.std[c] = std::sqrt(var) / 255.0;
  }
  return st;
}

}  // namespace minidl
