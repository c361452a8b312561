// The volume layers beside the convolutions: MaxPool3d against its definition (forward and the
// gradient summed over overlapping windows), cat_channels and SkipConnection, GroupNorm and
// BatchNorm3d on (N, C, D, H, W) (the 2-d kernels' bits on the volume seen as (N, C, D*H, W)), all
// in NCDHW and channels_last_3d and every dtype; [cuda]: the same bits as the CPU where the
// math is exact (pooling, concatenation), the CPU's values within a float32 sum otherwise.
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "layers/containers/skip_connection.h"
#include "layers/norm/batchnorm2d.h"
#include "layers/norm/norm.h"
#include "layers/pool/max_pool3d.h"
#include "layers/registry.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::test;

namespace {

const MemoryFormat kFormats[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d};
const DType kDtypes[] = {DType::Float32, DType::BFloat16, DType::Float16};

struct PoolCase {
  Shape x;
  Size3d k, s, p;
};
const PoolCase kPools[] = {
    {{2, 3, 4, 6, 8}, 2, 2, 0},  // the UNet's down-sampling
    {{1, 2, 7, 5, 6}, 3, 2, 1},  // overlapping windows, padding
    {{2, 2, 5, 4, 6}, Size3d(1, 2, 3), Size3d(1, 2, 2), Size3d(0, 1, 1)},
};

// The definition: y = the max over the window (the first in window order on ties), dx = dy summed
// over the windows whose max each input is; float64 sums.
void pool_reference(const PoolCase& c, const std::vector<float>& x, const std::vector<float>& dy, std::vector<float>& y,
                    std::vector<double>& dx) {
  const int64_t N = c.x[0], C = c.x[1], D = c.x[2], H = c.x[3], W = c.x[4];
  const int64_t OD = (D + 2 * c.p.d - c.k.d) / c.s.d + 1, OH = (H + 2 * c.p.h - c.k.h) / c.s.h + 1,
                OW = (W + 2 * c.p.w - c.k.w) / c.s.w + 1;
  y.assign(static_cast<size_t>(N * C * OD * OH * OW), 0.f);
  dx.assign(x.size(), 0.0);
  size_t o = 0;
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t z = 0; z < OD; ++z)
      for (int64_t v = 0; v < OH; ++v)
        for (int64_t u = 0; u < OW; ++u, ++o) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t arg = -1;
          for (int64_t i = 0; i < c.k.d; ++i)
            for (int64_t j = 0; j < c.k.h; ++j)
              for (int64_t l = 0; l < c.k.w; ++l) {
                const int64_t iz = z * c.s.d - c.p.d + i, iy = v * c.s.h - c.p.h + j, ix = u * c.s.w - c.p.w + l;
                if (iz < 0 || iz >= D || iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                const int64_t at = ((nc * D + iz) * H + iy) * W + ix;
                if (arg < 0 || x[at] > best) {
                  best = x[at];
                  arg = at;
                }
              }
          y[o] = best;
          dx[arg] += dy[o];
        }
}

struct Out {
  std::vector<float> y, dx;
};

Out pool_run(const PoolCase& c, Device dev, DType t, MemoryFormat f, std::vector<float>* x_values = nullptr,
             std::vector<float>* dy_values = nullptr) {
  Tensor x = random_tensor(c.x, 3, -1.f, 1.f, dev).to(t).to(DType::Float32);
  x.set_requires_grad(true);
  Tensor y = max_pool3d(x.to(t, f), c.k, c.s, c.p);
  REQUIRE(y.memory_format() == f);
  const Tensor dy = random_tensor(y.shape(), 4, -1.f, 1.f, dev).to(t);
  autograd::backward(y, dy.to(f));
  if (x_values) *x_values = x.to_vector();
  if (dy_values) *dy_values = dy.to(DType::Float32).to_vector();
  return {y.to(DType::Float32).contiguous().to_vector(), x.grad().contiguous().to_vector()};
}

// A (2, 8, D, H, W) volume and the same values as the 4-d (2, 8, D*H, W) image, in format f.
struct Volume {
  Tensor x5, x4;
};
Volume volume(DType t, MemoryFormat f5, uint64_t seed) {
  const Tensor base = random_tensor({2, 8, 3, 4, 5}, seed, -2.f, 3.f).to(t);
  return {base.to(f5),
          base.reshape({2, 8, 12, 5}).to(f5 == MemoryFormat::Contiguous ? f5 : MemoryFormat::ChannelsLast)};
}

std::vector<float> values(const Tensor& t) { return t.to(DType::Float32).contiguous().to_vector(); }

}  // namespace

