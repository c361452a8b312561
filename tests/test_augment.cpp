// Augmentation and test-time views: crop (reflect and zero padding), flip and cutout against a
// straightforward reference written here (explicit padded canvas, crop, mirror, normalize in
// float64, color jitter, cut out); the draws' ranges and balance; same seed and epoch -> same batch, another
// epoch or seed -> another; alternating flips; hflip / flip_translate; GPU bit-identical to CPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "data/augment_kernel.h"
#include "data/loader.h"
#include "data/options.h"
#include "data/tta.h"
#include "test_util.h"

using namespace minidl;

namespace {

// N random 3 x h x w images (from the test stream) with label = index mod 10.
Dataset random_dataset(int64_t n, uint64_t seed, int64_t h = 32, int64_t w = 32) {
  Dataset d;
  std::vector<uint8_t> px(static_cast<size_t>(n * 3 * h * w));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(philox(seed, kStreamTest, i).v[0] >> 24);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(i % 10);
  d.images = Tensor::from_vector(px, {n, 3, h, w});
  d.labels = Tensor::from_vector(labels, {n});
  return d;
}

// The padded row/column order of torch's pad(mode='reflect') along an axis of n: x[p] .. x[1],
// x[0] .. x[n - 1], x[n - 2] .. x[n - 1 - p]; zero padding marks the border with -1.
std::vector<int> padded_axis(int p, bool reflect, int n = 32) {
  std::vector<int> idx;
  for (int k = p; k >= 1; --k) idx.push_back(reflect ? k : -1);
  for (int k = 0; k < n; ++k) idx.push_back(k);
  for (int k = 1; k <= p; ++k) idx.push_back(reflect ? n - 1 - k : -1);
  return idx;
}

// Reference: pad -> crop at (dy, dx) -> mirror -> (v / 255 - mean) / std in float64 -> color
// jitter (x + shift) * gain -> cutout, for a 3 x h x w image.
std::vector<double> reference_image(const uint8_t* img, const kernels::ImageDraw& d,
                                    const AugmentOptions& a, const Normalization& norm, int h = 32, int w = 32) {
  const int p = a.crop_padding;
  const std::vector<int> rows = padded_axis(p, a.padding_mode == PaddingMode::Reflect, h);
  const std::vector<int> cols = padded_axis(p, a.padding_mode == PaddingMode::Reflect, w);
  std::vector<double> out(static_cast<size_t>(3 * h * w));
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int cropped_x = d.flip ? w - 1 - x : x;
        const int sy = rows[y + d.dy], sx = cols[cropped_x + d.dx];
        const double v = (sy < 0 || sx < 0) ? 0.0 : img[(c * h + sy) * w + sx];
        const double value = (v / 255.0 - norm.mean[c]) / norm.std[c];
        const bool jitter = a.brightness > 0 || a.contrast > 0;
        out[(c * h + y) * w + x] = jitter ? (value + d.shift) * d.gain : value;
      }
  if (a.cutout > 0)
    for (int y = d.cy - a.cutout / 2; y < d.cy - a.cutout / 2 + a.cutout; ++y)
      for (int x = d.cx - a.cutout / 2; x < d.cx - a.cutout / 2 + a.cutout; ++x)
        if (y >= 0 && y < h && x >= 0 && x < w)
          for (int c = 0; c < 3; ++c) out[(c * h + y) * w + x] = 0.0;
  return out;
}

