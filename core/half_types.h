// The 16-bit floating-point storage types and their conversions to and from float32:
//   bf16 (bfloat16): 1 sign, 8 exponent, 7 mantissa bits: float32's range, 8 bits of precision.
//   fp16 (IEEE 754 binary16): 1 sign, 5 exponent, 10 mantissa bits: largest finite 65504,
//        smallest normal 2^-14, smallest subnormal 2^-24, 11 bits of precision.
// They are storage types only: arithmetic happens in float32 (as in PyTorch's autocast and
// llm.c), so all a kernel needs is the two conversions below.
//
// Rounding (float -> half) is IEEE round-to-nearest-even in every range: normals, subnormals
// (exactly, with one rounding), overflow to +-inf (fp16: |x| >= 65520, the midpoint past 65504;
// bf16: past the midpoint above its largest finite value), +-0 and +-inf kept. A NaN stays a NaN
// of the same sign with the quiet bit set and the top payload bits kept (what x86 F16C and Arm
// FCVT do), so a NaN payload never turns into an infinity. Widening (half -> float) is exact and
// keeps every bit, NaN payloads included. So half -> float -> half is the identity on all 65536
// patterns except signalling NaNs, which come back quieted.
//
// The host and CUDA kernels run this same integer code (MINIDL_HD), so a conversion gives the
// same bits on both. cuda_bf16.h's intrinsics are not used: they return one canonical NaN
// (0x7FFF) instead of keeping sign and payload. fp16 is the exception on the GPU: there every
// value but a NaN goes through the hardware's conversion (PTX cvt, IEEE round-to-nearest-even
// and exact widening, subnormals included: the same bits as the integer code, which
// tests/test_half.cpp checks on every pattern and rounding probe), because the integer code's
// branches and its subnormal loop made every float16 kernel 2-3x slower than its bfloat16 twin.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace minidl {

struct bf16 {
  uint16_t bits;
};
struct fp16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "half types must be 2 bytes");

MINIDL_HD uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

MINIDL_HD float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

MINIDL_HD float to_float(float x) { return x; }

MINIDL_HD float to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

MINIDL_HD float to_float(fp16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t man = h.bits & 0x3ffu;
#ifdef __CUDA_ARCH__
  if (exp != 0x1f || man == 0) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
  }
#endif
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf, NaN (payload kept)
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));  // rebias 15 -> 127
  if (man == 0) return bits_float(sign);
  // Subnormal man * 2^-24: shift the leading one up to bit 10, a normal float 2^(-14 - shift).
  uint32_t shift = 0;
  while ((man & 0x400u) == 0) {
    man <<= 1;
    ++shift;
  }
  return bits_float(sign | ((113 - shift) << 23) | ((man & 0x3ffu) << 13));
}

MINIDL_HD bf16 to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  // Adding 0x7fff plus the lowest kept bit rounds the 16 dropped bits to nearest, ties to even;
  // a carry moves into the exponent (up to inf), which is the correct rounded value.
  return bf16{static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

MINIDL_HD fp16 to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return fp16{static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
#ifdef __CUDA_ARCH__
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return fp16{h};
#endif
  if (a >= 0x477ff000u) return fp16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: inf
  if (a >= 0x38800000u) {
    // Normal in fp16 (>= 2^-14): rebias the exponent, round away 13 bits to nearest even.
    const uint32_t r = a - 0x38000000u;
    return fp16{static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13))};
  }
  // fp16 subnormal or zero: the result counts units of 2^-24. A float of exponent field e and
  // significand m (implicit one included) is m * 2^(e - 150) = (m >> (126 - e)) units plus a
  // remainder, rounded to nearest even; a round-up to 1024 units is the smallest normal.
  const uint32_t e = a >> 23;
  if (e < 102) return fp16{sign};  // below 2^-25, half the smallest subnormal
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return fp16{static_cast<uint16_t>(sign | q)};
}

// from_float<T>(x): float -> storage type T (identity for float), for kernels templated on T.
template <class T> MINIDL_HD T from_float(float x);
template <> MINIDL_HD float from_float<float>(float x) { return x; }
template <> MINIDL_HD bf16 from_float<bf16>(float x) { return to_bf16(x); }
template <> MINIDL_HD fp16 from_float<fp16>(float x) { return to_fp16(x); }

}  // namespace minidl
