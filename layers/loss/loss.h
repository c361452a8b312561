// Cross-entropy loss and evaluation helpers over logits (N, K) and int32 labels (N). CPU kernels
// in loss_cpu.cpp, CUDA kernels in loss_cuda.cu.
//
// cross_entropy is F.cross_entropy(logits, labels, label_smoothing=eps) with reduction "mean":
// row i's target distribution is q = (1 - eps) * onehot(label_i) + eps / K, its loss
// -sum_k q_k log softmax(x_i)_k, and the result the mean over rows, as a one-element tensor.
// Softmax, loss and gradient are fused: the forward also writes dlogits = (softmax - q) / N, which
// the backward only scales by the incoming gradient. Row losses are averaged in a fixed order (no
// atomics), so the loss has the same bits every run. Unlike PyTorch there is no ignore_index:
// every label must be in [0, K).
//
// A label out of range is an Error naming its row and value. On the CPU it is raised at once. On
// CUDA the check runs in the kernels (waiting for the GPU every step would stall the launch
// queue): that row's loss and gradient become NaN at once, so the step cannot look valid, and the
// next cross_entropy, count_correct or argmax_rows call raises the Error (count_correct waits for
// its result anyway, so it raises its own bad labels before returning).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace minidl {

//
// A language model's logits (B, T, V) with labels (B, T) take the fused classifier: the mean over
// all B * T tokens, the same formula, without the forward-time gradient: the forward keeps one
// log-sum-exp per token and the backward writes the gradient in one pass from the logits, in
// their type on the GPU (bf16 logits stay bf16; no float32 copy of their size is ever made).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing = 0.f);

// The autograd node of a loss whose gradient its forward computed (dlogits, float32 like logits):
// the backward returns dlogits times the incoming one-element gradient, which stays on the device.
void record_loss_gradient(Tensor& loss, const char* name, const Tensor& logits, const Tensor& dlogits);

// Rows whose argmax (the first maximum; a NaN counts as the maximum, as torch.argmax) equals the
// label. Waits for the result.
int64_t count_correct(const Tensor& logits, const Tensor& labels);
// The same count as an int32 tensor of one element on the logits' device, without waiting (a
// training step keeps it on the device; a CUDA graph can capture it). (B, T, V) logits with (B, T)
// labels count tokens.
Tensor correct_predictions(const Tensor& logits, const Tensor& labels);

// int32 (N): the argmax of each row, as above; (B, T, V) logits give B * T, one per token.
Tensor argmax_rows(const Tensor& logits);

}  // namespace minidl
