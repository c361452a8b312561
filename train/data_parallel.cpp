#include "train/data_parallel.h"

#include <chrono>
#include <optional>
#include <utility>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor_ops.h"
#include "distributed/communicator.h"
#include "layers/norm/batchnorm2d.h"
#include "train/gradient_buckets.h"

namespace minidl {

namespace {

// Copies a dense float32 tensor's values into a flat float32 buffer at `offset` (or back): the
// raw order, contiguous or channels-last, is the same on every rank.
void pack(const Tensor& flat, int64_t offset, const Tensor& t) {
  copy_bytes_async(static_cast<float*>(flat.raw_data()) + offset, flat.device(), t.raw_data(), t.device(), t.nbytes());
}
void unpack(const Tensor& t, const Tensor& flat, int64_t offset) {
  copy_bytes_async(t.raw_data(), t.device(), static_cast<const float*>(flat.raw_data()) + offset, flat.device(),
                   t.nbytes());
}

bool dense_float(const Tensor& t) {
  return t.defined() && t.dtype() == DType::Float32 && (t.is_contiguous() || t.is_channels_last());
}

}  // namespace

DataParallel::DataParallel(int64_t batch_size, int64_t accumulate_steps, double bucket_mb, Device device)
    : batch_size_(batch_size),
      accumulate_steps_(accumulate_steps),
      bucket_mb_(bucket_mb),
      device_(device),
      comm_(make_single_process_communicator()) {}

DataParallel::~DataParallel() = default;

void DataParallel::check_split(const Communicator& comm) const {
  const int64_t micro = comm.world_size() * accumulate_steps_;
  MINIDL_CHECK(batch_size_ % micro == 0, "batch_size ", batch_size_, " does not split into ", comm.world_size(),
               " ranks x accumulate_steps ", accumulate_steps_, " = ", micro, " equal micro-batches");
}

void DataParallel::set_communicator(std::shared_ptr<Communicator> comm, Module& model) {
  MINIDL_CHECK(comm, "Trainer: no communicator");
  check_split(*comm);
  buckets_.reset();  // they hold the communicator (and wait for their side stream)
  comm_ = std::move(comm);
  // Synchronized BatchNorm layers take their statistics over this run's ranks; the group holds
  // the communicator weakly, as the run owns it.
  sync_norm_layers_ = 0;
  auto group = std::make_shared<NormGroup>();
  group->world_size = comm_->world_size();
  group->all_gather = [weak = std::weak_ptr<Communicator>(comm_)](const Tensor& in, Tensor& out) {
    const std::shared_ptr<Communicator> c = weak.lock();
    MINIDL_CHECK(c, "BatchNorm2d sync: the run's communicator has ended");
    c->all_gather(in, out);
  };
  for (auto& [name, m] : model.named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m); bn && bn->sync()) {
      bn->set_sync_group(group);
      ++sync_norm_layers_;
    }
}

int64_t DataParallel::micro_batches() const { return comm_->world_size() * accumulate_steps_; }
int64_t DataParallel::first_micro_batch() const { return comm_->rank() * accumulate_steps_; }

int64_t DataParallel::dropout_step_of(int64_t step, int64_t micro_batch) const {
  return micro_batches() > 1 ? step * micro_batches() + micro_batch : step;
}

// A world of one has no transfer for backward to hide, and queueing its reduction (copies and adds
// that compete with backward for the GPU) during backward measured slower (docs/perf/data_parallel.md).
bool DataParallel::reduction_overlapped() const {
  return bucket_mb_ > 0 && sync_norm_layers_ == 0 && comm_->world_size() > 1;
}

const char* DataParallel::overlap_off_reason() const {
  if (bucket_mb_ <= 0) return "\"bucket_mb\": 0";
  if (sync_norm_layers_ > 0) return "synchronized BatchNorm layers run their own collectives in backward";
  return "a world of one has no transfer to hide";
}

int DataParallel::gradient_buckets() const { return buckets_ ? buckets_->buckets() - 1 : 0; }
int DataParallel::gradient_buckets_in_backward() const { return buckets_ ? buckets_->queued_in_backward() : 0; }

void DataParallel::restart_step() {
  if (buckets_) buckets_->restart_step();
}

