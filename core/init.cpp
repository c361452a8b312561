#include "core/init.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace minidl {

namespace {
uint64_t g_seed = 0;
uint64_t g_ordinal = 0;
}  // namespace

void set_init_seed(uint64_t seed) {
  g_seed = seed;
  g_ordinal = 0;
}

void init_uniform_(Tensor& t, float bound) {
  MINIDL_CHECK(t.dtype() == DType::Float32, "init_uniform_: expects float32, got ", t.str());
  const uint64_t ordinal = g_ordinal++;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const float u = uniform01(philox(g_seed, kStreamInit, (ordinal << 32) | i).v[0]);
    v[i] = (2.f * u - 1.f) * bound;
  }
  t.copy_(Tensor::from_vector(v, t.shape()));
}

void init_fan_in_uniform_(Tensor& weight, Tensor* bias, int64_t fan_in) {
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  init_uniform_(weight, bound);
  if (bias) init_uniform_(*bias, bound);
}

}  // namespace minidl
