#include "data/volumes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace minidl {
namespace {

// What a draw is for: the top byte of its Philox index, so no two uses share a number.
enum Purpose : uint64_t { kMaps = 1, kObjects = 2, kPoints = 3, kNoise = 4 };
constexpr int64_t kMaxVolumes = int64_t{1} << 26;  // volume << 6 | object stays below 2^32
constexpr int kWarmup = 16;                        // chaos-game steps before the point is on the attractor

Philox4 draw(uint64_t seed, Purpose purpose, uint64_t owner, uint64_t i) {
  return philox(seed, kStreamVolumes, purpose << 56 | owner << 24 | i);
}
float uniform(uint32_t bits, float lo, float hi) { return lo + (hi - lo) * uniform01(bits); }

// x -> a x + b.
struct Affine {
  std::array<float, 9> a;
  std::array<float, 3> b;
};

// Class c's maps: each a rotation (a random unit quaternion) times a contraction per axis in
// [0.3, 0.6], plus a shift in [-1, 1]^3.
std::vector<Affine> class_maps(uint64_t seed, int64_t c) {
  const int count = 3 + static_cast<int>(uniform_below(draw(seed, kMaps, c, 0).v[0], 2));
  std::vector<Affine> maps(count);
  for (int k = 0; k < count; ++k) {
    const Philox4 q4 = draw(seed, kMaps, c, 1 + 2 * k), r4 = draw(seed, kMaps, c, 2 + 2 * k);
    float q[4];
    for (int i = 0; i < 4; ++i) q[i] = uniform(q4.v[i], -1.f, 1.f);
    const float norm = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    for (float& v : q) v = norm > 1e-3f ? v / norm : 0.5f;
    const float w = q[0], x = q[1], y = q[2], z = q[3];
    const float rot[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z),     2 * (x * z + w * y),
                          2 * (x * y + w * z),     1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                          2 * (x * z - w * y),     2 * (y * z + w * x),     1 - 2 * (x * x + y * y)};
    const float scale[3] = {uniform(r4.v[0], 0.3f, 0.6f), uniform(r4.v[1], 0.3f, 0.6f), uniform(r4.v[2], 0.3f, 0.6f)};
    for (int i = 0; i < 9; ++i) maps[k].a[i] = rot[i] * scale[i % 3];
    const Philox4 b4 = draw(seed, kMaps, c, 64 + k);
    for (int i = 0; i < 3; ++i) maps[k].b[i] = uniform(b4.v[i], -1.f, 1.f);
  }
  return maps;
}

// The chaos game's points on the attractor of `maps`, drawn for `owner`.
std::vector<std::array<float, 3>> attractor(const std::vector<Affine>& maps, uint64_t seed, uint64_t owner,
                                            int64_t points) {
  std::vector<std::array<float, 3>> out;
  out.reserve(static_cast<size_t>(points));
  std::array<float, 3> p{0.f, 0.f, 0.f};
  for (int64_t i = 0; i < points + kWarmup; ++i) {
    const Affine& m = maps[uniform_below(draw(seed, kPoints, owner, static_cast<uint64_t>(i)).v[0],
                                         static_cast<uint32_t>(maps.size()))];
    const std::array<float, 3> q = p;
    for (int r = 0; r < 3; ++r) p[r] = m.a[3 * r] * q[0] + m.a[3 * r + 1] * q[1] + m.a[3 * r + 2] * q[2] + m.b[r];
    if (i >= kWarmup) out.push_back(p);
  }
  return out;
}

