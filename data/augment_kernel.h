// The per-image augmentation shared verbatim by the CPU loop (data/augment.cpp) and the CUDA
// kernel (data/augment_cuda.cu): the random draws and the value of each output pixel are these
// inline functions on both sides, so a GPU batch equals the CPU batch bit for bit. Everything
// random is an integer drawn from the counter RNG; the only float op is one fmaf per pixel.
//
// Images are uint8 (C, H, W) planes of any size (CIFAR: 3 x 32 x 32); output pixel (c, y, x) of
// an image, in the order torchvision applies
// RandomCrop((H, W), padding=p, padding_mode) -> RandomHorizontalFlip -> ToTensor -> Normalize,
// followed by cutout:
//   xs = flip ? W - 1 - x : x;  (sy, sx) = (y + dy - p, xs + dx - p), with dy, dx in [0, 2p]
//   outside the image: reflect (torch 'reflect', edge not repeated) or a zero (black) pixel
//   value = fmaf(pixel, scale[c], shift[c]) = (pixel / 255 - mean) / std, rounded once
//   color jitter (on the normalized value, as the CIFAR-10 speedrun record does): value =
//   (value + b) * c, with b ~ U(-brightness, brightness) and c ~ U(1 - contrast, 1 + contrast)
//   drawn per image and epoch
//   cutout: a size x size square at a random center (cy, cx), rows cy - size/2 .. +size,
//   clipped at the borders, set to 0 after normalization (the dataset mean; as in the DAWNBench
//   ResNet-9 code, which cuts out of the normalized image), after the jitter.
// With random-resized-crop (instead of the padded crop): torchvision's RandomResizedCrop((H, W),
// scale, ratio) box, read with bilinear interpolation (align_corners=False; the box is never
// larger than the image, so it only magnifies and needs no antialiasing), then the flip and
// cutout as above. The interpolated value stays a float (torchvision's tensor path), not rounded
// to uint8. Every float op that could round differently on the two sides is an explicit fmaf, a
// correctly rounded +, -, *, / or sqrt, or exp_small below: no libm call decides a bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/philox.h"

