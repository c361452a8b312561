// Views of a normalized image batch for test-time augmentation: the horizontal mirror and small
// translations with reflect padding (airbench's TTA: flip, and shifts by one pixel). Evaluation
// only: the ops are not recorded by autograd.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/enum_names.h"
#include "core/host_device.h"
#include "core/tensor.h"

namespace minidl {

// out[n, c, y, x] = in[n, c, y, W - 1 - x] for a float32 (N, C, H, W) batch on either device.
Tensor hflip(const Tensor& batch);

// The batch mirrored first (when `flip`), then its content moved down by dy and right by dx
// pixels (negative: up / left), the uncovered border filled by reflection (torch 'reflect'):
//   out[n, c, y, x] = m[n, c, reflect(y - dy), reflect(x - dx)], m = flip ? hflip(in) : in.
// Needs |dy| < H and |dx| < W.
Tensor flip_translate(const Tensor& batch, bool flip, int dy, int dx);

// One view of test-time augmentation: flip_translate(batch, flip, dy, dx), its logits weighted.
struct TtaView {
  bool flip;
  int dy, dx;
  float weight;
};

// The config's "eval.tta": which views of each test image are averaged.
enum class TtaMode { None, Flip, FlipTranslate, Airbench };

template <>
struct EnumNames<TtaMode> {
  static constexpr EnumName<TtaMode> values[] = {{TtaMode::None, "none"},
                                                 {TtaMode::Flip, "flip"},
                                                 {TtaMode::FlipTranslate, "flip_translate"},
                                                 {TtaMode::Airbench, "airbench"}};
};

// The config's "eval.tta_weights": the mode's own weights, or 1 / views for each view (the mean
// of the views' logits, as the CIFAR-10 speedrun record's TTA takes it).
enum class TtaWeights { Mode, Equal };

template <>
struct EnumNames<TtaWeights> {
  static constexpr EnumName<TtaWeights> values[] = {{TtaWeights::Mode, "mode"}, {TtaWeights::Equal, "equal"}};
};

// The views of a TTA mode, the plain image first:
//   none            the image
//   flip            the image and its mirror, weights 1
//   flip_translate  those and, for d = -1 and 1, the image and its mirror shifted by (d, d), weights 1
//   airbench        airbench's tta_level 2: 0.25 each for the image and its mirror, and 0.125 each
//                   for the image shifted by one pixel down-right and up-left, and the mirrors of
//                   those two (translate first, then mirror, as airbench does)
std::vector<TtaView> tta_views(TtaMode mode);
// The same views with `weights` applied: TtaWeights::Equal gives each 1 / (number of views).
std::vector<TtaView> tta_views(TtaMode mode, TtaWeights weights);

// Selective TTA: the `count` images whose plain prediction is least confident (the lowest
// largest softmax probability), as indices into the (n, classes) row-major logits, in increasing
// index order. Ties go to the lower index; a row holding a NaN or an infinity counts as the least
// confident.
std::vector<int32_t> least_confident(const std::vector<float>& logits, int64_t n, int64_t classes, int64_t count);

// The weighted sum of the views' float32 logits: views[0]'s (the plain image's) are `logits`, each
// other view's are forward(flip_translate(images, ...)) converted to float32.
Tensor tta_logits(const std::function<Tensor(const Tensor&)>& forward, const Tensor& images, const Tensor& logits,
                  const std::vector<TtaView>& views);

namespace kernels {
void flip_translate_cpu(const float* in, float* out, int64_t planes, int h, int w, bool flip,
                        int dy, int dx);
void flip_translate_cuda(const float* in, float* out, int64_t planes, int h, int w, bool flip,
                         int dy, int dx);

// Reflection of an index that fell at most n - 1 places outside [0, n).
MINIDL_HD int reflect_index(int i, int n) {
  return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
}
}  // namespace kernels

}  // namespace minidl
