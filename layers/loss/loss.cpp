// Cross-entropy (one autograd node, gradient computed in the forward) and the evaluation helpers.
#include "layers/loss/loss.h"

#include <vector>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/storage_rounding.h"
#include "layers/loss/loss_kernels.h"

namespace minidl {

namespace {

// Logits of any floating type: the float32 paths widen half ones before they come here, the GPU's
// argmax reads them as stored.
void check_inputs(const Tensor& logits, const Tensor& labels, const char* what) {
  check_floating_rank(logits, 2, str(what, " logits"));
  MINIDL_CHECK(logits.size(0) > 0 && logits.size(1) > 0, what, ": logits of shape ", shape_str(logits.shape()),
               " are empty (expected (N, K) with N, K >= 1)");
  MINIDL_CHECK(labels.defined() && labels.dtype() == DType::Int32 && labels.dim() == 1, what,
               ": labels must be a 1-d int32 tensor, got ", labels.str());
  MINIDL_CHECK(labels.size(0) == logits.size(0), what, ": ", labels.size(0), " labels for ", logits.size(0),
               " rows of logits");
  check_same_device(logits, labels, what);
}

// CPU labels are checked up front, before any thread runs (a throw cannot leave an OpenMP loop).
void check_labels_cpu(const Tensor& labels, int64_t classes, const char* what) {
  const int32_t* l = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    MINIDL_CHECK(l[i] >= 0 && l[i] < classes, what, ": labels[", i, "] = ", l[i], " is out of range for ", classes,
                 " classes");
}

// Logits (B, T, V) and labels (B, T): the fused classifier (loss_kernels.h). On the GPU the
// logits stay in their type (bf16 in a bf16 run) and only their gradient is written, in one pass
// in the backward; the forward keeps one float per row.
Tensor token_cross_entropy(const Tensor& logits_in, const Tensor& labels_in, float eps) {
  MINIDL_CHECK(labels_in.defined() && labels_in.dtype() == DType::Int32 && labels_in.dim() == 2 &&
                   labels_in.size(0) == logits_in.size(0) && labels_in.size(1) == logits_in.size(1),
               "cross_entropy: logits ", shape_str(logits_in.shape()), " take int32 labels (", logits_in.size(0), ", ",
               logits_in.size(1), "), got ", labels_in.defined() ? labels_in.str() : "an undefined tensor");
  MINIDL_CHECK(logits_in.numel() > 0, "cross_entropy: logits of shape ", shape_str(logits_in.shape()), " are empty");
  check_same_device(logits_in, labels_in, "cross_entropy");
  MINIDL_CHECK(eps >= 0.f && eps <= 1.f, "cross_entropy: label_smoothing must be in [0, 1], got ", eps);
  const Tensor logits = logits_in.contiguous(), labels = labels_in.contiguous();
  const int64_t rows = logits.size(0) * logits.size(1), classes = logits.size(2);
  const DType t = logits.dtype();
  Tensor loss = Tensor::empty({1}, DType::Float32, logits.device());
  Tensor row_lse = Tensor::empty({rows}, DType::Float32, logits.device());
  dispatch(
      logits.device(), "cross_entropy_forward",
      [&] {
        check_labels_cpu(labels, classes, "cross_entropy");
        kernels::token_cross_entropy_forward_cpu(logits.data<float>(), labels.data<int32_t>(), rows, classes, eps,
                                                 row_lse.data<float>(), loss.data<float>());
      },
      [&] {
        kernels::raise_flagged_label_error();
        Tensor row_loss = Tensor::empty({rows}, DType::Float32, logits.device());
        dispatch_dtype(t, "cross_entropy", [&](auto tag) {
          using T = decltype(tag);
          kernels::token_cross_entropy_forward_cuda(logits.data<T>(), labels.data<int32_t>(), rows, classes, eps,
                                                    row_lse.data<float>(), row_loss.data<float>(), loss.data<float>());
        });
      });
  if (autograd::needs_grad({logits})) {
    autograd::record(
        loss, "cross_entropy", {logits},
        [xs = logits.detach(), labels, row_lse, rows, classes, eps](const Tensor& g) -> std::vector<Tensor> {
          Tensor dx = Tensor::empty(xs.shape(), xs.dtype(), xs.device());
          dispatch(
              xs.device(), "cross_entropy_backward",
              [&] {
                kernels::token_cross_entropy_backward_cpu(xs.data<float>(), labels.data<int32_t>(),
                                                          row_lse.data<float>(), rows, classes, eps, g.item(),
                                                          dx.data<float>());
              },
              [&] {
                dispatch_dtype(xs.dtype(), "cross_entropy", [&](auto tag) {
                  using T = decltype(tag);
                  kernels::token_cross_entropy_backward_cuda(xs.data<T>(), labels.data<int32_t>(),
                                                             row_lse.data<float>(), rows, classes, eps, g.data<float>(),
                                                             dx.data<T>());
                });
              });
          return {dx};
        });
  }
  return loss;
}

// The loss of (rows, classes) float32 logits and their labels (checked), mean over the rows; where
// dlogits is defined, (rows, classes) float32 too, it receives (softmax - target) / rows.
Tensor rows_cross_entropy(const Tensor& logits, const Tensor& labels, float eps, const Tensor& dlogits) {
  MINIDL_CHECK(eps >= 0.f && eps <= 1.f, "cross_entropy: label_smoothing must be in [0, 1], got ", eps);
  const int64_t rows = logits.size(0), classes = logits.size(1);
  Tensor loss = Tensor::empty({1}, DType::Float32, logits.device());
  float* d = dlogits.defined() ? dlogits.data<float>() : nullptr;
  dispatch(
      logits.device(), "cross_entropy_forward",
      [&] {
        check_labels_cpu(labels, classes, "cross_entropy");
        kernels::cross_entropy_forward_cpu(logits.data<float>(), labels.data<int32_t>(), rows, classes, eps,
                                           loss.data<float>(), d);
      },
      [&] {
        kernels::raise_flagged_label_error();
        Tensor row_loss = Tensor::empty({rows}, DType::Float32, logits.device());
        kernels::cross_entropy_forward_cuda(logits.data<float>(), labels.data<int32_t>(), rows, classes, eps,
                                            row_loss.data<float>(), loss.data<float>(), d);
      });
  return loss;
}

// A channels-last float32 tensor's storage as (elements / C, C) rows: NHWC and NDHWC memory is
// one row of C values per pixel or voxel. A view without autograd (the callers record their own).
Tensor rows_of(const Tensor& channels_last) {
  auto impl = std::make_shared<TensorImpl>(*channels_last.impl());
  const int64_t c = channels_last.size(1);
  impl->shape = {channels_last.numel() / c, c};
  impl->strides = {c, 1};
  impl->requires_grad = false;
  impl->grad.reset();
  impl->grad_fn.reset();
  return Tensor(impl);
}

// Segmentation logits (N, C, *spatial) (4-d or 5-d) with int32 labels (N, *spatial): one
// prediction per pixel or voxel. The logits in float32 channels-last (the reorder recorded for
// autograd), their rows, and the labels flat in the same (sample, voxel) order.
struct VoxelRows {
  Tensor channels_last, rows, labels;
};

VoxelRows voxel_rows(const Tensor& logits, const Tensor& labels, const char* what) {
  MINIDL_CHECK(logits.dim() <= 5 && logits.size(1) > 0 && logits.numel() > 0, what, ": logits of shape ",
               shape_str(logits.shape()), " (expected (N, C, H, W) or (N, C, D, H, W) with C >= 1 and a voxel)");
  Shape want{logits.size(0)};
  want.insert(want.end(), logits.shape().begin() + 2, logits.shape().end());
  MINIDL_CHECK(labels.defined() && labels.dtype() == DType::Int32 && labels.shape() == want, what, ": logits ",
               shape_str(logits.shape()), " take int32 labels ", shape_str(want), ", got ",
               labels.defined() ? labels.str() : std::string("an undefined tensor"));
  check_same_device(logits, labels, what);
  VoxelRows v;
  v.channels_last = logits.to(DType::Float32, channels_last_for(logits.dim()));
  v.rows = rows_of(v.channels_last);
  v.labels = labels.contiguous().reshape({labels.numel()});
  return v;
}

// (B, T, V) logits as (B * T, V) rows: one prediction per token.
Tensor token_rows(const Tensor& logits) {
  return logits.contiguous().reshape({logits.size(0) * logits.size(1), logits.size(2)});
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing) {
  if (logits.defined() && logits.dim() >= 4) {
    // Per voxel: the rows of the channels-last logits, the gradient flowing back through the reorder.
    const VoxelRows v = voxel_rows(logits, labels, "cross_entropy");
    const bool grad = autograd::needs_grad({v.channels_last});
    Tensor dlogits = grad ? Tensor::empty_like(v.channels_last) : Tensor();
    Tensor loss = rows_cross_entropy(v.rows, v.labels, label_smoothing, grad ? rows_of(dlogits) : Tensor());
    if (grad) record_loss_gradient(loss, "cross_entropy", v.channels_last, dlogits);
    return loss;
  }
  if (logits.defined() && logits.dim() == 3) {
    // On the CPU the reference computes in float32 (half logits widened); on the GPU in place.
    if (holds_half(logits) && !logits.is_cuda()) return cross_entropy(as_float32(logits), labels, label_smoothing);
    return token_cross_entropy(logits, labels, label_smoothing);
  }
  // Low-precision logits are widened: the loss and its softmax are float32 (autocast's rule).
  if (holds_half(logits)) return cross_entropy(as_float32(logits), labels, label_smoothing);
  check_inputs(logits, labels, "cross_entropy");
  const bool grad = autograd::needs_grad({logits});
  Tensor dlogits = grad ? Tensor::empty_like(logits) : Tensor();
  Tensor loss = rows_cross_entropy(logits, labels, label_smoothing, dlogits);
  if (grad) record_loss_gradient(loss, "cross_entropy", logits, dlogits);
  return loss;
}

void record_loss_gradient(Tensor& loss, const char* name, const Tensor& logits, const Tensor& dlogits) {
  autograd::record(loss, name, {logits}, [dlogits](const Tensor& g) -> std::vector<Tensor> {
    Tensor dx = Tensor::empty_like(dlogits);
    dispatch(
        dlogits.device(), "loss_backward",
        [&] {
          const float s = g.item();
          const float* src = dlogits.data<float>();
          float* dst = dx.data<float>();
          for (int64_t i = 0; i < dx.numel(); ++i) dst[i] = src[i] * s;
        },
        [&] {
          kernels::scale_by_device_scalar_cuda(dlogits.data<float>(), g.data<float>(), dx.data<float>(), dx.numel());
        });
    return {dx};
  });
}

// The CPU reference compares float32 (half logits widened, exactly); the GPU reads any floating
// type as it is stored, so a bf16 run's (B, T, V) logits are never copied to float32.
Tensor argmax_rows(const Tensor& logits) {
  if (holds_half(logits) && !logits.is_cuda()) return argmax_rows(as_float32(logits));
  if (logits.defined() && logits.dim() == 3) return argmax_rows(token_rows(logits));
  check_floating_rank(logits, 2, "argmax_rows logits");
  MINIDL_CHECK(logits.size(1) > 0, "argmax_rows: logits of shape ", shape_str(logits.shape()), " have no columns");
  Tensor out = Tensor::empty({logits.size(0)}, DType::Int32, logits.device());
  if (logits.size(0) == 0) return out;
  dispatch(
      logits.device(), "argmax_rows",
      [&] { kernels::argmax_rows_cpu(logits.data<float>(), logits.size(0), logits.size(1), out.data<int32_t>()); },
      [&] {
        kernels::raise_flagged_label_error();
        dispatch_dtype(logits.dtype(), "argmax_rows", [&](auto tag) {
          using T = decltype(tag);
          kernels::argmax_rows_cuda(logits.data<T>(), logits.size(0), logits.size(1), out.data<int32_t>());
        });
      });
  return out;
}

Tensor correct_predictions(const Tensor& logits, const Tensor& labels) {
  if (logits.defined() && logits.dim() >= 4) {
    const VoxelRows v = voxel_rows(logits.detach(), labels, "count_correct");
    return correct_predictions(v.rows, v.labels);
  }
  if (holds_half(logits) && !logits.is_cuda()) return correct_predictions(as_float32(logits), labels);
  if (logits.defined() && logits.dim() == 3 && labels.defined() && labels.dim() == 2)
    return correct_predictions(token_rows(logits), labels.contiguous().reshape({labels.numel()}));
  check_inputs(logits, labels, "count_correct");
  const int64_t rows = logits.size(0), classes = logits.size(1);
  Tensor count = Tensor::empty({1}, DType::Int32, logits.device());
  dispatch(
      logits.device(), "count_correct",
      [&] {
        check_labels_cpu(labels, classes, "count_correct");
        *count.data<int32_t>() = static_cast<int32_t>(
            kernels::count_correct_cpu(logits.data<float>(), labels.data<int32_t>(), rows, classes));
      },
      [&] {
        kernels::raise_flagged_label_error();
        Tensor scratch = Tensor::empty({rows}, DType::Int32, logits.device());
        dispatch_dtype(logits.dtype(), "count_correct", [&](auto tag) {
          using T = decltype(tag);
          kernels::count_correct_cuda(logits.data<T>(), labels.data<int32_t>(), rows, classes, scratch.data<int32_t>(),
                                      count.data<int32_t>());
        });
      });
  return count;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const int64_t result = correct_predictions(logits, labels).values<int32_t>()[0];  // waits for the kernels
  // Through dispatch, so a CPU-only build has no reference to the CUDA-only function.
  dispatch(
      logits.device(), "count_correct", [] {}, [] { kernels::raise_flagged_label_error(); });
  return result;
}

}  // namespace minidl