DataParallel::MicroBatch DataParallel::step(const StepParts& parts) {
  const int64_t local = accumulate_steps_;
  const int64_t total = micro_batches();
  const int64_t micro = batch_size_ / total;
  const int64_t first = first_micro_batch();
  std::vector<Tensor> buffers, averaged;
  int64_t tail = 2;  // [float buffers | loss | correct count]
  for (auto& [name, t] : parts.model.named_buffers()) {
    buffers.push_back(t);
    MINIDL_CHECK(t.dtype() != DType::Float32 || dense_float(t), "data parallel: buffer ", name, " is not dense");
    if (t.dtype() == DType::Float32) {
      averaged.push_back(t);
      tail += t.numel();
    }
  }
  // Every micro-batch's forward starts from the step's buffers, as every rank's does.
  std::vector<Tensor> start;
  if (local > 1)
    for (const Tensor& b : buffers) start.push_back(b.clone());
  ReductionTiming& timing = reduction_timing_;
  // The buckets are queued during the last backward once they are known (from the second step).
  // Not with synchronized BatchNorm layers, whose own collectives run in that backward on the
  // main stream: no two collectives of the communicator run at once, on two streams.
  const bool overlap = buckets_ && reduction_overlapped() && !timing.enabled && reduction_overlap_;
  for (int64_t j = 0; j < local; ++j) {
    if (j > 0)
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(start[i]);
    parts.loader.select_micro_batch((first + j) * micro, micro);
    const MicroBatch out = parts.forward_loss(j);
    // The count travels as a float32 in the tail: exact below 2^24 images (or voxels) per step.
    const Tensor micro_correct = out.correct.to(DType::Float32);
    const bool last = j == local - 1;
    {
      std::optional<autograd::LeafGradHookScope> hook;
      if (last && overlap) hook.emplace([this, j](const TensorImpl* leaf) { buckets_->gradient_complete(leaf, j); });
      parts.backward(out.loss);
    }
    if (j == 0) {
      // The gradients this step has (a frozen parameter has none), the same on every rank.
      std::vector<Tensor> with_grads;
      for (const Tensor& p : parts.parameters) {
        const Tensor g = p.grad();
        if (!g.defined()) continue;
        MINIDL_CHECK(dense_float(g), "data parallel: a gradient is not dense float32: ", g.str());
        with_grads.push_back(p);
      }
      if (!buckets_ || !buckets_->serves(with_grads, tail)) {
        // A freeze phase began: frozen parameters lost their gradients. Buckets queued during this
        // backward for the old set are dropped (every rank drops the same), and this step reduces
        // everything after backward with new buckets. The step is eager then (a graph's first
        // steps are); graphs captured with the old buckets belong to earlier phases, which never
        // replay again (the trainer drops them).
        MINIDL_CHECK(!parts.phase_graphed,
                     "data parallel: the gradient buckets change under a captured graph of this phase");
        buckets_.reset();
        buckets_ = std::make_unique<GradientBuckets>(*comm_, std::move(with_grads), tail, local,
                                                     static_cast<int64_t>(bucket_mb_ * (1 << 20)), device_);
      }
    }
    if (!last) buckets_->pack(j);
    const Tensor row = buckets_->tail_row(j);
    int64_t at = 0;
    for (const Tensor& b : averaged) {
      pack(row, at, b);
      at += b.numel();
    }
    pack(row, at, out.loss.detach().to(DType::Float32));
    pack(row, at + 1, micro_correct);
    // The last micro-batch's gradients are packed by their buckets (finish() below), then zeroed.
    if (!last) parts.optimizer.zero_grad();
  }
  if (timing.enabled) synchronize(device_);
  const auto reduce_start = std::chrono::steady_clock::now();
  buckets_->finish(local - 1);
  if (timing.enabled) {
    synchronize(device_);
    timing.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_start).count();
    timing.steps += 1;
    timing.bytes_per_micro_batch = buckets_->bytes_per_micro_batch();
  }
  // The mean over the micro-batches, as one batch of batch_size has it.
  const float scale = 1.0f / static_cast<float>(total);
  buckets_->write_mean_gradients(scale);
  const Tensor sum = buckets_->tail_sum();
  const Tensor mean = mul(flat_slice(sum, 0, tail - 1), scale);
  int64_t at = 0;
  for (Tensor& b : averaged) {
    unpack(b, mean, at);
    at += b.numel();
  }
  MicroBatch results;
  results.loss = flat_slice(mean, at, 1).clone();
  results.correct = flat_slice(sum, tail - 1, 1).to(DType::Int32);
  return results;
}

}  // namespace minidl
