// The vectors a data-parallel step reduces (distributed/ordered_reduce.h), cut into buckets so that the
// reduction starts while backward still runs, as PyTorch's DDP does. A micro-batch's vector is
// [gradients | tail], the tail being its float buffers, loss and correct count. The gradients are
// cut, in reverse parameter order (the order backward completes them), into buckets of about
// `bucket_bytes`; during the last micro-batch's backward, a bucket whose gradients are all
// complete (autograd's leaf hook) is packed and its ordered reduction queued on a side stream
// (core/side_stream.h), in bucket order, so every rank queues the same collectives in the same
// order. The tail follows after backward, on the same stream, then the main stream joins it.
//
// The bits do not depend on the buckets: every element is still summed over the micro-batches
// in micro-batch order by the same adds, only the elements are reduced in other groups.
//
// On the CPU the side stream is the host itself: a bucket's reduction runs inside backward, so
// nothing is hidden there. All buffers are allocated here, once: the side stream's work may not
// allocate.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/side_stream.h"
#include "core/tensor.h"
#include "distributed/communicator.h"
#include "distributed/ordered_reduce.h"

namespace minidl {

class GradientBuckets {
 public:
  // params: the parameters whose gradients the step reduces (dense float32 gradients), in the
  // model's order; tail: values after the gradients; local: micro-batches this rank trains per
  // step; bucket_bytes: the gradient bytes a bucket fills up to (0: one bucket, reduced after
  // backward).
  GradientBuckets(Communicator& comm, std::vector<Tensor> params, int64_t tail, int64_t local, int64_t bucket_bytes,
                  Device device);
  // The main stream waits for the side stream first: the buffers go back to the allocator then.
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Whether these are the parameters (the gradients a step has) and the tail the buckets were made for.
  bool serves(const std::vector<Tensor>& params, int64_t tail) const;
  int buckets() const { return static_cast<int>(buckets_.size()); }
  // Of the last step's gradient buckets, how many were queued during backward (before finish()).
  int queued_in_backward() const { return queued_in_backward_; }
  int64_t bytes_per_micro_batch() const;

  // Copies micro-batch j's gradients into its rows, every bucket (micro-batches before the last).
  void pack(int64_t j);
  // During the last micro-batch's (j's) backward: `leaf`'s gradient is complete. Packs and queues
  // every bucket now complete whose predecessors are queued.
  void gradient_complete(const TensorImpl* leaf, int64_t j);
  // Micro-batch j's tail, to be filled by the caller (float32, `tail` values).
  Tensor tail_row(int64_t j) const;
  // After the last backward (and the tail's rows): packs and queues what is left, the tail last,
  // and makes the main stream wait for all of it.
  void finish(int64_t j);

  // Forgets what this step queued so far (a failed graph capture queued none of it on the device):
  // the next step starts with no bucket queued.
  void restart_step();

  // After finish(): every gradient becomes its mean over the step's micro-batches (the ordered
  // sum times `scale`, 1 / micro-batches), and the tail's ordered sum (valid until the next step).
  void write_mean_gradients(float scale);
  Tensor tail_sum() const;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_, in the order of their columns
    int64_t offset = 0;          // of its (local, width) block in rows_
    int64_t width = 0;
    size_t pending = 0;          // gradients not yet complete in this step
    std::unique_ptr<OrderedSumBuffers> buffers;
    Tensor sum;                  // the result, a view of buffers->gathered
  };
  Tensor block(const Bucket& b) const;
  void pack_bucket(Bucket& b, int64_t j);
  void launch(Bucket& b);

  Communicator& comm_;
  std::vector<Tensor> params_;
  std::vector<std::pair<size_t, int64_t>> place_;  // per param: bucket, column in the bucket
  std::unordered_map<const TensorImpl*, size_t> index_;
  std::vector<Bucket> buckets_;  // the last one is the tail
  int64_t local_;
  size_t launched_ = 0;          // buckets queued this step
  int queued_in_backward_ = 0;
  Tensor rows_;
  SideStream side_;
};

}  // namespace minidl
