#include "layers/pool/max_pool2x2_cpu.h"

#include <cmath>
#include <cstring>
#ifdef __AVX__
#include <immintrin.h>
#endif

namespace minidl::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread is faster

// The general scan's step: take v when it is greater than the best so far or NaN.
inline void take(float v, int at, float& best, int& best_at) {
  if (v > best || std::isnan(v)) {
    best = v;
    best_at = at;
  }
}

// The window at output column ow of a row pair, its max and the max's offset: the cells taken in
// the general scan's order, (0, 0), (0, 1), (1, 0), (1, 1) at offsets 0..3. Starting from the
// first cell equals starting from -inf and taking it: -inf stays -inf at offset 0, NaN is taken.
inline float window_max(const float* top, const float* bottom, int64_t ow, int& at) {
  float best = top[2 * ow];
  at = 0;
  take(top[2 * ow + 1], 1, best, at);
  take(bottom[2 * ow], 2, best, at);
  take(bottom[2 * ow + 1], 3, best, at);
  return best;
}

#ifdef __AVX__
// Four windows at once, the same scan on vector lanes: greater-than is ordered (false with a
// NaN), so "greater or NaN" is that or the unordered self-compare, and a blend takes the value
// and its offset. The data decide nothing: ReLU's zeros tie everywhere, and the scalar scan's
// branch on them mispredicts about every other window (5x slower).
inline void take4(__m128 v, __m128i at, __m128& best, __m128i& best_at) {
  const __m128 take_v = _mm_or_ps(_mm_cmp_ps(v, best, _CMP_GT_OQ), _mm_cmp_ps(v, v, _CMP_UNORD_Q));
  best = _mm_blendv_ps(best, v, take_v);
  best_at = _mm_castps_si128(_mm_blendv_ps(_mm_castsi128_ps(best_at), _mm_castsi128_ps(at), take_v));
}

// Windows ow .. ow + 3: their maxima to y, their offsets (as int32) returned.
inline __m128i window_max4(const float* top, const float* bottom, int64_t ow, float* y) {
  const __m128 t0 = _mm_loadu_ps(top + 2 * ow), t1 = _mm_loadu_ps(top + 2 * ow + 4);
  const __m128 b0 = _mm_loadu_ps(bottom + 2 * ow), b1 = _mm_loadu_ps(bottom + 2 * ow + 4);
  __m128 best = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));  // the windows' (0, 0) cells
  __m128i at = _mm_setzero_si128();
  take4(_mm_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)), _mm_set1_epi32(1), best, at);
  take4(_mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)), _mm_set1_epi32(2), best, at);
  take4(_mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1)), _mm_set1_epi32(3), best, at);
  _mm_storeu_ps(y + ow, best);
  return at;
}

inline void store4(uint8_t* a, __m128i at) {
  const int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(at, at), _mm_setzero_si128()));
  std::memcpy(a, &bytes, 4);
}
inline void store4(int32_t* a, __m128i at) { _mm_storeu_si128(reinterpret_cast<__m128i*>(a), at); }
#endif

// One output row: four windows at a time where the instructions exist, the rest one by one.
template <class Index>
void row_max(const float* top, const float* bottom, int64_t OW, float* y, Index* argmax) {
  int64_t ow = 0;
#ifdef __AVX__
  for (; ow + 4 <= OW; ow += 4) {
    const __m128i at = window_max4(top, bottom, ow, y);
    if (argmax) store4(argmax + ow, at);
  }
#endif
  for (; ow < OW; ++ow) {
    int at;
    y[ow] = window_max(top, bottom, ow, at);
    if (argmax) argmax[ow] = static_cast<Index>(at);
  }
}
}  // namespace

template <class Index>
void max_pool2x2_forward_cpu(const float* x, float* y, Index* argmax, const Pool2dShape& s) {
  const int64_t rows = s.planes * s.OH;
#pragma omp parallel for schedule(static) if (rows * s.OW * 4 > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* top = x + 2 * r * s.W;
    row_max(top, top + s.W, s.OW, y + r * s.OW, argmax ? argmax + r * s.OW : nullptr);
  }
}

// Each window's dy to its argmax cell, +0 to the other three: every cell of dx written once. The
// choice is a bit mask over dy's bits (all ones where the cell won, else zero), which keeps every
// value exactly (NaN and infinities too) and lets the loop vectorize without branches.
template <class Index>
void max_pool2x2_backward_cpu(const float* dy, const Index* argmax, float* dx, const Pool2dShape& s) {
  using FloatBits = uint32_t __attribute__((may_alias));  // a float's bits, read and written in place
  const int64_t rows = s.planes * s.OH;
#pragma omp parallel for schedule(static) if (rows * s.OW * 4 > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const FloatBits* d = reinterpret_cast<const FloatBits*>(dy + r * s.OW);
    const Index* a = argmax + r * s.OW;
    FloatBits* top = reinterpret_cast<FloatBits*>(dx + 2 * r * s.W);
    FloatBits* bottom = top + s.W;
#pragma omp simd
    for (int64_t ow = 0; ow < s.OW; ++ow) {
      const uint32_t at = static_cast<uint32_t>(a[ow]), g = d[ow];
      top[2 * ow] = g & (0u - static_cast<uint32_t>(at == 0));
      top[2 * ow + 1] = g & (0u - static_cast<uint32_t>(at == 1));
      bottom[2 * ow] = g & (0u - static_cast<uint32_t>(at == 2));
      bottom[2 * ow + 1] = g & (0u - static_cast<uint32_t>(at == 3));
    }
  }
}

template void max_pool2x2_forward_cpu<uint8_t>(const float*, float*, uint8_t*, const Pool2dShape&);
template void max_pool2x2_forward_cpu<int32_t>(const float*, float*, int32_t*, const Pool2dShape&);
template void max_pool2x2_backward_cpu<uint8_t>(const float*, const uint8_t*, float*, const Pool2dShape&);
template void max_pool2x2_backward_cpu<int32_t>(const float*, const int32_t*, float*, const Pool2dShape&);

}  // namespace minidl::kernels
