#include "train/gradient_buckets.h"

#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor_ops.h"

namespace minidl {

GradientBuckets::GradientBuckets(Communicator& comm, std::vector<Tensor> params, int64_t tail, int64_t local,
                                 int64_t bucket_bytes, Device device)
    : comm_(comm), params_(std::move(params)), place_(params_.size()), local_(local), side_(device) {
  MINIDL_CHECK(tail >= 1 && local >= 1 && bucket_bytes >= 0, "GradientBuckets: bad sizes");
  // Reverse parameter order: backward completes the last layers' gradients first.
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t n = params_[k].numel();
    if (buckets_.empty() || (bucket_bytes > 0 && buckets_.back().width * 4 >= bucket_bytes)) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    place_[k] = {buckets_.size() - 1, b.width};
    b.params.push_back(k);
    b.width += n;
    index_[params_[k].impl()] = k;
  }
  buckets_.emplace_back();  // the tail
  buckets_.back().width = tail;
  int64_t total = 0;
  for (Bucket& b : buckets_) {
    b.offset = total;
    total += local * b.width;
    b.pending = b.params.size();
    b.buffers = std::make_unique<OrderedSumBuffers>(comm.world_size(), local, b.width, device);
  }
  rows_ = Tensor::zeros({total}, DType::Float32, device);
}

GradientBuckets::~GradientBuckets() { side_.join(); }

bool GradientBuckets::serves(const std::vector<Tensor>& params, int64_t tail) const {
  if (params.size() != params_.size() || tail != buckets_.back().width) return false;
  for (size_t k = 0; k < params.size(); ++k)
    if (params[k].impl() != params_[k].impl()) return false;
  return true;
}

int64_t GradientBuckets::bytes_per_micro_batch() const {
  int64_t width = 0;
  for (const Bucket& b : buckets_) width += b.width;
  return width * static_cast<int64_t>(sizeof(float));
}

Tensor GradientBuckets::block(const Bucket& b) const {
  return flat_slice(rows_, b.offset, local_ * b.width).reshape({local_, b.width});
}

void GradientBuckets::pack_bucket(Bucket& b, int64_t j) {
  auto* row = static_cast<float*>(rows_.raw_data()) + b.offset + j * b.width;
  for (size_t k : b.params) {
    const Tensor g = params_[k].grad();
    MINIDL_CHECK(g.defined() && g.dtype() == DType::Float32 && g.numel() == params_[k].numel(),
                 "data parallel: a parameter lost its gradient between steps: ", params_[k].str());
    copy_bytes_async(row + place_[k].second, rows_.device(), g.raw_data(), g.device(), g.nbytes());
  }
}

void GradientBuckets::launch(Bucket& b) {
  const Tensor local = block(b);
  side_.run([&] { b.sum = ordered_sum(comm_, local, *b.buffers); });
}

void GradientBuckets::pack(int64_t j) {
  for (size_t i = 0; i + 1 < buckets_.size(); ++i) pack_bucket(buckets_[i], j);
}

void GradientBuckets::gradient_complete(const TensorImpl* leaf, int64_t j) {
  auto found = index_.find(leaf);
  if (found == index_.end()) return;  // a parameter without a gradient in this run's steps
  Bucket& b = buckets_[place_[found->second].first];
  if (b.pending > 0) --b.pending;
  while (launched_ + 1 < buckets_.size() && buckets_[launched_].pending == 0) {
    pack_bucket(buckets_[launched_], j);
    launch(buckets_[launched_]);
    ++launched_;
  }
}

Tensor GradientBuckets::tail_row(int64_t j) const {
  const Bucket& t = buckets_.back();
  return flat_slice(rows_, t.offset + j * t.width, t.width);
}

void GradientBuckets::finish(int64_t j) {
  queued_in_backward_ = static_cast<int>(launched_);
  for (; launched_ + 1 < buckets_.size(); ++launched_) {
    pack_bucket(buckets_[launched_], j);
    launch(buckets_[launched_]);
  }
  launch(buckets_.back());
  side_.join();
  restart_step();
}

void GradientBuckets::restart_step() {
  launched_ = 0;
  for (Bucket& b : buckets_) b.pending = b.params.size();
}

void GradientBuckets::write_mean_gradients(float scale) {
  for (size_t i = 0; i + 1 < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    const Tensor mean = mul(b.sum, scale);
    const auto* values = static_cast<const float*>(mean.raw_data());
    for (size_t k : b.params) {
      Tensor g = params_[k].grad();
      copy_bytes_async(g.raw_data(), g.device(), values + place_[k].second, mean.device(), g.nbytes());
    }
  }
}

Tensor GradientBuckets::tail_sum() const { return buckets_.back().sum; }

}  // namespace minidl