std::vector<float> batch_floats(const Batch& b) { return b.images.to_vector(); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("augmented batches match the reference for every padding, flip and cutout", "[data][augment]") {
  for (auto [h, w] : {std::pair{32, 32}, {20, 28}, {9, 5}}) {
  const Dataset data = random_dataset(40, 11, h, w);
  const Normalization norm;
  const int64_t elements = 3 * h * w;
  // Indices out of order and repeated: an image's draw depends on its dataset index only.
  const std::vector<int32_t> indices = {7, 3, 39, 0, 7, 21, 22, 5, 38, 12, 1, 30};
  const int64_t b = static_cast<int64_t>(indices.size());
  for (int p : {0, 1, 4})
    for (PaddingMode mode : {PaddingMode::Reflect, PaddingMode::Zero})
      for (int cutout : {0, 8, 5})
        for (int flip_jitter = 0; flip_jitter < 4; ++flip_jitter) {
          const bool flip = flip_jitter & 1, jitter = flip_jitter & 2;
          AugmentOptions a;
          a.crop_padding = p;
          a.padding_mode = mode;
          a.cutout = cutout;
          a.flip = flip;
          a.brightness = jitter ? 0.25 : 0;
          a.contrast = jitter ? 0.2 : 0;
          if (cutout > std::min(h, w)) continue;
          kernels::AugmentParams params = augment_params(norm, &a, 5, 3);
          params.height = h;
          params.width = w;
          std::vector<float> out(static_cast<size_t>(b * elements));
          std::vector<int32_t> labels(static_cast<size_t>(b));
          const kernels::BatchCursor cursor{params, 0};
          kernels::augment_batch_cpu(data.images.data<uint8_t>(), data.labels.data<int32_t>(),
                                     indices.data(), b, &cursor, 0, out.data(), DType::Float32, false, labels.data());
          for (int64_t k = 0; k < b; ++k) {
            const kernels::ImageDraw d = kernels::draw_image_augment(params, indices[k]);
            if (!flip) REQUIRE(d.flip == 0);
            REQUIRE(d.cy < h);
            REQUIRE(d.cx < w);
            const std::vector<double> want = reference_image(
                data.images.data<uint8_t>() + indices[k] * elements, d, a, norm, h, w);
            const std::vector<float> got(out.begin() + k * elements, out.begin() + (k + 1) * elements);
            test::require_close(got, want, 1e-6, 1e-6,
                                str(h, "x", w, " p=", p, " ", to_string(mode), " cutout=", cutout, " flip=", flip,
                                    " jitter=", jitter, " image ", indices[k]));
            REQUIRE(labels[k] == indices[k] % 10);
          }
        }
  }
}

TEST_CASE("random-resized-crop: torchvision's boxes, bilinear values, flip and cutout after", "[data][augment]") {
  for (float x = -7.f; x <= 7.f; x += 0.37f)
    REQUIRE(std::fabs(kernels::exp_small(x) / std::exp(static_cast<double>(x)) - 1) < 2e-6);
  const int h = 24, w = 40;
  const Dataset data = random_dataset(50, 3, h, w);
  AugmentOptions a;
  a.resized_crop = true;
  a.crop_scale = {0.25, 1.0};
  a.flip = true;
  a.cutout = 6;
  Normalization unit;
  unit.mean = {0, 0, 0};
  unit.std = {1.0 / 255, 1.0 / 255, 1.0 / 255};  // the output is the interpolated pixel
  kernels::AugmentParams p = augment_params(unit, &a, 7, 2);
  p.height = h;
  p.width = w;
  std::vector<int32_t> indices(50);
  for (int i = 0; i < 50; ++i) indices[i] = i;
  std::vector<float> out(static_cast<size_t>(50 * 3 * h * w));
  std::vector<int32_t> labels(50);
  const kernels::BatchCursor cursor{p, 0};
  kernels::augment_batch_cpu(data.images.data<uint8_t>(), data.labels.data<int32_t>(), indices.data(), 50, &cursor,
                             0, out.data(), DType::Float32, false, labels.data());
  int full = 0;
  for (int i = 0; i < 50; ++i) {
    const kernels::ImageDraw d = kernels::draw_image_augment(p, i);
    INFO("image " << i << " box " << d.box_y << "," << d.box_x << " " << d.box_h << "x" << d.box_w);
    REQUIRE(d.box_h >= 1);
    REQUIRE(d.box_w >= 1);
    REQUIRE(d.box_y + d.box_h <= h);
    REQUIRE(d.box_x + d.box_w <= w);
    const double fraction = static_cast<double>(d.box_h) * d.box_w / (h * w);
    const double ratio = static_cast<double>(d.box_w) / d.box_h;
    REQUIRE(fraction > 0.25 * 0.8);
    REQUIRE(ratio > 0.75 * 0.8);
    REQUIRE(ratio < 4.0 / 3.0 * 1.25);
    full += fraction == 1.0 ? 1 : 0;
    const uint8_t* img = data.images.data<uint8_t>() + i * 3 * h * w;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const float got = out[static_cast<size_t>(((i * 3 + c) * h + y) * w + x)];
          const int y0c = d.cy - a.cutout / 2, x0c = d.cx - a.cutout / 2;
          if (y >= y0c && y < y0c + a.cutout && x >= x0c && x < x0c + a.cutout) {
            REQUIRE(got == 0.f);
            continue;
          }
          const int xs = d.flip ? w - 1 - x : x;
          const double sy = std::max(0.0, (y + 0.5) * d.box_h / h - 0.5);
          const double sx = std::max(0.0, (xs + 0.5) * d.box_w / w - 0.5);
          const int y0 = static_cast<int>(sy), x0 = static_cast<int>(sx);
          const int y1 = std::min(y0 + 1, d.box_h - 1), x1 = std::min(x0 + 1, d.box_w - 1);
          auto at = [&](int yy, int xx) { return static_cast<double>(img[(c * h + d.box_y + yy) * w + d.box_x + xx]); };
          const double fy = sy - y0, fx = sx - x0;
          const double want = (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) +
                              fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1));
          REQUIRE(std::fabs(got - want) < 1e-3);
        }
  }
  REQUIRE(full < 50);  // boxes vary
  // The padded crop and random-resized-crop are alternatives.
  auto with = [](const char* text) { return DataOptions::from_json(nlohmann::json::parse(text), "data"); };
  REQUIRE_THROWS_WITH(with(R"({"augment": {"crop_padding": 4, "random_resized_crop": {}}})"),
                      Catch::Contains("set crop_padding to 0"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"random_resized_crop": {"scale": [0.5, 0.2]}}})"),
                      Catch::Contains("random_resized_crop.scale"));
  const DataOptions o = with(R"({"augment": {"random_resized_crop": {"scale": [0.35, 1], "ratio": [0.5, 2]}}})");
  REQUIRE(o.augment.resized_crop);
  REQUIRE(DataOptions::from_json(o.to_json(), "data").to_json() == o.to_json());
  REQUIRE(!with("{}").augment.to_json().contains("random_resized_crop"));
}