namespace minidl::kernels {

enum FlipMode : int {
  kFlipNone = 0,
  kFlipRandom = 1,       // each image flipped with p = 0.5, drawn anew every epoch
  kFlipAlternating = 2,  // epoch 0 draws as kFlipRandom; odd epochs flip exactly the others
};

struct AugmentParams {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int crop_padding = 0;  // 0: no crop
  int reflect = 1;       // padding mode: 1 reflect, 0 zero
  int flip_mode = kFlipNone;
  int cutout = 0;        // side of the square, 0: none
  float scale[3] = {1.f, 1.f, 1.f};  // 1 / (255 std), rounded once on the host
  float shift[3] = {0.f, 0.f, 0.f};  // -mean / std, rounded once on the host
  int channels = 3, height = 32, width = 32;  // the images' shape (C <= 3: one scale per channel)
  int resized_crop = 0;                        // 1: random-resized-crop instead of the padded crop
  float crop_scale[2] = {0.08f, 1.f};          // box area as a fraction of the image's
  float crop_log_ratio[2] = {-0.287682f, 0.287682f};  // log(width / height) of the box
  float brightness = 0.f, contrast = 0.f;             // color jitter's half-ranges (0, 0: none)
};

// Plain (no member initializers), so the CUDA kernel can hold one in shared memory.
struct ImageDraw {
  int dy, dx;  // crop offset into the padded image, 0..2p
  int flip;
  int cy, cx;  // cutout center
  int box_y, box_x, box_h, box_w;  // random-resized-crop box
  float shift, gain;               // color jitter: value = (value + shift) * gain
};

// exp(x) for |x| < 8 from +, * and fmaf only (x / 16 exactly, a degree-9 Taylor polynomial,
// squared four times): the same bits on the CPU and the GPU, within a few ulp of exp.
MINIDL_HD float exp_small(float x) {
  const float y = x * 0.0625f;
  float t = 1.f / 362880.f;
  const float inverse_factorials[9] = {1.f / 40320.f, 1.f / 5040.f, 1.f / 720.f, 1.f / 120.f, 1.f / 24.f,
                                       1.f / 6.f, 0.5f, 1.f, 1.f};
  for (float c : inverse_factorials) t = fmaf(t, y, c);
  for (int k = 0; k < 4; ++k) t = t * t;
  return t;
}

// torchvision's RandomResizedCrop.get_params with counter-based draws: up to 10 attempts, attempt
// a taking the words of philox(seed, kStreamResizedCrop | a << 32, epoch << 32 | index) (area
// fraction, log ratio, top, left); then its fallback, the whole image clamped to the ratio range.
MINIDL_HD void draw_resized_crop(const AugmentParams& p, int64_t index, ImageDraw& d) {
  const int h_img = p.height, w_img = p.width;
  const float area = static_cast<float>(h_img) * static_cast<float>(w_img);
  const uint64_t counter = (static_cast<uint64_t>(p.epoch) << 32) | static_cast<uint64_t>(index);
  for (uint64_t attempt = 0; attempt < 10; ++attempt) {
    const Philox4 w = philox(p.seed, kStreamResizedCrop | (attempt << 32), counter);
    const float target = area * fmaf(uniform01(w.v[0]), p.crop_scale[1] - p.crop_scale[0], p.crop_scale[0]);
    const float ratio =
        exp_small(fmaf(uniform01(w.v[1]), p.crop_log_ratio[1] - p.crop_log_ratio[0], p.crop_log_ratio[0]));
    const int bw = static_cast<int>(rintf(sqrtf(target * ratio)));
    const int bh = static_cast<int>(rintf(sqrtf(target / ratio)));
    if (bw > 0 && bw <= w_img && bh > 0 && bh <= h_img) {
      d.box_h = bh;
      d.box_w = bw;
      d.box_y = static_cast<int>(uniform_below(w.v[2], static_cast<uint32_t>(h_img - bh + 1)));
      d.box_x = static_cast<int>(uniform_below(w.v[3], static_cast<uint32_t>(w_img - bw + 1)));
      return;
    }
  }
  const float in_ratio = static_cast<float>(w_img) / static_cast<float>(h_img);
  const float lo = exp_small(p.crop_log_ratio[0]), hi = exp_small(p.crop_log_ratio[1]);
  d.box_w = w_img;
  d.box_h = h_img;
  if (in_ratio < lo) d.box_h = static_cast<int>(rintf(static_cast<float>(w_img) / lo));
  else if (in_ratio > hi) d.box_w = static_cast<int>(rintf(static_cast<float>(h_img) * hi));
  d.box_h = d.box_h < 1 ? 1 : (d.box_h > h_img ? h_img : d.box_h);
  d.box_w = d.box_w < 1 ? 1 : (d.box_w > w_img ? w_img : d.box_w);
  d.box_y = (h_img - d.box_h) / 2;
  d.box_x = (w_img - d.box_w) / 2;
}

// Channel c of the box resized to (H, W), at output (y, x): bilinear, align_corners=False.
MINIDL_HD float resized_crop_value(const uint8_t* image, const ImageDraw& d, const AugmentParams& p, int c, int y,
                                   int x) {
  const float sy = fmaf(static_cast<float>(y) + 0.5f, static_cast<float>(d.box_h) / static_cast<float>(p.height),
                        -0.5f);
  const float sx = fmaf(static_cast<float>(x) + 0.5f, static_cast<float>(d.box_w) / static_cast<float>(p.width),
                        -0.5f);
  const float cy = sy < 0.f ? 0.f : sy, cx = sx < 0.f ? 0.f : sx;
  const int y0 = static_cast<int>(cy), x0 = static_cast<int>(cx);
  const float fy = cy - static_cast<float>(y0), fx = cx - static_cast<float>(x0);
  const int y1 = y0 + 1 < d.box_h ? y0 + 1 : d.box_h - 1, x1 = x0 + 1 < d.box_w ? x0 + 1 : d.box_w - 1;
  const uint8_t* plane = image + static_cast<int64_t>(c) * p.height * p.width;
  auto at = [&](int yy, int xx) {
    return static_cast<float>(plane[(d.box_y + yy) * p.width + d.box_x + xx]);
  };
  const float top = fmaf(fx, at(y0, x1) - at(y0, x0), at(y0, x0));
  const float bottom = fmaf(fx, at(y1, x1) - at(y1, x0), at(y1, x0));
  return fmaf(fy, bottom - top, top);
}

// The four words of philox(seed, kStreamAugment, epoch << 32 | index) give, in order: dy, dx, the
// cutout center and the flip (top bit). The center's row is uniform_below(word 2, H) and its
// column uniform_below(word 2 << 5, W): at H = W = 32 those are word 2's top two 5-bit fields,
// each exactly uniform. Alternating flips take the bit of epoch 0 and invert it on odd epochs.
MINIDL_HD ImageDraw draw_image_augment(const AugmentParams& p, int64_t index) {
  ImageDraw d{};
  const Philox4 w = philox(p.seed, kStreamAugment,
                           (static_cast<uint64_t>(p.epoch) << 32) | static_cast<uint64_t>(index));
  const uint32_t span = static_cast<uint32_t>(2 * p.crop_padding + 1);
  d.dy = static_cast<int>(uniform_below(w.v[0], span));
  d.dx = static_cast<int>(uniform_below(w.v[1], span));
  d.cy = static_cast<int>(uniform_below(w.v[2], static_cast<uint32_t>(p.height)));
  d.cx = static_cast<int>(uniform_below(w.v[2] << 5, static_cast<uint32_t>(p.width)));
  if (p.flip_mode == kFlipRandom) {
    d.flip = static_cast<int>(w.v[3] >> 31);
  } else if (p.flip_mode == kFlipAlternating) {
    const Philox4 w0 = philox(p.seed, kStreamAugment, static_cast<uint64_t>(index));
    d.flip = static_cast<int>(w0.v[3] >> 31) ^ static_cast<int>(p.epoch & 1);
  }
  if (p.resized_crop) draw_resized_crop(p, index, d);
  d.shift = 0.f;
  d.gain = 1.f;
  if (p.brightness > 0.f || p.contrast > 0.f) {
    // Words 0 and 1 of philox(seed, kStreamColorJitter, epoch << 32 | index): b, then c.
    const Philox4 j =
        philox(p.seed, kStreamColorJitter, (static_cast<uint64_t>(p.epoch) << 32) | static_cast<uint64_t>(index));
    d.shift = fmaf(uniform01(j.v[0]), 2.f * p.brightness, -p.brightness);
    d.gain = fmaf(uniform01(j.v[1]), 2.f * p.contrast, 1.f - p.contrast);
  }
  return d;
}

// The color jitter of one normalized value: two correctly rounded ops (no multiply-add to fuse).
MINIDL_HD float color_jitter(float value, const ImageDraw& d) { return (value + d.shift) * d.gain; }

// Index along an axis of n pixels after padding; -1 when it falls on a zero pad (reflect needs
// a padding below n).
MINIDL_HD int augment_source(int i, int n, int reflect) {
  if (i >= 0 && i < n) return i;
  if (!reflect) return -1;
  return i < 0 ? -i : 2 * (n - 1) - i;
}

// Output element (c, y, x) of one (C, H, W) uint8 image.
MINIDL_HD float augment_pixel(const uint8_t* image, const ImageDraw& d, const AugmentParams& p,
                              int c, int y, int x) {
  if (p.cutout > 0) {
    const int y0 = d.cy - p.cutout / 2, x0 = d.cx - p.cutout / 2;
    if (y >= y0 && y < y0 + p.cutout && x >= x0 && x < x0 + p.cutout) return 0.f;
  }
  const int xs = d.flip ? p.width - 1 - x : x;
  float value;
  if (p.resized_crop) {
    value = fmaf(resized_crop_value(image, d, p, c, y, xs), p.scale[c], p.shift[c]);
  } else {
    const int sy = augment_source(y + d.dy - p.crop_padding, p.height, p.reflect);
    const int sx = augment_source(xs + d.dx - p.crop_padding, p.width, p.reflect);
    const int v = (sy < 0 || sx < 0) ? 0 : image[(c * p.height + sy) * p.width + sx];
    value = fmaf(static_cast<float>(v), p.scale[c], p.shift[c]);
  }
  return (p.brightness > 0.f || p.contrast > 0.f) ? color_jitter(value, d) : value;
}

// Where a batch comes from: the epoch's draw parameters and the batch's first position in the
// epoch's order. The loader writes it to memory on the batch's device before each batch, and the
// kernels read it from there: a CUDA graph replays its captured kernel arguments, so the values
// that change every step cannot be arguments.
struct BatchCursor {
  AugmentParams params;
  int64_t position = 0;
};

// Offset of element (c, y, x) in one image of the batch: (C, H, W) order, or (H, W, C) for a
// channels-last batch.
MINIDL_HD int augment_offset(const AugmentParams& p, int c, int y, int x, bool channels_last) {
  return channels_last ? (y * p.width + x) * p.channels + c : (c * p.height + y) * p.width + x;
}

// Elements of one image.
MINIDL_HD int64_t augment_image_elements(const AugmentParams& p) {
  return static_cast<int64_t>(p.channels) * p.height * p.width;
}

// out[b] = augment(images[order[position + offset + b]]) as a (B, C, H, W) batch of `dtype`
// (float32, or bfloat16/float16: the float32 value rounded once, as a later cast would) in NCHW
// or, with channels_last, NHWC memory; out_labels[b] its label, with `cursor` (in the memory of
// the device that runs the kernel) giving params and position. `offset` picks a micro-batch
// inside the batch: it is the same at every step, so it may be an argument a graph replays. The
// draws use the dataset index, so a batch does not depend on which batch holds the image.
void augment_batch_cpu(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                       const BatchCursor* cursor, int64_t offset, void* out, DType dtype, bool channels_last,
                       int32_t* out_labels);
void augment_batch_cuda(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                        const BatchCursor* cursor, int64_t offset, void* out, DType dtype, bool channels_last,
                        int32_t* out_labels);

}  // namespace minidl::kernels
