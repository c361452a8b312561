// The channels-last (NHWC) pooling kernels (layers/pool/pooling_nhwc_cuda.cu) in float32,
// bfloat16 and float16 against the NCHW float32 CPU kernels (the references of the NCHW CUDA
// kernels, which give their bits) on the same values: random NCHW data made on the host in the
// dtype (ties and NaNs included, so every value is exact in float32 too), transposed to NHWC,
// pooled on the GPU, downloaded and transposed back. The max pools, the global max and every
// backward must give the reference's bits after one rounding to the dtype; the global average,
// which sums in hw order, its float32 sum's bits and the float64 reference within a rounding.
// Each tensor lies `shift` elements past an aligned address between sentinel elements (all bits
// set): a shift of 1 misaligns every pointer (the kernels' one-channel path), an element a kernel
// does not write keeps the sentinel, and one written outside the tensor changes a sentinel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half_types.h"
#include "core/tensor.h"
#include "layers/pool/pooling_kernels.h"
#include "test_util.h"

using namespace minidl;

#ifdef MINIDL_WITH_CUDA
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class T>
std::vector<T> round_to(const std::vector<float>& v) {
  std::vector<T> r;
  r.reserve(v.size());
  for (float f : v) r.push_back(from_float<T>(f));
  return r;
}

template <class T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> r;
  r.reserve(v.size());
  for (T e : v) r.push_back(to_float(e));
  return r;
}

template <class E>
bool same_bits(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0;
}

// [n][c][hw] -> [n][hw][c], and back.
template <class E>
std::vector<E> to_nhwc(const std::vector<E>& v, int64_t n, int64_t c, int64_t hw) {
  std::vector<E> r(v.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < hw; ++i) r[(b * hw + i) * c + k] = v[(b * c + k) * hw + i];
  return r;
}

template <class E>
std::vector<E> to_nchw(const std::vector<E>& v, int64_t n, int64_t c, int64_t hw) {
  std::vector<E> r(v.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < hw; ++i) r[(b * c + k) * hw + i] = v[(b * hw + i) * c + k];
  return r;
}

// Multiples of 1/4 in [-2, 2] (exact in both half types, and often tied within a window), with a
// NaN every 37 elements.
std::vector<float> tie_prone_values(int64_t n, uint64_t seed) {
  std::vector<float> v = test::random_values(n, seed, -2.f, 2.f);
  for (float& e : v) e = std::round(e * 4.f) / 4.f;
  for (int64_t i = 5; i < n; i += 37) v[i] = kNaN;
  return v;
}

// Gradients in [-1, 1) of T, with a -0 every 11 elements: the disjoint-window backward passes it
// on as -0, a sum from 0 (overlapping windows) gives +0.
template <class T>
std::vector<T> gradient_values(int64_t n, uint64_t seed) {
  std::vector<float> v = test::random_values(n, seed);
  for (int64_t i = 3; i < n; i += 11) v[i] = -0.f;
  return round_to<T>(v);
}

template <class E>
E sentinel() {
  E e;
  std::memset(&e, 0xFF, sizeof e);
  return e;
}

// `count` elements on the GPU, `shift` elements past the start of the allocation (which the
// caching allocator aligns to far more than 16 bytes) and followed by kPad more, all of them
// sentinels except the elements themselves: `v`, or sentinels for an output.
template <class E>
struct DeviceBuffer {
  static constexpr int kPad = 8;
  Tensor t;
  int shift;
  int64_t count;

  DeviceBuffer(const std::vector<E>& v, int shift_) : shift(shift_), count(static_cast<int64_t>(v.size())) {
    std::vector<E> all(v.size() + shift + kPad, sentinel<E>());
    std::copy(v.begin(), v.end(), all.begin() + shift);
    t = Tensor::from_vector(all, {static_cast<int64_t>(all.size())}, Device::cuda());
  }
  static DeviceBuffer output(int64_t count, int shift) {
    return DeviceBuffer(std::vector<E>(static_cast<size_t>(count), sentinel<E>()), shift);
  }
  E* ptr() const { return t.data<E>() + shift; }
  // The elements, after checking that the sentinels around them are intact.
  std::vector<E> download() const {
    const std::vector<E> all = t.values<E>();
    const std::vector<E> outside_before(all.begin(), all.begin() + shift);
    const std::vector<E> outside_after(all.begin() + shift + count, all.end());
    REQUIRE(same_bits(outside_before, std::vector<E>(outside_before.size(), sentinel<E>())));
    REQUIRE(same_bits(outside_after, std::vector<E>(outside_after.size(), sentinel<E>())));
    return std::vector<E>(all.begin() + shift, all.begin() + shift + count);
  }
};

