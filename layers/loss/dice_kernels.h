// Launchers of the Dice loss and Dice counts (dice_cpu.cpp, dice_cuda.cu): logits (n, classes,
// spatial) float32 contiguous, labels (n, spatial) int32. Plain C++, no tensors.
#pragma once
#include <cstdint>

namespace minidl::kernels {

// The most classes the CUDA kernels keep per thread.
constexpr int64_t kMaxDiceClasses = 32;

// *loss = 1 - the mean over (sample, class) of (2 I + smooth) / (P + T + smooth), I = sum p t,
// P = sum p, T = sum t over the sample's voxels, p the softmax over the classes and t the one-hot
// label; dlogits (may be null) = d loss / d logits. The CPU expects labels already checked; on
// CUDA a label out of range makes the loss NaN. scratch (CUDA): dice_scratch_floats(...) floats.
void dice_loss_cpu(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                   float smooth, float* loss, float* dlogits);
int64_t dice_scratch_floats(int64_t n, int64_t classes, int64_t spatial);
void dice_loss_cuda(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                    float smooth, float* scratch, float* loss, float* dlogits);

// counts (classes, 3) += per class: voxels predicted and labelled c, predicted c, labelled c (the
// prediction is the first maximum of the logits; a NaN counts as the maximum). Labels out of range
// count in no class. The counts are integers: the same on every device.
void dice_counts_cpu(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                     int32_t* counts);
void dice_counts_cuda(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                      int32_t* counts);

}  // namespace minidl::kernels
