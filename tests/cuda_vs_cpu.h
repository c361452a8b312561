// A layer on CUDA against the same layer on the CPU in float32, in every dtype and layout: the
// inputs are rounded to the dtype first, so both sides see the same values; y, dx and every
// parameter gradient must agree within the dtype's rounding: per element one ulp of the half types
// (a few float32 ulps in float32, where the summation orders differ), plus that much of the
// tensor's largest value, since a half result computed from another rounded half value (a
// sigmoid's backward reads its stored output) carries that value's rounding. Convolutions run in
// full float32 (TF32 would differ from the CPU by ~1e-3).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/settings.h"
#include "core/tensor.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "test_util.h"

namespace minidl::test {

// rtol for results rounded to `t` (float32: the sums' order differs between the devices).
inline double dtype_rtol(DType t) { return t == DType::BFloat16 ? 1.6e-2 : t == DType::Float16 ? 2e-3 : 2e-5; }

// Runs the layer of `spec` on x of `shape` (values in [lo, hi)) on both devices, forward and
// backward, in float32, bfloat16 and float16, contiguous and (4-d inputs) channels_last.
inline void require_cuda_matches_cpu(const nlohmann::json& spec, const Shape& shape, uint64_t seed, float lo = -2.f,
                                     float hi = 2.f) {
  struct FullFloat32 {
    ComputeSettings saved = compute_settings();
    FullFloat32() {
      ComputeSettings exact = saved;
      exact.allow_tf32 = false;
      set_compute_settings(exact);
    }
    ~FullFloat32() { set_compute_settings(saved); }
  } full_float32;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      if (f == MemoryFormat::ChannelsLast && shape.size() != 4) continue;
      INFO(spec.dump() << " " << dtype_name(t) << " " << memory_format_name(f));
      std::shared_ptr<Module> cpu = build_layer(spec, "layer"), gpu = build_layer(spec, "layer");
      gpu->load_state_dict(cpu->state_dict());
      gpu->to(Device::cuda());
      const Tensor x0 = random_tensor(shape, seed, lo, hi).to(t).to(DType::Float32);
      // Gradients are float32 (only float32 tensors require grad): the GPU side's cast to the dtype
      // and layout is part of its graph, as a network's input cast is.
      Tensor xc = x0.clone(), xg = x0.to(Device::cuda());
      xc.set_requires_grad(true);
      xg.set_requires_grad(true);
      const Tensor yc = (*cpu)(xc), yg = (*gpu)(xg.to(t).to(f));
      REQUIRE(yg.dtype() == t);
      const Tensor dy = random_tensor(yc.shape(), seed + 1).to(t).to(DType::Float32);
      autograd::backward(yc, dy);
      autograd::backward(yg, dy.to(t).to(yg.memory_format()).to(Device::cuda()));
      const double rtol = dtype_rtol(t);
      const auto check = [&](const Tensor& got, const Tensor& want, const std::string& what) {
        const std::vector<float> w = want.to_vector();
        double scale = 0;
        for (float v : w) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        require_close(got.to(DType::Float32).contiguous().to_vector(), w, rtol, std::max(rtol * scale, 1e-6), what);
      };
      check(yg, yc, "y");
      check(xg.grad(), xc.grad(), "dx");
      const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
      for (size_t i = 0; i < pc.size(); ++i) check(pg[i].second.grad(), pc[i].second.grad(), "d" + pc[i].first);
    }
  }
}

}  // namespace minidl::test