std::string geometry_str(const Pool2dGeometry& g) {
  return str("kernel (", g.kernel_h, ",", g.kernel_w, ") stride (", g.stride_h, ",", g.stride_w, ") pad (", g.pad_h,
             ",", g.pad_w, ")");
}

// MaxPool2d forward (with and without argmax) and backward on n x c x H x W values of T.
template <class T, class Index>
void require_max_pool_matches(int64_t n, int64_t c, int64_t H, int64_t W, const Pool2dGeometry& g, int shift) {
  const DType dtype = DTypeOf<T>::value;
  INFO(dtype_name(dtype) << " n " << n << " c " << c << " H " << H << " W " << W << " " << geometry_str(g)
                         << " shift " << shift);
  const int64_t OH = (H + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1;
  const int64_t OW = (W + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1;
  const int64_t inputs = n * c * H * W, outputs = n * c * OH * OW;
  const std::vector<T> x = round_to<T>(tie_prone_values(inputs, 31));
  const std::vector<T> dy = gradient_values<T>(outputs, 32);

  // The reference: the NCHW float32 kernels on the same values, rounded to T once.
  const kernels::Pool2dShape ref_shape{n * c, H, W, OH, OW};
  std::vector<float> y_ref(static_cast<size_t>(outputs)), dx_ref(static_cast<size_t>(inputs));
  std::vector<Index> a_ref(static_cast<size_t>(outputs));
  kernels::max_pool2d_forward_cpu(widen(x).data(), y_ref.data(), a_ref.data(), ref_shape, g);
  kernels::max_pool2d_backward_cpu(widen(dy).data(), a_ref.data(), dx_ref.data(), ref_shape, g);

  const kernels::Pool2dNhwcShape s{n, c, H, W, OH, OW};
  const DeviceBuffer<T> xg(to_nhwc(x, n, c, H * W), shift), dyg(to_nhwc(dy, n, c, OH * OW), shift);
  const auto yg = DeviceBuffer<T>::output(outputs, shift), y_only = DeviceBuffer<T>::output(outputs, shift);
  const auto dxg = DeviceBuffer<T>::output(inputs, shift);
  const auto ag = DeviceBuffer<Index>::output(outputs, shift);
  kernels::max_pool2d_nhwc_forward_cuda(xg.ptr(), yg.ptr(), ag.ptr(), s, g);
  kernels::max_pool2d_nhwc_forward_cuda(xg.ptr(), y_only.ptr(), static_cast<Index*>(nullptr), s, g);
  kernels::max_pool2d_nhwc_backward_cuda(dyg.ptr(), ag.ptr(), dxg.ptr(), s, g);

  REQUIRE(same_bits(to_nchw(yg.download(), n, c, OH * OW), round_to<T>(y_ref)));
  REQUIRE(same_bits(to_nchw(ag.download(), n, c, OH * OW), a_ref));
  REQUIRE(same_bits(to_nchw(y_only.download(), n, c, OH * OW), round_to<T>(y_ref)));
  REQUIRE(same_bits(to_nchw(dxg.download(), n, c, H * W), round_to<T>(dx_ref)));
}

template <class Index>
void require_max_pool_matches_all_dtypes(int64_t n, int64_t c, int64_t H, int64_t W, const Pool2dGeometry& g,
                                         int shift) {
  require_max_pool_matches<float, Index>(n, c, H, W, g, shift);
  require_max_pool_matches<bf16, Index>(n, c, H, W, g, shift);
  require_max_pool_matches<fp16, Index>(n, c, H, W, g, shift);
}

// GlobalMaxPool2d forward (with and without argmax) and backward over n images of hw pixels and
// c channels of T.
template <class T>
void require_global_max_matches(int64_t n, int64_t c, int64_t hw, int shift) {
  const DType dtype = DTypeOf<T>::value;
  INFO("global max " << dtype_name(dtype) << " n " << n << " c " << c << " hw " << hw << " shift " << shift);
  const int64_t planes = n * c;
  const std::vector<T> x = round_to<T>(tie_prone_values(planes * hw, 42));
  const std::vector<T> dy = gradient_values<T>(planes, 41);
  std::vector<float> y_ref(static_cast<size_t>(planes)), dx_ref(static_cast<size_t>(planes * hw));
  std::vector<int32_t> a_ref(static_cast<size_t>(planes));
  kernels::global_max_pool2d_forward_cpu(widen(x).data(), y_ref.data(), a_ref.data(), planes, hw);
  kernels::global_max_pool2d_backward_cpu(widen(dy).data(), a_ref.data(), dx_ref.data(), planes, hw);

  const DeviceBuffer<T> xg(to_nhwc(x, n, c, hw), shift), dyg(dy, shift);  // dy is (N, C) in both layouts
  const auto yg = DeviceBuffer<T>::output(planes, shift), y_only = DeviceBuffer<T>::output(planes, shift);
  const auto ag = DeviceBuffer<int32_t>::output(planes, shift);
  const auto dxg = DeviceBuffer<T>::output(planes * hw, shift);
  kernels::global_max_pool2d_nhwc_forward_cuda(xg.ptr(), yg.ptr(), ag.ptr(), n, hw, c);
  kernels::global_max_pool2d_nhwc_forward_cuda(xg.ptr(), y_only.ptr(), nullptr, n, hw, c);
  kernels::global_max_pool2d_nhwc_backward_cuda(dyg.ptr(), ag.ptr(), dxg.ptr(), n, hw, c);
  REQUIRE(same_bits(yg.download(), round_to<T>(y_ref)));
  REQUIRE(same_bits(ag.download(), a_ref));
  REQUIRE(same_bits(y_only.download(), round_to<T>(y_ref)));
  REQUIRE(same_bits(to_nchw(dxg.download(), n, c, hw), round_to<T>(dx_ref)));
}

// GlobalAvgPool2d forward and backward, the same way.
template <class T>
void require_global_avg_matches(int64_t n, int64_t c, int64_t hw, int shift) {
  const DType dtype = DTypeOf<T>::value;
  INFO("global avg " << dtype_name(dtype) << " n " << n << " c " << c << " hw " << hw << " shift " << shift);
  const int64_t planes = n * c;
  const std::vector<T> x = round_to<T>(test::random_values(planes * hw, 43, -3.f, 5.f));
  const std::vector<T> dy = gradient_values<T>(planes, 44);
  const std::vector<float> xf = widen(x);
  std::vector<float> y_ref(static_cast<size_t>(planes)), dx_ref(static_cast<size_t>(planes * hw));
  kernels::global_avg_pool2d_forward_cpu(xf.data(), y_ref.data(), planes, hw);  // a float64 sum
  kernels::global_avg_pool2d_backward_cpu(widen(dy).data(), dx_ref.data(), planes, hw);
  // What the kernel is defined to compute: the float32 sum in hw order, divided as the NCHW
  // kernels divide.
  std::vector<float> y_sum(static_cast<size_t>(planes));
  for (int64_t p = 0; p < planes; ++p) {
    float sum = 0.f;
    for (int64_t i = 0; i < hw; ++i) sum += xf[p * hw + i];
    y_sum[p] = sum / static_cast<float>(hw);
  }

  const DeviceBuffer<T> xg(to_nhwc(x, n, c, hw), shift), dyg(dy, shift);
  const auto yg = DeviceBuffer<T>::output(planes, shift), dxg = DeviceBuffer<T>::output(planes * hw, shift);
  kernels::global_avg_pool2d_nhwc_forward_cuda(xg.ptr(), yg.ptr(), n, hw, c);
  kernels::global_avg_pool2d_nhwc_backward_cuda(dyg.ptr(), dxg.ptr(), n, hw, c);
  const std::vector<T> y = yg.download();
  REQUIRE(same_bits(y, round_to<T>(y_sum)));
  // Within the float32 sum's error of the float64 mean, plus T's rounding: at most half an ulp,
  // 2^-8 of the value in bfloat16 and 2^-11 in float16.
  const double rtol = std::is_same_v<T, float> ? 1e-5 : std::is_same_v<T, bf16> ? 1.0 / 256 : 1.0 / 2048;
  test::require_close(widen(y), y_ref, rtol, 1e-5, "global_avg_pool2d NHWC vs the float64 reference");
  REQUIRE(same_bits(to_nchw(dxg.download(), n, c, hw), round_to<T>(dx_ref)));
}

// Max-pool cases: (n, H, W, geometry).
struct MaxPoolCase {
  int64_t n, H, W;
  Pool2dGeometry g;
};

}  // namespace
#endif

// c = 64: whole 16-byte channel vectors in every dtype; c = 12: vectors of 4 floats, one channel
// at a time in the half types; c = 3: one channel at a time. A shift of 1 misaligns every pointer.
TEST_CASE("max_pool2d NHWC CUDA kernels give the NCHW kernels' bits in float32, bfloat16, float16", "[cuda][pool]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  const MaxPoolCase cases[] = {
      {2, 8, 8, {2, 2, 2, 2, 0, 0}},   // ResNet-9's pool, even sizes
      {2, 7, 9, {2, 2, 2, 2, 0, 0}},   // odd sizes: the last row and column in no window (dx 0)
      {2, 7, 6, {3, 3, 1, 1, 1, 1}},   // overlapping padded windows, up to 9 per input (the gather)
      {2, 9, 10, {3, 3, 2, 2, 1, 1}},  // overlapping, stride 2 (ResNet-50's stem)
      {3, 3, 3, {3, 3, 3, 3, 0, 0}},   // one window covering the plane
      {1, 8, 11, {2, 3, 3, 4, 0, 0}},  // disjoint windows with gaps between them (stride > kernel)
  };
  for (int64_t c : {64, 12, 3})
    for (int shift : {0, 1})
      for (const MaxPoolCase& k : cases) require_max_pool_matches_all_dtypes<uint8_t>(k.n, c, k.H, k.W, k.g, shift);
#endif
}

