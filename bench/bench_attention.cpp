#include "bench/bench_attention.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <type_traits>

#include "bench/timing.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/tensor.h"
#include "layers/regularization/dropout.h"
#include "layers/transformer/attention.h"
#include "layers/transformer/attention_kernels.h"

namespace minidl {

namespace {

#ifdef MINIDL_WITH_CUDA
// The GPU's own time: a stall before each span (bench/timing.h).
double time_cuda_ms(const std::function<void()>& fn, int repeat) { return bench_timing::time_cuda_ms(fn, repeat, 2.0); }
#endif

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::BFloat16;
  if (s == "fp16") return DType::Float16;
  if (s == "fp32") return DType::Float32;
  fail(str("bench attention: --dtype must be bf16, fp16 or fp32, got '", s, "'"));
}

}  // namespace

int bench_attention(const BenchAttentionOptions& options) {
  const int64_t batch = options.batch, tokens = options.tokens, width = options.width, heads = options.heads;
  const std::string& dtype_arg = options.dtype;
  const std::string& csv_path = options.csv;
  const double dropout_p = options.dropout;
  const int repeat = options.repeat;
  MINIDL_CHECK(batch >= 1 && tokens >= 1 && heads >= 1 && width >= heads && width % heads == 0,
               "bench attention: need batch, tokens >= 1 and a width that is a multiple of heads, got batch ", batch,
               " tokens ", tokens, " width ", width, " heads ", heads);
  MINIDL_CHECK(repeat >= 1, "bench attention: --repeat must be >= 1, got ", repeat);
  MINIDL_CHECK(dropout_p >= 0 && dropout_p <= 1, "bench attention: --dropout must be in [0, 1], got ", dropout_p);
  const DType t = parse_dtype(dtype_arg);
#ifdef MINIDL_WITH_CUDA
  MINIDL_CHECK(cuda_available(), "bench attention: needs a CUDA GPU");
  const Device d = Device::cuda();
  const kernels::AttentionShape s{batch, tokens, heads, width / heads, options.causal};
  // Non-trivial values: a spread of scores, so the softmax is not uniform.
  std::vector<float> values(static_cast<size_t>(batch * tokens * 3 * width));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.f - 1.f;
  const Tensor qkv = Tensor::from_vector(values, {batch, tokens, 3 * width}).to(t).to(d);
  const Tensor dout = Tensor::full({batch, tokens, width}, 0.01f, d).to(t);
  Tensor probs = Tensor::empty({batch, heads, tokens, tokens}, t, d), dropped = Tensor::empty_like(probs);
  Tensor out = Tensor::empty({batch, tokens, width}, t, d), dqkv = Tensor::empty_like(qkv);
  set_dropout_step(0, d);
  const DropoutDraw draw = dropout_draw(static_cast<float>(dropout_p), 1, 1);
  const DropoutDraw* dp = dropout_p > 0 ? &draw : nullptr;
  const int64_t* step = default_dropout_state()->step_on(d);
  double gemm_fwd = 0, gemm_bwd = 0, fused_fwd = 0, fused_bwd = 0, flash_fwd = 0, flash_bwd = 0;
  bool fused = false, flash = false;
  Tensor lse = Tensor::empty({batch, heads, tokens}, DType::Float32, d);
  dispatch_dtype(t, "bench attention", [&](auto tag) {
    using T = decltype(tag);
    gemm_fwd = time_cuda_ms(
        [&] {
          kernels::attention_forward_cuda(s, dp, step, qkv.data<T>(), probs.data<T>(), dropped.data<T>(),
                                          out.data<T>());
        },
        repeat);
    gemm_bwd = time_cuda_ms(
        [&] {
          kernels::attention_backward_cuda(s, dp, step, qkv.data<T>(), probs.data<T>(), dropped.data<T>(),
                                           dout.data<T>(), dqkv.data<T>());
        },
        repeat);
    fused = kernels::attention_fused_cuda_fits(s, qkv.data<T>());
    if constexpr (!std::is_same_v<T, float>) {
      if (fused) {
        fused_fwd = time_cuda_ms(
            [&] { kernels::attention_fused_forward_cuda(s, dp, step, qkv.data<T>(), out.data<T>()); }, repeat);
        fused_bwd = time_cuda_ms(
            [&] { kernels::attention_fused_backward_cuda(s, dp, step, qkv.data<T>(), dout.data<T>(), dqkv.data<T>()); },
            repeat);
      }
      flash = !fused && dropout_p == 0 && kernels::attention_flash_cuda_fits(s, qkv.data<T>());
      if (flash) {
        flash_fwd = time_cuda_ms(
            [&] { kernels::attention_flash_forward_cuda(s, qkv.data<T>(), out.data<T>(), lse.data<float>()); }, repeat);
        flash_bwd = time_cuda_ms(
            [&] {
              kernels::attention_flash_backward_cuda(s, qkv.data<T>(), out.data<T>(), dout.data<T>(), lse.data<float>(),
                                                     dqkv.data<T>());
            },
            repeat);
      }
    }
  });
  // What the op runs: the fused kernels where they fit, else the flash kernels, else the GEMMs.
  const double fwd = fused ? fused_fwd : flash ? flash_fwd : gemm_fwd;
  const double bwd = fused ? fused_bwd : flash ? flash_bwd : gemm_bwd;
  // The op as a model runs it: a float32 leaf (only they take gradients) cast to the type inside
  // each timed call (a backward frees the graph it ran through), and dqkv cast back to float32.
  Tensor leaf = qkv.to(DType::Float32);
  leaf.set_requires_grad(true);
  const double op = time_cuda_ms(
      [&] {
        Tensor y = self_attention(leaf.to(t), heads, static_cast<float>(dropout_p), 1, options.causal);
        autograd::backward(y, dout);
        leaf.set_grad(Tensor());
      },
      repeat);
  // The products' FLOPs: two forward (Q K^T, P V), four backward; half of them causal (the
  // convention of FlashAttention's benchmarks).
  const double gflop = 4.0 * batch * heads * tokens * tokens * (width / heads) / 1e9 * (options.causal ? 0.5 : 1.0);
  std::printf("bench attention: batch %lld, %lld tokens, width %lld, %lld heads, %s, dropout %.2f%s; median of %d "
              "spans of 20 calls\n",
              static_cast<long long>(batch), static_cast<long long>(tokens), static_cast<long long>(width),
              static_cast<long long>(heads), dtype_name(t), dropout_p, options.causal ? ", causal" : "", repeat);
  std::printf("%-38s %9s %9s\n", "", "ms", "TFLOP/s");
  auto row = [&](const char* what, double ms, double flop_factor) {
    std::printf("%-38s %9.4f %9.1f\n", what, ms, flop_factor * gflop / ms);
  };
  row("GEMM path forward", gemm_fwd, 1);
  row("GEMM path backward", gemm_bwd, 2);
  row("GEMM path forward + backward", gemm_fwd + gemm_bwd, 3);
  if (fused) {
    row("fused forward", fused_fwd, 1);
    row("fused backward", fused_bwd, 2);
    row("fused forward + backward", fused_fwd + fused_bwd, 3);
  } else {
    std::printf("fused kernels: not for this shape and type (half, <= 64 tokens, head size 16..64)\n");
  }
  if (flash) {
    row("flash forward", flash_fwd, 1);
    row("flash backward", flash_bwd, 2);
    row("flash forward + backward", flash_fwd + flash_bwd, 3);
  } else if (!fused) {
    std::printf("flash kernels: not for this shape and type (half, no dropout, head size 16..64)\n");
  }
  row("op forward + backward (autograd)", op, 3);
  if (!csv_path.empty()) {
    std::ofstream csv(csv_path);
    MINIDL_CHECK(csv.good(), "bench attention: cannot write ", csv_path);
    csv << "impl,part,ms\nminidl,forward," << fwd << "\nminidl,backward," << bwd << "\nminidl,forward+backward,"
        << fwd + bwd << "\nminidl,op forward+backward," << op << "\nminidl_gemm,forward+backward,"
        << gemm_fwd + gemm_bwd << "\n";
    if (flash) csv << "minidl_flash,forward+backward," << flash_fwd + flash_bwd << "\n";
  }
  return 0;
#else
  (void)t;
  fail("bench attention: this minidl was built without CUDA");
#endif
}

}  // namespace minidl
