// Launchers of the loss kernels (loss_cpu.cpp, loss_cuda.cu): plain C++, no tensors and no JSON,
// so nvcc compiles only this with the kernels.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl {

namespace kernels {
// logits (rows, classes) and labels (rows) contiguous; the CPU kernels expect labels already
// checked (loss.cpp does it before any thread starts). dlogits (rows, classes) may be null when
// no backward follows. *loss receives the mean loss.
void cross_entropy_forward_cpu(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                               float label_smoothing, float* loss, float* dlogits);
void argmax_rows_cpu(const float* logits, int64_t rows, int64_t classes, int32_t* out);
int64_t count_correct_cpu(const float* logits, const int32_t* labels, int64_t rows, int64_t classes);
// The CUDA kernels check the labels themselves and flag a bad one (see above). row_loss: scratch
// of `rows` floats; *loss (device) receives the mean.
void cross_entropy_forward_cuda(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                float label_smoothing, float* row_loss, float* loss, float* dlogits);
// One block's mean of row_loss (float64 partials, fixed order) into *loss; flags bad labels.
void cross_entropy_mean_cuda(const float* row_loss, const int32_t* labels, int64_t rows, int64_t classes, float* loss);
// dx = d * g[0] over n elements, g on the device (the loss gradient never comes to the host).
void scale_by_device_scalar_cuda(const float* d, const float* g, float* dx, int64_t n);
// Logits of T (float, bf16 or fp16), compared as the float32 values they hold.
template <class T>
void argmax_rows_cuda(const T* logits, int64_t rows, int64_t classes, int32_t* out);
// *count (device) = rows whose argmax (computed into argmax_scratch, `rows` ints) equals the label.
template <class T>
void count_correct_cuda(const T* logits, const int32_t* labels, int64_t rows, int64_t classes, int32_t* argmax_scratch,
                        int32_t* count);
// Cross-entropy over a language model's (rows = B * T, classes = V) logits, the fused classifier:
// the forward reads each row once and keeps only its log-sum-exp (row_lse, `rows` floats); the
// backward writes dlogits = (softmax - q) * g / rows from the logits and row_lse in one pass, in
// the logits' type. No other buffer of the logits' size exists. q as above (label smoothing).
// CPU: float32 logits, each row in float64 (the reference); *loss the mean in row order.
void token_cross_entropy_forward_cpu(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                     float label_smoothing, float* row_lse, float* loss);
void token_cross_entropy_backward_cpu(const float* logits, const int32_t* labels, const float* row_lse, int64_t rows,
                                      int64_t classes, float label_smoothing, float g, float* dlogits);
// CUDA: logits and dlogits of T (float, bf16 or fp16), float32 arithmetic; one block per row,
// fixed reduction trees; row_loss scratch of `rows` floats; g and *loss on the device. Bad labels
// as cross_entropy_forward_cuda's.
template <class T>
void token_cross_entropy_forward_cuda(const T* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                      float label_smoothing, float* row_lse, float* row_loss, float* loss);
template <class T>
void token_cross_entropy_backward_cuda(const T* logits, const int32_t* labels, const float* row_lse, int64_t rows,
                                       int64_t classes, float label_smoothing, const float* g, T* dlogits);
// Throws the Error for the first bad label a CUDA kernel has flagged since the last call, if any.
void raise_flagged_label_error();
}  // namespace kernels

}  // namespace minidl
