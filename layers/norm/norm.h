// The normalization ops, with PyTorch's semantics and argument order (torch.nn.functional):
// each is one autograd node whose backward runs the same machinery (norm_kernels.h) on the
// tensors' device. `activation` applies ReLU (NaN kept, as torch.relu), GELU (exact form), SiLU,
// Hardswish or a sigmoid (layers/activation/activation_math.h) to the output in the same kernels;
// backward recomputes its input from x and the saved statistics. `single_read`: whether the GPU
// passes may pick the single-read kernels, or run the three-launch ones only (norm_path.h).
// Gradients flow to x and to weight/bias where those are defined (undefined = that affine part
// is off); running statistics are buffers, updated in place, never differentiated.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"
#include "layers/norm/norm_math.h"

namespace minidl {

// x (N, C, H, W) or (N, C, D, H, W). Training: normalizes with the batch statistics over (N, [D,] H, W) and, where
// running_mean/running_var are defined, updates them in place (momentum, unbiased variance).
// Eval: normalizes with running_mean/running_var, which must be defined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5,
                  norm::NormActivation activation = norm::NormActivation::None, bool single_read = true);

// The ranks a synchronized batch_norm takes its statistics over. all_gather(in, out) is a
// collective that every rank calls in the same order: out (world_size times in's elements,
// float32 on in's device) receives every rank's `in` in rank order, bit for bit.
struct NormGroup {
  int world_size = 1;
  std::function<void(const Tensor& in, Tensor& out)> all_gather;
};

// batch_norm in training with the batch statistics of every rank's x together, as
// torch.nn.SyncBatchNorm: each rank's per-channel shifted sums are gathered and merged in rank
// order (Chan's formula, float64), and backward gathers the sums through the statistics the same
// way. The bits depend on the world size and on nothing else. dweight and dbias are this rank's
// share (the gradient reduction adds the ranks'). A group of one rank is batch_norm itself.
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, std::shared_ptr<const NormGroup> group, double momentum = 0.1,
                       double eps = 1e-5, norm::NormActivation activation = norm::NormActivation::None,
                       bool single_read = true);

// x (N, C, *): statistics per sample over each of num_groups runs of C/num_groups channels;
// weight, bias (C).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                  norm::NormActivation activation = norm::NormActivation::None, bool single_read = true);

// x (..., normalized_shape): statistics over the trailing normalized_shape dims of each leading
// index; weight, bias of shape normalized_shape (one entry per normalized element).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5, norm::NormActivation activation = norm::NormActivation::None,
                  bool single_read = true);

// x (N, C, H, W): statistics over the C channels of each pixel, weight and bias (C): ConvNeXt's
// LayerNorm over channels (timm's LayerNorm2d). Channels-last x is [N*H*W][C], rows of C, which the
// LayerNorm kernels read in place; a contiguous x is reordered to channels-last and back. The
// output has x's dtype (the statistics are float32 whatever it is: the bits of the float32 op and
// one rounding, without autocast's float32 output).
Tensor layer_norm_2d(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-6,
                     norm::NormActivation activation = norm::NormActivation::None, bool single_read = true);

// layer_norm(x, ...).to(out) without autocast's widening of x: a float32 x may give a half output
// (the input of a half GEMM: a pre-norm transformer's LayerNorm under autocast), rounded once from
// the float32 result, in the same kernel where the GPU's Warp path runs the pass; the gradient
// comes back in `out` and reaches x in float32. The bits are those of the float32 op and a cast.
Tensor layer_norm_to(const Tensor& x, DType out, const Shape& normalized_shape, const Tensor& weight,
                     const Tensor& bias, double eps = 1e-5,
                     norm::NormActivation activation = norm::NormActivation::None, bool single_read = true);

}  // namespace minidl
