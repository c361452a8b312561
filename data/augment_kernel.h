// The per-image augmentation shared verbatim by the CPU loop (data/augment.cpp) and the CUDA
// kernel (data/augment_cuda.cu): the random draws and the value of each output pixel are these
// inline functions on both sides, so a GPU batch equals the CPU batch bit for bit. Everything
// random is an integer drawn from the counter RNG; the only float op is one fmaf per pixel.
//
// Output pixel (c, y, x) of an image, in the order torchvision applies
// RandomCrop(32, padding=p, padding_mode) -> RandomHorizontalFlip -> ToTensor -> Normalize,
// followed by cutout:
//   xs = flip ? 31 - x : x;  (sy, sx) = (y + dy - p, xs + dx - p), with dy, dx in [0, 2p]
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
};

// Plain (no member initializers), so the CUDA kernel can hold one in shared memory.
struct ImageDraw {
  int dy, dx;  // crop offset into the padded image, 0..2p
  int flip;
  int cy, cx;  // cutout center
};

// The four words of philox(seed, kStreamAugment, epoch << 32 | index) give, in order: dy, dx, the
// cutout center (two 5-bit fields: 32 is a power of two, so each is exactly uniform) and the
// flip (top bit). Alternating flips take the bit of epoch 0 and invert it on odd epochs.
MINIDL_HD ImageDraw draw_image_augment(const AugmentParams& p, int64_t index) {
  ImageDraw d{};
  const Philox4 w = philox(p.seed, kStreamAugment,
                           (static_cast<uint64_t>(p.epoch) << 32) | static_cast<uint64_t>(index));
  const uint32_t span = static_cast<uint32_t>(2 * p.crop_padding + 1);
  d.dy = static_cast<int>(uniform_below(w.v[0], span));
  d.dx = static_cast<int>(uniform_below(w.v[1], span));
  d.cy = static_cast<int>(w.v[2] >> 27);
  d.cx = static_cast<int>((w.v[2] >> 22) & 31u);
  if (p.flip_mode == kFlipRandom) {
    d.flip = static_cast<int>(w.v[3] >> 31);
  } else if (p.flip_mode == kFlipAlternating) {
    const Philox4 w0 = philox(p.seed, kStreamAugment, static_cast<uint64_t>(index));
    d.flip = static_cast<int>(w0.v[3] >> 31) ^ static_cast<int>(p.epoch & 1);
  }
  return d;
}

// Index along one 32-pixel axis after padding; -1 when it falls on a zero pad.
MINIDL_HD int augment_source(int i, int reflect) {
  if (i >= 0 && i < 32) return i;
  if (!reflect) return -1;
  return i < 0 ? -i : 62 - i;
}

// Output element (c, y, x) of one 3x32x32 uint8 image.
MINIDL_HD float augment_pixel(const uint8_t* image, const ImageDraw& d, const AugmentParams& p,
                              int c, int y, int x) {
  if (p.cutout > 0) {
    const int y0 = d.cy - p.cutout / 2, x0 = d.cx - p.cutout / 2;
    if (y >= y0 && y < y0 + p.cutout && x >= x0 && x < x0 + p.cutout) return 0.f;
  }
  const int xs = d.flip ? 31 - x : x;
  const int sy = augment_source(y + d.dy - p.crop_padding, p.reflect);
  const int sx = augment_source(xs + d.dx - p.crop_padding, p.reflect);
  const int v = (sy < 0 || sx < 0) ? 0 : image[(c * 32 + sy) * 32 + sx];
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

// Offset of element (c, y, x) in one image of the batch: (3, 32, 32) order, or (32, 32, 3) for a
// channels-last batch.
MINIDL_HD int augment_offset(int c, int y, int x, bool channels_last) {
  return channels_last ? (y * 32 + x) * 3 + c : (c * 32 + y) * 32 + x;
}

// out[b] = augment(images[order[position + b]]) as a (B, 3, 32, 32) batch of `dtype` (float32,
// or bfloat16/float16: the float32 value rounded once, as a later cast would) in NCHW or, with
// channels_last, NHWC memory; out_labels[b] its label, with `cursor` (in the memory of the device
// that runs the kernel) giving params and position. The draws use the dataset index, so a batch
// does not depend on which batch holds the image.
void augment_batch_cpu(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                       const BatchCursor* cursor, void* out, DType dtype, bool channels_last, int32_t* out_labels);
void augment_batch_cuda(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                        const BatchCursor* cursor, void* out, DType dtype, bool channels_last, int32_t* out_labels);

}  // namespace minidl::kernels
