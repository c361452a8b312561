// The op harness on CUDA: every example of every registered layer type runs on the GPU against the
// CPU, forward, backward (input and parameter gradients), running statistics and an eval-mode
// forward, in float32, bfloat16 and float16, contiguous and channels_last, with a tolerance per
// dtype (op_harness.h); and its forward and backward captured as a CUDA graph replay the eager
// bits. Skipped, visibly, without a GPU; scripts/gpu/op_harness.sh runs it on one.
#include "core/autograd.h"
#include "core/cuda_graph.h"
#include "core/settings.h"
#include "layers/regularization/dropout.h"
#include "op_harness.h"
#include "test_util.h"

using namespace minidl;
using namespace minidl::test;

namespace {

// Full float32 convolutions (TF32 would differ from the CPU by ~1e-3), deterministic algorithms,
// and a fixed dropout seed and step; all restored at scope exit.
struct HarnessSettings {
  ComputeSettings saved = compute_settings();
  uint64_t seed = dropout_seed();
  int64_t step = dropout_step();
  HarnessSettings() {
    ComputeSettings exact = saved;
    exact.allow_tf32 = false;
    exact.deterministic = true;
    set_compute_settings(exact);
    set_dropout_seed(5);
    set_dropout_step(3, Device::cuda());
  }
  ~HarnessSettings() {
    set_compute_settings(saved);
    set_dropout_seed(seed);
    set_dropout_step(step, Device::cuda());
  }
};

}  // namespace

TEST_CASE("op harness: every layer on CUDA matches the CPU in every dtype and layout, forward and backward",
          "[cuda][op_harness]") {
  MINIDL_REQUIRE_CUDA();
  const HarnessSettings settings;
  for (const OpExample& ex : op_examples()) {
    for (const OpMode& mode : op_modes(ex.example.input)) {
      INFO(ex.name << " in " << mode_name(mode));
      auto cpu = build_example(ex.example, 500), gpu = build_example(ex.example, 500);
      gpu->to(Device::cuda());
      const Tensor x0 = example_input(ex.example, 501);
      const OpRun want = run_op(*cpu, x0, Device::cpu(), mode, 502, mode.dtype);
      const OpRun got = run_op(*gpu, x0, Device::cuda(), mode, 502, mode.dtype);
      REQUIRE(got.y_shape == want.y_shape);
      REQUIRE(got.y_dtype == want.y_dtype);
      REQUIRE(got.y_format == want.y_format);
      REQUIRE(got.tensors.size() == want.tensors.size());
      for (size_t i = 0; i < got.tensors.size(); ++i) {
        REQUIRE(got.tensors[i].first == want.tensors[i].first);
        require_near(got.tensors[i].second, want.tensors[i].second, mode_tolerance(mode.dtype), got.tensors[i].first);
      }
    }
  }
}

TEST_CASE("op harness: every layer's forward and backward captured as a CUDA graph replays the eager bits",
          "[cuda][graph][op_harness]") {
  MINIDL_REQUIRE_CUDA();
  const HarnessSettings settings;
  const Device gpu = Device::cuda();
  for (const OpExample& ex : op_examples()) {
    for (const OpMode& mode : op_modes(ex.example.input)) {
      INFO(ex.name << " in " << mode_name(mode));
      auto layer = build_example(ex.example, 600);
      layer->to(gpu);
      const Tensor x0 = example_input(ex.example, 601, gpu);
      const bool ids = ex.example.ids_below > 0;
      // Eager first: it also sets up cuDNN's and cuBLAS's plans outside the capture.
      const OpRun eager = run_op(*layer, x0, gpu, mode, 602, mode.dtype);
      const Tensor dy = random_like_mode(eager.y_shape, 602, mode.dtype, eager.y_dtype, eager.y_format, gpu);
      // The gradients exist before the capture, so the captured backward adds into fixed storage,
      // zeroed before each replay.
      Tensor x = x0.clone();
      std::vector<Tensor> grads;
      if (!ids) {
        x.set_requires_grad(true);
        grads.push_back(Tensor::zeros(x.shape(), DType::Float32, gpu));
        x.set_grad(grads[0]);
      }
      for (auto& [name, p] : layer->named_parameters()) {
        grads.push_back(Tensor::zeros(p.shape(), p.dtype(), gpu));
        p.set_grad(grads.back());
      }
      Tensor y;
      CudaGraph graph;
      const std::string why = graph.capture([&] {
        y = (*layer)(to_mode(x, mode));
        autograd::backward(y, dy);
      });
      INFO("capture: " << why);
      REQUIRE(why.empty());
      for (int replay = 0; replay < 2; ++replay) {
        for (Tensor& g : grads) g.zero_();
        graph.replay();
        REQUIRE(y.to_vector() == eager.tensors[0].second);
        if (!ids) REQUIRE(x.grad().to_vector() == eager.tensors[1].second);
        size_t i = 2;
        for (auto& [name, p] : layer->named_parameters()) {
          INFO("grad." << name);
          REQUIRE(eager.tensors[i].first == "grad." + name);
          REQUIRE(p.grad().to_vector() == eager.tensors[i++].second);
        }
      }
    }
  }
}
