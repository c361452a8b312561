// Conv3d and ConvTranspose3d: the CPU path's forward and backward against the float64 definition
// in every dtype and layout (channels_last_3d: the same bits as NCDHW), thread-count
// independence, the modules' keys and errors; [cuda]: cuDNN's N-d convolutions, in every dtype
// and layout, against the definition.
#include "core/autograd.h"
#include "layers/conv/conv3d.h"
#include "layers/conv/conv3d_kernels.h"
#include "layers/registry.h"
#include "tests/conv_reference.h"

using namespace minidl;
using namespace minidl::test;

namespace {

// A convolution problem; for the transposed op, x is the problem's output and y its input (its
// output_padding what makes y's size the problem's input size).
struct Case {
  Conv3dShape s;
  Size3d output_padding() const {
    return Size3d(s.d - ((s.od() - 1) * s.sd - 2 * s.pd + s.kd), s.h - ((s.oh() - 1) * s.sh - 2 * s.ph + s.kh),
                  s.w - ((s.ow() - 1) * s.sw - 2 * s.pw + s.kw));
  }
};

// {n, c, d, h, w, o, kd, kh, kw, sd, sh, sw, pd, ph, pw}
const Case kCases[] = {
    {{2, 3, 5, 6, 4, 4, 3, 3, 3, 1, 1, 1, 1, 1, 1}},  // the UNet's 3x3x3 "same" convolution
    {{2, 4, 4, 5, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0}},  // 1x1x1 (the UNet's head)
    {{1, 2, 7, 6, 5, 3, 3, 3, 3, 2, 2, 2, 1, 1, 1}},  // strided
    {{2, 2, 6, 5, 7, 3, 3, 1, 2, 2, 1, 1, 1, 0, 1}},  // anisotropic kernel, stride and padding
    {{2, 4, 8, 8, 8, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0}},  // kernel = stride 2: the up-sampling's adjoint
    {{1, 2, 7, 5, 6, 2, 3, 3, 3, 2, 2, 2, 1, 1, 1}},  // transposed: output_padding (0, 0, 1)
};

Shape xs(const Conv3dShape& s) { return {s.n, s.c, s.d, s.h, s.w}; }
Shape ws(const Conv3dShape& s) { return {s.o, s.c, s.kd, s.kh, s.kw}; }
Shape ys(const Conv3dShape& s) { return {s.n, s.o, s.od(), s.oh(), s.ow()}; }

std::string name(const Case& c, bool transpose) {
  const Conv3dShape& s = c.s;
  return str(transpose ? "transposed " : "", "x (", s.n, ", ", s.c, ", ", s.d, ", ", s.h, ", ", s.w, ") o ", s.o, " k ",
             s.kd, "x", s.kh, "x", s.kw, " s ", s.sd, "x", s.sh, "x", s.sw, " p ", s.pd, "x", s.ph, "x", s.pw);
}

// Calls f(yi, xi, wi) for every product of the convolution: output element yi, input element xi
// and weight element wi (NCDHW / (o, c, k) indices), inside the volume.
template <class F>
void for_each_product(const Conv3dShape& s, F&& f) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t z = 0; z < s.od(); ++z)
        for (int64_t y = 0; y < s.oh(); ++y)
          for (int64_t x = 0; x < s.ow(); ++x)
            for (int64_t c = 0; c < s.c; ++c)
              for (int64_t i = 0; i < s.kd; ++i)
                for (int64_t j = 0; j < s.kh; ++j)
                  for (int64_t l = 0; l < s.kw; ++l) {
                    const int64_t iz = z * s.sd - s.pd + i, iy = y * s.sh - s.ph + j, ix = x * s.sw - s.pw + l;
                    if (iz < 0 || iz >= s.d || iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                    f((((n * s.o + o) * s.od() + z) * s.oh() + y) * s.ow() + x,
                      (((n * s.c + c) * s.d + iz) * s.h + iy) * s.w + ix,
                      (((o * s.c + c) * s.kd + i) * s.kh + j) * s.kw + l);
                  }
}

struct Run {
  std::vector<float> y, dx, dw, db;
};

