// What the depthwise kernels share (conv2d_depthwise_cuda.cu, conv2d_depthwise_filter_cuda.cu):
// the problem in the int sizes the kernels index with, and 8 channels of a channels-last tensor
// loaded as float32 and stored back rounded once. Included only by .cu files.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/half_types.h"
#include "layers/conv/conv2d_depthwise.h"

namespace minidl::kernels::depthwise {

constexpr int kVec = static_cast<int>(kConv2dDepthwiseVector);
constexpr int kBlockChannels = 32;                    // channels of one block: 4 threads' vectors
constexpr int kVecsPerBlock = kBlockChannels / kVec;  // threads across the channels of a block

// One pass as a convolution from an input plane (h, w) to an output plane (oh, ow), both (n, ., .,
// c) channels-last: the forward, and the backward-data of stride 1 (dy to dx, the kernel flipped
// and the padding k - 1 - p, which may be negative). Offsets within one image fit an int; the
// batch offsets are 64-bit.
struct Plane {
  int64_t n;
  int h, w, oh, ow, c, ph, pw;
};

inline Plane plane_of(const Conv2dShape& s) {
  MINIDL_CHECK(conv2d_depthwise_applies(s), "conv2d depthwise kernels: not applicable to c=", s.c, " o=", s.o,
               " groups=", s.groups, " k=", s.kh, "x", s.kw, " stride ", s.sh, "x", s.sw);
  MINIDL_CHECK(s.c * s.h * s.w <= INT32_MAX && s.c * s.oh() * s.ow() <= INT32_MAX,
               "conv2d on CUDA: one image of input (", s.c, ", ", s.h, ", ", s.w, ") or output (", s.o, ", ", s.oh(),
               ", ", s.ow(), ") exceeds 2^31 elements");
  MINIDL_CHECK((s.c + kBlockChannels - 1) / kBlockChannels <= 65535, "conv2d on CUDA: ", s.c,
               " depthwise channels exceed the grid");
  return {s.n,
          static_cast<int>(s.h),
          static_cast<int>(s.w),
          static_cast<int>(s.oh()),
          static_cast<int>(s.ow()),
          static_cast<int>(s.c),
          static_cast<int>(s.ph),
          static_cast<int>(s.pw)};
}

__device__ __forceinline__ void load8(const float* p, float (&v)[kVec]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <class H>  // bf16 or fp16: one 16-byte load, each half widened exactly
__device__ __forceinline__ void load8(const H* p, float (&v)[kVec]) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = to_float(H{static_cast<uint16_t>(words[k] & 0xffffu)});
    v[2 * k + 1] = to_float(H{static_cast<uint16_t>(words[k] >> 16)});
  }
}

__device__ __forceinline__ void store8(float* p, const float (&v)[kVec]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

template <class H>
__device__ __forceinline__ void store8(H* p, const float (&v)[kVec]) {
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    words[k] = static_cast<uint32_t>(from_float<H>(v[2 * k]).bits) |
               (static_cast<uint32_t>(from_float<H>(v[2 * k + 1]).bits) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
}

// v = 8 channels at p, or zeros where the pixel lies outside the plane (the zero padding).
template <class T>
__device__ __forceinline__ void load8_or_zero(bool inside, const T* p, float (&v)[kVec]) {
  if (inside) {
    load8(p, v);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = 0.f;
  }
}

// Where strip `strip` of a batch of planes starts: image n, row `row` of `rows`, column `col`
// (strips of `width` outputs, `per_row` to a row).
struct StripAt {
  int64_t n;
  int row, col;
};

__device__ __forceinline__ StripAt strip_at(int64_t strip, int per_row, int width, int rows) {
  const int64_t image_row = strip / per_row, n = image_row / rows;
  return {n, static_cast<int>(image_row - n * rows), static_cast<int>(strip - image_row * per_row) * width};
}

// Streams the (STRIP - 1) * S + K input pixels a strip of STRIP outputs reads from one row (zero
// outside the plane), 8 channels each, widened once, and for every output t of the strip that a
// pixel meets, at tap j of the kernel row, calls f(t, j, values): t ascending for a pixel, so each
// output sees its taps in j order. t and j are constants once unrolled.
template <int K, int S, int STRIP, class T, class F>
__device__ __forceinline__ void stream_row(const T* row, int iw0, int w, int c, F&& f) {
#pragma unroll
  for (int u = 0; u < (STRIP - 1) * S + K; ++u) {
    const int iw = iw0 + u;
    float v[kVec];
    load8_or_zero(static_cast<unsigned>(iw) < static_cast<unsigned>(w), row + iw * c, v);
#pragma unroll
    for (int t = 0; t < STRIP; ++t) {
      const int j = u - t * S;
      if (j >= 0 && j < K) f(t, j, v);
    }
  }
}

}  // namespace minidl::kernels::depthwise