TEST_CASE("max_pool3d on the CPU matches its definition in every dtype and layout", "[volume][pool]") {
  for (const PoolCase& c : kPools)
    for (DType t : kDtypes) {
      Out contiguous;
      for (MemoryFormat f : kFormats) {
        INFO(shape_str(c.x) << " k " << size3d_str(c.k) << " s " << size3d_str(c.s) << " " << dtype_name(t) << " "
                            << memory_format_name(f));
        std::vector<float> xv, dyv, want_y;
        std::vector<double> want_dx;
        const Out got = pool_run(c, Device::cpu(), t, f, &xv, &dyv);
        pool_reference(c, xv, dyv, want_y, want_dx);
        CHECK(got.y == want_y);  // the max is exact in every dtype
        // A float sum of the chosen dy rounded once to t.
        require_close(got.dx, want_dx, t == DType::Float32 ? 1e-6 : (t == DType::BFloat16 ? 8e-3 : 1e-3), 1e-6, "dx");
        if (f == MemoryFormat::Contiguous) {
          contiguous = got;
        } else {
          CHECK(got.y == contiguous.y);
          CHECK(got.dx == contiguous.dx);
        }
      }
    }
}

TEST_CASE("MaxPool3d builds from JSON with stride defaulting to kernel_size and names bad keys", "[volume][pool]") {
  const auto pool = build_layer({{"type", "MaxPool3d"}, {"kernel_size", 2}}, "model.layers[1]");
  CHECK(pool->describe() == "MaxPool3d k2");
  CHECK(pool->to_json()["stride"] == 2);
  CHECK((*pool)(random_tensor({1, 2, 4, 6, 8}, 1)).shape() == Shape{1, 2, 2, 3, 4});
  CHECK(error_of([] {
          build_layer({{"type", "MaxPool3d"}, {"kernel_size", 2}, {"padding", 2}}, "model.layers[1]");
        }).find("model.layers[1].padding: must be at most half of kernel_size (2), got 2") != std::string::npos);
}

TEST_CASE("cat_channels and SkipConnection join x and the body's output along the channels", "[volume][skip]") {
  for (MemoryFormat f : kFormats)
    for (DType t : kDtypes) {
      INFO(memory_format_name(f) << " " << dtype_name(t));
      Tensor a = random_tensor({2, 3, 2, 3, 4}, 1).to(t).to(DType::Float32), b = random_tensor({2, 5, 2, 3, 4}, 2);
      b = b.to(t).to(DType::Float32);
      a.set_requires_grad(true);
      b.set_requires_grad(true);
      const Tensor y = cat_channels(a.to(t, f), b.to(t, f));
      REQUIRE(y.shape() == Shape{2, 8, 2, 3, 4});
      REQUIRE(y.memory_format() == f);
      const std::vector<float> yv = values(y), av = a.to_vector(), bv = b.to_vector();
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 8; ++c)
          for (int64_t p = 0; p < 24; ++p)
            REQUIRE(yv[static_cast<size_t>((n * 8 + c) * 24 + p)] ==
                    (c < 3 ? av[static_cast<size_t>((n * 3 + c) * 24 + p)]
                           : bv[static_cast<size_t>((n * 5 + c - 3) * 24 + p)]));
      const Tensor dy = random_tensor(y.shape(), 3).to(t);
      autograd::backward(y, dy.to(f));
      const std::vector<float> dyv = dy.to(DType::Float32).to_vector(), da = a.grad().to_vector(),
                               db = b.grad().to_vector();
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 8; ++c)
          for (int64_t p = 0; p < 24; ++p)
            REQUIRE(dyv[static_cast<size_t>((n * 8 + c) * 24 + p)] ==
                    (c < 3 ? da[static_cast<size_t>((n * 3 + c) * 24 + p)]
                           : db[static_cast<size_t>((n * 5 + c - 3) * 24 + p)]));
    }
  const auto skip = build_layer(
      {{"type", "SkipConnection"},
       {"body",
        {{{"type", "MaxPool3d"}, {"kernel_size", 2}},
         {{"type", "ConvTranspose3d"}, {"in_channels", 2}, {"out_channels", 3}, {"kernel_size", 2}, {"stride", 2}}}}},
      "model.layers[0]");
  CHECK((*skip)(random_tensor({1, 2, 4, 4, 4}, 5)).shape() == Shape{1, 5, 4, 4, 4});
  CHECK(skip->to_json()["body"].size() == 2);
  // An odd size: pooling floors it and the up-sampling cannot give it back.
  CHECK(error_of([&] {
          (*skip)(random_tensor({1, 2, 5, 4, 4}, 5));
        }).find("body output (1, 3, 4, 4, 4) does not match its input (1, 2, 5, 4, 4) outside the channels") !=
        std::string::npos);
}