// The float64 definition. Conv3d: y = conv(x) + b. Transposed: x holds the problem's output
// shape, y = its adjoint applied to x, + b over the problem's input channels.
Run reference(const Case& c, bool transpose, const std::vector<float>& x, const std::vector<float>& w,
              const std::vector<float>& b, const std::vector<float>& dy) {
  const Conv3dShape& s = c.s;
  const size_t in = static_cast<size_t>(shape_numel(xs(s))), out = static_cast<size_t>(shape_numel(ys(s)));
  std::vector<double> y(transpose ? in : out, 0.0), dx(transpose ? out : in, 0.0), dw(w.size(), 0.0), db(b.size(), 0.0);
  const int64_t channels = transpose ? s.c : s.o;
  const int64_t spatial = static_cast<int64_t>(y.size()) / (s.n * channels);
  for (size_t i = 0; i < y.size(); ++i) y[i] = b[(i / spatial) % channels];
  for (size_t i = 0; i < dy.size(); ++i) db[(i / spatial) % channels] += dy[i];
  for_each_product(s, [&](int64_t yi, int64_t xi, int64_t wi) {
    if (transpose) {  // x is (n, o, out...), y (n, c, in...)
      y[xi] += static_cast<double>(x[yi]) * w[wi];
      dx[yi] += static_cast<double>(dy[xi]) * w[wi];
      dw[wi] += static_cast<double>(x[yi]) * dy[xi];
    } else {
      y[yi] += static_cast<double>(x[xi]) * w[wi];
      dx[xi] += static_cast<double>(dy[yi]) * w[wi];
      dw[wi] += static_cast<double>(x[xi]) * dy[yi];
    }
  });
  auto narrow = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  return {narrow(y), narrow(dx), narrow(dw), narrow(db)};
}

// Forward and backward through autograd on `dev` in `t` and `format`: float32 leaves holding
// values of `t`, cast inside the graph. `ref` gets the definition on the same values.
Run run(const Case& c, bool transpose, Device dev, DType t, MemoryFormat format, uint64_t seed, Run* ref) {
  const Conv3dShape& s = c.s;
  auto leaf = [&](const Shape& shape, uint64_t sd) {
    Tensor v = random_tensor(shape, sd, -1.f, 1.f, dev).to(t).to(DType::Float32);
    v.set_requires_grad(true);
    return v;
  };
  const Shape in = transpose ? ys(s) : xs(s), out = transpose ? xs(s) : ys(s);
  const int64_t out_channels = transpose ? s.c : s.o;
  Tensor x = leaf(in, seed), w = leaf(ws(s), seed + 1), b = leaf({out_channels}, seed + 2);
  const Tensor dy = random_tensor(out, seed + 3, -1.f, 1.f, dev).to(t);
  const Tensor y = transpose
                       ? conv_transpose3d(x.to(t, format), w.to(t), b.to(t), Size3d(s.sd, s.sh, s.sw),
                                          Size3d(s.pd, s.ph, s.pw), c.output_padding())
                       : conv3d(x.to(t, format), w.to(t), b.to(t), Size3d(s.sd, s.sh, s.sw), Size3d(s.pd, s.ph, s.pw));
  REQUIRE(y.shape() == out);
  REQUIRE(y.memory_format() == format);
  REQUIRE(y.dtype() == t);
  autograd::backward(y, dy.to(format));
  if (ref)
    *ref = reference(c, transpose, x.to_vector(), w.to_vector(), b.to_vector(), dy.to(DType::Float32).to_vector());
  return {y.to(DType::Float32).contiguous().to_vector(), x.grad().contiguous().to_vector(), w.grad().to_vector(),
          b.grad().to_vector()};
}

// float32 sums for float32; one rounding of each output for the half types (2 ulp of the
// tensor's largest value leaves room for the float32 sum beneath it).
double tolerance(DType t) { return t == DType::Float32 ? 1e-5 : (t == DType::BFloat16 ? 2.0 / 256 : 2.0 / 2048); }

void require_matches(const Run& got, const Run& want, double tol, const std::string& what) {
  require_close_scaled(got.y, want.y, tol, "y " + what);
  require_close_scaled(got.dx, want.dx, tol, "dx " + what);
  require_close_scaled(got.dw, want.dw, tol, "dw " + what);
  require_close_scaled(got.db, want.db, tol, "db " + what);
}

const MemoryFormat kFormats[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d};
const DType kDtypes[] = {DType::Float32, DType::BFloat16, DType::Float16};

void require_bits_equal(const Run& a, const Run& b) {
  CHECK(a.y == b.y);
  CHECK(a.dx == b.dx);
  CHECK(a.dw == b.dw);
  CHECK(a.db == b.db);
}

}  // namespace

TEST_CASE("conv3d and conv_transpose3d on the CPU match the float64 definition in every dtype and layout", "[conv3d]") {
  for (bool transpose : {false, true})
    for (const Case& c : kCases)
      for (DType t : kDtypes) {
        Run contiguous;
        for (MemoryFormat f : kFormats) {
          const std::string what = str(name(c, transpose), " ", dtype_name(t), " ", memory_format_name(f));
          INFO(what);
          Run ref;
          const Run got = run(c, transpose, Device::cpu(), t, f, 31, &ref);
          require_matches(got, ref, tolerance(t), what);
          // The CPU convolves NCDHW: channels_last_3d is reordered around it, the same bits.
          if (f == MemoryFormat::Contiguous)
            contiguous = got;
          else
            require_bits_equal(got, contiguous);
        }
      }
}

