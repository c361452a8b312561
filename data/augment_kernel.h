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
//   cutout: a size x size square at a random center (cy, cx), rows cy - size/2 .. +size,
//   clipped at the borders, set to 0 after normalization (the dataset mean; as in the DAWNBench
//   ResNet-9 code, which cuts out of the normalized image).
#pragma once
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
};

// Plain (no member initializers), so the CUDA kernel can hold one in shared memory.
struct ImageDraw {
  int dy, dx;  // crop offset into the padded image, 0..2p
  int flip;
  int cy, cx;  // cutout center
};

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
  return d;
}

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
  const int sy = augment_source(y + d.dy - p.crop_padding, p.height, p.reflect);
  const int sx = augment_source(xs + d.dx - p.crop_padding, p.width, p.reflect);
  const int v = (sy < 0 || sx < 0) ? 0 : image[(c * p.height + sy) * p.width + sx];
  return fmaf(static_cast<float>(v), p.scale[c], p.shift[c]);
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

// out[b] = augment(images[order[position + b]]) as a (B, C, H, W) batch of `dtype` (float32,
// or bfloat16/float16: the float32 value rounded once, as a later cast would) in NCHW or, with
// channels_last, NHWC memory; out_labels[b] its label, with `cursor` (in the memory of the device
// that runs the kernel) giving params and position. The draws use the dataset index, so a batch
// does not depend on which batch holds the image.
void augment_batch_cpu(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                       const BatchCursor* cursor, void* out, DType dtype, bool channels_last, int32_t* out_labels);
void augment_batch_cuda(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                        const BatchCursor* cursor, void* out, DType dtype, bool channels_last, int32_t* out_labels);

}  // namespace minidl::kernels