// One volume's labels and point counts (S^3 each), its objects in order.
void draw_volume(const VolumeSetOptions& o, const std::vector<std::vector<Affine>>& maps, int64_t v, int32_t* labels,
                 int32_t* counts) {
  const int64_t s = o.size;
  for (int64_t j = 0; j < o.objects; ++j) {
    const uint64_t owner = static_cast<uint64_t>(v) << 6 | static_cast<uint64_t>(j);
    const Philox4 r = draw(o.seed, kObjects, owner, 0);
    const int64_t c = 1 + uniform_below(r.v[0], static_cast<uint32_t>(o.classes - 1));
    const int64_t side = s / 4 + uniform_below(r.v[1], static_cast<uint32_t>(s / 4 + 1));
    const int64_t od = uniform_below(r.v[2], static_cast<uint32_t>(s - side + 1));
    const int64_t oh = uniform_below(r.v[3], static_cast<uint32_t>(s - side + 1));
    const int64_t ow = uniform_below(draw(o.seed, kObjects, owner, 1).v[0], static_cast<uint32_t>(s - side + 1));
    const auto pts = attractor(maps[c], o.seed, owner, std::min<int64_t>(2 * side * side * side, int64_t{1} << 20));
    std::array<float, 3> lo = pts[0], hi = pts[0];
    for (const auto& p : pts)
      for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], p[a]), hi[a] = std::max(hi[a], p[a]);
    // One scale for all three axes keeps the attractor's shape.
    const float extent = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2], 1e-6f});
    const float to_voxels = static_cast<float>(side) / extent;
    for (const auto& p : pts) {
      int64_t at[3];
      for (int a = 0; a < 3; ++a) at[a] = std::min<int64_t>(side - 1, static_cast<int64_t>((p[a] - lo[a]) * to_voxels));
      const int64_t i = ((od + at[0]) * s + oh + at[1]) * s + ow + at[2];
      labels[i] = static_cast<int32_t>(c);
      ++counts[i];
    }
  }
}

}  // namespace

void check_volume_options(const VolumeSetOptions& o) {
  MINIDL_CHECK(o.size >= 8 && o.size <= 256, "synthetic volumes: size must be in 8..256, got ", o.size);
  MINIDL_CHECK(o.classes >= 2 && o.classes <= 16, "synthetic volumes: classes must be in 2..16, got ", o.classes);
  MINIDL_CHECK(o.objects >= 1 && o.objects <= 64, "synthetic volumes: objects must be in 1..64, got ", o.objects);
  MINIDL_CHECK(o.noise >= 0 && o.noise <= 1, "synthetic volumes: noise must be in [0, 1], got ", o.noise);
}

VolumeBatch synthetic_volumes(const VolumeSetOptions& o, int64_t first, int64_t count) {
  check_volume_options(o);
  MINIDL_CHECK(first >= 0 && count >= 0 && first + count <= kMaxVolumes, "synthetic volumes: volumes ", first, "..",
               first + count - 1, " are outside 0..", kMaxVolumes - 1);
  std::vector<std::vector<Affine>> maps(static_cast<size_t>(o.classes));
  for (int64_t c = 1; c < o.classes; ++c) maps[c] = class_maps(o.seed, c);
  const int64_t s = o.size, voxels = s * s * s;
  VolumeBatch out{Tensor::empty({count, 1, s, s, s}), Tensor::empty({count, s, s, s}, DType::Int32)};
  const float noise = static_cast<float>(o.noise);
#pragma omp parallel for schedule(dynamic)
  for (int64_t n = 0; n < count; ++n) {
    int32_t* labels = out.labels.data<int32_t>() + n * voxels;
    std::fill(labels, labels + voxels, 0);
    std::vector<int32_t> counts(static_cast<size_t>(voxels), 0);
    draw_volume(o, maps, first + n, labels, counts.data());
    float* image = out.images.data<float>() + n * voxels;
    for (int64_t i = 0; i < voxels; ++i) {
      const float density = static_cast<float>(counts[i]) / (static_cast<float>(counts[i]) + 2.f);
      const uint32_t bits = draw(o.seed, kNoise, static_cast<uint64_t>(first + n), static_cast<uint64_t>(i)).v[0];
      image[i] = density + noise * uniform(bits, -1.f, 1.f);
    }
  }
  return out;
}

}  // namespace minidl