TEST_CASE("the loader batches images of any size, augmentation limits follow the size", "[data][augment]") {
  const Dataset data = random_dataset(30, 5, 12, 20);
  DataOptions opts;
  opts.augment.crop_padding = 3;
  opts.augment.flip = true;
  opts.augment.cutout = 6;
  Loader loader(data, LoaderOptions::training(opts, 8, 1), Device::cpu());
  loader.start_epoch(0);
  Batch b;
  REQUIRE(loader.next(b));
  REQUIRE(b.images.shape() == Shape({8, 3, 12, 20}));
  opts.augment.crop_padding = 12;  // reflect padding must stay below the 12-pixel height
  REQUIRE_THROWS_WITH(Loader(data, LoaderOptions::training(opts, 8, 1), Device::cpu()),
                      Catch::Contains("data.augment.crop_padding") && Catch::Contains("12x20"));
  opts.augment.crop_padding = 2;
  opts.augment.cutout = 13;
  REQUIRE_THROWS_WITH(Loader(data, LoaderOptions::training(opts, 8, 1), Device::cpu()),
                      Catch::Contains("data.augment.cutout"));
}

namespace {

// The second batch of epoch 2 of an augmented training loader or a plain evaluation one on
// `device`, written in (dtype, format).
Tensor batch_in(const Dataset& data, bool train, DType dtype, MemoryFormat format, const Device& device) {
  DataOptions opts;
  opts.augment.crop_padding = 4;
  opts.augment.flip = true;
  opts.augment.cutout = 6;
  opts.augment.brightness = 0.2;
  opts.augment.contrast = 0.1;
  LoaderOptions lo = train ? LoaderOptions::training(opts, 20, 9) : LoaderOptions::evaluation(opts, 20);
  lo.dtype = dtype;
  lo.format = format;
  Loader loader(data, lo, device);
  loader.start_epoch(2);
  Batch b;
  REQUIRE(loader.next(b));
  REQUIRE(loader.next(b));
  REQUIRE(b.images.dtype() == dtype);
  REQUIRE(b.images.memory_format() == format);
  return b.images;
}

}  // namespace