TEST_CASE("conv3d on the CPU gives the same bits on one thread and on two", "[conv3d]") {
  // Two samples, several depth slabs each (the column buffer of a slab is capped), above the
  // size where the CPU path goes parallel.
  const Case c{{2, 16, 24, 20, 20, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1}};
  REQUIRE(c.s.flops() > 4e6);
  REQUIRE(c.s.taps() * c.s.oh() * c.s.ow() * 4 * c.s.od() > (4 << 20));
  for (bool transpose : {false, true}) {
    auto at = [&](int threads) {
      OmpThreads scope(threads);
      return run(c, transpose, Device::cpu(), DType::Float32, MemoryFormat::Contiguous, 5, nullptr);
    };
    require_bits_equal(at(1), at(2));
  }
}

TEST_CASE("Conv3d and ConvTranspose3d build from JSON, print their keys back and name bad ones", "[conv3d]") {
  auto build = [](const nlohmann::json& spec) { return build_layer(spec, "model.layers[0]"); };
  const auto conv = build({{"type", "Conv3d"},
                           {"in_channels", 2},
                           {"out_channels", 4},
                           {"kernel_size", {3, 1, 1}},
                           {"stride", {2, 1, 1}},
                           {"padding", {1, 0, 0}}});
  CHECK(conv->describe() == "Conv3d 2->4 k3x1x1 s2x1x1");
  CHECK(conv->to_json()["kernel_size"] == nlohmann::json({3, 1, 1}));
  const Tensor y = (*conv)(random_tensor({1, 2, 6, 3, 3}, 1));
  CHECK(y.shape() == Shape{1, 4, 3, 3, 3});
  const auto up =
      build({{"type", "ConvTranspose3d"}, {"in_channels", 4}, {"out_channels", 2}, {"kernel_size", 2}, {"stride", 2}});
  CHECK(up->describe() == "ConvTranspose3d 4->2 k2 s2");
  CHECK((*up)(y).shape() == Shape{1, 2, 6, 6, 6});
  CHECK(error_of([&] {
          build({{"type", "Conv3d"}, {"in_channels", 2}, {"out_channels", 4}, {"kernel_size", {3, 3}}});
        }).find("model.layers[0].kernel_size: expected an integer or a list of three, got 2 values") !=
        std::string::npos);
  CHECK(error_of([&] {
          build({{"type", "ConvTranspose3d"},
                 {"in_channels", 2},
                 {"out_channels", 4},
                 {"kernel_size", 3},
                 {"stride", 2},
                 {"output_padding", 2}});
        }).find("model.layers[0].output_padding: must be smaller than stride (2), got 2") != std::string::npos);
  CHECK(error_of([&] {
          (*conv)(random_tensor({1, 3, 6, 3, 3}, 1));
        }).find("expected input (N, 2, D, H, W)") != std::string::npos);
  CHECK(error_of([&] { (*conv)(random_tensor({1, 2, 6, 3}, 1)); }).find("got (1, 2, 6, 3)") != std::string::npos);
}

TEST_CASE("conv3d and conv_transpose3d on CUDA match the definition in every dtype and layout", "[conv3d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (bool deterministic : {true, false}) {
    SettingsGuard g(/*tf32=*/false, deterministic);
    for (bool transpose : {false, true})
      for (const Case& c : kCases)
        for (DType t : kDtypes)
          for (MemoryFormat f : kFormats) {
            const std::string what = str(deterministic ? "heuristic " : "searched ", name(c, transpose), " ",
                                         dtype_name(t), " ", memory_format_name(f));
            INFO(what);
            Run ref;
            const Run got = run(c, transpose, Device::cuda(), t, f, 41, &ref);
            require_matches(got, ref, tolerance(t), what);
          }
  }
}

TEST_CASE("conv3d on CUDA in deterministic mode repeats its bits", "[conv3d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  SettingsGuard g(/*tf32=*/true, /*deterministic=*/true);
  const Case c{{2, 16, 12, 12, 12, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1}};
  for (MemoryFormat f : kFormats)
    for (bool transpose : {false, true})
      require_bits_equal(run(c, transpose, Device::cuda(), DType::BFloat16, f, 9, nullptr),
                         run(c, transpose, Device::cuda(), DType::BFloat16, f, 9, nullptr));
}