TEST_CASE("max_pool2d NHWC CUDA kernels with int32 argmax (windows of more than 256 cells)", "[cuda][pool]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  for (int64_t c : {64, 12, 3})
    for (int shift : {0, 1}) require_max_pool_matches_all_dtypes<int32_t>(2, c, 23, 21, {17, 17, 4, 4, 8, 8}, shift);
#endif
}

TEST_CASE("global pools NHWC CUDA kernels against the NCHW kernels in float32, bfloat16, float16", "[cuda][pool]") {
  MINIDL_REQUIRE_CUDA();
#ifdef MINIDL_WITH_CUDA
  // (n, c, hw): ResNet-9's 4x4 planes of 512 channels, 1x1 planes, planes of 63 and 256 pixels.
  const int64_t shapes[][3] = {{2, 512, 16}, {3, 64, 16}, {2, 12, 1}, {3, 3, 63}, {2, 64, 256}, {2, 12, 63}};
  for (const auto& sh : shapes)
    for (int shift : {0, 1}) {
      require_global_max_matches<float>(sh[0], sh[1], sh[2], shift);
      require_global_max_matches<bf16>(sh[0], sh[1], sh[2], shift);
      require_global_max_matches<fp16>(sh[0], sh[1], sh[2], shift);
      require_global_avg_matches<float>(sh[0], sh[1], sh[2], shift);
      require_global_avg_matches<bf16>(sh[0], sh[1], sh[2], shift);
      require_global_avg_matches<fp16>(sh[0], sh[1], sh[2], shift);
    }
#endif
}