TEST_CASE("a half or channels-last batch is the float32 batch rounded once and reordered", "[data][augment]") {
  const Dataset data = random_dataset(60, 23);
  for (bool train : {true, false}) {
    const Tensor reference = batch_in(data, train, DType::Float32, MemoryFormat::Contiguous, Device::cpu());
    for (DType d : {DType::Float32, DType::BFloat16, DType::Float16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        INFO(dtype_name(d) << (f == MemoryFormat::ChannelsLast ? " channels_last" : " contiguous")
                           << (train ? " train" : " eval"));
        const Tensor got = batch_in(data, train, d, f, Device::cpu());
        // Widening a half value is exact: equal float vectors are equal half bits.
        REQUIRE(same_bits(got.to(DType::Float32).to_vector(), reference.to(d).to(DType::Float32).to_vector()));
      }
  }
}

TEST_CASE("augment_pixel on hand-made draws: reflect vs zero padding, mirror, cutout", "[data][augment]") {
  std::vector<uint8_t> img(kCifarImageBytes);
  for (int64_t k = 0; k < kCifarImageBytes; ++k) img[k] = static_cast<uint8_t>(k % 251);
  AugmentOptions a;
  a.crop_padding = 2;
  Normalization unit;
  unit.mean = {0, 0, 0};
  unit.std = {1.0 / 255, 1.0 / 255, 1.0 / 255};  // scale 1, shift 0: the output is the pixel
  kernels::AugmentParams reflect = augment_params(unit, &a, 0, 0);
  a.padding_mode = PaddingMode::Zero;
  kernels::AugmentParams zero = augment_params(unit, &a, 0, 0);
  auto at = [&](int c, int y, int x) { return static_cast<float>(img[(c * 32 + y) * 32 + x]); };

  kernels::ImageDraw d{};  // dy = dx = 0: the image moves 2 down and 2 right
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 1, 0, 0) == at(1, 2, 2));
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 1, 1, 3) == at(1, 1, 1));
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 2, 5, 7) == at(2, 3, 5));
  REQUIRE(kernels::augment_pixel(img.data(), d, zero, 1, 0, 0) == 0.f);
  REQUIRE(kernels::augment_pixel(img.data(), d, zero, 1, 1, 3) == 0.f);
  REQUIRE(kernels::augment_pixel(img.data(), d, zero, 2, 5, 7) == at(2, 3, 5));
  d.dy = d.dx = 4;  // moved 2 up and 2 left: the bottom-right border reflects
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 0, 31, 31) == at(0, 29, 29));
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 0, 30, 0) == at(0, 30, 2));
  REQUIRE(kernels::augment_pixel(img.data(), d, zero, 0, 30, 0) == 0.f);
  d.dy = d.dx = 2;  // centered, mirrored
  d.flip = 1;
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 0, 4, 0) == at(0, 4, 31));
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 0, 4, 30) == at(0, 4, 1));
  reflect.cutout = 8;
  d.cy = 0;
  d.cx = 30;  // rows -4..3 and columns 26..33, clipped
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 2, 0, 31) == 0.f);
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 2, 3, 26) == 0.f);
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 2, 4, 26) == at(2, 4, 5));
  REQUIRE(kernels::augment_pixel(img.data(), d, reflect, 2, 3, 25) == at(2, 3, 6));
}

