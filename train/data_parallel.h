// The data-parallel half of training: the ranks a run is one of, how a step's batch splits into
// micro-batches over them, and the ordered reduction of the micro-batches' gradients, buffers,
// loss and correct counts (distributed/ordered_reduce.h), queued in buckets during backward
// (train/gradient_buckets.h). A Trainer holds one; the model, loader and update stay the trainer's.
//
// Each optimizer step's batch_size images are world size * accumulate_steps micro-batches,
// micro-batch k at images k * b .. (k + 1) * b of the batch; rank r trains micro-batches
// r * accumulate_steps .. and the step's gradient is their ordered mean: the bits of one batch of
// batch_size at any world size.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"
#include "data/loader.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace minidl {

class Communicator;     // distributed/communicator.h
class GradientBuckets;  // train/gradient_buckets.h

class DataParallel {
 public:
  // bucket_mb: the gradient megabytes a bucket fills up to (0: one bucket, reduced after backward).
  DataParallel(int64_t batch_size, int64_t accumulate_steps, double bucket_mb, Device device);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Errors unless the batch splits evenly into `comm`'s world size * accumulate_steps micro-batches.
  void check_split(const Communicator& comm) const;
  // The ranks this run is one of (a world of one until set). BatchNorm2d layers of `model` with
  // "sync": true take their statistics over these ranks.
  void set_communicator(std::shared_ptr<Communicator> comm, Module& model);
  Communicator& communicator() { return *comm_; }
  // Micro-batches per optimizer step over all ranks: world size * accumulate_steps.
  int64_t micro_batches() const;
  // The global index of this rank's first micro-batch (rank * accumulate_steps).
  int64_t first_micro_batch() const;
  // The step a micro-batch's dropout draws belong to: the step itself with one micro-batch, else
  // the micro-batch's global index over the run (step * micro-batches + its index in the step):
  // the same at any world size, and not one pattern repeated over a step's micro-batches.
  int64_t dropout_step_of(int64_t step, int64_t micro_batch) const;
  // BatchNorm2d layers with "sync": true, whose statistics span the ranks (set_communicator).
  int64_t sync_norm_layers() const { return sync_norm_layers_; }

  // The ordered reduction of a step of several micro-batches, timed for a benchmark: while on,
  // each such step reduces its buckets after backward, waits for the device before and after
  // (the reduction alone, not the work queued before it) and adds the time here. Off by default:
  // the waits cost a run time.
  struct ReductionTiming {
    bool enabled = false;
    int64_t steps = 0;
    double seconds = 0;
    int64_t bytes_per_micro_batch = 0;  // one micro-batch's vector: gradients, buffers, loss, count
  };
  ReductionTiming& reduction_timing() { return reduction_timing_; }
  // Whether a step queues its gradient buckets during backward (on by default, with "bucket_mb"
  // > 0 and no synchronized BatchNorm); the benchmark turns it off to measure what it hides. The
  // bits are the same either way.
  void set_reduction_overlap(bool on) { reduction_overlap_ = on; }
  // Whether steps of several micro-batches reduce after backward though they could overlap (the
  // benchmark's): a kind of step of its own, whose device work differs.
  bool serial_reduction() const { return micro_batches() > 1 && !reduction_overlap_; }
  // Whether this run's steps can queue their buckets during backward, and if not, why
  // ("bucket_mb" 0, synchronized BatchNorm layers, or a world of one).
  bool reduction_overlapped() const;
  const char* overlap_off_reason() const;
  // Gradient buckets of this run's steps (0 before the first), and how many of them the last
  // step queued during its backward.
  int gradient_buckets() const;
  int gradient_buckets_in_backward() const;
  // Forgets what the step being run queued so far: a failed graph capture ran it on the host only.
  void restart_step();

  // What a step asks of the trainer. forward_loss(j) runs micro-batch j of this rank (the loader
  // emits its images) forward and gives its loss and correct count; backward(loss) runs backward.
  struct MicroBatch {
    Tensor loss, correct;
  };
  struct StepParts {
    Module& model;                          // whose float buffers are averaged
    const std::vector<Tensor>& parameters;  // whose gradients are reduced
    Loader& loader;
    Optimizer& optimizer;  // zeroes the gradients between micro-batches
    std::function<MicroBatch(int64_t j)> forward_loss;
    std::function<void(const Tensor& loss)> backward;
    // A graph of this step's freeze phase is captured: the gradient buckets may not change.
    bool phase_graphed;
  };
  // The device half of a step before the update: this rank's micro-batches one after another,
  // each from the step's weights and buffers, then the ordered mean of every micro-batch's
  // gradients (written into the gradients), float buffers (BatchNorm's running statistics) and
  // loss, and the sum of the correct counts. Nothing in it waits for the device or uploads
  // (unless the reduction is being timed), so a CUDA graph captures it, collectives included.
  MicroBatch step(const StepParts& parts);

 private:
  int64_t batch_size_, accumulate_steps_;
  double bucket_mb_;
  Device device_;
  std::shared_ptr<Communicator> comm_;
  int64_t sync_norm_layers_ = 0;
  std::unique_ptr<GradientBuckets> buckets_;  // made on the first step
  ReductionTiming reduction_timing_;
  bool reduction_overlap_ = true;
};

}  // namespace minidl
