// BatchNorm2d as torch.nn.BatchNorm2d: per-channel batch statistics in training (running
// statistics updated in place), running statistics in eval. Beyond PyTorch: "weight" and "bias"
// switch each affine parameter separately (both default to "affine"), and "relu" or "gelu"
// applies that activation in the same kernels (norm_activation.h).
// "sync" (torch.nn.SyncBatchNorm): in a data-parallel run, the training statistics are those of
// every rank's batch together (sync_batch_norm), over the ranks the run gives (set_sync_group);
// on one process it is BatchNorm2d itself. BatchNorm3d (torch.nn.BatchNorm3d) is the same module,
// keys and kernels over (N, C, D, H, W).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_path.h"

namespace minidl {

// The layer type's descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& batchnorm2d_layer();
const LayerDescriptor& batchnorm3d_layer();

struct BatchNorm2dSpec {
  int64_t num_features;
  double eps, momentum;
  bool affine, weight, bias;
  norm::NormActivation activation;
  bool sync;
  bool single_read = true;  // layers/norm/norm_path.h
  static const Fields<BatchNorm2dSpec>& fields();
};

class BatchNorm2d : public Layer<BatchNorm2dSpec>, public NormLayer {
 public:
  void set_single_read(bool on) override { mutable_spec().single_read = on; }
  // weight 1, bias 0, running_mean 0, running_var 1, on the CPU, as PyTorch.
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool weight = true,
                       bool bias = true, norm::NormActivation activation = norm::NormActivation::None,
                       bool sync = false)
      : BatchNorm2d(BatchNorm2dSpec{num_features, eps, momentum, weight && bias, weight, bias, activation, sync}) {}
  explicit BatchNorm2d(const BatchNorm2dSpec& spec) : BatchNorm2d(batchnorm2d_layer(), spec, 2) {}

  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "BatchNorm2d 128", "BatchNorm2d 128 +ReLU", "BatchNorm3d 32 +GELU"
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t num_features() const { return spec().num_features; }
  double eps() const { return spec().eps; }
  double momentum() const { return spec().momentum; }
  norm::NormActivation activation() const { return spec().activation; }
  bool sync() const { return spec().sync; }
  // The ranks a "sync" layer takes its statistics over (null: this process alone).
  void set_sync_group(std::shared_ptr<const NormGroup> group) { sync_group_ = std::move(group); }

  Tensor weight;        // (C) or undefined
  Tensor bias;          // (C) or undefined
  Tensor running_mean;  // (C) buffer
  Tensor running_var;   // (C) buffer

 protected:
  // The layer of `descriptor` over inputs of 2 + spatial_dims dimensions.
  BatchNorm2d(const LayerDescriptor& descriptor, const BatchNorm2dSpec& spec, int spatial_dims);

 private:
  int spatial_dims_;
  std::shared_ptr<const NormGroup> sync_group_;
};

// BatchNorm2d's keys and module over (N, C, D, H, W).
class BatchNorm3d : public BatchNorm2d {
 public:
  explicit BatchNorm3d(const BatchNorm2dSpec& spec) : BatchNorm2d(batchnorm3d_layer(), spec, 3) {}
};

}  // namespace minidl