TEST_CASE("augmentation draws cover their ranges evenly", "[data][augment]") {
  AugmentOptions a;
  a.crop_padding = 4;
  a.flip = true;
  a.cutout = 8;
  const kernels::AugmentParams p = augment_params(Normalization(), &a, 1, 2);
  const int n = 18000;
  std::vector<int> dy(9), dx(9), cy(32), cx(32);
  int flips = 0;
  for (int i = 0; i < n; ++i) {
    const kernels::ImageDraw d = kernels::draw_image_augment(p, i);
    REQUIRE(d.dy >= 0);
    REQUIRE(d.dy <= 8);
    REQUIRE(d.dx >= 0);
    REQUIRE(d.dx <= 8);
    REQUIRE(d.cy >= 0);
    REQUIRE(d.cy < 32);
    REQUIRE(d.cx >= 0);
    REQUIRE(d.cx < 32);
    dy[d.dy]++;
    dx[d.dx]++;
    cy[d.cy]++;
    cx[d.cx]++;
    flips += d.flip;
  }
  // Counts within 5 standard deviations of n / k.
  auto even = [&](const std::vector<int>& h) {
    const double e = static_cast<double>(n) / h.size(), sd = std::sqrt(e);
    for (int c : h) REQUIRE(std::fabs(c - e) < 5 * sd);
  };
  even(dy);
  even(dx);
  even(cy);
  even(cx);
  REQUIRE(std::fabs(flips - n / 2.0) < 5 * std::sqrt(n / 4.0));
}

TEST_CASE("color jitter: a shift and gain per image, uniform in their ranges, redrawn every epoch", "[data][augment]") {
  AugmentOptions a;
  a.brightness = 0.1399;
  a.contrast = 0.1308;
  const int n = 20000;
  const kernels::AugmentParams p0 = augment_params(Normalization(), &a, 4, 0);
  const kernels::AugmentParams p1 = augment_params(Normalization(), &a, 4, 1);
  std::vector<int> shift_bins(10), gain_bins(10);
  int same_across_epochs = 0;
  for (int i = 0; i < n; ++i) {
    const kernels::ImageDraw d = kernels::draw_image_augment(p0, i);
    REQUIRE(d.shift >= -0.1399f);
    REQUIRE(d.shift < 0.1399f);
    REQUIRE(d.gain >= 1.f - 0.1308f);
    REQUIRE(d.gain < 1.f + 0.1308f);
    shift_bins[static_cast<size_t>((d.shift + 0.1399f) / (2 * 0.1399f) * 10)]++;
    gain_bins[static_cast<size_t>((d.gain - (1 - 0.1308f)) / (2 * 0.1308f) * 10)]++;
    const kernels::ImageDraw e = kernels::draw_image_augment(p1, i);
    same_across_epochs += e.shift == d.shift || e.gain == d.gain;
  }
  const double expected = n / 10.0, sd = std::sqrt(expected);
  for (int k = 0; k < 10; ++k) {
    REQUIRE(std::fabs(shift_bins[k] - expected) < 5 * sd);
    REQUIRE(std::fabs(gain_bins[k] - expected) < 5 * sd);
  }
  REQUIRE(same_across_epochs < 5);
  // Off: no draw, the value untouched; only brightness on: gain stays 1.
  const kernels::ImageDraw off = kernels::draw_image_augment(augment_params(Normalization(), nullptr, 4, 0), 3);
  REQUIRE(off.shift == 0.f);
  REQUIRE(off.gain == 1.f);
  a.contrast = 0;
  const kernels::ImageDraw shift_only = kernels::draw_image_augment(augment_params(Normalization(), &a, 4, 0), 3);
  REQUIRE(shift_only.shift != 0.f);
  REQUIRE(shift_only.gain == 1.f);
  // The jitter draws come from their own stream: the crop, flip and cutout of an image stay as they were.
  AugmentOptions plain;
  plain.crop_padding = 2;
  plain.flip = true;
  plain.cutout = 4;
  AugmentOptions jittered = plain;
  jittered.brightness = 0.1;
  for (int i = 0; i < 100; ++i) {
    const kernels::ImageDraw x = kernels::draw_image_augment(augment_params(Normalization(), &plain, 8, 2), i);
    const kernels::ImageDraw y = kernels::draw_image_augment(augment_params(Normalization(), &jittered, 8, 2), i);
    REQUIRE((x.dy == y.dy && x.dx == y.dx && x.flip == y.flip && x.cy == y.cy && x.cx == y.cx));
  }
}

