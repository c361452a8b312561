// The device half of gradient clipping by global norm (optim/grad_clip.h), written once for the
// CPU loops and the CUDA kernels so that both sum the squares in the same order and give the same
// bits. The order is fixed, never a race of threads:
// - every gradient (in the given order) is cut into chunks of kClipChunk elements; a chunk is
//   kClipLanes lanes, lane l summing the squares of elements l, l + kClipLanes, ... in turn
//   (fmaf), then the lanes fold pairwise (lane l += lane l + w for w = kClipLanes/2, ..., 1);
// - the chunk sums (one per chunk, in order) fold the same way into the sum of squares;
// - norm = sqrt(sum), coef = max_norm / (norm + 1e-6) clamped to at most 1 (a NaN norm gives a
//   NaN coef, as PyTorch's clamp does), every gradient element multiplied by coef.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace minidl::kernels {

constexpr int kClipLanes = 256;
constexpr int kClipPerLane = 16;
constexpr int64_t kClipChunk = static_cast<int64_t>(kClipLanes) * kClipPerLane;

MINIDL_HD int64_t clip_chunks(int64_t n) { return (n + kClipChunk - 1) / kClipChunk; }

// Lane `lane`'s sum of squares over chunk `chunk` of g (n elements).
MINIDL_HD float clip_lane_sum(const float* g, int64_t n, int64_t chunk, int lane) {
  float acc = 0.f;
  const int64_t base = chunk * kClipChunk + lane;
  for (int j = 0; j < kClipPerLane; ++j) {
    const int64_t i = base + static_cast<int64_t>(j) * kClipLanes;
    if (i < n) acc = fmaf(g[i], g[i], acc);
  }
  return acc;
}

// Lane `lane`'s plain sum of the chunk sums lane, lane + kClipLanes, ...
MINIDL_HD float clip_lane_total(const float* partials, int64_t count, int lane) {
  float acc = 0.f;
  for (int64_t i = lane; i < count; i += kClipLanes) acc += partials[i];
  return acc;
}

// coef from the folded sum of squares; also the norm, for the caller to keep.
MINIDL_HD float clip_coef(float sum_squares, float max_norm, float* norm) {
  *norm = sqrtf(sum_squares);
  const float coef = max_norm / (*norm + 1e-6f);
  return coef > 1.f ? 1.f : coef;
}

// One gradient of a clip: its elements and where its chunk sums start in the partials.
struct ClipTensor {
  float* grad;
  int64_t n;
  int64_t first_chunk;
};

// partials holds one float per chunk of all of grads; state is float32 [norm, coef]. Both live
// on the gradients' device, where the whole clip runs: no host sync, so a CUDA graph holds it.
void clip_grad_norm_cpu(const std::vector<ClipTensor>& grads, float max_norm, float* partials, float* state);
void clip_grad_norm_cuda(const std::vector<ClipTensor>& grads, float max_norm, float* partials, float* state);

}  // namespace minidl::kernels
