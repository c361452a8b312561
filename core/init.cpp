#include "core/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "core/run_context.h"

namespace minidl {

void set_init_seed(uint64_t seed) {
  RunContext& run = current_run_context();
  run.init_seed = seed;
  run.init_ordinal = 0;
}

void init_uniform_(Tensor& t, float bound) {
  MINIDL_CHECK(t.dtype() == DType::Float32, "init_uniform_: expects float32, got ", t.str());
  RunContext& run = current_run_context();
  const uint64_t seed = run.init_seed, ordinal = run.init_ordinal++;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const float u = uniform01(philox(seed, kStreamInit, (ordinal << 32) | i).v[0]);
    v[i] = (2.f * u - 1.f) * bound;
  }
  t.copy_(Tensor::from_vector(v, t.shape()));
}

namespace {

// N(0, std^2) redrawn outside [-bound, bound], by Box-Muller on the host.
void init_normal_within(Tensor& t, float std, double bound, const char* what) {
  MINIDL_CHECK(t.dtype() == DType::Float32, what, ": expects float32, got ", t.str());
  RunContext& run = current_run_context();
  const uint64_t seed = run.init_seed, ordinal = run.init_ordinal++;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    // Attempt a draws from stream kStreamInit + (a << 32): a redraw never reuses another element's
    // numbers.
    for (uint64_t attempt = 0;; ++attempt) {
      const Philox4 r = philox(seed, kStreamInit | (attempt << 32), (ordinal << 32) | i);
      const double u1 = (static_cast<double>(r.v[0] >> 8) + 1.0) / 16777216.0;  // (0, 1]
      const double u2 = uniform01(r.v[1]);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2) * std;
      if (z >= -bound && z <= bound) {
        v[i] = static_cast<float>(z);
        break;
      }
    }
  }
  t.copy_(Tensor::from_vector(v, t.shape()));
}

}  // namespace

void init_trunc_normal_(Tensor& t, float std) { init_normal_within(t, std, 2.0, "init_trunc_normal_"); }

void init_normal_(Tensor& t, float std) { init_normal_within(t, std, INFINITY, "init_normal_"); }

void init_fan_in_uniform_(Tensor& weight, Tensor* bias, int64_t fan_in) {
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  init_uniform_(weight, bound);
  if (bias) init_uniform_(*bias, bound);
}

void init_dirac_(Tensor& w) {
  MINIDL_CHECK(w.dtype() == DType::Float32 && w.dim() == 4, "init_dirac_: expects a float32 conv weight (O, C, kh, kw), got ",
               w.str());
  const int64_t o = w.size(0), c = w.size(1), kh = w.size(2), kw = w.size(3);
  std::vector<float> v = w.to_vector();
  for (int64_t f = 0; f < std::min(o, c); ++f) {
    float* filter = v.data() + f * c * kh * kw;
    std::fill(filter, filter + c * kh * kw, 0.f);
    filter[(f * kh + kh / 2) * kw + kw / 2] = 1.f;
  }
  w.copy_(Tensor::from_vector(v, w.shape()));
}

void init_unit_std_(Tensor& t) {
  MINIDL_CHECK(t.dtype() == DType::Float32 && t.numel() >= 2, "init_unit_std_: expects a float32 tensor of at least 2 "
               "elements, got ", t.str());
  std::vector<float> v = t.to_vector();
  double sum = 0, sq = 0;
  for (float x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  for (float x : v) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / static_cast<double>(v.size() - 1));
  MINIDL_CHECK(sd > 0, "init_unit_std_: ", t.str(), " is constant (standard deviation 0)");
  for (float& x : v) x = static_cast<float>(x / sd);
  t.copy_(Tensor::from_vector(v, t.shape()));
}

}  // namespace minidl