TEST_CASE("alternating flips invert every other epoch", "[data][augment]") {
  AugmentOptions a;
  a.flip = true;
  a.flip_mode = FlipMode::Alternating;
  int flipped0 = 0;
  for (int i = 0; i < 2000; ++i) {
    const int f0 = kernels::draw_image_augment(augment_params(Normalization(), &a, 9, 0), i).flip;
    const int f1 = kernels::draw_image_augment(augment_params(Normalization(), &a, 9, 1), i).flip;
    const int f6 = kernels::draw_image_augment(augment_params(Normalization(), &a, 9, 6), i).flip;
    REQUIRE(f1 == 1 - f0);
    REQUIRE(f6 == f0);
    flipped0 += f0;
  }
  REQUIRE(flipped0 > 850);
  REQUIRE(flipped0 < 1150);
}

TEST_CASE("same seed and epoch give the same batch, another epoch or seed another", "[data][augment]") {
  const Dataset data = random_dataset(64, 3);
  DataOptions opts;
  opts.augment.crop_padding = 4;
  opts.augment.flip = true;
  opts.augment.cutout = 8;
  auto first_batch = [&](uint64_t seed, int64_t epoch) {
    Loader loader(data, LoaderOptions::training(opts, 32, seed), Device::cpu());
    loader.start_epoch(epoch);
    Batch b;
    REQUIRE(loader.next(b));
    return batch_floats(b);
  };
  const std::vector<float> a = first_batch(1, 4);
  REQUIRE(same_bits(a, first_batch(1, 4)));
  REQUIRE(!same_bits(a, first_batch(1, 5)));
  REQUIRE(!same_bits(a, first_batch(2, 4)));
}

TEST_CASE("data options: defaults, round trip and errors naming the key path", "[data][config]") {
  const DataOptions defaults = DataOptions::from_json(nlohmann::json::object(), "data");
  REQUIRE(defaults.augment.crop_padding == 0);
  REQUIRE(!defaults.augment.flip);
  REQUIRE(defaults.normalize.mean[0] == 0.4914);
  const nlohmann::json j = nlohmann::json::parse(R"({"dir": "/x", "train_limit": 100,
      "std": [0.25, 0.25, 0.25],
      "augment": {"crop_padding": 4, "padding_mode": "zero", "flip": true, "flip_mode": "alternating", "cutout": 8}})");
  const DataOptions o = DataOptions::from_json(j, "data");
  REQUIRE(o.dir == "/x");
  REQUIRE(o.train_limit == 100);
  REQUIRE(o.normalize.std[2] == 0.25);
  REQUIRE(o.augment.padding_mode == PaddingMode::Zero);
  REQUIRE(o.augment.flip_mode == FlipMode::Alternating);
  REQUIRE(DataOptions::from_json(o.to_json(), "data").to_json() == o.to_json());
  REQUIRE(!o.to_json()["augment"].contains("color_jitter"));

  auto with = [](const char* text) { return DataOptions::from_json(nlohmann::json::parse(text), "data"); };
  const DataOptions jitter = with(R"({"augment": {"color_jitter": {"brightness": 0.14, "contrast": 0.13}}})");
  REQUIRE(jitter.augment.brightness == 0.14);
  REQUIRE(jitter.augment.contrast == 0.13);
  REQUIRE(DataOptions::from_json(jitter.to_json(), "data").to_json() == jitter.to_json());
  REQUIRE(jitter.to_json()["augment"]["color_jitter"]["contrast"] == 0.13);
  REQUIRE_THROWS_WITH(with(R"({"augment": {"color_jitter": {"contrast": 1}}})"),
                      Catch::Contains("data.augment.color_jitter.contrast") && Catch::Contains("< 1"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"color_jitter": {"brightness": -0.1}}})"),
                      Catch::Contains("data.augment.color_jitter.brightness"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"color_jitter": {"brightnes": 0.1}}})"),
                      Catch::Contains("data.augment.color_jitter.brightnes"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"color_jitter": 0.1}})"),
                      Catch::Contains("data.augment.color_jitter") && Catch::Contains("expected an object"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"cutuot": 8}})"), Catch::Contains("data.augment.cutuot"));
  REQUIRE_THROWS_WITH(with(R"({"trian_limit": 8})"), Catch::Contains("data.trian_limit"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"padding_mode": "edge"}})"),
                      Catch::Contains("data.augment.padding_mode") && Catch::Contains("reflect"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"crop_padding": 4000}})"), Catch::Contains("data.augment.crop_padding"));
  REQUIRE_THROWS_WITH(with(R"({"augment": {"flip": "yes"}})"), Catch::Contains("data.augment.flip"));
  REQUIRE_THROWS_WITH(with(R"({"mean": [0.5, 0.5]})"), Catch::Contains("data.mean"));
  REQUIRE_THROWS_WITH(with(R"({"std": [0.5, 0, 0.5]})"), Catch::Contains("data.std[1]"));
}