TEST_CASE("GroupNorm and BatchNorm3d on volumes are the 2-d kernels' bits on (N, C, D*H, W)", "[volume][norm]") {
  for (MemoryFormat f : kFormats)
    for (DType t : kDtypes)
      for (auto act : {norm::NormActivation::None, norm::NormActivation::ReLU}) {
        INFO(memory_format_name(f) << " " << dtype_name(t) << (act == norm::NormActivation::ReLU ? " +ReLU" : ""));
        const Volume v = volume(t, f, 11);
        const Tensor w = random_tensor({8}, 12), b = random_tensor({8}, 13);
        const Tensor g5 = group_norm(v.x5, 4, w, b, 1e-5, act), g4 = group_norm(v.x4, 4, w, b, 1e-5, act);
        CHECK(g5.shape() == v.x5.shape());
        CHECK(g5.memory_format() == f);
        CHECK(values(g5) == values(g4));
        Tensor rm5 = Tensor::zeros({8}), rv5 = Tensor::full({8}, 1.f), rm4 = Tensor::zeros({8}),
               rv4 = Tensor::full({8}, 1.f);
        const Tensor b5 = batch_norm(v.x5, rm5, rv5, w, b, true, 0.1, 1e-5, act);
        const Tensor b4 = batch_norm(v.x4, rm4, rv4, w, b, true, 0.1, 1e-5, act);
        CHECK(values(b5) == values(b4));
        CHECK(rm5.to_vector() == rm4.to_vector());
        CHECK(rv5.to_vector() == rv4.to_vector());
      }
  const auto bn = build_layer({{"type", "BatchNorm3d"}, {"num_features", 8}, {"relu", true}}, "model.layers[2]");
  CHECK(bn->describe() == "BatchNorm3d 8 +ReLU");
  CHECK(bn->to_json()["type"] == "BatchNorm3d");
  CHECK((*bn)(random_tensor({2, 8, 2, 3, 3}, 1)).shape() == Shape{2, 8, 2, 3, 3});
  CHECK(error_of([&] {
          (*bn)(random_tensor({2, 8, 3, 3}, 1));
        }).find("expected input (N, 8, D, H, W)") != std::string::npos);
}

TEST_CASE("GroupNorm on a volume: gradients through the 2-d kernels' bits", "[volume][norm]") {
  for (MemoryFormat f : kFormats) {
    INFO(memory_format_name(f));
    auto grads = [&](bool as_volume) {
      Tensor x = random_tensor({2, 8, 3, 4, 5}, 21);
      Tensor w = random_tensor({8}, 22), b = random_tensor({8}, 23);
      for (Tensor* p : {&x, &w, &b}) p->set_requires_grad(true);
      const Tensor in =
          as_volume ? x.to(f)
                    : x.reshape({2, 8, 12, 5}).to(f == MemoryFormat::Contiguous ? f : MemoryFormat::ChannelsLast);
      const Tensor y = group_norm(in, 2, w, b, 1e-5, norm::NormActivation::ReLU);
      autograd::backward(y, random_tensor(y.shape(), 24).to(y.memory_format()));
      return std::vector<std::vector<float>>{x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
    };
    CHECK(grads(true) == grads(false));
  }
}

TEST_CASE("max_pool3d and cat_channels on CUDA give the CPU's bits, the norms its values", "[volume][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const PoolCase& c : kPools)
    for (DType t : kDtypes)
      for (MemoryFormat f : kFormats) {
        INFO(shape_str(c.x) << " " << dtype_name(t) << " " << memory_format_name(f));
        const Out cpu = pool_run(c, Device::cpu(), t, f), gpu = pool_run(c, Device::cuda(), t, f);
        CHECK(gpu.y == cpu.y);
        CHECK(gpu.dx == cpu.dx);
      }
  for (MemoryFormat f : kFormats)
    for (DType t : kDtypes) {
      INFO(memory_format_name(f) << " " << dtype_name(t));
      const Tensor a = random_tensor({2, 3, 2, 3, 4}, 1).to(t, f), b = random_tensor({2, 5, 2, 3, 4}, 2).to(t, f);
      CHECK(values(cat_channels(a.to(Device::cuda()), b.to(Device::cuda()))) == values(cat_channels(a, b)));
      const Volume v = volume(t, f, 31);
      const Tensor w = random_tensor({8}, 12), b8 = random_tensor({8}, 13);
      const double tol = t == DType::Float32 ? 1e-5 : (t == DType::BFloat16 ? 1e-2 : 2e-3);
      require_close(values(group_norm(v.x5.to(Device::cuda()), 4, w.to(Device::cuda()), b8.to(Device::cuda()))),
                    values(group_norm(v.x5, 4, w, b8)), tol, tol, "group_norm");
      Tensor rm = Tensor::zeros({8}, DType::Float32, Device::cuda()), rv = Tensor::full({8}, 1.f, Device::cuda());
      Tensor rmc = Tensor::zeros({8}), rvc = Tensor::full({8}, 1.f);
      require_close(
          values(batch_norm(v.x5.to(Device::cuda()), rm, rv, w.to(Device::cuda()), b8.to(Device::cuda()), true)),
          values(batch_norm(v.x5, rmc, rvc, w, b8, true)), tol, tol, "batch_norm");
    }
}
