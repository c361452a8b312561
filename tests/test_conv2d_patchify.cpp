// The patch path of channels-last half convolutions (layers/conv/conv2d_patchify_cuda.cu: stride =
// kernel, no padding, as a ViT's patch embedding) against the CPU op: output, input, weight and
// bias gradients on ragged shapes (rows and columns past the last whole patch get a zero
// gradient), with and without bias, the same bits on a second run.
#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "layers/conv/conv2d.h"
#include "layers/conv/conv2d_patchify.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// |got - want| <= tol * max |want| everywhere: bf16 rounding of outputs of any magnitude.
void require_near(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  double scale = 1e-30;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  test::require_close(got, std::vector<double>(want.begin(), want.end()), 0.0, tol * scale, what);
}

}  // namespace

TEST_CASE("conv2d patch path: which problems it serves", "[conv2d]") {
  const DType bf = DType::BFloat16;
  CHECK(kernels::conv2d_patchify_applies({512, 3, 32, 32, 384, 4, 4, 4, 4, 0, 0}, bf));
  CHECK(kernels::conv2d_patchify_applies({2, 8, 9, 7, 5, 2, 3, 2, 3, 0, 0}, DType::Float16));
  CHECK_FALSE(kernels::conv2d_patchify_applies({512, 3, 32, 32, 384, 4, 4, 4, 4, 0, 0}, DType::Float32));
  CHECK_FALSE(kernels::conv2d_patchify_applies({2, 3, 8, 8, 5, 4, 4, 2, 2, 0, 0}, bf));  // overlapping
  CHECK_FALSE(kernels::conv2d_patchify_applies({2, 3, 8, 8, 5, 4, 4, 4, 4, 1, 1}, bf));  // padded
}

TEST_CASE("conv2d patch path on CUDA matches the CPU op, gradients included", "[conv2d][cuda]") {
  MINIDL_REQUIRE_CUDA();
  struct Problem {
    Shape x;
    int64_t o, kh, kw;
  };
  // A ViT's patch embedding (smaller batch), ragged sizes that leave rows and columns unread, and a
  // non-square kernel.
  const std::vector<Problem> problems = {{{4, 3, 32, 32}, 48, 4, 4}, {{3, 5, 10, 9}, 7, 4, 4}, {{2, 8, 9, 7}, 6, 2, 3}};
  for (const Problem& p : problems)
    for (bool with_bias : {false, true}) {
      auto run = [&](Device d) {
        // float32 leaves of half values (only float32 takes gradients), cast inside the graph.
        auto leaf = [&](const Shape& shape, uint64_t seed) {
          Tensor t = test::random_tensor(shape, seed, -1.f, 1.f, d).to(DType::BFloat16).to(DType::Float32);
          t.set_requires_grad(true);
          return t;
        };
        Tensor x = leaf(p.x, 11), w = leaf({p.o, p.x[1], p.kh, p.kw}, 12), b = with_bias ? leaf({p.o}, 13) : Tensor();
        const Tensor xh = x.to(DType::BFloat16).to(MemoryFormat::ChannelsLast);
        const Tensor y = conv2d(xh, w.to(DType::BFloat16), with_bias ? b.to(DType::BFloat16) : b, Size2d(p.kh, p.kw),
                                Size2d(0));
        autograd::backward(y, test::random_tensor(y.shape(), 14, -1.f, 1.f, d).to(DType::BFloat16));
        std::vector<std::vector<float>> out{y.to(DType::Float32).to_vector(), x.grad().to_vector(), w.grad().to_vector()};
        if (with_bias) out.push_back(b.grad().to_vector());
        return out;
      };
      const auto cpu = run(Device::cpu()), gpu = run(Device::cuda()), again = run(Device::cuda());
      const std::string what = str(shape_str(p.x), " k", p.kh, "x", p.kw, with_bias ? " bias" : "");
      const char* names[] = {"y", "dx", "dw", "db"};
      for (size_t i = 0; i < cpu.size(); ++i) {
        require_near(gpu[i], cpu[i], 2e-2, str(names[i], " ", what));
        CHECK(again[i] == gpu[i]);  // the same bits
      }
      // dx is exactly zero where no patch reads (here the CPU gives exact zeros too).
      for (size_t i = 0; i < cpu[1].size(); ++i)
        if (cpu[1][i] == 0.f) REQUIRE(gpu[1][i] == 0.f);
    }
#ifdef MINIDL_WITH_CUDA  // the algorithm report exists only in CUDA builds
  const Conv2dShape vit{512, 3, 32, 32, 384, 4, 4, 4, 4, 0, 0};
  CHECK(kernels::conv2d_nhwc_cuda_algorithms(vit, DType::BFloat16).find("fwd patchify gemm") == 0);
#endif
}
