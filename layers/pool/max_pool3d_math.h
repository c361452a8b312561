// MaxPool3d's per-element math, the same code on the host and the GPU (MINIDL_HD), so the CPU
// and CUDA paths give the same bits in every dtype: the max is exact, and each input's gradient
// is a float sum over the windows that chose it, in a fixed order, rounded once.
#pragma once
#include <cstdint>

#include "core/half_types.h"
#include "core/host_device.h"

namespace minidl {

// Input (n, c, d, h, w) in NCDHW or (channels_last) NDHWC order, window (kd, kh, kw), stride
// (sd, sh, sw), padding (pd, ph, pw) on each side (never chosen: as -infinity).
struct Pool3dShape {
  int64_t n, c, d, h, w, kd, kh, kw, sd, sh, sw, pd, ph, pw;
  bool channels_last;
  MINIDL_HD int64_t od() const { return (d + 2 * pd - kd) / sd + 1; }
  MINIDL_HD int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  MINIDL_HD int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
};

namespace pool3d {

// The coordinates of element i (in memory order) of a (n, c, D, H, W) tensor, and back.
struct At {
  int64_t n, c, z, y, x;
};
MINIDL_HD At decode(int64_t i, int64_t c, int64_t D, int64_t H, int64_t W, bool last) {
  At a;
  if (last) {
    a.c = i % c;
    i /= c;
  }
  a.x = i % W;
  i /= W;
  a.y = i % H;
  i /= H;
  a.z = i % D;
  i /= D;
  if (!last) {
    a.c = i % c;
    i /= c;
  }
  a.n = i;
  return a;
}
MINIDL_HD int64_t offset(const At& a, int64_t c, int64_t D, int64_t H, int64_t W, bool last) {
  return last ? (((a.n * D + a.z) * H + a.y) * W + a.x) * c + a.c : (((a.n * c + a.c) * D + a.z) * H + a.y) * W + a.x;
}

// Output element i (memory order): its max, and the spatial index z*h*w + y*w + x of the first
// maximum in window order (a NaN wins, as in PyTorch).
template <class T>
MINIDL_HD void forward_at(const Pool3dShape& s, const T* x, T* y, int32_t* idx, int64_t i) {
  const At o = decode(i, s.c, s.od(), s.oh(), s.ow(), s.channels_last);
  float best = 0.f;
  int64_t arg = -1;
  for (int64_t i3 = 0; i3 < s.kd; ++i3) {
    const int64_t z = o.z * s.sd - s.pd + i3;
    if (z < 0 || z >= s.d) continue;
    for (int64_t j = 0; j < s.kh; ++j) {
      const int64_t yy = o.y * s.sh - s.ph + j;
      if (yy < 0 || yy >= s.h) continue;
      for (int64_t l = 0; l < s.kw; ++l) {
        const int64_t xx = o.x * s.sw - s.pw + l;
        if (xx < 0 || xx >= s.w) continue;
        const float v = to_float(x[offset({o.n, o.c, z, yy, xx}, s.c, s.d, s.h, s.w, s.channels_last)]);
        if (arg < 0 || v > best || (v != v && best == best)) {
          best = v;
          arg = (z * s.h + yy) * s.w + xx;
        }
      }
    }
  }
  y[i] = from_float<T>(best);
  idx[i] = static_cast<int32_t>(arg);
}

// The output positions along one dimension whose window covers input position p: [lo, hi].
MINIDL_HD void covering(int64_t p, int64_t k, int64_t st, int64_t pad, int64_t out, int64_t& lo, int64_t& hi) {
  const int64_t q = p + pad;  // o covers p when o*st <= q <= o*st + k - 1
  lo = q - k + 1 <= 0 ? 0 : (q - k + 1 + st - 1) / st;
  hi = q / st;
  if (hi > out - 1) hi = out - 1;
}

// Input element i (memory order): the sum of dy over the windows that chose it.
template <class T>
MINIDL_HD void backward_at(const Pool3dShape& s, const T* dy, const int32_t* idx, T* dx, int64_t i) {
  const At a = decode(i, s.c, s.d, s.h, s.w, s.channels_last);
  const int32_t self = static_cast<int32_t>((a.z * s.h + a.y) * s.w + a.x);
  const int64_t OD = s.od(), OH = s.oh(), OW = s.ow();
  int64_t z0, z1, y0, y1, x0, x1;
  covering(a.z, s.kd, s.sd, s.pd, OD, z0, z1);
  covering(a.y, s.kh, s.sh, s.ph, OH, y0, y1);
  covering(a.x, s.kw, s.sw, s.pw, OW, x0, x1);
  float acc = 0.f;
  for (int64_t z = z0; z <= z1; ++z)
    for (int64_t y = y0; y <= y1; ++y)
      for (int64_t x = x0; x <= x1; ++x) {
        const int64_t o = offset({a.n, a.c, z, y, x}, s.c, OD, OH, OW, s.channels_last);
        if (idx[o] == self) acc += to_float(dy[o]);
      }
  dx[i] = from_float<T>(acc);
}

}  // namespace pool3d
}  // namespace minidl