namespace {

// Reference for flip_translate: m = flip ? mirror(in) : in, then out(y, x) = m(y - dy, x - dx)
// read through an explicitly reflected index list.
std::vector<float> reference_flip_translate(const std::vector<float>& in, int64_t planes, int h, int w,
                                            bool flip, int dy, int dx) {
  auto reflected = [](int i, int n) {
    std::vector<int> axis;  // axis[i + n] for i in [-n, 2n)
    for (int k = -n; k < 2 * n; ++k) axis.push_back(k < 0 ? -k : k >= n ? 2 * n - 2 - k : k);
    return axis[i + n];
  };
  std::vector<float> out(in.size());
  for (int64_t p = 0; p < planes; ++p)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int my = reflected(y - dy, h), mx = reflected(x - dx, w);
        const int sx = flip ? w - 1 - mx : mx;
        out[(p * h + y) * w + x] = in[(p * h + my) * w + sx];
      }
  return out;
}

}  // namespace

TEST_CASE("hflip and flip_translate match the reference on ragged shapes", "[data][tta]") {
  const Tensor x = test::random_tensor({3, 5, 7, 9}, 21);
  const std::vector<float> xv = x.to_vector();
  std::vector<float> mirrored(xv.size());
  for (int64_t p = 0; p < 15; ++p)
    for (int y = 0; y < 7; ++y)
      for (int c = 0; c < 9; ++c) mirrored[(p * 7 + y) * 9 + c] = xv[(p * 7 + y) * 9 + 8 - c];
  REQUIRE(hflip(x).to_vector() == mirrored);
  for (bool flip : {false, true})
    for (auto [dy, dx] : {std::pair{0, 0}, {-1, -1}, {1, 1}, {2, -3}, {-6, 8}}) {
      INFO("flip " << flip << " dy " << dy << " dx " << dx);
      REQUIRE(flip_translate(x, flip, dy, dx).to_vector() ==
              reference_flip_translate(xv, 15, 7, 9, flip, dy, dx));
    }
  // A one-pixel shift down moves row 0 to row 1 and reflects row 1 into row 0.
  const std::vector<float> down = flip_translate(x, false, 1, 0).to_vector();
  REQUIRE(down[9 + 4] == xv[4]);
  REQUIRE(down[4] == xv[9 + 4]);
  REQUIRE_THROWS_WITH(flip_translate(x, false, 7, 0), Catch::Contains("|dy| < H"));
  REQUIRE_THROWS_WITH(hflip(Tensor::zeros({3, 4})), Catch::Contains("flip_translate"));
}

