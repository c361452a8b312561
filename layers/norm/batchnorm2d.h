// BatchNorm2d as torch.nn.BatchNorm2d: per-channel batch statistics in training (running
// statistics updated in place), running statistics in eval. Beyond PyTorch: "weight" and "bias"
// switch each affine parameter separately (both default to "affine"), and "relu" or "gelu"
// applies that activation in the same kernels (norm_activation.h).
// "sync" (torch.nn.SyncBatchNorm): in a data-parallel run, the training statistics are those of
// every rank's batch together (sync_batch_norm), over the ranks the run gives (set_sync_group);
// on one process it is BatchNorm2d itself. BatchNorm3d (torch.nn.BatchNorm3d) is the same module
// over (N, C, D, H, W): spatial_dims 3.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "layers/module.h"
#include "layers/norm/norm.h"

namespace minidl {

class BatchNorm2d : public Module {
 public:
  // weight 1, bias 0, running_mean 0, running_var 1, on the CPU, as PyTorch.
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool weight = true,
                       bool bias = true, norm::NormActivation activation = norm::NormActivation::None,
                       bool sync = false, int spatial_dims = 2);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return spatial_dims_ == 3 ? "BatchNorm3d" : "BatchNorm2d"; }
  std::string describe() const override;  // "BatchNorm2d 128", "BatchNorm2d 128 +ReLU", "BatchNorm3d 32 +GELU"
  nlohmann::json to_json() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  double momentum() const { return momentum_; }
  norm::NormActivation activation() const { return activation_; }
  bool sync() const { return sync_; }
  // The ranks a "sync" layer takes its statistics over (null: this process alone).
  void set_sync_group(std::shared_ptr<const NormGroup> group) { sync_group_ = std::move(group); }

  Tensor weight;        // (C) or undefined
  Tensor bias;          // (C) or undefined
  Tensor running_mean;  // (C) buffer
  Tensor running_var;   // (C) buffer

 private:
  int64_t num_features_;
  double eps_, momentum_;
  norm::NormActivation activation_;
  bool sync_;
  int spatial_dims_;
  std::shared_ptr<const NormGroup> sync_group_;
};

// The layer type' descriptor (layers/layer_descriptor.h), listed in layers/registry.cpp.
struct LayerDescriptor;
const LayerDescriptor& batchnorm2d_layer();
const LayerDescriptor& batchnorm3d_layer();

}  // namespace minidl
