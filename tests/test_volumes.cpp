// The synthetic volumetric segmentation set: a pure function of (seed, volume index), labels in
// range with every foreground class drawn, images that carry the objects, and the option errors.
#include <cmath>
#include <cstring>
#include <set>

#include "data/volumes.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::test;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

}  // namespace

TEST_CASE("synthetic volumes are a pure function of the seed and the volume index", "[volumes]") {
  VolumeSetOptions o;
  o.size = 16;
  o.seed = 5;
  const VolumeBatch all = synthetic_volumes(o, 0, 4), again = synthetic_volumes(o, 0, 4);
  REQUIRE(all.images.shape() == Shape{4, 1, 16, 16, 16});
  REQUIRE(all.labels.shape() == Shape{4, 16, 16, 16});
  CHECK(same_bits(all.images, again.images));
  CHECK(same_bits(all.labels, again.labels));
  // Volumes 2 and 3 alone are the same as within the batch of four.
  const VolumeBatch tail = synthetic_volumes(o, 2, 2);
  const int64_t voxels = 16 * 16 * 16;
  CHECK(std::memcmp(tail.labels.data<int32_t>(), all.labels.data<int32_t>() + 2 * voxels, 2 * voxels * 4) == 0);
  CHECK(std::memcmp(tail.images.data<float>(), all.images.data<float>() + 2 * voxels, 2 * voxels * 4) == 0);
  o.seed = 6;
  CHECK(!same_bits(all.labels, synthetic_volumes(o, 0, 4).labels));
}

TEST_CASE("synthetic volumes label every foreground class, and the image shows the objects", "[volumes]") {
  VolumeSetOptions o;
  o.size = 32;
  o.classes = 4;
  o.objects = 3;
  o.noise = 0.1;
  const VolumeBatch b = synthetic_volumes(o, 0, 8);
  std::set<int32_t> seen;
  double inside = 0, outside = 0;
  int64_t n_in = 0, n_out = 0;
  const int32_t* l = b.labels.data<int32_t>();
  const float* x = b.images.data<float>();
  for (int64_t i = 0; i < b.labels.numel(); ++i) {
    REQUIRE((l[i] >= 0 && l[i] < 4));
    seen.insert(l[i]);
    (l[i] ? inside : outside) += x[i];
    ++(l[i] ? n_in : n_out);
    REQUIRE(x[i] >= -0.1f);
    REQUIRE(x[i] <= 1.1f);
  }
  CHECK(seen == std::set<int32_t>{0, 1, 2, 3});
  // Objects fill a few percent of the volume, and are brighter than the background's noise.
  const double fraction = static_cast<double>(n_in) / static_cast<double>(n_in + n_out);
  CHECK(fraction > 0.005);
  CHECK(fraction < 0.5);
  CHECK(inside / n_in > 0.3);
  CHECK(std::fabs(outside / n_out) < 0.02);
}

TEST_CASE("synthetic volumes name an option out of range", "[volumes]") {
  VolumeSetOptions o;
  o.size = 4;
  CHECK(error_of([&] { synthetic_volumes(o, 0, 1); }).find("size must be in 8..256, got 4") != std::string::npos);
  o.size = 16;
  o.classes = 1;
  CHECK(error_of([&] { synthetic_volumes(o, 0, 1); }).find("classes must be in 2..16, got 1") != std::string::npos);
}