TEST_CASE("GPU batches are bit-identical to CPU batches", "[data][augment][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (auto [h, w] : {std::pair{32, 32}, {24, 40}}) {
  const Dataset data = random_dataset(777, 17, h, w);  // odd size: a ragged tail for evaluation
  for (const char* flip_mode : {"random", "alternating"})
    for (const char* padding : {"reflect", "zero", "resized_crop"}) {
      DataOptions opts;
      opts.augment.resized_crop = std::string(padding) == "resized_crop";
      if (opts.augment.resized_crop) padding = "reflect";
      opts.augment.crop_padding = opts.augment.resized_crop ? 0 : 4;
      opts.augment.padding_mode = from_string<PaddingMode>(padding, "padding");
      opts.augment.flip = true;
      opts.augment.flip_mode = from_string<FlipMode>(flip_mode, "flip_mode");
      opts.augment.cutout = 7;
      // The jitter with the alternating flips, none with the random ones.
      opts.augment.brightness = std::string(flip_mode) == "alternating" ? 0.1399 : 0;
      opts.augment.contrast = std::string(flip_mode) == "alternating" ? 0.1308 : 0;
      for (bool train : {true, false}) {
        const LoaderOptions lo =
            train ? LoaderOptions::training(opts, 100, 42) : LoaderOptions::evaluation(opts, 100);
        Loader cpu(data, lo, Device::cpu());
        Loader gpu(data, lo, Device::cuda());
        REQUIRE(cpu.batches_per_epoch() == gpu.batches_per_epoch());
        for (int64_t epoch : {0, 1, 7}) {
          cpu.start_epoch(epoch);
          gpu.start_epoch(epoch);
          Batch bc, bg;
          int64_t batches = 0;
          while (cpu.next(bc)) {
            REQUIRE(gpu.next(bg));
            INFO(flip_mode << " " << padding << (opts.augment.resized_crop ? " resized_crop" : "") << (train ? " train" : " eval") << " epoch " << epoch
                           << " batch " << batches);
            REQUIRE(bg.images.is_cuda());
            REQUIRE(bg.images.shape() == bc.images.shape());
            REQUIRE(same_bits(batch_floats(bg), batch_floats(bc)));
            REQUIRE(bg.labels.values<int32_t>() == bc.labels.values<int32_t>());
            ++batches;
          }
          REQUIRE(!gpu.next(bg));
          REQUIRE(batches == cpu.batches_per_epoch());
        }
      }
    }
  }
}

TEST_CASE("GPU half and channels-last batches are bit-identical to the CPU's", "[data][augment][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const Dataset& data : {random_dataset(60, 29), random_dataset(60, 29, 24, 40)})
  for (bool train : {true, false})
    for (DType d : {DType::Float32, DType::BFloat16, DType::Float16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        INFO(dtype_name(d) << (f == MemoryFormat::ChannelsLast ? " channels_last" : " contiguous")
                           << (train ? " train" : " eval"));
        const Tensor cpu = batch_in(data, train, d, f, Device::cpu());
        const Tensor gpu = batch_in(data, train, d, f, Device::cuda());
        REQUIRE(gpu.is_cuda());
        REQUIRE(same_bits(gpu.to(DType::Float32).to_vector(), cpu.to(DType::Float32).to_vector()));
      }
}

TEST_CASE("hflip and flip_translate on the GPU equal the CPU", "[data][tta][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{3, 5, 7, 9}, Shape{513, 3, 32, 32}, Shape{1, 37, 1, 33}}) {
    const Tensor x = test::random_tensor(shape, 5);
    const Tensor xg = x.to(Device::cuda());
    REQUIRE(hflip(xg).to_vector() == hflip(x).to_vector());
    for (auto [dy, dx] : {std::pair{-1, -1}, {1, 1}, {0, 2}}) {
      if (std::abs(dy) >= shape[2] || std::abs(dx) >= shape[3]) continue;
      INFO(shape_str(shape) << " dy " << dy << " dx " << dx);
      for (bool flip : {false, true})
        REQUIRE(flip_translate(xg, flip, dy, dx).to_vector() == flip_translate(x, flip, dy, dx).to_vector());
    }
  }
}
