// The op harness on the CPU: every example of every registered layer type (the registry's table,
// layers/layer_descriptor.h) runs forward and backward in float32, bfloat16 and float16, contiguous
// and channels_last; its float32 gradients (input and parameters) match finite differences, and
// its half results the float32 layer's on the same values. tests/test_op_harness_cuda.cpp holds
// the CUDA side of each example against this one. A new layer type is covered by its examples.
#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "layers/regularization/dropout.h"
#include "op_harness.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::test;

namespace {

constexpr double kEps = 1e-3;

// sum(y * w) in float64 for the layer's training-mode forward on x.
double objective(Module& layer, const Tensor& x, const std::vector<float>& w) {
  autograd::NoGradGuard no_grad;
  const std::vector<float> y = layer(x).to_vector();
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * w[i];
  return s;
}

struct Difference {
  double central, kink;  // the central difference; how far the two one-sided ones disagree
};

// The central difference of f at v (one element, changed in place and restored).
Difference differentiate(float& v, const std::function<double()>& f) {
  const float v0 = v, hi = v0 + static_cast<float>(kEps), lo = v0 - static_cast<float>(kEps);
  const double at = f();
  v = hi;
  const double up = f();
  v = lo;
  const double down = f();
  v = v0;
  // The steps as float32 took them (v0 + kEps is rounded).
  const double h_up = static_cast<double>(hi) - v0, h_down = static_cast<double>(v0) - lo;
  return {(up - down) / (h_up + h_down), std::fabs((up - at) / h_up - (at - down) / h_down)};
}

// Autograd's gradient against the finite differences of every element. Where the one-sided
// differences disagree beyond the tolerance, the function has a kink within kEps of the point (a
// ReLU at 0, a max-pool tie): such elements are left out, and at most one in ten (or one) may be.
// The central differences of the float32 forward come within a tenth of the tolerance elsewhere,
// so a gradient off by a misplaced element, a wrong sign or a missing term fails.
void require_gradient(const std::vector<float>& analytic, const std::vector<Difference>& numeric,
                      const std::string& what) {
  INFO(what);
  REQUIRE(analytic.size() == numeric.size());
  const Tolerance tol{1e-2, 3e-3};
  double scale = 0;
  for (const Difference& d : numeric) scale = std::max(scale, std::fabs(d.central));
  std::vector<float> got, want;
  size_t kinks = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double bound = tol.rtol * std::fabs(numeric[i].central) + tol.of_max * scale;
    if (numeric[i].kink > 2 * bound) {
      ++kinks;
      continue;
    }
    got.push_back(analytic[i]);
    want.push_back(static_cast<float>(numeric[i].central));
  }
  INFO(kinks << " of " << numeric.size() << " elements left out at kinks");
  REQUIRE(kinks <= std::max<size_t>(1, numeric.size() / 10));
  require_near(got, want, tol, "autograd against finite differences");
}

}  // namespace

TEST_CASE("op harness: every layer's CPU gradients match finite differences, input and parameters", "[op_harness]") {
  const uint64_t seed = dropout_seed();
  const int64_t step = dropout_step();
  set_dropout_seed(5);
  set_dropout_step(3);
  for (const OpExample& ex : op_examples()) {
    INFO(ex.name);
    auto layer = build_example(ex.example, 300);
    const Tensor x0 = example_input(ex.example, 301);
    const OpMode fp32{DType::Float32, MemoryFormat::Contiguous};
    const OpRun run = run_op(*layer, x0, Device::cpu(), fp32, 302, DType::Float32);
    // run_op's output gradient: the weights of the objective.
    const std::vector<float> w =
        random_like_mode(run.y_shape, 302, DType::Float32, DType::Float32, MemoryFormat::Contiguous, Device::cpu())
            .to_vector();
    if (ex.example.ids_below == 0) {  // token ids have no gradient
      std::vector<float> xv = x0.to_vector();
      std::vector<Difference> dx;
      for (float& v : xv)
        dx.push_back(differentiate(v, [&] { return objective(*layer, Tensor::from_vector(xv, x0.shape()), w); }));
      require_gradient(run.tensors[1].second, dx, "dx");
    }
    for (auto& [name, p] : layer->named_parameters()) {
      std::vector<Difference> dp;
      float* values = p.data<float>();
      for (int64_t i = 0; i < p.numel(); ++i)
        dp.push_back(differentiate(values[i], [&] { return objective(*layer, x0, w); }));
      const std::string grad_name = "grad." + name;  // a lambda cannot capture a structured binding in C++17
      const auto it = std::find_if(run.tensors.begin(), run.tensors.end(),
                                   [&](const auto& t) { return t.first == grad_name; });
      REQUIRE(it != run.tensors.end());
      require_gradient(it->second, dp, grad_name);
    }
  }
  set_dropout_seed(seed);
  set_dropout_step(step);
}

TEST_CASE("op harness: every layer runs bfloat16 and float16, contiguous and channels_last, on the CPU as in float32",
          "[op_harness][half]") {
  // The half run and the float32 run see the same values (input, parameters and output gradient
  // rounded to the half type); they differ by the half type's roundings inside the layer, which a
  // post-norm encoder layer's LayerNorm gradients grow to about 5 units in the last place of the
  // gradient's scale (the largest seen over every example; most layers stay under one).
  for (const OpExample& ex : op_examples()) {
    for (const OpMode& mode : op_modes(ex.example.input)) {
      if (mode.dtype == DType::Float32) continue;
      INFO(ex.name << " in " << mode_name(mode));
      auto rounded = [&] {
        auto layer = build_example(ex.example, 400);
        for (auto& [name, t] : layer->state_dict())
          if (t.dtype() == DType::Float32) t.copy_(t.to(mode.dtype).to(DType::Float32));
        return layer;
      };
      const Tensor x0 = ex.example.ids_below > 0 ? example_input(ex.example, 401)
                                                 : random_tensor(ex.example.input, 401).to(mode.dtype).to(DType::Float32);
      auto a = rounded(), b = rounded();
      const OpRun half = run_op(*a, x0, Device::cpu(), mode, 402, mode.dtype);
      const OpRun full = run_op(*b, x0, Device::cpu(), {DType::Float32, mode.format}, 402, mode.dtype);
      if (half.y_shape.size() == ex.example.input.size()) REQUIRE(half.y_format == mode.format);
      REQUIRE(half.tensors.size() == full.tensors.size());
      for (size_t i = 0; i < half.tensors.size(); ++i) {
        REQUIRE(half.tensors[i].first == full.tensors[i].first);
        require_near(half.tensors[i].second, full.tensors[i].second, mode_tolerance(mode.dtype), half.tensors[i].first);
      }
    }
  }
}
