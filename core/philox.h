// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). A draw is a pure function
// of (seed, stream, index): no state advances, so the CPU and a GPU kernel produce the same
// numbers for the same triple in any order and on any batch size. Streams separate the uses
// (weight init, shuffling, augmentation) so adding a draw to one never shifts another.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace minidl {

struct Philox4 {
  uint32_t v[4];
};

MINIDL_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Four 32-bit words for counter (index, stream) under key seed.
MINIDL_HD Philox4 philox(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(0xD2511F53u, c0, &hi0);
    const uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// A float in [0, 1) from the top 24 bits (exactly representable: same value on every device).
MINIDL_HD float uniform01(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// An integer in [0, n) without modulo bias worth caring about for n << 2^32 (multiply-shift).
MINIDL_HD uint32_t uniform_below(uint32_t bits, uint32_t n) {
  return static_cast<uint32_t>((static_cast<uint64_t>(bits) * n) >> 32);
}

// The streams minidl draws from. New uses get new numbers; existing ones never change.
enum RngStream : uint64_t {
  kStreamInit = 1,         // weight initialization: index = parameter ordinal << 32 | element
  kStreamShuffle = 2,      // per-epoch permutation: index = epoch << 32 | position
  kStreamAugment = 3,      // per-image augmentation: index = epoch << 32 | dataset index
  kStreamResizedCrop = 4,  // random-resized-crop boxes: stream | attempt << 32, index as kStreamAugment
  kStreamColorJitter = 5,  // brightness and contrast jitter: index as kStreamAugment
  kStreamExamples = 6,     // layer examples' values (export --examples): seed = tensor ordinal
  kStreamVolumes = 7,      // synthetic volumes (data/volumes.h): index = purpose << 56 | owner << 24 | draw
  kStreamGenerate = 8,     // sampling a language model's next token (train/generate.h): index = step
  kStreamTest = 100,       // tests
};

}  // namespace minidl
